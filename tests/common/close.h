// Comparing a compiled result with eager's: values within a tolerance that fits the dtype.
//
// Fused kernels round differently from op-by-op eager kernels: float sums accumulate in float64
// and in another order, 16-bit floats stay float32 between the ops of a kernel (eager rounds
// every intermediate), transcendental functions come from vector or scalar code paths. So
// floating-point values agree within rtol/atol (NaNs must meet NaNs and infinities equal
// infinities), integer and bool values exactly, dtype and sizes always.
#pragma once
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>

namespace kiln::testing {

struct Tolerance {
  double rtol = 0, atol = 0;
};
inline Tolerance tolerance(DType d) {
  switch (d) {
    case kFloat64: return {1e-9, 1e-12};
    case kFloat32: return {1e-4, 1e-5};
    // eager rounds every intermediate to 16 bits; where a program cancels (x*x + x*3) that
    // rounding near 8 (2^-7 for float16) shows in the result
    case kFloat16: return {5e-3, 1e-2};
    case kBFloat16: return {3e-2, 1e-2};
    default: return {0, 0};
  }
}

// `floor`: a looser tolerance to use where it exceeds the dtype's (a float64 result computed
// from float32 values carries float32 rounding).
inline ::testing::AssertionResult close(const Tensor& got, const Tensor& want, Tolerance floor = {}) {
  if (got.dtype() != want.dtype())
    return ::testing::AssertionFailure() << "dtype " << name(got.dtype()) << " vs " << name(want.dtype());
  if (got.sizes().vec() != want.sizes().vec()) return ::testing::AssertionFailure() << "sizes differ";
  if (got.numel() == 0) return ::testing::AssertionSuccess();
  if (!got.is_floating_point()) {
    if (got.eq(want).all().item<bool>()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "integer values differ";
  }
  Tolerance t = tolerance(got.dtype());
  t.rtol = std::max(t.rtol, floor.rtol);
  t.atol = std::max(t.atol, floor.atol);
  Tensor a = got.to(kFloat64), b = want.to(kFloat64);
  // Only finite values get a tolerance: an infinity must be met by the same infinity (with a
  // tolerance of |inf| * rtol, any value would pass), a NaN by a NaN.
  Tensor both_nan = logical_and(a.isnan(), b.isnan());
  Tensor same_inf = logical_and(a.isinf(), a.eq(b));
  Tensor near = logical_and(b.isfinite(), (a - b).abs().le(b.abs() * t.rtol + t.atol));
  Tensor ok = logical_or(near, logical_or(both_nan, same_inf));
  if (ok.all().item<bool>()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "values differ: max abs diff "
                                       << (a - b).abs().nan_to_num(0.0).amax().item<double>();
}

}  // namespace kiln::testing
