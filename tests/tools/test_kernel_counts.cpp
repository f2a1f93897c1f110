// Every workload of the shared list through the full optimizer pipeline: the kernel counts the
// fusion pass must reach, the kernel program verifying after every pass, and the kernel
// interpreter giving what the unoptimised graph gives.
#include <gtest/gtest.h>
#include <kiln/ir/graph.h>
#include <kiln/kiln.h>
#include <kiln/passes/kernel.h>
#include <kiln/passes/pass.h>

#include <map>
#include <string>
#include <vector>

#include "../passes/check_program.h"
#include "workloads.h"

using namespace kiln;
namespace wl = kiln::workloads;

namespace {

// The graphs a workload traces into (every path of its trace tree), at the small tier.
std::vector<ir::Graph> traced_graphs(const wl::Workload& w, DType dt = kFloat32) {
  auto f = compile([&w](const std::vector<Tensor>& v) { return w.run(v); });
  std::vector<Tensor> in;
  for (int path = 0; path < w.paths; ++path) {
    in = w.make_inputs(wl::Tier::Small, 1, dt);
    if (w.steer) w.steer(in, path);
    f(in);
  }
  std::vector<ir::Graph> out;
  for (const auto& gi : f.explain(in).graphs) out.push_back(ir::parse(gi.text));
  return out;
}

// Kernels of the first graph of each workload after the default pipeline (the most a workload
// may take; the list asks for one kernel per fused program and at most two for n-body).
const std::map<std::string, size_t> kExpectedKernels = {
    {"add_sin_cos", 1}, {"poly", 1},        {"where_scale", 1},     {"broadcast_bias", 1},
    {"transpose_add", 1}, {"unrolled_loop", 1}, {"inplace_chain", 1}, {"gelu_tanh", 1},
    {"sum_f64", 1},     {"row_sum", 1},     {"softmax", 1},         {"log_softmax", 1},
    {"layernorm", 1},   {"nbody_forces", 2}, {"bias_relu", 1},      {"attention_scores", 2},
    {"branch_sign", 1}, {"add_sin_cos_bf16", 1},
};

class KernelCounts : public ::testing::TestWithParam<std::string> {};

TEST_P(KernelCounts, FullPipeline) {
  const wl::Workload& w = *wl::find_workload(GetParam());
  auto graphs = traced_graphs(w);
  ASSERT_FALSE(graphs.empty());
  passes::PipelineOptions opts;
  opts.verify_each = true;
  for (size_t i = 0; i < graphs.size(); ++i) {
    passes::Module m = passes::optimize(graphs[i], opts);
    ASSERT_TRUE(m.program);
    std::string what = w.name + " graph " + std::to_string(i);
    if (i == 0) {
      EXPECT_LE(m.program->kernels.size(), kExpectedKernels.at(w.name)) << what << "\n" << passes::print(m);
    }
    for (uint64_t seed : {1, 2}) kiln::testing::expect_program_matches(m.graph, *m.program, seed, what);
    // The optimised program also matches the graph as traced (canonicalization kept results).
    kiln::testing::expect_program_matches(graphs[i], *m.program, 3, what + " vs traced");
  }
}

// Without fusion every scheduled node is a kernel, and the program still computes the same.
TEST_P(KernelCounts, UnfusedPipeline) {
  const wl::Workload& w = *wl::find_workload(GetParam());
  passes::PipelineOptions opts;
  opts.verify_each = true;
  opts.disabled = {"fuse"};
  for (const ir::Graph& g : traced_graphs(w)) {
    passes::Module m = passes::optimize(g, opts);
    kiln::testing::expect_program_matches(g, *m.program, 4, w.name + " unfused");
  }
}

TEST_P(KernelCounts, Float64) {
  const wl::Workload& w = *wl::find_workload(GetParam());
  if (w.name == "add_sin_cos_bf16") GTEST_SKIP() << "half-precision by definition";
  for (const ir::Graph& g : traced_graphs(w, kFloat64)) {
    passes::Module m = passes::optimize(g);
    kiln::testing::expect_program_matches(g, *m.program, 5, w.name + " f64");
  }
}

std::vector<std::string> names() {
  std::vector<std::string> v;
  for (const auto& w : wl::all_workloads()) v.push_back(w.name);
  return v;
}
INSTANTIATE_TEST_SUITE_P(Workloads, KernelCounts, ::testing::ValuesIn(names()),
                         [](const auto& info) { return info.param; });

TEST(KernelCounts, EveryWorkloadHasAnExpectation) {
  for (const auto& w : wl::all_workloads()) EXPECT_TRUE(kExpectedKernels.count(w.name)) << w.name;
}

}  // namespace
