// kiln's own vector math, exported for the LLVM backend: a compiled kernel calls these where it
// would call SLEEF or the C library (codegen/src/cpu/jit.cpp maps the scalar function and its
// vector forms to them when the process has them), so eager and compiled float32 exp, erf, tanh
// and fmod are one function each, in every lane of every loop: NAME16 (AVX-512 builds), NAME8 (AVX2,
// and AVX-512 builds through the 16-lane form) and NAME, one element.
#include "vec.h"

#include <cmath>

#if KILN_HAVE_VEC
using kiln::cpu::vec::VF;
#if defined(__AVX512F__)
// The 8-lane forms run the 16-lane ones on the vector zero-extended, in registers. (They went
// through memory by masked loads and stores before, which the core does not forward to a load:
// softmax compiled over rows of 24, an 8-lane loop with three calls a row, ran 3.15 ms against
// 0.97 in registers: docs/perf-journal.md, "Compiled column reductions split along their rows",
// its compiled softmax over short rows.)
// (The maskz_ forms: gcc 12 warns on the plain insert and extract, which its headers write
// with an undefined operand.)
static inline __m512 widen8(__m256 x) {
  return _mm512_castpd_ps(_mm512_maskz_insertf64x4(0xff, _mm512_setzero_pd(), _mm256_castps_pd(x), 0));
}
static inline __m256 narrow8(__m512 x) { return _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, _mm512_castps_pd(x), 0)); }
#define KILN_OWN_UNARY(name)                                                                \
  extern "C" __m512 kiln_##name##16(__m512 x) { return kiln::cpu::vec::name(x); }           \
  extern "C" __m256 kiln_##name##8(__m256 x) { return narrow8(kiln::cpu::vec::name(widen8(x))); }
extern "C" __m512 kiln_fmodf16(__m512 x, __m512 y) { return kiln::cpu::vec::fmodf(x, y); }
// (fmod's idle lanes divide 0 by 1, which keeps it on its fast path)
extern "C" __m256 kiln_fmodf8(__m256 x, __m256 y) {
  return narrow8(kiln::cpu::vec::fmodf(widen8(x), _mm512_mask_blend_ps(0xff, _mm512_set1_ps(1.0f), widen8(y))));
}
#else
#define KILN_OWN_UNARY(name) \
  extern "C" __m256 kiln_##name##8(__m256 x) { return kiln::cpu::vec::name(x); }
extern "C" __m256 kiln_fmodf8(__m256 x, __m256 y) { return kiln::cpu::vec::fmodf(x, y); }
#endif
// One element: lane 0 of the vector form on a broadcast, so that a kernel's remainder loop
// computes the function its vector body does.
#define KILN_OWN_SCALAR(name)                                                \
  extern "C" float kiln_##name(float x) {                                    \
    alignas(64) float lanes[kiln::cpu::vec::kWF];                            \
    kiln::cpu::vec::storef(lanes, kiln::cpu::vec::name(kiln::cpu::vec::setf(x))); \
    return lanes[0];                                                         \
  }
KILN_OWN_UNARY(expf)
KILN_OWN_UNARY(erff)
KILN_OWN_UNARY(tanhf)
KILN_OWN_SCALAR(expf)
KILN_OWN_SCALAR(erff)
KILN_OWN_SCALAR(tanhf)
#else
extern "C" float kiln_expf(float x) { return std::exp(x); }
extern "C" float kiln_erff(float x) { return std::erf(x); }
extern "C" float kiln_tanhf(float x) { return std::tanh(x); }
#endif
// (one element: C's fmod is exact, so this is the vector forms' function too)
extern "C" float kiln_fmodf(float x, float y) { return std::fmod(x, y); }
