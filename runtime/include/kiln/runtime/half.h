// 16-bit floating-point storage types. Arithmetic is never done in 16 bits: kernels load a
// Half/BFloat16 as float, compute in float and round once on store, as PyTorch's CPU kernels do.
#pragma once
#include <cstdint>
#include <cstring>

namespace kiln {

namespace detail {
inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
}  // namespace detail

// IEEE 754 binary16.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }

  // Branch-free, so that loops over arrays of it vectorise (with branches a float16 relu took
  // 60 times PyTorch's time). Exponent and mantissa move to float32's places with the exponent
  // rebiased by 224 (a half's 31, inf and NaN, becomes float32's 255), then one multiply by
  // 2^-112 finishes the rebias exactly: normal values and inf keep their bits, a NaN comes out
  // quiet (as the F16C instructions give it). Subnormals (and zero) instead: the mantissa as the
  // low bits of a float32 0.5 + man 2^-24, minus 0.5, exact. The sign goes on last.
  static float to_float(uint16_t h) {
    const uint32_t w = uint32_t(h) << 17;  // exponent and mantissa at the top, sign shifted out
    const float normal = detail::bits_f32((w >> 4) + (224u << 23)) * 1.925929944387236e-34f;  // 2^-112
    const float subnormal = detail::bits_f32((w >> 17) | (126u << 23)) - 0.5f;
    const uint32_t mag = w < (1u << 27) ? detail::f32_bits(subnormal) : detail::f32_bits(normal);
    return detail::bits_f32((uint32_t(h & 0x8000) << 16) | mag);
  }
  // Round to nearest, ties to even; overflow goes to inf, NaN stays NaN (quiet, its payload's
  // top bits kept). Branch-free too, with the FPU doing the rounding: adding the power of two at
  // the rounded half's last place (the subnormals' 2^-24 at least) to |f| (times 4, exact) leaves
  // the half's exponent and mantissa at the bottom of the float32 sum's bits. Overflow and NaN
  // are integer selects (no float trick a -ffast-math user build could fold away). Bit for bit
  // the branchy form it replaced, over every float32 input.
  static uint16_t from_float(float f) {
    const uint32_t w = detail::f32_bits(f), ax = w & 0x7fffffffu;
    uint32_t bias = (w + w) & 0xff000000u;  // the exponent, one place up
    bias = bias < 0x71000000u ? 0x71000000u : bias;
    const float sum = detail::bits_f32((bias >> 1) + 0x07800000u) + detail::bits_f32(ax) * 4.0f;
    const uint32_t b = detail::f32_bits(sum);
    uint32_t mag = ((b >> 13) & 0x7c00u) + (b & 0x0fffu);
    mag = ax >= 0x477ff000u ? 0x7c00u : mag;                                // rounds to >= 65520: inf
    mag = ax > 0x7f800000u ? 0x7e00u | ((ax >> 13) & 0x3ffu) : mag;         // NaN
    return uint16_t(((w >> 16) & 0x8000u) | mag);
  }
};

// bfloat16: the top half of a float32.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }
  static float to_float(uint16_t b) { return detail::bits_f32(uint32_t(b) << 16); }
  static uint16_t from_float(float f) {
    // Branch-free (a select, not a jump) so that loops over arrays of it vectorise.
    uint32_t x = detail::f32_bits(f);
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;  // round to nearest even
    uint32_t quiet_nan = (x >> 16) | 0x40;
    return uint16_t((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
};

}  // namespace kiln
