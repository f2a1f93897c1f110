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

#include "../common/one_op_graphs.h"
#include "../common/random_graphs.h"
#include "../passes/check_program.h"

namespace kiln {
namespace {

using testing::property::Case;

constexpr uint32_t kGraphs = 150, kLargeGraphs = 40;

// `g` through the default pipeline and compile_cpu, specialised and size-generic, against the
// reference executor. Counts the kernels and those compiled.
void expect_compiled_program_matches(const ir::Graph& g, uint64_t seed, int& kernels, int& compiled) {
  std::shared_ptr<const passes::KernelProgram> program;
  try {
    program = std::move(passes::optimize(g).program);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the default pipeline threw: " << e.what();  // (test_properties says more)
    return;
  }
  std::vector<ir::Type> types;
  for (const ir::Value* v : g.inputs()) types.push_back(v->type);
  for (bool generic : {false, true}) {
    const std::string what = generic ? "size-generic kernels" : "specialised kernels";
    std::shared_ptr<exec::CompiledProgram> cp;
    try {
      cp = codegen::compile_cpu(program, types, {.generic = generic});
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": compile_cpu threw: " << e.what() << "\n" << passes::print(*program);
      continue;
    }
    const exec::CompileStats& st = cp->stats();
    kernels += st.kernels;
    compiled += st.compiled;
    for (const std::string& why : st.interpreted)
      EXPECT_TRUE(testing::interpreted_by_design(why)) << what << ": " << why << "\n" << passes::print(*program);
    testing::expect_run_matches(
        g, [&](std::vector<ir::Slot>& in) { return cp->run(in); }, seed + uint64_t(generic) * 5000, what,
        [&] { return passes::print(*program); });
  }
}

void expect_compiled_programs_match(const std::vector<Case>& cases) {
  int kernels = 0, compiled = 0;
  for (const Case& c : cases) {
    ASSERT_TRUE(c.error.empty()) << "seed " << c.seed << ": the generator's program does not trace: " << c.error;
    SCOPED_TRACE(testing::property::header(c));
    expect_compiled_program_matches(c.graph, c.seed, kernels, compiled);
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

// Every op of the op table (ops.def) on its own (tests/common/one_op_graphs.h): an op added to the
// table whose lowering is missing fails here, with the kernel's reason, instead of running on the
// interpreter unnoticed. Ops whose operands are indices (index_select, gather) are left to their
// own tests: random indices would be out of range.
TEST(CpuBackendProperties, EveryOpOfTheTableCompilesAndMatches) {
  int kernels = 0, compiled = 0, ops = 0;
  for (int o = 0; o < ir::num_ops(); ++o) {
    const OpId op = OpId(o);
    if (ir::op_info(op).category == ir::Category::Control) continue;
    ir::Graph g = testing::graph_with(op);
    bool indices = false;
    for (const ir::Value* v : g.inputs()) indices |= v->type.dtype == kInt64 && !v->type.is_scalar();
    if (indices) continue;
    SCOPED_TRACE("op " + std::string(ir::op_info(op).name) + "\n" + ir::print(g));
    ++ops;
    expect_compiled_program_matches(g, uint64_t(o) + 1, kernels, compiled);
  }
  EXPECT_GT(ops, 90);
  EXPECT_GT(compiled, 100);
}

}  // namespace
}  // namespace kiln
