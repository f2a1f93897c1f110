// Shape and stride arithmetic shared by views, factories and kernels (internal header).
//
// Sizes, strides, element and byte counts are int64 and a user may ask for any of them, so
// every product and sum of them here is checked: one that overflows raises "[op] ..." naming
// the sizes, where a wrapped count would allocate a few bytes that a kernel then writes
// billions of elements into. The checks run once per tensor or view made, never per element.
#pragma once
#include <algorithm>
#include <optional>
#include <string_view>
#include <vector>

#include "kiln/runtime/array_ref.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/rules.h"

namespace kiln::shape {

// The `fail` of a shared rule (kiln/runtime/rules.h) for eager op `op`: "[op] message".
inline auto fail_as(std::string_view op) {
  return [op](const auto&... parts) { KILN_FAIL(op, parts...); };
}

// Wraps a possibly negative dim into [0, ndim); ndim 0 accepts -1 and 0 as PyTorch does.
inline int64_t wrap_dim(int64_t d, int64_t ndim, std::string_view op) { return rules::wrap_dim(d, ndim, fail_as(op)); }
// The element count of non-negative sizes: 0 when one is 0 (whatever the others), else their
// product, which must fit in int64. Without `op` the error says "[numel]": for the places where
// no op checked the sizes before.
int64_t numel(IntArrayRef sizes, std::string_view op);
int64_t numel(IntArrayRef sizes);
// Row-major strides (a size-0 dim counting as 1, as PyTorch's), checked.
std::vector<int64_t> contiguous_strides(IntArrayRef sizes, std::string_view op);
std::vector<int64_t> contiguous_strides(IntArrayRef sizes);
// The bytes of storage a view of these sizes, non-negative strides and offset reaches:
// (offset + the largest index it reaches + 1) * itemsize, or 0 when it has no element;
// nullopt when that count overflows int64.
std::optional<int64_t> storage_bytes(IntArrayRef sizes, IntArrayRef strides, int64_t offset, int64_t itemsize);
// The bytes of a dense tensor of these sizes, for a factory named `op` to allocate: checks
// the element count, the strides and the byte count, each naming the sizes.
int64_t dense_bytes(IntArrayRef sizes, int64_t itemsize, std::string_view op);
inline bool is_contiguous(IntArrayRef sizes, IntArrayRef strides) { return rules::is_contiguous(sizes, strides); }
// Replaces one -1 entry by what makes the element count `numel`; checks the count.
inline std::vector<int64_t> infer_size(IntArrayRef shape, int64_t numel, std::string_view op) {
  return rules::infer_size(shape, numel, fail_as(op));
}
// Strides that view (sizes, strides) as new_sizes without copying, or nullopt when impossible.
inline std::optional<std::vector<int64_t>> view_strides(IntArrayRef sizes, IntArrayRef strides,
                                                        IntArrayRef new_sizes) {
  return rules::view_strides(sizes, strides, new_sizes, fail_as("view"));
}
// Sorted, wrapped, duplicate-checked reduction dims; empty input means every dim.
inline std::vector<bool> reduce_mask(IntArrayRef dims, int64_t ndim, std::string_view op) {
  return rules::reduce_mask(dims, ndim, fail_as(op));
}

}  // namespace kiln::shape
