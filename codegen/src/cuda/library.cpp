// Library ops on GPU tensors (library.h): cuBLAS products and einsum through the runtime's
// device_ops::run_library, cat as device copies, gather and index_select as one gather kernel.
#include "library.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include "kiln/ir/attrs.h"
#include "kiln/runtime/cuda.h"
#include "kiln/runtime/device_ops.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/factories.h"
#include "module.h"

namespace kiln::codegen {

namespace {

int64_t wrap(int64_t d, int64_t rank) { return d < 0 ? d + rank : d; }

// ---------------------------------------------------------------- gather

// One gather: out[p] = x[p with dim d replaced by index[p]] over the loop space `sizes` (the
// index's and the result's sizes). index_select is a gather whose index is read along d only
// (stride 0 over the other dims). The kernel is size-generic: its body depends on the element
// size, the rank, d and the index width only, and every size and stride is a parameter, so a
// gather of a new shape loads the kernel it already has.
struct Gather {
  std::vector<int64_t> sizes, x_strides, i_strides, o_strides;  // x_strides[d] is unused (0)
  int64_t d = 0, size_d = 1, x_stride_d = 0;
  size_t elem = 4;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  // Whether every index and offset fits in 31 bits.
  bool fits32() const {
    const int64_t lim = int64_t(1) << 31;
    int64_t rx = (size_d - 1) * x_stride_d, ri = 0, ro = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      rx += (sizes[k] - 1) * x_strides[k];
      ri += (sizes[k] - 1) * i_strides[k];
      ro += (sizes[k] - 1) * o_strides[k];
    }
    return numel() < lim && rx < lim && ri < lim && ro < lim;
  }
  // What the kernel's body depends on.
  std::string structure() const {
    return std::to_string(elem) + " " + std::to_string(sizes.size()) + " " + std::to_string(d) + (fits32() ? " i32" : " i64");
  }

  // The parameters after the three pointers: the item count, dim d's size and x's stride along
  // it, then per dim its size and the strides of x, the index and the result along it, and with
  // 32-bit indices (but for dim 0, which takes what is left) its size's divisor (kiln_udiv).
  std::vector<int64_t> size_args() const {
    std::vector<int64_t> v{numel(), size_d, x_stride_d};
    for (size_t k = 0; k < sizes.size(); ++k) {
      v.insert(v.end(), {sizes[k], k == size_t(d) ? 0 : x_strides[k], i_strides[k], o_strides[k]});
      if (k > 0 && fits32()) v.push_back(int64_t(cuda_divisor_magic(std::max<int64_t>(1, sizes[k]))));  // (empty: no item divides)
    }
    return v;
  }

  CudaKernel kernel() const {
    static const char* const bits[] = {"", "unsigned char", "unsigned short", "", "unsigned", "", "", "", "unsigned long long"};
    const std::string T = bits[elem], name = "kiln_gather";
    const bool i32 = fits32();
    const std::string I = i32 ? "unsigned" : "unsigned long long", S = i32 ? "int" : "long long";
    const size_t rank = sizes.size();
    std::ostringstream o;
    o << "// gather: " << elem << "-byte elements, rank " << rank << ", along dim " << d << "\n"
      << "extern \"C\" __global__ void __launch_bounds__(" << kCudaBlock << ") " << name << "(const " << T
      << "* __restrict__ x, const long long* __restrict__ index, " << T
      << "* __restrict__ out, long long n_items, long long size_d, long long x_stride_d";
    for (size_t k = 0; k < rank; ++k) {
      o << ", long long n" << k << ", long long xs" << k << ", long long is" << k << ", long long os" << k;
      if (k > 0 && i32) o << ", unsigned long long div" << k;
    }
    o << ", unsigned long long* __restrict__ status) {\n"
      << "  for (" << I << " i = (" << I << ")blockIdx.x * blockDim.x + threadIdx.x; i < (" << I << ")n_items; i += (" << I
      << ")gridDim.x * blockDim.x) {\n"
      << "    " << I << " r = i;\n    " << S << " xo = 0, io = 0, oo = 0;\n";
    // innermost dim first; the outermost takes what is left of r
    for (size_t k = rank; k-- > 0;) {
      const std::string n = "(" + I + ")n" + std::to_string(k);
      if (k == 0) o << "    { const " << S << " c = (" << S << ")r;";
      else if (i32) o << "    { const unsigned q = kiln_udiv(r, div" << k << "); const int c = (int)(r - q * " << n << "); r = q;";
      else o << "    { const " << S << " c = (" << S << ")(r % " << n << "); r /= " << n << ";";
      if (k != size_t(d)) o << " xo += c * (" << S << ")xs" << k << ";";
      o << " io += c * (" << S << ")is" << k << "; oo += c * (" << S << ")os" << k << "; }\n";
    }
    o << "    const long long j = index[io];\n"
      << "    if (j < 0 || j >= size_d) { atomicMin(status, (unsigned long long)i); continue; }\n"
      << "    out[oo] = x[xo + (" << S << ")j * (" << S << ")x_stride_d];\n"
      << "  }\n}\n"
      << "#if defined(KILN_CUDA_EMULATION)\n"
      << "extern \"C\" void " << name << "_emu(void** p, unsigned grid, unsigned block) {\n"
      << "  kiln_emu::launch(grid, block, [&] { " << name << "(*(const " << T << "**)p[0], *(const long long**)p[1], *("
      << T << "**)p[2]";
    const std::vector<int64_t> args = size_args();
    const size_t nsizes = args.size();
    for (size_t j = 0; j < nsizes; ++j) o << ", *(long long*)p[" << 3 + j << "]";
    o << ", *(unsigned long long**)p[" << 3 + nsizes << "]); });\n}\n"
      << "extern \"C\" const int " << name << "_emu_params = " << 4 + nsizes << ";\n"
      << "#endif\n";
    CudaKernel k;
    k.name = name;
    k.body = o.str();
    k.items = numel();
    k.index32 = i32;
    k.generic = true;
    k.size_args = args;
    k.param_types = {"const " + T + "*", "const long long*", T + "*"};
    k.param_types.insert(k.param_types.end(), nsizes, "long long");
    name_by_content(k);
    return k;
  }
};

struct LoadedGather {
  LoadedKernel fn;
  int multiprocessors = 1;
};

// Runs the gather; on an index out of range raises `fail(value, position)` for the first one.
template <class Fail>
void run_gather(const Gather& g, const Tensor& x, const Tensor& index, const Tensor& out, Fail&& fail) {
  const int dev = out.device().index;
  if (g.numel() == 0) return;
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, LoadedGather> kernels;  // by structure and device
  const std::string key = g.structure();
  LoadedGather lg;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = kernels.find({key, dev});
    if (it != kernels.end()) lg = it->second;
  }
  if (!lg.fn.main) {  // (the body is rendered only to load it; every call brings its own sizes)
    const cuda::DeviceInfo info = cuda::device_info(dev);
    lg.fn = load_kernel(g.kernel(), dev, info.arch);
    lg.multiprocessors = info.multiprocessors;
    std::lock_guard<std::mutex> lock(mu);
    kernels.emplace(std::pair{key, dev}, lg);
  }
  CudaKernel geometry;  // (an elementwise grid over the items)
  geometry.items = g.numel();
  const CudaLaunch dims = cuda_launch_dims(geometry, lg.multiprocessors, cuda::emulated() ? 64 : kCudaBlock);
  DeviceScratch scratch(sizeof(uint64_t), dev);
  void* status = scratch.p;
  cuda::fill_bytes(status, 0xff, sizeof(uint64_t), dev);
  std::vector<uint64_t> v = {uint64_t(reinterpret_cast<uintptr_t>(first_byte(x))),
                             uint64_t(reinterpret_cast<uintptr_t>(first_byte(index))),
                             uint64_t(reinterpret_cast<uintptr_t>(first_byte(out)))};
  for (int64_t a : g.size_args()) v.push_back(uint64_t(a));
  v.push_back(uint64_t(reinterpret_cast<uintptr_t>(status)));
  std::vector<void*> params;
  for (uint64_t& a : v) params.push_back(&a);
  cuda::launch(lg.fn.main, dims.grid, dims.block, params.data(), dev);
  // The index check: the host waits for it, so that a bad index raises eager's error here.
  uint64_t word = 0;
  cuda::copy_to_host(&word, status, sizeof word, dev);
  cuda::synchronize(dev);
  if (word == ~uint64_t(0)) [[likely]]
    return;
  // The first item out of range: its position in the loop space and its index value.
  std::vector<int64_t> at(g.sizes.size());
  int64_t rest = int64_t(word), io = 0;
  for (size_t k = g.sizes.size(); k-- > 0;) {
    at[k] = rest % g.sizes[k];
    rest /= g.sizes[k];
    io += at[k] * g.i_strides[k];
  }
  int64_t j = 0;
  cuda::copy_to_host(&j, first_byte(index) + io * int64_t(sizeof(int64_t)), sizeof j, dev);
  cuda::synchronize(dev);
  fail(j, at);
}

// x (at least 1-d) gathered along d by `index` (int64, the loop space's sizes) into `out`.
Gather gather_geometry(const Tensor& x, int64_t d, const Tensor& index, const Tensor& out) {
  Gather g;
  g.sizes = index.sizes().vec();
  g.x_strides = x.strides().vec();
  g.x_strides[size_t(d)] = 0;
  g.i_strides = index.strides().vec();
  g.o_strides = out.strides().vec();
  g.d = d;
  g.size_d = x.size(d);
  g.x_stride_d = x.stride(d);
  g.elem = x.element_size();
  return g;
}

// A 0-d tensor as a 1-d view of its one element.
Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? t.unsqueeze(0) : t; }

void gather_into(const Tensor& x_in, int64_t dim, const Tensor& index_in, const Tensor& dst) {
  const int64_t d = wrap(dim, std::max<int64_t>(x_in.dim(), 1));
  Tensor x = at_least_1d(x_in), index = at_least_1d(index_in), out = at_least_1d(dst);
  const int64_t size = x.size(d);
  run_gather(gather_geometry(x, d, index, out), x, index, out, [&](int64_t j, const std::vector<int64_t>&) {
    KILN_FAIL("gather", "index ", j, " is out of bounds for dimension ", d, " with size ", size);
  });
}

void index_select_into(const Tensor& x_in, int64_t dim, const Tensor& index_in, const Tensor& dst) {
  const int64_t d = wrap(dim, std::max<int64_t>(x_in.dim(), 1));
  Tensor x = at_least_1d(x_in), out = at_least_1d(dst);
  Tensor index = at_least_1d(index_in);
  if (index.dtype() != kInt64) index = index.to(kInt64);  // (int32 indices: one cast on the device)
  // The index read along d and broadcast over the other dims: a gather.
  std::vector<int64_t> strides(size_t(out.dim()), 0);
  strides[size_t(d)] = index.stride(0);
  Tensor along = index.as_strided(out.sizes().vec(), strides, index.storage_offset());
  const int64_t size = x.size(d);
  run_gather(gather_geometry(x, d, along, out), x, along, out, [&](int64_t j, const std::vector<int64_t>& at) {
    KILN_FAIL("index_select", "index out of range in self: index ", j, " at position ", at[size_t(d)],
              " for dimension ", d, " of size ", size);
  });
}

// ---------------------------------------------------------------- cat

void cat_into(std::span<const Tensor> ts, int64_t dim, const Tensor& dst) {
  // (legacy 1-d empty tensors are skipped when the others have more dims, as eager does)
  auto legacy_empty = [](const Tensor& t) { return t.dim() == 1 && t.numel() == 0; };
  const Tensor* ref = &ts[0];
  for (const Tensor& t : ts)
    if (!legacy_empty(t)) {
      ref = &t;
      break;
    }
  const int64_t nd = ref->dim(), d = wrap(dim, nd);
  int64_t off = 0;
  for (const Tensor& t : ts) {
    if (legacy_empty(t) && nd != 1) continue;
    Tensor slice = dst.narrow(d, off, t.size(d));
    slice.copy_(t);  // (one device memcpy where both are contiguous alike, else one copy kernel)
    off += t.size(d);
  }
}

}  // namespace

CudaKernel cuda_gather_kernel(const Tensor& x, int64_t d, const Tensor& index, const Tensor& out) {
  return gather_geometry(x, d, index, out).kernel();
}

bool cuda_library(OpId op) {
  return device_ops::has_library(op) || op == OpId::Cat || op == OpId::Gather || op == OpId::IndexSelect;
}

std::string cuda_library_how(OpId op) {
  switch (op) {
    case OpId::Einsum: return "views, sums and cuBLAS products";
    case OpId::Cat: return "device copies";
    case OpId::Gather:
    case OpId::IndexSelect: return "a gather kernel";
    default: return "cuBLAS";
  }
}

bool cuda_library_uses_blas(OpId op) { return ir::has_trait(op, ir::kTakesEpilogue); }

std::string cuda_library_graph_refusal(OpId op, DType result) {
  if (ir::has_trait(op, ir::kTakesEpilogue) && !is_floating(result)) return "an integer product runs on the host";
  if (op == OpId::Gather || op == OpId::IndexSelect)
    return std::string(ir::op_info(op).name) + "'s index check is read by the host after its kernel";
  return "";
}

void run_cuda_library_into(OpId op, std::span<const Tensor> in, const std::vector<Attr>& attrs, Tensor dst) {
  trace::Pause pause;  // (the steps are eager ops: a trace running around this call records none of them)
  switch (op) {
    case OpId::Cat: return cat_into(in, ir::decode<OpId::Cat>(attrs).dim, dst);
    case OpId::Gather: return gather_into(in[0], ir::decode<OpId::Gather>(attrs).dim, in[1], dst);
    case OpId::IndexSelect: return index_select_into(in[0], ir::decode<OpId::IndexSelect>(attrs).dim, in[1], dst);
    default: break;
  }
  device_ops::run_library_into(op, in, attrs, dst);  // (a product writes into dst itself where it can)
}

Tensor run_cuda_library(OpId op, std::span<const Tensor> in, const std::vector<Attr>& attrs, const ir::Type& result) {
  if (device_ops::has_library(op)) {
    trace::Pause pause;
    return device_ops::run_library(op, in, attrs);
  }
  Tensor out = empty_strided(result.sizes, result.strides, TensorOptions(result.dtype).device(result.device));
  run_cuda_library_into(op, in, attrs, out);
  return out;
}

}  // namespace kiln::codegen
