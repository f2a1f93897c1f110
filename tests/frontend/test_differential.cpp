// Differential test: random programs (op sequences over random shapes, with broadcasting,
// views, in-place writes into inputs and through views, and data-dependent branches), run
// eagerly and through compile(). On the reference executor the replays must give eager's
// results bit for bit (it runs the same kernels); compiled by the CPU backend, within the
// dtype's tolerance (tests/common/close.h).
#include <gtest/gtest.h>
#include <kiln/ir/graph.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>

#include "../common/close.h"
#include "../common/random_programs.h"
#include "../common/scoped_env.h"

using namespace kiln;

namespace {

using kiln::testing::make_inputs;
using kiln::testing::make_program;
using kiln::testing::Program;
using kiln::testing::run;

bool same(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), size_t(x.nbytes())) == 0;
}

// Copies with the same strides: kernels may round the last ulp differently on another layout
// (vector and scalar tails of the transcendental functions), so the reference keeps it.
std::vector<Tensor> clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(empty_strided(t.sizes(), t.strides(), t.dtype()).copy_(t));
  return out;
}

}  // namespace

void check_random_programs(CompileOptions::Backend backend) {
  const bool exact = backend == CompileOptions::Backend::Reference;
  // The programs mix float32 into float64 values: float64 results carry float32 rounding.
  const auto f32 = kiln::testing::tolerance(kFloat32);
  auto match = [exact, f32](const Tensor& a, const Tensor& b) {
    return exact ? same(a, b) : bool(kiln::testing::close(a, b, f32));
  };
  CompileOptions opts;
  opts.backend = backend;
  int replays = 0;
  // (KILN_DIFFERENTIAL_PROGRAMS=N checks N programs: a longer hunt; KILN_TEST_SEED_BASE, seeds.h)
  const auto [first, last] = kiln::testing::seed_range(300, "KILN_DIFFERENTIAL_PROGRAMS");
  for (uint32_t seed = first; seed <= last; ++seed) {
    Program p = make_program(seed);
    auto f = compile([&p](const std::vector<Tensor>& in) { return run(p, in); }, opts);
    // three calls: the trace, then two with fresh inputs of the same signature
    for (uint32_t call = 0; call < 3; ++call) {
      std::vector<Tensor> in = make_inputs(p, seed, call);
      std::vector<Tensor> ref_in = clones(in);
      std::vector<Tensor> want = run(p, ref_in);
      std::vector<Tensor> got = f(in);
      ASSERT_EQ(got.size(), want.size()) << "seed " << seed;
      auto graphs = [&] {
        std::string t;
        for (const auto& g : f.explain(in).graphs) t += g.text + (g.backend.empty() ? "" : "  runs on: " + g.backend + "\n");
        return t;
      };
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_TRUE(match(got[i], want[i])) << "seed " << seed << " output " << i << "\n" << graphs();
      for (size_t i = 0; i < in.size(); ++i) ASSERT_TRUE(match(in[i], ref_in[i])) << "seed " << seed << " input " << i;
    }
    replays += int(f.stats().hits);
    // every graph of the trace tree is a valid graph that round-trips through text
    std::vector<Tensor> in = make_inputs(p, seed, 0);
    for (const auto& g : f.explain(in).graphs) {
      ir::Graph parsed = ir::parse(g.text);
      auto err = ir::verify(parsed);
      ASSERT_FALSE(err.has_value()) << "seed " << seed << ": " << err->message << "\n" << g.text;
      // (a graph the optimizer or backend fails on still runs, on the reference executor: a bug)
      EXPECT_EQ(g.backend.find("the backend failed"), std::string::npos) << "seed " << seed << ": " << g.backend;
    }
  }
  // Calls 2 and 3 replay, except where an item() guard (on the exact value) fails and the
  // program is traced again along the new path.
  EXPECT_GT(replays, int(last - first + 1) * 3 / 4);
}

// The seeds the suites check: 1..N by default (the same every run), from a base where one is
// set (scripts/gpu.sh sets a fresh one each GPU run), the count from the suite's own variable.
TEST(Differential, SeedsComeFromTheBaseAndTheCount) {
  using kiln::testing::ScopedEnv;
  {
    ScopedEnv base("KILN_TEST_SEED_BASE", nullptr), count("KILN_DIFFERENTIAL_PROGRAMS", nullptr);
    auto [first, last] = kiln::testing::seed_range(300, "KILN_DIFFERENTIAL_PROGRAMS");
    EXPECT_EQ(first, 1u);
    EXPECT_EQ(last, 300u);
  }
  ScopedEnv base("KILN_TEST_SEED_BASE", "734512000"), count("KILN_DIFFERENTIAL_PROGRAMS", "7");
  auto [first, last] = kiln::testing::seed_range(300, "KILN_DIFFERENTIAL_PROGRAMS");
  EXPECT_EQ(first, 734512001u);
  EXPECT_EQ(last, 734512007u);
  EXPECT_EQ(kiln::testing::seed_base(), 734512000u);
}

TEST(Differential, RandomProgramsReplayLikeEager) { check_random_programs(CompileOptions::Backend::Reference); }
TEST(Differential, RandomProgramsCompiledForTheCpuMatchEager) { check_random_programs(CompileOptions::Backend::Cpu); }

// The same random programs with backward: each input becomes a leaf, the program runs on
// copies of them (it writes into its inputs), every float value it leaves is summed into one
// loss (each weighted, so that no two cancel), and autograd gives the gradient of every input.
// Compiled (forward and backward traced into one graph, compiled for the CPU), and with the
// forward alone compiled and backward run after the call (its compiled backward), against
// eager, within float32's tolerance, on three calls each. A program autograd refuses (an in-place
// write into memory a node saved) must be refused the same way compiled.
TEST(Differential, RandomProgramsGradientsCompiledMatchEager) {
  const auto f32 = kiln::testing::tolerance(kFloat32);
  CompileOptions opts;
  opts.backend = CompileOptions::Backend::Cpu;
  int checked = 0, refused = 0, replays = 0, later_replays = 0;
  const auto [first, last] = kiln::testing::seed_range(60, "KILN_DIFFERENTIAL_PROGRAMS");
  for (uint32_t seed = first; seed <= last; ++seed) {
    Program p = make_program(seed);
    auto loss_and_grads = [&p](const std::vector<Tensor>& in) {
      std::vector<Tensor> leaves, copies;
      for (const Tensor& t : in) {
        leaves.push_back(t.detach().requires_grad_());
        copies.push_back(leaves.back().clone());
      }
      std::vector<Tensor> live = run(p, copies);
      Tensor loss = zeros({}, kFloat64);
      for (size_t i = 0; i < live.size(); ++i)
        if (is_floating(live[i].dtype())) loss = loss + live[i].sum().to(kFloat64) * (1.0 / double(i + 1));
      std::vector<Tensor> grads = autograd::grad({loss}, leaves, {}, false, false, /*allow_unused=*/true);
      std::vector<Tensor> out{loss.detach()};
      for (size_t i = 0; i < grads.size(); ++i) out.push_back(grads[i].defined() ? grads[i] : zeros_like(in[i]));
      return out;
    };
    // The forward alone compiled, its backward run after the call (a compiled backward attached
    // to the loss): the inputs are the leaves.
    auto forward = [&p](const std::vector<Tensor>& leaves) {
      std::vector<Tensor> copies;
      for (const Tensor& t : leaves) copies.push_back(t.clone());
      std::vector<Tensor> live = run(p, copies);
      Tensor loss = zeros({}, kFloat64);
      for (size_t i = 0; i < live.size(); ++i)
        if (is_floating(live[i].dtype())) loss = loss + live[i].sum().to(kFloat64) * (1.0 / double(i + 1));
      return loss;
    };
    auto f = compile(loss_and_grads, opts);
    auto fwd = compile(forward, opts);
    for (uint32_t call = 0; call < 3; ++call) {
      std::vector<Tensor> in = make_inputs(p, seed, call);
      std::vector<Tensor> want;
      try {
        want = loss_and_grads(in);
      } catch (const Error&) {
        EXPECT_THROW(f(in), Error) << "seed " << seed;
        ++refused;
        break;
      }
      std::vector<Tensor> got = f(in);
      std::vector<Tensor> leaves;
      for (const Tensor& t : in) leaves.push_back(t.detach().clone().requires_grad_());
      Tensor loss = fwd(leaves);
      std::vector<Tensor> after = autograd::grad({loss}, leaves, {}, false, false, /*allow_unused=*/true);
      after.insert(after.begin(), loss.detach());
      ASSERT_EQ(got.size(), want.size()) << "seed " << seed;
      for (size_t i = 0; i < got.size(); ++i) {
        const std::string what = i == 0 ? " loss" : " gradient of input " + std::to_string(i - 1);
        ASSERT_TRUE(kiln::testing::close(got[i], want[i], f32))
            << "seed " << seed << what << "\ngot\n" << got[i] << "\nwant\n" << want[i];
        Tensor later = after[i].defined() ? after[i] : zeros_like(want[i]);
        ASSERT_TRUE(kiln::testing::close(later, want[i], f32))
            << "seed " << seed << what << " (backward after the call)\ngot\n" << later << "\nwant\n" << want[i];
      }
      ++checked;
    }
    replays += int(f.stats().hits);
    later_replays += int(fwd.stats().hits);
  }
  // (most programs are differentiable; a program with an item() guard, on the exact value,
  // traces again at every call, as in the forward test)
  EXPECT_GT(checked, int(last - first + 1) * 3 / 2);
  EXPECT_GT(replays, checked / 4);
  EXPECT_GT(later_replays, checked / 4);
  std::printf("gradients of %d calls checked, %d programs refused by autograd, %d replays, %d with the backward "
              "after the call\n", checked, refused, replays, later_replays);
}
