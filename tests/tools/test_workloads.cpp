// Every workload of the shared list (tools/workloads): kiln::compile(fn) gives results
// bitwise equal to running fn eagerly, on fresh random inputs, along every path of its trace
// tree; the second round of calls replays from the cache; every graph explain() reports
// parses back and verifies. Plus the registry itself: names, sizes, inputs.
#include <gtest/gtest.h>
#include <kiln/codegen/cpu.h>
#include <kiln/ir/graph.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "../common/close.h"
#include "workloads.h"

using namespace kiln;
namespace wl = kiln::workloads;

namespace {

// Bitwise equality (NaN-aware) of values, dtype, sizes and strides: the reference executor
// runs the same eager kernels, so its replay reproduces the eager result exactly.
void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.sizes().vec(), want.sizes().vec()) << what;
  EXPECT_EQ(got.strides().vec(), want.strides().vec()) << what;
  Tensor a = got.contiguous(), b = want.contiguous();
  EXPECT_EQ(0, std::memcmp(a.data_ptr(), b.data_ptr(), size_t(a.nbytes()))) << what;
}

// For the CPU backend: within the dtype's tolerance (tests/common/close.h); strides exact.
void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  EXPECT_TRUE(kiln::testing::close(got, want)) << what;
  EXPECT_EQ(got.strides().vec(), want.strides().vec()) << what;
}

std::vector<Tensor> clone_all(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.clone());
  return out;
}

// Every graph parses back to the same text and passes the verifier (types agree with inference).
void expect_graphs_verify(const Explanation& ex, const std::string& what) {
  ASSERT_FALSE(ex.graphs.empty()) << what;
  for (size_t i = 0; i < ex.graphs.size(); ++i) {
    const std::string& text = ex.graphs[i].text;
    ir::Graph g;
    try {
      g = ir::parse(text);
    } catch (const Error& e) {
      ADD_FAILURE() << what << " graph " << i << " does not parse: " << e.what() << "\n" << text;
      continue;
    }
    auto err = ir::verify(g);
    EXPECT_FALSE(err.has_value()) << what << " graph " << i << ": " << (err ? err->str() : "") << "\n" << text;
    EXPECT_EQ(ir::print(g), text) << what << " graph " << i;
    EXPECT_EQ(ir::print(ir::from_json(ir::to_json(g))), text) << what << " graph " << i << " JSON round trip";
  }
}

std::vector<std::string> workload_names() {
  std::vector<std::string> names;
  for (const wl::Workload& w : wl::all_workloads()) names.push_back(w.name);
  return names;
}

// Runs `w` compiled and eagerly on `rounds` rounds of fresh inputs (one set per path each
// round) and compares everything; returns the compiled function's explanation of the first set.
Explanation check_workload(const wl::Workload& w, std::optional<DType> dtype, int rounds, uint64_t seed,
                           CompileOptions::Backend backend = CompileOptions::Backend::Reference) {
  CompileOptions opts;
  opts.backend = backend;
  const bool exact = backend == CompileOptions::Backend::Reference;
  auto expect_same = [exact](const Tensor& got, const Tensor& want, const std::string& what) {
    if (exact) ::expect_same(got, want, what);
    else expect_close(got, want, what);
  };
  auto f = compile([&w](const std::vector<Tensor>& in) { return w.run(in); }, opts);
  std::vector<Tensor> first;
  for (int r = 0; r < rounds; ++r) {
    auto sets = w.path_inputs(wl::Tier::Small, seed + 100 * uint64_t(r), dtype);
    EXPECT_EQ(int(sets.size()), w.paths);
    for (size_t p = 0; p < sets.size(); ++p) {
      const std::string what = w.name + " round " + std::to_string(r) + " path " + std::to_string(p);
      std::vector<Tensor> eager_in = clone_all(sets[p]);
      std::vector<Tensor> compiled_in = w.mutates_inputs ? clone_all(sets[p]) : sets[p];
      std::vector<Tensor> want = w.run(eager_in);
      std::vector<Tensor> got = f(compiled_in);
      EXPECT_FALSE(got.empty()) << what;
      EXPECT_EQ(got.size(), want.size()) << what;
      for (size_t k = 0; k < got.size() && k < want.size(); ++k)
        expect_same(got[k], want[k], what + " output " + std::to_string(k));
      // inputs: written exactly as eagerly (inplace_chain), untouched otherwise
      for (size_t k = 0; k < compiled_in.size(); ++k) {
        expect_same(compiled_in[k], eager_in[k], what + " input " + std::to_string(k) + " after the call");
        if (!w.mutates_inputs) expect_same(compiled_in[k], sets[p][k], what + " input " + std::to_string(k) + " unchanged");
      }
      if (w.mutates_inputs) {
        // inplace_chain returns its input itself, as the eager program does
        EXPECT_TRUE(got.at(0).is_same(compiled_in.at(0))) << what;
      }
      if (r == 0 && p == 0) first = w.mutates_inputs ? clone_all(sets[p]) : sets[p];
    }
  }
  CompileStats st = f.stats();
  EXPECT_EQ(st.compiles, uint64_t(w.paths)) << w.name;        // each path traced once
  EXPECT_EQ(st.misses, 1u) << w.name;                         // one signature
  EXPECT_EQ(st.guard_failures, uint64_t(w.paths - 1)) << w.name;
  EXPECT_EQ(st.hits, uint64_t(w.paths * (rounds - 1))) << w.name;  // later rounds replay
  EXPECT_GE(st.hits, 1u) << w.name;
  EXPECT_EQ(st.eager_calls, 0u) << w.name;
  Explanation ex = f.explain(first);
  EXPECT_TRUE(ex.eager_reason.empty()) << w.name << ": " << ex.eager_reason;
  return ex;
}

class WorkloadTest : public ::testing::TestWithParam<std::string> {
 protected:
  const wl::Workload& workload() const {
    const wl::Workload* w = wl::find_workload(GetParam());
    EXPECT_NE(w, nullptr);
    return *w;
  }
};

}  // namespace

// The tracer's property: replaying the traced graphs on the reference executor gives
// eager-identical results on every workload.
TEST_P(WorkloadTest, CompiledMatchesEagerBitwise) {
  const wl::Workload& w = workload();
  Explanation ex = check_workload(w, std::nullopt, /*rounds=*/2, /*seed=*/1);
  expect_graphs_verify(ex, w.name);
  if (w.paths == 1) {
    EXPECT_EQ(ex.graphs.size(), 1u) << ex;  // one graph, no break
    EXPECT_TRUE(ex.breaks.empty()) << ex;
    EXPECT_EQ(ex.stats.breaks, 0u) << ex;
  } else {
    // the prefix up to the branch, then one graph per path
    EXPECT_EQ(ex.graphs.size(), size_t(1 + w.paths)) << ex;
    EXPECT_EQ(ex.breaks.size(), 1u) << ex;
    ASSERT_EQ(ex.guards.size(), 1u) << ex;
    EXPECT_NE(ex.guards[0].find("true"), std::string::npos) << ex;
    EXPECT_NE(ex.guards[0].find("false"), std::string::npos) << ex;
  }
  for (const auto& g : ex.graphs) EXPECT_GT(g.ops, 0u) << g.text;
}

// The same in float64 (every floating-point input overridden), a second dtype for every
// kernel on the path.
TEST_P(WorkloadTest, CompiledMatchesEagerInFloat64) {
  const wl::Workload& w = workload();
  expect_graphs_verify(check_workload(w, kFloat64, 2, 7), w.name + " (f64)");
}

// The CPU backend (the default): every workload's kernels compiled by LLVM match eager within
// the dtype's tolerance, in float32, float64 and float16, and every kernel that is not a library
// op (matmul, einsum) or a branch runs as machine code. A build without LLVM (KILN_WITH_LLVM=OFF)
// runs every kernel on the reference executor and must say so; its results were still checked.
void expect_compiled(const Explanation& ex, const std::string& what) {
  bool llvm = codegen::has_cpu_codegen();
  for (const auto& g : ex.graphs) {
    if (!llvm) {
      EXPECT_EQ(g.backend.rfind("cpu: 0 of ", 0), 0u) << what << ": " << g.backend;
      if (g.backend.find("interpreted ") != std::string::npos) {
        EXPECT_NE(g.backend.find("interpreted k0: kiln built without LLVM"), std::string::npos) << what << ": " << g.backend;
      }
      continue;
    }
    EXPECT_EQ(g.backend.rfind("cpu: ", 0), 0u) << what << ": " << g.backend;
    size_t pos = 0;
    while ((pos = g.backend.find("interpreted ", pos)) != std::string::npos) {
      std::string why = g.backend.substr(pos + 12, g.backend.find(';', pos) - pos - 12);
      EXPECT_TRUE(why.find("opaque kernel") != std::string::npos || why.find("control kernel") != std::string::npos)
          << what << ": " << g.backend;
      pos += 12;
    }
  }
}
TEST_P(WorkloadTest, CpuBackendMatchesEager) {
  const wl::Workload& w = workload();
  expect_compiled(check_workload(w, std::nullopt, 2, 11, CompileOptions::Backend::Cpu), w.name);
}
TEST_P(WorkloadTest, CpuBackendMatchesEagerInFloat64) {
  const wl::Workload& w = workload();
  expect_compiled(check_workload(w, kFloat64, 2, 13, CompileOptions::Backend::Cpu), w.name + " (f64)");
}
TEST_P(WorkloadTest, CpuBackendMatchesEagerInFloat16) {
  const wl::Workload& w = workload();
  expect_compiled(check_workload(w, kFloat16, 2, 17, CompileOptions::Backend::Cpu), w.name + " (f16)");
}

// Each call traces at most once per path; a fresh compile of the same program starts over.
TEST_P(WorkloadTest, SecondCallHitsTheCache) {
  const wl::Workload& w = workload();
  auto f = compile([&w](const std::vector<Tensor>& in) { return w.run(in); });
  auto sets = w.path_inputs(wl::Tier::Small, 3);
  std::vector<Tensor> in = w.mutates_inputs ? clone_all(sets[0]) : sets[0];
  f(in);
  EXPECT_EQ(f.stats().hits, 0u);
  std::vector<Tensor> again = w.mutates_inputs ? clone_all(sets[0]) : sets[0];
  f(again);
  EXPECT_EQ(f.stats().hits, 1u);
  EXPECT_EQ(f.stats().compiles, 1u);
}

INSTANTIATE_TEST_SUITE_P(All, WorkloadTest, ::testing::ValuesIn(workload_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// add_sin_cos_bf16 also runs in float16 through the dtype override.
TEST(Workloads, HalfPrecisionOverride) {
  const wl::Workload& w = *wl::find_workload("add_sin_cos_bf16");
  auto in = w.make_inputs(wl::Tier::Small, 0, kFloat16);
  ASSERT_EQ(in.size(), 2u);
  EXPECT_EQ(in[0].dtype(), kFloat16);
  Explanation ex = check_workload(w, kFloat16, 2, 11);
  expect_graphs_verify(ex, "add_sin_cos_bf16 (f16)");
  EXPECT_NE(ex.graphs.at(0).text.find("f16["), std::string::npos) << ex.graphs[0].text;
}

// ---- the registry ----

TEST(WorkloadRegistry, HasTheEighteenWorkloadsOfTheListInOrder) {
  const std::vector<std::string> expected = {
      "add_sin_cos", "poly",    "where_scale", "broadcast_bias", "transpose_add", "unrolled_loop",
      "inplace_chain", "gelu_tanh", "sum_f64", "row_sum", "softmax", "log_softmax",
      "layernorm", "nbody_forces", "bias_relu", "attention_scores", "branch_sign", "add_sin_cos_bf16"};
  EXPECT_EQ(workload_names(), expected);
  for (const auto& name : expected) {
    const wl::Workload* w = wl::find_workload(name);
    ASSERT_NE(w, nullptr) << name;
    EXPECT_FALSE(w->description.empty()) << name;
    EXPECT_FALSE(w->inputs.empty()) << name;
    EXPECT_TRUE(bool(w->run)) << name;
  }
  EXPECT_EQ(wl::find_workload("nope"), nullptr);
  EXPECT_EQ(wl::find_workload(""), nullptr);
}

TEST(WorkloadRegistry, SizesPerTierFollowTheList) {
  auto sizes = [](const char* name, wl::Tier t, size_t input = 0) {
    return wl::find_workload(name)->input_specs(t).at(input).sizes;
  };
  const int64_t M = int64_t(1) << 20;
  using V = std::vector<int64_t>;
  EXPECT_EQ(sizes("add_sin_cos", wl::Tier::Small), V{1000});
  EXPECT_EQ(sizes("add_sin_cos", wl::Tier::Bench), V{16 * M});
  EXPECT_EQ(sizes("poly", wl::Tier::Small), V{10000});
  EXPECT_EQ(sizes("where_scale", wl::Tier::Gpu), (V{16384, 16384}));
  EXPECT_EQ(sizes("broadcast_bias", wl::Tier::Bench, 1), V{4096});
  EXPECT_EQ(sizes("sum_f64", wl::Tier::Bench), V{M});
  EXPECT_EQ(sizes("softmax", wl::Tier::Gpu), (V{65536, 1024}));
  EXPECT_EQ(sizes("nbody_forces", wl::Tier::Small), (V{2, 64}));
  EXPECT_EQ(sizes("nbody_forces", wl::Tier::Bench, 1), V{2500});
  EXPECT_EQ(sizes("bias_relu", wl::Tier::Gpu, 2), V{8192});
  EXPECT_EQ(sizes("attention_scores", wl::Tier::Bench), (V{32, 8, 100, 64}));
  EXPECT_EQ(sizes("branch_sign", wl::Tier::Small), V{100});
  EXPECT_EQ(wl::find_workload("sum_f64")->input_specs(wl::Tier::Small)[0].dtype, kFloat64);
  EXPECT_EQ(wl::find_workload("add_sin_cos_bf16")->input_specs(wl::Tier::Small)[0].dtype, kBFloat16);
  EXPECT_EQ(wl::tier_from_name("bench"), wl::Tier::Bench);
  EXPECT_EQ(wl::tier_from_name("huge"), std::nullopt);
  EXPECT_EQ(wl::tier_name(wl::Tier::Gpu), "gpu");
}

TEST(WorkloadRegistry, InputsAreFreshRandomAndNeverZero) {
  for (const wl::Workload& w : wl::all_workloads()) {
    auto a = w.make_inputs(wl::Tier::Small, 5);
    auto b = w.make_inputs(wl::Tier::Small, 5);
    auto c = w.make_inputs(wl::Tier::Small, 6);
    ASSERT_EQ(a.size(), w.inputs.size()) << w.name;
    for (size_t k = 0; k < a.size(); ++k) {
      const std::string what = w.name + " input " + w.inputs[k].name;
      EXPECT_EQ(a[k].sizes().vec(), w.inputs[k].sizes[0]) << what;
      EXPECT_EQ((a[k] == 0).sum().item<int64_t>(), 0) << what << " has zeros";
      expect_same(a[k], b[k], what + " (same seed)");
      EXPECT_FALSE((a[k] == c[k]).all().item<bool>()) << what << ": another seed gives other values";
    }
  }
  // masses are positive; where_scale's x straddles its 0.5 threshold
  auto nb = wl::find_workload("nbody_forces")->make_inputs(wl::Tier::Small, 0);
  EXPECT_TRUE((nb[1] > 0).all().item<bool>());
  auto ws = wl::find_workload("where_scale")->make_inputs(wl::Tier::Small, 0);
  EXPECT_TRUE((ws[0] > 0.5).any().item<bool>());
  EXPECT_TRUE((ws[0] <= 0.5).any().item<bool>());
}

TEST(WorkloadRegistry, OverridesAndPaths) {
  const wl::Workload& w = *wl::find_workload("add_sin_cos");
  auto in = w.make_inputs(wl::Tier::Small, 0, std::nullopt, {{"b", kFloat64, std::vector<int64_t>{4, 1000}}});
  EXPECT_EQ(in[0].sizes().vec(), std::vector<int64_t>{1000});
  EXPECT_EQ(in[1].sizes().vec(), (std::vector<int64_t>{4, 1000}));
  EXPECT_EQ(in[1].dtype(), kFloat64);
  EXPECT_THROW(w.make_inputs(wl::Tier::Small, 0, std::nullopt, {{"c", std::nullopt, std::nullopt}}), Error);
  auto zero_d = w.input_specs(wl::Tier::Small, std::nullopt, {{"a", std::nullopt, std::vector<int64_t>{}}});
  EXPECT_TRUE(zero_d[0].sizes.empty());
  EXPECT_EQ(zero_d[0].str(), "a: f32[]");
  // branch_sign: one input set per sign of the sum
  const wl::Workload& b = *wl::find_workload("branch_sign");
  auto sets = b.path_inputs(wl::Tier::Small, 0);
  ASSERT_EQ(sets.size(), 2u);
  EXPECT_GT(sets[0][0].sum().item<double>(), 0);
  EXPECT_LT(sets[1][0].sum().item<double>(), 0);
  // the dtype override leaves non-floating inputs alone and reaches every floating one
  auto f16 = wl::find_workload("layernorm")->make_inputs(wl::Tier::Small, 0, kFloat16);
  for (const Tensor& t : f16) EXPECT_EQ(t.dtype(), kFloat16);
}
