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

  static float to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return detail::bits_f32(sign | 0x7f800000u | (man << 13));  // inf / nan
    if (exp == 0) {
      // zero or subnormal: value = man * 2^-24, exact in float
      float v = float(man) * 5.9604644775390625e-08f;
      return sign ? -v : v;
    }
    return detail::bits_f32(sign | ((exp + 112) << 23) | (man << 13));
  }
  // Round to nearest, ties to even; overflow goes to inf, NaN stays NaN (quiet).
  static uint16_t from_float(float f) {
    uint32_t x = detail::f32_bits(f);
    uint16_t sign = uint16_t((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return uint16_t(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
    if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to >= 65520: inf
    if (ax < 0x38800000u) {
      // result is subnormal or zero: let the FPU round by adding a magic constant
      float m = detail::bits_f32(ax) + 0.5f;  // 0.5 = 2^-1: shifts the value's bits to the bottom
      return uint16_t(sign | (detail::f32_bits(m) - 0x3f000000u));
    }
    uint32_t odd = (ax >> 13) & 1;
    ax += 0xc8000fffu + odd;  // rebias exponent (-112 << 23) and round to nearest even
    return uint16_t(sign | (ax >> 13));
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
