// kiln's own vector math, exported for the LLVM backend: a compiled kernel calls these where it
// would call SLEEF (codegen/src/cpu/jit.cpp maps the scalar function and its vector forms to
// them when the process has them), so eager and compiled float32 erf are one function, in every
// lane of every loop: kiln_erff16 (AVX-512 builds), kiln_erff8 (AVX2, and AVX-512 builds through
// the 16-lane form) and kiln_erff, one element.
#include "vec.h"

#include <cmath>

#if KILN_HAVE_VEC
#if defined(__AVX512F__)
extern "C" __m512 kiln_erff16(__m512 x) { return kiln::cpu::vec::erff(x); }
extern "C" __m256 kiln_erff8(__m256 x) {  // (masked loads and stores: gcc 12 warns on the casts)
  __m256 r;
  _mm512_mask_storeu_ps(&r, 0xff, kiln::cpu::vec::erff(_mm512_maskz_loadu_ps(0xff, &x)));
  return r;
}
#else
extern "C" __m256 kiln_erff8(__m256 x) { return kiln::cpu::vec::erff(x); }
#endif
extern "C" float kiln_erff(float x) {
  alignas(64) float lanes[kiln::cpu::vec::kWF];
  kiln::cpu::vec::storef(lanes, kiln::cpu::vec::erff(kiln::cpu::vec::setf(x)));
  return lanes[0];
}
#else
extern "C" float kiln_erff(float x) { return std::erf(x); }
#endif
