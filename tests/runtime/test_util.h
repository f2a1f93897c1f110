// Helpers shared by the runtime unit tests.
#pragma once
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/runtime/trace.h>

#include <cmath>
#include <functional>
#include <string>
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

// A data-dependent op as the tracing hook reported it.
struct DataDependentCall {
  std::string op;
  std::vector<Tensor> inputs;
  Tensor output;
  std::function<Tensor(std::span<const Tensor>)> replay;
  uint_least32_t line;
};

// A recorder for the tracing hook's tests: counts every report; keeps the data-dependent ones
// and the in-place ones (op, operands' kinds and attributes).
class FakeRecorder : public trace::Recorder {
 public:
  struct InPlace {
    const TensorImpl* self;
    OpId op;
    std::vector<const TensorImpl*> tensors;  // the tensor operands, in order (numbers left out)
    size_t operands;
    std::vector<Attr> attrs;
  };
  int records = 0, write_backs = 0, creations = 0, host_accesses = 0;
  std::vector<DataDependentCall> calls;
  std::vector<InPlace> inplace;
  void record(OpId, std::span<const trace::Operand>, std::vector<Attr>, std::span<const Tensor>) override {
    ++records;
  }
  void write_back(const Tensor&, const Tensor&) override { ++write_backs; }
  void record_inplace(const Tensor& self, OpId op, std::span<const trace::Operand> in, std::vector<Attr> attrs) override {
    InPlace r{self.impl_ptr().get(), op, {}, in.size(), std::move(attrs)};
    for (const trace::Operand& o : in)
      if (o.tensor) r.tensors.push_back(o.tensor->impl_ptr().get());
    inplace.push_back(std::move(r));
  }
  void created(const Tensor&, std::string_view, std::span<const Scalar>) override { ++creations; }
  void host_access(const Tensor&, trace::HostAccess, const std::source_location&, const void*) override {
    ++host_accesses;
  }
  void data_dependent(std::string_view op, std::span<const Tensor> inputs, const Tensor& output,
                      std::function<Tensor(std::span<const Tensor>)> replay,
                      const std::source_location& where) override {
    calls.push_back({std::string(op), std::vector<Tensor>(inputs.begin(), inputs.end()), output,
                     std::move(replay), where.line()});
  }
  int other_reports() const { return records + write_backs + creations + host_accesses + int(inplace.size()); }
};

}  // namespace kiln::testing
