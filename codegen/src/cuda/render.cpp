// CUDA C++ for one kernel: its loop space spread over the GPU by a strategy (kiln/codegen/cuda.h)
// and its kernel code (expr.h) written instruction by instruction as C++ declarations.
//
// The structure follows the CPU backend's loop nest (cpu/emit.cpp): per row, one pass over the
// row per reduction depth, then the stores; values that do not vary along the row are computed
// once per row, row values inside each pass. What differs is who walks a row: a block, a warp or
// one thread, and the partial results of a pass meet in a warp or block reduction.
#include <algorithm>
#include <bit>
#include <functional>
#include <set>
#include <sstream>

#include "../epilogue.h"
#include "../expr.h"
#include "spelling.h"
#include "kiln/codegen/cuda.h"
#include "kiln/runtime/error.h"

namespace kiln::codegen {

std::string_view cuda_strategy_name(CudaStrategy s) {
  switch (s) {
    case CudaStrategy::Elementwise: return "elementwise";
    case CudaStrategy::BlockRow: return "block-per-row";
    case CudaStrategy::WarpRow: return "warp-per-row";
    case CudaStrategy::ThreadRow: return "thread-per-row";
    case CudaStrategy::Split: return "split";
    case CudaStrategy::Tiled: return "tiled";
    case CudaStrategy::ColumnSplit: return "column-split";
  }
  return "?";
}

std::string CudaKernel::source() const { return cuda_prelude() + body; }

namespace {

using namespace cuda_spelling;

// Rows at most this long go to one warp each; longer ones to a block.
constexpr int64_t kWarpRowMax = 2048;
// A full reduction of at least this many elements is split across blocks.
constexpr int64_t kSplitMin = int64_t(1) << 16;
// Rows read with a stride (a column of the operand) go one per thread when there are this many.
constexpr int64_t kThreadRowMin = 2048;
// Such rows are cut into chunks (ColumnSplit) when the rows are fewer than this (below half
// the threads an H100 holds: thread-per-row would leave it short of loads in flight), at least
// this long (four chunks of kColumnChunkMin), and the reduction has at least kSplitMin elements.
constexpr int64_t kColumnSplitRowsMax = int64_t(1) << 17;
constexpr int64_t kColumnSplitMinLen = 4 * kColumnChunkMin;
// Tiled: the side of a tile, the fewest elements along both of its loops, and the most
// operands staged through shared memory (32 x 33 elements each: at most 8.4 KiB).
constexpr int64_t kTile = 32;
// Tiled: rows of a tile each thread loads into registers before it uses them (tile_rows).
constexpr int kTileRows = 4;
constexpr int64_t kTileMin = 16;
constexpr int kMaxStaged = 4;
// WarpRow: a row's loaded values a lane keeps in registers across the passes over its row, at
// most this many 4-byte registers per lane (all cached loads together).
constexpr int64_t kRowCacheMax = 64;
// BlockRow: the same in shared memory, a whole row per cached load, at most this many bytes
// per block (all cached loads together; 7 such blocks fit in an H100 SM's shared memory).
constexpr int64_t kBlockRowCacheBytes = 32768;

class Renderer {
 public:
  Renderer(const passes::Kernel& k, const KernelCode& code, CudaKernel& out, bool generic)
      : k_(k), code_(code), out_(out), generic_(generic) {}

  void render() {
    plan();
    std::string params = parameters();
    if (out_.strategy == CudaStrategy::Elementwise) {
      open_kernel(out_.name, params);
      elementwise();
      close_kernel();
    } else if (out_.strategy == CudaStrategy::Tiled) {
      open_kernel(out_.name, params);
      tiled();
      close_kernel();
    } else if (two_step()) {
      const bool split = out_.strategy == CudaStrategy::Split;
      open_kernel(out_.name, params + ",\n    unsigned long long* __restrict__ parts, long long nparts");
      split ? split_partial() : column_partial();
      close_kernel();
      o_ << "\n";
      open_kernel(out_.finish, params + ",\n    const unsigned long long* __restrict__ parts, long long nparts");
      split ? split_finish() : column_finish();
      close_kernel();
    } else {
      open_kernel(out_.name, params);
      rows();
      close_kernel();
    }
    emulation_entries();
    out_.body = o_.str();
  }

  // Host entry points for kiln's emulation of CUDA (tests): NAME_emu(params, grid, block) runs
  // the kernel as a grid of host threads, params as cuLaunchKernel takes them.
  void emulation_entries() {
    o_ << "#if defined(KILN_CUDA_EMULATION)\n";
    const size_t n = out_.param_types.size();
    // (a two-step kernel's steps also take the slots, then their count)
    auto entry = [&](const std::string& name, const char* slots) {
      o_ << "extern \"C\" void " << name << "_emu(void** p, unsigned grid, unsigned block) {\n"
         << "  kiln_emu::launch(grid, block, [&] { " << name << "(";
      for (size_t j = 0; j < n; ++j) o_ << "*(" << out_.param_types[j] << "*)p[" << j << "], ";
      o_ << "*(unsigned long long**)p[" << n << "]";
      if (slots) o_ << ", *(" << slots << "**)p[" << n + 1 << "], *(long long*)p[" << n + 2 << "]";
      o_ << "); });\n}\n";
      // (how many 8-byte parameters: the emulator copies them when a launch is captured)
      o_ << "extern \"C\" const int " << name << "_emu_params = " << n + 1 + (slots ? 2 : 0) << ";\n";
    };
    entry(out_.name, two_step() ? "unsigned long long" : nullptr);
    if (two_step()) entry(out_.finish, "const unsigned long long");
    o_ << "#endif\n";
  }

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
  bool from_tiles_ = false;           // inside the Tiled compute loop: staged loads read the tiles
  int row_vec_ = 1;                   // BlockRow/Split: elements per vector load in reduction passes
  int64_t cache_iters_ = 0;           // WarpRow with a row cache: row elements per lane (0: none)
  int64_t cache_row_ = 0;             // BlockRow with a row cache: elements per cached row (0: none)
  std::vector<int> cached_;           // per instruction: 0, or cached: 1 to fill, 3 filling (this pass), 2 filled
  int tmp_ = 0;
  int64_t rows_ = 1, row_len_ = 1;

  int rank() const { return int(k_.loops.size()); }
  bool two_step() const { return out_.strategy == CudaStrategy::Split || out_.strategy == CudaStrategy::ColumnSplit; }
  int rf() const { return std::min(k_.reduce_from, rank()); }
  const passes::Access& operand(size_t j) const {
    return j < k_.loads.size() ? k_.loads[j] : k_.stores[j - k_.loads.size()];
  }
  size_t nops() const { return k_.loads.size() + k_.stores.size(); }
  static bool moves(const passes::Access& a, size_t d) { return d < a.sizes.size() && a.sizes[d] != 1 && a.strides[d] != 0; }

  std::ostream& line() {
    for (int i = 0; i < indent_; ++i) o_ << "  ";
    return o_;
  }
  std::string fresh(const char* stem) { return stem + std::to_string(tmp_++); }

  // ---- the plan: strategy, index width, vector width ----

  void plan() {
    for (int d = 0; d < rank(); ++d) (d < rf() ? rows_ : row_len_) *= k_.loops[size_t(d)];
    int64_t total = rows_ * row_len_;
    out_.index32 = fits_index32(k_) && total < (int64_t(1) << 31);
    I_ = out_.index32 ? "unsigned" : "unsigned long long";
    S_ = out_.index32 ? "int" : "long long";
    linear_.assign(nops(), false);
    bool reduces = false;  // (a reduction of a 0-d tensor has no reduced loop, but is one)
    for (const Instr& in : code_.code) reduces |= in.op == EOp::Reduce;
    if (rf() == rank() && !reduces) {
      if (plan_tiles()) return;
      out_.strategy = CudaStrategy::Elementwise;
      out_.items = total;
      plan_vector();
      out_.size_param = generic_ || !needs_coordinates();
      return;
    }
    bool scan = false;
    for (const Instr& in : code_.code) scan |= in.op == EOp::Scan;
    if (scan) {
      out_.strategy = CudaStrategy::ThreadRow;
    } else if (rf() == 0 && row_len_ >= kSplitMin && splits_reduction(k_, code_)) {
      out_.strategy = CudaStrategy::Split;
      out_.finish = out_.name + "_finish";
      for (const Instr& in : code_.code) out_.slots += in.op == EOp::Reduce;
    } else if (!unit_stride_along_row() && splits_columns()) {
      out_.strategy = CudaStrategy::ColumnSplit;
      out_.finish = out_.name + "_finish";
      for (const Instr& in : code_.code) out_.slots += in.op == EOp::Reduce;
    } else if (!unit_stride_along_row() && rows_ >= kThreadRowMin) {
      out_.strategy = CudaStrategy::ThreadRow;
    } else {
      out_.strategy = row_len_ <= kWarpRowMax ? CudaStrategy::WarpRow : CudaStrategy::BlockRow;
    }
    out_.items = out_.strategy == CudaStrategy::Split ? row_len_ : rows_;
    out_.row_len = row_len_;
  }

  // ColumnSplit: few rows, long ones, one pass over each and only per-row stores after it (the
  // chunks' partial results meet in the finishing kernel, which stores).
  bool splits_columns() const {
    if (rf() == 0 || rows_ >= kColumnSplitRowsMax || row_len_ < kColumnSplitMinLen || rows_ * row_len_ < kSplitMin ||
        code_.depth != 1)
      return false;
    return row_plan(k_, code_).in_row.empty();
  }

  // Whether some load walks the innermost reduction loop contiguously (threads of a warp or block
  // striding over the row then read adjacent elements).
  bool unit_stride_along_row() const {
    const size_t last = size_t(rank() - 1);
    for (const passes::Access& a : k_.loads)
      if (a.buffer >= 0 && moves(a, last) && std::abs(a.strides[last]) == 1) return true;
    return false;
  }

  // Tiled, when the stores are contiguous along the innermost loop (`along_`) and some load is
  // contiguous along another (`across_`) while strided along the stores' loop: a warp reading
  // it at the stores' coordinates would touch 32 rows. Such loads (at most kMaxStaged, all
  // contiguous along the same loop) are staged.
  bool plan_tiles() {
    int along = -1;
    for (int d = rank() - 1; d >= 0 && along < 0; --d)
      if (k_.loops[size_t(d)] > 1) along = d;
    if (along < 0) return false;
    for (const passes::Access& a : k_.stores)
      if (a.buffer < 0 || !moves(a, size_t(along)) || a.strides[size_t(along)] != 1) return false;
    int across = -1, staged = 0;
    std::vector<bool> stage(k_.loads.size(), false);
    for (size_t j = 0; j < k_.loads.size() && staged < kMaxStaged; ++j) {
      const passes::Access& a = k_.loads[j];
      if (a.buffer < 0 || !moves(a, size_t(along)) || a.strides[size_t(along)] == 1) continue;
      for (int d = 0; d < rank(); ++d) {
        if (d == along || !moves(a, size_t(d)) || a.strides[size_t(d)] != 1) continue;
        if (across < 0) across = d;
        if (d == across) stage[j] = true, ++staged;
        break;
      }
    }
    if (staged == 0 || k_.loops[size_t(across)] < kTileMin || k_.loops[size_t(along)] < kTileMin) return false;
    across_ = across, along_ = along, staged_ = std::move(stage);
    out_.strategy = CudaStrategy::Tiled;
    out_.items = tiles(across_) * tiles(along_);
    for (int d = 0; d < rank(); ++d)
      if (d != across_ && d != along_) out_.items *= k_.loops[size_t(d)];
    return true;
  }
  int64_t tiles(int d) const { return (k_.loops[size_t(d)] + kTile - 1) / kTile; }

  // ---- sizes in the body: constants, or in a size-generic kernel variables ----

  // Loop d's extent (of more than one element).
  std::string extent(int d) const { return generic_ ? "L" + std::to_string(d) : std::to_string(k_.loops[size_t(d)]) + "u"; }
  // The product of the extents of loops [lo, hi) (generic_: an expression of the L variables).
  std::string extents(int lo, int hi) const {
    std::string e;
    for (int d = lo; d < hi; ++d)
      if (k_.loops[size_t(d)] > 1) e += (e.empty() ? "" : " * ") + extent(d);
    return e.empty() ? "1u" : e;
  }
  // The rows and their length in the row strategies' loops.
  std::string nrows() const { return generic_ ? "nrows" : std::to_string(rows_) + "u"; }
  std::string row_len() const { return generic_ ? "row_len" : std::to_string(row_len_) + "u"; }
  bool row_strategy() const { return out_.strategy != CudaStrategy::Elementwise && out_.strategy != CudaStrategy::Tiled; }
  // Operand j's stride along loop d as a factor (a unit stride is never a parameter, so that
  // contiguous reads stay recognisably contiguous).
  std::string stride(size_t j, size_t d) const {
    const int64_t s = operand(j).strides[d];
    if (generic_ && std::abs(s) != 1) return "S" + std::to_string(j) + "_" + std::to_string(d);
    return std::to_string(s) + (out_.index32 ? "" : "LL");
  }
  static bool stride_is_param(const passes::Access& a, size_t d) { return moves(a, d) && std::abs(a.strides[d]) != 1; }
  // Whether the kernel takes its extents and strides (a size-generic kernel whose body needs
  // more than the element count).
  bool sizes_are_params() const { return generic_ && !(out_.strategy == CudaStrategy::Elementwise && !needs_coordinates()); }
  // Whether the coordinates come from the flat index by multiply-and-shift (kiln_udiv, with a
  // `div<d>` parameter per extent) rather than by division: size-generic 32-bit kernels.
  bool fast_division() const { return generic_ && out_.index32; }
  // Whether the index math divides by loop d's extent (decompose_dims): every loop of more than
  // one element in a decomposed range but the range's outermost, which takes what is left.
  bool divides(int d) const {
    if (k_.loops[size_t(d)] <= 1) return false;
    auto outermost = [&](int lo, int hi, std::initializer_list<int> skip) {
      for (int e = lo; e < hi; ++e)
        if (k_.loops[size_t(e)] > 1 && std::find(skip.begin(), skip.end(), e) == skip.end()) return e;
      return -1;
    };
    switch (out_.strategy) {
      case CudaStrategy::Elementwise: return needs_coordinates() && d != outermost(0, rank(), {});
      case CudaStrategy::Tiled: return d != across_ && d != along_ && d != outermost(0, rank(), {across_, along_});
      default: return d < rf() ? d != outermost(0, rf(), {}) : d != outermost(rf(), rank(), {});
    }
  }

  // Elementwise: operands whose offset is the flat index; vector accesses when every buffer
  // operand is either that or read at one element, VEC elements per 16 bytes (at most 8).
  // In a specialised kernel a load may also be a broadcast one (a bias over the rows of a
  // matrix, a column over its columns): contiguous along the innermost loop (a run: vector
  // loads at the vector's coordinates) or constant along it (one element per vector). Each
  // vector then lies within one run of the innermost loop, whose length VEC divides, and a
  // run's other strides are multiples of VEC too, so that its vector loads stay aligned.
  void plan_vector() {
    run_.assign(nops(), false);
    int last = -1;  // the innermost loop of more than one element
    for (int d = rank() - 1; d >= 0 && last < 0; --d)
      if (k_.loops[size_t(d)] > 1) last = d;
    bool all = true;
    size_t widest = 0;
    for (size_t j = 0; j < nops(); ++j) {
      const passes::Access& a = operand(j);
      if (a.buffer < 0) continue;
      bool lin = true, invariant = true;
      int64_t expect = 1;
      for (int d = rank() - 1; d >= 0; --d) {
        if (k_.loops[size_t(d)] == 1) continue;
        if (moves(a, size_t(d))) invariant = false;
        if (!moves(a, size_t(d)) || a.strides[size_t(d)] != expect) lin = false;
        expect *= k_.loops[size_t(d)];
      }
      linear_[j] = lin && !invariant;
      const bool per_run = !linear_[j] && !invariant && !generic_ && j < k_.loads.size() && last >= 0;
      if (linear_[j]) {
        widest = std::max<size_t>(widest, size_t(itemsize(a.dtype)));
      } else if (per_run && moves(a, size_t(last)) && a.strides[size_t(last)] == 1) {
        run_[j] = per_run_ = true;
        widest = std::max<size_t>(widest, size_t(itemsize(a.dtype)));
      } else if (per_run && !moves(a, size_t(last))) {
        per_run_ = true;
      } else if (!invariant) {
        all = false;
      }
      // a store written at one element from every index: leave it to the scalar loop
      if (j >= k_.loads.size() && invariant && out_.items > 1) all = false;
    }
    if (all && widest > 0) out_.vector = int(std::min<size_t>(8, 16 / widest));
    auto whole_runs = [&](int64_t v) {
      if (!per_run_) return true;
      if (k_.loops[size_t(last)] % v) return false;
      for (size_t j = 0; j < nops(); ++j)
        for (int d = 0; run_[j] && d < rank(); ++d)
          if (d != last && moves(operand(j), size_t(d)) && operand(j).strides[size_t(d)] % v) return false;
      return true;
    };
    while (out_.vector > 1 && !whole_runs(out_.vector)) out_.vector /= 2;
    if (out_.vector < 2 || out_.items < 2 * out_.vector) out_.vector = 1;
  }

  // ---- the signature ----

  // Whether operand j may overlap another operand's memory (then it is not __restrict__).
  bool shares_buffer(size_t j) const {
    const passes::Access& a = operand(j);
    if (a.buffer < 0) return false;
    for (size_t i = 0; i < nops(); ++i)
      if (i != j && operand(i).buffer == a.buffer) return true;
    return false;
  }

  std::string parameters() {
    std::ostringstream p;
    for (size_t j = 0; j < nops(); ++j) {
      const passes::Access& a = operand(j);
      bool load = j < k_.loads.size();
      p << (j ? ",\n    " : "");
      if (a.buffer < 0) {
        out_.param_types.push_back(is_floating(a.dtype) ? "double" : "long long");
        p << out_.param_types.back() << " a" << j;
        continue;
      }
      out_.param_types.push_back(std::string(load ? "const " : "") + storage_ctype(a.dtype) + "*");
      p << out_.param_types.back() << " " << (shares_buffer(j) ? "" : "__restrict__ ") << (load ? "p" : "s") << j;
    }
    auto size = [&](const std::string& type, const std::string& name, int64_t value) {
      out_.param_types.push_back(type);
      out_.size_args.push_back(value);
      p << (out_.param_types.size() > 1 ? ",\n    " : "") << type << " " << name;
    };
    if (out_.size_param) size("unsigned long long", "n_items", out_.items);
    if (sizes_are_params()) {
      for (int d = 0; d < rank(); ++d)
        if (k_.loops[size_t(d)] > 1) size("long long", "size" + std::to_string(d), k_.loops[size_t(d)]);
      if (fast_division())
        for (int d = 0; d < rank(); ++d)
          if (divides(d))
            size("unsigned long long", "div" + std::to_string(d), int64_t(cuda_divisor_magic(k_.loops[size_t(d)])));
      for (size_t j = 0; j < nops(); ++j)
        for (size_t d = 0; operand(j).buffer >= 0 && d < size_t(rank()); ++d)
          if (stride_is_param(operand(j), d))
            size("long long", "stride" + std::to_string(j) + "_" + std::to_string(d), operand(j).strides[d]);
    }
    p << (out_.param_types.empty() ? "" : ",\n    ") << "unsigned long long* __restrict__ status";
    return p.str();
  }

  // A size-generic kernel's sizes and strides as variables of the index types; the row
  // strategies' row count and length.
  void declare_sizes() {
    if (!sizes_are_params()) return;
    for (int d = 0; d < rank(); ++d)
      if (k_.loops[size_t(d)] > 1) line() << "const " << I_ << " L" << d << " = (" << I_ << ")size" << d << ";\n";
    for (size_t j = 0; j < nops(); ++j)
      for (size_t d = 0; operand(j).buffer >= 0 && d < size_t(rank()); ++d)
        if (stride_is_param(operand(j), d))
          line() << "const " << S_ << " " << stride(j, d) << " = (" << S_ << ")stride" << j << "_" << d << ";\n";
    if (row_strategy())
      line() << "const " << I_ << " nrows = " << extents(0, rf()) << ", row_len = " << extents(rf(), rank()) << ";\n";
  }

  void open_kernel(const std::string& name, const std::string& params) {
    o_ << "extern \"C\" __global__ void __launch_bounds__(" << kCudaBlock << ") " << name << "(\n    " << params << ") {\n";
    indent_ = 1;
    declare_sizes();
    if (!code_.checks.empty()) line() << "unsigned long long kflags = 0;  // checks that failed (status bits)\n";
  }
  void close_kernel() {
    if (!code_.checks.empty()) line() << "if (kflags) atomicOr(status, kflags);\n";
    o_ << "}\n";
    indent_ = 0;
  }

  // ---- indices ----

  // Declares the coordinates of loops [lo, hi) from the flat index `var` (row-major).
  void decompose(const std::string& var, int lo, int hi) {
    std::vector<int> dims;
    for (int d = lo; d < hi; ++d)
      if (k_.loops[size_t(d)] > 1) dims.push_back(d);
    for (int d = lo; d < hi; ++d) coord_[size_t(d)] = "";
    decompose_dims(var, dims);
  }
  // The same over the loops `dims` (in order, each of more than one element).
  void decompose_dims(const std::string& var, const std::vector<int>& dims) {
    if (dims.empty()) return;
    if (dims.size() == 1) {
      coord_[size_t(dims[0])] = var;
      return;
    }
    std::string r = fresh("r");
    line() << I_ << " " << r << " = " << var << ";\n";
    for (size_t n = dims.size(); n-- > 0;) {
      int d = dims[n];
      std::string c = "c" + std::to_string(d);
      if (n == 0) {
        line() << "const " << I_ << " " << c << " = " << r << ";\n";
      } else if (fast_division()) {
        const std::string q = "q" + std::to_string(d);
        line() << "const " << I_ << " " << q << " = kiln_udiv(" << r << ", div" << d << "), " << c << " = " << r << " - " << q
               << " * " << extent(d) << "; " << r << " = " << q << ";\n";
      } else {
        line() << "const " << I_ << " " << c << " = " << r << " % " << extent(d) << "; " << r << " /= " << extent(d)
               << ";\n";
      }
      coord_[size_t(d)] = c;
    }
  }

  // Operand j's element at the current coordinates.
  std::string element(size_t j, const std::string& flat = "") {
    std::string base = std::string(j < k_.loads.size() ? "p" : "s") + std::to_string(j);
    if (!flat.empty() && linear_[j]) return base + "[" + flat + "]";
    return base + "[" + offset(j) + "]";
  }
  // Its offset from the coordinates.
  std::string offset(size_t j) {
    const passes::Access& a = operand(j);
    std::string off;
    for (size_t d = 0; d < a.sizes.size() && d < coord_.size(); ++d) {
      if (!moves(a, d) || coord_[d].empty()) continue;
      std::string term = "(" + S_ + ")" + coord_[d];
      if (a.strides[d] != 1) term += " * " + stride(j, d);
      off += (off.empty() ? "" : " + ") + term;
    }
    return off.empty() ? "0" : off;
  }

  // ---- conversions ----

  static std::string convert(const std::string& v, DType from, DType to) {
    from = compute_dtype(from);
    to = compute_dtype(to);
    if (from == to) return v;
    if (to == DType::Bool) return "(" + v + " != 0)";
    if (is_floating(from) && !is_floating(to)) return std::string("(") + ctype(to) + ")kiln_f2ll(" + v + ")";
    return std::string("(") + ctype(to) + ")(" + v + ")";
  }

  // The stored bits of operand j as its compute type.
  static std::string widen(const std::string& raw, DType t) {
    if (t == DType::Float16) return "kiln_h2f(" + raw + ")";
    if (t == DType::BFloat16) return "kiln_bf2f(" + raw + ")";
    if (t == DType::Bool) return "(" + raw + " != 0)";
    return raw;
  }
  static std::string narrow(const std::string& v, DType t) {
    if (t == DType::Float16) return "kiln_f2h(" + v + ")";
    if (t == DType::BFloat16) return "kiln_f2bf(" + v + ")";
    if (t == DType::Bool) return "(unsigned char)(" + v + ")";
    return v;
  }

  std::string load(int j, DType to, const std::string& flat) {
    const passes::Access& a = k_.loads[size_t(j)];
    if (a.buffer < 0) return convert("a" + std::to_string(j), is_floating(a.dtype) ? DType::Float64 : DType::Int64, to);
    std::string raw = vec_ && (linear_[size_t(j)] || run_[size_t(j)]) ? "l" + std::to_string(j) + ".v[u]"
                      : from_tiles_ && staged_[size_t(j)] ? "tile" + std::to_string(j) + "[tx][k]"
                      : from_tiles_                       ? "ld" + std::to_string(j) + "[kk]"
                                                          : element(size_t(j), flat);
    return convert(widen(raw, a.dtype), compute_dtype(a.dtype), to);
  }

  // Stores operands `js` (all of them by default) of one point after computing every value
  // they store. Code is declared where it is first used, so storing one by one would put a load
  // needed only by a later store after an earlier store, and that store may write the memory
  // the load reads (an in-place update of the element the kernel also reads).
  void store_all(const std::vector<size_t>& js, const std::string& flat) {
    for (size_t j : js) value(code_.stores[j], flat);
    for (size_t j : js) store(j, flat);
  }
  void store_all(const std::string& flat) {
    std::vector<size_t> all(k_.stores.size());
    for (size_t j = 0; j < all.size(); ++j) all[j] = j;
    store_all(all, flat);
  }

  void store(size_t j, const std::string& flat) {
    const passes::Access& a = k_.stores[j];
    const size_t op = k_.loads.size() + j;
    int id = code_.stores[j];
    std::string v = narrow(convert(value(id, flat), code_.code[size_t(id)].type, a.dtype), a.dtype);
    if (vec_ && linear_[op]) line() << "w" << op << ".v[u] = " << v << ";\n";
    else line() << element(op, flat) << " = " << v << ";\n";
  }

  // ---- instructions ----

  std::string fn(const char* base, DType t) { return std::string(base) + (is_f32(t) ? "f" : ""); }

  // The variable holding instruction id, declared here if it is not in scope yet.
  std::string value(int id, const std::string& flat = "") {
    if (!memo_[size_t(id)].empty()) return memo_[size_t(id)];
    const Instr& in = code_.code[size_t(id)];
    auto a = [&](size_t i) { return value(in.args[i], flat); };
    auto at = [&](size_t i) { return code_.code[size_t(in.args[i])].type; };
    const std::string T = ctype(in.type);
    const bool fl = is_floating(in.type);
    auto call1 = [&](const char* f) { return fn(f, in.type) + "(" + a(0) + ")"; };
    auto call2 = [&](const char* f) { return fn(f, in.type) + "(" + a(0) + ", " + a(1) + ")"; };
    auto intop = [&](const char* f) { return std::string(f) + "<" + T + ">(" + a(0) + ", " + a(1) + ")"; };
    std::string e;
    switch (in.op) {
      case EOp::Load:
        if (!cached_.empty() && cached_[size_t(id)] == 2) {
          e = cache_slot(id);
          break;
        }
        e = load(in.index, in.type, flat);
        break;
      case EOp::Arg: e = load(in.index, in.type, flat); break;
      case EOp::Const: e = literal(in.type, in.f, in.i); break;
      case EOp::RowCount: e = generic_ && row_strategy() ? "(" + T + ")row_len" : literal(in.type, double(row_len_), row_len_); break;
      case EOp::RowIndex: e = "(long long)" + row_var_; break;
      case EOp::Neg: e = fl ? "-" + a(0) : "kiln_neg<" + T + ">(" + a(0) + ")"; break;
      case EOp::Abs:
        e = fl ? call1("fabs") : is_unsigned(in.type) ? a(0) : "(" + a(0) + " < 0 ? kiln_neg<" + T + ">(" + a(0) + ") : " + a(0) + ")";
        break;
      case EOp::Sign: e = "(" + T + ")((" + a(0) + " > 0) - (" + a(0) + " < 0))"; break;
      case EOp::Exp: e = call1("exp"); break;
      case EOp::Exp2: e = call1("exp2"); break;
      case EOp::Expm1: e = call1("expm1"); break;
      case EOp::Log: e = call1("log"); break;
      case EOp::Log2: e = call1("log2"); break;
      case EOp::Log1p: e = call1("log1p"); break;
      case EOp::Sqrt: e = call1("sqrt"); break;
      case EOp::Recip: e = literal(in.type, 1.0, 1) + " / " + a(0); break;
      case EOp::Sin: e = call1("sin"); break;
      case EOp::Cos: e = call1("cos"); break;
      case EOp::Tan: e = call1("tan"); break;
      case EOp::Asin: e = call1("asin"); break;
      case EOp::Acos: e = call1("acos"); break;
      case EOp::Atan: e = call1("atan"); break;
      case EOp::Sinh: e = call1("sinh"); break;
      case EOp::Cosh: e = call1("cosh"); break;
      case EOp::Tanh: e = call1("tanh"); break;
      case EOp::Erf: e = call1("erf"); break;
      case EOp::Floor: e = call1("floor"); break;
      case EOp::Ceil: e = call1("ceil"); break;
      case EOp::Round: e = call1("rint"); break;  // (ties to even in the default rounding mode)
      case EOp::Trunc: e = call1("trunc"); break;
      case EOp::IsNan: e = "(" + a(0) + " != " + a(0) + ")"; break;
      case EOp::IsInf:
      case EOp::IsFinite: {
        DType t = at(0);
        e = "(" + fn("fabs", t) + "(" + a(0) + (in.op == EOp::IsInf ? ") == " : ") < ") + "kiln_inf<" + ctype(t) + ">())";
        break;
      }
      case EOp::Not: e = "!" + a(0); break;
      case EOp::BitNot: e = "(" + T + ")~" + a(0); break;
      case EOp::Convert: e = convert(a(0), at(0), in.type); break;
      case EOp::RoundTo16:
        e = DType(in.index) == DType::Float16 ? "kiln_h2f(kiln_f2h(" + a(0) + "))" : "kiln_bf2f(kiln_f2bf(" + a(0) + "))";
        break;
      case EOp::SignBit: e = "kiln_signbit(" + a(0) + ")"; break;
      case EOp::Add: e = fl ? a(0) + " + " + a(1) : intop("kiln_add"); break;
      case EOp::Sub: e = fl ? a(0) + " - " + a(1) : intop("kiln_sub"); break;
      case EOp::Mul: e = fl ? a(0) + " * " + a(1) : intop("kiln_mul"); break;
      case EOp::Div:
      case EOp::Fmod:
        if (fl) {
          e = in.op == EOp::Div ? a(0) + " / " + a(1) : call2("fmod");
        } else {
          if (in.index >= 0) {
            std::string y = a(1);
            line() << "kflags |= (unsigned long long)(" << y << " == 0) << " << in.index << ";\n";
          }
          e = intop(in.op == EOp::Div ? "kiln_idiv" : "kiln_irem");
        }
        break;
      case EOp::Pow: e = call2("pow"); break;
      case EOp::Atan2: e = call2("atan2"); break;
      case EOp::Max: e = intop("kiln_max"); break;
      case EOp::Min: e = intop("kiln_min"); break;
      case EOp::Eq: e = "(" + a(0) + " == " + a(1) + ")"; break;
      case EOp::Ne: e = "(" + a(0) + " != " + a(1) + ")"; break;
      case EOp::Lt: e = "(" + a(0) + " < " + a(1) + ")"; break;
      case EOp::Le: e = "(" + a(0) + " <= " + a(1) + ")"; break;
      case EOp::Gt: e = "(" + a(0) + " > " + a(1) + ")"; break;
      case EOp::Ge: e = "(" + a(0) + " >= " + a(1) + ")"; break;
      case EOp::And: e = in.type == DType::Bool ? "(" + a(0) + " && " + a(1) + ")" : "(" + T + ")(" + a(0) + " & " + a(1) + ")"; break;
      case EOp::Or: e = in.type == DType::Bool ? "(" + a(0) + " || " + a(1) + ")" : "(" + T + ")(" + a(0) + " | " + a(1) + ")"; break;
      case EOp::Xor: e = in.type == DType::Bool ? "(" + a(0) + " != " + a(1) + ")" : "(" + T + ")(" + a(0) + " ^ " + a(1) + ")"; break;
      case EOp::Select: e = "(" + a(0) + " ? " + a(1) + " : " + a(2) + ")"; break;
      case EOp::Fma: e = fn("fma", in.type) + "(" + a(0) + ", " + a(1) + ", " + a(2) + ")"; break;
      case EOp::Reduce: throw std::logic_error("cuda render: a reduction used before its pass over the row");
      case EOp::Scan: {
        // the running sum, added in row order (ThreadRow walks the row itself)
        std::string s = "scan" + std::to_string(id), x = a(0);
        line() << s << " = " << (fl ? s + " + " + x : "kiln_add<" + T + ">(" + s + ", " + x + ")") << ";\n";
        e = s;
        break;
      }
    }
    std::string v = "v" + std::to_string(id);
    line() << "const " << T << " " << v << " = " << e << ";\n";
    if (!cached_.empty() && cached_[size_t(id)] == 1) {
      line() << cache_slot(id) << " = " << v << ";\n";
      cached_[size_t(id)] = 3;
    }
    memo_[size_t(id)] = v;
    return v;
  }

  void forget_rows() {
    for (size_t i = 0; i < memo_.size(); ++i)
      if (code_.code[i].row) memo_[i].clear();
  }

  // ---- loops ----

  // Opens `for (var = from; var < end; var += step)` with its count computed on entry, so that
  // the compiler unrolls it by four with no bounds check between the copies: a thread then has
  // four loads in flight, not one (NVRTC does not unroll the plain loop, whose count is
  // unknown and whose index may wrap). Two scopes, which close_counted_loop closes.
  void open_counted_loop(const std::string& type, const std::string& var, const std::string& from,
                         const std::string& end, const std::string& step) {
    const std::string f = "(" + from + ")", st = "(" + step + ")", n = var + "n", k = var + "k";
    line() << "{\n";
    ++indent_;
    line() << "const " << type << " " << n << " = " << f << " < " << end << " ? (" << end << " - " << f << " + " << st
           << " - 1) / " << st << " : 0;\n";
    line() << "#pragma unroll 4\n";
    line() << "for (" << type << " " << k << " = 0; " << k << " < " << n << "; ++" << k << ") {\n";
    ++indent_;
    line() << "const " << type << " " << var << " = " << f << " + " << k << " * " << st << ";\n";
  }
  void close_counted_loop() {
    --indent_;
    line() << "}\n";
    --indent_;
    line() << "}\n";
  }

  // The type of a vector of `v` elements of dtype t as stored.
  static std::string vec_type(DType t, int v) { return std::string("kiln_vec<") + storage_ctype(t) + ", " + std::to_string(v) + ">"; }

  // ---- Elementwise ----

  // Elementwise: whether some operand's offset needs the loops' coordinates (not the flat index
  // or one element): then the loop sizes are in the body.
  bool needs_coordinates() const {
    for (size_t j = 0; j < nops(); ++j)
      if (operand(j).buffer >= 0 && !linear_[j]) return true;
    return false;
  }

  void elementwise() {
    coord_.assign(size_t(rank()), "");
    if (out_.size_param) line() << "const " << I_ << " n = (" << I_ << ")n_items;\n";
    else line() << "const " << I_ << " n = " << out_.items << "u;\n";  // (a size-generic kernel takes n_items)
    line() << "const " << I_ << " g0 = (" << I_ << ")blockIdx.x * blockDim.x + threadIdx.x, gs = (" << I_
           << ")gridDim.x * blockDim.x;\n";
    line() << I_ << " i0 = 0;  // where the scalar loop starts\n";
    if (out_.vector > 1) vector_loop();
    line() << "for (" << I_ << " i = i0 + g0; i < n; i += gs) {\n";
    ++indent_;
    memo_.assign(code_.code.size(), "");
    if (needs_coordinates()) decompose("i", 0, rank());
    store_all("i");
    --indent_;
    line() << "}\n";
  }

  // Every operand contiguous (or read at one element, or per run of the innermost loop): VEC
  // elements per aligned access when all of their addresses allow it, the scalar loop for the
  // tail.
  void vector_loop() {
    const int V = out_.vector;
    std::string cond;
    for (size_t j = 0; j < nops(); ++j) {
      if (!linear_[j] && !run_[j]) continue;
      const passes::Access& a = operand(j);
      cond += std::string(cond.empty() ? "" : " && ") + "kiln_aligned(" + (j < k_.loads.size() ? "p" : "s") +
              std::to_string(j) + ", " + std::to_string(V * int(itemsize(a.dtype))) + ")";
    }
    line() << "if (" << cond << ") {\n";
    ++indent_;
    line() << "const " << I_ << " nv = n / " << V << "u;\n";
    line() << "for (" << I_ << " q = g0; q < nv; q += gs) {\n";
    ++indent_;
    line() << "const " << I_ << " base = q * " << V << "u;\n";
    // (the vector's coordinates: those of all of its elements but along the innermost loop,
    // where they start; loads constant along it read their one element there)
    if (per_run_) decompose("base", 0, rank());
    auto vt = [&](const passes::Access& a) { return vec_type(a.dtype, V); };
    for (size_t j = 0; j < k_.loads.size(); ++j)
      if (linear_[j] || run_[j])
        line() << "const " << vt(k_.loads[j]) << " l" << j << " = *reinterpret_cast<const " << vt(k_.loads[j]) << "*>(p" << j
               << " + " << (run_[j] ? offset(j) : "base") << ");\n";
    for (size_t j = k_.loads.size(); j < nops(); ++j)
      if (linear_[j]) line() << vt(operand(j)) << " w" << j << ";\n";
    line() << "#pragma unroll\n";
    line() << "for (int u = 0; u < " << V << "; ++u) {\n";
    ++indent_;
    memo_.assign(code_.code.size(), "");
    vec_ = V;
    line() << "const " << I_ << " i = base + u;\n";
    line() << "(void)i;\n";
    store_all("i");
    vec_ = 0;
    --indent_;
    line() << "}\n";
    for (size_t j = k_.loads.size(); j < nops(); ++j)
      if (linear_[j]) line() << "*reinterpret_cast<" << vt(operand(j)) << "*>(s" << j << " + base) = w" << j << ";\n";
    --indent_;
    line() << "}\n";
    line() << "i0 = nv * " << V << "u;\n";
    --indent_;
    line() << "}\n";
  }

  // ---- Tiled ----

  // Per tile (kTile x kTile elements of the loops across_ x along_, grid-stride over tiles and
  // the other loops): the block's warps copy each staged operand's tile into shared memory,
  // lanes walking across_ (the operand's contiguous loop), then compute and store, lanes
  // walking along_ (the stores' contiguous loop) and reading the staged values transposed out
  // of the tiles. A tile row is padded to kTile + 1 elements, so that the transposed reads of
  // a warp fall in 32 different banks. Every thread of a block takes the same tiles, so both
  // barriers are reached by all of them.
  void tiled() {
    coord_.assign(size_t(rank()), "");
    const std::string T = std::to_string(kTile) + "u";
    const std::string nt = extent(across_), na = extent(along_);
    std::string ntiles = std::to_string(out_.items) + "u", tiles_a = std::to_string(tiles(along_)) + "u",
                tiles_t = std::to_string(tiles(across_)) + "u";
    if (generic_) {
      line() << "const " << I_ << " tiles_a = (" << na << " + " << kTile - 1 << "u) / " << T << ", tiles_t = (" << nt << " + "
             << kTile - 1 << "u) / " << T << ";\n";
      line() << "const " << I_ << " ntiles = tiles_a * tiles_t";
      for (int d = 0; d < rank(); ++d)  // (times the loops outside the tile)
        if (d != across_ && d != along_ && k_.loops[size_t(d)] > 1) o_ << " * " << extent(d);
      o_ << ";\n";
      ntiles = "ntiles", tiles_a = "tiles_a", tiles_t = "tiles_t";
    }
    line() << "const unsigned tx = threadIdx.x & 31u, ty = threadIdx.x >> 5, ny = blockDim.x >> 5;\n";
    for (size_t j = 0; j < k_.loads.size(); ++j)
      if (staged_[j])
        line() << "__shared__ " << storage_ctype(k_.loads[j].dtype) << " tile" << j << "[" << kTile << "][" << kTile + 1
               << "];\n";
    line() << "for (" << I_ << " t = blockIdx.x; t < " << ntiles << "; t += gridDim.x) {\n";
    ++indent_;
    line() << I_ << " rt = t;\n";
    line() << "const " << I_ << " ba = rt % " << tiles_a << " * " << T << "; rt /= " << tiles_a << ";\n";
    line() << "const " << I_ << " bt = rt % " << tiles_t << " * " << T << "; rt /= " << tiles_t << ";\n";
    std::vector<int> rest;
    for (int d = 0; d < rank(); ++d)
      if (d != across_ && d != along_ && k_.loops[size_t(d)] > 1) rest.push_back(d);
    decompose_dims("rt", rest);
    coord_[size_t(across_)] = "ct", coord_[size_t(along_)] = "ca";
    // staging: lanes along the operand's contiguous loop
    std::vector<size_t> staged, direct;
    for (size_t j = 0; j < k_.loads.size(); ++j)
      if (staged_[j]) staged.push_back(j);
      else if (k_.loads[j].buffer >= 0) direct.push_back(j);
    tile_rows(T, nt, na, "tx", "k", staged, "st", [&](size_t j) { return "tile" + std::to_string(j) + "[k][tx] = st" + std::to_string(j) + "[kk];"; });
    // computing: lanes along the stores' contiguous loop, the other loads read ahead
    tile_rows(T, nt, na, "k", "tx", direct, "ld", nullptr);
    --indent_;
    line() << "}\n";
  }

  // Tiled: each warp's rows of a tile (rows k = ty + m * ny), kTileRows at a time, in two
  // unrolled loops: the first loads operands `regs` at each row into registers (`reg<j>[kk]`),
  // the second stores them into the tiles (`stage`), or, without it, computes and stores the
  // kernel's values reading those registers (and the staged operands from the tiles). So a thread
  // has kTileRows loads in flight: loading and storing row by row, ptxas kept each store after
  // its load (a warp then waits for every load). Elements outside the loops are skipped in both
  // loops; an entry not loaded keeps its 0.
  void tile_rows(const std::string& T, const std::string& nt, const std::string& na, const char* ct, const char* ca,
                 const std::vector<size_t>& regs, const char* reg, const std::function<std::string(size_t)>& stage) {
    const std::string R = std::to_string(kTileRows) + "u";
    line() << "for (unsigned k0 = ty; k0 < " << T << "; k0 += " << R << " * ny) {\n";
    ++indent_;
    for (size_t j : regs) line() << storage_ctype(k_.loads[j].dtype) << " " << reg << j << "[" << kTileRows << "] = {};\n";
    for (bool first : {true, false}) {
      if (first && regs.empty()) continue;
      line() << "#pragma unroll\n";
      line() << "for (unsigned kk = 0; kk < " << R << "; ++kk) {\n";
      ++indent_;
      line() << "const unsigned k = k0 + kk * ny;\n";
      line() << "const " << I_ << " ct = bt + " << ct << ", ca = ba + " << ca << ";\n";
      line() << "if (k < " << T << " && ct < " << nt << " && ca < " << na << ") {\n";
      ++indent_;
      if (first) {
        for (size_t j : regs) line() << reg << j << "[kk] = " << element(j) << ";\n";
      } else if (stage) {
        for (size_t j : regs) line() << stage(j) << "\n";
      } else {
        memo_.assign(code_.code.size(), "");
        from_tiles_ = true;
        store_all("");
        from_tiles_ = false;
      }
      --indent_;
      line() << "}\n";
      --indent_;
      line() << "}\n";
    }
    --indent_;
    line() << "}\n";
    line() << "__syncthreads();\n";
  }

  // ---- rows ----

  std::string row_var_ = "e";  // the position in the row (RowIndex)

  // Who walks a row: the group's first thread, its size, and how the group reduces.
  std::string t0_, nt_;
  std::string group_reduce(const Instr& in, const std::string& acc) {
    std::string T = ctype(in.type);
    std::string f = "[](" + T + " x, " + T + " y) { return " + combine(in, "x", "y") + "; }";
    if (out_.strategy == CudaStrategy::WarpRow) return "kiln_warp_reduce(" + acc + ", " + f + ")";
    if (out_.strategy == CudaStrategy::ThreadRow) return acc;
    return "kiln_block_reduce(" + acc + ", " + f + ")";
  }

  // A pass over the row: `body` at each element this thread visits (coordinates declared).
  // With a row cache the pass is unrolled (`it` a constant in each copy, so that the cache's
  // elements are registers); the cached loads filled by this pass are read from it afterwards.
  template <class Body>
  void row_loop(const std::string& from, const std::string& step, Body&& body, std::string end = "") {
    if (end.empty()) end = row_len();
    if (cache_iters_) {
      line() << "#pragma unroll\n";
      line() << "for (unsigned it = 0; it < " << cache_iters_ << "u; ++it) {\n";
      ++indent_;
      line() << "const " << I_ << " e = " << from << " + it * " << step << ";\n";
      line() << "if (e < " << row_len() << ") {\n";
      ++indent_;
    } else {
      open_counted_loop(I_, "e", from, end, step);
    }
    decompose("e", rf(), rank());
    body();
    forget_rows();
    close_counted_loop();  // (the cache's for and if close the same way)
    for (int& c : cached_) c = c == 3 ? 2 : c;  // (filled by this pass: read from the cache after it)
  }

  // BlockRow and Split (a block per row, or the whole tensor over blocks), specialised, without a
  // row cache: a reduction pass reads VEC elements per 16-byte load when every load that varies
  // along the row is contiguous over the reduced loops (in their order). Each thread then has
  // four vectors in flight in the unrolled pass, not four elements. (PyTorch's reductions read
  // their input the same way.) linear_ marks those loads.
  void plan_row_vector() {
    row_vec_ = 1;
    run_.assign(nops(), false);
    if (generic_ || cache_iters_ || cache_row_ ||
        (out_.strategy != CudaStrategy::BlockRow && out_.strategy != CudaStrategy::Split))
      return;
    size_t widest = 0;
    for (size_t j = 0; j < k_.loads.size(); ++j) {
      const passes::Access& a = k_.loads[j];
      if (a.buffer < 0) continue;
      bool along = false;
      for (int d = rf(); d < rank(); ++d) along |= moves(a, size_t(d));
      if (!along) continue;  // (the same element along the row: read once per row)
      int64_t expect = 1;
      for (int d = rank() - 1; d >= rf(); --d) {
        if (k_.loops[size_t(d)] == 1) continue;
        if (!moves(a, size_t(d)) || a.strides[size_t(d)] != expect) return;
        expect *= k_.loops[size_t(d)];
      }
      linear_[j] = true;
      widest = std::max<size_t>(widest, size_t(itemsize(a.dtype)));
    }
    if (widest == 0) return;
    const int v = int(std::min<size_t>(8, 16 / widest));
    // (a row shorter than a few vectors per thread gains nothing)
    if (v > 1 && row_len_ >= 8 * v) row_vec_ = out_.vector = v;
    if (row_vec_ == 1) linear_.assign(nops(), false);
  }

  // A reduction pass (no stores in it) over [from, end) by `step`: with row_vec_ > 1, the whole
  // vectors from the row's start are read VEC elements per load when every vector load's row
  // start is aligned (checked per row: a sliced operand's rows may not be), `body` running once
  // per element of each vector in order; the rest of the row (or all of it) element by element.
  template <class Body>
  void reduce_pass(const std::string& from, const std::string& step, Body&& body, const std::string& end = "") {
    // (vectors are counted from the row's start: a pass over a part of the row goes element by element)
    if (row_vec_ < 2 || !end.empty()) return row_loop(from, step, body, end);
    const int V = row_vec_;
    const std::string Vs = std::to_string(V) + "u", nv = fresh("nv");
    // (the row's start: no coordinates along the row)
    std::vector<std::string> along(coord_.begin() + rf(), coord_.end());
    for (int d = rf(); d < rank(); ++d) coord_[size_t(d)] = "";
    std::vector<std::string> start(k_.loads.size());
    std::string aligned;
    for (size_t j = 0; j < k_.loads.size(); ++j) {
      if (!linear_[j]) continue;
      start[j] = "p" + std::to_string(j) + " + " + offset(j);
      aligned += std::string(aligned.empty() ? "" : " && ") + "kiln_aligned(" + start[j] + ", " +
                 std::to_string(V * int(itemsize(k_.loads[j].dtype))) + ")";
    }
    std::copy(along.begin(), along.end(), coord_.begin() + rf());
    line() << "const " << I_ << " " << nv << " = " << aligned << " ? " << (end.empty() ? row_len() : end) << " / " << Vs
           << " : 0u;\n";
    open_counted_loop(I_, "q", from, nv, step);
    line() << "const " << I_ << " base = q * " << Vs << ";\n";
    auto vt = [&](const passes::Access& a) { return vec_type(a.dtype, V); };
    for (size_t j = 0; j < k_.loads.size(); ++j)
      if (linear_[j])
        line() << "const " << vt(k_.loads[j]) << " l" << j << " = *reinterpret_cast<const " << vt(k_.loads[j]) << "*>("
               << start[j] << " + base);\n";
    line() << "#pragma unroll\n";
    line() << "for (int u = 0; u < " << V << "; ++u) {\n";
    ++indent_;
    line() << "const " << I_ << " e = base + u;\n";
    line() << "(void)e;\n";
    decompose("e", rf(), rank());
    vec_ = V;
    body();
    vec_ = 0;
    forget_rows();
    --indent_;
    line() << "}\n";
    close_counted_loop();
    row_loop(nv + " * " + Vs + " + " + from, step, body, end);
  }

  // A cached load's element at the current row position: WarpRow's register (`it` a constant
  // in each unrolled copy), BlockRow's slot in shared memory (the thread's own: each thread
  // reads back only the positions it wrote, so no barrier is needed).
  std::string cache_slot(size_t id) const {
    return cache_row_ ? "rs" + std::to_string(id) + "[e]" : "rc" + std::to_string(id) + "[it]";
  }

  // Rows read in more than one pass (softmax: the max, the sum of exponentials, the stores;
  // layernorm: the mean, the variance, the stores): the loads that differ from row to row are
  // kept from the first pass that reads them, so the row is read from memory once. WarpRow
  // keeps them in registers, BlockRow (rows past 2048: layernorm over a hidden size of 4096)
  // in shared memory. Loads broadcast over the rows (layernorm's weight and bias) are left to
  // the caches.
  void plan_row_cache(const RowPlan& p) {
    if (out_.strategy != CudaStrategy::WarpRow && out_.strategy != CudaStrategy::BlockRow) return;
    const bool block = out_.strategy == CudaStrategy::BlockRow;
    // (a size-generic kernel's cache holds the next power of two of the lane's elements, or of
    // the row's, so that rows of similar lengths share the kernel)
    const int64_t iters = generic_ ? int64_t(std::bit_ceil(uint64_t(row_len_ + 31) / 32)) : (row_len_ + 31) / 32;
    const int64_t row = generic_ ? int64_t(std::bit_ceil(uint64_t(row_len_))) : row_len_;
    std::vector<int> passes(code_.code.size(), 0);
    size_t npasses = size_t(code_.depth) + (p.in_row.empty() ? 0 : 1);
    for (size_t pass = 0; pass < npasses; ++pass) {
      const std::vector<int>& need = pass < size_t(code_.depth) ? p.needs[pass] : p.needs.back();
      for (int id : need) passes[size_t(id)]++;
    }
    std::vector<int> cached(code_.code.size(), 0);
    const int64_t most = block ? kBlockRowCacheBytes : kRowCacheMax;
    int64_t budget = most;
    for (size_t id = 0; id < code_.code.size(); ++id) {
      const Instr& in = code_.code[id];
      // WarpRow: 4-byte registers per lane; BlockRow: bytes of shared memory
      const int64_t cost = block ? row * std::max<int64_t>(4, int64_t(itemsize(in.type)))
                                 : iters * (itemsize(in.type) == 8 ? 2 : 1);
      if (in.op != EOp::Load || !in.row || passes[id] < 2 || budget < cost) continue;
      const passes::Access& a = k_.loads[size_t(in.index)];
      bool per_row = false;
      for (int d = 0; d < rf(); ++d) per_row |= moves(a, size_t(d));
      if (a.buffer < 0 || !per_row) continue;
      cached[id] = 1;
      budget -= cost;
    }
    if (budget == most) return;
    (block ? cache_row_ : cache_iters_) = block ? row : iters;
    cached_ = std::move(cached);
  }

  // Starts the scans a pass over the row needs: declared in the row's scope by the first pass
  // that needs each, set back to their start by a later one (a cumsum both reduced and stored).
  void declare_scans(const std::vector<int>& need) {
    for (int id : need) {
      const Instr& in = code_.code[size_t(id)];
      if (in.op != EOp::Scan) continue;
      const bool declared = !scans_declared_.insert(id).second;
      line() << (declared ? "" : std::string(ctype(in.type)) + " ") << "scan" << id << " = " << identity(in) << ";\n";
    }
  }

  // BlockRow, WarpRow, ThreadRow: rows spread over groups, each group walking its rows.
  void rows() {
    coord_.assign(size_t(rank()), "");
    memo_.assign(code_.code.size(), "");
    scans_declared_.clear();
    std::string group, groups;
    if (out_.strategy == CudaStrategy::BlockRow) {
      group = "(" + I_ + ")blockIdx.x", groups = "(" + I_ + ")gridDim.x", t0_ = "(" + I_ + ")threadIdx.x", nt_ = "blockDim.x";
    } else if (out_.strategy == CudaStrategy::WarpRow) {
      group = "(" + I_ + ")blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)";
      groups = "(" + I_ + ")gridDim.x * (blockDim.x >> 5)", t0_ = "(" + I_ + ")(threadIdx.x & 31u)", nt_ = "32u";
    } else {
      group = "(" + I_ + ")blockIdx.x * blockDim.x + threadIdx.x", groups = "(" + I_ + ")gridDim.x * blockDim.x";
      t0_ = "0u", nt_ = "1u";
    }
    line() << "for (" << I_ << " row = " << group << "; row < " << nrows() << "; row += " << groups << ") {\n";
    ++indent_;
    decompose("row", 0, rf());
    RowPlan p = row_plan(k_, code_);
    plan_row_cache(p);
    plan_row_vector();
    for (size_t id = 0; id < cached_.size(); ++id) {
      if (!cached_[id]) continue;
      if (cache_row_) line() << "__shared__ " << ctype(code_.code[id].type) << " rs" << id << "[" << cache_row_ << "];  // row cache\n";
      else line() << ctype(code_.code[id].type) << " rc" << id << "[" << cache_iters_ << "];  // row cache\n";
    }
    for (int depth = 1; depth <= code_.depth; ++depth) {
      const std::vector<int>& need = p.needs[size_t(depth - 1)];
      for (int id : need)
        if (!code_.code[size_t(id)].row) value(id);
      for (int r : p.reduces[size_t(depth)]) {
        const Instr& in = code_.code[size_t(r)];
        line() << ctype(in.type) << " acc" << r << " = " << identity(in) << ";\n";
      }
      declare_scans(need);
      reduce_pass(t0_, nt_, [&] {
        for (int id : need)
          if (code_.code[size_t(id)].row) value(id);
        for (int r : p.reduces[size_t(depth)]) {
          const Instr& in = code_.code[size_t(r)];
          std::string acc = "acc" + std::to_string(r), x = value(in.args[0]);
          line() << acc << " = " << combine(in, acc, x) << ";\n";
        }
      });
      for (int r : p.reduces[size_t(depth)]) {
        const Instr& in = code_.code[size_t(r)];
        line() << "const " << ctype(in.type) << " v" << r << " = " << group_reduce(in, "acc" + std::to_string(r)) << ";\n";
        memo_[size_t(r)] = "v" + std::to_string(r);
      }
    }
    if (!p.per_row.empty()) {
      // every thread of the group holds the row's values; its first thread stores them
      line() << "if (" << t0_ << " == 0u) {\n";
      ++indent_;
      auto saved = memo_;
      store_all(p.per_row, "");
      memo_ = saved;  // (values declared inside the if are out of scope after it)
      --indent_;
      line() << "}\n";
    }
    if (!p.in_row.empty()) {
      for (int id : p.needs.back())
        if (!code_.code[size_t(id)].row) value(id);
      declare_scans(p.needs.back());
      row_loop(t0_, nt_, [&] {
        store_all(p.in_row, "");
      });
    }
    --indent_;
    line() << "}\n";
  }

  // ---- Split: a full reduction over blocks, then one block combining their slots ----

  // A two-step kernel's partial step: its one pass over the row's elements [from, end) by
  // `step`, each reduction into accumulator acc<id>.
  void partial_pass(const RowPlan& p, const std::string& from, const std::string& step, const std::string& end = "") {
    const std::vector<int>& need = p.needs[0];
    for (int id : need)
      if (!code_.code[size_t(id)].row) value(id);
    for (int r : p.reduces[1]) line() << ctype(code_.code[size_t(r)].type) << " acc" << r << " = " << identity(code_.code[size_t(r)]) << ";\n";
    reduce_pass(from, step, [&] {
      for (int id : need)
        if (code_.code[size_t(id)].row) value(id);
      for (int r : p.reduces[1]) {
        const Instr& in = code_.code[size_t(r)];
        std::string x = value(in.args[0]);
        line() << "acc" << r << " = " << combine(in, "acc" + std::to_string(r), x) << ";\n";
      }
    }, end);
  }

  void split_partial() {
    coord_.assign(size_t(rank()), "");
    memo_.assign(code_.code.size(), "");
    RowPlan p = row_plan(k_, code_);
    plan_row_vector();
    partial_pass(p, "(" + I_ + ")blockIdx.x * blockDim.x + threadIdx.x", "(" + I_ + ")gridDim.x * blockDim.x");
    for (size_t q = 0; q < p.reduces[1].size(); ++q) {
      int r = p.reduces[1][q];
      const Instr& in = code_.code[size_t(r)];
      std::string acc = "acc" + std::to_string(r);
      line() << acc << " = " << group_reduce(in, acc) << ";\n";
      line() << "if (threadIdx.x == 0) kiln_put(parts + (unsigned long long)blockIdx.x * " << out_.slots << " + " << q << ", "
             << acc << ");\n";
    }
  }

  void split_finish() {
    coord_.assign(size_t(rank()), "");
    memo_.assign(code_.code.size(), "");
    RowPlan p = row_plan(k_, code_);
    for (size_t q = 0; q < p.reduces[1].size(); ++q) {
      int r = p.reduces[1][q];
      const Instr& in = code_.code[size_t(r)];
      std::string T = ctype(in.type), acc = "acc" + std::to_string(r);
      line() << T << " " << acc << " = " << identity(in) << ";\n";
      line() << "for (long long b = threadIdx.x; b < nparts; b += blockDim.x) " << acc << " = "
             << combine(in, acc, "kiln_get<" + T + ">(parts + b * " + std::to_string(out_.slots) + " + " + std::to_string(q) + ")")
             << ";\n";
      line() << "const " << T << " v" << r << " = " << group_reduce(in, acc) << ";\n";
      memo_[size_t(r)] = "v" + std::to_string(r);
    }
    line() << "if (threadIdx.x == 0) {\n";
    ++indent_;
    store_all(p.per_row, "");
    --indent_;
    line() << "}\n";
  }

  // ---- ColumnSplit: chunks of rows, one thread each, then a thread per row combining them ----

  // The slot of reduction q's partial result for chunk `part` of `row`: laid out chunk-major,
  // then by reduction, then by row, so that neighbouring threads (neighbouring rows) write and
  // read neighbouring slots.
  std::string column_slot(const std::string& part, size_t q) const {
    return "parts + ((unsigned long long)" + part + " * " + std::to_string(out_.slots) + "u + " + std::to_string(q) + "u) * " +
           nrows() + " + row";
  }

  // Thread t takes row t % nrows and its chunk t / nrows (nparts chunks per row, the last ones
  // possibly shorter or empty), walking the chunk in order into its slots.
  void column_partial() {
    coord_.assign(size_t(rank()), "");
    memo_.assign(code_.code.size(), "");
    RowPlan p = row_plan(k_, code_);
    line() << "const " << I_ << " nchunks = (" << I_ << ")nparts, chunk = (" << row_len() << " + nchunks - 1u) / nchunks;\n";
    line() << "for (" << I_ << " t = (" << I_ << ")blockIdx.x * blockDim.x + threadIdx.x; t < " << nrows()
           << " * nchunks; t += (" << I_ << ")gridDim.x * blockDim.x) {\n";
    ++indent_;
    line() << "const " << I_ << " row = t % " << nrows() << ", part = t / " << nrows() << ";\n";
    line() << "const " << I_ << " lo = part * chunk, hi = lo + chunk < " << row_len() << " ? lo + chunk : " << row_len() << ";\n";
    decompose("row", 0, rf());
    partial_pass(p, "lo", "1u", "hi");
    for (size_t q = 0; q < p.reduces[1].size(); ++q)
      line() << "kiln_put(" << column_slot("part", q) << ", acc" << p.reduces[1][q] << ");\n";
    --indent_;
    line() << "}\n";
  }

  // A thread per row: its chunks' slots combined in chunk order, then the row's stores.
  void column_finish() {
    coord_.assign(size_t(rank()), "");
    memo_.assign(code_.code.size(), "");
    RowPlan p = row_plan(k_, code_);
    line() << "for (" << I_ << " row = (" << I_ << ")blockIdx.x * blockDim.x + threadIdx.x; row < " << nrows() << "; row += ("
           << I_ << ")gridDim.x * blockDim.x) {\n";
    ++indent_;
    decompose("row", 0, rf());
    for (size_t q = 0; q < p.reduces[1].size(); ++q) {
      int r = p.reduces[1][q];
      const Instr& in = code_.code[size_t(r)];
      std::string T = ctype(in.type), acc = "acc" + std::to_string(r);
      line() << T << " " << acc << " = " << identity(in) << ";\n";
      line() << "for (long long c = 0; c < nparts; ++c) " << acc << " = "
             << combine(in, acc, "kiln_get<" + T + ">(" + column_slot("c", q) + ")") << ";\n";
      memo_[size_t(r)] = acc;
    }
    store_all(p.per_row, "");
    --indent_;
    line() << "}\n";
  }
};

}  // namespace

std::vector<CudaRender> render_cuda(const passes::KernelProgram& p, const std::string& prefix, bool generic) {
  std::vector<CudaRender> out;
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const passes::Kernel& k = p.kernels[i];
    CudaRender r;
    std::optional<EpilogueSplit> split;
    if (k.kind == passes::KernelKind::Opaque) split = split_epilogue(k, int(p.buffers.size()));
    const passes::Kernel& kc = split ? split->epilogue : k;
    Lowered low = lower_kernel(kc);
    if (!low.code) {
      r.why = low.why;
      out.push_back(std::move(r));
      continue;
    }
    CudaKernel ck;
    ck.kernel = int(i);
    ck.epilogue = split.has_value();
    // A loop of no elements stays specialised: the generic body's structure takes loops of at
    // most one element for one, and an empty loop must run no row (or rows of no elements).
    ck.generic = generic && std::find(kc.loops.begin(), kc.loops.end(), 0) == kc.loops.end();
    ck.name = prefix + std::to_string(i);
    ck.operands = kc.loads;
    ck.operands.insert(ck.operands.end(), kc.stores.begin(), kc.stores.end());
    ck.loads = kc.loads.size();
    for (const Check& c : low.code->checks) ck.checks.emplace_back(c.op, c.message);
    Renderer(kc, *low.code, ck, ck.generic).render();
    r.kernel = std::move(ck);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kiln::codegen
