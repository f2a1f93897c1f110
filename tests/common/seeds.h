#pragma once
// The seeds the random-input suites (differential programs, property graphs) check. By default
// 1..count, the same every run, so CI is deterministic. KILN_TEST_SEED_BASE=B shifts them to
// B+1..B+count: scripts/gpu.sh's test phase sets a fresh B each run, so each GPU run checks
// programs and input values no earlier run saw. A failure names its seed S; the same check of
// that seed alone is KILN_TEST_SEED_BASE=S-1 with a count of 1 (or, where the suite has one,
// its own single-seed variable, e.g. KILN_PROPERTY_SEED=S).
#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace kiln::testing {

struct SeedRange {
  uint32_t first = 1, last = 0;  // inclusive; empty when last < first
};

// The seed base as set (0 when unset): a sampling suite (the fuzz's mutants) starts its sample there.
inline uint32_t seed_base() {
  const char* b = std::getenv("KILN_TEST_SEED_BASE");
  return b ? uint32_t(std::strtoul(b, nullptr, 10)) : 0;
}

// count: the suite's default; count_env: the variable that overrides it (KILN_DIFFERENTIAL_PROGRAMS).
inline SeedRange seed_range(int count, const char* count_env) {
  if (const char* n = std::getenv(count_env)) count = std::max(1, std::atoi(n));
  const uint32_t base = seed_base();
  return {base + 1, base + uint32_t(count)};
}

}  // namespace kiln::testing
