// Size-generic kernels (CpuCompileOptions::generic): loop extents and strides are run-time
// arguments, so one compiled kernel serves every size of the same structure. Each case builds
// the same graph at several sizes, compiles each with generic kernels, checks the results
// against the reference executor, and checks that sizes after the first compiled nothing (every
// kernel came from the memory cache under its size-free key). Then through compile(): a
// function whose dim became dynamic runs every new size on generic kernels.
#include <kiln/codegen/cpu.h>
#include <kiln/passes/pass.h>

#include <regex>

#include "cpu_diff.h"

namespace kiln::cputest {
namespace {

using V = std::vector<Tensor>;

struct GenericCase {
  std::string name;
  std::string text;  // a graph with {N} and {M} for the sizes
  std::vector<int> transposed;  // inputs laid out as the transpose of a contiguous [M, N]
};

const std::vector<GenericCase>& generic_cases() {
  static const std::vector<GenericCase> c = {
      {"bias_sin",
       "graph @main(%x: f32[{N},{M}]{{M},1}, %b: f32[{M}]{1}) {\n"
       "  %0 = add(%x, %b) {alpha=1} : f32[{N},{M}]{{M},1}\n"
       "  %1 = sin(%0) : f32[{N},{M}]{{M},1}\n"
       "  %2 = mul(%1, %x) : f32[{N},{M}]{{M},1}\n"
       "  return %2\n}\n",
       {}},
      {"transpose_add",
       "graph @main(%x: f32[{N},{M}]{1,{N}}, %y: f32[{N},{M}]{{M},1}) {\n"
       "  %0 = add(%x, %y) {alpha=1} : f32[{N},{M}]{{M},1}\n"
       "  return %0\n}\n",
       {0}},
      {"softmax_rows",
       "graph @main(%x: f32[{N},{M}]{{M},1}) {\n"
       "  %0 = softmax(%x) {dim=1} : f32[{N},{M}]{{M},1}\n"
       "  return %0\n}\n",
       {}},
      {"mean_var_rows",
       "graph @main(%x: f64[{N},{M}]{{M},1}) {\n"
       "  %0 = mean(%x) {dims=[1], keepdim=true} : f64[{N},1]{1,1}\n"
       "  %1 = var(%x) {correction=1, dims=[1], keepdim=false} : f64[{N}]{1}\n"
       "  return %0, %1\n}\n",
       {}},
      {"full_mean",
       "graph @main(%x: f32[{N},{M}]{{M},1}) {\n"
       "  %0 = mean(%x) {dims=[0,1], keepdim=false} : f32[]{}\n"
       "  return %0\n}\n",
       {}},
      // (two depths each: split per pass where the size is worth threads)
      {"full_var_logsumexp",
       "graph @main(%x: f32[{N},{M}]{{M},1}) {\n"
       "  %0 = var(%x) {correction=1, dims=[0,1], keepdim=false} : f32[]{}\n"
       "  %1 = logsumexp(%x) {dims=[0,1], keepdim=false} : f32[]{}\n"
       "  return %0, %1\n}\n",
       {}},
  };
  return c;
}

std::string with_sizes(std::string text, int64_t n, int64_t m) {
  text = std::regex_replace(text, std::regex("\\{N\\}"), std::to_string(n));
  return std::regex_replace(text, std::regex("\\{M\\}"), std::to_string(m));
}

class CpuGeneric : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuGeneric, OneCompileServesEverySize) {
  const GenericCase& gc = generic_cases()[GetParam()];
  // (the first size compiles; the others, of the same structure, must not)
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{7, 33}, {64, 1023}, {130, 257}, {3, 4099}, {2, 2}};
  for (size_t s = 0; s < sizes.size(); ++s) {
    auto [n, m] = sizes[s];
    SCOPED_TRACE(gc.name + " at [" + std::to_string(n) + ", " + std::to_string(m) + "]");
    ir::Graph g = ir::parse(with_sizes(gc.text, n, m));
    passes::Module mod = passes::optimize(g);
    std::vector<ir::Type> types;
    std::vector<Tensor> in;
    manual_seed(uint64_t(n * 1000 + m));
    for (size_t i = 0; i < g.inputs().size(); ++i) {
      const ir::Type& t = g.inputs()[i]->type;
      types.push_back(t);
      bool tr = std::count(gc.transposed.begin(), gc.transposed.end(), int(i)) > 0;
      std::vector<int64_t> sz = t.sizes;
      if (tr) std::swap(sz[0], sz[1]);
      Tensor x = randn(sz, TensorOptions(t.dtype));
      in.push_back(tr ? x.t() : x);
    }
    auto prog = codegen::compile_cpu(mod.program, types, {.generic = true});
    const exec::CompileStats& st = prog->stats();
    EXPECT_TRUE(st.generic);
    EXPECT_EQ(st.compiled, st.kernels) << passes::print(*mod.program);
    if (s > 0) {
      EXPECT_EQ(st.memory_hits, st.compiled) << "a kernel was compiled again for another size";
    }
    std::vector<Tensor> got = prog->run(in);
    std::vector<Tensor> want = ir::Executable(g).run(in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(close_to(got[i], want[i], {})) << "output " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuGeneric, ::testing::Range<size_t>(0, generic_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return generic_cases()[info.param].name; });

// Through compile(): past the recompile limit the varying dim is dynamic; every later size runs
// a program of size-generic kernels, correct at each size, and explain() says so.
TEST(CpuGenericCompile, DynamicDimRunsOnGenericKernels) {
  CompileOptions o = cpu_options();
  o.recompile_limit = 2;
  auto fn = [](const Tensor& x, const Tensor& b) { return V{((x + b).softmax(-1) * 2).sum(0)}; };
  auto f = compile(fn, o);
  ::testing::internal::CaptureStderr();
  for (int64_t n : {5, 9, 17, 33, 64, 100, 3, 250}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    Tensor x = randn({n, 77}), b = randn({77});
    V got = f(x, b), want = fn(x, b);
    EXPECT_TRUE(close_to(got[0], want[0], {}));
  }
  ::testing::internal::GetCapturedStderr();
  Explanation ex = f.explain(randn({250, 77}), randn({77}));
  EXPECT_NE(ex.str().find("dynamic: arg 0 dim 0"), std::string::npos) << ex;
  ASSERT_FALSE(ex.graphs.empty());
  EXPECT_NE(ex.graphs.back().backend.find("kept with size-generic kernels"), std::string::npos) << describe(ex);
  EXPECT_EQ(ex.graphs.back().backend.find(" 0 kept"), std::string::npos) << describe(ex);
}

}  // namespace
}  // namespace kiln::cputest
