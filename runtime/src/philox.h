// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. Output block i of a stream is a pure function of (key, counter i),
// so any element can be computed independently: on any thread and, later, on the GPU.
#pragma once
#include <array>
#include <cstdint>

namespace kiln::philox {

using Block = std::array<uint32_t, 4>;

inline Block block(uint64_t key, uint64_t counter_lo, uint64_t counter_hi = 0) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = uint32_t(counter_lo), c1 = uint32_t(counter_lo >> 32);
  uint32_t c2 = uint32_t(counter_hi), c3 = uint32_t(counter_hi >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t(kM0) * c0, p1 = uint64_t(kM1) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

// Uniform in [0, 1) from 24 (float) or 53 (double) random bits.
inline float uniform_f32(uint32_t x) { return float(x >> 8) * (1.0f / 16777216.0f); }
inline double uniform_f64(uint32_t hi, uint32_t lo) {
  return double(((uint64_t(hi) << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace kiln::philox
