// compile_cuda: kernel programs compiled for a GPU and run over device buffers, on kiln's
// emulated CUDA driver (tests/emulation) in CI and on a real GPU with KILN_TEST_REAL_CUDA=1.
//
// Every graph of every workload runs with its inputs copied to the device; its outputs come
// back and are compared with the reference executor on the host (fresh device memory reads as
// NaN or -1 on the emulator, so an element no kernel wrote is caught). The inputs are compared
// too (in-place writes). Library ops run on the device (test_cuda_library.cpp), their epilogues too.
#include <gtest/gtest.h>
#include <kiln/codegen/cuda.h>
#include <kiln/ir/exec.h>
#include <kiln/kiln.h>
#include <kiln/passes/kernel.h>
#include <kiln/passes/pass.h>
#include <kiln/runtime/cuda.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../common/close.h"
#include "../common/random_graphs.h"
#include "../emulation/emulated_driver.h"
#include "../passes/check_program.h"
#include "cuda_util.h"
#include "traced.h"

using namespace kiln;

namespace {

struct Compiled {
  std::shared_ptr<exec::CompiledProgram> program;
  ir::Graph graph{"g"};
};

Compiled compile_graph(ir::Graph g, codegen::CudaCompileOptions opts = {}) {
  Compiled c;
  passes::Module m = passes::optimize(g, {});
  std::vector<ir::Type> types;
  for (const ir::Value* v : g.inputs()) {
    types.push_back(v->type);
    if (!types.back().is_scalar()) types.back().device = Device::cuda();
  }
  c.program = codegen::compile_cuda(std::shared_ptr<const passes::KernelProgram>(std::move(m.program)), types,
                                    Device::cuda(), opts);
  c.graph = std::move(g);
  return c;
}

// Runs `c` on the device and the reference executor on the same random inputs; compares
// outputs and inputs afterwards.
void expect_matches(const std::string& name, const Compiled& c, uint64_t seed) {
  kiln::testing::expect_run_matches(
      c.graph,
      [&](std::vector<ir::Slot>& in) {
        std::vector<ir::Slot> in_dev = kiln::testing::to_device(in);
        std::vector<Tensor> got = c.program->run(in_dev);
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_TRUE(got[i].is_cuda()) << name << ": output " << i << " is on " << got[i].device().str();
          got[i] = got[i].to(Device::cpu());
        }
        for (size_t i = 0; i < in.size(); ++i)
          if (!in[i].is_scalar) in[i].tensor.copy_(in_dev[i].tensor);  // (what the program wrote)
        return got;
      },
      seed, name, [&] { return passes::print(c.program->program()); });
}

TEST(CudaCompile, EveryWorkloadMatchesTheReferenceExecutor) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  int epilogues = 0, compiled = 0, kernels = 0;
  for (auto& [name, g] : kiln::testing::workload_graphs()) {
    Compiled c = compile_graph(std::move(g));
    const exec::CompileStats& st = c.program->stats();
    epilogues += st.epilogues;
    compiled += st.compiled;
    kernels += st.kernels;
    // Only library ops and conds are left to the host.
    for (const std::string& why : st.interpreted)
      EXPECT_TRUE(kiln::testing::interpreted_by_design(why)) << name << ": " << why;
    for (uint64_t seed : {1, 2}) expect_matches(name, c, seed);
  }
  EXPECT_GT(epilogues, 0) << "no matmul epilogue ran on the device";
  EXPECT_GT(compiled, kernels / 2);
}

ir::Graph traced_one(const kiln::testing::Fn& fn, std::vector<Tensor> in) {
  return std::move(kiln::testing::trace(fn, {in})[0]);
}

TEST(CudaCompile, OutputsAreDeviceTensorsAndTheHostWaitsOnlyForThem) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor a = randn({257, 33}), b = randn({33});
  Compiled c = compile_graph(traced_one([](const std::vector<Tensor>& v) { return std::vector{(v[0] + v[1]).exp().sum(1)}; },
                                        {a, b}));
  EXPECT_EQ(c.program->device(), Device::cuda());
  EXPECT_TRUE(c.program->stats().interpreted.empty());
  Tensor da = a.to(Device::cuda()), db = b.to(Device::cuda());
  std::vector<Tensor> out = c.program->run(std::vector<Tensor>{da, db});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].is_cuda());
  EXPECT_TRUE(kiln::testing::close(out[0].to(Device::cpu()), (a + b).exp().sum(1)));
  // Host tensors are refused, naming the device the program runs on.
  std::vector<Tensor> host_in{a, b};
  EXPECT_FALSE(c.program->try_run(std::vector<ir::Slot>{ir::Slot{a, Scalar(), false}, ir::Slot{b, Scalar(), false}}).has_value());
  try {
    c.program->run(host_in);
    ADD_FAILURE() << "ran on host inputs";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

TEST(CudaCompile, ASecondCompileLoadsNoModuleAgain) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor a = randn({100});
  auto fn = [](const std::vector<Tensor>& v) { return std::vector{v[0].sin() * 3.0 + 1.0}; };
  Compiled first = compile_graph(traced_one(fn, {a}));
  Compiled second = compile_graph(traced_one(fn, {a}));
  EXPECT_EQ(second.program->stats().compiled, 1);
  EXPECT_EQ(second.program->stats().memory_hits, 1);
  expect_matches("sin", second, 5);
}

TEST(CudaCompile, IntegerDivisionByZeroRaisesEagersError) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor a = randint(-9, 10, {64}, kInt64), b = randint(1, 10, {64}, kInt64);
  auto fn = [](const std::vector<Tensor>& v) { return std::vector{div(v[0], v[1], "floor") + 1}; };
  Compiled c = compile_graph(traced_one(fn, {a, b}));
  Tensor zero = b.clone();
  zero.narrow(0, 17, 1).fill_(0);  // (a single zero divisor)
  std::string eager_error;
  try {
    fn({a, zero});
  } catch (const Error& e) {
    eager_error = e.what();
  }
  ASSERT_FALSE(eager_error.empty());
  try {
    c.program->run(std::vector<Tensor>{a.to(Device::cuda()), zero.to(Device::cuda())});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), eager_error);
  }
  // Good divisors run clean afterwards.
  std::vector<Tensor> out = c.program->run(std::vector<Tensor>{a.to(Device::cuda()), b.to(Device::cuda())});
  EXPECT_TRUE(kiln::testing::close(out[0].to(Device::cpu()), fn({a, b})[0]));
}

// WarpRow's unrolled passes run their bodies past the row's end under a mask (render_rows.cpp,
// row_loop): an integer division there divides by the zero its masked load gives, which must
// raise nothing. Rows of 100 (the specialised kernel's last copy is partial) and the
// size-generic kernel (every copy masked), the quotient computed in two passes over a cached
// row.
TEST(CudaCompile, ChecksPastTheRowsEndRaiseNothing) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor a = randint(-50, 50, {6, 100}, kInt64), b = randint(1, 10, {6, 100}, kInt64);
  auto fn = [](const std::vector<Tensor>& v) {
    Tensor q = div(v[0], v[1], "floor");
    return std::vector{q - q.amax({1}, true)};
  };
  for (bool generic : {false, true}) {
    SCOPED_TRACE(generic ? "size-generic" : "specialised");
    bool masked = false;  // (the check is in a masked warp-per-row pass)
    passes::Module m = passes::optimize(traced_one(fn, {a, b}), {});
    for (const codegen::CudaRender& r : codegen::render_cuda(*m.program, "k", generic))
      masked |= r.kernel && r.kernel->strategy == codegen::CudaStrategy::WarpRow &&
                r.kernel->body.find("kflags |= (unsigned long long)(live && ") != std::string::npos;
    ASSERT_TRUE(masked);
    Compiled c = compile_graph(traced_one(fn, {a, b}), {.generic = generic});
    std::vector<Tensor> out = c.program->run(std::vector<Tensor>{a.to(Device::cuda()), b.to(Device::cuda())});
    EXPECT_TRUE(kiln::testing::close(out[0].to(Device::cpu()), fn({a, b})[0]));
  }
}

// Broadcast operands in elementwise kernels: a bias over rows and a column over columns are read
// per run of the innermost loop, a vector at a time, when the runs hold whole vectors; other
// layouts keep the scalar loop. Every layout must give eager's values (test_cuda_render.cpp
// checks which ones get vector accesses).
TEST(CudaCompile, BroadcastOperandsInEveryLayoutMatch) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  using V = std::vector<Tensor>;
  struct Case {
    const char* name;
    kiln::testing::Fn fn;
    V in;
  };
  auto add2 = [](const V& v) { return V{v[0] + v[1]}; };
  std::vector<Case> cases = {
      {"bias over rows", add2, {randn({64, 128}), randn({128})}},
      {"column over columns", add2, {randn({64, 128}), randn({64, 1})}},
      {"3-d: a run and a column", [](const V& v) { return V{v[0] * v[1] + v[2]}; }, {randn({8, 16, 32}), randn({16, 1}), randn({32})}},
      {"rows of 130: two per vector", add2, {randn({64, 130}), randn({130})}},
      {"rows of 131: no whole vectors", add2, {randn({64, 131}), randn({131})}},
      {"a narrowed matrix, rows 134 apart", [](const V& v) { return V{v[0].narrow(1, 0, 128) - v[1]}; },
       {randn({64, 134}), randn({128})}},
      {"a bias read every other element", [](const V& v) { return V{v[0] + v[1].slice(0, 0, 256, 2)}; },
       {randn({64, 128}), randn({256})}},
      {"float16", add2, {randn({32, 64}).to(kFloat16), randn({64}).to(kFloat16)}},
      {"float64", [](const V& v) { return V{(v[0] * v[1]).exp()}; }, {randn({64, 32}).to(kFloat64), randn({32}).to(kFloat64)}},
      {"two outputs", [](const V& v) { Tensor t = v[0] + v[1]; return V{t, t * v[2]}; },
       {randn({48, 64}), randn({64}), randn({48, 1})}},
      {"in place", [](const V& v) { Tensor m = v[0].clone(); m.add_(v[1]); return V{m}; }, {randn({32, 96}), randn({96})}},
      {"a tail past the vectors", add2, {randn({3, 5, 12}), randn({5, 12})}},
  };
  uint64_t seed = 40;
  for (Case& c : cases) {
    Compiled k = compile_graph(traced_one(c.fn, c.in));
    EXPECT_TRUE(k.program->stats().interpreted.empty()) << c.name;
    expect_matches(c.name, k, ++seed);
  }
}

// A 0-d tensor reduced along dim 0 or -1 (PyTorch takes either for its one element) runs on
// the device: the kernel's lowering took those dims for loops a 0-d kernel does not have and
// left it to the host (seen as a warning in the conformance run on an H100).
TEST(CudaCompile, ReductionsOfA0dTensorAlongItsDimRunOnTheDevice) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  using V = std::vector<Tensor>;
  std::vector<std::pair<const char*, kiln::testing::Fn>> cases = {
      {"argmax(x, 0)", [](const V& v) { return V{v[0].argmax(0)}; }},
      {"argmin(x, -1, keepdim)", [](const V& v) { return V{v[0].argmin(-1, true)}; }},
      {"max(x, 0)", [](const V& v) { auto [m, i] = v[0].max(0); return V{m, i}; }},
      {"sum(x, {0})", [](const V& v) { return V{v[0].sum({0})}; }},
      {"amax(x, {-1}) * 2", [](const V& v) { return V{v[0].amax({-1}) * 2}; }},
  };
  uint64_t seed = 70;
  for (auto& [name, fn] : cases) {
    Compiled k = compile_graph(traced_one(fn, {randn({})}));
    EXPECT_TRUE(k.program->stats().interpreted.empty())
        << name << ": " << (k.program->stats().interpreted.empty() ? "" : k.program->stats().interpreted[0]);
    expect_matches(name, k, ++seed);
  }
}

// maximum, minimum, amax and amin in a kernel: a NaN operand wins, and -0 orders below +0
// (the CPU backend's llvm.maximum/minimum), bit for bit: the prelude's select form against
// IEEE 754-2019's maximum and minimum written out here. Rows of 40 (a warp per row, the
// reduction a chain of selects in each lane) and of 3000 (a block per row).
TEST(CudaCompile, MaxAndMinPropagateNaNsAndOrderSignedZeros) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> pool = {-0.0, 0.0, 1.0, -1.0, inf, -inf, nan, 0.0, -0.0, 2.5};
  auto ieee = [](double a, double b, bool max) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
    if (a == b) return (std::signbit(a) == max) ? b : a;  // (of two zeros: +0 for max, -0 for min)
    return (a > b) == max ? a : b;
  };
  auto same = [](double got, double want) {
    return std::isnan(want) ? std::isnan(got) : got == want && std::signbit(got) == std::signbit(want);
  };
  for (DType dt : {kFloat32, kFloat64}) {
    for (int64_t len : {40, 3000}) {
      SCOPED_TRACE(std::string(name(dt)) + ", rows of " + std::to_string(len));
      const int64_t rows = 7;
      std::vector<double> a(size_t(rows * len)), b(a.size());
      for (size_t i = 0; i < a.size(); ++i) {
        const size_t r = i / size_t(len);
        // row 0: every pair of the pool; rows 1-6 hold no NaN except row 5 (one, late); rows 2
        // and 3 top out at a zero of either sign, row 4 bottoms out at one
        a[i] = pool[i % pool.size()];
        b[i] = pool[(i / pool.size() + 3 * i) % pool.size()];
        if (r >= 1 && std::isnan(a[i])) a[i] = -3.0;
        if (r == 2 || r == 3) a[i] = std::min(a[i], 0.0) == 0.0 ? (((i + r) % 2) ? -0.0 : 0.0) : -std::abs(a[i]);
        if (r == 4) a[i] = std::max(a[i], 0.0) == 0.0 ? ((i % 2) ? -0.0 : 0.0) : std::abs(a[i]);
        if (r == 5 && i % size_t(len) == size_t(len) - 2) a[i] = nan;
      }
      auto fn = [](const std::vector<Tensor>& v) {
        return std::vector{maximum(v[0], v[1]), minimum(v[0], v[1]), v[0].amax({1}), v[0].amin({1})};
      };
      Tensor ta = from_vector(a, {rows, len}).to(dt), tb = from_vector(b, {rows, len}).to(dt);
      Compiled c = compile_graph(traced_one(fn, {ta, tb}));
      std::vector<ir::Slot> in(2);
      in[0].tensor = ta;
      in[1].tensor = tb;
      std::vector<Tensor> got = c.program->run(kiln::testing::to_device(in));
      ASSERT_EQ(got.size(), 4u);
      std::vector<std::vector<double>> out;
      for (Tensor& t : got) {
        Tensor h = t.to(Device::cpu()).to(kFloat64).contiguous();
        out.emplace_back(h.data_ptr<double>(), h.data_ptr<double>() + h.numel());
      }
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_TRUE(same(out[0][i], ieee(a[i], b[i], true))) << "maximum(" << a[i] << ", " << b[i] << ") gave " << out[0][i];
        ASSERT_TRUE(same(out[1][i], ieee(a[i], b[i], false))) << "minimum(" << a[i] << ", " << b[i] << ") gave " << out[1][i];
      }
      for (int64_t r = 0; r < rows; ++r) {
        double hi = a[size_t(r * len)], lo = hi;
        for (int64_t e = 1; e < len; ++e) hi = ieee(hi, a[size_t(r * len + e)], true), lo = ieee(lo, a[size_t(r * len + e)], false);
        EXPECT_TRUE(same(out[2][size_t(r)], hi)) << "amax of row " << r << " gave " << out[2][size_t(r)] << ", not " << hi;
        EXPECT_TRUE(same(out[3][size_t(r)], lo)) << "amin of row " << r << " gave " << out[3][size_t(r)] << ", not " << lo;
      }
    }
  }
}

// A cumsum both reduced (amin of 2 - cumsum) and stored: two passes over the row run the scan,
// each from its start, in one scope (the second pass declared it again and the kernel did not
// compile; found by the random graphs, seed 205).
TEST(CudaCompile, AScanInTwoPassesOfARow) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  auto fn = [](const std::vector<Tensor>& v) {
    Tensor c = v[0].cumsum(1);
    return std::vector{c, (2.0 - c).amin({1}, true) + c};
  };
  Compiled c = compile_graph(traced_one(fn, {randn({5, 6})}));
  EXPECT_TRUE(c.program->stats().interpreted.empty());
  expect_matches("cumsum twice", c, 11);
}

TEST(CudaCompile, TemporariesAndScratchGoBackToThePool) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor a = randn({300, 70}), t = randn({3000, 70});
  // A softmax (row-wise), a split full reduction, a column-split one and temporaries in between.
  auto fn = [](const std::vector<Tensor>& v) {
    return std::vector{softmax(v[0] * 2, 1).sum() + (v[0] - 1).abs().amax(), v[1].sum({0}) * 2};
  };
  Compiled c = compile_graph(traced_one(fn, {a, t}));
  Tensor da = a.to(Device::cuda()), dt = t.to(Device::cuda());
  c.program->run(std::vector<Tensor>{da, dt});  // (first run: the sink word of unchecked kernels)
  cuda::synchronize();
  size_t before = cuda::memory_allocated();
  {
    std::vector<Tensor> out = c.program->run(std::vector<Tensor>{da, dt});
    for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(kiln::testing::close(out[i].to(Device::cpu()), fn({a, t})[i])) << i;
  }
  cuda::synchronize();
  EXPECT_EQ(cuda::memory_allocated(), before);
}

// ---- CUDA graphs ----

TEST(CudaGraphs, EveryWorkloadReplaysAndMatches) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  int replayed = 0;
  for (auto& [name, g] : kiln::testing::workload_graphs()) {
    Compiled c = compile_graph(std::move(g), {.graphs = true});
    const std::string& note = c.program->stats().graphs;
    ASSERT_FALSE(note.empty()) << name;
    replayed += note == "replayed as a CUDA graph";
    if (note != "replayed as a CUDA graph") {  // (only host work keeps a program off a graph)
      EXPECT_NE(note.find("on the host"), std::string::npos) << name << ": " << note;
    }
    for (uint64_t seed : {3, 4, 5}) expect_matches(name, c, seed);  // capture, then two replays
  }
  EXPECT_GT(replayed, 10);
}

TEST(CudaGraphs, AReplayNeverOverwritesAnEarlierOutput) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  // A split full reduction and a column-split one (their slots stay put too) and an
  // elementwise output.
  auto fn = [](const std::vector<Tensor>& v) { return std::vector{(v[0] * 2).sum(), v[0].exp(), v[1].sum({0})}; };
  Tensor a = randn({70000}), b = randn({70000}), ta = randn({3000, 70}), tb = randn({3000, 70});
  Compiled c = compile_graph(traced_one(fn, {a, ta}), {.graphs = true});
  ASSERT_EQ(c.program->stats().graphs, "replayed as a CUDA graph");
  std::vector<Tensor> first = c.program->run(std::vector<Tensor>{a.to(Device::cuda()), ta.to(Device::cuda())});
  std::vector<Tensor> second = c.program->run(std::vector<Tensor>{b.to(Device::cuda()), tb.to(Device::cuda())});
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(kiln::testing::close(first[i].to(Device::cpu()), fn({a, ta})[i])) << "output " << i << " of the first call";
    EXPECT_TRUE(kiln::testing::close(second[i].to(Device::cpu()), fn({b, tb})[i])) << "output " << i << " of the second call";
  }
  EXPECT_NE(first[1].storage(), second[1].storage());
}

// A replay hands out the output buffers it wrote when no one holds them any more: `y = f(x)`
// with y dropped before the next call allocates and copies nothing. The same input tensor
// again is read where it is: the second call captures the program bound to its address, and
// from then on a call copies no input either.
TEST(CudaGraphs, OutputsNoOneHoldsAreHandedOutWithoutACopy) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  auto fn = [](const std::vector<Tensor>& v) { return std::vector{v[0].exp() * 2, (v[0] + 1).sum({1})}; };
  Tensor a = randn({300, 40});
  Compiled c = compile_graph(traced_one(fn, {a}), {.graphs = true});
  ASSERT_EQ(c.program->stats().graphs, "replayed as a CUDA graph");
  const std::vector<Tensor> in{a.to(Device::cuda())};
  c.program->run(in);  // (runs, then captures over fixed inputs)
  c.program->run(in);  // (the same address again: captures bound to it)
  std::vector<const void*> seen;
  for (int call = 0; call < 3; ++call) {
    cuda::synchronize();
    const size_t before = cuda::memory_allocated(), copied = cuda::host_transfers().on_device;
    std::vector<Tensor> got = c.program->run(in);
    EXPECT_EQ(cuda::memory_allocated(), before) << "call " << call << " allocated its outputs";
    EXPECT_EQ(cuda::host_transfers().on_device, copied) << "call " << call << " copied its input";
    for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(kiln::testing::close(got[i].to(Device::cpu()), fn({a})[i])) << "output " << i;
    seen.push_back(got[0].storage()->data());
  }  // (each call's outputs are dropped before the next)
  EXPECT_EQ(seen[0], seen[1]);
  EXPECT_EQ(seen[1], seen[2]);
}

// Outputs a caller still holds are never written again: `x = f(x)` settles on two captures
// bound to each other's outputs, taking turns with no copies, and a caller keeping every output
// gets copies once every capture's outputs are held.
TEST(CudaGraphs, OutputsACallerHoldsAreNeverWrittenAgain) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  auto step = [](const std::vector<Tensor>& v) { return std::vector{(v[0] * 0.5 + v[1]).tanh()}; };
  Tensor x0 = randn({1000}), w = randn({1000});
  Compiled c = compile_graph(traced_one(step, {x0, w}), {.graphs = true});
  ASSERT_EQ(c.program->stats().graphs, "replayed as a CUDA graph");
  Tensor want = x0, got = x0.to(Device::cuda());
  const Tensor wd = w.to(Device::cuda());
  std::vector<const void*> storages;
  std::vector<size_t> copied;
  for (int i = 0; i < 10; ++i) {
    want = step({want, w})[0];
    got = c.program->run(std::vector<Tensor>{got, wd})[0];
    storages.push_back(got.storage()->data());
    copied.push_back(cuda::host_transfers().on_device);
    EXPECT_TRUE(kiln::testing::close(got.to(Device::cpu()), want)) << "step " << i;
  }
  // (the first call's output is its own, the second's a capture's over fixed inputs; then two
  // bound captures take turns, neither copying)
  for (int i = 4; i + 2 < 10; ++i) EXPECT_EQ(storages[size_t(i)], storages[size_t(i) + 2]) << "step " << i;
  EXPECT_NE(storages[4], storages[5]);
  EXPECT_EQ(copied[9], copied[4]) << "the bound captures copied inputs";

  std::vector<Tensor> inputs, kept;
  for (int i = 0; i < 6; ++i) {
    inputs.push_back(randn({1000}));
    kept.push_back(c.program->run(std::vector<Tensor>{inputs.back().to(Device::cuda()), wd})[0]);
  }
  for (int i = 0; i < 6; ++i)
    EXPECT_TRUE(kiln::testing::close(kept[size_t(i)].to(Device::cpu()), step({inputs[size_t(i)], w})[0])) << "kept " << i;
  for (int i = 0; i < 6; ++i)
    for (int j = i + 1; j < 6; ++j) EXPECT_NE(kept[size_t(i)].storage()->data(), kept[size_t(j)].storage()->data());
}

// Captures bound to a caller's inputs read them where they are and write in-place updates into
// them directly (x.mul_(2) on an input), with every input at a new address, at addresses seen
// before and at moving ones: the results are eager's every time. A caller cycling through more
// address sets than there are bound captures stops binding after a few recaptures and copies.
TEST(CudaGraphs, CapturesBoundToTheCallersInputsMatchEager) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  auto fn = [](const std::vector<Tensor>& v) {
    Tensor x = v[0];
    x.mul_(2);
    return std::vector{(x + v[1]).sum({1}), x.exp()};
  };
  Tensor a = randn({64, 33}), b = randn({64, 33});
  Compiled c = compile_graph(traced_one(fn, {a.clone(), b}), {.graphs = true});
  ASSERT_EQ(c.program->stats().graphs, "replayed as a CUDA graph");
  std::vector<Tensor> xs, ys;
  for (int k = 0; k < 5; ++k) xs.push_back(randn({64, 33})), ys.push_back(randn({64, 33}));
  std::vector<Tensor> xd, yd;
  for (int k = 0; k < 5; ++k) xd.push_back(xs[size_t(k)].to(Device::cuda())), yd.push_back(ys[size_t(k)].to(Device::cuda()));
  // which input set each call takes: a repeated one (bound from the second call), a second one,
  // then a cycle of three more than the two bound captures hold, which recaptures until binding
  // stops and every call copies its inputs
  std::vector<int> order{0, 0, 0, 1, 1, 0, 1};
  for (int r = 0; r < 8; ++r)
    for (int k : {2, 3, 4}) order.push_back(k);
  std::vector<size_t> copied;
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t k = size_t(order[i]);
    std::vector<Tensor> want_in{xs[k].clone(), ys[k]};
    std::vector<Tensor> want = fn(want_in);
    const size_t before = cuda::host_transfers().on_device;
    std::vector<Tensor> got = c.program->run(std::vector<Tensor>{xd[k], yd[k]});
    copied.push_back(cuda::host_transfers().on_device - before);
    xs[k] = want_in[0];  // (the call doubled the input in place, on both sides)
    for (size_t j = 0; j < 2; ++j)
      EXPECT_TRUE(kiln::testing::close(got[j].to(Device::cpu()), want[j])) << "call " << i << " output " << j;
    EXPECT_TRUE(kiln::testing::close(xd[k].to(Device::cpu()), xs[k])) << "call " << i << ": the input written in place";
  }
  for (size_t i : {2, 4, 5, 6}) EXPECT_EQ(copied[i], 0u) << "call " << i << " replays a bound capture";
  EXPECT_GT(copied[3], 0u) << "a new address set is copied";
  for (size_t i = order.size() - 3; i < order.size(); ++i) EXPECT_GT(copied[i], 0u) << "call " << i << ": binding stopped";
}

// cuBLAS calls are captured with the program's kernels; what they allocate (the product, a copy
// of an operand cuBLAS cannot read in place) is graph memory, freed within each replay: replays
// over inputs at new addresses (copied into the capture's), and replays of a capture bound to
// inputs called with again, keep no memory. (The first call with the same inputs again
// captures one bound to them, whose output buffers are its own; on a GPU, an input freed and
// allocated again by the next call is often at the same address, so the inputs here stay
// allocated until the end.)
TEST(CudaGraphs, ProductsAreCapturedWithTheirTemporariesAsGraphMemory) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor a = randn({8, 60}), w = randn({16, 4}), b = randn({4});
  auto fn = [](const std::vector<Tensor>& v) {
    Tensor x = v[0].as_strided({8, 16}, {60, 3});  // (no BLAS layout: copied inside the capture)
    return std::vector{(matmul(x, v[1]) + v[2]).relu(), matmul(v[0].narrow(1, 0, 16), v[1]),
                       addmm(v[2], v[0].narrow(1, 0, 16), v[1], 0.5, 2.0)};  // (its bias: a device copy)
  };
  Compiled c = compile_graph(traced_one(fn, {a, w, b}), {.graphs = true});
  ASSERT_EQ(c.program->stats().graphs, "replayed as a CUDA graph");
  ASSERT_FALSE(c.program->stats().library.empty());
  std::vector<std::vector<Tensor>> host, dev;
  for (int k = 0; k < 4; ++k) {
    host.push_back({randn({8, 60}), randn({16, 4}), randn({4})});
    dev.push_back({});
    for (const Tensor& t : host.back()) dev.back().push_back(t.to(Device::cuda()));
  }
  auto expect_call = [&](size_t k, const char* what) {
    std::vector<Tensor> got = c.program->run(dev[k]), want = fn(host[k]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(kiln::testing::close(got[i].to(Device::cpu()), want[i])) << what << ", input set " << k << ", output " << i;
  };
  expect_call(0, "the first call");
  expect_call(1, "the capture");
  size_t before = cuda::memory_allocated();
  for (size_t k : {2, 3}) expect_call(k, "a replay over copied inputs");
  EXPECT_EQ(cuda::memory_allocated(), before) << "a replay over copied inputs kept memory";
  expect_call(3, "a bound capture");
  before = cuda::memory_allocated();
  for (int r = 0; r < 3; ++r) {
    const size_t copied = cuda::host_transfers().on_device;
    expect_call(3, "a bound replay");
    EXPECT_EQ(cuda::host_transfers().on_device, copied) << "a bound replay copies no input";
  }
  EXPECT_EQ(cuda::memory_allocated(), before) << "a bound replay kept memory";
}

TEST(CudaGraphs, ProgramsWithHostWorkRunWithoutAGraph) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor a = randint(-9, 10, {8, 16}, kInt32), w = randint(-9, 10, {16, 4}, kInt32);
  Compiled c = compile_graph(traced_one([](const std::vector<Tensor>& v) { return std::vector{matmul(v[0], v[1]).relu()}; },
                                        {a, w}),
                             {.graphs = true});
  EXPECT_EQ(c.program->stats().graphs, "no CUDA graph: an integer product runs on the host");
  expect_matches("matmul_relu", c, 6);
  Tensor n = randint(-9, 10, {64}, kInt64), d = randint(1, 10, {64}, kInt64);
  Compiled q = compile_graph(traced_one([](const std::vector<Tensor>& v) { return std::vector{div(v[0], v[1], "floor")}; },
                                        {n, d}),
                             {.graphs = true});
  EXPECT_NE(q.program->stats().graphs.find("division by zero"), std::string::npos) << q.program->stats().graphs;
}

// The property tests' random graphs (tests/common/random_graphs.h: dtype mixes, views and
// gapped layouts, reductions keepdim or not, softmax, normalisations, matmul epilogues, in-place
// writes through views), each compiled with specialised kernels, with size-generic ones, and
// replayed as a CUDA graph (the specialised kernels again: nothing new to compile).
void expect_random_graphs_match(const std::vector<kiln::testing::property::Case>& cases) {
  int kernels = 0, compiled = 0;
  for (const kiln::testing::property::Case& c : cases) {
    ASSERT_TRUE(c.error.empty()) << "seed " << c.seed << ": the generator's program does not trace: " << c.error;
    SCOPED_TRACE(kiln::testing::property::header(c));
    for (int mode = 0; mode < 3; ++mode) {
      const std::string what = mode == 0 ? "specialised kernels" : mode == 1 ? "size-generic kernels" : "a CUDA graph";
      Compiled cp;
      try {
        cp = compile_graph(passes::clone(c.graph), {.graphs = mode == 2, .generic = mode == 1});
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": the compile threw: " << e.what();
        continue;
      }
      kernels += cp.program->stats().kernels;
      compiled += cp.program->stats().compiled;
      for (const std::string& why : cp.program->stats().interpreted)
        EXPECT_TRUE(kiln::testing::interpreted_by_design(why)) << what << ": " << why << "\n"
                                                               << passes::print(cp.program->program());
      expect_matches(what, cp, c.seed + uint64_t(mode) * 5000);
      if (mode == 2) expect_matches(what + ", replayed", cp, c.seed + 15000);  // (the first run captures)
    }
  }
  EXPECT_GT(compiled, kernels / 2);
}

// Seeds 1..25 (each kernel is compiled by the host compiler on the emulator);
// KILN_PROPERTY_GRAPHS=N for 1..N (scripts/gpu.sh runs more on a GPU), KILN_PROPERTY_SEED=S for
// seed S alone.
TEST(CudaCompile, RandomGraphsMatchTheReferenceExecutor) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  expect_random_graphs_match(kiln::testing::property::cases(25));
}

// Shapes up to 300 per dim and 40000 elements: vector loads, tiles, row caches, warp and block
// rows. Seeds 1..6 here.
TEST(CudaCompile, RandomGraphsWithLargerShapesMatchTheReferenceExecutor) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  expect_random_graphs_match(kiln::testing::property::cases(6, kiln::testing::property::kLargeShapes));
}

TEST(CudaCompile, RefusesAHostDevice) {
  Tensor a = randn({4});
  ir::Graph g = traced_one([](const std::vector<Tensor>& v) { return std::vector{v[0] + 1}; }, {a});
  passes::Module m = passes::optimize(g, {});
  try {
    codegen::compile_cuda(std::shared_ptr<const passes::KernelProgram>(std::move(m.program)), {g.inputs()[0]->type},
                          Device::cpu());
    ADD_FAILURE() << "compiled for the cpu";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be a GPU"), std::string::npos) << e.what();
  }
}

}  // namespace
