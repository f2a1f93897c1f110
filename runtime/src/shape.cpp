#include "shape.h"

namespace kiln::shape {

int64_t numel(IntArrayRef sizes, std::string_view op) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : sizes) overflow |= __builtin_mul_overflow(n, s, &n);
  if (overflow) [[unlikely]] {
    for (int64_t s : sizes)
      if (s == 0) return 0;
    KILN_FAIL(op, "sizes ", sizes.vec(), " have more elements than int64 can count");
  }
  return n;
}

int64_t numel(IntArrayRef sizes) { return numel(sizes, "numel"); }

std::vector<int64_t> contiguous_strides(IntArrayRef sizes, std::string_view op) {
  std::vector<int64_t> st(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    // (the product past the outermost dim is no stride: it may be anything)
    if (i > 0 && __builtin_mul_overflow(acc, std::max<int64_t>(sizes[i], 1), &acc)) [[unlikely]]
      KILN_FAIL(op, "the row-major strides of sizes ", sizes.vec(), " overflow int64");
  }
  return st;
}

std::vector<int64_t> contiguous_strides(IntArrayRef sizes) { return contiguous_strides(sizes, "contiguous_strides"); }

std::optional<int64_t> storage_bytes(IntArrayRef sizes, IntArrayRef strides, int64_t offset, int64_t itemsize) {
  int64_t last = offset;
  bool overflow = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return 0;
    int64_t reach;
    overflow |= __builtin_mul_overflow(sizes[i] - 1, strides[i], &reach);
    overflow |= __builtin_add_overflow(last, reach, &last);
  }
  int64_t bytes;
  overflow |= __builtin_add_overflow(last, 1, &bytes);
  overflow |= __builtin_mul_overflow(bytes, itemsize, &bytes);
  if (overflow) return std::nullopt;
  return bytes;
}

int64_t dense_bytes(IntArrayRef sizes, int64_t itemsize, std::string_view op) {
  int64_t n = numel(sizes, op), bytes;
  if (__builtin_mul_overflow(n, itemsize, &bytes)) [[unlikely]]
    KILN_FAIL(op, "sizes ", sizes.vec(), " hold ", n, " elements of ", itemsize,
              " bytes: more bytes than int64 can count");
  return bytes;
}

bool is_contiguous(IntArrayRef sizes, IntArrayRef strides) {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 0) return true;
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

std::vector<int64_t> infer_size(IntArrayRef shape, int64_t n, std::string_view op) {
  std::vector<int64_t> out = shape.vec();
  int64_t known = 1, infer = -1;
  bool zero = false, overflow = false;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK(infer < 0, op, "only one dimension can be inferred, got shape ", shape.vec());
      infer = int64_t(i);
    } else {
      KILN_CHECK(out[i] >= 0, op, "invalid shape dimension ", out[i], " in ", shape.vec());
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
  if (infer >= 0) {
    KILN_CHECK(overflow ? n == 0 : known != 0 && n % known == 0, op, "shape '", shape.vec(),
               "' is invalid for input of size ", n);
    out[infer] = overflow ? 0 : n / known;
  } else {
    KILN_CHECK(!overflow && known == n, op, "shape '", shape.vec(), "' is invalid for input of size ", n);
  }
  return out;
}

std::optional<std::vector<int64_t>> view_strides(IntArrayRef sizes, IntArrayRef strides,
                                                 IntArrayRef new_sizes) {
  if (sizes.empty() || numel(sizes) == 0) return contiguous_strides(new_sizes, "view");
  // Both counts below stay within numel(sizes), which fits; a count times a stride may not,
  // and such a view is refused (a tensor that large has no storage to view anyway).
  std::vector<int64_t> out(new_sizes.size());
  int64_t view_d = int64_t(new_sizes.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    // A chunk of old dims ends where the next outer dim is not laid out right after it.
    int64_t next;
    if (d == 0 || (sizes[d - 1] != 1 && (__builtin_mul_overflow(tensor_numel, chunk_base_stride, &next) ||
                                         strides[d - 1] != next))) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        if (__builtin_mul_overflow(view_numel, chunk_base_stride, &out[view_d])) return std::nullopt;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

std::vector<bool> reduce_mask(IntArrayRef dims, int64_t ndim, std::string_view op) {
  std::vector<bool> mask(size_t(ndim), dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, ndim, op);
    if (ndim == 0) continue;
    KILN_CHECK(!mask[w], op, "dim ", w, " appears multiple times in the list of dims");
    mask[w] = true;
  }
  return mask;
}

}  // namespace kiln::shape
