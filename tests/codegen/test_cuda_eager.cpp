// Eager ops on GPU tensors (single-op programs of the CUDA backend) and kiln::compile with GPU
// inputs, on kiln's emulated CUDA driver in CI (tests/emulation) and on a real GPU with
// KILN_TEST_REAL_CUDA=1. Everything is compared with kiln's CPU eager ops on the same values.
#include <gtest/gtest.h>
#include <kiln/codegen/cuda.h>
#include <kiln/ir/graph.h>
#include <kiln/kiln.h>
#include <kiln/passes/pass.h>
#include <kiln/runtime/cuda.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "../common/close.h"
#include "../common/scoped_env.h"
#include "../common/random_programs.h"
#include "../emulation/emulated_driver.h"
#include "cuda_util.h"
#include "workloads.h"

using namespace kiln;
namespace wl = kiln::workloads;

namespace {

using kiln::testing::cpu;
using kiln::testing::error_of;
using kiln::testing::kGpu;
using EagerCase = kiln::testing::DeviceCase;

Tensor values(DType dt, std::vector<int64_t> sizes) {
  if (is_floating(dt)) return (randn(sizes) * 3).to(dt);
  if (dt == kBool) return randint(0, 2, sizes).to(kBool);
  return randint(dt == kUInt8 ? 0 : -9, 10, sizes).to(dt);
}

TEST(CudaEager, OpsOnGpuTensorsMatchTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(11);
  std::vector<EagerCase> cases;
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8}) {
    std::string d(name(dt));
    bool fl = is_floating(dt);
    cases.push_back({"add " + d, [](auto& v) { return v[0] + v[1]; }, {values(dt, {37, 5}), values(dt, {5})}});
    cases.push_back({"mul_number " + d, [](auto& v) { return v[0] * 3; }, {values(dt, {100})}});
    cases.push_back({"sum_rows " + d, [](auto& v) { return v[0].sum(1); }, {values(dt, {9, 70})}});
    cases.push_back({"amax_all " + d, [](auto& v) { return v[0].amax(); }, {values(dt, {333})}});
    cases.push_back({"compare " + d, [](auto& v) { return v[0].gt(v[1]); }, {values(dt, {64}), values(dt, {64})}});
    cases.push_back({"transposed_clone " + d, [](auto& v) { return v[0].t().contiguous(); }, {values(dt, {13, 7})}});
    cases.push_back({"cast " + d, [](auto& v) { return v[0].to(kFloat32) + 0.5; }, {values(dt, {50})}});
    if (fl) {
      cases.push_back({"exp " + d, [](auto& v) { return v[0].exp(); }, {values(dt, {1000})}});
      cases.push_back({"softmax " + d, [](auto& v) { return softmax(v[0], 1); }, {values(dt, {6, 300})}});
      cases.push_back({"where " + d, [](auto& v) { return where(v[0].gt(0), v[0], v[1]); }, {values(dt, {77}), values(dt, {77})}});
    }
  }
  cases.push_back({"matmul (cuBLAS)", [](auto& v) { return matmul(v[0], v[1]); },
                   {values(kFloat32, {8, 16}), values(kFloat32, {16, 4})}});
  cases.push_back({"cat (a list op)", [](auto& v) { return cat({v[0], v[1]}, 0); }, {values(kFloat32, {3, 4}), values(kFloat32, {2, 4})}});
  for (const EagerCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> dev;
    for (const Tensor& t : c.inputs) dev.push_back(t.to(kGpu));
    Tensor want = c.fn(c.inputs);
    Tensor got;
    try {
      got = c.fn(dev);
    } catch (const Error& e) {
      ADD_FAILURE() << c.name << ": " << e.what();
      continue;
    }
    EXPECT_TRUE(got.is_cuda()) << c.name;
    EXPECT_EQ(got.dtype(), want.dtype()) << c.name;
    EXPECT_TRUE(kiln::testing::close(cpu(got), want)) << c.name;
  }
}

TEST(CudaEager, InPlaceOpsWriteTheDeviceTensor) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor a = randn({40, 3}), b = randn({3});
  Tensor da = a.to(kGpu), db = b.to(kGpu);
  Tensor alias = da;  // (the same tensor: in-place ops write its memory)
  da.add_(db).mul_(2).relu_();
  a.add_(b).mul_(2).relu_();
  EXPECT_TRUE(kiln::testing::close(cpu(alias), a));
  // A strided destination: the transpose's elements are written in place.
  Tensor x = randn({5, 6}), dx = x.to(kGpu);
  dx.t().add_(1.5);
  x.t().add_(1.5);
  EXPECT_TRUE(kiln::testing::close(cpu(dx), x));
  // Fill and copy between devices.
  Tensor z = zeros({4, 4}, TensorOptions(kInt32).device(kGpu));
  EXPECT_TRUE(z.is_cuda());
  z.narrow(0, 1, 2).fill_(7);
  EXPECT_EQ(cpu(z).sum().item<int64_t>(), 56);
  z.copy_(arange(16).reshape({4, 4}));
  EXPECT_EQ(cpu(z).to_vector<int32_t>()[15], 15);
  EXPECT_EQ(z.sum().item<int64_t>(), 120);  // (item() of a device result)
  // A fill through an expanded view writes the one location each stride-0 dim names, as on
  // the CPU (a copy_ into such a view is refused; a fill of one value is not).
  Tensor base = zeros({3}, TensorOptions().device(kGpu));
  base.expand({4, 3}).fill_(7);
  EXPECT_EQ(cpu(base).to_vector<float>(), (std::vector<float>{7, 7, 7}));
  Tensor col = zeros({4, 1}, TensorOptions().device(kGpu));
  col.expand({4, 5}).zero_();
  col.expand({4, 5}).fill_(-2);
  EXPECT_EQ(cpu(col).to_vector<float>(), (std::vector<float>{-2, -2, -2, -2}));
}

// max and min with a dim take bool, which argmax and argmin refuse: on a GPU the indices
// come from the two-kernel path, and must match the CPU's.
TEST(CudaEager, MaxAndMinWithADimTakeBool) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor x = randn({5, 7}).gt(0.3);
  for (int64_t d : {0, 1}) {
    for (bool keep : {false, true}) {
      auto [v, i] = x.max(d, keep);
      auto [dv, di] = x.to(kGpu).max(d, keep);
      EXPECT_TRUE(kiln::testing::close(cpu(dv), v)) << "max dim " << d;
      EXPECT_TRUE(kiln::testing::close(cpu(di), i)) << "max dim " << d;
      auto [w, j] = x.min(d, keep);
      auto [dw, dj] = x.to(kGpu).min(d, keep);
      EXPECT_TRUE(kiln::testing::close(cpu(dw), w)) << "min dim " << d;
      EXPECT_TRUE(kiln::testing::close(cpu(dj), j)) << "min dim " << d;
    }
  }
  EXPECT_NE(error_of([&] { (void)x.to(kGpu).argmax(0); }).find("argmax"), std::string::npos);
}

// The ops whose output shape depends on the data read it on the host and hand back device
// tensors; operands on two devices get eager's device error; compiled, they are graph breaks
// whose replays run them the same way.
TEST(CudaEager, DataDependentOpsReadTheDataOnTheHost) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(5);
  Tensor x = randint(-3, 4, {6, 7}).to(kFloat32), mask = x > 0;
  Tensor t = x.t();  // a strided operand
  Tensor dx = x.to(kGpu), dmask = mask.to(kGpu), dt = dx.t();
  auto same = [](const Tensor& got, const Tensor& want) {
    EXPECT_TRUE(got.is_cuda());
    EXPECT_EQ(got.dtype(), want.dtype());
    EXPECT_TRUE(kiln::testing::close(cpu(got), want));
  };
  same(nonzero(dx), nonzero(x));
  same(nonzero(dt), nonzero(t));
  same(masked_select(dx, dmask), masked_select(x, mask));
  same(masked_select(dt, dmask.t()), masked_select(t, mask.t()));
  same(unique(dx), unique(x));
  auto [dv, di] = unique_inverse(dt);
  auto [v, i] = unique_inverse(t);
  same(dv, v);
  same(di, i);
  EXPECT_NE(error_of([&] { masked_select(dx, mask); }).find("same device"), std::string::npos)
      << error_of([&] { masked_select(dx, mask); });

  auto fn = [](const Tensor& a) {
    Tensor pos = masked_select(a, a > 0);  // a graph break: its size depends on the data
    return pos * 2 + pos.sum();
  };
  auto f = compile(fn);
  for (int round = 0; round < 3; ++round) {
    Tensor h = randn({50});
    Tensor got = f(h.to(kGpu));
    same(got, fn(h));
  }
  EXPECT_GE(f.stats().breaks, 1u);
}

// copy_ on one GPU between layouts or dtypes: one kernel of the backend (the write-back op),
// storing through the destination's strides and leaving the elements between untouched.
TEST(CudaEager, CopiesBetweenLayoutsAndDtypesRunOnTheDevice) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor src = randn({6, 4}), row = randn({4});
  Tensor whole = full({6, 8}, 5.0, kFloat16).to(kGpu);
  Tensor dst = whole.as_strided({6, 4}, {8, 2}, 1);  // every other column, from column 1
  size_t before = codegen::cuda_eager_programs();
  dst.copy_(src.to(kGpu));  // a cast and a strided store
  EXPECT_EQ(codegen::cuda_eager_programs(), before + 1) << "not one device kernel";
  Tensor want = full({6, 8}, 5.0, kFloat16);
  want.as_strided({6, 4}, {8, 2}, 1).copy_(src);
  EXPECT_TRUE(kiln::testing::close(cpu(whole), want));
  // A broadcast source and a transposed one.
  dst.copy_(row.to(kGpu));
  want.as_strided({6, 4}, {8, 2}, 1).copy_(row);
  EXPECT_TRUE(kiln::testing::close(cpu(whole), want));
  Tensor t = empty({4, 6}, TensorOptions(kFloat32).device(kGpu));
  t.copy_(src.to(kGpu).t());
  EXPECT_TRUE(kiln::testing::close(cpu(t), src.t().contiguous()));
  // Overlapping source and destination (through the host): x.copy_(x.t()) of a square matrix.
  Tensor sq = randn({5, 5}), dsq = sq.to(kGpu);
  dsq.copy_(dsq.t());
  EXPECT_TRUE(kiln::testing::close(cpu(dsq), sq.t().contiguous()));
}

TEST(CudaEager, ErrorsAreEagersOwn) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor a = randn({3, 4}), b = randn({5});
  // Shapes: the op is named with both shapes, as on the cpu.
  std::string err = error_of([&] { a.to(kGpu) + b.to(kGpu); });
  EXPECT_NE(err.find("[add]"), std::string::npos) << err;
  EXPECT_NE(err.find("[3, 4]"), std::string::npos) << err;
  EXPECT_NE(err.find("[5]"), std::string::npos) << err;
  // Devices: one op never mixes them.
  err = error_of([&] { a.to(kGpu) + a; });
  EXPECT_NE(err.find("device"), std::string::npos) << err;
  // In-place casts: eager's message, word for word.
  Tensor i = zeros({4}, kInt64);
  std::string host = error_of([&] { i.add_(randn({4})); });
  ASSERT_FALSE(host.empty());
  EXPECT_EQ(error_of([&] { Tensor di = i.to(kGpu); di.add_(randn({4}).to(kGpu)); }), host);
  // Products run from the runtime on the device (device_ops::run_library): a shape error is the
  // eager op's, word for word, and mixed devices are refused.
  Tensor m = randn({3, 4}), k = randn({5, 2});
  std::string mm_host = error_of([&] { matmul(m, k); });
  ASSERT_FALSE(mm_host.empty());
  EXPECT_EQ(error_of([&] { matmul(m.to(kGpu), k.to(kGpu)); }), mm_host);
  EXPECT_EQ(error_of([&] { einsum("ij,jk->ik", {m.to(kGpu), k.to(kGpu)}); }), error_of([&] { einsum("ij,jk->ik", {m, k}); }));
  err = error_of([&] { matmul(m.to(kGpu), randn({4, 2})); });
  EXPECT_NE(err.find("device"), std::string::npos) << err;
  // Integer division by zero: ZeroDivisionError from the kernel's status word.
  Tensor n = full({8}, 6, kInt64).to(kGpu), d = zeros({8}, kInt64).to(kGpu);
  EXPECT_EQ(error_of([&] { div(n, d, "floor"); }), error_of([&] { div(cpu(n), cpu(d), "floor"); }));
}

TEST(CudaEager, HostNumbersAreArgumentsNotConstants) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor x = randn({256}).to(kGpu);
  (x * 0.5).sum();  // (both programs cached)
  size_t before = codegen::cuda_eager_programs();
  Tensor y = x * 0.25, z = x * -3.0;
  y.sum();
  EXPECT_EQ(codegen::cuda_eager_programs(), before) << "a new number compiled a new program";
  EXPECT_TRUE(kiln::testing::close(cpu(z), cpu(x) * -3.0));
  // A new size is a new program.
  Tensor w = randn({257}).to(kGpu) * 0.5;
  EXPECT_EQ(codegen::cuda_eager_programs(), before + 1);
}

// Eager kernels are size-generic: a new size of an op seen before (same dtypes, same layout
// class) is a new program but loads no new kernel, so on a GPU it compiles nothing with NVRTC.
// Broadcasts, strided reads, transposes and reductions too, not only contiguous elementwise ops.
TEST(CudaEager, NewSizesOfAnOpLoadNoNewKernel) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(5);
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&, const Tensor&)>>> ops = {
      {"broadcast add", [](const Tensor& x, const Tensor& b) { return x + b; }},
      {"strided read", [](const Tensor& x, const Tensor&) { return x.slice(1, 0, x.size(1), 2) * 2; }},
      {"transposed copy", [](const Tensor& x, const Tensor&) { return x.t().contiguous(); }},
      {"row sums", [](const Tensor& x, const Tensor&) { return x.sum(1); }},
      {"column sums", [](const Tensor& x, const Tensor&) { return x.sum(0); }},
      {"softmax", [](const Tensor& x, const Tensor&) { return softmax(x, 1); }},
  };
  for (const auto& [name, op] : ops) {
    SCOPED_TRACE(name);
    size_t modules = 0;
    const std::vector<std::pair<int64_t, int64_t>> sizes = {{37, 48}, {50, 40}, {23, 34}, {41, 44}};
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto [m, n] = sizes[i];
      Tensor x = randn({m, n}), b = randn({n});
      Tensor got = op(x.to(kGpu), b.to(kGpu));
      EXPECT_TRUE(kiln::testing::close(cpu(got), op(x, b))) << m << " x " << n;
      if (i > 0) {
        EXPECT_EQ(codegen::cuda_kernel_modules(), modules) << "[" << m << ", " << n << "] loaded a new kernel";
      }
      modules = codegen::cuda_kernel_modules();
    }
  }
}

// Empty tensors: no rows, empty rows (a sum is 0, a mean NaN, a max an error), an empty tiled
// transpose. (A size-generic kernel must not take a loop of 0 for a loop of 1.)
TEST(CudaEager, EmptyTensorsMatchTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  const std::vector<EagerCase> cases = {
      {"no rows, sum", [](auto& v) { return v[0].sum(1); }, {zeros({0, 7})}},
      {"no rows, softmax", [](auto& v) { return softmax(v[0], 1); }, {zeros({0, 7})}},
      {"empty rows, sum", [](auto& v) { return v[0].sum(1); }, {zeros({5, 0})}},
      {"empty rows, mean", [](auto& v) { return v[0].mean({1}); }, {zeros({5, 0})}},
      {"empty rows, sum over dim 0", [](auto& v) { return v[0].sum(0); }, {zeros({0, 9})}},
      {"empty batch, transpose", [](auto& v) { return v[0].transpose(1, 2) + v[0]; }, {zeros({0, 32, 32})}},
      {"empty broadcast", [](auto& v) { return v[0] + v[1]; }, {zeros({0, 5}), ones({5})}},
  };
  for (const EagerCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> dev;
    for (const Tensor& t : c.inputs) dev.push_back(t.to(kGpu));
    Tensor want = c.fn(c.inputs), got = c.fn(dev);
    EXPECT_EQ(got.sizes().vec(), want.sizes().vec());
    EXPECT_TRUE(kiln::testing::close(cpu(got), want)) << cpu(got) << "\nwant\n" << want;
  }
  // (the GPU raises type inference's form of the cpu's message, with the operand's type)
  for (const std::string& e : {error_of([] { zeros({5, 0}).to(kGpu).amax({1}); }), error_of([] { zeros({5, 0}).amax({1}); })}) {
    EXPECT_EQ(e.rfind("[amax] ", 0), 0u) << e;
    EXPECT_NE(e.find("Expected reduction dim 1 to have non-zero size"), std::string::npos) << e;
  }
}

TEST(CudaEager, ViewsCostNoKernel) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor x = randn({6, 8}).to(kGpu);
  size_t before = codegen::cuda_eager_programs();
  Tensor v = x.t().reshape({8, 6}).narrow(0, 1, 3).unsqueeze(0);
  EXPECT_TRUE(v.is_cuda());
  EXPECT_EQ(v.storage(), x.storage());
  EXPECT_EQ(codegen::cuda_eager_programs(), before);
}

// ---- kiln::compile with GPU inputs ----

TEST(CudaCompiledFunction, RunsOnTheGpuAndMatchesEager) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  auto fn = [](const std::vector<Tensor>& v) { return std::vector{softmax(v[0] * 2 + v[1], 1).sum(0) + 1}; };
  auto f = compile(fn);
  Tensor a = randn({33, 40}), b = randn({40});
  std::vector<Tensor> in{a.to(kGpu), b.to(kGpu)};
  for (int call = 0; call < 3; ++call) {
    std::vector<Tensor> out = f(in);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].is_cuda());
    EXPECT_TRUE(kiln::testing::close(cpu(out[0]), fn({a, b})[0]));
  }
  EXPECT_EQ(f.stats().hits, 2u);
  Explanation e = f.explain(in);
  ASSERT_EQ(e.graphs.size(), 1u);
  EXPECT_EQ(e.graphs[0].backend.rfind("cuda:0: ", 0), 0u) << e.graphs[0].backend;
  // The same function on cpu tensors is another signature, compiled for the cpu.
  std::vector<Tensor> host{a, b};
  EXPECT_TRUE(kiln::testing::close(f(host)[0], fn(host)[0]));
  EXPECT_EQ(f.explain(host).graphs[0].backend.rfind("cpu: ", 0), 0u);
}

// Reduction passes reading 16 bytes per load (render_rows.cpp's row_pass) against cpu eager:
// rows whose length whole vectors do not cover, rows whose start is aligned only every other
// row (a slice of 2 elements in: the rest read element by element), several reduced loops
// (contiguous, or a slice's: element by element),
// 16-bit loads beside 32-bit ones, two passes (the variance after the mean), a split
// whole-tensor sum, one whose start is never aligned, and the one-pass rows of a warp per row
// (rows of up to 2048: no row cache). (argmax's first index among ties and
// a per-row value inside a pass keep their rows in a shared-memory cache: element by element.)
using V = std::vector<Tensor>;
struct CompiledCase {
  const char* name;
  std::function<V(const V&)> fn;
  V in;
};

// Each case compiled (traced eagerly, then run compiled) on device copies of its inputs against
// cpu eager, outputs and inputs (in-place writes) compared; none left to the reference executor.
// `also`: more checks of the explanation of each case's second call.
void expect_compiled_cases_match_cpu_eager(const std::vector<CompiledCase>& cases,
                                           const std::function<void(const Explanation&)>& also = {}) {
  for (const CompiledCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto f = compile(c.fn);
    for (int call = 0; call < 2; ++call) {
      V dev, host;
      for (const Tensor& t : c.in) dev.push_back(t.to(kGpu)), host.push_back(t.clone());
      const V want = c.fn(host);
      V got = f(dev);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(kiln::testing::close(cpu(got[i]), want[i])) << "output " << i;
      for (size_t i = 0; i < dev.size(); ++i) EXPECT_TRUE(kiln::testing::close(cpu(dev[i]), host[i])) << "input " << i;
      if (call == 1) {
        const Explanation e = f.explain(dev);
        const std::string note = e.graphs.at(0).backend;
        EXPECT_EQ(note.find("reference executor"), std::string::npos) << note;
        if (also) also(e);
      }
    }
  }
}

std::vector<CompiledCase> vector_reduction_cases() {
  return {
      {"sum over rows of 5003", [](const V& v) { return V{v[0].sum({1})}; }, {randn({37, 5003})}},
      {"sum over rows of a slice", [](const V& v) { return V{v[0].narrow(1, 2, 5004).sum({1})}; }, {randn({21, 5006})}},
      {"sum over two dims", [](const V& v) { return V{v[0].sum({1, 2})}; }, {randn({20, 50, 100})}},
      {"sum over two dims of a slice", [](const V& v) { return V{v[0].narrow(2, 0, 99).sum({1, 2})}; }, {randn({20, 50, 100})}},
      {"float16 times float32", [](const V& v) { return V{(v[0] * v[1]).sum({1})}; },
       {randn({9, 4099}).to(kFloat16), randn({9, 4099})}},
      {"argmax among ties", [](const V& v) { return V{v[0].argmax(1)}; }, {randint(0, 1000, {12, 6000}).to(kFloat32)}},
      {"mean and variance", [](const V& v) { return V{v[0].mean({1}), v[0].var({1}, 1)}; }, {randn({10, 8193})}},
      {"per-row value in the pass", [](const V& v) { return V{(v[0] - v[0].mean({1}, true)).abs().sum({1})}; },
       {randn({10, 6000})}},
      {"split sum, float64", [](const V& v) { return V{v[0].sum()}; }, {randn({100003}).to(kFloat64)}},
      {"split sum of a slice", [](const V& v) { return V{(v[0].narrow(0, 1, 100000) * 2).sum()}; }, {randn({100003})}},
      {"row sums, rows of 1001", [](const V& v) { return V{v[0].sum({1})}; }, {randn({70, 1001})}},
      {"row maxima of a slice", [](const V& v) { return V{v[0].narrow(1, 3, 999).amax({1})}; }, {randn({70, 1004})}},
  };
}

// Each case run eagerly on device copies of its inputs (size-generic kernels, one op at a
// time) against cpu eager, outputs and inputs compared.
void expect_eager_cases_match_cpu(const std::vector<CompiledCase>& cases) {
  for (const CompiledCase& c : cases) {
    SCOPED_TRACE(c.name);
    V dev, host;
    for (const Tensor& t : c.in) dev.push_back(t.to(kGpu)), host.push_back(t.clone());
    const V got = c.fn(dev), want = c.fn(host);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(kiln::testing::close(cpu(got[i]), want[i])) << "output " << i;
    for (size_t i = 0; i < dev.size(); ++i) EXPECT_TRUE(kiln::testing::close(cpu(dev[i]), host[i])) << "input " << i;
  }
}

TEST(CudaCompiledFunction, VectorReductionPassesMatchCpuEager) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(31);
  expect_compiled_cases_match_cpu_eager(vector_reduction_cases());
}

// The same cases as eager ops on GPU tensors: size-generic kernels, whose reduction passes
// read by vectors as well where a single loop runs along the row (each op's first size and
// every later one running the same kernel).
TEST(CudaEager, VectorReductionPassesMatchTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(31);
  expect_eager_cases_match_cpu(vector_reduction_cases());
}

// Warp-per-row kernels with a row cache (softmax, log_softmax, layernorm) read and write their
// rows 16 bytes at a time, a lane owning neighbouring elements (render_rows.cpp's
// warp_vector_pass), and fall back to element by element when an operand's data is not
// aligned. Rows a whole number of vectors long or not, the last step partly past the row,
// float16 (eight per vector), a broadcast weight and bias, two reduced dims, in place, and
// slices whose rows start aligned or not.
std::vector<CompiledCase> warp_row_cases() {
  auto layer_norm = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    Tensor m = x.mean({1}, true), c = x - m;
    return c / ((c * c).mean({1}, true) + 1e-5).sqrt() * w + b;
  };
  return {
      {"softmax, rows of 1024", [](const V& v) { return V{softmax(v[0], 1)}; }, {randn({40, 1024})}},
      {"layernorm, rows of 1000", [&](const V& v) { return V{layer_norm(v[0], v[1], v[2])}; },
       {randn({24, 1000}), randn({1000}), randn({1000})}},
      {"log_softmax, rows of 100", [](const V& v) { return V{log_softmax(v[0], 1)}; }, {randn({50, 100})}},
      {"float16 softmax", [](const V& v) { return V{softmax(v[0], 1)}; }, {randn({20, 520}).to(kFloat16)}},
      {"rows of 1022: not whole vectors", [](const V& v) { return V{softmax(v[0], 1)}; }, {randn({16, 1022})}},
      {"two reduced dims", [](const V& v) { return V{(v[0] - v[0].amax({1, 2}, true)).exp()}; }, {randn({8, 16, 64})}},
      {"in place", [](const V& v) {
         Tensor x = v[0];
         x.sub_(x.amax({1}, true));
         return V{x * 1};
       },
       {randn({33, 256})}},
      {"a slice, rows aligned", [](const V& v) { return V{softmax(v[0].narrow(1, 4, 1024), 1)}; }, {randn({30, 1032})}},
      {"a slice, rows misaligned", [](const V& v) { return V{softmax(v[0].narrow(1, 1, 1024), 1)}; }, {randn({30, 1032})}},
      {"a slice, rows aligned but not whole vectors", [](const V& v) { return V{softmax(v[0].narrow(1, 0, 1022), 1)}; },
       {randn({30, 1024})}},
      // (two passes and no store along the row: only the row's length says it is not whole vectors)
      {"variance of a slice, rows aligned but not whole vectors", [](const V& v) { return V{v[0].narrow(1, 0, 1022).var({1}, 1)}; },
       {randn({30, 1024})}},
      {"log_softmax, rows of 1000", [](const V& v) { return V{log_softmax(v[0], 1)}; }, {randn({40, 1000})}},
      {"rows of 36: two elements per lane", [](const V& v) { return V{softmax(v[0], 1)}; }, {randn({50, 36})}},
  };
}

TEST(CudaCompiledFunction, WarpRowVectorPassesMatchCpuEager) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(33);
  expect_compiled_cases_match_cpu_eager(warp_row_cases());
}

// The same cases as eager ops on GPU tensors: softmax's and log_softmax's size-generic
// kernels go by vectors too where the row's length and the rows' strides are whole vectors
// (checked once per launch), their last step's vectors masked past the row's end (rows of 100
// and 1000 in a cache of 128 and 1024 per warp); element by element otherwise.
TEST(CudaEager, WarpRowVectorPassesMatchTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(33);
  expect_eager_cases_match_cpu(warp_row_cases());
}

// Block-per-row kernels (rows past 2048) by 16-byte vectors in every pass over the row, the row
// stores too, the elements past the whole vectors one by one: with a row cache in shared
// memory (layernorm over 4096 and 3001: a tail; softmax in float16; a row stride of 4098, so
// no vectors; a slice starting one element off its line, checked once for the kernel; an
// update in place of the cached row) and without (rows of 9000 read in each pass). More rows
// than blocks, so that a block's threads take row after row with the same cache.
std::vector<CompiledCase> block_row_cases() {
  auto layernorm = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    Tensor mean = x.mean({-1}, true), var = x.var({-1}, 0, true);
    return (x - mean) / sqrt(var + 1e-5) * w + b;
  };
  return {
      {"layernorm over 4096", [=](const V& v) { return V{layernorm(v[0], v[1], v[2])}; },
       {randn({70, 4096}), randn({4096}), randn({4096})}},
      {"layernorm over 3001", [=](const V& v) { return V{layernorm(v[0], v[1], v[2])}; },
       {randn({70, 3001}), randn({3001}), randn({3001})}},
      {"softmax, float16", [](const V& v) { return V{softmax(v[0], 1)}; }, {randn({40, 2500}).to(kFloat16)}},
      {"rows 4098 apart", [](const V& v) { return V{softmax(v[0].narrow(1, 0, 4096), 1)}; }, {randn({40, 4098})}},
      {"a slice off its line", [](const V& v) { return V{log_softmax(v[0].narrow(1, 1, 4096), 1)}; }, {randn({40, 4101})}},
      {"in place",
       [](const V& v) {
         Tensor x = v[0].clone();
         x.sub_(x.amax({1}, true));
         x.div_(x.abs().sum({1}, true));
         return V{x};
       },
       {randn({50, 3000})}},
      {"no cache: rows of 9000", [](const V& v) { return V{v[0] - v[0].mean({1}, true)}; }, {randn({30, 9000})}},
  };
}

TEST(CudaCompiledFunction, BlockRowVectorPassesMatchCpuEager) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(36);
  expect_compiled_cases_match_cpu_eager(block_row_cases());
}

TEST(CudaEager, BlockRowVectorPassesMatchTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(36);
  expect_eager_cases_match_cpu(block_row_cases());
}

// Few long rows contiguous in memory (RowSplit): each cut into chunks of a block each, then a
// thread per row combining the chunks in order. Per-channel statistics over [N, C, H, W] (two
// reduced loops, the chunks cutting their flattened index), a row sum with an early store
// beside it, a maximum with a NaN, float16, and rows that start off their 16-byte line.
std::vector<CompiledCase> row_split_cases() {
  Tensor nan_row = randn({3, 20000});
  nan_row.index({1, 12345}) = NAN;
  return {
      {"channel mean and sum of squares",
       [](const V& v) { return V{v[0].mean({0, 2, 3}), (v[0] * v[0]).sum({0, 2, 3})}; }, {randn({4, 3, 70, 90})}},
      {"row sums beside x * 3", [](const V& v) { return V{v[0].sum({1}), v[0] * 3}; }, {randn({5, 33333})}},
      {"a maximum with a NaN", [](const V& v) { return V{v[0].amax({1})}; }, {nan_row}},
      {"float16", [](const V& v) { return V{v[0].sum({1})}; }, {randn({2, 40000}).to(kFloat16)}},
      {"rows off their line", [](const V& v) { return V{v[0].narrow(1, 1, 30000).sum({1})}; }, {randn({7, 30003})}},
  };
}

TEST(CudaCompiledFunction, RowSplitReductionsMatchCpuEager) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(37);
  expect_compiled_cases_match_cpu_eager(row_split_cases());
}

TEST(CudaEager, RowSplitReductionsMatchTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(37);
  expect_eager_cases_match_cpu(row_split_cases());
}

// Row groups: the rows of a short outermost loop (2 to 4) in one block or warp, what does not
// vary along it computed once for them all. A shared quotient over three rows of 2049, a block
// per group (every fourth row starts on a 16-byte line: vectors, then one element; the others
// element by element); a maximum with a NaN in one of the copies only, a warp per group. On a GPU (not on
// the emulated driver, which runs a block's threads as host threads: minutes at these sizes),
// n-body's forces in two and three dimensions: the distance, its square root and the masses'
// product shared.
std::vector<CompiledCase> row_group_cases() {
  Tensor with_nan = randn({2, 4096, 100});
  with_nan.index({1, 17, 42}) = NAN;
  auto quotient = [](const V& v) { return V{(v[0] / (v[1] * v[1] + 1)).sum({2})}; };
  std::vector<CompiledCase> cases{
      {"three rows of 2049", quotient, {randn({3, 512, 2049}), randn({512, 2049})}},
      {"a maximum with a NaN, by warps", [](const V& v) { return V{(v[0] + v[1] * 3).amax({2})}; },
       {with_nan, randn({4096, 100})}},
  };
  if (!cuda::emulated()) {
    // (on a GPU a misaligned vector load faults: here the second copy's rows start one float
    // past the first's line, so every row must go element by element)
    cases.push_back({"a second copy off its line", quotient, {randn({2, 513, 2049}), randn({513, 2049})}});
    cases.push_back({"a per-row scale beside a shared row", [](const V& v) { return V{(v[0] * (v[1] * v[1])).sum({2})}; },
                     {randn({2, 1024, 1}), randn({1024, 2100})}});
    const wl::Workload& nbody = *wl::find_workload("nbody_forces");
    auto forces = [&nbody](const V& v) { return nbody.run(v); };
    cases.push_back({"n-body in 2-d", forces, {randn({2, 2100}), rand({2100}) + 0.1}});
    cases.push_back({"n-body in 3-d", forces, {randn({3, 2100}), rand({2100}) + 0.1}});
  }
  return cases;
}

TEST(CudaCompiledFunction, RowGroupsMatchCpuEager) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(38);
  // (each traced graph's kernel program takes its rows in groups: rendered again from its text)
  expect_compiled_cases_match_cpu_eager(row_group_cases(), [](const Explanation& e) {
    passes::Module m = passes::optimize(ir::parse(e.graphs.at(0).text), {});
    const std::string s = codegen::emit_cuda(*m.program, codegen::CudaEmit::Source);
    EXPECT_NE(s.find(" groups of "), std::string::npos) << s.substr(0, s.find("extern"));
  });
}

// Broadcast operands read per run of the innermost loop (a bias over rows as vectors, a column
// one element per vector), where the runs hold whole vectors and stay aligned, and otherwise
// element by element: rows of 128 and 130 floats, 64 float16s; a weight over a batch whose rows
// are 64 floats apart, or 66 (a slice: not whole vectors); a bias starting one float past a
// 16-byte line. Compiled (specialised kernels, which know their sizes) and as eager ops
// (size-generic kernels, which check them when they run).
std::vector<CompiledCase> broadcast_cases() {
  return {
      {"a bias over rows of 128", [](const V& v) { return V{v[0] + v[1]}; }, {randn({40, 128}), randn({128})}},
      {"a bias over rows of 130", [](const V& v) { return V{v[0] * v[1]}; }, {randn({40, 130}), randn({130})}},
      {"a column over columns", [](const V& v) { return V{v[0] - v[1]}; }, {randn({40, 128}), randn({40, 1})}},
      {"float16", [](const V& v) { return V{v[0] + v[1]}; }, {randn({30, 64}).to(kFloat16), randn({64}).to(kFloat16)}},
      {"a weight over a batch", [](const V& v) { return V{v[0] * v[1] + v[2]}; },
       {randn({3, 33, 64}), randn({33, 64}), randn({64})}},
      {"a weight of rows 66 apart", [](const V& v) { return V{v[0] * v[1].narrow(1, 0, 64)}; },
       {randn({3, 33, 64}), randn({33, 66})}},
      {"a bias off its line", [](const V& v) { return V{v[0] + v[1].narrow(0, 1, 128)}; }, {randn({40, 128}), randn({129})}},
  };
}

TEST(CudaCompiledFunction, BroadcastOperandsMatchCpuEager) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(35);
  expect_compiled_cases_match_cpu_eager(broadcast_cases());
}

TEST(CudaEager, BroadcastOperandsMatchTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(35);
  expect_eager_cases_match_cpu(broadcast_cases());
}

// Tiled kernels (a transposed operand staged through shared memory, each warp's rows of a tile
// loaded four at a time ahead of their use: render.cpp's tile_rows) against cpu eager: edge
// tiles, two staged operands beside a direct one and a broadcast bias, a batch loop outside
// the tile, float16, an in-place update of the operand read directly.
TEST(CudaCompiledFunction, TiledKernelsMatchCpuEager) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(32);
  const std::vector<CompiledCase> cases = {
      {"edge tiles", [](const V& v) { return V{v[0].t() + v[1]}; }, {randn({70, 45}), randn({45, 70})}},
      {"two staged, one direct, a bias",
       [](const V& v) { return V{v[0].t() * v[1].t() + v[2] - v[3]}; },
       {randn({100, 90}), randn({100, 90}), randn({90, 100}), randn({100})}},
      {"a batch", [](const V& v) { return V{v[0].transpose(1, 2) - v[1]}; }, {randn({3, 40, 50}), randn({3, 50, 40})}},
      {"float16", [](const V& v) { return V{(v[0].t() + v[1]) * 2}; },
       {randn({64, 33}).to(kFloat16), randn({33, 64}).to(kFloat16)}},
      {"in place",
       [](const V& v) {
         Tensor y = v[1];
         y.add_(v[0].t());
         return V{y * 1};
       },
       {randn({48, 80}), randn({80, 48})}},
  };
  expect_compiled_cases_match_cpu_eager(cases);
}

// The same with KILN_CUDA_TILE=64 (64 x 64 tiles, two columns per lane: CudaSource.WideTiles...)
// on loops of at least 64, edge tiles on both sides, float64 beside float16; and with
// KILN_CUDA_GRID_PER_SM=0, one block per tile rather than a grid-stride loop over them.
TEST(CudaCompiledFunction, WideTiledKernelsMatchCpuEager) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  kiln::testing::ScopedEnv wide("KILN_CUDA_TILE", "64");
  manual_seed(64);
  const std::vector<CompiledCase> cases = {
      {"edge tiles", [](const V& v) { return V{v[0].t() + v[1]}; }, {randn({130, 70}), randn({70, 130})}},
      {"two staged, one direct, a bias",
       [](const V& v) { return V{v[0].t() * v[1].t() + v[2] - v[3]}; },
       {randn({100, 90}), randn({100, 90}), randn({90, 100}), randn({100})}},
      {"a batch", [](const V& v) { return V{v[0].transpose(1, 2) - v[1]}; }, {randn({2, 70, 100}), randn({2, 100, 70})}},
      {"float16", [](const V& v) { return V{(v[0].t() + v[1]) * 2}; },
       {randn({64, 65}).to(kFloat16), randn({65, 64}).to(kFloat16)}},
      {"float64", [](const V& v) { return V{v[0].t() - v[1]}; }, {randn({96, 80}).to(kFloat64), randn({80, 96}).to(kFloat64)}},
      {"in place",
       [](const V& v) {
         Tensor y = v[1];
         y.add_(v[0].t());
         return V{y * 1};
       },
       {randn({80, 96}), randn({96, 80})}},
  };
  expect_compiled_cases_match_cpu_eager(cases);
  kiln::testing::ScopedEnv per_tile("KILN_CUDA_GRID_PER_SM", "0");
  expect_compiled_cases_match_cpu_eager(cases);
}

// One kernel overwrites memory it also reads (x's new value stored, |2x| of the old x read at
// the same element): the old x is read before the store, whichever store comes first.
TEST(CudaCompiledFunction, AKernelReadsWhatItOverwritesBeforeStoring) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  auto fn = [](const std::vector<Tensor>& v) {
    Tensor x = v[0];
    x.mul_(2);
    Tensor y = x.abs();
    x.copy_(v[1]);
    return std::vector{where(y > x, y, v[1] * 0.5)};
  };
  auto f = compile(fn);
  for (int call = 0; call < 3; ++call) {
    Tensor x = randn({6, 5}), c = randn({6, 5});
    std::vector<Tensor> in{x.to(kGpu), c.to(kGpu)};
    std::vector<Tensor> out = f(in);
    Tensor want = fn({x, c})[0];  // (writes x)
    EXPECT_TRUE(kiln::testing::close(cpu(out[0]), want)) << "call " << call;
    EXPECT_TRUE(kiln::testing::close(cpu(in[0]), x)) << "call " << call;
  }
  EXPECT_EQ(f.stats().hits, 2u);
}

// The differential test's random programs (tests/common/random_programs.h: broadcasting,
// views, in-place writes into inputs and through views, item() branches) with their inputs on
// the GPU, compiled there, against CPU eager on copies: the outputs, and the inputs the programs
// write into. The first call of each traces (eager GPU ops), the others replay compiled kernels.
// 40 programs by default (each new kernel is a host compile on the emulator);
// KILN_DIFFERENTIAL_PROGRAMS=N runs N (on a GPU: scripts/gpu.sh's test phase, from a fresh
// KILN_TEST_SEED_BASE each run: tests/common/seeds.h).
TEST(CudaCompiledFunction, RandomProgramsMatchCpuEager) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  int compiled = 0;
  const auto f32 = kiln::testing::tolerance(kFloat32);  // (float64 values carry float32 rounding)
  const auto [first, last] = kiln::testing::seed_range(40, "KILN_DIFFERENTIAL_PROGRAMS");
  for (uint32_t seed = first; seed <= last; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    kiln::testing::Program p = kiln::testing::make_program(seed);
    auto f = compile([&p](const std::vector<Tensor>& in) { return kiln::testing::run(p, in); });
    for (uint32_t call = 0; call < 3; ++call) {
      std::vector<Tensor> host = kiln::testing::make_inputs(p, seed, call), in;
      for (const Tensor& t : host) {  // (with the host tensor's strides)
        in.push_back(empty_strided(t.sizes(), t.strides(), TensorOptions(t.dtype()).device(kGpu)));
        in.back().copy_(t);
      }
      std::vector<Tensor> want = kiln::testing::run(p, host);
      std::vector<Tensor> got = f(in);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(got[i].is_cuda()) << "output " << i;
        ASSERT_TRUE(kiln::testing::close(cpu(got[i]), want[i], f32)) << "call " << call << " output " << i << "\n"
                                                                      << f.explain(in).str();
      }
      for (size_t i = 0; i < in.size(); ++i)
        ASSERT_TRUE(kiln::testing::close(cpu(in[i]), host[i], f32)) << "call " << call << " input " << i;
    }
    std::vector<Tensor> in = kiln::testing::make_inputs(p, seed, 0);
    for (Tensor& t : in) t = t.to(kGpu);
    for (const auto& g : f.explain(in).graphs) compiled += g.backend.rfind("cuda:0: ", 0) == 0;
  }
  EXPECT_GT(compiled, int(last - first + 1) / 2) << "graphs compiled for the GPU";
}

// A dim that became dynamic: each new size gets a compiled GPU program of its own (not the
// reference executor's eager ops), of size-generic kernels.
TEST(CudaCompiledFunction, NewSizesOfADynamicDimRunCompiledOnTheGpu) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  CompileOptions o;
  o.recompile_limit = 2;
  auto fn = [](const std::vector<Tensor>& v) { return std::vector{(v[0].exp() * 2).sum(1)}; };
  auto f = compile(fn, o);
  ::testing::internal::CaptureStderr();
  std::vector<Tensor> last;
  for (int64_t n = 1; n <= 6; ++n) {
    Tensor x = randn({n, 5});
    last = {x.to(kGpu)};
    std::vector<Tensor> got = f(last);
    EXPECT_TRUE(got[0].is_cuda());
    EXPECT_TRUE(kiln::testing::close(cpu(got[0]), fn({x})[0])) << "size " << n;
  }
  // A size not seen before: its own compiled program, no eager GPU ops, and (size-generic
  // kernels) no new kernel either.
  size_t eager_before = codegen::cuda_eager_programs(), modules_before = codegen::cuda_kernel_modules();
  for (int64_t n : {7, 12, 40}) {
    Tensor x = randn({n, 5});
    std::vector<Tensor> in{x.to(kGpu)};
    EXPECT_TRUE(kiln::testing::close(cpu(f(in)[0]), fn({x})[0])) << "size " << n;
  }
  EXPECT_EQ(codegen::cuda_eager_programs(), eager_before) << "a new size ran eager GPU ops";
  EXPECT_EQ(codegen::cuda_kernel_modules(), modules_before) << "a new size loaded a new kernel";
  ::testing::internal::GetCapturedStderr();
  Explanation e = f.explain(last);
  ASSERT_FALSE(e.graphs.empty());
  const std::string& note = e.graphs[0].backend;
  EXPECT_EQ(note.rfind("cuda:0: ", 0), 0u) << note;
  EXPECT_NE(note.find("other sizes: "), std::string::npos) << note;
  EXPECT_NE(note.find(" 0 on the reference executor"), std::string::npos) << note;
  EXPECT_NE(note.find("kept with size-generic kernels"), std::string::npos) << note;
}

// Under reduce_overhead the new sizes of a dynamic dim are replayed as CUDA graphs too (each
// size its own graph over its own buffers), at most kMaxGraphVariants of them; later sizes run
// their kernels without one. Every result is right, and a replay never overwrites what an
// earlier replay of the same size returned.
TEST(CudaCompiledFunction, NewSizesOfADynamicDimAreReplayedAsCudaGraphs) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  CompileOptions o;
  o.recompile_limit = 2;
  o.mode = CompileOptions::Mode::ReduceOverhead;
  auto fn = [](const std::vector<Tensor>& v) { return std::vector{softmax(v[0] * 2 + v[1], 1)}; };
  auto f = compile(fn, o);
  ::testing::internal::CaptureStderr();
  manual_seed(8);
  Tensor b = randn({24});
  std::vector<Tensor> last;
  for (int64_t n = 2; n <= 16; ++n) {
    SCOPED_TRACE("size " + std::to_string(n));
    Tensor x = randn({n, 24}), x2 = randn({n, 24});
    std::vector<Tensor> in{x.to(kGpu), b.to(kGpu)}, in2{x2.to(kGpu), b.to(kGpu)};
    Tensor first = f(in)[0];     // (the size's program: its first run, then the capture)
    Tensor again = f(in)[0];     // replayed
    Tensor other = f(in2)[0];    // replayed on other values
    EXPECT_TRUE(kiln::testing::close(cpu(first), fn({x, b})[0]));
    EXPECT_TRUE(kiln::testing::close(cpu(again), fn({x, b})[0]));
    EXPECT_TRUE(kiln::testing::close(cpu(other), fn({x2, b})[0]));
    EXPECT_TRUE(kiln::testing::close(cpu(again), fn({x, b})[0])) << "a later replay overwrote an earlier output";
    last = in;
  }
  ::testing::internal::GetCapturedStderr();
  const std::string note = f.explain(last).graphs.at(0).backend;
  const size_t at = note.find("other sizes: ");
  ASSERT_NE(at, std::string::npos) << note;
  EXPECT_NE(note.find("(8 replayed as CUDA graphs)", at), std::string::npos) << note;
  EXPECT_NE(note.find(" 0 on the reference executor", at), std::string::npos) << note;
}

// Through kiln::compile too, a replay's outputs are the captured buffers themselves once the
// caller has dropped the last call's (nothing between the caller and the graph keeps them).
TEST(CudaCompiledFunction, ReduceOverheadHandsOutOutputsNoOneHolds) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  CompileOptions o;
  o.mode = CompileOptions::Mode::ReduceOverhead;
  auto fn = [](const std::vector<Tensor>& v) { return std::vector{(v[0] * 2 + v[1]).relu()}; };
  auto f = compile(fn, o);
  Tensor x = randn({64, 24}), b = randn({24});
  std::vector<Tensor> in{x.to(kGpu), b.to(kGpu)};
  f(in);  // (traces, running eagerly)
  f(in);  // (the program's first run, then its capture)
  std::vector<const void*> seen;
  for (int i = 0; i < 3; ++i) {
    Tensor y = f(in)[0];
    EXPECT_TRUE(kiln::testing::close(cpu(y), fn({x, b})[0]));
    seen.push_back(y.storage()->data());
  }
  EXPECT_EQ(seen[0], seen[1]);
  EXPECT_EQ(seen[1], seen[2]);
  EXPECT_NE(f.explain(in).graphs.at(0).backend.find("replayed as a CUDA graph"), std::string::npos);
}

// Every workload, compiled for the GPU, against kiln's cpu eager ops on the same values: two
// rounds of fresh inputs (one set per path each), outputs and mutated inputs compared.
void expect_workloads_match_cpu_eager(const CompileOptions& opts) {
  for (const wl::Workload& w : wl::all_workloads()) {
    SCOPED_TRACE(w.name);
    auto f = compile([&w](const std::vector<Tensor>& in) { return w.run(in); }, opts);
    for (int round = 0; round < 2; ++round) {
      for (std::vector<Tensor>& host : w.path_inputs(wl::Tier::Small, 40 + uint64_t(round))) {
        std::vector<Tensor> dev, want_in;
        for (const Tensor& t : host) dev.push_back(t.to(kGpu)), want_in.push_back(t.clone());
        std::vector<Tensor> want = w.run(want_in), got;
        try {
          got = f(dev);
        } catch (const Error& e) {
          ADD_FAILURE() << w.name << ": " << e.what();
          continue;
        }
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_TRUE(got[i].is_cuda()) << w.name << " output " << i;
          EXPECT_TRUE(kiln::testing::close(cpu(got[i]), want[i])) << w.name << " output " << i;
        }
        for (size_t i = 0; i < dev.size(); ++i)
          EXPECT_TRUE(kiln::testing::close(cpu(dev[i]), want_in[i])) << w.name << " input " << i;
      }
    }
    std::vector<Tensor> first;
    auto sets = w.path_inputs(wl::Tier::Small, 40);
    for (const Tensor& t : sets[0]) first.push_back(t.to(kGpu));
    for (const auto& g : f.explain(first).graphs) {
      EXPECT_EQ(g.backend.rfind("cuda:0: ", 0), 0u) << w.name << ": " << g.backend;
      EXPECT_EQ(g.backend.find("reference executor"), std::string::npos) << w.name << ": " << g.backend;
      if (opts.mode == CompileOptions::Mode::ReduceOverhead) {
        EXPECT_NE(g.backend.find("CUDA graph"), std::string::npos) << w.name << ": " << g.backend;
      }
    }
  }
}

TEST(CudaCompiledFunction, EveryWorkloadMatchesCpuEager) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  expect_workloads_match_cpu_eager({});
}

// reduce_overhead: the graphs replay as CUDA graphs (those with host work say why not).
TEST(CudaCompiledFunction, EveryWorkloadMatchesCpuEagerWithCudaGraphs) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  CompileOptions o;
  o.mode = CompileOptions::Mode::ReduceOverhead;
  expect_workloads_match_cpu_eager(o);
}

}  // namespace
