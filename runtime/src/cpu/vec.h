// SIMD maps over contiguous float32/float64 arrays with SLEEF's vectorised math (internal).
// gcc does not vectorise calls to libm's sinf/expf (without -ffast-math, which would break NaN
// semantics), so the transcendental ops go through SLEEF's 1.0-ULP functions instead, 16 (AVX-512)
// or 8 (AVX2) floats at a time; float32 exp, erf, tanh and fmod through kiln's own (expf, erff,
// tanhf, fmodf below).
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
#define KILN_SLEEF_F05(fn) Sleef_##fn##f16_u05  // (functions SLEEF has in 0.5 ulp only: hypot)
#define KILN_SLEEF_D05(fn) Sleef_##fn##d8_u05
inline VF fmaf(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
inline VF absf(VF x) { return _mm512_abs_ps(x); }
inline VF minf(VF a, VF b) { return _mm512_maskz_min_ps(0xffff, a, b); }  // (gcc 12 warns on _mm512_min_ps)
inline VF maxf(VF a, VF b) { return _mm512_maskz_max_ps(0xffff, a, b); }  // (min and max: b where either is NaN)
inline VF rintv(VF x) { return _mm512_maskz_roundscale_ps(0xffff, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// p * 2^n for integral n, rounded once (denormal results included)
inline VF ldexpv(VF p, VF n) { return _mm512_maskz_scalef_ps(0xffff, p, n); }
// The lower and upper half of the lanes, as float64 (masked forms: gcc 12 warns on the plain).
inline VD cvt_lo(VF v) {
  return _mm512_maskz_cvtps_pd(0xff, _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, _mm512_castps_pd(v), 0)));
}
inline VD cvt_hi(VF v) {
  return _mm512_maskz_cvtps_pd(0xff, _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, _mm512_castps_pd(v), 1)));
}
// Integer lanes: truncation of non-negative floats, back to float, and a lookup in a table of 8
// floats by each lane's index (0..7). (Masked forms: gcc 12 warns on the plain ones.)
using VI = __m512i;
inline VI truncate_to_int(VF x) { return _mm512_maskz_cvttps_epi32(0xffff, x); }
inline VF to_float(VI x) { return _mm512_maskz_cvtepi32_ps(0xffff, x); }
inline VF lookup8(const float* t, VI i) { return _mm512_maskz_permutexvar_ps(0xffff, i, _mm512_maskz_loadu_ps(0xff, t)); }
inline VF truncv(VF x) { return _mm512_maskz_roundscale_ps(0xffff, x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
inline VF floorv(VF x) { return _mm512_maskz_roundscale_ps(0xffff, x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
inline VF ceilv(VF x) { return _mm512_maskz_roundscale_ps(0xffff, x, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
inline VD truncv(VD x) { return _mm512_maskz_roundscale_pd(0xff, x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
inline VD floorv(VD x) { return _mm512_maskz_roundscale_pd(0xff, x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
inline VD ceilv(VD x) { return _mm512_maskz_roundscale_pd(0xff, x, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
// Lane masks: comparisons (ordered: false where either lane is NaN; ne: true there), and, all.
using MF = __mmask16;
inline MF lt(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
inline MF ge(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
inline MF ne(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }
inline MF eq(VF a, VF b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
inline MF nan_lanes(VF a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
inline MF signs_differ(VF a, VF b) {
  return _mm512_test_epi32_mask(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)),
                                _mm512_set1_epi32(int(0x80000000u)));
}
inline MF mand(MF a, MF b) { return MF(a & b); }
inline MF mor(MF a, MF b) { return MF(a | b); }
inline MF no_lanes() { return MF(0); }
inline bool all(MF m) { return m == MF(0xffff); }
inline bool any(MF m) { return m != MF(0); }
inline VF where(MF m, VF then, VF otherwise) { return _mm512_mask_blend_ps(m, otherwise, then); }
inline VF sign_of(VF x, VF r) {  // |r| with x's sign (r non-negative)
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(int(0x80000000u)));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign));
}
// The same for float64 lanes.
using MD = __mmask8;
inline MD lt(VD a, VD b) { return _mm512_cmp_pd_mask(a, b, _CMP_LT_OQ); }
inline MD nan_lanes(VD a) { return _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q); }
inline MD eq(VD a, VD b) { return _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ); }
inline MD mor(MD a, MD b) { return MD(a | b); }
inline VD where(MD m, VD then, VD otherwise) { return _mm512_mask_blend_pd(m, otherwise, then); }
// Lane j of shift_down(v, w) is lane j + w of v (mod the width); first(v) is lane 0.
inline VF shift_down(VF v, int w) {
  const VI j = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  return _mm512_maskz_permutexvar_ps(0xffff, _mm512_and_si512(_mm512_add_epi32(j, _mm512_set1_epi32(w)), _mm512_set1_epi32(15)), v);
}
inline VD shift_down(VD v, int w) {
  const VI j = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  return _mm512_maskz_permutexvar_pd(0xff, _mm512_and_si512(_mm512_add_epi64(j, _mm512_set1_epi64(w)), _mm512_set1_epi64(7)), v);
}
// A NaN-keeping running max and min: x where x > a (x < a) or x is NaN, else a. vmaxps(x, a)
// is x > a ? x : a, and the mask, which does not depend on a, keeps NaN lanes of x: one
// instruction on the chain through a.
inline VF running_max(VF a, VF x) { return _mm512_mask_max_ps(x, MF(~nan_lanes(x)), x, a); }
inline VF running_min(VF a, VF x) { return _mm512_mask_min_ps(x, MF(~nan_lanes(x)), x, a); }
inline VD running_max(VD a, VD x) { return _mm512_mask_max_pd(x, MD(~nan_lanes(x)), x, a); }
inline VD running_min(VD a, VD x) { return _mm512_mask_min_pd(x, MD(~nan_lanes(x)), x, a); }
inline float first(VF v) { return _mm512_cvtss_f32(v); }
inline double first(VD v) { return _mm512_cvtsd_f64(v); }
// The first k lanes (0 < k < the width) loaded from p and the rest `fill`, and the first k
// lanes of v stored to p: rows' tails without a padded copy.
inline VF loadf_part(const float* p, int64_t k, float fill) {
  return _mm512_mask_loadu_ps(setf(fill), __mmask16((1u << k) - 1), p);
}
inline VD loadd_part(const double* p, int64_t k, double fill) {
  return _mm512_mask_loadu_pd(setd(fill), __mmask8((1u << k) - 1), p);
}
inline void storef_part(float* p, VF v, int64_t k) { _mm512_mask_storeu_ps(p, __mmask16((1u << k) - 1), v); }
inline void stored_part(double* p, VD v, int64_t k) { _mm512_mask_storeu_pd(p, __mmask8((1u << k) - 1), v); }
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
#define KILN_SLEEF_F05(fn) Sleef_##fn##f8_u05
#define KILN_SLEEF_D05(fn) Sleef_##fn##d4_u05
#if defined(__FMA__)
inline VF fmaf(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
#else
inline VF fmaf(VF a, VF b, VF c) { return _mm256_add_ps(_mm256_mul_ps(a, b), c); }
#endif
inline VF absf(VF x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
inline VF minf(VF a, VF b) { return _mm256_min_ps(a, b); }
inline VF maxf(VF a, VF b) { return _mm256_max_ps(a, b); }
inline VF rintv(VF x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// p * 2^n for integral n in [-150, 128] and p in [0.5, 2), rounded once: two powers of two of
// half the exponent each, the first product exact (normal), the second the only rounding.
inline VF ldexpv(VF p, VF n) {
  const __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const VF s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const VF s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}
inline VD cvt_lo(VF v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
inline VD cvt_hi(VF v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }
using VI = __m256i;
inline VI truncate_to_int(VF x) { return _mm256_cvttps_epi32(x); }
inline VF to_float(VI x) { return _mm256_cvtepi32_ps(x); }
inline VF lookup8(const float* t, VI i) { return _mm256_permutevar8x32_ps(_mm256_loadu_ps(t), i); }
inline VF truncv(VF x) { return _mm256_round_ps(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
inline VF floorv(VF x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
inline VF ceilv(VF x) { return _mm256_round_ps(x, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
inline VD truncv(VD x) { return _mm256_round_pd(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
inline VD floorv(VD x) { return _mm256_round_pd(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
inline VD ceilv(VD x) { return _mm256_round_pd(x, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
using MF = __m256;  // all ones in the lanes that are set
inline MF lt(VF a, VF b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
inline MF ge(VF a, VF b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
inline MF ne(VF a, VF b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }
inline MF eq(VF a, VF b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
inline MF nan_lanes(VF a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
inline MF signs_differ(VF a, VF b) {
  return _mm256_castsi256_ps(_mm256_srai_epi32(_mm256_castps_si256(_mm256_xor_ps(a, b)), 31));
}
inline MF mand(MF a, MF b) { return _mm256_and_ps(a, b); }
inline MF mor(MF a, MF b) { return _mm256_or_ps(a, b); }
inline MF no_lanes() { return _mm256_setzero_ps(); }
inline bool all(MF m) { return _mm256_movemask_ps(m) == 0xff; }
inline bool any(MF m) { return _mm256_movemask_ps(m) != 0; }
inline VF where(MF m, VF then, VF otherwise) { return _mm256_blendv_ps(otherwise, then, m); }
inline VF sign_of(VF x, VF r) { return _mm256_or_ps(r, _mm256_and_ps(x, _mm256_set1_ps(-0.0f))); }
using MD = __m256d;
inline MD lt(VD a, VD b) { return _mm256_cmp_pd(a, b, _CMP_LT_OQ); }
inline MD nan_lanes(VD a) { return _mm256_cmp_pd(a, a, _CMP_UNORD_Q); }
inline MD eq(VD a, VD b) { return _mm256_cmp_pd(a, b, _CMP_EQ_OQ); }
inline MD mor(MD a, MD b) { return _mm256_or_pd(a, b); }
inline VD where(MD m, VD then, VD otherwise) { return _mm256_blendv_pd(otherwise, then, m); }
inline VF shift_down(VF v, int w) {
  const VI j = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  return _mm256_permutevar8x32_ps(v, _mm256_and_si256(_mm256_add_epi32(j, _mm256_set1_epi32(w)), _mm256_set1_epi32(7)));
}
inline VD shift_down(VD v, int w) {  // (as pairs of float32 lanes: AVX2 has no variable float64 permute)
  const VI j = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  const VI k = _mm256_and_si256(_mm256_add_epi32(j, _mm256_set1_epi32(2 * w)), _mm256_set1_epi32(7));
  return _mm256_castps_pd(_mm256_permutevar8x32_ps(_mm256_castpd_ps(v), k));
}
inline VF running_max(VF a, VF x) { return _mm256_blendv_ps(_mm256_max_ps(x, a), x, nan_lanes(x)); }
inline VF running_min(VF a, VF x) { return _mm256_blendv_ps(_mm256_min_ps(x, a), x, nan_lanes(x)); }
inline VD running_max(VD a, VD x) { return _mm256_blendv_pd(_mm256_max_pd(x, a), x, nan_lanes(x)); }
inline VD running_min(VD a, VD x) { return _mm256_blendv_pd(_mm256_min_pd(x, a), x, nan_lanes(x)); }
inline float first(VF v) { return _mm256_cvtss_f32(v); }
inline double first(VD v) { return _mm256_cvtsd_f64(v); }
inline __m256i first_lanes32(int64_t k) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(k)), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
}
inline __m256i first_lanes64(int64_t k) {
  return _mm256_cmpgt_epi64(_mm256_set1_epi64x(k), _mm256_set_epi64x(3, 2, 1, 0));
}
inline VF loadf_part(const float* p, int64_t k, float fill) {
  const __m256i m = first_lanes32(k);
  return _mm256_blendv_ps(setf(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}
inline VD loadd_part(const double* p, int64_t k, double fill) {
  const __m256i m = first_lanes64(k);
  return _mm256_blendv_pd(setd(fill), _mm256_maskload_pd(p, m), _mm256_castsi256_pd(m));
}
inline void storef_part(float* p, VF v, int64_t k) { _mm256_maskstore_ps(p, first_lanes32(k), v); }
inline void stored_part(double* p, VD v, int64_t k) { _mm256_maskstore_pd(p, first_lanes64(k), v); }
#endif

#if KILN_HAVE_VEC
// The same by element type, for code written once over float32 and float64.
inline VF load(const float* p) { return loadf(p); }
inline VD load(const double* p) { return loadd(p); }
inline void store(float* p, VF v) { storef(p, v); }
inline void store(double* p, VD v) { stored(p, v); }
inline VF load_part(const float* p, int64_t k, float fill) { return loadf_part(p, k, fill); }
inline VD load_part(const double* p, int64_t k, double fill) { return loadd_part(p, k, fill); }
inline void store_part(float* p, VF v, int64_t k) { storef_part(p, v, k); }
inline void store_part(double* p, VD v, int64_t k) { stored_part(p, v, k); }
inline VF splat(float x) { return setf(x); }
inline VD splat(double x) { return setd(x); }

// v's lanes folded by halves: lane j with lane j + W/2, then with j + W/4, and so on; lane 0's
// result. (A tree: combine(a, b) = a + b rounds as a vector sum of pairs does.)
template <typename V, typename Combine>
inline auto fold_halves(V v, Combine combine) {
  constexpr int W = int(sizeof(V) / sizeof(first(v)));
  for (int w = W / 2; w > 0; w /= 2) v = combine(v, shift_down(v, w));
  return first(v);
}

// exp of float32 lanes, within 0.77 ulp of the float64 exp over every float32 input (measured
// exhaustively, the worst among the denormal results; SLEEF's expf_u10: 0.99), at 0.125 against
// SLEEF's 0.164 ns per element on a Zen 5 core. x = n ln2 + r, |r| <= ln2 / 2, with n = rint(x /
// ln2) and ln2 in two parts: rh = x - n ln2_hi is exact (ln2_hi has 15 significant bits, n at most
// 8) and rl = -n ln2_lo is tiny. e^r = 1 + r + r^2 P(r), P of degree 4 (a least-squares fit of
// e^r's relative error at 400 Chebyshev nodes in 40-digit arithmetic: 3.6e-9), summed so that
// only the last addition rounds at the result's scale: hi = 1 + rh with its rounding error lo
// (exact: |rh| < 1), then hi + (lo + rl + r^2 P). x is clamped to [-104, 89] first, past which
// exp is 0 and infinity in float32, which keeps n in ldexpv's range; NaN stays NaN.
inline VF expf(VF x) {
  static constexpr float kP[] = {0.4999998858839592f, 0.166665184010842f, 0.04166953422494094f,
                                 0.008368923427202557f, 0.0013751382142456272f};
  x = minf(setf(89.0f), maxf(setf(-104.0f), x));
  const VF n = rintv(x * setf(1.44269504088896341f));
  const VF rh = fmaf(-n, setf(0.693145751953125f), x), rl = n * setf(-1.428606765330187e-06f), r = rh + rl;
  VF p = setf(kP[4]);
  for (int i = 3; i >= 0; --i) p = fmaf(p, r, setf(kP[i]));
  const VF hi = setf(1.0f) + rh, lo = rh - (hi - setf(1.0f));
  return ldexpv(hi + fmaf(r * r, p, lo + rl), n);
}

// erf of float32 lanes, within 0.77 ulp of the float64 erf over every float32 input (measured
// exhaustively; SLEEF's erff_u10: 1.10), odd to the bit, at 0.26 ns per element on a Zen 5 core
// against SLEEF's 1.42 (and 0.41 for the two-piece form with an exp this replaced). erf is odd, so it works on a = |x|, in eight pieces of [0, 4):
//  - a < 0.5: erf = a + a R(a^2), R(t) = erf(sqrt t) / sqrt t - 1, a degree-5 polynomial (the
//    small term added last keeps the rounding of the leading 2/sqrt(pi) out of the result);
//  - piece k = 1..7, a in [k/2, k/2 + 1/2): erf = hi + (lo + u P(u)), u = a - (k/2 + 1/4) (exact),
//    P of degree 6 and the constant term as a pair of floats, so that the last addition is the
//    only rounding at the result's scale; each lane takes its piece's coefficients from a table
//    of eight by its index (one permute a coefficient). a is clamped to 3.92, past which erf
//    rounds to 1 in float32.
// The polynomials are least-squares fits of the relative error at 300 Chebyshev nodes in
// 40-digit arithmetic, each coefficient rounded to float32 in turn and the rest refitted (R's
// error 9.7e-10, the pieces' at most 1.4e-9). NaN stays NaN; erf(+-inf) = +-1.
inline VF erff(VF x) {
  static constexpr float kR[] = {0.12837916612625122f,   -0.37612631916999817f, 0.11283636093139648f,
                                 -0.026851050555706024f, 0.005153366830199957f, -0.0007023582584224641f};
  // kPiece[j][k]: piece k's hi, lo, then the coefficient of u^(j-1) (column 0 unused)
  static constexpr float kPiece[9][8] = {
      {0, 0.7111556529998779f, 0.9229001402854919f, 0.9866716861724854f, 0.9985373020172119f,
       0.9998993873596191f, 0.9999957084655762f, 0.9999998807907104f},
      {0, -1.9625817415658275e-08f, -1.135699267962309e-08f, -1.503324753571178e-08f, -1.8722877470622734e-08f,
       -9.272047130082228e-09f, -1.1235270491738447e-08f, 5.482026388392569e-09f},
      {0, 0.6429310441017151f, 0.23652112483978271f, 0.05277499556541443f, 0.007142319343984127f,
       0.0005862772813998163f, 2.9189011911512353e-05f, 8.814164971227001e-07f},
      {0, -0.48219814896583557f, -0.29565173387527466f, -0.09235620498657227f, -0.016070157289505005f,
       -0.0016122674569487572f, -9.486933413427323e-05f, -3.3053686365747126e-06f},
      {0, 0.02679087221622467f, 0.167535662651062f, 0.09015737473964691f, 0.021724499762058258f,
       0.0027603807393461466f, 0.00019581260858103633f, 7.973476385814138e-06f},
      {0, 0.15067513287067413f, -0.006132523994892836f, -0.048105381429195404f, -0.01908823847770691f,
       -0.0032577088568359613f, -0.00028616937925107777f, -1.3837628102919552e-05f},
      {0, -0.0532846674323082f, -0.0471811406314373f, 0.006618829909712076f, 0.010660414583981037f,
       0.0027562796603888273f, 0.00031362948357127607f, 1.812729169614613e-05f},
      {0, -0.026577580720186234f, 0.02060294710099697f, 0.009047976695001125f, -0.0027797564398497343f,
       -0.0016678670654073358f, -0.00027375901117920876f, -1.9710849301191047e-05f},
      {0, 0.01843673549592495f, 0.0037051597610116005f, -0.005936194211244583f, -0.0007245097076520324f,
       0.0006359058315865695f, 0.00017359096091240644f, 2.093149123538751e-05f}};
  const VF a = absf(x), c = minf(a, setf(3.92f));  // (NaN lanes take 3.92: a valid piece)
  const VI k = truncate_to_int(c + c);
  const VF u = c - fmaf(to_float(k), setf(0.5f), setf(0.25f));
  VF p = lookup8(kPiece[8], k);
  for (int j = 7; j >= 2; --j) p = fmaf(p, u, lookup8(kPiece[j], k));
  const VF above = lookup8(kPiece[0], k) + fmaf(u, p, lookup8(kPiece[1], k));
  const VF t = a * a;
  VF r = setf(kR[5]);
  for (int j = 4; j >= 0; --j) r = fmaf(r, t, setf(kR[j]));
  const VF below = fmaf(a, r, a);
  return where(nan_lanes(x), x, sign_of(x, where(lt(a, setf(0.5f)), below, above)));
}

// tanh of float32 lanes, within 0.9985 ulp of the float64 tanh over every float32 input
// (measured exhaustively; SLEEF's tanhf_u10: 1.0), at 0.27 ns per element on a Zen 5 core
// against SLEEF's 0.92 (0.37 with SLEEF's exp in place of expf). tanh is odd, so it works on a = |x|:
//  - a < 0.9: tanh = a + a^3 S(a^2), S(t) = (tanh(sqrt t) / sqrt t - 1) / t, degree 7 (a least-
//    squares fit of the relative error at 500 Chebyshev nodes in 40-digit arithmetic: 1.3e-9);
//  - a >= 0.9: tanh = 1 - 2 / (exp(2a) + 1), expf above; 1 - tanh <= 0.29 there, which damps
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
  const VF above = setf(1.0f) - setf(2.0f) / (expf(a + a) + setf(1.0f));
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

// expf, erff and tanhf on one float (the same functions as the vector forms, lane for lane;
// runtime/src/cpu/vec.cpp).
extern "C" float kiln_expf(float x);
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
  auto in = [&](const T* p, int64_t step, int64_t i) { return step ? load(p + i) : splat(*p); };
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
