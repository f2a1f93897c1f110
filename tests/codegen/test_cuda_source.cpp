// The CUDA backend's rendered source, read for the properties that make kernels fast (tests of
// cuda_render_tests beside test_cuda_render.cpp, which runs the kernels on the emulated driver
// and compiles them with NVRTC): vector accesses on contiguous data, 32-bit indices where they
// fit, broadcast operands read per run, staged tiles, row caches, row groups, size-generic
// kernels and their fast divisors, and the launch geometry.
#include <gtest/gtest.h>
#include <kiln/codegen/cuda.h>
#include <kiln/kiln.h>
#include <kiln/passes/kernel.h>
#include <kiln/passes/pass.h>
#include <kiln/runtime/cuda.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "../common/scoped_env.h"
#include "traced.h"
#include "workloads.h"

using namespace kiln;
namespace wl = kiln::workloads;

namespace {

using kiln::testing::Fn;
using kiln::testing::trace;

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

std::string source_of(const Fn& fn, const std::vector<Tensor>& in) {
  auto graphs = trace(fn, {in});
  passes::Module m = passes::optimize(graphs[0], {});
  return codegen::emit_cuda(*m.program, codegen::CudaEmit::Source);
}

TEST(CudaSource, ContiguousOperandsUseVectorAccessesAndThirtyTwoBitIndices) {
  std::string s = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0] + sin(v[1])}; }, {randn({4096}), randn({4096})});
  EXPECT_NE(s.find("4-wide vector accesses"), std::string::npos) << s;
  EXPECT_NE(s.find("reinterpret_cast<const kiln_vec<float, 4>*>(p0 + base)"), std::string::npos) << s;
  EXPECT_NE(s.find("*reinterpret_cast<kiln_vec<float, 4>*>(s2 + base)"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned n = (unsigned)n_items;"), std::string::npos) << s;
  // past the parameters (the status word is a 64-bit pointer) and before the host emulation's
  // entry point, nothing 64-bit
  std::string body = s.substr(s.find("status) {"));
  body = body.substr(0, body.find("#if defined(KILN_CUDA_EMULATION)"));
  EXPECT_EQ(body.find("long long"), std::string::npos) << "64-bit index math where 32 bits fit:\n" << body;
  // half storage: 8 elements per 16 bytes, computed in float
  std::string h = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0] * v[0]}; }, {randn({4096}).to(kFloat16)});
  EXPECT_NE(h.find("kiln_vec<unsigned short, 8>"), std::string::npos) << h;
  EXPECT_NE(h.find("kiln_h2f("), std::string::npos) << h;
}

// The outputs of one fusion group are the stores of one kernel: one pass over the inputs writes
// them all, each by vectors (what they compute is checked on the emulator, test_cuda_render.cpp's
// op cases with two outputs, and on a GPU).
TEST(CudaSource, MultiOutputKernelsWriteEveryOutputInOnePass) {
  auto graphs = trace([](const std::vector<Tensor>& v) {
    Tensor s = v[0] + v[1];
    return std::vector{s, s * v[0], sin(s)};
  }, {{randn({4096}), randn({4096})}});
  passes::Module m = passes::optimize(graphs[0], {});
  ASSERT_EQ(m.program->kernels.size(), 1u) << passes::print(*m.program);
  EXPECT_EQ(m.program->kernels[0].stores.size(), 3u) << passes::print(*m.program);
  std::string s = codegen::emit_cuda(*m.program, codegen::CudaEmit::Source);
  EXPECT_EQ(count_of(s, "__global__"), 1u) << s;
  for (const char* store : {"*>(s2 + base) = ", "*>(s3 + base) = ", "*>(s4 + base) = "})
    EXPECT_EQ(count_of(s, store), 1u) << store << "\n" << s;
}

TEST(CudaSource, StridedOperandsGetIndexMathAndNoVectorAccess) {
  std::string s = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0].slice(1, 0, 128, 2) + v[1]}; },
                            {randn({64, 130}), randn({64, 64})});
  std::string body = s.substr(s.find("extern \"C\""));
  EXPECT_EQ(body.find("kiln_vec"), std::string::npos) << body;
  EXPECT_NE(body.find("% 64u"), std::string::npos) << body;
  EXPECT_NE(body.find("(int)c1 * 2]"), std::string::npos) << body;
}

// A broadcast operand of a specialised kernel is read per run of the innermost loop: a bias
// over rows as a vector at the vector's column, a column over columns as one element per
// vector. The runs must hold whole vectors (rows of 130 floats: two per vector; of 131: none).
TEST(CudaSource, BroadcastOperandsAreReadPerRunOfTheInnermostLoop) {
  auto add2 = [](const std::vector<Tensor>& v) { return std::vector{v[0] + v[1]}; };
  std::string bias = source_of(add2, {randn({64, 128}), randn({128})});
  EXPECT_NE(bias.find("reinterpret_cast<const kiln_vec<float, 4>*>(p0 + base)"), std::string::npos) << bias;
  EXPECT_NE(bias.find("reinterpret_cast<const kiln_vec<float, 4>*>(p1 + (int)c1)"), std::string::npos) << bias;
  std::string col = source_of(add2, {randn({64, 128}), randn({64, 1})});
  EXPECT_NE(col.find("kiln_vec<float, 4>*>(p0 + base)"), std::string::npos) << col;
  EXPECT_EQ(col.find("kiln_vec<float, 4>*>(p1"), std::string::npos) << col;
  EXPECT_NE(col.find("= p1[(int)c0];"), std::string::npos) << col;
  std::string two = source_of(add2, {randn({64, 130}), randn({130})});
  EXPECT_NE(two.find("kiln_vec<float, 2>*>(p1 + (int)c1)"), std::string::npos) << two;
  std::string none = source_of(add2, {randn({64, 131}), randn({131})});
  none = none.substr(none.find("extern \"C\""));
  EXPECT_EQ(none.find("kiln_vec"), std::string::npos) << none;
  // a narrowed matrix, rows 134 apart: its runs start two elements off a 16-byte line
  std::string narrowed = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0].narrow(1, 0, 128) - v[1]}; },
                                   {randn({64, 134}), randn({128})});
  EXPECT_NE(narrowed.find("kiln_vec<float, 2>*>(p0 + "), std::string::npos) << narrowed;
}

// A size-generic kernel reads broadcast operands per run too (eager m + bias): one body for
// every size, whose vector path also checks when it runs what a specialised kernel knows from
// its sizes: the runs hold whole vectors (L1 % 4) and a run operand's other strides keep its
// vectors aligned (a weight over a batch, a slice of rows 68 apart: its row stride S1_1).
TEST(CudaSource, SizeGenericKernelsReadBroadcastOperandsPerRun) {
  auto generic = [](const kiln::testing::Fn& fn, std::vector<Tensor> in) {
    passes::Module m = passes::optimize(trace(fn, {in})[0], {});
    std::vector<codegen::CudaRender> r = codegen::render_cuda(*m.program, "kiln_k", true);
    EXPECT_TRUE(r.size() == 1 && r[0].kernel && r[0].kernel->generic);
    return r.size() == 1 && r[0].kernel ? r[0].kernel->body : std::string();
  };
  auto add2 = [](const std::vector<Tensor>& v) { return std::vector{v[0] + v[1]}; };
  const std::string a = generic(add2, {randn({30, 40}), randn({40})}), b = generic(add2, {randn({53, 44}), randn({44})});
  EXPECT_EQ(a, b);
  EXPECT_NE(a.find("if (kiln_aligned(p0, 16) && kiln_aligned(p1, 16) && kiln_aligned(s2, 16) && L1 % 4u == 0u) {"),
            std::string::npos)
      << a;
  EXPECT_NE(a.find("reinterpret_cast<const kiln_vec<float, 4>*>(p1 + (int)c1)"), std::string::npos) << a;
  const std::string w = generic([](const std::vector<Tensor>& v) { return std::vector{v[0] + v[1].narrow(1, 0, 64)}; },
                                 {randn({3, 33, 64}), randn({33, 68})});
  EXPECT_NE(w.find("L2 % 4u == 0u && S1_1 % 4 == 0) {"), std::string::npos) << w;
}

// A row loop without a row cache counts its iterations on entry, so that the compiler unrolls
// it into groups of four loads with no bounds check between them (one load in flight per
// thread otherwise: row_sum at 72% of the copy's bandwidth on an H100). Parenthesised: the
// start and step are expressions.
TEST(CudaSource, RowLoopsCountTheirIterationsAndUnrollByFour) {
  // (rows of 50 runs of 100 elements 128 apart: element by element)
  std::string s = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0].narrow(2, 0, 100).sum({1, 2})}; },
                            {randn({300, 50, 128})});
  EXPECT_NE(s.find("block-per-row"), std::string::npos) << s;
  EXPECT_EQ(s.find("kiln_vec<float"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned en = ((unsigned)threadIdx.x) < 5000u ? (5000u - ((unsigned)threadIdx.x) + (blockDim.x) - 1) / "
                   "(blockDim.x) : 0;"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("#pragma unroll 4\n      for (unsigned ek = 0; ek < en; ++ek) {"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned e = ((unsigned)threadIdx.x) + ek * (blockDim.x);"), std::string::npos) << s;
}

// A reduction pass over contiguous rows reads 16 bytes per load (four of them in flight per
// thread in the unrolled loop), where the row's start is aligned; the rest of the row, or a
// row whose start is not aligned, element by element. The whole-tensor split reduction too.
TEST(CudaSource, ReductionPassesOverContiguousRowsReadSixteenBytesPerLoad) {
  std::string s = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0].sum({1})}; }, {randn({300, 5001})});
  EXPECT_NE(s.find("block-per-row, 300 rows, 4-wide vector accesses"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned nvr = kiln_aligned(p0 + (int)row * 5001, 16) ? 5001u / 4u : 0u;"), std::string::npos) << s;
  EXPECT_NE(s.find("#pragma unroll 4\n      for (unsigned qk = 0; qk < qn; ++qk) {"), std::string::npos) << s;
  EXPECT_NE(s.find("const kiln_vec<float, 4> l0 = *reinterpret_cast<const kiln_vec<float, 4>*>(p0 + (int)row * 5001 + base);"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("const unsigned e = (nvr * 4u + (unsigned)threadIdx.x) + ek * (blockDim.x);"), std::string::npos) << s;

  std::string d = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0].sum()}; }, {randn({100000}).to(kFloat64)});
  EXPECT_NE(d.find("split, 100000 elements, 2-wide vector accesses"), std::string::npos) << d;
  EXPECT_NE(d.find("reinterpret_cast<const kiln_vec<double, 2>*>(p0 + 0 + base)"), std::string::npos) << d;

  // float16 with float32: as many elements per load as the widest dtype's 16 bytes hold
  std::string h = source_of([](const std::vector<Tensor>& v) { return std::vector{(v[0] * v[1]).sum({1})}; },
                            {randn({64, 4096}).to(kFloat16), randn({64, 4096})});
  EXPECT_NE(h.find("kiln_vec<unsigned short, 4> l0"), std::string::npos) << h;
  EXPECT_NE(h.find("kiln_vec<float, 4> l1"), std::string::npos) << h;
}

// RowSplit's chunks go by vectors from their start (a multiple of 32 elements) where the row's
// operands are aligned, the early stores too; else, and past the chunk's whole vectors, element
// by element from where the vectors end (never before the chunk's start).
TEST(CudaSource, RowSplitChunksReadSixteenBytesPerLoad) {
  std::string s = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0].sum({1}), v[0] * 3}; },
                            {randn({3, 40001})});
  EXPECT_NE(s.find("row-split, 3 rows of 40001 elements in chunks, 4-wide vector accesses"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned nv0 = kiln_aligned(p0 + (int)row * 40001, 16) && kiln_aligned(s2 + (int)row * 40001, 16) ? "
                   "hi / 4u : lo / 4u;"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("const unsigned nv0e = nv0 * 4u > lo ? nv0 * 4u : lo;"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned q = (lo / 4u + (unsigned)threadIdx.x) + qk * (blockDim.x);"), std::string::npos) << s;
  EXPECT_NE(s.find("*reinterpret_cast<kiln_vec<float, 4>*>(s2 + (int)row * 40001 + base) = w2;"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned e = (nv0e + (unsigned)threadIdx.x) + ek * (blockDim.x);"), std::string::npos) << s;
}

// Size-generic kernels (eager ops on GPU tensors) read their reduction passes by vectors too,
// the row's length and its stride read from parameters: one body for rows of 5001 and of 2900.
// Not over two reduced loops (a slice's, which do not merge into one), whose contiguity
// depends on the sizes.
TEST(CudaSource, SizeGenericReductionPassesReadVectorsToo) {
  auto render = [](const kiln::testing::Fn& fn, std::vector<Tensor> in) {
    auto graphs = trace(fn, {std::move(in)});
    passes::Module mod = passes::optimize(graphs.at(0), {});
    std::vector<codegen::CudaRender> r = codegen::render_cuda(*mod.program, "kiln_k", true);
    EXPECT_TRUE(r.at(0).kernel.has_value());
    return r[0].kernel.value_or(codegen::CudaKernel{});
  };
  auto row_sums = [](const std::vector<Tensor>& v) { return std::vector{v[0].sum({1})}; };
  codegen::CudaKernel a = render(row_sums, {randn({300, 5001})}), b = render(row_sums, {randn({7, 2900})});
  EXPECT_EQ(a.body, b.body);
  EXPECT_EQ(a.vector, 4);
  EXPECT_NE(a.body.find("const unsigned nvr = kiln_aligned(p0 + (int)row * S0_0, 16) ? row_len / 4u : 0u;"), std::string::npos)
      << a.body;
  EXPECT_NE(a.body.find("reinterpret_cast<const kiln_vec<float, 4>*>(p0 + (int)row * S0_0 + base)"), std::string::npos) << a.body;
  codegen::CudaKernel two =
      render([](const std::vector<Tensor>& v) { return std::vector{v[0].narrow(2, 0, 99).sum({1, 2})}; }, {randn({20, 50, 100})});
  EXPECT_EQ(two.vector, 1);
  EXPECT_EQ(two.body.find("kiln_vec<float"), std::string::npos) << two.body;
}

// A transposed operand is staged through shared memory, read along its own contiguous dim
// (lanes tx walk it: stride 1), and read back transposed while the store walks its rows.
TEST(CudaSource, TransposedOperandsAreStagedThroughSharedMemory) {
  std::string s = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0].t() + v[1]}; },
                            {randn({4096, 4096}), randn({4096, 4096})});
  EXPECT_NE(s.find("tiled, 16384 tiles of 32 x 32"), std::string::npos) << s;
  EXPECT_NE(s.find("__shared__ float tile0[32][33];"), std::string::npos) << s;
  EXPECT_NE(s.find("st0[kk] = p0[(int)ct + (int)ca * 4096];"), std::string::npos) << s;
  EXPECT_NE(s.find("tile0[k][tx] = st0[kk];"), std::string::npos) << s;
  EXPECT_NE(s.find("= tile0[tx][k];"), std::string::npos) << s;
  EXPECT_NE(s.find("s2[(int)ct * 4096 + (int)ca] = "), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned ct = bt + k, ca = ba + tx;"), std::string::npos) << s;
  // each warp's rows of a tile four at a time: loaded into registers in one unrolled loop (their
  // loads in flight together), stored or used in the next
  EXPECT_EQ(count_of(s, "for (unsigned k0 = ty; k0 < 32u; k0 += 4u * ny) {"), 2u) << s;
  EXPECT_EQ(count_of(s, "#pragma unroll\n      for (unsigned kk = 0; kk < 4u; ++kk) {"), 4u) << s;
  // y is read where it is stored: straight from memory, ahead of the stores. Its rows of the
  // computing loop's first step are read before the staging, so that its loads and the
  // staged ones are in flight together across the barrier; later steps (blocks of fewer than
  // 256 threads) read theirs in the loop.
  EXPECT_EQ(count_of(s, "ld1[kk] = p1[(int)ct * 4096 + (int)ca];"), 2u) << s;
  EXPECT_LT(s.find("ld1[kk] = p1[(int)ct * 4096 + (int)ca];"), s.find("st0[kk] = p0[")) << s;
  EXPECT_NE(s.find("if (k0 != ty) {"), std::string::npos) << s;
  EXPECT_NE(s.find("= ld1[kk];"), std::string::npos) << s;
}

// KILN_CUDA_TILE=64: 64 x 64 tiles, a lane taking two columns of a row (lx = tx + 32 c), a
// step's loads in registers [kk * 2 + c]; the transposed reads still fall in 32 banks (rows of
// 65). The tiles stay 32 wide where a loop is shorter than 64 or the staged tiles would take
// more than 40 KiB of shared memory (three float32 operands, or two float64 ones).
TEST(CudaSource, WideTilesTakeTwoColumnsPerLane) {
  kiln::testing::ScopedEnv wide("KILN_CUDA_TILE", "64");
  auto add_t = [](const std::vector<Tensor>& v) { return std::vector{v[0].t() + v[1]}; };
  std::string s = source_of(add_t, {randn({4096, 4096}), randn({4096, 4096})});
  EXPECT_NE(s.find("tiled, 4096 tiles of 64 x 64"), std::string::npos) << s;
  EXPECT_NE(s.find("__shared__ float tile0[64][65];"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned lx = tx + c * 32u;"), std::string::npos) << s;
  EXPECT_NE(s.find("st0[kk * 2u + c] = p0[(int)ct + (int)ca * 4096];"), std::string::npos) << s;
  EXPECT_NE(s.find("tile0[k][lx] = st0[kk * 2u + c];"), std::string::npos) << s;
  EXPECT_NE(s.find("= tile0[lx][k];"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned ct = bt + k, ca = ba + lx;"), std::string::npos) << s;
  EXPECT_NE(s.find("float ld1[8] = {};"), std::string::npos) << s;
  EXPECT_EQ(count_of(s, "ld1[kk * 2u + c] = p1[(int)ct * 4096 + (int)ca];"), 2u) << s;
  EXPECT_EQ(count_of(s, "for (unsigned k0 = ty; k0 < 64u; k0 += 4u * ny) {"), 2u) << s;
  EXPECT_EQ(count_of(s, "for (unsigned c = 0; c < 2u; ++c) {"), 5u) << s;
  auto tiles_of = [&](const kiln::testing::Fn& fn, const std::vector<Tensor>& in) {
    std::string src = source_of(fn, in);
    const size_t at = src.find(" tiles of ");
    return at == std::string::npos ? std::string("not tiled") : src.substr(at + 10, 7);
  };
  EXPECT_EQ(tiles_of(add_t, {randn({40, 4096}), randn({4096, 40})}), "32 x 32");
  auto staged = [](int n) {
    return [n](const std::vector<Tensor>& v) {
      Tensor r = v[0];
      for (int j = 0; j < n; ++j) r = r + v[size_t(j) + 1].t();
      return std::vector{r};
    };
  };
  EXPECT_EQ(tiles_of(staged(2), {randn({256, 256}), randn({256, 256}), randn({256, 256})}), "64 x 64");
  EXPECT_EQ(tiles_of(staged(3), {randn({256, 256}), randn({256, 256}), randn({256, 256}), randn({256, 256})}), "32 x 32");
  auto f64 = [](std::vector<int64_t> s) { return randn(s).to(kFloat64); };
  EXPECT_EQ(tiles_of(staged(1), {f64({256, 256}), f64({256, 256})}), "64 x 64");
  EXPECT_EQ(tiles_of(staged(2), {f64({256, 256}), f64({256, 256}), f64({256, 256})}), "32 x 32");
  // anything but 32 or 64 is refused, naming the variable
  kiln::testing::ScopedEnv odd("KILN_CUDA_TILE", "48");
  try {
    source_of(add_t, {randn({256, 256}), randn({256, 256})});
    ADD_FAILURE() << "KILN_CUDA_TILE=48 was accepted";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("KILN_CUDA_TILE=48"), std::string::npos) << e.what();
  }
}

// The grid of a grid-stride kernel: at most KILN_CUDA_GRID_PER_SM blocks per SM, or with 0 (the
// default) one block per step of work (a tile here); a split reduction keeps its own count.
// (The emulated driver sets 8 where the variable is unset: the default is read with it unset.)
TEST(CudaLaunchDims, TheGridPerSmComesFromTheEnvironment) {
  auto kernel_of = [](const kiln::testing::Fn& fn, std::vector<Tensor> in) {
    passes::Module m = passes::optimize(trace(fn, {in})[0], {});
    std::vector<codegen::CudaRender> r = codegen::render_cuda(*m.program);
    return r.size() == 1 && r[0].kernel ? *r[0].kernel : codegen::CudaKernel{};
  };
  const codegen::CudaKernel tiled = kernel_of([](const std::vector<Tensor>& v) { return std::vector{v[0].t() + v[1]}; },
                                              {randn({4096, 4096}), randn({4096, 4096})});
  const codegen::CudaKernel split =
      kernel_of([](const std::vector<Tensor>& v) { return std::vector{v[0].sum()}; }, {randn({4096, 4096})});
  ASSERT_EQ(tiled.strategy, codegen::CudaStrategy::Tiled);
  ASSERT_EQ(split.strategy, codegen::CudaStrategy::Split);
  ASSERT_EQ(tiled.items, 16384);
  // (RowSplit: enough chunks per row for 8 blocks per SM, each at least 8192 elements; per-channel
  // statistics over [8, 64, 56, 56] are 64 rows of 25088: 17 chunks wanted, 3 long enough)
  const codegen::CudaKernel rows =
      kernel_of([](const std::vector<Tensor>& v) { return std::vector{v[0].sum({0, 2, 3})}; }, {randn({8, 64, 56, 56})});
  ASSERT_EQ(rows.strategy, codegen::CudaStrategy::RowSplit);
  const codegen::CudaLaunch rl = codegen::cuda_launch_dims(rows, 132);
  EXPECT_EQ(rl.parts, 3u);
  EXPECT_EQ(rl.grid, 64u * 3);
  EXPECT_EQ(rl.finish_grid, 1u);
  EXPECT_EQ(codegen::cuda_launch_dims(rows, 1).parts, 1u);  // (one SM: a chunk per row already fills it)
  {
    kiln::testing::ScopedEnv unset("KILN_CUDA_GRID_PER_SM", nullptr);
    EXPECT_EQ(codegen::cuda_launch_dims(tiled, 132).grid, 16384u);
    EXPECT_EQ(codegen::cuda_launch_dims(split, 132).grid, 132u * 4);
  }
  {
    kiln::testing::ScopedEnv eight("KILN_CUDA_GRID_PER_SM", "8");
    EXPECT_EQ(codegen::cuda_launch_dims(tiled, 132).grid, 132u * 8);
    EXPECT_EQ(codegen::cuda_launch_dims(split, 132).grid, 132u * 4);
  }
  {
    kiln::testing::ScopedEnv four("KILN_CUDA_GRID_PER_SM", "4");
    EXPECT_EQ(codegen::cuda_launch_dims(tiled, 132).grid, 132u * 4);
  }
  for (const char* bad : {"-1", "many", "8x", "2000"}) {
    kiln::testing::ScopedEnv b("KILN_CUDA_GRID_PER_SM", bad);
    try {
      codegen::cuda_launch_dims(tiled, 132);
      ADD_FAILURE() << "KILN_CUDA_GRID_PER_SM=" << bad << " was accepted";
    } catch (const kiln::Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("KILN_CUDA_GRID_PER_SM=") + bad), std::string::npos) << e.what();
    }
  }
}

// Layernorm over rows of `n` (the mean, the variance, the stores: three passes over each row),
// its kernel's body without the emulation entry points.
std::string layernorm_body(int64_t n) {
  std::string s = source_of(
      [](const std::vector<Tensor>& v) {
        Tensor mean = v[0].mean({-1}, true), var = v[0].var({-1}, 0, true);
        return std::vector{(v[0] - mean) / sqrt(var + 1e-5) * v[1] + v[2]};
      },
      {randn({300, n}), randn({n}), randn({n})});
  std::string body = s.substr(s.find("// kernel k0"));
  return body.substr(0, body.find("#if defined(KILN_CUDA_EMULATION)"));
}

// A warp-per-row kernel of several passes over its rows (layernorm: the mean, the variance,
// the stores) reads each row once: the lanes keep their elements in registers (an unrolled
// pass, `it` a constant in each copy). The weight and bias, the same for every row, are read
// where they are used. Where every operand is contiguous along the row, a lane owns four
// neighbouring floats per step and reads and writes them 16 bytes at a time; the kernel checks
// once that its operands are aligned (then so is every row: 1000 is whole vectors) and walks
// the rows element by element otherwise.
TEST(CudaSource, WarpRowsKeepTheirRowInRegistersAcrossPasses) {
  std::string body = layernorm_body(1000);
  EXPECT_NE(body.find("warp-per-row, 300 rows, 4-wide vector accesses"), std::string::npos) << body;
  const size_t split = body.find("  } else {\n");
  ASSERT_NE(split, std::string::npos) << body;
  EXPECT_NE(body.find("if (kiln_aligned(p0, 16) && kiln_aligned(p1, 16) && kiln_aligned(p2, 16) && kiln_aligned(s3, 16)) {"),
            std::string::npos)
      << body;
  const std::string vec = body.substr(0, split), scalar = body.substr(split);
  // by vectors: eight steps of four elements per lane
  EXPECT_NE(vec.find("float rc0[32];  // row cache"), std::string::npos) << vec;
  EXPECT_NE(vec.find("const unsigned b = (it * 32u + (unsigned)(threadIdx.x & 31u)) * 4u;"), std::string::npos) << vec;
  EXPECT_EQ(count_of(vec, "live ? *reinterpret_cast<const kiln_vec<float, 4>*>(rp0 + b) : "), 1u) << vec;  // the row: once
  EXPECT_EQ(count_of(vec, "rc0[it * 4 + u] = v0;"), 1u) << vec;
  EXPECT_EQ(count_of(vec, "= rc0[it * 4 + u];"), 2u) << vec;  // then from registers in the two later passes
  EXPECT_EQ(count_of(vec, "live ? *reinterpret_cast<const kiln_vec<float, 4>*>(rp1 + b) : "), 1u) << vec;  // the weight: not cached
  EXPECT_EQ(count_of(vec, "if (live) *reinterpret_cast<kiln_vec<float, 4>*>(rp3 + b) = w3;"), 1u) << vec;
  EXPECT_EQ(vec.find("p0["), std::string::npos) << vec;
  EXPECT_EQ(vec.find("s3["), std::string::npos) << vec;
  // element by element
  EXPECT_NE(scalar.find("float rc0[32];  // row cache"), std::string::npos) << scalar;
  EXPECT_EQ(count_of(scalar, "p0["), 1u) << scalar;
  EXPECT_EQ(count_of(scalar, "= rc0[it];"), 2u) << scalar;
  EXPECT_EQ(count_of(scalar, "p1[(int)e]"), 1u) << scalar;
  EXPECT_EQ(count_of(scalar, "s3[(int)row * 1000 + (int)e] = "), 1u) << scalar;
  EXPECT_EQ(scalar.find("kiln_vec"), std::string::npos) << scalar;
  EXPECT_EQ(count_of(body, "#pragma unroll\n"), 9u) << body;  // three passes each, and the vectors' lanes
  EXPECT_EQ(body.find("rc1"), std::string::npos) << body;
  // rows that are not whole vectors, or rows a stride apart that is not, only the second loop
  for (int64_t n : {1002, 1003}) {
    std::string odd = layernorm_body(n);
    EXPECT_EQ(odd.find("kiln_vec"), std::string::npos) << odd;
    EXPECT_NE(odd.find("float rc0[32];  // row cache"), std::string::npos) << odd;
  }
  std::string sliced = source_of([](const std::vector<Tensor>& v) { return std::vector{softmax(v[0].narrow(1, 0, 1024), 1)}; },
                                 {randn({30, 1030})});
  EXPECT_NE(sliced.find("float rc0[32];  // row cache"), std::string::npos) << sliced;
  EXPECT_EQ(sliced.find("kiln_vec<float"), std::string::npos) << sliced;
}

// Rows past 2048 go one per block; a block-per-row kernel of several passes keeps its row in
// shared memory instead (layernorm over 4096: the mean, the variance, the stores), each thread
// reading back the positions it wrote. Its passes go by 16-byte vectors, the stores too, where
// the kernel finds its operands aligned (checked once, before the rows: every row must split
// between vectors and elements the same way, for each thread to own the same cache slots row
// after row), the elements past the whole vectors one by one. Rows past 32 KiB of cache are
// read once per pass.
TEST(CudaSource, BlockRowsKeepTheirRowInSharedMemoryAcrossPasses) {
  std::string body = layernorm_body(4096);
  EXPECT_NE(body.find("block-per-row, 300 rows, 4-wide vector accesses"), std::string::npos) << body;
  EXPECT_NE(body.find("alignas(16) __shared__ float rs0[4096];  // row cache"), std::string::npos) << body;
  EXPECT_LT(body.find("const unsigned nvr = kiln_aligned(p0, 16) && kiln_aligned(p1, 16) && kiln_aligned(p2, 16) && "
                      "kiln_aligned(s3, 16) ? 4096u / 4u : 0u;"),
            body.find("for (unsigned row = "))
      << body;
  // the row: once, by vectors and then element by element; into the cache likewise, a vector
  // (c0) at a time
  EXPECT_EQ(count_of(body, "reinterpret_cast<const kiln_vec<float, 4>*>(p0 + (int)row * 4096 + base)"), 1u) << body;
  EXPECT_EQ(count_of(body, "p0["), 1u) << body;
  EXPECT_EQ(count_of(body, "c0.v[u] = v0;"), 1u) << body;
  EXPECT_EQ(count_of(body, "*reinterpret_cast<kiln_vec<float, 4>*>(rs0 + base) = c0;"), 1u) << body;
  EXPECT_EQ(count_of(body, "rs0[e] = v0;"), 1u) << body;
  // then from shared memory in the two later passes
  EXPECT_EQ(count_of(body, "const kiln_vec<float, 4> c0 = *reinterpret_cast<const kiln_vec<float, 4>*>(rs0 + base);"), 2u)
      << body;
  EXPECT_EQ(count_of(body, "= c0.v[u];"), 2u) << body;
  EXPECT_EQ(count_of(body, "= rs0[e];"), 2u) << body;
  // the weight: not cached; the stores by vectors
  EXPECT_EQ(count_of(body, "reinterpret_cast<const kiln_vec<float, 4>*>(p1 + 0 + base)"), 1u) << body;
  EXPECT_EQ(count_of(body, "p1[(int)e]"), 1u) << body;
  EXPECT_EQ(count_of(body, "*reinterpret_cast<kiln_vec<float, 4>*>(s3 + (int)row * 4096 + base) = w3;"), 1u) << body;
  // rows 4098 floats apart: no row but the first starts on a 16-byte line, so no vectors
  std::string apart = source_of([](const std::vector<Tensor>& v) { return std::vector{softmax(v[0].narrow(1, 0, 4096), 1)}; },
                                {randn({30, 4098})});
  EXPECT_NE(apart.find("__shared__ float rs0[4096];  // row cache"), std::string::npos) << apart;
  EXPECT_EQ(apart.find("kiln_vec<float"), std::string::npos) << apart;
  // size-generic (an eager softmax): the rows' stride checked with the data's alignment
  auto graphs = trace([](const std::vector<Tensor>& v) { return std::vector{softmax(v[0], 1)}; }, {{randn({30, 3000})}});
  passes::Module m = passes::optimize(graphs[0], {});
  std::vector<codegen::CudaRender> r = codegen::render_cuda(*m.program, "kiln_k", true);
  ASSERT_TRUE(r.size() == 1 && r[0].kernel);
  EXPECT_NE(r[0].kernel->body.find("alignas(16) __shared__ float rs0[4096];  // row cache"), std::string::npos)
      << r[0].kernel->body;
  EXPECT_NE(r[0].kernel->body.find("const unsigned nvr = kiln_aligned(p0, 16) && kiln_aligned(s1, 16) && S0_0 % 4 == 0 && "
                                   "S1_0 % 4 == 0 ? row_len / 4u : 0u;"),
            std::string::npos)
      << r[0].kernel->body;
  std::string wide = source_of([](const std::vector<Tensor>& v) { return std::vector{softmax(v[0], 1)}; }, {randn({4, 9000})});
  EXPECT_NE(wide.find("block-per-row"), std::string::npos) << wide;
  EXPECT_EQ(wide.find("row cache"), std::string::npos) << wide;
}

// Row groups: n-body's forces over [2, N, N] summed over the last dim go to one block per body
// i for both components, the square root of the distance and the masses' product computed
// once for them (once in the vector pass, once past it), each component with its own vector of
// positions, accumulator and store. Warps take groups too. None where nothing along the row is
// shared, where the outer loop is longer than four, or where too few groups would be left to
// fill the GPU (512 blocks, 4096 warps); none with KILN_CUDA_ROW_GROUPS=0.
TEST(CudaSource, RowGroupsComputeWhatTheirRowsShareOnce) {
  const wl::Workload& nbody = *wl::find_workload("nbody_forces");
  auto forces = [&nbody](const std::vector<Tensor>& v) { return nbody.run(v); };
  std::string s = source_of(forces, {randn({2, 3000}), rand({3000}) + 0.1});
  EXPECT_NE(s.find("block-per-row, 3000 groups of 2 rows, 4-wide vector accesses"), std::string::npos) << s;
  EXPECT_NE(s.find("for (unsigned row = (unsigned)blockIdx.x; row < 3000u; row += (unsigned)gridDim.x) {"), std::string::npos) << s;
  EXPECT_EQ(count_of(s, "= sqrt("), 2u) << s;
  EXPECT_EQ(count_of(s, " / v21;"), 2u) << s;  // (the masses over the squared distance)
  // (the row's vectors only where every copy's row starts on a 16-byte line)
  EXPECT_NE(s.find("const unsigned nvr = kiln_aligned(p0 + 0, 16) && kiln_aligned(p2 + 0, 16) && kiln_aligned(p4 + 0, 16) && "
                   "kiln_aligned(p7 + 0, 16) && kiln_aligned(p0 + (int)1u * 3000, 16) ? 3000u / 4u : 0u;"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("const kiln_vec<float, 4> l0_0 = *reinterpret_cast<const kiln_vec<float, 4>*>(p0 + 0 + base);"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("const kiln_vec<float, 4> l0_1 = *reinterpret_cast<const kiln_vec<float, 4>*>(p0 + (int)1u * 3000 + base);"),
            std::string::npos)
      << s;
  for (const char* want : {"double acc32_0 = (double)0;", "double acc32_1 = (double)0;", "s8[(int)row] = v33_0;",
                           "s8[(int)1u * 3000 + (int)row] = v33_1;"})
    EXPECT_NE(s.find(want), std::string::npos) << want << "\n" << s;
  {
    kiln::testing::ScopedEnv off("KILN_CUDA_ROW_GROUPS", "0");
    std::string one = source_of(forces, {randn({2, 3000}), rand({3000}) + 0.1});
    EXPECT_NE(one.find("block-per-row, 6000 rows, 4-wide vector accesses"), std::string::npos) << one;
    kiln::testing::ScopedEnv bad("KILN_CUDA_ROW_GROUPS", "2");
    EXPECT_THROW(source_of(forces, {randn({2, 3000}), rand({3000}) + 0.1}), Error);
  }
  std::string three = source_of(forces, {randn({3, 3000}), rand({3000}) + 0.1});
  EXPECT_NE(three.find("block-per-row, 3000 groups of 3 rows"), std::string::npos) << three;
  EXPECT_EQ(count_of(three, "= sqrt("), 2u) << three;

  std::string plain = source_of([](const std::vector<Tensor>& v) { return std::vector{v[0].sum({2})}; }, {randn({2, 1100, 2100})});
  EXPECT_NE(plain.find("block-per-row, 2200 rows"), std::string::npos) << plain;
  // (arithmetic, which fusion recomputes over a broadcast: an exponential it would not)
  auto shared_div = [](const std::vector<Tensor>& v) { return std::vector{(v[0] / (v[1] * v[1] + 1)).sum({2})}; };
  std::string divs = source_of(shared_div, {randn({4, 1024, 2100}), randn({1024, 2100})});
  EXPECT_NE(divs.find("block-per-row, 1024 groups of 4 rows"), std::string::npos) << divs;
  EXPECT_EQ(count_of(divs, " * v"), 2u) << divs;  // (v1 * v1: once in the vector pass, once past it)
  std::string five = source_of(shared_div, {randn({5, 1100, 2100}), randn({1100, 2100})});
  EXPECT_NE(five.find("block-per-row, 5500 rows"), std::string::npos) << five;
  std::string few = source_of(shared_div, {randn({2, 500, 2100}), randn({500, 2100})});
  EXPECT_NE(few.find("block-per-row, 1000 rows"), std::string::npos) << few;
  std::string warps = source_of(shared_div, {randn({2, 4096, 100}), randn({4096, 100})});
  EXPECT_NE(warps.find("warp-per-row, 4096 groups of 2 rows"), std::string::npos) << warps;
  std::string few_warps = source_of(shared_div, {randn({2, 4000, 100}), randn({4000, 100})});
  EXPECT_NE(few_warps.find("warp-per-row, 8000 rows"), std::string::npos) << few_warps;
  // a per-row scale that moves along loop 0 beside a row shared by every copy: the only
  // vector operand is the first copy's, so the later copies add nothing to the alignment check
  std::string scale = source_of([](const std::vector<Tensor>& v) { return std::vector{(v[0] * (v[1] * v[1])).sum({2})}; },
                                {randn({2, 1024, 1}), randn({1024, 2100})});
  EXPECT_NE(scale.find("block-per-row, 1024 groups of 2 rows, 4-wide vector accesses"), std::string::npos) << scale;
  EXPECT_NE(scale.find("const unsigned nvr = kiln_aligned(p0 + (int)row * 2100, 16) ? 2100u / 4u : 0u;"), std::string::npos)
      << scale;
  std::string nothing_shared = source_of([](const std::vector<Tensor>& v) { return std::vector{(v[0] * v[1]).sum({2})}; },
                                         {randn({2, 1100, 2100}), randn({1100, 2100})});
  EXPECT_NE(nothing_shared.find("block-per-row, 2200 rows"), std::string::npos) << nothing_shared;
}

TEST(CudaSource, IndicesPastTwoToThe31UseSixtyFourBits) {
  // Rendering needs no memory: a graph with 3e9 elements is only typed.
  ir::Graph g = ir::parse("graph @big(%x: f32[3000000000]{1}) {\n  %0 = mul(%x, %x) : f32[3000000000]{1}\n  return %0\n}\n");
  passes::Module m = passes::optimize(g, {});
  std::string s = codegen::emit_cuda(*m.program, codegen::CudaEmit::Source);
  EXPECT_NE(s.find("64-bit indices"), std::string::npos) << s;
  EXPECT_NE(s.find("const unsigned long long n = (unsigned long long)n_items;"), std::string::npos) << s;
}

// Contiguous elementwise kernels take their element count as a parameter: every size of the
// same op on the same dtypes is one kernel (one CUBIN, one module), so a new size compiles
// nothing. (Below 2^31 elements; past it the 64-bit variant is a second kernel.) Kernels whose
// operands need coordinates (a transpose, a broadcast row) keep their sizes in the body.
TEST(CudaSource, ContiguousElementwiseKernelsServeEverySize) {
  auto body_of = [](int64_t n) {
    auto graphs = trace([](const std::vector<Tensor>& v) { return std::vector{v[0] * v[1] + 1}; }, {{randn({n}), randn({n})}});
    passes::Module m = passes::optimize(graphs[0], {});
    std::vector<codegen::CudaRender> r = codegen::render_cuda(*m.program);
    EXPECT_TRUE(r.at(0).kernel && r[0].kernel->size_param) << n;
    return r[0].kernel ? r[0].kernel->body : std::string();
  };
  const std::string a = body_of(1000), b = body_of(77777), c = body_of(3000);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  EXPECT_EQ(a.find("1000"), std::string::npos) << a;
  auto broadcast = trace([](const std::vector<Tensor>& v) { return std::vector{v[0] + v[1]}; }, {{randn({30, 40}), randn({40})}});
  passes::Module m = passes::optimize(broadcast[0], {});
  std::vector<codegen::CudaRender> r = codegen::render_cuda(*m.program);
  ASSERT_TRUE(r.at(0).kernel);
  EXPECT_FALSE(r[0].kernel->size_param);
}

// A size-generic kernel names no size: x[:, ::2] + b at two sizes is one body, its loop extents
// and non-unit strides read from parameters (unit strides stay constants); the specialised
// kernel keeps its sizes. A contiguous kernel takes only its element count either way.
TEST(CudaSource, SizeGenericKernelsNameNoSize) {
  auto render = [](int64_t m, int64_t n, bool generic) {
    auto graphs = trace([](const std::vector<Tensor>& v) { return std::vector{v[0].slice(1, 0, v[0].size(1), 2) + v[1]}; },
                        {{randn({m, 2 * n}), randn({n})}});
    passes::Module mod = passes::optimize(graphs[0], {});
    std::vector<codegen::CudaRender> r = codegen::render_cuda(*mod.program, "kiln_k", generic);
    EXPECT_TRUE(r.at(0).kernel.has_value());
    return r[0].kernel.value_or(codegen::CudaKernel{});
  };
  codegen::CudaKernel a = render(30, 41, true), b = render(53, 67, true), fixed = render(30, 41, false);
  EXPECT_EQ(a.body, b.body);
  EXPECT_TRUE(a.generic && a.size_param);
  // n_items, the extents, the divisor of the inner one, x's strides, the store's row stride
  EXPECT_EQ(a.size_args, (std::vector<int64_t>{30 * 41, 30, 41, int64_t(codegen::cuda_divisor_magic(41)), 82, 2, 41}));
  std::string body = a.body.substr(0, a.body.find("#if defined(KILN_CUDA_EMULATION)"));
  for (const char* size : {"30", "41", "82", "1230"}) EXPECT_EQ(body.find(size), std::string::npos) << size << "\n" << body;
  for (const char* p : {"long long size0", "long long size1", "long long stride0_0", "long long stride0_1", "long long stride2_0"})
    EXPECT_NE(body.find(p), std::string::npos) << p << "\n" << body;
  EXPECT_NE(body.find("kiln_udiv(r0, div1), c1 = r0 - q1 * L1;"), std::string::npos) << body;
  EXPECT_NE(body.find("p1[(int)c1]"), std::string::npos) << "a unit stride is a constant\n" << body;
  EXPECT_FALSE(fixed.generic);
  EXPECT_NE(fixed.body.find("% 41u"), std::string::npos) << fixed.body;
  EXPECT_TRUE(fixed.size_args.empty());
  auto contiguous = trace([](const std::vector<Tensor>& v) { return std::vector{v[0] * v[1]}; }, {{randn({999}), randn({999})}});
  passes::Module mod = passes::optimize(contiguous[0], {});
  std::vector<codegen::CudaRender> r = codegen::render_cuda(*mod.program, "kiln_k", true);
  ASSERT_TRUE(r.at(0).kernel);
  EXPECT_EQ(r[0].kernel->size_args, std::vector<int64_t>{999});
}

// The multiply-and-shift divisors of size-generic kernels are exact for every dividend below
// 2^31: each divisor below 3000, powers of two and their neighbours, large ones, against edge
// and random dividends (the same arithmetic as kiln_udiv, which the emulation tests run).
TEST(CudaSource, FastDivisorsAreExactBelowTwoToThe31) {
  auto udiv = [](uint32_t r, uint64_t md) {
    uint32_t hi = uint32_t((uint64_t(r) * uint32_t(md)) >> 32);
    return (hi + r) >> uint32_t(md >> 32);
  };
  std::vector<int64_t> divisors;
  for (int64_t d = 1; d < 3000; ++d) divisors.push_back(d);
  for (int s = 1; s < 31; ++s)
    for (int64_t e : {-1, 0, 1}) divisors.push_back((int64_t(1) << s) + e);
  for (int64_t d : {int64_t(2147483647), int64_t(2147483646), int64_t(1000000007), int64_t(65537 * 3)}) divisors.push_back(d);
  uint64_t state = 12345;
  auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull; };
  size_t wrong = 0;
  for (int64_t d : divisors) {
    if (d >= (int64_t(1) << 31)) continue;
    const uint64_t md = codegen::cuda_divisor_magic(d);
    std::vector<uint32_t> rs = {0, 1, uint32_t(d - 1), uint32_t(d), 0x7fffffffu, 0x7ffffffeu};
    for (uint32_t k : {1u, 2u, 3u, 1000u}) {
      uint64_t m = uint64_t(d) * k;
      if (m < 0x80000000u) rs.insert(rs.end(), {uint32_t(m - 1), uint32_t(m), uint32_t(m + 1 < 0x80000000u ? m + 1 : m)});
    }
    for (int j = 0; j < 64; ++j) rs.push_back(uint32_t(next() >> 33));
    for (uint32_t r : rs)
      if (udiv(r, md) != r / uint32_t(d) && wrong++ < 10) ADD_FAILURE() << r << " / " << d << " gave " << udiv(r, md);
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_THROW(codegen::cuda_divisor_magic(0), Error);
  EXPECT_THROW(codegen::cuda_divisor_magic(int64_t(1) << 31), Error);
}

}  // namespace
