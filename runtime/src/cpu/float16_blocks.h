// 16-bit floats by blocks (internal): widen n float16 or bfloat16 values to float32, and round
// n float32 values back, bit for bit what Half's and BFloat16's own conversions (half.h) give
// one at a time. Where the ISA has them, by vectors: F16C's (or AVX-512's) vcvtph2ps and
// vcvtps2ph for float16, shifts and an integer round-to-nearest-even for bfloat16. gcc leaves
// loops over half.h's conversions as long integer sequences (a float16 relu took 3x PyTorch's
// time, a float16 sum 3x); kernels over 16-bit floats widen a block, run their float32 loop and
// narrow the result instead.
#pragma once
#include <cstdint>

#include <kiln/runtime/half.h>

namespace kiln::cpu {

void widen(const Half* a, float* o, int64_t n);
void widen(const BFloat16* a, float* o, int64_t n);
void narrow(const float* a, Half* o, int64_t n);
void narrow(const float* a, BFloat16* o, int64_t n);

// Elements per block for kernels that widen into a local float32 buffer.
inline constexpr int64_t kWidenBlock = 256;

// o[0, n) from a[0, n) (16-bit floats, contiguous; o may be a): each block of a widened into a
// float32 buffer, body(buffer, m) run on it in place, the buffer rounded back into o.
template <typename T, typename Body>
void by_widened_blocks(const T* a, T* o, int64_t n, Body body) {
  alignas(64) float buf[kWidenBlock];
  for (int64_t b = 0; b < n; b += kWidenBlock) {
    const int64_t m = n - b < kWidenBlock ? n - b : kWidenBlock;
    widen(a + b, buf, m);
    body(buf, m);
    narrow(buf, o + b, m);
  }
}

}  // namespace kiln::cpu
