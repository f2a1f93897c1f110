// SIMD maps over contiguous float32/float64 arrays with SLEEF's vectorised math (internal).
// gcc does not vectorise calls to libm's sinf/expf (without -ffast-math, which would break NaN
// semantics), so the transcendental ops go through SLEEF's 1.0-ULP functions instead, 16 (AVX-512)
// or 8 (AVX2) floats at a time; float32 erf, tanh and fmod through kiln's own (erff, tanhf, fmodf
// below).
// Without either ISA, KILN_HAVE_VEC is 0 and kernels stay scalar.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

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
inline VF fmaf(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
inline VF absf(VF x) { return _mm512_abs_ps(x); }
inline VF minf(VF a, VF b) { return _mm512_maskz_min_ps(0xffff, a, b); }  // (gcc 12 warns on _mm512_min_ps)
inline VF truncv(VF x) { return _mm512_maskz_roundscale_ps(0xffff, x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
inline VF floorv(VF x) { return _mm512_maskz_roundscale_ps(0xffff, x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
// Lane masks: comparisons (ordered: false where either lane is NaN; ne: true there), and, all.
using MF = __mmask16;
inline MF lt(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
inline MF ge(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
inline MF ne(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }
inline MF nan_lanes(VF a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
inline MF signs_differ(VF a, VF b) {
  return _mm512_test_epi32_mask(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)),
                                _mm512_set1_epi32(int(0x80000000u)));
}
inline MF mand(MF a, MF b) { return MF(a & b); }
inline bool all(MF m) { return m == MF(0xffff); }
inline VF where(MF m, VF then, VF otherwise) { return _mm512_mask_blend_ps(m, otherwise, then); }
inline VF sign_of(VF x, VF r) {  // |r| with x's sign (r non-negative)
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(int(0x80000000u)));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign));
}
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
#if defined(__FMA__)
inline VF fmaf(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
#else
inline VF fmaf(VF a, VF b, VF c) { return _mm256_add_ps(_mm256_mul_ps(a, b), c); }
#endif
inline VF absf(VF x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
inline VF minf(VF a, VF b) { return _mm256_min_ps(a, b); }
inline VF truncv(VF x) { return _mm256_round_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
inline VF floorv(VF x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
using MF = __m256;  // all ones in the lanes that are set
inline MF lt(VF a, VF b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
inline MF ge(VF a, VF b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
inline MF ne(VF a, VF b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }
inline MF nan_lanes(VF a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
inline MF signs_differ(VF a, VF b) {
  return _mm256_castsi256_ps(_mm256_srai_epi32(_mm256_castps_si256(_mm256_xor_ps(a, b)), 31));
}
inline MF mand(MF a, MF b) { return _mm256_and_ps(a, b); }
inline bool all(MF m) { return _mm256_movemask_ps(m) == 0xff; }
inline VF where(MF m, VF then, VF otherwise) { return _mm256_blendv_ps(otherwise, then, m); }
inline VF sign_of(VF x, VF r) { return _mm256_or_ps(r, _mm256_and_ps(x, _mm256_set1_ps(-0.0f))); }
#endif

#if KILN_HAVE_VEC
// erf of float32 lanes, within 0.994 ulp of the float64 erf over every float32 input (measured
// exhaustively; SLEEF's erff_u10: 1.10), at 0.40 ns per element on a Zen 5 core against
// SLEEF's 1.43. erf is odd, so it works on a = |x|:
//  - a < 1: erf = a + a R(a^2), R(t) = erf(sqrt t) / sqrt t - 1, a degree-6 polynomial (the
//    small term added last keeps the rounding of the leading 2/sqrt(pi) out of the result);
//  - a >= 1: erf = 1 - exp(-a^2) Q(a - 2.46), Q(a - 2.46) = erfc(a) exp(a^2), degree 11, with a
//    clamped to 3.92, past which erf rounds to 1 in float32.
// Both polynomials are least-squares fits of the relative error at 400 Chebyshev nodes, in
// 40-digit arithmetic (R's relative error 1.2e-9 on [0, 1], Q's 2.6e-8 on [1, 3.92]; 1 - erf
// <= 0.16 there, so Q's error moves erf by under half an ulp). NaN stays NaN; erf(+-inf) = +-1.
inline VF erff(VF x) {
  static constexpr float kR[] = {0.12837916568932252f,   -0.37612625567399252f, 0.11283582247992895f,
                                 -0.026853691099714645f, 0.0051880988894004592f, -0.00080081893231656352f,
                                 0.000078472591269656872f};
  static constexpr float kQ[] = {0.21382067298577333f,    -0.076381446447258701f,  0.025922497502609804f,
                                 -0.0084082260414507192f, 0.0026181029217727048f,  -0.00078638499205380951f,
                                 0.00022996628162940607f, -0.000064296873800864380f, 0.000016015958315297487f,
                                 -4.4665743625992681e-6f, 1.8228064048521103e-6f,  -4.2575531290370395e-7f};
  const VF a = absf(x);
  VF r = setf(kR[6]);
  for (int i = 5; i >= 0; --i) r = fmaf(r, a * a, setf(kR[i]));
  const VF below_one = fmaf(a, r, a);
  const VF c = minf(a, setf(3.92f));
  VF q = setf(kQ[11]);
  for (int i = 10; i >= 0; --i) q = fmaf(q, c - setf(2.46f), setf(kQ[i]));
  const VF from_one = fmaf(-KILN_SLEEF_F(exp)(-(c * c)), q, setf(1.0f));
  return where(nan_lanes(x), x, sign_of(x, where(ge(a, setf(1.0f)), from_one, below_one)));
}

// tanh of float32 lanes, within 0.998 ulp of the float64 tanh over every float32 input
// (measured exhaustively; SLEEF's tanhf_u10: 1.0), at 0.35 ns per element on a Zen 5 core
// against SLEEF's 0.93. tanh is odd, so it works on a = |x|:
//  - a < 0.9: tanh = a + a^3 S(a^2), S(t) = (tanh(sqrt t) / sqrt t - 1) / t, degree 7 (a least-
//    squares fit of the relative error at 500 Chebyshev nodes in 40-digit arithmetic: 1.3e-9);
//  - a >= 0.9: tanh = 1 - 2 / (exp(2a) + 1), SLEEF's exp; 1 - tanh <= 0.29 there, which damps
//    exp's error (exp overflows to infinity past a = 44, giving 1).
// NaN stays NaN; tanh(+-inf) = +-1.
inline VF tanhf(VF x) {
  static constexpr float kS[] = {-0.33333333288736417f,   0.13333326389080444f,   -0.053966453694951316f,
                                 0.021851437422179696f,   -0.0087726123801817739f, 0.0033375082185281461f,
                                 -0.0010365791121111812f, 0.00018117800482860143f};
  const VF a = absf(x), t = a * a;
  VF s = setf(kS[7]);
  for (int i = 6; i >= 0; --i) s = fmaf(s, t, setf(kS[i]));
  const VF below = fmaf(a * t, s, a);
  const VF above = setf(1.0f) - setf(2.0f) / (KILN_SLEEF_F(exp)(a + a) + setf(1.0f));
  return where(nan_lanes(x), x, sign_of(x, where(ge(a, setf(0.9f)), above, below)));
}

// fmod of float32 lanes, exact (as fmod always is), for lanes with finite x, finite nonzero y
// and |x| < 2^23 |y|, where every integer up to the quotient is a float: q = trunc(x / y), one
// step toward zero where x / y rounded up onto the next integer (the only way rounding moves q:
// it is monotonic and that integer is a float; the remainder then has x's opposite sign), and
// x - q y in one fma, exact for the right q; a zero gets x's sign. Vectors with a lane outside
// that (a huge quotient, infinities, NaN, y = 0) take C's fmod.
inline VF fmodf(VF x, VF y) {
  const VF ax = absf(x), ay = absf(y);
  if (!all(mand(lt(ax, ay * setf(0x1p23f)), lt(ay, setf(__builtin_inff()))))) {
    alignas(64) float xs[kWF], ys[kWF];
    storef(xs, x), storef(ys, y);
    for (int i = 0; i < kWF; ++i) xs[i] = __builtin_fmodf(xs[i], ys[i]);
    return loadf(xs);
  }
  VF q = truncv(x / y);
  VF r = fmaf(-q, y, x);
  const VF step = sign_of(q, setf(1.0f));  // (q is not zero where it moves)
  q = where(mand(ne(r, setf(0.0f)), signs_differ(r, x)), q - step, q);
  return sign_of(x, absf(fmaf(-q, y, x)));
}
// Python's remainder from fmod's r: r + y where r is not zero and its sign differs from y's.
inline VF to_divisor_sign(VF r, VF y) { return where(mand(ne(r, setf(0.0f)), signs_differ(r, y)), r + y, r); }
// Python's floor division of float32 lanes, as elementwise.cpp's floor_div_float does it (exact
// at the edges, as CPython's float //): (x - fmod) / y, one less where fmod's sign differs from
// y's, rounded to the nearest integer below; a zero quotient keeps x / y's sign, y = 0 gives x / y.
inline VF floor_divf(VF x, VF y) {
  const VF q = x / y, mod = fmodf(x, y);
  VF d = (x - mod) / y;
  d = where(mand(ne(mod, setf(0.0f)), signs_differ(mod, y)), d - setf(1.0f), d);
  VF fl = floorv(d);
  fl = where(lt(setf(0.5f), d - fl), fl + setf(1.0f), fl);
  return where(ne(y, setf(0.0f)), where(ne(d, setf(0.0f)), fl, sign_of(q, setf(0.0f))), q);
}
#endif

// erff and tanhf on one float (the same functions as the vector forms, lane for lane;
// runtime/src/cpu/vec.cpp).
extern "C" float kiln_erff(float x);
extern "C" float kiln_tanhf(float x);

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

// o[i] = f(a[i], b[i]) for n floats or doubles, each input contiguous (step 1) or one value for
// all (step 0); the tail goes through padded local blocks.
template <typename T, typename F>
inline void map2(const T* a, int64_t sa, const T* b, int64_t sb, T* o, int64_t n, F f) {
  constexpr bool f32 = std::is_same_v<T, float>;
  constexpr int64_t w = f32 ? kWF : kWD;
  auto load = [](const T* p) { if constexpr (f32) return loadf(p); else return loadd(p); };
  auto in = [&](const T* p, int64_t step, int64_t i) {
    if constexpr (f32) return step ? loadf(p + i) : setf(*p);
    else return step ? loadd(p + i) : setd(*p);
  };
  auto store = [](T* p, auto v) { if constexpr (f32) storef(p, v); else stored(p, v); };
  int64_t i = 0;
  for (; i + w <= n; i += w) store(o + i, f(in(a, sa, i), in(b, sb, i)));
  if (i < n) {
    alignas(64) T ba[w] = {}, bb[w] = {}, bo[w];
    for (int64_t k = 0; k < n - i; ++k) ba[k] = a[sa * (i + k)], bb[k] = b[sb * (i + k)];
    store(bo, f(load(ba), load(bb)));
    std::memcpy(o + i, bo, size_t(n - i) * sizeof(T));
  }
}
#endif
}  // namespace kiln::cpu::vec
