// Shape and stride arithmetic shared by views, factories and kernels (internal header).
#pragma once
#include <optional>
#include <string_view>
#include <vector>

#include "kiln/runtime/array_ref.h"
#include "kiln/runtime/error.h"

namespace kiln::shape {

// Wraps a possibly negative dim into [0, ndim); ndim 0 accepts -1 and 0 as PyTorch does.
inline int64_t wrap_dim(int64_t d, int64_t ndim, std::string_view op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  KILN_CHECK(d >= lo && d <= hi, op, "Dimension out of range (expected to be in range of [", lo,
             ", ", hi, "], but got ", d, ")");
  return d < 0 ? d + std::max<int64_t>(ndim, 1) : d;
}
int64_t numel(IntArrayRef sizes);
std::vector<int64_t> contiguous_strides(IntArrayRef sizes);
bool is_contiguous(IntArrayRef sizes, IntArrayRef strides);
// Replaces one -1 entry by what makes the element count `numel`; checks the count.
std::vector<int64_t> infer_size(IntArrayRef shape, int64_t numel, std::string_view op);
// Strides that view (sizes, strides) as new_sizes without copying, or nullopt when impossible.
std::optional<std::vector<int64_t>> view_strides(IntArrayRef sizes, IntArrayRef strides,
                                                 IntArrayRef new_sizes);
// Sorted, wrapped, duplicate-checked reduction dims; empty input means every dim.
std::vector<bool> reduce_mask(IntArrayRef dims, int64_t ndim, std::string_view op);

}  // namespace kiln::shape
