// CUDA C++ for each kernel of a program (render_cuda): the renderer's plan (strategy, index
// width, vector width), the kernel's signature, its instructions as C++ declarations, and the
// elementwise and tiled strategies. The row strategies are in render_rows.cpp; the class, in
// renderer.h.
#include <algorithm>

#include "../epilogue.h"
#include "renderer.h"
#include "kiln/codegen/cuda.h"
#include "kiln/runtime/env.h"
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
    case CudaStrategy::RowSplit: return "row-split";
  }
  return "?";
}

std::string CudaKernel::source() const { return cuda_prelude() + body; }

namespace cuda_render {

void Renderer::render() {
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
    split ? split_partial() : out_.strategy == CudaStrategy::RowSplit ? row_partial() : column_partial();
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
void Renderer::emulation_entries() {
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

const passes::Access& Renderer::operand(size_t j) const {
  return j < k_.loads.size() ? k_.loads[j] : k_.stores[j - k_.loads.size()];
}

std::ostream& Renderer::line() {
  for (int i = 0; i < indent_; ++i) o_ << "  ";
  return o_;
}

void Renderer::plan() {
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
  } else if (rf() == 0 && row_len_ >= kSplitMin && splits_reduction(k_, code_, true)) {
    // (the row's stores that need no reduction, `x * 2` fused with `x.sum()`, are written by
    // the partial step as it reads their elements: early stores)
    out_.strategy = CudaStrategy::Split;
    out_.finish = out_.name + "_finish";
    for (const Instr& in : code_.code) out_.slots += in.op == EOp::Reduce;
  } else if (!unit_stride_along_row() && splits_columns()) {
    out_.strategy = CudaStrategy::ColumnSplit;
    out_.finish = out_.name + "_finish";
    for (const Instr& in : code_.code) out_.slots += in.op == EOp::Reduce;
  } else if (unit_stride_along_row() && splits_rows()) {
    out_.strategy = CudaStrategy::RowSplit;
    out_.finish = out_.name + "_finish";
    for (const Instr& in : code_.code) out_.slots += in.op == EOp::Reduce;
  } else if (!unit_stride_along_row() && rows_ >= kThreadRowMin) {
    out_.strategy = CudaStrategy::ThreadRow;
  } else {
    out_.strategy = row_len_ <= kWarpRowMax ? CudaStrategy::WarpRow : CudaStrategy::BlockRow;
  }
  if (out_.strategy == CudaStrategy::BlockRow || out_.strategy == CudaStrategy::WarpRow) plan_groups();
  out_.items = out_.strategy == CudaStrategy::Split ? row_len_ : rows_;
  out_.row_len = row_len_;
}

// ColumnSplit: few rows, long ones, one pass over each and only per-row stores after it (the
// chunks' partial results meet in the finishing kernel, which stores).
bool Renderer::splits_columns() const {
  if (rf() == 0 || rows_ >= kColumnSplitRowsMax || row_len_ < kColumnSplitMinLen || rows_ * row_len_ < kSplitMin ||
      code_.depth != 1)
    return false;
  return row_plan(k_, code_).in_row.empty();
}

// RowSplit: few rows, long ones, one pass over each with only per-row and early stores.
bool Renderer::splits_rows() const {
  if (rf() == 0 || rows_ >= kRowSplitRowsMax || row_len_ < kRowSplitMinLen || code_.depth != 1) return false;
  return row_plan(k_, code_, true).in_row.empty();
}

// Whether some load walks the innermost reduction loop contiguously (threads of a warp or block
// striding over the row then read adjacent elements).
bool Renderer::unit_stride_along_row() const {
  const size_t last = size_t(rank() - 1);
  for (const passes::Access& a : k_.loads)
    if (a.buffer >= 0 && moves(a, last) && std::abs(a.strides[last]) == 1) return true;
  return false;
}

// Tiled, when the stores are contiguous along the innermost loop (`along_`) and some load is
// contiguous along another (`across_`) while strided along the stores' loop: a warp reading
// it at the stores' coordinates would touch 32 rows. Such loads (at most kMaxStaged, all
// contiguous along the same loop) are staged.
bool Renderer::plan_tiles() {
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
  int64_t wide_bytes = 0;
  for (size_t j = 0; j < k_.loads.size(); ++j)
    if (staged_[j]) wide_bytes += itemsize(k_.loads[j].dtype) * kWideTile * (kWideTile + 1);
  tile_ = env::cuda_tile() == kWideTile && k_.loops[size_t(across)] >= kWideTile && k_.loops[size_t(along)] >= kWideTile &&
                  wide_bytes <= kWideTileBytes
              ? kWideTile
              : kTile;
  out_.tile = int(tile_);
  out_.strategy = CudaStrategy::Tiled;
  out_.items = tiles(across_) * tiles(along_);
  for (int d = 0; d < rank(); ++d)
    if (d != across_ && d != along_) out_.items *= k_.loops[size_t(d)];
  return true;
}

// The product of the extents of loops [lo, hi) (generic_: an expression of the L variables).
std::string Renderer::extents(int lo, int hi) const {
  std::string e;
  for (int d = lo; d < hi; ++d)
    if (k_.loops[size_t(d)] > 1) e += (e.empty() ? "" : " * ") + extent(d);
  return e.empty() ? "1u" : e;
}

// Operand j's stride along loop d as a factor (a unit stride is never a parameter, so that
// contiguous reads stay recognisably contiguous).
std::string Renderer::stride(size_t j, size_t d) const {
  const int64_t s = operand(j).strides[d];
  if (generic_ && std::abs(s) != 1) return "S" + std::to_string(j) + "_" + std::to_string(d);
  return std::to_string(s) + (out_.index32 ? "" : "LL");
}

// Whether the index math divides by loop d's extent (decompose_dims): every loop of more than
// one element in a decomposed range but the range's outermost, which takes what is left.
bool Renderer::divides(int d) const {
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
void Renderer::plan_vector() {
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
    const bool per_run = !linear_[j] && !invariant && j < k_.loads.size() && last >= 0;
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
  // (a size-generic kernel checks the run's length and its operands' strides that are
  // parameters when it runs: vector_loop)
  auto whole_runs = [&](int64_t v) {
    if (!per_run_) return true;
    if (!generic_ && k_.loops[size_t(last)] % v) return false;
    for (size_t j = 0; j < nops(); ++j)
      for (int d = 0; run_[j] && d < rank(); ++d)
        if (d != last && moves(operand(j), size_t(d)) && !(generic_ && stride_is_param(operand(j), size_t(d))) &&
            operand(j).strides[size_t(d)] % v)
          return false;
    return true;
  };
  while (out_.vector > 1 && !whole_runs(out_.vector)) out_.vector /= 2;
  if (out_.vector < 2 || out_.items < 2 * out_.vector) out_.vector = 1;
}

// The check that operand j's data from `offset` (none: its first element) is aligned for
// vectors of v elements.
std::string Renderer::aligned(size_t j, const std::string& offset, int v) const {
  return "kiln_aligned(" + std::string(j < k_.loads.size() ? "p" : "s") + std::to_string(j) +
         (offset.empty() ? "" : " + " + offset) + ", " + std::to_string(v * int(itemsize(operand(j).dtype))) + ")";
}

// Whether operand j may overlap another operand's memory (then it is not __restrict__).
bool Renderer::shares_buffer(size_t j) const {
  const passes::Access& a = operand(j);
  if (a.buffer < 0) return false;
  for (size_t i = 0; i < nops(); ++i)
    if (i != j && operand(i).buffer == a.buffer) return true;
  return false;
}

std::string Renderer::parameters() {
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
void Renderer::declare_sizes() {
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

void Renderer::open_kernel(const std::string& name, const std::string& params) {
  o_ << "extern \"C\" __global__ void __launch_bounds__(" << kCudaBlock << ") " << name << "(\n    " << params << ") {\n";
  indent_ = 1;
  declare_sizes();
  if (!code_.checks.empty()) line() << "unsigned long long kflags = 0;  // checks that failed (status bits)\n";
}

void Renderer::close_kernel() {
  if (!code_.checks.empty()) line() << "if (kflags) atomicOr(status, kflags);\n";
  o_ << "}\n";
  indent_ = 0;
}

// Declares the coordinates of loops [lo, hi) from the flat index `var` (row-major).
void Renderer::decompose(const std::string& var, int lo, int hi) {
  std::vector<int> dims;
  for (int d = lo; d < hi; ++d)
    if (k_.loops[size_t(d)] > 1) dims.push_back(d);
  for (int d = lo; d < hi; ++d) coord_[size_t(d)] = "";
  decompose_dims(var, dims);
}

// The same over the loops `dims` (in order, each of more than one element).
void Renderer::decompose_dims(const std::string& var, const std::vector<int>& dims) {
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
std::string Renderer::element(size_t j, const std::string& flat) {
  std::string base = std::string(j < k_.loads.size() ? "p" : "s") + std::to_string(j);
  if (!flat.empty() && linear_[j]) return base + "[" + flat + "]";
  return base + "[" + offset(j) + "]";
}

// Its offset from the coordinates.
std::string Renderer::offset(size_t j) {
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

std::string Renderer::convert(const std::string& v, DType from, DType to) {
  from = compute_dtype(from);
  to = compute_dtype(to);
  if (from == to) return v;
  if (to == DType::Bool) return "(" + v + " != 0)";
  if (is_floating(from) && !is_floating(to)) return std::string("(") + ctype(to) + ")kiln_f2ll(" + v + ")";
  return std::string("(") + ctype(to) + ")(" + v + ")";
}

// The stored bits of operand j as its compute type.
std::string Renderer::widen(const std::string& raw, DType t) {
  if (t == DType::Float16) return "kiln_h2f(" + raw + ")";
  if (t == DType::BFloat16) return "kiln_bf2f(" + raw + ")";
  if (t == DType::Bool) return "(" + raw + " != 0)";
  return raw;
}

std::string Renderer::narrow(const std::string& v, DType t) {
  if (t == DType::Float16) return "kiln_f2h(" + v + ")";
  if (t == DType::BFloat16) return "kiln_f2bf(" + v + ")";
  if (t == DType::Bool) return "(unsigned char)(" + v + ")";
  return v;
}

std::string Renderer::load(int j, DType to, const std::string& flat) {
  const passes::Access& a = k_.loads[size_t(j)];
  if (a.buffer < 0) return convert("a" + std::to_string(j), is_floating(a.dtype) ? DType::Float64 : DType::Int64, to);
  // (a row group's copies each load their own vector of an operand that moves along loop 0)
  const std::string copy = copy_suffix(moves(a, 0));
  if (vec_ && linear_[size_t(j)]) vec_used_.insert({size_t(j), copy.empty() ? -1 : copy_});
  std::string raw = vec_ && (linear_[size_t(j)] || run_[size_t(j)]) ? "l" + std::to_string(j) + copy + ".v[u]"
                    : from_tiles_ && staged_[size_t(j)] ? "tile" + std::to_string(j) + "[" + lane() + "][k]"
                    : from_tiles_                       ? "ld" + std::to_string(j) + "[" + slot() + "]"
                                                        : element(size_t(j), flat);
  if (!live_.empty() && !vec_ && !from_tiles_)  // (past the row's end: a zero, not a read)
    raw = "(" + live_ + " ? " + raw + " : (" + storage_ctype(a.dtype) + ")0)";
  return convert(widen(raw, a.dtype), compute_dtype(a.dtype), to);
}

// Stores operands `js` (all of them by default) of one point after computing every value
// they store. Code is declared where it is first used, so storing one by one would put a load
// needed only by a later store after an earlier store, and that store may write the memory
// the load reads (an in-place update of the element the kernel also reads).
void Renderer::store_all(const std::vector<size_t>& js, const std::string& flat) {
  for (size_t j : js) value(code_.stores[j], flat);
  for (size_t j : js) store(j, flat);
}

void Renderer::store_all(const std::string& flat) {
  std::vector<size_t> all(k_.stores.size());
  for (size_t j = 0; j < all.size(); ++j) all[j] = j;
  store_all(all, flat);
}

void Renderer::store(size_t j, const std::string& flat) {
  const passes::Access& a = k_.stores[j];
  const size_t op = k_.loads.size() + j;
  int id = code_.stores[j];
  std::string v = narrow(convert(value(id, flat), code_.code[size_t(id)].type, a.dtype), a.dtype);
  if (vec_ && linear_[op]) {
    vec_used_.insert({op, -1});  // (a row group's stores are per row: not vectors)
    line() << "w" << op << ".v[u] = " << v << ";\n";
  } else {
    line() << (live_.empty() ? "" : "if (" + live_ + ") ") << element(op, flat) << " = " << v << ";\n";
  }
}

// The variable holding instruction id, declared here if it is not in scope yet.
std::string Renderer::value(int id, const std::string& flat) {
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
  // (a float instruction with a math function, eops.def: a call of CUDA's function of that name)
  if (const char* math = eop_math(in.op); math && fl) e = eop_arity(in.op) == 1 ? call1(math) : call2(math);
  else switch (in.op) {
    case EOp::Load:
      if (!cached_.empty() && cached_[size_t(id)] == 2) {
        e = cache_slot(id, false);
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
    case EOp::Sqrt: e = call1("sqrt"); break;
    case EOp::Recip: e = literal(in.type, 1.0, 1) + " / " + a(0); break;
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
    case EOp::Fmod:  // (float fmod: the math call above)
      if (fl) {
        e = a(0) + " / " + a(1);
      } else {
        if (in.index >= 0) {
          std::string y = a(1);
          line() << "kflags |= (unsigned long long)(" << (live_.empty() ? "" : live_ + " && ") << y << " == 0) << "
                 << in.index << ";\n";
        }
        e = intop(in.op == EOp::Div ? "kiln_idiv" : "kiln_irem");
      }
      break;
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
    default:  // (a math instruction on integers: the lowering converts their operands to floats)
      throw std::logic_error("cuda render: no form of " + std::string(eop_name(in.op)) + " on " + std::string(name(in.type)));
  }
  std::string v = "v" + std::to_string(id) + copy_suffix(copy_ >= 0 && along0_[size_t(id)]);
  line() << "const " << T << " " << v << " = " << e << ";\n";
  if (!cached_.empty() && cached_[size_t(id)] == 1) {
    line() << cache_slot(id, true) << " = " << v << ";\n";
    cached_[size_t(id)] = 3;
  }
  memo_[size_t(id)] = v;
  return v;
}

void Renderer::forget_rows() {
  for (size_t i = 0; i < memo_.size(); ++i)
    if (code_.code[i].row) {
      memo_[i].clear();
      for (auto& m : copy_memo_) m[i].clear();
    }
}

// Opens `for (var = from; var < end; var += step)` with its count computed on entry, so that
// the compiler unrolls it by four with no bounds check between the copies: a thread then has
// four loads in flight, not one (NVRTC does not unroll the plain loop, whose count is
// unknown and whose index may wrap). Two scopes, which close_counted_loop closes.
void Renderer::open_counted_loop(const std::string& type, const std::string& var, const std::string& from,
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

void Renderer::close_counted_loop() {
  --indent_;
  line() << "}\n";
  --indent_;
  line() << "}\n";
}

// Elementwise: whether some operand's offset needs the loops' coordinates (not the flat index
// or one element): then the loop sizes are in the body.
bool Renderer::needs_coordinates() const {
  for (size_t j = 0; j < nops(); ++j)
    if (operand(j).buffer >= 0 && !linear_[j]) return true;
  return false;
}

void Renderer::elementwise() {
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
// tail. A size-generic kernel reading per run also checks what a specialised one knows from
// its sizes (plan_vector): the runs hold whole vectors, and the run operands' other strides
// keep their vectors aligned; else the scalar loop takes every element.
void Renderer::vector_loop() {
  const int V = out_.vector;
  std::string cond;
  for (size_t j = 0; j < nops(); ++j)
    if (linear_[j] || run_[j]) cond += std::string(cond.empty() ? "" : " && ") + aligned(j, "", V);
  if (generic_ && per_run_) {
    int last = rank() - 1;
    while (k_.loops[size_t(last)] <= 1) --last;
    cond += " && " + extent(last) + " % " + std::to_string(V) + "u == 0u";
    for (size_t j = 0; j < nops(); ++j)
      for (int d = 0; run_[j] && d < rank(); ++d)
        if (d != last && stride_is_param(operand(j), size_t(d))) cond += " && " + stride(j, size_t(d)) + " % " + std::to_string(V) + " == 0";
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

// Per tile (tile_ x tile_ elements of the loops across_ x along_, grid-stride over tiles and
// the other loops): the block's warps copy each staged operand's tile into shared memory,
// lanes walking across_ (the operand's contiguous loop), then compute and store, lanes
// walking along_ (the stores' contiguous loop) and reading the staged values transposed out
// of the tiles. A tile row is padded to tile_ + 1 elements, so that the transposed reads of
// a warp fall in 32 different banks. Every thread of a block takes the same tiles, so both
// barriers are reached by all of them.
void Renderer::tiled() {
  coord_.assign(size_t(rank()), "");
  const std::string T = std::to_string(tile_) + "u";
  const std::string nt = extent(across_), na = extent(along_);
  std::string ntiles = std::to_string(out_.items) + "u", tiles_a = std::to_string(tiles(along_)) + "u",
              tiles_t = std::to_string(tiles(across_)) + "u";
  if (generic_) {
    line() << "const " << I_ << " tiles_a = (" << na << " + " << tile_ - 1 << "u) / " << T << ", tiles_t = (" << nt << " + "
           << tile_ - 1 << "u) / " << T << ";\n";
    line() << "const " << I_ << " ntiles = tiles_a * tiles_t";
    for (int d = 0; d < rank(); ++d)  // (times the loops outside the tile)
      if (d != across_ && d != along_ && k_.loops[size_t(d)] > 1) o_ << " * " << extent(d);
    o_ << ";\n";
    ntiles = "ntiles", tiles_a = "tiles_a", tiles_t = "tiles_t";
  }
  line() << "const unsigned tx = threadIdx.x & 31u, ty = threadIdx.x >> 5, ny = blockDim.x >> 5;\n";
  for (size_t j = 0; j < k_.loads.size(); ++j)
    if (staged_[j])
      line() << "__shared__ " << storage_ctype(k_.loads[j].dtype) << " tile" << j << "[" << tile_ << "][" << tile_ + 1
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
  const std::string regs = std::to_string(int64_t(kTileRows) * tile_cols());
  // The other loads' rows of the first step of the computing loop (with 256 threads and
  // 32-wide tiles, all of their rows) are read before the staging: they are in flight together
  // with the staged loads, across the barrier, instead of being issued only after it.
  const bool ahead = !direct.empty();
  if (ahead) {
    for (size_t j : direct) line() << storage_ctype(k_.loads[j].dtype) << " ld" << j << "[" << regs << "] = {};\n";
    line() << "{\n";
    ++indent_;
    line() << "const unsigned k0 = ty;\n";
    tile_step(T, nt, na, false, [&] {
      for (size_t j : direct) line() << "ld" << j << "[" << slot() << "] = " << element(j) << ";\n";
    });
    --indent_;
    line() << "}\n";
  }
  tile_rows(T, nt, na, true, staged, "st", [&](size_t j) {
    return "tile" + std::to_string(j) + "[k][" + lane() + "] = st" + std::to_string(j) + "[" + slot() + "];";
  });
  // computing: lanes along the stores' contiguous loop, the other loads read ahead
  tile_rows(T, nt, na, false, direct, "ld", nullptr, ahead);
  --indent_;
  line() << "}\n";
}

// One unrolled step over a warp's kTileRows rows of the tile from k0 (row k = k0 + kk * ny),
// and in a 64-wide tile over the lane's two columns: `body` at each of its elements inside the
// tile, (ct, ca) their coordinates along the staged operands' and the stores' loops: the
// lane's column along the first (`staging`) or the second.
void Renderer::tile_step(const std::string& T, const std::string& nt, const std::string& na, bool staging,
                         const std::function<void()>& body) {
  line() << "#pragma unroll\n";
  line() << "for (unsigned kk = 0; kk < " << kTileRows << "u; ++kk) {\n";
  ++indent_;
  line() << "const unsigned k = k0 + kk * ny;\n";
  const bool cols = tile_cols() > 1;
  if (cols) {
    line() << "#pragma unroll\n";
    line() << "for (unsigned c = 0; c < " << tile_cols() << "u; ++c) {\n";
    ++indent_;
    line() << "const unsigned lx = tx + c * 32u;\n";
  }
  line() << "const " << I_ << " ct = bt + " << (staging ? lane() : "k") << ", ca = ba + " << (staging ? "k" : lane())
         << ";\n";
  line() << "if (k < " << T << " && ct < " << nt << " && ca < " << na << ") {\n";
  ++indent_;
  body();
  --indent_;
  line() << "}\n";
  if (cols) {
    --indent_;
    line() << "}\n";
  }
  --indent_;
  line() << "}\n";
}

// A phase of the tile: each warp's rows (k = ty + m * ny) kTileRows at a time, in two steps:
// the first loads operands `regs` at each row into registers (`reg<j>[slot]`), the second
// stores them into the tiles (`stage`) or, without it, computes and stores the kernel's values
// reading those registers (and the staged operands from the tiles); a barrier after the phase.
// So a thread has kTileRows loads (times its columns) in flight: loading and storing row by
// row, ptxas kept each store after its load (a warp then waits for every load). Elements
// outside the loops are skipped in both steps; an entry not loaded keeps its 0. With `ahead`,
// the registers are declared and the first step's rows loaded by the caller (tiled).
void Renderer::tile_rows(const std::string& T, const std::string& nt, const std::string& na, bool staging,
                         const std::vector<size_t>& regs, const char* reg, const std::function<std::string(size_t)>& stage,
                         bool ahead) {
  line() << "for (unsigned k0 = ty; k0 < " << T << "; k0 += " << kTileRows << "u * ny) {\n";
  ++indent_;
  if (!ahead)
    for (size_t j : regs)
      line() << storage_ctype(k_.loads[j].dtype) << " " << reg << j << "[" << int64_t(kTileRows) * tile_cols() << "] = {};\n";
  if (!regs.empty()) {
    if (ahead) {
      line() << "if (k0 != ty) {\n";
      ++indent_;
    }
    tile_step(T, nt, na, staging, [&] {
      for (size_t j : regs) line() << reg << j << "[" << slot() << "] = " << element(j) << ";\n";
    });
    if (ahead) {
      --indent_;
      line() << "}\n";
    }
  }
  tile_step(T, nt, na, staging, [&] {
    if (stage) {
      for (size_t j : regs) line() << stage(j) << "\n";
      return;
    }
    memo_.assign(code_.code.size(), "");
    from_tiles_ = true;
    store_all("");
    from_tiles_ = false;
  });
  --indent_;
  line() << "}\n";
  line() << "__syncthreads();\n";
}

}  // namespace cuda_render

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
    cuda_render::Renderer(kc, *low.code, ck, ck.generic).render();
    r.kernel = std::move(ck);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kiln::codegen
