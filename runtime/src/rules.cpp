// PyTorch's semantic rules shared by the eager ops and type inference (see kiln/runtime/rules.h).
#include "kiln/runtime/rules.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace kiln::rules {

namespace {
std::optional<DType> promote(std::optional<DType> a, DType b) { return a ? promote_types(*a, b) : b; }
// PyTorch's combine_categories: a lower-priority group only matters when it is of a higher
// category (bool < integral < floating) than the higher-priority group.
std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (is_floating(*higher)) return higher;
  if (*higher == DType::Bool || is_floating(*lower)) return promote_types(*higher, *lower);
  return higher;
}
}  // namespace

DType result_type(std::span<const Promotable> ops) {
  std::optional<DType> dim_r, zero_r, wrapped_r;
  for (const Promotable& p : ops) {
    if (p.rank == Rank::Wrapped) wrapped_r = promote(wrapped_r, is_floating(p.dtype) ? kDefaultFloat : p.dtype);
    else if (p.rank == Rank::ZeroDim) zero_r = promote(zero_r, p.dtype);
    else dim_r = promote(dim_r, p.dtype);
  }
  std::optional<DType> r = combine(dim_r, combine(zero_r, wrapped_r));
  if (!r) throw std::logic_error("rules::result_type of no operands");
  return *r;
}

bool fill_value_fits(const Scalar& v, DType dt) {
  if (dt == kBool) return true;
  if (is_integral(dt)) {
    int64_t max = 0, min = 0;
    switch (dt) {
      case kUInt8: max = 255; break;
      case kInt8: max = 127, min = -128; break;
      case kInt16: max = 32767, min = -32768; break;
      case kInt32: max = std::numeric_limits<int32_t>::max(), min = std::numeric_limits<int32_t>::min(); break;
      default: max = std::numeric_limits<int64_t>::max(), min = std::numeric_limits<int64_t>::min(); break;
    }
    if (v.is_floating()) {
      // (a negative float never fits an unsigned type; PyTorch refuses it too)
      const double d = v.to_double(), lo = is_signed(dt) ? double(min) : 0.0;
      return d > lo - 1.0 && d < double(max) + 1.0;
    }
    const int64_t i = v.to_int(), lo = is_signed(dt) ? min : -max;
    return i >= lo && (dt == kInt64 || i <= max);
  }
  const double d = v.to_double();
  const double hi = dt == kFloat16 ? 65504.0 : dt == kBFloat16 ? 3.3895313892515355e38
                  : dt == kFloat32 ? double(std::numeric_limits<float>::max()) : std::numeric_limits<double>::max();
  return !std::isfinite(d) || std::abs(d) <= hi;
}

bool is_contiguous(IntArrayRef sizes, IntArrayRef strides) {
  __int128 expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 0) return true;
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
    if (expected > std::numeric_limits<int64_t>::max()) expected = std::numeric_limits<int64_t>::max();
  }
  return true;
}

std::string_view stride_class_name(StrideClass c) {
  switch (c) {
    case StrideClass::Contiguous: return "contiguous";
    case StrideClass::Broadcast: return "broadcast";
    case StrideClass::Permuted: return "permuted";
    case StrideClass::General: return "general";
  }
  return "?";
}

StrideClass stride_class(IntArrayRef sizes, IntArrayRef strides, bool broadcast, std::vector<int64_t>* order) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dims that vary
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (strides[d] == 0) {
      broadcast = true;
      continue;
    }
    dims.push_back({strides[d], sizes[d]});
  }
  auto dense = [](const std::vector<std::pair<int64_t, int64_t>>& ds) {
    int64_t expect = 1;
    for (size_t k = ds.size(); k-- > 0;) {
      if (ds[k].first != expect) return false;
      expect *= ds[k].second;
    }
    return true;
  };
  if (dense(dims)) return broadcast ? StrideClass::Broadcast : StrideClass::Contiguous;
  if (broadcast) return StrideClass::General;
  std::stable_sort(dims.begin(), dims.end(), [](auto x, auto y) { return x.first > y.first; });
  if (!dense(dims)) return StrideClass::General;
  if (order) {
    std::vector<int64_t> all(sizes.size());
    for (size_t d = 0; d < all.size(); ++d) all[d] = int64_t(d);
    std::stable_sort(all.begin(), all.end(), [&](int64_t a, int64_t b) { return strides[size_t(a)] > strides[size_t(b)]; });
    *order = std::move(all);
  }
  return StrideClass::Permuted;
}

}  // namespace kiln::rules
