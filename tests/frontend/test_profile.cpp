// The kernel profiler (kiln/runtime/profile.h) on the CPU backend: what it records, under which
// names, and its errors. (On a GPU: tests/codegen/test_cuda_profile.cpp.)
#include <gtest/gtest.h>
#include <kiln/kiln.h>

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
