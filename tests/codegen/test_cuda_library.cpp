// Library ops on GPU tensors (codegen/src/cuda/library.h): cat, stack, gather, index_select and
// einsum run on the device, eagerly and inside compiled programs, and match kiln's CPU eager
// ops. "On the device" is checked by the bytes copied between host and device while the op
// runs (cuda::host_transfers): at most the gather's 8-byte index check and its index value.
// They used to run on the host on copies of their operands.
#include <gtest/gtest.h>
#include <kiln/codegen/cuda.h>
#include <kiln/kiln.h>
#include <kiln/runtime/cuda.h>

#include <functional>
#include <string>
#include <vector>

#include "../common/close.h"
#include "cuda_util.h"

using namespace kiln;

namespace {

using kiln::testing::cpu;
using kiln::testing::error_of;
using kiln::testing::kGpu;
using Case = kiln::testing::DeviceCase;

// `run` (on device tensors, its kernels already compiled) against `want`, counting what it copies
// between host and device: nothing but an 8-byte index check may cross.
void expect_on_device(const std::function<Tensor()>& run, const Tensor& want) {
  cuda::synchronize();
  const cuda::HostTransfers before = cuda::host_transfers();
  Tensor got = run();
  cuda::synchronize();
  const cuda::HostTransfers after = cuda::host_transfers();
  EXPECT_LE(after.to_host - before.to_host, 8u) << "data went to the host";
  EXPECT_EQ(after.to_device - before.to_device, 0u) << "data came from the host";
  ASSERT_TRUE(got.is_cuda());
  EXPECT_EQ(got.dtype(), want.dtype());
  EXPECT_EQ(got.sizes().vec(), want.sizes().vec());
  EXPECT_TRUE(kiln::testing::close(cpu(got), want));
}

std::vector<Case> cases() {
  manual_seed(21);
  Tensor idx57 = randint(0, 7, {5, 3});
  return {
      {"cat dim 0", [](auto& v) { return cat({v[0], v[1]}, 0); }, {randn({3, 4}), randn({2, 4})}},
      {"cat dim 1, a transposed operand, int32 promoted",
       [](auto& v) { return cat({v[0].t(), v[1], v[2]}, -1); },
       {randn({5, 6}), randn({6, 2}), randint(-5, 5, {6, 3}, kInt32)}},
      {"cat skipping a legacy empty tensor", [](auto& v) { return cat({v[0], v[1], v[0]}, 1); },
       {randn({2, 3}), zeros({0})}},
      {"cat of bool", [](auto& v) { return cat({v[0], v[1]}, 0); },
       {randint(0, 2, {4}).to(kBool), randint(0, 2, {3}).to(kBool)}},
      {"stack dim 1", [](auto& v) { return stack({v[0], v[1], v[0]}, 1); }, {randn({4, 3}), randn({4, 3})}},
      {"gather dim 1, float64", [](auto& v) { return gather(v[0], 1, v[1]); }, {randn({5, 7}).to(kFloat64), idx57}},
      {"gather dim 0, a transposed index, float16",
       [](auto& v) { return gather(v[0], 0, v[1].t()); },
       {randn({9, 4}).to(kFloat16), randint(0, 9, {3, 4})}},
      {"gather of a strided source, int32", [](auto& v) { return gather(v[0].t(), 1, v[1]); },
       {randint(-9, 9, {8, 5}, kInt32), randint(0, 8, {5, 2})}},
      {"gather 0-d", [](auto& v) { return gather(v[0], 0, v[1]); }, {randn({}), zeros({}, kInt64)}},
      {"index_select dim 0, int64", [](auto& v) { return index_select(v[0], 0, v[1]); },
       {randn({6, 5}), randint(0, 6, {9})}},
      {"index_select dim 1, int32 with repeats", [](auto& v) { return index_select(v[0], 1, v[1]); },
       {randn({4, 6}), from_vector(std::vector<int32_t>{5, 0, 5, 2})}},
      {"index_select of a transposed source, 0-d index", [](auto& v) { return index_select(v[0].t(), 1, v[1]); },
       {randn({4, 6}), full({}, 3, kInt64)}},
      {"index_select 0-d", [](auto& v) { return index_select(v[0], 0, v[1]); }, {randn({}), zeros({1}, kInt64)}},
      {"einsum bhqd,bhkd->bhqk", [](auto& v) { return einsum("bhqd,bhkd->bhqk", {v[0], v[1]}); },
       {randn({2, 3, 5, 8}), randn({2, 3, 4, 8})}},
      {"einsum ij,jk,kl->il", [](auto& v) { return einsum("ij,jk,kl->il", {v[0], v[1], v[2]}); },
       {randn({3, 4}), randn({4, 5}), randn({5, 2})}},
      {"einsum ii->i", [](auto& v) { return einsum("ii->i", {v[0]}); }, {randn({5, 5})}},
      {"einsum ij-> (a full sum)", [](auto& v) { return einsum("ij->", {v[0]}); }, {randn({6, 7})}},
      {"einsum bij,bjk (implicit output), float64", [](auto& v) { return einsum("bij,bjk", {v[0], v[1]}); },
       {randn({2, 3, 4}).to(kFloat64), randn({2, 4, 5}).to(kFloat64)}},
  };
}

TEST(CudaLibrary, EagerOpsRunOnTheDeviceAndMatchTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> dev;
    for (const Tensor& t : c.inputs) dev.push_back(t.to(kGpu));
    c.fn(dev);  // (first call: kernels compiled and loaded)
    expect_on_device([&] { return c.fn(dev); }, c.fn(c.inputs));
  }
}

TEST(CudaLibrary, CompiledProgramsRunThemOnTheDevice) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    // The op between elementwise work, so that it is one kernel of a larger program.
    auto fn = [&](const std::vector<Tensor>& v) {
      std::vector<Tensor> w = v;
      if (is_floating(w[0].dtype())) w[0] = w[0] * 2;
      Tensor r = c.fn(w);
      return is_floating(r.dtype()) ? r + 1 : r;
    };
    auto f = compile(fn);
    std::vector<Tensor> dev;
    for (const Tensor& t : c.inputs) dev.push_back(t.to(kGpu));
    f(dev);  // (traced and compiled)
    expect_on_device([&] { return f(dev); }, fn(c.inputs));
    const std::string how = explain(f, dev).str();
    EXPECT_EQ(how.find("on the host"), std::string::npos) << how;
  }
}

// The gather kernel is size-generic: gathers and index_selects of new shapes (same element
// size, rank and dim) load no new kernel, and stay correct, including bad indices.
TEST(CudaLibrary, GathersOfNewShapesLoadNoNewKernel) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(3);
  size_t modules = 0;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{5, 7}, {9, 4}, {1, 30}, {33, 2}};
  for (size_t s = 0; s < shapes.size(); ++s) {
    auto [m, n] = shapes[s];
    SCOPED_TRACE(std::to_string(m) + " x " + std::to_string(n));
    Tensor x = randn({m, n}), xs = randn({m, 2 * n}).slice(1, 0, 2 * n, 2);
    Tensor idx = randint(0, n, {m + 1, 3}), sel = randint(0, m, {n + 2});
    EXPECT_TRUE(kiln::testing::close(cpu(gather(x.to(kGpu), 1, idx.narrow(0, 0, m).to(kGpu))), gather(x, 1, idx.narrow(0, 0, m))));
    EXPECT_TRUE(kiln::testing::close(cpu(gather(xs.to(kGpu), 1, idx.narrow(0, 0, m).to(kGpu))), gather(xs, 1, idx.narrow(0, 0, m))));
    EXPECT_TRUE(kiln::testing::close(cpu(index_select(x.to(kGpu), 0, sel.to(kGpu))), index_select(x, 0, sel)));
    if (s > 0) {
      EXPECT_EQ(codegen::cuda_kernel_modules(), modules) << "a new shape loaded a new kernel";
    }
    modules = codegen::cuda_kernel_modules();
  }
  Tensor x = randn({6, 5}), bad = from_vector(std::vector<int64_t>{0, 4, 7, 1}, {2, 2});
  EXPECT_EQ(error_of([&] { gather(x.to(kGpu), 1, bad.to(kGpu)); }), error_of([&] { gather(x, 1, bad); }));
  EXPECT_EQ(codegen::cuda_kernel_modules(), modules);
}

TEST(CudaLibrary, IndexErrorsAreEagersOwn) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  Tensor x = randn({4, 6});
  Tensor bad = from_vector(std::vector<int64_t>{0, 2, 9, 1, 3});  // 9: out of range for dim 1 of size 6
  Tensor bad_neg = from_vector(std::vector<int64_t>{-1, 0});
  auto on_both = [&](const std::function<void(const Tensor&, const Tensor&)>& f, const Tensor& a, const Tensor& i) {
    std::string host = error_of([&] { f(a, i); });
    ASSERT_FALSE(host.empty());
    EXPECT_EQ(error_of([&] { f(a.to(kGpu), i.to(kGpu)); }), host);
  };
  on_both([](const Tensor& a, const Tensor& i) { index_select(a, 1, i); }, x, bad);
  on_both([](const Tensor& a, const Tensor& i) { index_select(a, 0, i); }, x, bad_neg);
  on_both([](const Tensor& a, const Tensor& i) { index_select(a, 1, i); }, x, bad.to(kInt32));
  on_both([](const Tensor& a, const Tensor& i) { gather(a, 1, i); }, x, bad.reshape({1, 5}));
  on_both([](const Tensor& a, const Tensor& i) { gather(a, 0, i); }, x, bad_neg.reshape({2, 1}));
  // several bad indices: both name the first in row-major order (-3 here, not 8 or 11)
  on_both([](const Tensor& a, const Tensor& i) { gather(a, 1, i); }, x,
          from_vector(std::vector<int64_t>{0, 1, -3, 2, 8, 0, 11, 1}, {2, 4}));
  // Type and shape errors come from the op's checks before any kernel.
  on_both([](const Tensor& a, const Tensor& i) { gather(a, 1, i); }, x, bad.to(kInt32).reshape({1, 5}));
  on_both([](const Tensor& a, const Tensor& i) { cat({a, i}, 0); }, x, randn({2, 5}));
  on_both([](const Tensor& a, const Tensor& i) { einsum("ij,jk->ik", {a, i}); }, x, randn({5, 2}));
  // Operands on two devices.
  std::string err = error_of([&] { cat({x.to(kGpu), x}, 0); });
  EXPECT_NE(err.find("device"), std::string::npos) << err;
  // A compiled program raises the same error at its gather, and runs clean afterwards.
  auto fn = [](const std::vector<Tensor>& v) { return std::vector<Tensor>{index_select(v[0] * 2, 1, v[1]) + 1}; };
  auto f = compile(fn);
  Tensor good = from_vector(std::vector<int64_t>{0, 2, 5, 1, 3});
  using V = std::vector<Tensor>;
  EXPECT_TRUE(kiln::testing::close(cpu(f(V{x.to(kGpu), good.to(kGpu)})[0]), fn({x, good})[0]));
  EXPECT_EQ(error_of([&] { f(V{x.to(kGpu), bad.to(kGpu)}); }), error_of([&] { fn({x, bad}); }));
  EXPECT_TRUE(kiln::testing::close(cpu(f(V{x.to(kGpu), good.to(kGpu)})[0]), fn({x, good})[0]));
}

// With CUDA graphs (reduce_overhead), einsum and cat are captured with the program's kernels;
// gather and index_select keep a program off a graph (the host reads their index check).
TEST(CudaLibrary, EinsumAndCatAreCapturedInCudaGraphs) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  CompileOptions opts;
  opts.mode = CompileOptions::Mode::ReduceOverhead;
  auto attention = [](const Tensor& q, const Tensor& k) {
    return softmax(einsum("bhqd,bhkd->bhqk", {q, k}) / 8.0, -1);
  };
  auto fa = compile(attention, opts);
  auto joined = [](const Tensor& a, const Tensor& b) { return cat({a.t() * 2, b}, 0).exp(); };
  auto fc = compile(joined, opts);
  Tensor q = randn({2, 2, 6, 8}), k = randn({2, 2, 5, 8}), a = randn({3, 4}), b = randn({2, 3});
  for (int round = 0; round < 3; ++round) {  // the first call, the capture's first replay, one more
    q = randn({2, 2, 6, 8}), k = randn({2, 2, 5, 8}), a = randn({3, 4}), b = randn({2, 3});
    EXPECT_TRUE(kiln::testing::close(cpu(fa(q.to(kGpu), k.to(kGpu))), attention(q, k))) << round;
    EXPECT_TRUE(kiln::testing::close(cpu(fc(a.to(kGpu), b.to(kGpu))), joined(a, b))) << round;
  }
  const std::string how_a = explain(fa, q.to(kGpu), k.to(kGpu)).str(), how_c = explain(fc, a.to(kGpu), b.to(kGpu)).str();
  EXPECT_NE(how_a.find("replayed as a CUDA graph"), std::string::npos) << how_a;
  EXPECT_NE(how_c.find("replayed as a CUDA graph"), std::string::npos) << how_c;
  auto gathered = [](const Tensor& a, const Tensor& i) { return gather(a * 2, 1, i); };
  auto fg = compile(gathered, opts);
  Tensor g = randn({3, 4}), i = randint(0, 4, {3, 2});
  EXPECT_TRUE(kiln::testing::close(cpu(fg(g.to(kGpu), i.to(kGpu))), gathered(g, i)));
  const std::string how_g = explain(fg, g.to(kGpu), i.to(kGpu)).str();
  EXPECT_NE(how_g.find("no CUDA graph: gather's index check"), std::string::npos) << how_g;
}

}  // namespace
