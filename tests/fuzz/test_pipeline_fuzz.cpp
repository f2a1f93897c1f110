// The whole pipeline under hostile graph files: the parser fuzz corpus's mutants that parse and
// verify (a user's hand-edited graph, as dump-ir and kiln-bench --ir read them) run on the
// reference executor, then through the optimizer, the kernel interpreter, the CPU backend
// (kernels specialised on the sizes, and size-generic ones) and, for a sample, the CUDA backend
// (on the emulated driver here, on the GPU with KILN_TEST_REAL_CUDA=1).
// The reference and the optimizer may refuse a graph with a kiln::Error; past the optimizer the
// program must run and return the reference's values, and leave its inputs as the reference
// left them (in-place ops). Nothing may crash.
#include <gtest/gtest.h>
#include <kiln/codegen/cpu.h>
#include <kiln/codegen/cuda.h>
#include <kiln/exec/program.h>
#include <kiln/ir/exec.h>
#include <kiln/ir/graph.h>
#include <kiln/passes/kernel.h>
#include <kiln/passes/pass.h>
#include <kiln/runtime/cuda.h>

#include <cstdio>
#include <cstdlib>
#include <functional>

#include "../codegen/cuda_util.h"
#include "../common/close.h"
#include "../common/seeds.h"
#include "../emulation/emulated_driver.h"
#include "workloads.h"
#include "mutate.h"

namespace {

using namespace kiln;

// Whether every value's type is small enough to run here: on the CPU, at most 2^16 elements
// each (a mutant may declare [99999999, 3]), with strides that reach no further than that.
bool small_enough(const ir::Graph& g) {
  auto fits = [](const ir::Type& t) {
    if (!t.device.is_cpu()) return false;
    int64_t n = 1, reach = 1;
    for (size_t d = 0; d < t.sizes.size(); ++d) {
      if (t.sizes[d] < 0 || t.sizes[d] > (int64_t(1) << 16)) return false;
      n *= t.sizes[d];
      if (n > (int64_t(1) << 16)) return false;
      if (d < t.strides.size() && t.sizes[d] > 0) {
        const int64_t s = t.strides[d] < 0 ? -t.strides[d] : t.strides[d];
        if (s > (int64_t(1) << 16)) return false;
        reach += (t.sizes[d] - 1) * s;
      }
    }
    return reach <= (int64_t(1) << 18);
  };
  for (const ir::Value* v : g.inputs())
    if (!fits(v->type)) return false;
  for (const auto& n : g.nodes())
    for (const ir::Value* v : n->outputs)
      if (!fits(v->type)) return false;
  return true;
}

// A mutant past the optimizer: its graph, what the reference returned on graph_inputs(g, 7)
// and the inputs as the reference left them.
struct Mutant {
  const std::string& text;
  const ir::Graph& graph;
  const std::vector<ir::Slot>& want;
  const std::vector<ir::Slot>& inputs_after;
  const passes::Module& module;
};
struct Counts {
  int verified = 0, ran = 0, optimized = 0;
};

// Mutates the corpus `n` times (the same mutants on every run) and calls `f` for each mutant
// that parses, verifies, fits, runs on the reference and passes the optimizer.
Counts for_each_mutant(int n, const std::function<void(const Mutant&)>& f) {
  const std::filesystem::path dir = KILN_FUZZ_DIR;
  std::vector<std::string> seeds;
  for (const auto& e : std::filesystem::directory_iterator(dir / "corpus"))
    if (e.path().extension() == ".ir") seeds.push_back(fuzz::read_file(e.path()));
  std::sort(seeds.begin(), seeds.end());  // (directory order is not stable; the run must be)
  EXPECT_FALSE(seeds.empty());
  const std::vector<std::string> dict = fuzz::read_dict(dir / "ir.dict");
  std::mt19937_64 rng(fuzz::kMutationSeed + 1);  // (other mutants than ir_fuzz_corpus's)
  Counts c;
  for (int i = 0; i < n; ++i) {
    const std::string text = i < int(seeds.size()) ? seeds[size_t(i)] : fuzz::mutant(seeds, rng, dict);
    fuzz::current_input() = &text;
    std::optional<ir::Graph> g;
    try {
      g.emplace(ir::parse(text));
    } catch (const Error&) {
      continue;
    }
    if (ir::verify(*g) || !small_enough(*g)) continue;
    ++c.verified;
    std::vector<ir::Slot> want, after = workloads::graph_inputs(*g, 7);
    try {
      want = ir::Executable(*g).run_slots(after);
    } catch (const Error&) {
      continue;  // (the reference refuses it: a missing attribute, an index out of range, ...)
    }
    ++c.ran;
    // The optimizer may refuse a graph the reference runs (one that returns a number, say), with
    // a kiln::Error that says so; past it, the program must run and agree.
    std::optional<passes::Module> m;
    try {
      m.emplace(passes::optimize(*g));
    } catch (const Error&) {
      continue;
    }
    ++c.optimized;
    f(Mutant{text, *g, want, after, *m});
    if (::testing::Test::HasFatalFailure()) break;
  }
  fuzz::current_input() = nullptr;
  return c;
}

// The program's outputs against the reference's (a number against a 0-d tensor), and its inputs
// after the run against the reference's.
::testing::AssertionResult same(const Mutant& m, const std::vector<Tensor>& got, const std::vector<ir::Slot>& in) {
  if (m.want.size() != got.size())
    return ::testing::AssertionFailure() << got.size() << " outputs against the reference's " << m.want.size();
  for (size_t i = 0; i < m.want.size(); ++i) {
    const ir::Slot& w = m.want[i];
    const Tensor want = w.is_scalar ? scalar_tensor(w.scalar).to(got[i].dtype()) : w.tensor;
    if (auto c = kiln::testing::close(got[i].to(Device::cpu()), want); !c)
      return ::testing::AssertionFailure() << "output " << i << ": " << c.message();
  }
  for (size_t i = 0; i < in.size(); ++i)
    if (!in[i].is_scalar)
      if (auto c = kiln::testing::close(in[i].tensor.to(Device::cpu()), m.inputs_after[i].tensor); !c)
        return ::testing::AssertionFailure() << "input " << i << " after the run: " << c.message();
  return ::testing::AssertionSuccess();
}

TEST(PipelineFuzz, MutatedGraphsRunOrRaise) {
  fuzz::install_crash_report("pipeline fuzz");
  int compiled = 0;
  Counts c = for_each_mutant(20000, [&](const Mutant& m) {
    try {
      {
        std::vector<ir::Slot> in = workloads::graph_inputs(m.graph, 7);
        exec::ProgramRunner runner(*m.module.program);
        ASSERT_TRUE(same(m, runner.run(std::span<const ir::Slot>(in)), in)) << "interpreted:\n" << m.text;
      }
      std::vector<ir::Type> types;
      for (const ir::Value* v : m.graph.inputs()) types.push_back(v->type);
      // The kernels specialised on the sizes, and the size-generic ones kiln compiles once a dim
      // is dynamic.
      for (bool generic : {false, true}) {
        codegen::CpuCompileOptions opts;
        opts.generic = generic;
        std::shared_ptr<exec::CompiledProgram> p = codegen::compile_cpu(m.module.program, types, opts);
        std::vector<ir::Slot> in = workloads::graph_inputs(m.graph, 7);
        ASSERT_TRUE(same(m, p->run(std::span<const ir::Slot>(in)), in))
            << (generic ? "compiled, size-generic:\n" : "compiled:\n") << m.text;
      }
      ++compiled;
    } catch (const std::exception& e) {
      FAIL() << "the optimized program failed where the reference ran: " << e.what() << "\n" << m.text;
    }
  });
  std::printf("%d mutants verified, %d ran on the reference, %d through the compiled program\n", c.verified, c.ran,
              compiled);
  // The mutants reach the backend: 2011 of 20,000 (2025 verify) when this was written, most of
  // the rest refused by the parser. Far fewer means the fuzz stopped testing the pipeline.
  EXPECT_GE(compiled, 1000);
}

// The same mutants through the CUDA backend, a sample of them: every `step`-th mutant past the
// optimizer, at most KILN_FUZZ_GPU_MUTANTS (default 60: on the emulated driver each distinct
// kernel is a host compile and the grid runs on host threads, 10 s here with a cold cache; all
// 2000 take 280 s warm), the sample starting KILN_TEST_SEED_BASE into the step (seeds.h: a
// fresh one each GPU run). Inputs go to the device with the strides the program was specialised
// on (to_device).
TEST(PipelineFuzz, MutatedGraphsThroughCuda) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  fuzz::install_crash_report("pipeline fuzz, CUDA");
  const char* env = std::getenv("KILN_FUZZ_GPU_MUTANTS");
  const int limit = env && *env ? std::atoi(env) : 60, step = limit >= 2000 ? 1 : 2000 / std::max(limit, 1);
  const int offset = int(kiln::testing::seed_base() % uint32_t(step));
  int seen = 0, compiled = 0, kernels = 0, on_device = 0, replayed = 0;
  for_each_mutant(20000, [&](const Mutant& m) {
    if (compiled >= limit || (seen++ + offset) % step != 0) return;
    try {
      std::vector<ir::Type> types;
      for (const ir::Value* v : m.graph.inputs()) {
        types.push_back(v->type);
        if (!types.back().is_scalar() && !types.back().wrapped) types.back().device = Device::cuda();
      }
      // Kernels specialised on the sizes, size-generic ones, and the program replayed as a CUDA
      // graph (reduce_overhead: its first run goes as usual, the second replays the capture).
      enum Variant { kPlain, kGeneric, kGraphs };
      for (Variant variant : {kPlain, kGeneric, kGraphs}) {
        codegen::CudaCompileOptions opts;
        opts.generic = variant == kGeneric;
        opts.graphs = variant == kGraphs;
        std::shared_ptr<exec::CompiledProgram> p = codegen::compile_cuda(m.module.program, types, Device::cuda(), opts);
        for (int run = 0; run < (variant == kGraphs ? 2 : 1); ++run) {
          std::vector<ir::Slot> in = kiln::testing::to_device(workloads::graph_inputs(m.graph, 7));
          ASSERT_TRUE(same(m, p->run(std::span<const ir::Slot>(in)), in))
              << (variant == kPlain ? "CUDA:\n" : variant == kGeneric ? "CUDA, size-generic:\n" : "CUDA graph, run " + std::to_string(run) + ":\n")
              << m.text;
        }
        if (variant == kPlain) kernels += p->stats().kernels, on_device += p->stats().compiled;
        if (variant == kGraphs) replayed += p->stats().graphs == "replayed as a CUDA graph";
      }
      ++compiled;
    } catch (const std::exception& e) {
      FAIL() << "the CUDA program failed where the reference ran: " << e.what() << "\n" << m.text;
    }
  });
  std::printf("%d mutants through the CUDA backend: %d kernels, %d of them compiled for the device; %d replayed as a "
              "CUDA graph\n", compiled, kernels, on_device, replayed);
  EXPECT_GE(compiled, std::min(limit, 2000)) << "fewer mutants than asked reached the CUDA backend";
  EXPECT_GT(on_device, 0);
  EXPECT_GT(replayed, 0);
}

}  // namespace
