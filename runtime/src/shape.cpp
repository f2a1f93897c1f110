#include "shape.h"

namespace kiln::shape {

int64_t numel(IntArrayRef sizes, std::string_view op) { return rules::numel(sizes, fail_as(op)); }

int64_t numel(IntArrayRef sizes) { return numel(sizes, "numel"); }

std::vector<int64_t> contiguous_strides(IntArrayRef sizes, std::string_view op) {
  return rules::contiguous_strides(sizes, fail_as(op));
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
  return rules::dense_bytes(sizes, itemsize, fail_as(op));
}

}  // namespace kiln::shape
