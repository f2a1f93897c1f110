// The CPU backend on the property tests' random graphs (tests/common/random_graphs.h): dtype
// mixes, views and gapped layouts, reductions keepdim or not, softmax, normalisations, matmul
// epilogues and in-place writes through views, as tests/passes/test_properties.cpp feeds the
// optimizer. Each graph goes through the default pipeline and compile_cpu, with kernels
// specialised on the sizes and with size-generic ones, and runs against the reference executor
// on the unoptimised graph (outputs, and inputs written in place).
//
// Every kernel the backend leaves to the interpreter must be one it leaves there by design (a
// library op or a cond): a kernel it could not compile is a failure here, with its reason.
// Seeds 1..150, and 1..40 with larger shapes (KILN_PROPERTY_GRAPHS=N for 1..N,
// KILN_PROPERTY_SEED=S for seed S alone).
#include <gtest/gtest.h>
#include <kiln/codegen/cpu.h>
#include <kiln/passes/pass.h>

#include "../common/random_graphs.h"
#include "../passes/check_program.h"

namespace kiln {
namespace {

using testing::property::Case;

constexpr uint32_t kGraphs = 150, kLargeGraphs = 40;

void expect_compiled_programs_match(const std::vector<Case>& cases) {
  int kernels = 0, compiled = 0;
  for (const Case& c : cases) {
    ASSERT_TRUE(c.error.empty()) << "seed " << c.seed << ": the generator's program does not trace: " << c.error;
    SCOPED_TRACE(testing::property::header(c));
    std::shared_ptr<const passes::KernelProgram> program;
    try {
      program = std::move(passes::optimize(c.graph).program);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "the default pipeline threw: " << e.what();  // (test_properties says more)
      continue;
    }
    std::vector<ir::Type> types;
    for (const ir::Value* v : c.graph.inputs()) types.push_back(v->type);
    for (bool generic : {false, true}) {
      const std::string what = generic ? "size-generic kernels" : "specialised kernels";
      std::shared_ptr<codegen::CompiledProgram> cp;
      try {
        cp = codegen::compile_cpu(program, types, {.generic = generic});
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": compile_cpu threw: " << e.what() << "\n" << passes::print(*program);
        continue;
      }
      const codegen::CompileStats& st = cp->stats();
      kernels += st.kernels;
      compiled += st.compiled;
      for (const std::string& why : st.interpreted)
        EXPECT_TRUE(testing::interpreted_by_design(why)) << what << ": " << why << "\n" << passes::print(*program);
      testing::expect_run_matches(
          c.graph, [&](std::vector<ir::Slot>& in) { return cp->run(in); }, c.seed + uint64_t(generic) * 5000, what,
          [&] { return passes::print(*program); });
    }
  }
  // (the graphs' kernels are mostly elementwise and reductions, which all compile)
  EXPECT_GT(compiled, kernels / 2);
}

TEST(CpuBackendProperties, CompiledProgramsMatchTheReferenceExecutor) {
  expect_compiled_programs_match(testing::property::cases(kGraphs));
}

// Shapes up to 300 per dim and 40000 elements: vector loops and their remainders, transposed
// tiles, prefetching rows, stashed rows and threads over the outer loop.
TEST(CpuBackendProperties, LargerShapesMatchTheReferenceExecutor) {
  expect_compiled_programs_match(testing::property::cases(kLargeGraphs, testing::property::kLargeShapes));
}

}  // namespace
}  // namespace kiln
