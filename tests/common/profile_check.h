// Checks of the kernel profiler's records (kiln/runtime/profile.h) shared by its CPU and GPU
// tests: the CPU backend's (tests/frontend/test_profile.cpp) and the CUDA backend's
// (tests/codegen/test_cuda_profile.cpp).
#pragma once
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <string>

namespace kiln::testing {

// Every record, one per line, for failure messages.
inline std::string profile_names(const ProfileReport& r) {
  std::string s;
  for (const KernelProfile& k : r.kernels) s += k.name + " on " + k.device + " (" + std::to_string(k.calls) + ")\n";
  return s;
}

// A report of exactly one kernel: the program label `label` (then " <hash>: "), kernel
// `summary`, on `device`, with `calls` calls of `bytes` each, its times in order.
inline void expect_one_kernel(const ProfileReport& r, const std::string& label, const std::string& summary,
                              const std::string& device, int64_t calls, int64_t bytes) {
  ASSERT_EQ(r.kernels.size(), 1u) << profile_names(r);
  const KernelProfile& k = r.kernels[0];
  EXPECT_EQ(k.name.rfind(label + " ", 0), 0u) << k.name;
  EXPECT_NE(k.name.find(": " + summary), std::string::npos) << k.name;
  EXPECT_EQ(k.device, device);
  EXPECT_EQ(k.calls, calls);
  EXPECT_EQ(k.bytes, bytes);
  EXPECT_GE(k.min_ms, 0);
  EXPECT_LE(k.min_ms, k.mean_ms());
  EXPECT_LE(k.mean_ms(), k.max_ms);
  EXPECT_DOUBLE_EQ(r.total_ms(), k.total_ms);
}

}  // namespace kiln::testing
