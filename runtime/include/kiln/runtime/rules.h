// PyTorch's semantic rules as pure functions over dtypes, sizes and strides: what the eager ops
// (runtime/src) and the IR's type inference (ir/src/infer.cpp) both compute, written once so
// that inference cannot drift from eager.
//
// A rule that can be broken (shapes that do not broadcast, a dim out of range) takes `fail`, a
// callable taking the message's parts (as detail::cat does) that throws: the eager op's
// "[op] ..." or inference's "[infer] op: ...". The message itself is the rule's, the same on
// both sides; it names the offending sizes, dims or values.
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kiln/runtime/array_ref.h"
#include "kiln/runtime/dtype.h"
#include "kiln/runtime/scalar.h"

namespace kiln::rules {

// ---- dtypes ----

// Where an operand ranks in type promotion: dimensioned tensors, then 0-d tensors, then wrapped
// numbers (a Python-style scalar operand: x_int8 + 1000 stays int8).
enum class Rank : uint8_t { Dimensioned, ZeroDim, Wrapped };
struct Promotable {
  DType dtype;
  Rank rank;
};
// torch.result_type: each rank's operands promote among themselves; a lower rank counts only
// when it is of a higher category (bool < integer < float) than the ranks above it. A wrapped
// float counts as the default float dtype. `ops` must not be empty.
DType result_type(std::span<const Promotable> ops);

// The dtype an op that computes in floating point (exp, atan2, true division) takes for a
// promoted dtype: integers and bool compute in the default float dtype.
inline DType float_compute(DType d) { return is_floating(d) ? d : kDefaultFloat; }
// sum's and prod's result dtype when none is given: integers and bool accumulate in int64.
inline DType sum_dtype(DType d) { return is_integral(d, true) ? kInt64 : d; }

// Whether fill_ (and full, masked_fill, a fill node) can store `v` in dtype `dt`: an integer
// dtype takes what it holds (a float value truncated towards zero), a float dtype any value up
// to its largest finite one (infinities and NaN too); bool takes anything.
bool fill_value_fits(const Scalar& v, DType dt);
template <typename Fail>
void check_fill_value(const Scalar& v, DType dt, Fail&& fail) {
  if (fill_value_fits(v, dt)) return;
  if (v.is_floating()) fail("value ", v.to_double(), " cannot be converted to type ", name(dt), " without overflow");
  fail("value ", v.to_int(), " cannot be converted to type ", name(dt), " without overflow");
}

// ---- dims and sizes ----

// A possibly negative dim wrapped into [0, ndim); a 0-d tensor takes -1 and 0.
template <typename Fail>
int64_t wrap_dim(int64_t d, int64_t ndim, Fail&& fail) {
  const int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  if (d < lo || d > hi) fail("Dimension out of range (expected to be in range of [", lo, ", ", hi, "], but got ", d, ")");
  return d < 0 ? d + (ndim > 0 ? ndim : 1) : d;
}

// The broadcast shape of two shapes (torch.broadcast_shapes).
template <typename Fail>
std::vector<int64_t> broadcast_shapes(IntArrayRef a, IntArrayRef b, Fail&& fail) {
  const size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (!(da == db || da == 1 || db == 1))
      fail("The size of tensor a (", da, ") must match the size of tensor b (", db, ") at non-singleton dimension ",
           i, " (shapes ", a.vec(), " and ", b.vec(), ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Which dims a reduction over `dims` reduces: each wrapped, none twice; no dims means all.
template <typename Fail>
std::vector<bool> reduce_mask(IntArrayRef dims, int64_t ndim, Fail&& fail) {
  std::vector<bool> mask(size_t(ndim), dims.empty());
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, ndim, fail);
    if (ndim == 0) continue;
    if (mask[size_t(w)]) fail("dim ", w, " appears multiple times in the list of dims");
    mask[size_t(w)] = true;
  }
  return mask;
}

// `shape` with its one -1 entry replaced by what makes the element count `n` (view, reshape).
template <typename Fail>
std::vector<int64_t> infer_size(IntArrayRef shape, int64_t n, Fail&& fail) {
  std::vector<int64_t> out = shape.vec();
  int64_t known = 1, infer = -1;
  bool zero = false, overflow = false;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) fail("only one dimension can be inferred, got shape ", shape.vec());
      infer = int64_t(i);
    } else {
      if (out[i] < 0) fail("invalid shape dimension ", out[i], " in ", shape.vec());
      zero |= out[i] == 0;
      overflow |= __builtin_mul_overflow(known, out[i], &known);
    }
  }
  // A product past int64 exceeds any element count: such a shape holds no tensor's elements,
  // unless one of its sizes is 0, or the -1 can be 0.
  if (zero) {
    known = 0;
    overflow = false;
  }
  const bool fits = infer >= 0 ? (overflow ? n == 0 : known != 0 && n % known == 0) : !overflow && known == n;
  if (!fits) fail("shape '", shape.vec(), "' is invalid for input of size ", n);
  if (infer >= 0) out[size_t(infer)] = overflow ? 0 : n / known;
  return out;
}

// The element count of non-negative sizes: 0 when one is 0 (whatever the others), else their
// product, which must fit in int64.
template <typename Fail>
int64_t numel(IntArrayRef sizes, Fail&& fail) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : sizes) overflow |= __builtin_mul_overflow(n, s, &n);
  if (overflow) {
    for (int64_t s : sizes)
      if (s == 0) return 0;
    fail("sizes ", sizes.vec(), " have more elements than int64 can count");
  }
  return n;
}
// Row-major strides (a size-0 dim counting as 1, as PyTorch's); the product past the outermost
// dim is no stride, and is not taken.
template <typename Fail>
std::vector<int64_t> contiguous_strides(IntArrayRef sizes, Fail&& fail) {
  std::vector<int64_t> st(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    if (i > 0 && __builtin_mul_overflow(acc, std::max<int64_t>(sizes[i], 1), &acc))
      fail("the row-major strides of sizes ", sizes.vec(), " overflow int64");
  }
  return st;
}

// The bytes of a dense tensor of these sizes: the element count (checked) times the item size,
// which must fit in int64 too (what empty() allocates).
template <typename Fail>
int64_t dense_bytes(IntArrayRef sizes, int64_t itemsize, Fail&& fail) {
  int64_t n = numel(sizes, fail), bytes;
  if (__builtin_mul_overflow(n, itemsize, &bytes)) [[unlikely]]
    fail("sizes ", sizes.vec(), " hold ", n, " elements of ", itemsize, " bytes: more bytes than int64 can count");
  return bytes;
}

// Row-major dense: the strides of every dim of size above 1 are the row-major ones.
bool is_contiguous(IntArrayRef sizes, IntArrayRef strides);

// The layout class of strided operands: what the compile cache keys on besides dtype, device
// and sizes, and what the kernels specialise their addressing on. Dims of size 1 never count;
// a dim of stride 0 (and any size but 1) is broadcast.
//   Contiguous  the dims that vary are row-major dense
//   Broadcast   row-major dense apart from broadcast dims
//   Permuted    dense in some other order of the dims, with no broadcast dim
//   General     anything else
enum class StrideClass : uint8_t { Contiguous, Broadcast, Permuted, General };
std::string_view stride_class_name(StrideClass c);
// `broadcast`: the caller knows of a broadcast dim the strides do not show (a size-1 dim read
// across a loop of more). `order`, where given and the class is Permuted, receives every dim,
// outermost (largest stride) first, ties in dim order.
StrideClass stride_class(IntArrayRef sizes, IntArrayRef strides, bool broadcast = false,
                         std::vector<int64_t>* order = nullptr);

// Strides that view (sizes, strides) as `new_sizes` without a copy, or nullopt where no view can
// (then view() fails and reshape() copies). A tensor with no element (or none of its dims) views
// as row-major; `fail` is called where those strides overflow int64.
template <typename Fail>
std::optional<std::vector<int64_t>> view_strides(IntArrayRef sizes, IntArrayRef strides, IntArrayRef new_sizes,
                                                 Fail&& fail) {
  bool empty = sizes.empty();
  for (int64_t s : sizes) empty = empty || s == 0;
  if (empty) return contiguous_strides(new_sizes, fail);
  // Both counts below stay within the element count of `sizes`, which fits; a count times a
  // stride may not, and such a view is refused (a tensor that large has no storage to view).
  std::vector<int64_t> out(new_sizes.size());
  int64_t view_d = int64_t(new_sizes.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[size_t(d)];
    // A chunk of old dims ends where the next outer dim is not laid out right after it.
    int64_t next;
    if (d == 0 || (sizes[size_t(d - 1)] != 1 && (__builtin_mul_overflow(tensor_numel, chunk_base_stride, &next) ||
                                                 strides[size_t(d - 1)] != next))) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[size_t(view_d)] == 1)) {
        if (__builtin_mul_overflow(view_numel, chunk_base_stride, &out[size_t(view_d)])) return std::nullopt;
        view_numel *= new_sizes[size_t(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[size_t(d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// ---- products ----

// mm: [n, k] @ [k, m].
template <typename Fail>
void check_mm(IntArrayRef a, IntArrayRef b, DType ta, DType tb, Fail&& fail) {
  if (a.size() != 2) fail("self must be a matrix, got a ", a.size(), "-D tensor of shape ", a.vec());
  if (b.size() != 2) fail("mat2 must be a matrix, got a ", b.size(), "-D tensor of shape ", b.vec());
  if (a[1] != b[0]) fail("mat1 and mat2 shapes cannot be multiplied (", a[0], "x", a[1], " and ", b[0], "x", b[1], ")");
  if (ta != tb) fail("expected mat1 and mat2 to have the same dtype, but got: ", name(ta), " != ", name(tb));
}

// bmm: [batch, n, k] @ [batch, k, m] -> [batch, n, m].
template <typename Fail>
std::vector<int64_t> bmm_shape(IntArrayRef a, IntArrayRef b, DType ta, DType tb, Fail&& fail) {
  if (a.size() != 3) fail("batch1 must be a 3D tensor, got shape ", a.vec());
  if (b.size() != 3) fail("batch2 must be a 3D tensor, got shape ", b.vec());
  if (a[0] != b[0]) fail("batch1 and batch2 must have same number of batches, got ", a[0], " and ", b[0]);
  if (a[2] != b[1])
    fail("Expected size for first two dimensions of batch2 tensor to be: [", a[0], ", ", a[2], "] but got: [", b[0],
         ", ", b[1], "].");
  if (ta != tb) fail("expected scalar type ", name(ta), " but found ", name(tb));
  return {a[0], a[1], b[2]};
}

// matmul's result shape, every rank case: 1-d operands are a row or a column whose dim is then
// dropped; batch dims broadcast; [..., n, k] @ [k, m] folds the batch into the rows.
template <typename Fail>
std::vector<int64_t> matmul_shape(IntArrayRef a, IntArrayRef b, DType ta, DType tb, Fail&& fail) {
  const size_t da = a.size(), db = b.size();
  if (da == 0 || db == 0) fail("both arguments to matmul need to be at least 1D, but they are ", da, "D and ", db, "D");
  if (ta != tb) fail("expected scalar type ", name(ta), " but found ", name(tb));
  if (da == 1 && db == 1) {
    if (a[0] != b[0])
      fail("inconsistent tensor size, expected tensor [", a[0], "] and src [", b[0],
           "] to have the same number of elements, but got ", a[0], " and ", b[0], " elements respectively");
    return {};
  }
  if (da == 2 && db == 1) {
    if (a[1] != b[0]) fail("size mismatch, got input (", a[0], "), mat (", a[0], "x", a[1], "), vec (", b[0], ")");
    return {a[0]};
  }
  if (da == 1 && db == 2) {
    const int64_t row[] = {1, a[0]};
    check_mm(IntArrayRef(row, 2), b, ta, tb, fail);
    return {b[1]};
  }
  if (da == 2 && db == 2) {
    check_mm(a, b, ta, tb, fail);
    return {a[0], b[1]};
  }
  std::vector<int64_t> A = a.vec(), B = b.vec();
  if (da == 1) A.insert(A.begin(), 1);
  if (db == 1) B.push_back(1);
  const int64_t n = A[A.size() - 2], k = A.back(), k2 = B[B.size() - 2], m = B.back();
  if (k != k2) fail("mat1 and mat2 shapes cannot be multiplied (", n, "x", k, " and ", k2, "x", m, ")");
  std::vector<int64_t> shape;
  if (db <= 2 && da >= 3) {
    const int64_t rows[] = {-1, k};
    infer_size(IntArrayRef(rows, 2), numel(A, fail), fail);  // (the fold's reshape: it refuses k == 0)
    shape.assign(A.begin(), A.end() - 1);
    shape.push_back(m);
    if (db == 1) shape.pop_back();
    return shape;
  }
  shape = broadcast_shapes(IntArrayRef(A.data(), A.size() - 2), IntArrayRef(B.data(), B.size() - 2), fail);
  numel(shape, fail);
  if (da != 1) shape.push_back(n);
  if (db != 1) shape.push_back(m);
  numel(shape, fail);  // (the product's size must fit)
  return shape;
}

// addmm: self broadcast to the product's [n, m], of mat1's dtype.
template <typename Fail>
std::vector<int64_t> addmm_shape(IntArrayRef self, IntArrayRef a, IntArrayRef b, DType ts, DType ta, DType tb,
                                 Fail&& fail) {
  check_mm(a, b, ta, tb, fail);
  if (ts != ta) fail("expected self and mat1 to have the same dtype, but got: ", name(ts), " != ", name(ta));
  std::vector<int64_t> shape{a[0], b[1]};
  if (broadcast_shapes(self, shape, fail) != shape)
    fail("self of shape ", self.vec(), " cannot be broadcast to the product's shape ", shape);
  return shape;
}

// ---- views ----
// A view's geometry: what each view op makes of its operand's sizes, strides and storage offset
// (in elements). The eager views build their tensor from it; inference its type (which has no
// offset). Products and sums of sizes and strides are checked.

struct Strided {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
};

// a * b and a + b, or "`what` overflows int64 (a * b)".
template <typename Fail>
int64_t checked_mul(int64_t a, int64_t b, const char* what, Fail&& fail) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail(what, " overflows int64 (", a, " * ", b, ")");
  return r;
}
template <typename Fail>
int64_t checked_add(int64_t a, int64_t b, const char* what, Fail&& fail) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) fail(what, " overflows int64 (", a, " + ", b, ")");
  return r;
}

// view(shape): one -1 inferred, the strides without a copy, or the error reshape() avoids.
template <typename Fail>
Strided view(const Strided& x, IntArrayRef shape, Fail&& fail) {
  std::vector<int64_t> want = infer_size(shape, numel(x.sizes, fail), fail);
  auto st = view_strides(x.sizes, x.strides, want, fail);
  if (!st)
    fail("view size is not compatible with input tensor's size ", x.sizes, " and stride ", x.strides,
         " (at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead (view size ",
         want, ")");
  return {std::move(want), std::move(*st), x.offset};
}

template <typename Fail>
Strided transpose(Strided x, int64_t d0, int64_t d1, Fail&& fail) {
  const int64_t n = int64_t(x.sizes.size());
  d0 = wrap_dim(d0, n, fail);
  d1 = wrap_dim(d1, n, fail);
  if (n > 0) {
    std::swap(x.sizes[size_t(d0)], x.sizes[size_t(d1)]);
    std::swap(x.strides[size_t(d0)], x.strides[size_t(d1)]);
  }
  return x;
}

template <typename Fail>
Strided permute(const Strided& x, IntArrayRef dims, Fail&& fail) {
  const int64_t n = int64_t(x.sizes.size());
  if (int64_t(dims.size()) != n)
    fail("number of dims don't match in permute: got ", dims.size(), " dims for a tensor of shape ", x.sizes);
  Strided r{std::vector<int64_t>(size_t(n)), std::vector<int64_t>(size_t(n)), x.offset};
  std::vector<bool> seen(size_t(n), false);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = wrap_dim(dims[size_t(i)], n, fail);
    if (seen[size_t(d)]) fail("repeated dim ", d, " in permutation ", dims.vec());
    seen[size_t(d)] = true;
    r.sizes[size_t(i)] = x.sizes[size_t(d)];
    r.strides[size_t(i)] = x.strides[size_t(d)];
  }
  return r;
}

// slice(d, start, end, step): start and end wrapped once and clamped to the size.
template <typename Fail>
Strided slice(Strided x, int64_t d, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step,
              Fail&& fail) {
  if (x.sizes.empty()) fail("slice() cannot be applied to a 0-dim tensor");
  const size_t k = size_t(wrap_dim(d, int64_t(x.sizes.size()), fail));
  if (step <= 0) fail("slice step must be positive, got ", step);
  const int64_t n = x.sizes[k];
  auto clamp_index = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  const int64_t s = start ? clamp_index(*start) : 0, e = end ? clamp_index(*end) : n;
  x.offset = checked_add(x.offset, checked_mul(s, x.strides[k], "the start times the stride", fail),
                         "the storage offset", fail);
  x.sizes[k] = e > s ? (e - s - 1) / step + 1 : 0;  // ceil((e - s) / step), which a large step cannot overflow
  x.strides[k] = checked_mul(x.strides[k], step, "the stride times the step", fail);
  return x;
}

template <typename Fail>
Strided select(Strided x, int64_t d, int64_t index, Fail&& fail) {
  if (x.sizes.empty()) fail("select() cannot be applied to a 0-dim tensor");
  const size_t k = size_t(wrap_dim(d, int64_t(x.sizes.size()), fail));
  const int64_t n = x.sizes[k];
  if (index < -n || index >= n) fail("index ", index, " is out of bounds for dimension ", k, " with size ", n);
  if (index < 0) index += n;
  x.offset = checked_add(x.offset, checked_mul(index, x.strides[k], "the index times the stride", fail),
                         "the storage offset", fail);
  x.sizes.erase(x.sizes.begin() + int64_t(k));
  x.strides.erase(x.strides.begin() + int64_t(k));
  return x;
}

// expand(target): size-1 dims (and new leading ones) broadcast with stride 0; -1 keeps a size.
template <typename Fail>
Strided expand(const Strided& x, IntArrayRef target, Fail&& fail) {
  const int64_t n = int64_t(x.sizes.size()), m = int64_t(target.size());
  if (m < n)
    fail("the number of sizes provided (", m, ") must be greater or equal to the number of dimensions in the tensor (",
         n, ")");
  Strided r{std::vector<int64_t>(size_t(m), 0), std::vector<int64_t>(size_t(m), 0), x.offset};
  for (int64_t i = m - 1; i >= 0; --i) {
    const int64_t j = i - (m - n);
    int64_t want = target[size_t(i)];
    if (j < 0) {
      if (want < 0) fail("the expanded size of the tensor (", want, ") isn't allowed in a leading, non-existing dimension ", i);
      r.sizes[size_t(i)] = want;
      continue;
    }
    const int64_t have = x.sizes[size_t(j)];
    if (want == -1) want = have;
    if (want < 0) fail("the expanded size of the tensor (", want, ") is negative at dimension ", i);
    if (have != want && have != 1)
      fail("The expanded size of the tensor (", want, ") must match the existing size (", have,
           ") at non-singleton dimension ", i, ".  Target sizes: ", target.vec(), ".  Tensor sizes: ", x.sizes);
    r.sizes[size_t(i)] = want;
    r.strides[size_t(i)] = have == want ? x.strides[size_t(j)] : 0;
  }
  numel(r.sizes, fail);  // (the one view that can grow the element count)
  return r;
}

// squeeze(dims): every size-1 dim where dims is empty, else the listed dims that have size 1
// (PyTorch 2's squeeze(dims)).
template <typename Fail>
Strided squeeze(const Strided& x, IntArrayRef dims, Fail&& fail) {
  const std::vector<bool> mask = reduce_mask(dims, int64_t(x.sizes.size()), fail);
  Strided r{{}, {}, x.offset};
  for (size_t i = 0; i < x.sizes.size(); ++i)
    if (!(mask[i] && x.sizes[i] == 1)) {
      r.sizes.push_back(x.sizes[i]);
      r.strides.push_back(x.strides[i]);
    }
  return r;
}

template <typename Fail>
Strided unsqueeze(Strided x, int64_t d, Fail&& fail) {
  const int64_t n = int64_t(x.sizes.size());
  const size_t k = size_t(wrap_dim(d, n + 1, fail));
  const int64_t s = int64_t(k) < n ? checked_mul(x.sizes[k], x.strides[k], "the new dim's stride", fail) : 1;
  x.sizes.insert(x.sizes.begin() + int64_t(k), 1);
  x.strides.insert(x.strides.begin() + int64_t(k), s);
  return x;
}

// diagonal(offset, d1, d2): dims d1 and d2 dropped, their diagonal appended.
template <typename Fail>
Strided diagonal(const Strided& x, int64_t offset, int64_t d1, int64_t d2, Fail&& fail) {
  const int64_t n = int64_t(x.sizes.size());
  if (n < 2) fail("diagonal requires a tensor with at least 2 dimensions, got ", n, "D");
  const size_t a = size_t(wrap_dim(d1, n, fail)), b = size_t(wrap_dim(d2, n, fail));
  if (a == b) fail("diagonal dimensions cannot be identical ", a, ", ", b);
  const int64_t n1 = x.sizes[a], n2 = x.sizes[b];
  Strided r{{}, {}, x.offset};
  int64_t len;
  if (offset >= 0) {
    len = std::max<int64_t>(std::min(n1, n2 - offset), 0);
    if (len > 0)
      r.offset = checked_add(r.offset, checked_mul(offset, x.strides[b], "the offset times the stride", fail),
                             "the storage offset", fail);
  } else {
    len = std::max<int64_t>(std::min(n1 + offset, n2), 0);
    if (len > 0)
      r.offset = checked_add(r.offset, checked_mul(-offset, x.strides[a], "the offset times the stride", fail),
                             "the storage offset", fail);
  }
  for (size_t i = 0; i < size_t(n); ++i)
    if (i != a && i != b) {
      r.sizes.push_back(x.sizes[i]);
      r.strides.push_back(x.strides[i]);
    }
  r.sizes.push_back(len);
  r.strides.push_back(checked_add(x.strides[a], x.strides[b], "the diagonal's stride", fail));
  return r;
}

}  // namespace kiln::rules
