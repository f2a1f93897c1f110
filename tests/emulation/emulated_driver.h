// Makes a test binary use kiln's emulated CUDA driver (tests/emulation/driver.cpp): a global
// test environment sets KILN_CUDA_DRIVER before any test touches CUDA (kiln loads the driver
// on first use). Unless KILN_TEST_REAL_CUDA=1: then the machine's own driver is used, and the
// same tests run on a GPU.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace kiln::testing {

// (KILN_TEST_ALWAYS_EMULATE: the binary's tests run kernels on host memory, e.g. the cpu
// buffers of the kernel program runner, which only the emulation can)
inline bool use_real_cuda() {
#if defined(KILN_TEST_ALWAYS_EMULATE)
  return false;
#else
  const char* v = std::getenv("KILN_TEST_REAL_CUDA");
  return v && std::string(v) == "1";
#endif
}

class EmulatedCuda : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!use_real_cuda()) setenv("KILN_CUDA_DRIVER", KILN_EMULATED_DRIVER, 1);
  }
};
inline ::testing::Environment* const emulated_cuda_env = ::testing::AddGlobalTestEnvironment(new EmulatedCuda);

}  // namespace kiln::testing
