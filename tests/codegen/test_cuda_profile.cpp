// The kernel profiler (kiln/runtime/profile.h) on a GPU: spans between CUDA events on the
// device's stream, a CUDA graph's replay as one record with nothing from its capture, and
// eager ops on GPU tensors under their op's name. On kiln's emulated driver in CI (its events
// read the host's clock), on a real GPU with KILN_TEST_REAL_CUDA=1.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/runtime/cuda.h>

#include <optional>
#include <string>
#include <vector>

#include "../common/close.h"
#include "../common/profile_check.h"
#include "cuda_util.h"

using namespace kiln;
using kiln::testing::cpu;
using kiln::testing::kGpu;

namespace {

std::vector<Tensor> scale_add(const std::vector<Tensor>& v) { return {v[0] * 2 + v[1]}; }

using kiln::testing::profile_names;

}  // namespace

TEST(CudaProfiler, TimesEachKernelBetweenEventsOnTheStream) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  auto f = compile(scale_add, CompileOptions{.name = "scale_add"});
  std::vector<Tensor> in{randn({3000}).to(kGpu), randn({3000}).to(kGpu)};
  (void)f(in);
  Profiler prof;
  std::vector<Tensor> out;
  for (int i = 0; i < 4; ++i) out = f(in);  // (no synchronize: stop() waits for the events)
  ProfileReport r = prof.stop();
  kiln::testing::expect_one_kernel(r, "scale_add @graph0", "k0 elementwise mul,add 3000", "cuda:0", 4, 3 * 3000 * 4);
  // On the timeline: four spans of the GPU (no host thread), in stream order, from after the start.
  ASSERT_EQ(r.events.size(), 4u);
  for (size_t i = 0; i < r.events.size(); ++i) {
    EXPECT_EQ(r.events[i].thread, -1);
    EXPECT_GE(r.events[i].start_us, 0);
    if (i > 0) {
      EXPECT_GE(r.events[i].start_us, r.events[i - 1].start_us);
    }
  }
  EXPECT_NE(r.chrome_trace().find("\"pid\": 1, \"args\": {\"name\": \"cuda:0\"}"), std::string::npos) << r.chrome_trace();
  EXPECT_TRUE(kiln::testing::close(cpu(out[0]), cpu(in[0]) * 2 + cpu(in[1])));
}

TEST(CudaProfiler, AGraphReplayIsOneRecordAndItsCaptureNone) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  CompileOptions opts{.name = "graphed"};
  opts.mode = CompileOptions::Mode::ReduceOverhead;
  auto f = compile([](const std::vector<Tensor>& v) { return std::vector{softmax(v[0] * 2, 1) + v[1]}; }, opts);
  std::vector<Tensor> in{randn({8, 40}).to(kGpu), randn({40}).to(kGpu)};
  (void)f(in);  // (the trace: eager ops on the GPU, each under its op's name)
  Profiler prof;
  const int calls = 5;
  for (int i = 0; i < calls; ++i) (void)f(in);
  ProfileReport r = prof.stop();
  // The first compiled call runs the kernels (one record each) and captures the graph, whose
  // kernels are not run then; every later call is one replay.
  int64_t replays = -1, first = 0;
  for (const KernelProfile& k : r.kernels) {
    ASSERT_EQ(k.name.rfind("graphed @graph0 ", 0), 0u) << profile_names(r);
    if (k.name.find(": CUDA graph of ") != std::string::npos)
      replays = k.calls;
    else
      first = std::max(first, k.calls);
  }
  EXPECT_EQ(replays, calls - 1) << profile_names(r);
  EXPECT_EQ(first, 1) << profile_names(r);
}

// A span left open when its profiler stops is dropped, events and all (its clock anchor
// belonged to the old profiler). A cond kernel is one record, whatever its branch runs.
TEST(CudaProfiler, AStaleSpanIsDroppedAndACondIsOneKernel) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  auto fn = [](const std::vector<Tensor>& v) {
    Tensor y = cond(v[0].sum() > 0, [](const Tensor& x) { return x.exp() * 2; }, [](const Tensor& x) { return -x; }, v[0]);
    return std::vector{y + v[1]};
  };
  auto f = compile(fn, CompileOptions{.name = "joined"});
  std::vector<Tensor> in{(rand({40}) + 0.5).to(kGpu), randn({40}).to(kGpu)};
  (void)f(in);
  std::optional<Profiler> first(std::in_place);
  profile::Span open = profile::begin(kGpu);
  EXPECT_TRUE(open.on);
  (void)first->stop();
  first.reset();
  Profiler prof;
  profile::end(open, "left open", 1);
  for (int i = 0; i < 2; ++i) (void)f(in);
  ProfileReport r = prof.stop();
  ASSERT_EQ(r.kernels.size(), 3u) << profile_names(r);  // the sum and its test, the cond, the add
  for (const KernelProfile& k : r.kernels) {
    EXPECT_EQ(k.name.rfind("joined @graph0 ", 0), 0u) << profile_names(r);
    EXPECT_EQ(k.calls, 2) << profile_names(r);
  }
  EXPECT_TRUE(kiln::testing::close(cpu(f(in)[0]), fn({cpu(in[0]), cpu(in[1])})[0]));
}

TEST(CudaProfiler, EagerOpsOnGpuTensorsAreRecordedUnderTheirOp) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor a = randn({500}).to(kGpu), b = randn({500}).to(kGpu);
  (void)(a + b);
  Profiler prof;
  Tensor c = a + b;
  Tensor d = c.exp();
  ProfileReport r = prof.stop();
  bool add = false, exp = false;
  for (const KernelProfile& k : r.kernels) {
    add |= k.name.rfind("eager add: k0 elementwise add 500", 0) == 0 && k.calls == 1 && k.device == "cuda:0";
    exp |= k.name.rfind("eager exp: k0 elementwise exp 500", 0) == 0 && k.calls == 1;
  }
  EXPECT_TRUE(add) << profile_names(r);
  EXPECT_TRUE(exp) << profile_names(r);
}
