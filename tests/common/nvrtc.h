#pragma once
// The tests that compile CUDA with NVRTC need no GPU, only the toolkit's library. Where it
// cannot be loaded they skip with the reason, except under KILN_REQUIRE_NVRTC=1, where they
// fail: scripts/test.sh (CI) sets it, so that a machine without NVRTC, or a loader that stopped
// finding it, cannot pass CI without compiling a single kernel.
#include <gtest/gtest.h>
#include <kiln/runtime/cuda.h>

#include <cstdlib>
#include <cstring>

namespace kiln::testing {
inline bool nvrtc_required() {
  const char* e = std::getenv("KILN_REQUIRE_NVRTC");
  return e && std::strcmp(e, "1") == 0;
}
}  // namespace kiln::testing

// (a macro: GTEST_SKIP and FAIL return from the test's own body)
#define KILN_NEEDS_NVRTC()                                                                        \
  do {                                                                                            \
    if (!::kiln::cuda::nvrtc_is_available()) {                                                    \
      if (::kiln::testing::nvrtc_required())                                                      \
        FAIL() << "KILN_REQUIRE_NVRTC=1 and " << ::kiln::cuda::nvrtc_unavailable_reason();       \
      GTEST_SKIP() << ::kiln::cuda::nvrtc_unavailable_reason();                                   \
    }                                                                                             \
  } while (0)
