// Joining and indexing: cat, stack, split, chunk, index_select, gather.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>

#include "ops_common.h"

namespace kiln {

using namespace detail;

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  KILN_TRACE_LIST(Cat, ts, ({"dim", dim}), cat(ts, dim))
  KILN_CHECK(!ts.empty(), "cat", "torch.cat(): expected a non-empty list of Tensors");
  // PyTorch skips legacy 1-d empty tensors ([0]) when the others have more dims.
  const Tensor* ref = nullptr;
  for (auto& t : ts)
    if (!(t.dim() == 1 && t.numel() == 0)) { ref = &t; break; }
  if (!ref) ref = &ts[0];
  int64_t nd = ref->dim();
  KILN_CHECK(nd > 0, "cat", "zero-dimensional tensor cannot be concatenated");
  int64_t d = shape::wrap_dim(dim, nd, "cat");
  DType dt = ts[0].dtype();
  std::vector<Arg> args;
  for (auto& t : ts) args.emplace_back(t);
  dt = result_type(std::span<const Arg>(args));
  std::vector<int64_t> out_shape = ref->sizes().vec();
  out_shape[d] = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    check_cpu("cat", {t});
    if (t.dim() == 1 && t.numel() == 0 && nd != 1) continue;
    KILN_CHECK(t.dim() == nd, "cat", "Tensors must have same number of dimensions: got ", nd, " and ", t.dim());
    for (int64_t k = 0; k < nd; ++k)
      KILN_CHECK(k == d || t.sizes()[k] == ref->sizes()[k], "cat", "Sizes of tensors must match except in dimension ",
                 d, ". Expected size ", ref->sizes()[k], " but got size ", t.sizes()[k], " for tensor number ", i,
                 " in the list.");
    KILN_CHECK(!__builtin_add_overflow(out_shape[d], t.sizes()[d], &out_shape[d]), "cat",
               "the sizes along dimension ", d, " sum past int64 at tensor number ", i);
  }
  Tensor out = empty_for(out_shape, dt, "cat");
  auto skipped = [&](const Tensor& t) { return t.dim() == 1 && t.numel() == 0 && nd != 1; };
  bool slabs = d > 0;
  for (auto& t : ts) slabs &= skipped(t) || (t.dtype() == dt && t.is_contiguous());
  if (slabs) {
    // Inputs of out's dtype, each contiguous: at every index of the dims before d, each input's
    // slab of bytes goes next to the one before in out's row. (Through copy_ into narrowed views,
    // a cat of narrow matrices along dim 1 paid an iteration step for every row: [65536, 16]
    // with itself took 2-3x PyTorch's time.)
    int64_t outer = 1, inner = 1;
    for (int64_t k = 0; k < d; ++k) outer *= out_shape[size_t(k)];
    for (int64_t k = d + 1; k < nd; ++k) inner *= out_shape[size_t(k)];
    const int64_t item = int64_t(itemsize(dt)), row = out_shape[size_t(d)] * inner * item;
    struct Slab { const char* src; int64_t bytes, at; };
    std::vector<Slab> parts;
    int64_t at = 0;
    for (auto& t : ts) {
      if (skipped(t)) continue;
      const int64_t bytes = t.sizes()[d] * inner * item;
      if (bytes == 0) continue;  // (an empty input's data may be null: memcpy must not see it)
      parts.push_back({static_cast<const char*>(t.data_ptr()), bytes, at});
      at += bytes;
    }
    char* o = static_cast<char*>(out.data_ptr());
    cpu::parallel_for(outer, std::max<int64_t>(1, 4 * cpu::parallel_grain() / std::max<int64_t>(row, 1)),
                      [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        for (const Slab& p : parts) std::memcpy(o + i * row + p.at, p.src + i * p.bytes, size_t(p.bytes));
    });
    return out;
  }
  int64_t off = 0;
  for (auto& t : ts) {
    if (skipped(t)) continue;
    out.narrow(d, off, t.sizes()[d]).copy_(t);
    off += t.sizes()[d];
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  trace::Internal internal_;  // the reads below are the op's, not the user's
  KILN_CHECK(!ts.empty(), "stack", "stack expects a non-empty TensorList");
  int64_t d = shape::wrap_dim(dim, ts[0].dim() + 1, "stack");
  for (size_t i = 1; i < ts.size(); ++i)
    KILN_CHECK(ts[i].sizes() == ts[0].sizes(), "stack", "stack expects each tensor to be equal size, but got ",
               ts[0].sizes().vec(), " at entry 0 and ", ts[i].sizes().vec(), " at entry ", i);
  std::vector<Tensor> us;
  for (auto& t : ts) us.push_back(t.unsqueeze(d));
  return cat(us, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) { return x.split(split_size, dim); }
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) { return x.chunk(chunks, dim); }

namespace {
void check_index_dtype(std::string_view op, const Tensor& index) {
  KILN_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, op, op,
             "(): Expected dtype int32/int64 for index, got ", name(index.dtype()));
}

// out[p] = xb[p] moved by index[p] * xs elements, over out's shape: xb is x with the gathered
// dim's stride 0 and index (int64) broadcast to out's shape. Returns an index outside
// [0, size) if one was met (the threads meet them in any order), else nullopt.
std::optional<int64_t> gather_elements(const Tensor& out, const Tensor& index, const Tensor& xb, int64_t size, int64_t xs) {
  std::atomic<bool> bad_seen{false};
  std::atomic<int64_t> bad{0};
  KILN_DISPATCH_ALL(out.dtype(), "gather", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
    using T = scalar_t;
    cpu::Iter it({out, index, xb}, out.sizes());
    it.for_each([&](char** p, const int64_t* s, int64_t n) {
      if (s[0] == sizeof(T) && s[1] == sizeof(int64_t) && s[2] == 0) {
        // (the common row: out and the index contiguous, x's position fixed: typed pointers and
        // the range check as a pass of its own keep the copy loop to a load, a load and a store)
        T* out_row = reinterpret_cast<T*>(p[0]);
        const int64_t* index_row = reinterpret_cast<const int64_t*>(p[1]);
        const T* x_row = reinterpret_cast<const T*>(p[2]);
        bool in_range = true;
        for (int64_t i = 0; i < n; ++i) in_range &= uint64_t(index_row[i]) < uint64_t(size);
        if (in_range) {
          for (int64_t i = 0; i < n; ++i) out_row[i] = x_row[index_row[i] * xs];
          return;
        }
      }
      for (int64_t i = 0; i < n; ++i) {
        int64_t j = *reinterpret_cast<const int64_t*>(p[1] + i * s[1]);
        if (j < 0 || j >= size) {
          bad.store(j);
          bad_seen.store(true);
          continue;
        }
        *reinterpret_cast<T*>(p[0] + i * s[0]) = reinterpret_cast<const T*>(p[2] + i * s[2])[j * xs];
      }
    });
  });
  if (bad_seen.load()) [[unlikely]]
    return bad.load();
  return std::nullopt;
}
}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index_in) {
  KILN_TRACE(IndexSelect, (x, index_in), ({"dim", dim}), index_select(x, dim, index_in))
  check_cpu("index_select", {x, index_in});
  check_index_dtype("index_select", index_in);
  KILN_CHECK(index_in.dim() <= 1, "index_select", "index_select(): Index is supposed to be a vector, got shape ",
             index_in.sizes().vec());
  int64_t d = shape::wrap_dim(dim, x.dim(), "index_select");
  Tensor index = index_in.to(kInt64).contiguous();
  const int64_t* idx = index.data_ptr<int64_t>();
  int64_t n = index.numel(), size = x.dim() ? x.sizes()[d] : 1;
  for (int64_t i = 0; i < n; ++i)
    KILN_CHECK(idx[i] >= 0 && idx[i] < size, "index_select", "index out of range in self: index ", idx[i],
               " at position ", i, " for dimension ", d, " of size ", size);
  std::vector<int64_t> shape = x.sizes().vec();
  if (x.dim() == 0) {
    KILN_CHECK(n == 1, "index_select", "index_select(): a 0-dim input takes exactly one index, got ", n);
    return x.clone();
  }
  shape[d] = n;
  Tensor out = empty_for(shape, x.dtype(), "index_select");
  if (out.numel() == 0) return out;
  // x contiguous and the slices after dim d long enough: one memcpy per (outer position,
  // index) block. Otherwise one gather over every element, the index read along d only.
  int64_t inner = 1, outer = 1;
  for (int64_t k = 0; k < d; ++k) outer *= shape[size_t(k)];
  for (int64_t k = d + 1; k < x.dim(); ++k) inner *= shape[size_t(k)];
  if (x.is_contiguous() && inner >= 16) {
    const size_t block = size_t(inner) * x.element_size();
    const char* src = static_cast<const char*>(x.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    cpu::parallel_for(outer * n, std::max<int64_t>(1, cpu::parallel_grain() / inner), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t o = r / n, i = r % n;
        std::memcpy(dst + size_t(r) * block, src + size_t(o * size + idx[i]) * block, block);
      }
    });
    return out;
  }
  std::vector<int64_t> index_strides(shape.size(), 0), x_strides = x.strides().vec();
  index_strides[size_t(d)] = 1;
  x_strides[size_t(d)] = 0;
  gather_elements(out, index.as_strided(shape, index_strides, index.storage_offset()),
                  x.as_strided(shape, x_strides, x.storage_offset()), size, x.strides()[size_t(d)]);
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index_in) {
  KILN_TRACE(Gather, (x, index_in), ({"dim", dim}), gather(x, dim, index_in))
  check_cpu("gather", {x, index_in});
  KILN_CHECK(index_in.dtype() == kInt64, "gather", "gather(): Expected dtype int64 for index, got ",
             name(index_in.dtype()));
  int64_t nd = std::max<int64_t>(x.dim(), 1);
  int64_t d = shape::wrap_dim(dim, x.dim(), "gather");
  KILN_CHECK(std::max<int64_t>(index_in.dim(), 1) == nd, "gather",
             "Index tensor must have the same number of dimensions as input tensor (input ", x.sizes().vec(),
             ", index ", index_in.sizes().vec(), ")");
  Tensor xv = x.dim() == 0 ? x.view({1}) : x;
  Tensor index = (index_in.dim() == 0 ? index_in.view({1}) : index_in).to(kInt64);
  for (int64_t k = 0; k < nd; ++k)
    KILN_CHECK(k == d || index.sizes()[k] <= xv.sizes()[k], "gather", "Size does not match at dimension ", k,
               " expected index ", index_in.sizes().vec(), " to be smaller than self ", x.sizes().vec(),
               " apart from dimension ", d);
  Tensor out = empty(index.sizes(), x.dtype());
  int64_t size = xv.sizes()[d], xs = xv.strides()[d];
  // Iterate out/index together with x's view restricted to index's extent and dim d pinned.
  std::vector<int64_t> base_sizes = index.sizes().vec();
  std::vector<int64_t> base_strides = xv.strides().vec();
  base_strides[d] = 0;
  Tensor xb = xv.as_strided(base_sizes, base_strides, xv.storage_offset());
  if (std::optional<int64_t> bad = gather_elements(out, index, xb, size, xs)) [[unlikely]] {
    // The first bad index in row-major order (the threads saw them in any order), as the GPU's
    // gather reports it.
    const std::vector<int64_t> flat = index.contiguous().to_vector<int64_t>();
    auto first = std::find_if(flat.begin(), flat.end(), [&](int64_t j) { return j < 0 || j >= size; });
    KILN_FAIL("gather", "index ", first != flat.end() ? *first : *bad, " is out of bounds for dimension ", d,
              " with size ", size);
  }
  return x.dim() == 0 ? out.view({}) : out;
}

Tensor Tensor::index_select(int64_t d, const Tensor& i) const { return kiln::index_select(*this, d, i); }
Tensor Tensor::gather(int64_t d, const Tensor& i) const { return kiln::gather(*this, d, i); }

}  // namespace kiln
