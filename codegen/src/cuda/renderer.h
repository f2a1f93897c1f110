// The CUDA renderer (internal to the CUDA backend): one kernel's CUDA C++, its loop space spread
// over the GPU by a strategy (kiln/codegen/cuda.h) and its kernel code (expr.h) written
// instruction by instruction as C++ declarations. render.cpp has the plan, the signature, the
// expressions and the elementwise and tiled strategies; render_rows.cpp the row strategies
// (block-, warp- and thread-per-row, split, column-split).
//
// The structure follows the CPU backend's loop nest (cpu/emit.cpp): per row, one pass over the
// row per reduction depth, then the stores; values that do not vary along the row are computed
// once per row, row values inside each pass. What differs is who walks a row: a block, a warp or
// one thread, and the partial results of a pass meet in a warp or block reduction.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../expr.h"
#include "spelling.h"
#include "kiln/codegen/cuda.h"

namespace kiln::codegen::cuda_render {

using namespace cuda_spelling;

// Rows at most this long go to one warp each; longer ones to a block.
inline constexpr int64_t kWarpRowMax = 2048;
// A full reduction of at least this many elements is split across blocks.
inline constexpr int64_t kSplitMin = int64_t(1) << 16;
// Rows read with a stride (a column of the operand) go one per thread when there are this many.
inline constexpr int64_t kThreadRowMin = 2048;
// Such rows are cut into chunks (ColumnSplit) when the rows are fewer than this (below half
// the threads an H100 holds: thread-per-row would leave it short of loads in flight), at least
// this long (four chunks of kColumnChunkMin), and the reduction has at least kSplitMin elements.
inline constexpr int64_t kColumnSplitRowsMax = int64_t(1) << 17;
inline constexpr int64_t kColumnSplitMinLen = 4 * kColumnChunkMin;
// Rows contiguous in memory go to RowSplit rather than a block each when they are fewer than
// this (a block each would leave an H100's 132 SMs short of blocks) and at least two chunks of
// kRowChunkMin long, in one pass with only per-row stores (and early stores) after it.
inline constexpr int64_t kRowSplitRowsMax = 256;
inline constexpr int64_t kRowSplitMinLen = 2 * kRowChunkMin;
// Tiled: the side of a tile, the fewest elements along both of its loops, and the most
// operands staged through shared memory (32 x 33 elements each: at most 8.4 KiB). With
// KILN_CUDA_TILE=64 the side is 64 where both loops are that long and the staged tiles (64 x 65
// elements each) fit in kWideTileBytes of shared memory (two float32 operands, or one float64);
// a lane then takes two columns of each row.
inline constexpr int64_t kTile = 32;
inline constexpr int64_t kWideTile = 64;
inline constexpr int64_t kWideTileBytes = 40960;
// Tiled: rows of a tile each thread loads into registers before it uses them (tile_rows).
inline constexpr int kTileRows = 4;
inline constexpr int64_t kTileMin = 16;
inline constexpr int kMaxStaged = 4;
// WarpRow: a row's loaded values a lane keeps in registers across the passes over its row, at
// most this many 4-byte registers per lane (all cached loads together).
inline constexpr int64_t kRowCacheMax = 64;
// BlockRow: the same in shared memory, a whole row per cached load, at most this many bytes
// per block (all cached loads together; 7 such blocks fit in an H100 SM's shared memory).
inline constexpr int64_t kBlockRowCacheBytes = 32768;
// Row groups (plan_groups): the rows of an outermost loop of at most this many elements go
// to one block (BlockRow) or warp (WarpRow) together, when that leaves enough groups to fill
// an H100 alone: 132 SMs hold about 4 blocks of 256 threads each, or 32 warps, at these
// kernels' register counts.
inline constexpr int64_t kGroupMax = 4;
inline constexpr int64_t kBlockGroupsMin = 512;
inline constexpr int64_t kWarpGroupsMin = 4096;

// Renders one kernel into `out` (its strategy, launch needs and body).
class Renderer {
 public:
  Renderer(const passes::Kernel& k, const KernelCode& code, CudaKernel& out, bool generic)
      : k_(k), code_(code), out_(out), generic_(generic) {}
  void render();
  void emulation_entries();

 private:
  const passes::Kernel& k_;
  const KernelCode& code_;
  CudaKernel& out_;
  const bool generic_;  // sizes and non-unit strides are parameters (CudaKernel::generic)
  std::ostringstream o_;
  int indent_ = 0;
  std::string I_, S_;                 // index type (unsigned), offset type (signed)
  std::vector<std::string> coord_;    // per loop: the variable holding its index, or "" (0)
  std::vector<std::string> memo_;     // per instruction: its variable where the code is now
  std::set<int> scans_declared_;      // row strategies: the scans declared in the row's scope
  std::vector<bool> linear_;          // per operand: its offset is the flat index (Elementwise)
  std::vector<bool> run_;             // per load: contiguous along the innermost loop, not linear
  bool per_run_ = false;              // the vector path takes the coordinates of each vector
  int vec_ = 0;                       // > 0 inside the vector path: loads and stores go via lanes
  int across_ = -1, along_ = -1;      // Tiled: the staged operands' contiguous loop, the stores'
  std::vector<bool> staged_;          // Tiled: per load, read through a shared-memory tile
  int64_t tile_ = kTile;              // Tiled: the side of a tile (32 or 64: one or two columns per lane)
  bool from_tiles_ = false;           // inside the Tiled compute loop: staged loads read the tiles
  int row_vec_ = 1;                   // BlockRow/Split/WarpRow passes: elements per vector
  std::string row_nv_;                // BlockRow/WarpRow without a cache: the row's whole vectors ("" in Split)
  // Vector passes: the operands the body reads or writes by lanes, with the row group's copy
  // (-1: the same vector in every copy, or no groups)
  std::set<std::pair<size_t, int>> vec_used_;
  int64_t cache_iters_ = 0;           // WarpRow with a row cache: row elements per lane (0: none)
  int64_t cache_row_ = 0;             // BlockRow with a row cache: elements per cached row (0: none)
  std::vector<int> cached_;           // per instruction: 0, or cached: 1 to fill, 3 filling (this pass), 2 filled
  std::string live_;                  // WarpRow's unrolled passes: whether the element is in the row ("" outside them)
  int tmp_ = 0;
  int64_t rows_ = 1, row_len_ = 1;
  // Row groups: the rows of loop 0 a block or warp takes together (1: none), per instruction
  // whether it varies along loop 0 (computed once per copy, the others once for all), the
  // copy being rendered (-1: none) and each copy's variables of such instructions.
  int64_t group_ = 1;
  std::vector<bool> along0_;
  int copy_ = -1;
  std::vector<std::vector<std::string>> copy_memo_;
  int rank() const { return int(k_.loops.size()); }
  bool two_step() const {
    return out_.strategy == CudaStrategy::Split || out_.strategy == CudaStrategy::ColumnSplit ||
           out_.strategy == CudaStrategy::RowSplit;
  }
  int rf() const { return std::min(k_.reduce_from, rank()); }
  const passes::Access& operand(size_t j) const;
  size_t nops() const { return k_.loads.size() + k_.stores.size(); }
  static bool moves(const passes::Access& a, size_t d) { return d < a.sizes.size() && a.sizes[d] != 1 && a.strides[d] != 0; }
  std::ostream& line();
  std::string fresh(const char* stem) { return stem + std::to_string(tmp_++); }

  // ---- the plan: strategy, index width, vector width ----

  void plan();
  bool splits_columns() const;
  bool splits_rows() const;
  bool unit_stride_along_row() const;
  bool plan_tiles();
  int64_t tiles(int d) const { return (k_.loops[size_t(d)] + tile_ - 1) / tile_; }

  // ---- sizes in the body: constants, or in a size-generic kernel variables ----

  // Loop d's extent (of more than one element).
  std::string extent(int d) const { return generic_ ? "L" + std::to_string(d) : std::to_string(k_.loops[size_t(d)]) + "u"; }
  std::string extents(int lo, int hi) const;
  // The rows and their length in the row strategies' loops.
  std::string nrows() const { return generic_ ? "nrows" : std::to_string(rows_) + "u"; }
  std::string row_len() const { return generic_ ? "row_len" : std::to_string(row_len_) + "u"; }
  bool row_strategy() const { return out_.strategy != CudaStrategy::Elementwise && out_.strategy != CudaStrategy::Tiled; }
  std::string stride(size_t j, size_t d) const;
  static bool stride_is_param(const passes::Access& a, size_t d) { return moves(a, d) && std::abs(a.strides[d]) != 1; }
  // Whether the kernel takes its extents and strides (a size-generic kernel whose body needs
  // more than the element count).
  bool sizes_are_params() const { return generic_ && !(out_.strategy == CudaStrategy::Elementwise && !needs_coordinates()); }
  // Whether the coordinates come from the flat index by multiply-and-shift (kiln_udiv, with a
  // `div<d>` parameter per extent) rather than by division: size-generic 32-bit kernels.
  bool fast_division() const { return generic_ && out_.index32; }
  bool divides(int d) const;
  void plan_vector();

  // ---- the signature ----

  std::string aligned(size_t j, const std::string& offset, int v) const;
  bool shares_buffer(size_t j) const;
  std::string parameters();
  void declare_sizes();
  void open_kernel(const std::string& name, const std::string& params);
  void close_kernel();

  // ---- indices ----

  void decompose(const std::string& var, int lo, int hi);
  void decompose_dims(const std::string& var, const std::vector<int>& dims);
  std::string element(size_t j, const std::string& flat = "");
  std::string offset(size_t j);

  // ---- conversions ----

  static std::string convert(const std::string& v, DType from, DType to);
  static std::string widen(const std::string& raw, DType t);
  static std::string narrow(const std::string& v, DType t);
  std::string load(int j, DType to, const std::string& flat);
  void store_all(const std::vector<size_t>& js, const std::string& flat);
  void store_all(const std::string& flat);
  void store(size_t j, const std::string& flat);

  // ---- instructions ----

  std::string fn(const char* base, DType t) { return std::string(base) + (is_f32(t) ? "f" : ""); }
  std::string value(int id, const std::string& flat = "");
  void forget_rows();

  // ---- loops ----

  void open_counted_loop(const std::string& type, const std::string& var, const std::string& from,
                         const std::string& end, const std::string& step);
  void close_counted_loop();

  // The type of a vector of `v` elements of dtype t as stored.
  static std::string vec_type(DType t, int v) { return std::string("kiln_vec<") + storage_ctype(t) + ", " + std::to_string(v) + ">"; }

  // ---- Elementwise ----

  bool needs_coordinates() const;
  void elementwise();
  void vector_loop();

  // ---- Tiled ----

  void tiled();
  // A tile's columns per lane, the lane's column (tx, or lx = tx + 32 * c over the lane's
  // columns c) and the register slot of a row and column of a thread's step.
  int64_t tile_cols() const { return tile_ / 32; }
  std::string lane() const { return tile_cols() > 1 ? "lx" : "tx"; }
  std::string slot() const { return tile_cols() > 1 ? "kk * " + std::to_string(tile_cols()) + "u + c" : "kk"; }
  void tile_step(const std::string& T, const std::string& nt, const std::string& na, bool staging,
                 const std::function<void()>& body);
  void tile_rows(const std::string& T, const std::string& nt, const std::string& na, bool staging,
                 const std::vector<size_t>& regs, const char* reg, const std::function<std::string(size_t)>& stage,
                 bool ahead = false);

  // ---- rows ----

  std::string row_var_ = "e";  // the position in the row (RowIndex)

  // Who walks a row: the group's first thread, its size, and how the group reduces.
  std::string t0_, nt_;
  std::string group_reduce(const Instr& in, const std::string& acc);
  void accumulate(const Instr& in, const std::string& acc, const std::string& x);
  template <class Body>
  void row_loop(const std::string& from, const std::string& step, Body&& body, std::string end = "");
  int along_row(size_t j) const;
  void plan_row_vector(const RowPlan& p);
  std::string row_start(size_t j);
  template <class Body>
  void vector_lanes(const std::string& base, Body&& body);
  template <class Body>
  void warp_vector_pass(Body&& body);
  template <class Body>
  void row_pass(const std::string& from, const std::string& step, Body&& body, const std::string& end = "");
  std::string row_aligned();
  bool rows_apart(int v) const;
  std::string kernel_aligned(bool whole_rows);
  std::string cache_slot(size_t id, bool fill);
  std::set<size_t> cache_read_, cache_filled_;  // row_pass's vector lanes: the cached loads they read, or fill
  void plan_row_cache(const RowPlan& p);
  void declare_scans(const std::vector<int>& need);
  void rows();
  void row_loop_body(const RowPlan& p, const std::string& loop);
  void plan_groups();
  void use_copy(int g);
  std::string copy_suffix(bool along0) const { return copy_ >= 0 && along0 ? "_" + std::to_string(copy_) : ""; }
  static std::string copy_coord(int g) { return g == 0 ? "" : std::to_string(g) + "u"; }  // ("": loop 0 at 0)
  template <class Body>
  void each_copy(Body&& body);

  // ---- Split: a full reduction over blocks, then one block combining their slots ----

  void partial_pass(const RowPlan& p, const std::string& from, const std::string& step, const std::string& end = "");
  void split_partial();
  void split_finish();

  // ---- ColumnSplit: chunks of rows, one thread each, then a thread per row combining them ----

  std::string column_slot(const std::string& part, size_t q) const;
  void column_partial();
  void column_finish();

  // ---- RowSplit: chunks of rows, one block each, then ColumnSplit's finishing kernel ----

  void row_partial();
};

}  // namespace kiln::codegen::cuda_render
