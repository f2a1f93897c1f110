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
// The 8-lane forms run the 16-lane ones on a half-filled vector (masked loads and stores: gcc
// 12 warns on the casts).
#define KILN_OWN_UNARY(name)                                                                \
  extern "C" __m512 kiln_##name##16(__m512 x) { return kiln::cpu::vec::name(x); }           \
  extern "C" __m256 kiln_##name##8(__m256 x) {                                              \
    __m256 r;                                                                               \
    _mm512_mask_storeu_ps(&r, 0xff, kiln::cpu::vec::name(_mm512_maskz_loadu_ps(0xff, &x))); \
    return r;                                                                               \
  }
extern "C" __m512 kiln_fmodf16(__m512 x, __m512 y) { return kiln::cpu::vec::fmodf(x, y); }
// (fmod's idle lanes divide 0 by 1, which keeps it on its fast path)
extern "C" __m256 kiln_fmodf8(__m256 x, __m256 y) {
  __m256 r;
  const VF wide = kiln::cpu::vec::fmodf(_mm512_maskz_loadu_ps(0xff, &x), _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), 0xff, &y));
  _mm512_mask_storeu_ps(&r, 0xff, wide);
  return r;
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
