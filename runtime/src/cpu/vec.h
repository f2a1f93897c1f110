// SIMD maps over contiguous float32/float64 arrays with SLEEF's vectorised math (internal).
// gcc does not vectorise calls to libm's sinf/expf (without -ffast-math, which would break NaN
// semantics), so the transcendental ops go through SLEEF's 1.0-ULP functions instead, 16 (AVX-512)
// or 8 (AVX2) floats at a time. Without either, KILN_HAVE_VEC is 0 and kernels stay scalar.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#include <sleef.h>
#define KILN_HAVE_VEC 1
#else
#define KILN_HAVE_VEC 0
#endif

namespace kiln::cpu::vec {
#if defined(__AVX512F__)
using VF = __m512;
using VD = __m512d;
inline constexpr int kWF = 16, kWD = 8;
inline VF loadf(const float* p) { return _mm512_loadu_ps(p); }
inline void storef(float* p, VF v) { _mm512_storeu_ps(p, v); }
inline VD loadd(const double* p) { return _mm512_loadu_pd(p); }
inline void stored(double* p, VD v) { _mm512_storeu_pd(p, v); }
inline VF setf(float x) { return _mm512_set1_ps(x); }
inline VD setd(double x) { return _mm512_set1_pd(x); }
#define KILN_SLEEF_F(fn) Sleef_##fn##f16_u10
#define KILN_SLEEF_D(fn) Sleef_##fn##d8_u10
#elif defined(__AVX2__)
using VF = __m256;
using VD = __m256d;
inline constexpr int kWF = 8, kWD = 4;
inline VF loadf(const float* p) { return _mm256_loadu_ps(p); }
inline void storef(float* p, VF v) { _mm256_storeu_ps(p, v); }
inline VD loadd(const double* p) { return _mm256_loadu_pd(p); }
inline void stored(double* p, VD v) { _mm256_storeu_pd(p, v); }
inline VF setf(float x) { return _mm256_set1_ps(x); }
inline VD setd(double x) { return _mm256_set1_pd(x); }
#define KILN_SLEEF_F(fn) Sleef_##fn##f8_u10
#define KILN_SLEEF_D(fn) Sleef_##fn##d4_u10
#endif

#if KILN_HAVE_VEC
// o[i] = f(a[i]) for n contiguous floats; the tail goes through a padded local block.
template <typename F>
inline void map_f32(const float* a, float* o, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kWF <= n; i += kWF) storef(o + i, f(loadf(a + i)));
  if (i < n) {
    alignas(64) float buf[kWF] = {};
    std::memcpy(buf, a + i, size_t(n - i) * sizeof(float));
    storef(buf, f(loadf(buf)));
    std::memcpy(o + i, buf, size_t(n - i) * sizeof(float));
  }
}
template <typename F>
inline void map_f64(const double* a, double* o, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kWD <= n; i += kWD) stored(o + i, f(loadd(a + i)));
  if (i < n) {
    alignas(64) double buf[kWD] = {};
    std::memcpy(buf, a + i, size_t(n - i) * sizeof(double));
    stored(buf, f(loadd(buf)));
    std::memcpy(o + i, buf, size_t(n - i) * sizeof(double));
  }
}
#endif
}  // namespace kiln::cpu::vec
