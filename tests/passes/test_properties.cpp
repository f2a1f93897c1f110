// Property tests of the optimizer over randomly generated graphs (tests/common/random_graphs.h:
// random C++ tensor programs traced into one graph each).
//
// For every graph (seeds 1..300; every failure names the seed and prints the graph):
//  - the default pipeline with verify_each does not throw, and the kernel program computes what
//    the unoptimised graph computes (outputs and inputs written in place); so do the pipeline
//    without fusion and fusion alone;
//  - every pass is idempotent: after the default pipeline's prefix up to it, a second run of it
//    reports no change and prints the same module;
//  - the graph passes alone (each, then the whole graph prefix) keep the graph valid and its
//    results;
//  - the kernel program verifies, returns outputs of the outputs' own sizes and dtypes, has no
//    more kernels than scheduled nodes, and fusion never adds kernels.
// KILN_PROPERTY_GRAPHS=N checks seeds 1..N instead (a longer hunt), KILN_PROPERTY_SEED=S seed S
// alone (to reproduce a failure). tests/codegen runs the same graphs through the compiled backends.
#include <gtest/gtest.h>
#include <kiln/ir/exec.h>
#include <kiln/ir/graph.h>
#include <kiln/kiln.h>
#include <kiln/passes/kernel.h>
#include <kiln/passes/pass.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "../common/random_graphs.h"
#include "../common/scoped_env.h"
#include "check_program.h"

using namespace kiln;

namespace {

using namespace kiln::testing::property;

constexpr uint32_t kGraphs = 300;
const std::vector<Case>& cases() { return kiln::testing::property::cases(kGraphs); }

passes::PipelineOptions verified(std::vector<std::string> passes = {}, std::vector<std::string> disabled = {}) {
  passes::PipelineOptions o;
  o.verify_each = true;
  o.passes = std::move(passes);
  o.disabled = std::move(disabled);
  return o;
}

// optimize() that reports a throw as a failure instead of ending the test.
std::optional<passes::Module> try_optimize(const Case& c, const passes::PipelineOptions& o, const std::string& what) {
  try {
    return passes::optimize(c.graph, o);
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << " threw: " << e.what();
    return std::nullopt;
  }
}

// Nodes fusion schedules (not views, not constants).
size_t scheduled_nodes(const ir::Graph& g) {
  size_t n = 0;
  for (const auto& node : g.nodes())
    if (node->op != OpId::Constant && ir::op_info(node->op).category != ir::Category::View) ++n;
  return n;
}

// ---------------------------------------------------------------------------------------------

TEST(OptimizerProperties, GeneratorTracesValidGraphs) {
  size_t ops_seen = 0, writes = 0;  // ops used, graphs that write memory
  std::vector<bool> seen(size_t(ir::num_ops()), false);
  for (const Case& c : cases()) {
    ASSERT_TRUE(c.error.empty()) << "seed " << c.seed << ": the generator's program does not trace: " << c.error;
    auto err = ir::verify(c.graph);
    ASSERT_FALSE(err.has_value()) << header(c) << err->str();
    bool writes_memory = false;
    for (const auto& n : c.graph.nodes()) {
      seen[size_t(n->op)] = true;
      writes_memory = writes_memory || n->op == OpId::Copy;
    }
    writes += writes_memory;
  }
  if (cases().size() < kGraphs) return;  // one seed, or a few: no coverage to expect
  for (bool b : seen) ops_seen += b;
  // the generator's coverage: a regression in it shows here
  auto has = [&](OpId op) { return bool(seen[size_t(op)]); };
  for (OpId op : {OpId::Add, OpId::Mul, OpId::Sub, OpId::Div, OpId::Where, OpId::Cast, OpId::Gt, OpId::Transpose,
                  OpId::Permute, OpId::Slice, OpId::Select, OpId::Unsqueeze, OpId::Expand, OpId::View, OpId::Sum,
                  OpId::Mean, OpId::Amax, OpId::Var, OpId::Norm, OpId::Softmax, OpId::LogSoftmax, OpId::Matmul,
                  OpId::Mm, OpId::Copy, OpId::MaskedFill, OpId::Exp, OpId::Argmax, OpId::MaxDim, OpId::Cumsum,
                  OpId::Any, OpId::LogSumExp, OpId::Remainder, OpId::Fmod, OpId::Cat, OpId::IndexSelect, OpId::Gather,
                  OpId::Iota})
    EXPECT_TRUE(has(op)) << "no generated graph uses " << ir::op_info(op).name;
  EXPECT_GT(writes, cases().size() / 2);
  EXPECT_GT(ops_seen, size_t(40));
}

TEST(OptimizerProperties, DefaultPipelineVerifiesAndMatches) {
  for (const Case& c : cases()) {
    if (!c.error.empty()) continue;
    SCOPED_TRACE(header(c));
    auto m = try_optimize(c, verified(), "the default pipeline (verify_each)");
    if (!m) continue;
    ASSERT_TRUE(m->program);
    kiln::testing::expect_program_matches(c.graph, *m->program, c.seed, "default pipeline");
  }
}

// The fuser checks a group growing by later nodes incrementally (only what joins); with
// KILN_FUSE_CROSS_CHECK set it checks each such merge in full as well and throws on any
// disagreement: over the random graphs, and over a long chain and a row sweep, where groups
// grow to the kernel's limit one node at a time.
TEST(OptimizerProperties, IncrementalSoundnessAgreesWithTheFullCheck) {
  kiln::testing::ScopedEnv cross("KILN_FUSE_CROSS_CHECK", "1");
  size_t programs = 0;
  for (const Case& c : cases()) {
    if (!c.error.empty()) continue;
    SCOPED_TRACE(header(c));
    if (try_optimize(c, {}, "the default pipeline, cross-checked")) ++programs;
  }
  EXPECT_GT(programs, cases().size() / 2);
  std::string chain = "graph @chain(%x: f32[64]{1}, %y: f32[64]{1}) {\n", last = "%x";
  for (int i = 0; i < 600; ++i) {
    chain += "  %" + std::to_string(2 * i) + " = mul(" + last + ", %y) : f32[64]{1}\n";
    chain += "  %" + std::to_string(2 * i + 1) + " = add(%" + std::to_string(2 * i) + ", %x) {alpha=1} : f32[64]{1}\n";
    last = "%" + std::to_string(2 * i + 1);
  }
  chain += "  return " + last + "\n}\n";
  passes::Module m = passes::optimize(ir::parse(chain));
  EXPECT_GE(m.program->kernels.size(), 3u);  // 1200 nodes, at most 256 a kernel
  auto sweep = compile([](Tensor g) {
    for (int64_t i = 1; i + 1 < 16; ++i) g.select(0, i).copy_((g.select(0, i - 1) + g.select(0, i + 1)) * 0.5);
  });
  Tensor g = randn({16, 8}), want = g.clone();
  for (int64_t i = 1; i + 1 < 16; ++i) want.select(0, i).copy_((want.select(0, i - 1) + want.select(0, i + 1)) * 0.5);
  sweep(g);
  EXPECT_TRUE(kiln::testing::close(g, want));
}

// Row groups (passes::unroll_outer_loop, which the CPU backend runs): a kernel that unrolls, put
// in its program's place, keeps the program verifying and computing what the graph does (on the
// interpreter): n-body in 2-d and 3-d, and the random graphs' kernels that unroll (their
// pairwise interactions along a short leading dim, at least).
TEST(OptimizerProperties, UnrolledOuterLoopsVerifyAndMatch) {
  size_t unrolled = 0;
  auto check = [&](const ir::Graph& g, uint64_t seed, const std::string& what) {
    passes::Module m = passes::optimize(g, verified());
    bool any = false;
    for (passes::Kernel& k : m.program->kernels)
      if (std::optional<passes::Kernel> u = passes::unroll_outer_loop(k)) {
        EXPECT_EQ(u->loops.size() + 1, k.loops.size());
        k = std::move(*u);
        any = true;
      }
    if (!any) return false;
    unrolled++;
    kiln::testing::expect_program_matches(g, *m.program, seed, what + " (outer loops unrolled)");
    return true;
  };
  for (int dims : {2, 3, 5}) {
    const std::string d = std::to_string(dims);
    const std::string nbody =
        "graph @g(%p: f32[" + d + ",37]{37,1}, %m: f32[37]{1}) {\n"
        "  %0 = unsqueeze(%p) {dim=2} : f32[" + d + ",37,1]{37,1,1}\n"
        "  %1 = unsqueeze(%p) {dim=1} : f32[" + d + ",1,37]{37,37,1}\n"
        "  %2 = sub(%1, %0) {alpha=1} : f32[" + d + ",37,37]{1369,37,1}\n"
        "  %3 = norm(%2) {dims=[0], keepdim=false, p=2.0} : f32[37,37]{37,1}\n"
        "  %4 = div(%2, %3) {rounding_mode=none} : f32[" + d + ",37,37]{1369,37,1}\n"
        "  %5 = mul(%4, %m) : f32[" + d + ",37,37]{1369,37,1}\n"
        "  %6 = nansum(%5) {dims=[2], keepdim=false} : f32[" + d + ",37]{37,1}\n"
        "  return %6\n"
        "}\n";
    // (5 components: a loop longer than a row group takes stays)
    EXPECT_EQ(check(ir::parse(nbody), 7, "n-body in " + d + "-d"), dims <= 4) << nbody;
  }
  EXPECT_EQ(unrolled, 2u);
  for (const Case& c : cases()) {
    if (!c.error.empty()) continue;
    SCOPED_TRACE(header(c));
    check(c.graph, c.seed, "seed " + std::to_string(c.seed));
  }
  if (cases().size() >= kGraphs) {  // (not for one seed, or a few)
    // (4 of the 300: most pairwise steps' values are not among their program's outputs)
    EXPECT_GE(unrolled, 2u + 2u) << "random graphs whose kernels unroll";
  }
}

TEST(OptimizerProperties, UnfusedAndFuseOnlyMatch) {
  for (const Case& c : cases()) {
    if (!c.error.empty()) continue;
    SCOPED_TRACE(header(c));
    if (auto m = try_optimize(c, verified({}, {"fuse"}), "the pipeline without fuse"))
      kiln::testing::expect_program_matches(c.graph, *m->program, c.seed + 1000, "fusion disabled");
    if (auto m = try_optimize(c, verified({"fuse"}), "fuse alone"))
      kiln::testing::expect_program_matches(c.graph, *m->program, c.seed + 2000, "fuse only");
  }
}

// After the default pipeline's prefix up to and including a pass, running that pass again
// changes nothing.
TEST(OptimizerProperties, EveryPassIsIdempotent) {
  std::vector<std::string> pipe = passes::default_pipeline();
  // (prefix, pass) pairs: every position of the default pipeline, then registered passes it
  // does not use (after the graph prefix or the whole pipeline, as their stage allows).
  std::vector<std::pair<std::vector<std::string>, std::string>> plans;
  size_t graph_prefix = 0;
  while (graph_prefix < pipe.size() && passes::find_pass(pipe[graph_prefix])->stage == passes::Stage::Graph)
    ++graph_prefix;
  for (size_t i = 0; i < pipe.size(); ++i) plans.push_back({{pipe.begin(), pipe.begin() + long(i) + 1}, pipe[i]});
  for (const passes::PassInfo& p : passes::all_passes()) {
    if (std::find(pipe.begin(), pipe.end(), p.name) != pipe.end()) continue;
    std::vector<std::string> prefix =
        p.stage == passes::Stage::Graph ? std::vector<std::string>(pipe.begin(), pipe.begin() + long(graph_prefix))
                                        : pipe;
    prefix.push_back(p.name);
    plans.push_back({prefix, p.name});
  }
  for (const Case& c : cases()) {
    if (!c.error.empty()) continue;
    SCOPED_TRACE(header(c));
    for (const auto& [prefix, name] : plans) {
      std::string where = "'" + name + "' after the prefix";
      for (const auto& n : prefix) where += " " + n;
      passes::Module m(passes::clone(c.graph));
      try {
        passes::run_pipeline(m, verified(prefix));
      } catch (const std::exception& e) {
        // a prefix of the default pipeline: DefaultPipelineVerifiesAndMatches reports it
        bool in_default = prefix.size() <= pipe.size() && std::equal(prefix.begin(), prefix.end(), pipe.begin());
        if (!in_default) ADD_FAILURE() << where << ": the prefix threw: " << e.what();
        continue;
      }
      std::string before = passes::print(m);
      try {
        passes::PipelineReport r = passes::run_pipeline(m, verified({name}));
        ASSERT_EQ(r.runs.size(), 1u);
        EXPECT_EQ(r.runs[0].rewrites, 0) << where << ": a second run reports a change";
      } catch (const std::exception& e) {
        ADD_FAILURE() << where << ": the second run threw: " << e.what();
        continue;
      }
      std::string after = passes::print(m);
      EXPECT_EQ(after, before) << where << ": a second run changed the module";
    }
  }
}

// Graph passes alone: the graph stays valid and computes the same outputs and input writes.
TEST(OptimizerProperties, GraphPassesKeepResults) {
  std::vector<std::vector<std::string>> runs = {{"dce"}, {"cse"}, {"fold"}, {"simplify"}, {"writeback"}};
  std::vector<std::string> all;
  for (const auto& n : passes::default_pipeline())
    if (passes::find_pass(n)->stage == passes::Stage::Graph) all.push_back(n);
  runs.push_back(all);
  for (const Case& c : cases()) {
    if (!c.error.empty()) continue;
    SCOPED_TRACE(header(c));
    auto in = kiln::testing::random_inputs(c.graph, c.seed + 3000);
    auto in_ref = kiln::testing::clone_slots(in);
    std::vector<ir::Slot> want = ir::Executable(c.graph).run_slots(in_ref);
    for (const auto& names : runs) {
      std::string what;
      for (const auto& n : names) what += (what.empty() ? "" : ",") + n;
      passes::Module m(passes::clone(c.graph));
      try {
        passes::run_pipeline(m, verified(names));
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << " threw: " << e.what();
        continue;
      }
      if (auto e = ir::verify(m.graph)) {
        ADD_FAILURE() << what << ": the graph does not verify: " << e->str() << "\n" << ir::print(m.graph);
        continue;
      }
      auto in_got = kiln::testing::clone_slots(in);
      std::vector<ir::Slot> got;
      try {
        got = ir::Executable(m.graph).run_slots(in_got);
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": the rewritten graph does not run: " << e.what() << "\n" << ir::print(m.graph);
        continue;
      }
      ASSERT_EQ(got.size(), want.size()) << what;
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_TRUE(kiln::testing::close(got[i].tensor, want[i].tensor))
            << what << ": output " << i << " differs; rewritten graph:\n" << ir::print(m.graph);
      for (size_t i = 0; i < in.size(); ++i) {
        if (in[i].is_scalar) continue;
        EXPECT_TRUE(kiln::testing::close(in_got[i].tensor, in_ref[i].tensor))
            << what << ": input " << i << " after the run differs; rewritten graph:\n" << ir::print(m.graph);
      }
    }
  }
}

// Structural facts of the kernel programs.
TEST(OptimizerProperties, KernelProgramShape) {
  for (const Case& c : cases()) {
    if (!c.error.empty()) continue;
    SCOPED_TRACE(header(c));
    auto fused = try_optimize(c, verified(), "the default pipeline");
    auto unfused = try_optimize(c, verified({}, {"fuse"}), "the pipeline without fuse");
    if (!fused || !unfused) continue;
    for (const passes::Module* m : {&*fused, &*unfused}) {
      std::string what = m == &*fused ? "fused" : "unfused";
      const passes::KernelProgram& p = *m->program;
      if (auto e = passes::verify_program(p)) ADD_FAILURE() << what << ": program does not verify: " << *e;
      const auto& outs = m->graph.outputs();
      ASSERT_EQ(p.outputs.size(), outs.size()) << what << "\n" << passes::print(*m);
      for (size_t i = 0; i < outs.size(); ++i) {
        EXPECT_EQ(p.outputs[i].sizes, outs[i]->type.sizes) << what << ": output " << i << "\n" << passes::print(*m);
        EXPECT_EQ(p.outputs[i].dtype, outs[i]->type.dtype) << what << ": output " << i << "\n" << passes::print(*m);
      }
      EXPECT_LE(p.kernels.size(), scheduled_nodes(m->graph)) << what << "\n" << passes::print(*m);
      for (size_t k = 0; k < p.kernels.size(); ++k)
        EXPECT_FALSE(p.kernels[k].nodes.empty()) << what << ": kernel " << k << " computes no node\n"
                                                 << passes::print(*m);
    }
    EXPECT_LE(fused->program->kernels.size(), unfused->program->kernels.size())
        << "fused:\n" << passes::print(*fused) << "unfused:\n" << passes::print(*unfused);
  }
}

}  // namespace
