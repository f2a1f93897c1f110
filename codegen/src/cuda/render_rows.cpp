// The renderer's row strategies (renderer.h): block-, warp- and thread-per-row (one pass over a
// row per reduction depth, then the stores; a row cache in registers or shared memory when a
// row is read in more than one pass), split (a full reduction over blocks, then one block
// combining their slots) and column-split (chunks of strided rows, then a thread per row).
#include <algorithm>
#include <bit>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/runtime/env.h"
#include "renderer.h"

namespace kiln::codegen::cuda_render {

std::string Renderer::group_reduce(const Instr& in, const std::string& acc) {
  std::string T = ctype(in.type);
  std::string f = "[](" + T + " x, " + T + " y) { return " + combine(in, "x", "y") + "; }";
  if (out_.strategy == CudaStrategy::WarpRow) return "kiln_warp_reduce(" + acc + ", " + f + ")";
  if (out_.strategy == CudaStrategy::ThreadRow) return acc;
  return "kiln_block_reduce(" + acc + ", " + f + ")";
}

// Folds x into accumulator acc; in WarpRow's unrolled passes only where the element is in the
// row (the elements past its end are computed on zeros). Both forms below are what ptxas
// (13.0, sm_90) compiled best: element by element, a select of the accumulator (softmax's
// size-generic row loop 728 instructions, against 858 selecting the identity for x); in a
// vector pass, x or the identity (627, with the eight vector loads back to back: selecting
// the accumulator, the selects on one mask became branches, each vector's load in one).
void Renderer::accumulate(const Instr& in, const std::string& acc, const std::string& x) {
  if (live_.empty()) line() << acc << " = " << combine(in, acc, x) << ";\n";
  else if (vec_) line() << acc << " = " << combine(in, acc, "(" + live_ + " ? " + x + " : " + identity(in) + ")") << ";\n";
  else line() << acc << " = " << live_ << " ? " << combine(in, acc, x) << " : " << acc << ";\n";
}

// A pass over the row: `body` at each element this thread visits (coordinates declared).
// With a row cache the pass is unrolled (`it` a constant in each copy, so that the cache's
// elements are registers); the cached loads filled by this pass are read from it afterwards.
// Where a copy's elements may lie past the row's end (always, in a size-generic kernel),
// the body runs regardless, under a mask (live_) that only its loads, stores, checks and
// accumulations consult: a branch around each copy's body was a divergent one to ptxas, with
// a convergence barrier per element (1366 instructions per row in softmax's generic kernel,
// against 543 specialised, and the exponential computed twice).
template <class Body>
void Renderer::row_loop(const std::string& from, const std::string& step, Body&& body, std::string end) {
  if (end.empty()) end = row_len();
  if (cache_iters_ && row_vec_ > 1) return warp_vector_pass(body);
  if (cache_iters_) {
    line() << "#pragma unroll\n";
    line() << "for (unsigned it = 0; it < " << cache_iters_ << "u; ++it) {\n";
    ++indent_;
    line() << "const " << I_ << " e = " << from << " + it * " << step << ";\n";
    line() << "const bool live = e < " << row_len() << ";\n";
    line() << "{\n";
    ++indent_;
    live_ = "live";
  } else {
    open_counted_loop(I_, "e", from, end, step);
  }
  decompose("e", rf(), rank());
  body();
  live_.clear();
  forget_rows();
  close_counted_loop();  // (the cache's for and its scope close the same way)
  for (int& c : cached_) c = c == 3 ? 2 : c;  // (filled by this pass: read from the cache after it)
}

// Whether operand j moves along the row contiguously over the reduced loops, in their order
// (1), does not move along it (0), or moves otherwise (-1).
int Renderer::along_row(size_t j) const {
  const passes::Access& a = operand(j);
  bool along = false;
  for (int d = rf(); d < rank(); ++d) along |= moves(a, size_t(d));
  if (!along) return 0;
  int64_t expect = 1;
  for (int d = rank() - 1; d >= rf(); --d) {
    if (k_.loops[size_t(d)] == 1) continue;
    if (!moves(a, size_t(d)) || a.strides[size_t(d)] != expect) return -1;
    expect *= k_.loops[size_t(d)];
  }
  return 1;
}

// Kernels whose loads that vary along the row are all contiguous over the reduced loops (in
// their order) read VEC elements per 16-byte load (PyTorch's reductions read their input the
// same way); linear_ marks those operands.
// - BlockRow, Split and WarpRow without a row cache, in every pass over the row (row_pass):
//   each thread then has four vectors in flight in the unrolled pass, not four elements. The
//   row stores contiguous along the row go by vectors too (others element by element; Split's
//   are its early stores, which need no reduction and go in its one pass), and a
//   BlockRow row cache in shared memory is filled and read at the vectors' elements.
//   Size-generic kernels too, over a single reduced loop.
// - WarpRow with a row cache (softmax, layernorm), in every pass and in its row stores too,
//   which must then be contiguous along the row as well (warp_vector_pass): a lane owns VEC
//   neighbouring elements per step, so a row of 1024 floats takes each lane eight 16-byte
//   loads and eight 16-byte stores, not 32 of each.
void Renderer::plan_row_vector(const RowPlan& p) {
  row_vec_ = 1;
  run_.assign(nops(), false);
  const bool warp = out_.strategy == CudaStrategy::WarpRow && cache_iters_;
  const bool row_stores = out_.strategy == CudaStrategy::BlockRow || out_.strategy == CudaStrategy::WarpRow;
  const bool early_stores = out_.strategy == CudaStrategy::Split || out_.strategy == CudaStrategy::RowSplit;
  if (out_.strategy == CudaStrategy::ThreadRow || out_.strategy == CudaStrategy::ColumnSplit) return;
  if (generic_) {
    // A size-generic kernel's reduction passes go by vectors too (eager x.sum(1) on a GPU),
    // when a single loop runs along the row: contiguity is then its unit stride, which is in
    // the kernel's structure, not in its sizes (along_row's products of extents would be the
    // first instance's; two reduced loops contiguous over each other are merged into one by
    // the passes anyway). The rows' alignment is checked per row as in a specialised kernel,
    // and the source names no length (vectors whatever the row's).
    int along = 0;
    for (int d = rf(); d < rank(); ++d) along += k_.loops[size_t(d)] > 1;
    if (along != 1) return;
  }
  std::vector<size_t> ops;
  for (size_t j = 0; j < k_.loads.size(); ++j)
    if (k_.loads[j].buffer >= 0) ops.push_back(j);
  if (row_stores)
    for (size_t j : p.in_row) ops.push_back(k_.loads.size() + j);
  if (early_stores)
    for (size_t j : p.early) ops.push_back(k_.loads.size() + j);
  size_t widest = 0;
  for (size_t j : ops) {
    const int along = along_row(j);
    if (along < 0 || (along == 0 && j >= k_.loads.size())) {
      if (j >= k_.loads.size() && !warp) continue;  // (stored element by element at the lanes' coordinates)
      return;
    }
    if (along == 0) continue;  // (the same element along the row: read once per row)
    linear_[j] = true;
    widest = std::max<size_t>(widest, size_t(itemsize(operand(j).dtype)));
  }
  if (widest == 0) return;
  const int v = int(std::min<size_t>(8, 16 / widest));
  if (warp) {
    // (whole vectors only; the cache then holds what each lane's vectors cover, at most v - 1
    // elements more per lane than element by element, within the same budget. A size-generic
    // cache holds a power of two of elements per lane already: whole vectors where it holds
    // one at least)
    const int64_t iters = generic_ ? cache_iters_ : (row_len_ + 32 * v - 1) / (32 * v) * v;
    int64_t regs = 0;
    for (size_t id = 0; id < cached_.size(); ++id)
      if (cached_[id]) regs += iters * (itemsize(code_.code[id].type) == 8 ? 2 : 1);
    // (every row's start aligned where the data is: the rows whole vectors long)
    const bool whole = generic_ ? iters % v == 0 : row_len_ % v == 0;
    if (v > 1 && regs <= kRowCacheMax && whole && rows_apart(v)) {
      row_vec_ = out_.vector = v;
      cache_iters_ = iters;
    }
  } else if (v > 1 && (generic_ || row_len_ >= 8 * v) && (!cache_row_ || rows_apart(v))) {
    // (a row shorter than a few vectors per thread gains nothing; a BlockRow row cache needs
    // every row's start aligned where the data is, for its threads to own the same elements
    // row after row: row_loop_body)
    row_vec_ = out_.vector = v;
  }
  if (row_vec_ == 1) linear_.assign(nops(), false);
}

// Whether the vector operands' rows are whole vectors of v elements apart: the row loops'
// strides, those that are parameters of a size-generic kernel checked when it runs
// (kernel_aligned).
bool Renderer::rows_apart(int v) const {
  for (size_t j = 0; j < nops(); ++j)
    for (int d = 0; linear_[j] && d < rf(); ++d)
      if (moves(operand(j), size_t(d)) && !(generic_ && stride_is_param(operand(j), size_t(d))) &&
          operand(j).strides[size_t(d)] % v)
        return false;
  return true;
}

// Whether every row's start is aligned for the vectors, checked once per kernel: the vector
// operands' data aligned, and in a size-generic kernel what a specialised one knows from its
// sizes (rows_apart's strides; with `whole_rows`, rows whole vectors long).
std::string Renderer::kernel_aligned(bool whole_rows) {
  std::string all;
  const std::string Vs = std::to_string(row_vec_);
  for (size_t j = 0; j < nops(); ++j)
    if (linear_[j]) all += std::string(all.empty() ? "" : " && ") + aligned(j, "", row_vec_);
  if (generic_) {
    if (whole_rows) all += " && row_len % " + Vs + "u == 0u";
    for (size_t j = 0; j < nops(); ++j)
      for (int d = 0; linear_[j] && d < rf(); ++d)
        if (stride_is_param(operand(j), size_t(d))) all += " && " + stride(j, size_t(d)) + " % " + Vs + " == 0";
  }
  return all;
}

// Operand j's offset at the row's start (no coordinates along the row).
std::string Renderer::row_start(size_t j) {
  std::vector<std::string> along(coord_.begin() + rf(), coord_.end());
  for (int d = rf(); d < rank(); ++d) coord_[size_t(d)] = "";
  std::string off = offset(j);
  std::copy(along.begin(), along.end(), coord_.begin() + rf());
  return off;
}

// `body` once per element of the vector from `base` (an unrolled loop over its lanes u), its
// vector loads and stores going through l<j>.v[u] and w<j>.v[u].
template <class Body>
void Renderer::vector_lanes(const std::string& base, Body&& body) {
  line() << "#pragma unroll\n";
  line() << "for (int u = 0; u < " << row_vec_ << "; ++u) {\n";
  ++indent_;
  line() << "const " << I_ << " e = " << base << " + u;\n";
  line() << "(void)e;\n";
  decompose("e", rf(), rank());
  vec_ = row_vec_;
  body();
  vec_ = 0;
  forget_rows();
  --indent_;
  line() << "}\n";
}

// WarpRow with a row cache and vectors: one pass over the row, lane l owning the VEC elements
// from (it * 32 + l) * VEC for each (unrolled) step it. The body is rendered first, so that
// only the vectors it reads (those not in the cache) are loaded before it and only those it
// writes are stored after it. The rows are whole vectors long, so a step's vector lies in
// the row or past its end: the vector is masked as row_loop masks an element.
template <class Body>
void Renderer::warp_vector_pass(Body&& body) {
  const int V = row_vec_;
  const std::string Vs = std::to_string(V) + "u";
  line() << "#pragma unroll\n";
  line() << "for (unsigned it = 0; it < " << cache_iters_ / V << "u; ++it) {\n";
  ++indent_;
  line() << "const " << I_ << " b = (it * 32u + " << t0_ << ") * " << Vs << ";\n";
  line() << "const bool live = b < " << row_len() << ";  // (a vector is in the row or past its end)\n";
  line() << "{\n";
  ++indent_;
  std::ostringstream lanes;
  std::swap(o_, lanes);
  vec_used_.clear();
  live_ = "live";
  vector_lanes("b", body);
  live_.clear();
  std::swap(o_, lanes);
  auto vt = [&](size_t j) { return vec_type(operand(j).dtype, V); };
  for (const auto& [j, g] : vec_used_)  // (no row groups here: g is -1)
    if (j < k_.loads.size())
      line() << "const " << vt(j) << " l" << j << " = live ? *reinterpret_cast<const " << vt(j) << "*>(rp" << j << " + b) : "
             << vt(j) << "{};\n";
    else line() << vt(j) << " w" << j << ";\n";
  o_ << lanes.str();
  for (const auto& [j, g] : vec_used_)
    if (j >= k_.loads.size()) line() << "if (live) *reinterpret_cast<" << vt(j) << "*>(rp" << j << " + b) = w" << j << ";\n";
  --indent_;
  line() << "}\n";
  --indent_;
  line() << "}\n";
  for (int& c : cached_) c = c == 3 ? 2 : c;  // (filled by this pass: read from the cache after it)
}

// A pass over the row's elements [from, end) by `step`: with row_vec_ > 1, the whole vectors
// from the row's start go VEC elements per load and per store when every vector operand's row
// start is aligned (checked per row: a sliced operand's rows may not be), `body` running once
// per element of each vector in order; the rest of the row (or all of it) element by element.
// The body is rendered first, so that only the vectors it reads are loaded before it and only
// those it writes are stored after it. In a row loop every pass takes the row's one check
// (row_nv_), so that each thread visits the same elements in every pass: a BlockRow thread
// reads back from its shared-memory row cache only what it wrote there.
//
// RowSplit's pass over its chunk [lo, hi) of the row (lo a multiple of 32 elements) goes the
// same way from lo: vectors lo / VEC + t0, + nt, ... up to hi's whole vectors, then the
// elements past them.
template <class Body>
void Renderer::row_pass(const std::string& from, const std::string& step, Body&& body, const std::string& end) {
  const bool chunk = out_.strategy == CudaStrategy::RowSplit;
  // (vectors are counted from the row's start: a pass over another part of the row goes element by element)
  // (and a WarpRow cache's passes are all vector passes: row_loop)
  if (row_vec_ < 2 || (!end.empty() && !chunk) || cache_iters_) return row_loop(from, step, body, end);
  const int V = row_vec_;
  const std::string Vs = std::to_string(V) + "u";
  std::string nv = row_nv_, vfrom = from, tail = from;
  if (chunk) {
    nv = fresh("nv");
    line() << "const " << I_ << " " << nv << " = " << row_aligned() << " ? " << end << " / " << Vs << " : lo / " << Vs << ";\n";
    // (the elements past the vectors start at lo where there are none: an empty last chunk's
    // lo is the row's length, which its nv may be short of)
    vfrom = "lo / " + Vs + " + " + t0_, tail = t0_;
    line() << "const " << I_ << " " << nv << "e = " << nv << " * " << Vs << " > lo ? " << nv << " * " << Vs << " : lo;\n";
  } else if (nv.empty()) {  // (Split: its one pass checks its own operands, its early stores too)
    nv = fresh("nv");
    line() << "const " << I_ << " " << nv << " = " << row_aligned() << " ? " << row_len() << " / " << Vs << " : 0u;\n";
  }
  open_counted_loop(I_, "q", vfrom, nv, step);
  line() << "const " << I_ << " base = q * " << Vs << ";\n";
  std::ostringstream lanes;
  std::swap(o_, lanes);
  vec_used_.clear();
  cache_read_.clear(), cache_filled_.clear();
  const std::vector<int> cache = cached_;
  vector_lanes("base", body);
  std::swap(o_, lanes);
  // (a row group's copy g reads its own vector of an operand that moves along loop 0: l<j>_<g>)
  auto at = [&](size_t j, int g) {
    const std::string c0 = coord_.empty() ? "" : coord_[0];
    if (g >= 0) coord_[0] = copy_coord(g);
    std::string a = (j < k_.loads.size() ? "p" : "s") + std::to_string(j) + " + " + row_start(j) + " + base";
    if (g >= 0) coord_[0] = c0;
    return a;
  };
  auto vt = [&](size_t j) { return vec_type(operand(j).dtype, V); };
  auto ct = [&](size_t id) { return "kiln_vec<" + std::string(ctype(code_.code[id].type)) + ", " + std::to_string(V) + ">"; };
  for (const auto& [j, g] : vec_used_)
    if (j < k_.loads.size())
      line() << "const " << vt(j) << " l" << j << (g >= 0 ? "_" + std::to_string(g) : "") << " = *reinterpret_cast<const "
             << vt(j) << "*>(" << at(j, g) << ");\n";
    else line() << vt(j) << " w" << j << ";\n";
  // (a BlockRow row cache's vector, in or out of shared memory in one access)
  for (size_t id : cache_read_)
    line() << "const " << ct(id) << " c" << id << " = *reinterpret_cast<const " << ct(id) << "*>(rs" << id << " + base);\n";
  for (size_t id : cache_filled_) line() << ct(id) << " c" << id << ";\n";
  o_ << lanes.str();
  for (const auto& [j, g] : vec_used_)
    if (j >= k_.loads.size()) line() << "*reinterpret_cast<" << vt(j) << "*>(" << at(j, g) << ") = w" << j << ";\n";
  for (size_t id : cache_filled_) line() << "*reinterpret_cast<" << ct(id) << "*>(rs" << id << " + base) = c" << id << ";\n";
  close_counted_loop();
  cached_ = cache;  // (the elements past the whole vectors fill the row cache as well)
  row_loop((chunk ? nv + "e" : nv + " * " + Vs) + " + " + tail, step, body, end);
}

// Whether the vector operands' data (loads and stores) at the row's start is aligned.
// (In a row group's later copies, only the operands that move along loop 0: the others are
// the first copy's.)
std::string Renderer::row_aligned() {
  std::string all;
  for (size_t j = 0; j < nops(); ++j)
    if (linear_[j] && (copy_ <= 0 || moves(operand(j), 0)))
      all += std::string(all.empty() ? "" : " && ") + aligned(j, row_start(j), row_vec_);
  return all;
}

// A cached load's element at the current row position, to be read (or with `fill`, written):
// WarpRow's register (`it` a constant in each unrolled copy), BlockRow's slot in shared memory
// (the thread's own: each thread reads back only the positions it wrote, so no barrier is
// needed), in a vector pass a lane of the vector row_pass moves to or from there at once.
std::string Renderer::cache_slot(size_t id, bool fill) {
  if (cache_row_ && vec_) {
    (fill ? cache_filled_ : cache_read_).insert(id);
    return "c" + std::to_string(id) + ".v[u]";
  }
  if (cache_row_) return "rs" + std::to_string(id) + "[e]";
  return "rc" + std::to_string(id) + (row_vec_ > 1 ? "[it * " + std::to_string(row_vec_) + " + u]" : "[it]");
}

// Rows read in more than one pass (softmax: the max, the sum of exponentials, the stores;
// layernorm: the mean, the variance, the stores): the loads that differ from row to row are
// kept from the first pass that reads them, so the row is read from memory once. WarpRow
// keeps them in registers, BlockRow (rows past 2048: layernorm over a hidden size of 4096)
// in shared memory. Loads broadcast over the rows (layernorm's weight and bias) are left to
// the caches.
void Renderer::plan_row_cache(const RowPlan& p) {
  cache_iters_ = cache_row_ = 0;
  cached_.clear();
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
void Renderer::declare_scans(const std::vector<int>& need) {
  for (int id : need) {
    const Instr& in = code_.code[size_t(id)];
    if (in.op != EOp::Scan) continue;
    const bool declared = !scans_declared_.insert(id).second;
    line() << (declared ? "" : std::string(ctype(in.type)) + " ") << "scan" << id << " = " << identity(in) << ";\n";
  }
}

// BlockRow, WarpRow, ThreadRow: rows spread over groups, each group walking its rows.
// A WarpRow kernel with a row cache whose operands can go by vectors has its row loop twice:
// by vectors where every vector operand's data is aligned (then so is every row's start:
// plan_row_vector), element by element otherwise (a sliced input). The check is one per
// kernel, so neither loop carries the other's loads, as a check per row would have them
// (ptxas then predicates both kinds of load on it).
void Renderer::rows() {
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
  const std::string loop = "for (" + I_ + " row = " + group + "; row < " + nrows() + "; row += " + groups + ") {\n";
  const RowPlan p = row_plan(k_, code_);
  plan_row_cache(p);
  plan_row_vector(p);
  if (!(cache_iters_ && row_vec_ > 1)) return row_loop_body(p, loop);
  line() << "if (" << kernel_aligned(true) << ") {\n";
  ++indent_;
  row_loop_body(p, loop);
  --indent_;
  line() << "} else {\n";
  ++indent_;
  const int V = row_vec_;
  row_vec_ = 1;  // (and the cache element by element again)
  linear_.assign(nops(), false);
  plan_row_cache(p);
  row_loop_body(p, loop);
  out_.vector = V;
  --indent_;
  line() << "}\n";
}

// Row groups (BlockRow, WarpRow). A reduction over a broadcast, n-body's forces summed over j
// for each component c of [2, N, N], computes per element much that does not depend on c
// (the distance, its square root, the masses' product): a block or warp per row would compute
// it once per component. When the outermost row loop is short (at most kGroupMax), a block or
// warp takes its rows together instead, and renders each instruction that varies along loop
// 0 once per copy (v<id>_<g>, with loop 0's coordinate the constant g) and the others once
// for all; each copy has its own accumulators and stores. Only where that sharing exists
// (some arithmetic along the row that does not vary along loop 0), the rows are read in one
// pass and stored once each (no row cache, no stores along the row), and enough groups
// remain to fill the GPU (kBlockGroupsMin, kWarpGroupsMin). Specialised kernels only;
// KILN_CUDA_ROW_GROUPS=0 turns groups off (a sweep's baseline).
void Renderer::plan_groups() {
  group_ = 1;
  const int64_t g = rank() > 0 ? k_.loops[0] : 1;
  const int64_t least = out_.strategy == CudaStrategy::BlockRow ? kBlockGroupsMin : kWarpGroupsMin;
  if (generic_ || rf() < 2 || g < 2 || g > kGroupMax || rows_ / g < least || code_.depth != 1 || !env::cuda_row_groups())
    return;
  if (!row_plan(k_, code_).in_row.empty()) return;
  std::vector<bool> along(code_.code.size(), false);
  bool shares = false;
  for (size_t id = 0; id < code_.code.size(); ++id) {
    const Instr& in = code_.code[id];
    bool a = in.op == EOp::Reduce || in.op == EOp::Scan;  // (each copy's own accumulators)
    if (in.op == EOp::Load) a = moves(k_.loads[size_t(in.index)], 0);
    for (int x : in.args) a = a || along[size_t(x)];
    along[id] = a;
    // (work: not a load, a constant, a host number or the position in the row)
    shares |= in.row && !a && in.op != EOp::Load && in.op != EOp::Const && in.op != EOp::Arg && in.op != EOp::RowIndex &&
              in.op != EOp::RowCount;
  }
  if (!shares) return;
  group_ = out_.group = int(g);
  rows_ /= g;  // (the row loop's count: the groups)
  along0_ = std::move(along);
}

// Switches the rendering to row group copy g (-1: none): the variables of the instructions
// that vary along loop 0 become that copy's, and loop 0's coordinate its constant.
void Renderer::use_copy(int g) {
  if (copy_ == g) return;
  for (size_t id = 0; id < along0_.size(); ++id) {
    if (!along0_[id]) continue;
    if (copy_ >= 0) copy_memo_[size_t(copy_)][id] = memo_[id];
    memo_[id] = g >= 0 ? copy_memo_[size_t(g)][id] : "";
  }
  copy_ = g;
  if (rank() > 0) coord_[0] = g >= 0 ? copy_coord(g) : "";
}

// `body` once per copy of a row group (once, with no groups).
template <class Body>
void Renderer::each_copy(Body&& body) {
  if (group_ == 1) return body();
  for (int g = 0; g < int(group_); ++g) {
    use_copy(g);
    body();
  }
  use_copy(-1);
}

// The loop over the rows: per row, one pass per reduction depth, then the stores.
void Renderer::row_loop_body(const RowPlan& p, const std::string& loop) {
  coord_.assign(size_t(rank()), "");
  memo_.assign(code_.code.size(), "");
  scans_declared_.clear();
  copy_ = -1;
  copy_memo_.assign(size_t(group_ > 1 ? group_ : 0), std::vector<std::string>(code_.code.size()));
  // Where the row's vectors end, for every pass over it (row_pass): checked per row, or with a
  // BlockRow row cache once per kernel, so that every row splits the same way between the
  // vectors and the elements after them and each thread owns the same cache slots row after
  // row (with no barrier between a row's last pass and the next row's first).
  row_nv_.clear();
  const bool vectors = row_vec_ > 1 && !cache_iters_;
  if (vectors && cache_row_) {
    row_nv_ = "nvr";
    line() << "const " << I_ << " nvr = " << kernel_aligned(false) << " ? " << row_len() << " / " << row_vec_ << "u : 0u;\n";
  }
  line() << loop;
  ++indent_;
  decompose("row", group_ > 1 ? 1 : 0, rf());  // (a row group's loop 0: each copy's constant)
  if (vectors && !cache_row_) {
    row_nv_ = "nvr";
    std::string all;
    each_copy([&] {  // (a later copy may have no vector operand of its own: nothing to add)
      if (std::string a = row_aligned(); !a.empty()) all += (all.empty() ? "" : " && ") + a;
    });
    line() << "const " << I_ << " nvr = " << all << " ? " << row_len() << " / " << row_vec_ << "u : 0u;\n";
  }
  if (cache_iters_ && row_vec_ > 1)
    for (size_t j = 0; j < nops(); ++j) {  // the vector operands at the row's start
      if (!linear_[j]) continue;
      const bool ld = j < k_.loads.size();
      const std::string at = row_start(j);
      line() << (ld ? "const " : "") << storage_ctype(operand(j).dtype) << "* rp" << j << " = " << (ld ? "p" : "s") << j
             << (at == "0" ? "" : " + " + at) << ";\n";
    }
  for (size_t id = 0; id < cached_.size(); ++id) {
    if (!cached_[id]) continue;
    if (cache_row_) {
      // (aligned for the vector passes' whole-vector accesses)
      const std::string align =
          row_vec_ > 1 ? "alignas(" + std::to_string(row_vec_ * itemsize(code_.code[id].type)) + ") " : "";
      line() << align << "__shared__ " << ctype(code_.code[id].type) << " rs" << id << "[" << cache_row_ << "];  // row cache\n";
    }
    else line() << ctype(code_.code[id].type) << " rc" << id << "[" << cache_iters_ << "];  // row cache\n";
  }
  // (a row group's accumulators and results: acc<id>_<g>, v<id>_<g>)
  auto acc = [&](int r) { return "acc" + std::to_string(r) + copy_suffix(true); };
  for (int depth = 1; depth <= code_.depth; ++depth) {
    const std::vector<int>& need = p.needs[size_t(depth - 1)];
    each_copy([&] {
      for (int id : need)
        if (!code_.code[size_t(id)].row) value(id);
    });
    each_copy([&] {
      for (int r : p.reduces[size_t(depth)])
        line() << ctype(code_.code[size_t(r)].type) << " " << acc(r) << " = " << identity(code_.code[size_t(r)]) << ";\n";
    });
    declare_scans(need);
    row_pass(t0_, nt_, [&] {
      each_copy([&] {
        for (int id : need)
          if (code_.code[size_t(id)].row) value(id);
        for (int r : p.reduces[size_t(depth)]) {
          const Instr& in = code_.code[size_t(r)];
          accumulate(in, acc(r), value(in.args[0]));
        }
      });
    });
    each_copy([&] {
      for (int r : p.reduces[size_t(depth)]) {
        const Instr& in = code_.code[size_t(r)];
        const std::string v = "v" + std::to_string(r) + copy_suffix(true);
        line() << "const " << ctype(in.type) << " " << v << " = " << group_reduce(in, acc(r)) << ";\n";
        memo_[size_t(r)] = v;
      }
    });
  }
  if (!p.per_row.empty()) {
    // every thread of the group holds the row's values; its first thread stores them
    line() << "if (" << t0_ << " == 0u) {\n";
    ++indent_;
    auto saved = memo_;
    auto saved_copies = copy_memo_;
    each_copy([&] { store_all(p.per_row, ""); });
    memo_ = saved;  // (values declared inside the if are out of scope after it)
    copy_memo_ = saved_copies;
    --indent_;
    line() << "}\n";
  }
  if (!p.in_row.empty()) {
    for (int id : p.needs.back())
      if (!code_.code[size_t(id)].row) value(id);
    declare_scans(p.needs.back());
    row_pass(t0_, nt_, [&] {
      store_all(p.in_row, "");
    });
  }
  --indent_;
  line() << "}\n";
}

// A two-step kernel's partial step: its one pass over the row's elements [from, end) by
// `step`, each reduction into accumulator acc<id>, and the early stores (Split) of each element.
void Renderer::partial_pass(const RowPlan& p, const std::string& from, const std::string& step, const std::string& end) {
  const std::vector<int>& need = p.needs[0];
  for (int id : need)
    if (!code_.code[size_t(id)].row) value(id);
  for (int r : p.reduces[1]) line() << ctype(code_.code[size_t(r)].type) << " acc" << r << " = " << identity(code_.code[size_t(r)]) << ";\n";
  row_pass(from, step, [&] {
    for (int id : need)
      if (code_.code[size_t(id)].row) value(id);
    for (int r : p.reduces[1]) {
      const Instr& in = code_.code[size_t(r)];
      accumulate(in, "acc" + std::to_string(r), value(in.args[0]));
    }
    store_all(p.early, "");
  }, end);
}

void Renderer::split_partial() {
  coord_.assign(size_t(rank()), "");
  memo_.assign(code_.code.size(), "");
  RowPlan p = row_plan(k_, code_, true);
  plan_row_vector(p);
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

void Renderer::split_finish() {
  coord_.assign(size_t(rank()), "");
  memo_.assign(code_.code.size(), "");
  RowPlan p = row_plan(k_, code_, true);  // (its early stores are the partial step's)
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

// The slot of reduction q's partial result for chunk `part` of `row`: laid out chunk-major,
// then by reduction, then by row, so that neighbouring threads (neighbouring rows) write and
// read neighbouring slots.
std::string Renderer::column_slot(const std::string& part, size_t q) const {
  return "parts + ((unsigned long long)" + part + " * " + std::to_string(out_.slots) + "u + " + std::to_string(q) + "u) * " +
         nrows() + " + row";
}

// Thread t takes row t % nrows and its chunk t / nrows (nparts chunks per row, the last ones
// possibly shorter or empty), walking the chunk in order into its slots.
void Renderer::column_partial() {
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

// Block g takes chunk g % nparts of row g / nparts (neighbouring blocks: neighbouring chunks of
// a row), its threads striding over the chunk, and puts the block's result into the chunk's
// slots (ColumnSplit's layout, which column_finish reads); early stores go as the elements are
// read. Chunks are whole multiples of 32 elements, so that every warp's reads start at a row
// position that is a multiple of 32.
void Renderer::row_partial() {
  coord_.assign(size_t(rank()), "");
  memo_.assign(code_.code.size(), "");
  RowPlan p = row_plan(k_, code_, true);
  t0_ = "(" + I_ + ")threadIdx.x", nt_ = "blockDim.x";
  plan_row_vector(p);
  line() << "const " << I_ << " nchunks = (" << I_ << ")nparts, chunk = (" << row_len() << " + nchunks * 32u - 1u) / (nchunks * 32u) * 32u;\n";
  line() << "for (" << I_ << " g = (" << I_ << ")blockIdx.x; g < " << nrows() << " * nchunks; g += (" << I_ << ")gridDim.x) {\n";
  ++indent_;
  line() << "const " << I_ << " row = g / nchunks, part = g % nchunks;\n";
  line() << "const " << I_ << " lo = part * chunk < " << row_len() << " ? part * chunk : " << row_len() << ", hi = lo + chunk < "
         << row_len() << " ? lo + chunk : " << row_len() << ";\n";
  decompose("row", 0, rf());
  partial_pass(p, "lo + " + t0_, nt_, "hi");
  for (size_t q = 0; q < p.reduces[1].size(); ++q) {
    const int r = p.reduces[1][q];
    const std::string acc = "acc" + std::to_string(r);
    line() << acc << " = " << group_reduce(code_.code[size_t(r)], acc) << ";\n";
    line() << "if (threadIdx.x == 0) kiln_put(" << column_slot("part", q) << ", " << acc << ");\n";
  }
  --indent_;
  line() << "}\n";
}

// A thread per row: its chunks' slots combined in chunk order, then the row's stores.
void Renderer::column_finish() {
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

}  // namespace kiln::codegen::cuda_render
