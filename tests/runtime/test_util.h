// Helpers shared by the runtime unit tests.
#pragma once
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <vector>

namespace kiln::testing {

// Asserts that `t` has the given sizes and (as float64) the given values within tolerance.
inline void expect_values(const Tensor& t, std::vector<int64_t> sizes, std::vector<double> want,
                          double tol = 1e-6) {
  ASSERT_EQ(t.sizes().vec(), sizes);
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << "at " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "at " << i;
    }
  }
}

// Asserts that f() throws kiln::Error whose message contains `needle`.
template <typename F>
void expect_error(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected kiln::Error containing '" << needle << "'";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

}  // namespace kiln::testing
