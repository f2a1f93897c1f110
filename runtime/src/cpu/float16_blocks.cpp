// 16-bit floats by blocks: see float16_blocks.h.
#include "float16_blocks.h"

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

namespace kiln::cpu {

// (masked forms of the AVX-512 conversions: gcc 12 warns on the plain ones)
void widen(const Half* a, float* o, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(o + i, _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i))));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(o + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i))));
#endif
  for (; i < n; ++i) o[i] = float(a[i]);
}

void narrow(const float* a, Half* o, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__) || defined(__F16C__)
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
#endif
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), _mm512_maskz_cvtps_ph(0xffff, _mm512_loadu_ps(a + i), kNearest));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i), _mm256_cvtps_ph(_mm256_loadu_ps(a + i), kNearest));
#endif
  for (; i < n; ++i) o[i] = Half(a[i]);
}

void widen(const BFloat16* a, float* o, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)));
    _mm512_storeu_si512(o + i, _mm512_maskz_slli_epi32(0xffff, w, 16));
  }
#elif defined(__AVX2__)
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), _mm256_slli_epi32(w, 16));
  }
#endif
  for (; i < n; ++i) o[i] = float(a[i]);
}

// BFloat16::from_float by lanes: (x + 0x7fff + the kept part's last bit) >> 16 rounds to
// nearest even (overflow carries into the exponent: inf), and a NaN keeps its top bits, quiet.
void narrow(const float* a, BFloat16* o, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512i one = _mm512_set1_epi32(1), half_ulp = _mm512_set1_epi32(0x7fff), quiet = _mm512_set1_epi32(0x40);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_loadu_si512(a + i), top = _mm512_maskz_srli_epi32(0xffff, x, 16);
    const __m512i rounded = _mm512_maskz_srli_epi32(0xffff, _mm512_add_epi32(_mm512_add_epi32(x, half_ulp), _mm512_and_si512(top, one)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs_mask), inf);
    const __m512i r = _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(top, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), _mm512_maskz_cvtepi32_epi16(0xffff, r));
  }
#elif defined(__AVX2__)
  const __m256i one = _mm256_set1_epi32(1), half_ulp = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x40);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)), top = _mm256_srli_epi32(x, 16);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, half_ulp), _mm256_and_si256(top, one)), 16);
    // (no unsigned compare in AVX2: |x| fits a signed compare)
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
    const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(top, quiet), nan);
    // (every lane is below 2^16, so the signed-to-unsigned saturating pack keeps it)
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i), packed);
  }
#endif
  for (; i < n; ++i) o[i] = BFloat16(a[i]);
}

}  // namespace kiln::cpu
