// The kernel profiler (kiln/runtime/profile.h) on the CPU backend: what it records, under which
// names, and its errors. (On a GPU: tests/codegen/test_cuda_profile.cpp.)
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "../common/profile_check.h"

using namespace kiln;

namespace {

std::vector<Tensor> scale_add(const std::vector<Tensor>& v) { return {v[0] * 2 + v[1]}; }

using kiln::testing::profile_names;

}  // namespace

TEST(Profiler, RecordsEachCompiledKernelWithItsCallsAndBytes) {
  auto f = compile(scale_add, CompileOptions{.name = "scale_add"});
  std::vector<Tensor> in{randn({1000}), randn({1000})};
  (void)f(in);  // (traced and compiled before the profiler: not recorded)
  Profiler prof;
  for (int i = 0; i < 5; ++i) (void)f(in);
  (void)(in[0] + in[1]);  // an eager op on CPU tensors is not a program's kernel
  ProfileReport r = prof.stop();
  // two float32 inputs read, one output written
  kiln::testing::expect_one_kernel(r, "scale_add @graph0", "k0 elementwise mul,add 1000", "cpu", 5, 3 * 1000 * 4);
  ASSERT_EQ(r.kernels.size(), 1u);
  const KernelProfile& k = r.kernels[0];
  if (k.mean_ms() > 0) {
    EXPECT_DOUBLE_EQ(k.gbps(), double(k.bytes) / (k.mean_ms() * 1e6));
  }
  std::string table = r.table();
  EXPECT_NE(table.find("kernel profile: 1 kernel,"), std::string::npos) << table;
  EXPECT_NE(table.find(k.name), std::string::npos) << table;
  EXPECT_NE(table.find(" 12000 "), std::string::npos) << table;
}

// The timeline: one event per call, in order on the one thread that ran them, and the same as a
// Chrome trace (a name with a quote and a backslash comes back as it was).
TEST(Profiler, KeepsEveryCallOnATimeline) {
  auto f = compile(scale_add, CompileOptions{.name = "scale \"add\\"});
  std::vector<Tensor> in{randn({256}), randn({256})};
  (void)f(in);
  Profiler prof;
  for (int i = 0; i < 4; ++i) (void)f(in);
  ProfileReport r = prof.stop();
  ASSERT_EQ(r.kernels.size(), 1u) << profile_names(r);
  ASSERT_EQ(r.events.size(), 4u);
  EXPECT_EQ(r.dropped_events, 0u);
  double sum_us = 0;
  for (size_t i = 0; i < r.events.size(); ++i) {
    const ProfileEvent& e = r.events[i];
    EXPECT_EQ(e.kernel, 0u);
    EXPECT_GE(e.thread, 0);
    EXPECT_EQ(e.thread, r.events[0].thread);
    EXPECT_GE(e.start_us, 0);
    if (i > 0) {
      EXPECT_GE(e.start_us, r.events[i - 1].start_us + r.events[i - 1].dur_us);
    }
    sum_us += e.dur_us;
  }
  EXPECT_NEAR(sum_us, 1e3 * r.kernels[0].total_ms, 1e-6 * std::max(1.0, sum_us));
  nlohmann::json trace = nlohmann::json::parse(r.chrome_trace());
  int spans = 0;
  bool cpu_process = false;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M") cpu_process |= e.at("pid") == 0 && e.at("args").at("name") == "cpu";
    if (e.at("ph") != "X") continue;
    spans++;
    EXPECT_EQ(e.at("name").get<std::string>(), r.kernels[0].name);
    EXPECT_EQ(e.at("name").get<std::string>().rfind("scale \"add\\ @graph0 ", 0), 0u);
    EXPECT_EQ(e.at("pid"), 0);
    EXPECT_EQ(e.at("args").at("bytes"), 3 * 256 * 4);
  }
  EXPECT_EQ(spans, 4);
  EXPECT_TRUE(cpu_process) << trace.dump();
}

// The report sorts its kernels by total time; every event still names its own kernel.
TEST(Profiler, EventsFollowTheirKernelsIntoTheSortedReport) {
  auto small = compile(scale_add, CompileOptions{.name = "small"});
  auto large = compile(scale_add, CompileOptions{.name = "large"});
  std::vector<Tensor> a{randn({16}), randn({16})}, b{randn({1 << 22}), randn({1 << 22})};
  (void)small(a), (void)large(b);
  Profiler prof;
  for (int i = 0; i < 3; ++i) (void)small(a);  // (recorded first: the first record)
  for (int i = 0; i < 2; ++i) (void)large(b);
  ProfileReport r = prof.stop();
  ASSERT_EQ(r.kernels.size(), 2u) << profile_names(r);
  EXPECT_EQ(r.kernels[0].name.rfind("large @graph0 ", 0), 0u) << profile_names(r);  // (the larger total)
  ASSERT_EQ(r.events.size(), 5u);
  for (size_t i = 0; i < r.events.size(); ++i)
    EXPECT_EQ(r.kernels.at(r.events[i].kernel).name.rfind(i < 3 ? "small @graph0 " : "large @graph0 ", 0), 0u)
        << "event " << i << ": " << r.kernels.at(r.events[i].kernel).name;
}

// A span open while its profiler stops (a kernel on another thread, say) is not recorded by the
// next profiler; nor is a span inside another (the outer kernel's time holds it).
TEST(Profiler, SpansBelongToTheirProfilerAndOnlyTheOutermostIsTimed) {
  std::optional<Profiler> first(std::in_place);
  profile::Span open = profile::begin(Device::cpu());
  EXPECT_TRUE(open.on);
  (void)first->stop();
  first.reset();
  Profiler second;
  profile::end(open, "left open", 1);
  {
    profile::Scope outer(Device::cpu());
    profile::Scope inner(Device::cpu());
    EXPECT_TRUE(outer.on());
    EXPECT_FALSE(inner.on());
    outer.finish("outer", 2);
  }
  {
    profile::Scope dropped(Device::cpu());  // (never finished: an exception, say)
    EXPECT_TRUE(dropped.on());
  }
  profile::Scope after(Device::cpu());  // (the dropped scope closed: spans are timed again)
  EXPECT_TRUE(after.on());
  after.finish("after", 3);
  ProfileReport r = second.stop();
  ASSERT_EQ(r.kernels.size(), 2u) << profile_names(r);
  EXPECT_EQ(r.kernels[0].name == "outer" ? r.kernels[1].name : r.kernels[0].name, "after") << profile_names(r);
}

TEST(Profiler, RecordsOnlyWhileItRecords) {
  auto f = compile(scale_add, CompileOptions{.name = "scale_add"});
  std::vector<Tensor> in{randn({64}), randn({64})};
  (void)f(in);
  {
    Profiler prof;
    (void)f(in);
    EXPECT_TRUE(profile::active());
    EXPECT_EQ(prof.stop().kernels.size(), 1u);
    EXPECT_FALSE(profile::active());
    (void)f(in);
    EXPECT_THROW((void)prof.stop(), Error);  // (stopped once already)
  }
  // A new profiler starts empty: the calls after the last one stopped are not in it.
  Profiler prof;
  EXPECT_EQ(prof.stop().kernels.size(), 0u);
  EXPECT_EQ(ProfileReport{}.table(), "kernel profile: 0 kernels, 0.000 ms in all\n");
}

TEST(Profiler, OneAtATime) {
  Profiler a;
  try {
    Profiler b;
    FAIL() << "a second profiler started while one records";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already recording"), std::string::npos) << e.what();
  }
  (void)a.stop();
  Profiler c;  // (after the first stopped: allowed)
}

// Each graph of a trace tree has its own name (the function's, the graph's as explain() prints
// it, its hash), and a speculation its own: every call runs graph 0's reduction once, alone or
// merged with the branch it speculated on.
TEST(Profiler, NamesTheGraphsOfATraceTreeAndItsSpeculations) {
  auto branch = [](const std::vector<Tensor>& v) {
    return std::vector{(v[0].sum() > 0).item<bool>() ? v[0] * 2 : v[0] * -2};
  };
  auto f = compile(branch, CompileOptions{.name = "branch"});
  Tensor pos = rand({4096}) + 0.5, neg = -pos;
  for (int i = 0; i < 6; ++i) (void)f(std::vector<Tensor>{i % 2 ? neg : pos});
  Profiler prof;
  const int calls = 12;
  for (int i = 6; i < 6 + calls; ++i) (void)f(std::vector<Tensor>{i % 2 ? neg : pos});
  ProfileReport r = prof.stop();
  int64_t graph0 = 0;
  bool speculated = false;
  for (const KernelProfile& k : r.kernels) {
    ASSERT_EQ(k.name.rfind("branch @graph", 0), 0u) << profile_names(r);
    if (k.name.rfind("branch @graph0 ", 0) == 0) graph0 += k.calls;
    speculated |= k.name.find(" speculating @graph1 ") != std::string::npos &&
                  k.name.find(": k0 reduction sum,gt,mul 4096") != std::string::npos;
  }
  EXPECT_EQ(graph0, calls) << profile_names(r);
  EXPECT_TRUE(speculated) << profile_names(r);
  EXPECT_GT(f.stats().speculated, 0u);
}
