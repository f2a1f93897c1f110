// The whole pipeline under hostile graph files: the parser fuzz corpus's mutants that parse and
// verify (a user's hand-edited graph, as dump-ir and kiln-bench --ir read them) run on the
// reference executor, then through the optimizer, the kernel interpreter and the CPU backend
// (kernels specialised on the sizes, and size-generic ones).
// The reference and the optimizer may refuse a graph with a kiln::Error; past the optimizer the
// interpreted and the compiled program must run and return the reference's values. Nothing may
// crash.
#include <gtest/gtest.h>
#include <kiln/codegen/cpu.h>
#include <kiln/codegen/program.h>
#include <kiln/ir/exec.h>
#include <kiln/ir/graph.h>
#include <kiln/passes/kernel.h>
#include <kiln/passes/pass.h>

#include <cstdio>

#include "../common/close.h"
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

// The program's outputs against the reference's (a number against a 0-d tensor).
::testing::AssertionResult same(const std::vector<ir::Slot>& want, const std::vector<Tensor>& got) {
  if (want.size() != got.size())
    return ::testing::AssertionFailure() << got.size() << " outputs against the reference's " << want.size();
  for (size_t i = 0; i < want.size(); ++i) {
    const Tensor w = want[i].is_scalar ? scalar_tensor(want[i].scalar).to(got[i].dtype()) : want[i].tensor;
    if (auto c = kiln::testing::close(got[i], w); !c) return ::testing::AssertionFailure() << "output " << i << ": " << c.message();
  }
  return ::testing::AssertionSuccess();
}

TEST(PipelineFuzz, MutatedGraphsRunOrRaise) {
  fuzz::install_crash_report("pipeline fuzz");
  const std::filesystem::path dir = KILN_FUZZ_DIR;
  std::vector<std::string> seeds;
  for (const auto& e : std::filesystem::directory_iterator(dir / "corpus"))
    if (e.path().extension() == ".ir") seeds.push_back(fuzz::read_file(e.path()));
  std::sort(seeds.begin(), seeds.end());  // (directory order is not stable; the run must be)
  ASSERT_FALSE(seeds.empty());
  const std::vector<std::string> dict = fuzz::read_dict(dir / "ir.dict");
  std::mt19937_64 rng(fuzz::kMutationSeed + 1);  // (other mutants than ir_fuzz_corpus's)
  int verified = 0, ran = 0, compiled = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string text = i < int(seeds.size()) ? seeds[size_t(i)] : fuzz::mutant(seeds, rng, dict);
    fuzz::current_input() = &text;
    std::optional<ir::Graph> g;
    try {
      g.emplace(ir::parse(text));
    } catch (const Error&) {
      continue;
    }
    if (ir::verify(*g) || !small_enough(*g)) continue;
    ++verified;
    std::vector<ir::Slot> want;
    try {
      want = ir::Executable(*g).run_slots(workloads::graph_inputs(*g, 7));
    } catch (const Error&) {
      continue;  // (the reference refuses it: a missing attribute, an index out of range, ...)
    }
    ++ran;
    // The optimizer may refuse a graph the reference runs (one that returns a number, say), with
    // a kiln::Error that says so; past it, the program must run and agree.
    std::optional<passes::Module> m;
    try {
      m.emplace(passes::optimize(*g));
    } catch (const Error&) {
      continue;
    }
    try {
      {
        std::vector<ir::Slot> in = workloads::graph_inputs(*g, 7);
        passes::ProgramRunner runner(*m->program);
        ASSERT_TRUE(same(want, runner.run(std::span<const ir::Slot>(in)))) << "interpreted:\n" << text;
      }
      std::vector<ir::Type> types;
      for (const ir::Value* v : g->inputs()) types.push_back(v->type);
      // The kernels specialised on the sizes, and the size-generic ones kiln compiles once a dim
      // is dynamic.
      for (bool generic : {false, true}) {
        codegen::CpuCompileOptions opts;
        opts.generic = generic;
        std::shared_ptr<codegen::CompiledProgram> p = codegen::compile_cpu(m->program, types, opts);
        std::vector<ir::Slot> in = workloads::graph_inputs(*g, 7);
        ASSERT_TRUE(same(want, p->run(std::span<const ir::Slot>(in))))
            << (generic ? "compiled, size-generic:\n" : "compiled:\n") << text;
      }
      ++compiled;
    } catch (const std::exception& e) {
      FAIL() << "the optimized program failed where the reference ran: " << e.what() << "\n" << text;
    }
  }
  fuzz::current_input() = nullptr;
  std::printf("%d mutants verified, %d ran on the reference, %d through the compiled program\n", verified, ran,
              compiled);
  // The mutants reach the backend: 2011 of 20,000 (2025 verify) when this was written, most of
  // the rest refused by the parser. Far fewer means the fuzz stopped testing the pipeline.
  EXPECT_GE(compiled, 1000);
}

}  // namespace
