#include "shape.h"

namespace kiln::shape {

int64_t numel(IntArrayRef sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::vector<int64_t> contiguous_strides(IntArrayRef sizes) {
  std::vector<int64_t> st(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(sizes[i], 1);
  }
  return st;
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
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK(infer < 0, op, "only one dimension can be inferred, got shape ", shape.vec());
      infer = int64_t(i);
    } else {
      KILN_CHECK(out[i] >= 0, op, "invalid shape dimension ", out[i], " in ", shape.vec());
      known *= out[i];
    }
  }
  if (infer >= 0) {
    KILN_CHECK(known != 0 && n % known == 0, op, "shape '", shape.vec(),
               "' is invalid for input of size ", n);
    out[infer] = n / known;
  } else {
    KILN_CHECK(known == n, op, "shape '", shape.vec(), "' is invalid for input of size ", n);
  }
  return out;
}

std::optional<std::vector<int64_t>> view_strides(IntArrayRef sizes, IntArrayRef strides,
                                                 IntArrayRef new_sizes) {
  if (sizes.empty() || numel(sizes) == 0) return contiguous_strides(new_sizes);
  std::vector<int64_t> out(new_sizes.size());
  int64_t view_d = int64_t(new_sizes.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    // A chunk of old dims ends where the next outer dim is not laid out right after it.
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
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
