// The matmul family on GPU tensors through cuBLAS (the emulated driver's host cuBLAS in CI, the
// toolkit's on a GPU with KILN_TEST_REAL_CUDA=1), against kiln's CPU eager ops: every rank case
// of matmul, operand layouts cuBLAS reads in place (row-major, transposed, rows wider than the
// matrix, a batch repeated with stride 0) and ones it cannot (copied first), broadcast batches,
// every float dtype, addmm's alpha and beta, empty dims, integers (on the host's loop).
#include <gtest/gtest.h>
#include <kiln/codegen/cuda.h>
#include <kiln/kiln.h>
#include <kiln/runtime/cuda.h>
#include <kiln/runtime/device_ops.h>

#include <functional>
#include <string>
#include <vector>

#include "../common/close.h"
#include "../emulation/emulated_driver.h"

using namespace kiln;

namespace {

const Device kGpu = Device::cuda();
Tensor cpu(const Tensor& t) { return t.to(Device::cpu()); }

struct Case {
  std::string name;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  std::vector<std::vector<int64_t>> shapes;
};

Tensor values(DType dt, const std::vector<int64_t>& sizes) {
  if (is_floating(dt)) return randn(sizes).to(dt);
  return randint(-5, 6, sizes).to(dt);
}

void expect_matches_cpu(const Case& c, DType dt) {
  SCOPED_TRACE(c.name + " " + std::string(name(dt)));
  std::vector<Tensor> host, dev;
  for (const auto& s : c.shapes) {
    host.push_back(values(dt, s));
    dev.push_back(host.back().to(kGpu));
  }
  Tensor want = c.fn(host);
  Tensor got = c.fn(dev);
  EXPECT_TRUE(got.is_cuda());
  // (16-bit products: both sides accumulate in float32 and round once; the orders differ)
  EXPECT_TRUE(kiln::testing::close(cpu(got), want, {dt == kFloat32 ? 1e-4 : 0, dt == kFloat32 ? 1e-4 : 0}));
}

std::vector<Case> cases() {
  using V = const std::vector<Tensor>&;
  return {
      {"mm", [](V v) { return mm(v[0], v[1]); }, {{7, 37}, {37, 5}}},
      {"a transposed", [](V v) { return matmul(v[0].t(), v[1]); }, {{37, 7}, {37, 5}}},
      {"b transposed", [](V v) { return matmul(v[0], v[1].t()); }, {{7, 37}, {5, 37}}},
      {"both transposed", [](V v) { return matmul(v[0].t(), v[1].t()); }, {{37, 7}, {5, 37}}},
      {"rows wider than the matrix", [](V v) { return matmul(v[0].narrow(1, 3, 20), v[1].narrow(0, 1, 20)); },
       {{7, 37}, {22, 5}}},
      {"a layout cuBLAS cannot read (copied)", [](V v) { return matmul(v[0].as_strided({6, 5}, {10, 2}), v[1]); },
       {{60}, {5, 4}}},
      {"vector . vector", [](V v) { return matmul(v[0], v[1]); }, {{33}, {33}}},
      {"matrix @ vector", [](V v) { return matmul(v[0], v[1]); }, {{9, 33}, {33}}},
      {"vector @ matrix", [](V v) { return matmul(v[0], v[1]); }, {{33}, {33, 9}}},
      {"batch @ batch", [](V v) { return matmul(v[0], v[1]); }, {{3, 7, 37}, {3, 37, 5}}},
      {"batch @ matrix (one product)", [](V v) { return matmul(v[0], v[1]); }, {{3, 7, 37}, {37, 5}}},
      {"matrix @ batch (repeated with stride 0)", [](V v) { return matmul(v[0], v[1]); }, {{7, 12}, {4, 12, 5}}},
      {"broadcast batches", [](V v) { return matmul(v[0], v[1]); }, {{2, 1, 4, 6}, {3, 6, 5}}},
      {"vector @ batch", [](V v) { return matmul(v[0], v[1]); }, {{6}, {3, 6, 5}}},
      {"bmm of transposed matrices", [](V v) { return bmm(v[0].transpose(1, 2), v[1]); }, {{4, 11, 6}, {4, 11, 3}}},
      {"addmm", [](V v) { return addmm(v[0], v[1], v[2], 0.5, 2.0); }, {{5}, {7, 9}, {9, 5}}},
      {"addmm beta 0", [](V v) { return addmm(v[0], v[1], v[2], 0.0, -1.0); }, {{7, 5}, {7, 9}, {9, 5}}},
      {"empty inner dim", [](V v) { return matmul(v[0], v[1]); }, {{3, 0}, {0, 4}}},
      {"no rows", [](V v) { return matmul(v[0], v[1]); }, {{0, 5}, {5, 3}}},
  };
}

TEST(CudaBlas, EveryMatmulCaseMatchesTheCpuInEveryFloatType) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  ASSERT_TRUE(cuda::blas_is_available()) << cuda::blas_unavailable_reason();
  manual_seed(5);
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16})
    for (const Case& c : cases()) expect_matches_cpu(c, dt);
}

TEST(CudaBlas, IntegerProductsRunOnTheHostAndAreExact) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(6);
  for (DType dt : {kInt32, kInt64})
    for (const Case& c : cases()) expect_matches_cpu(c, dt);
}

TEST(CudaBlas, ErrorsAreTheOpsOwn) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  std::string err;
  try {
    matmul(randn({3, 4}).to(kGpu), randn({5, 2}).to(kGpu));
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("[matmul]"), std::string::npos) << err;
  EXPECT_NE(err.find("3x4"), std::string::npos) << err;
  EXPECT_NE(err.find("5x2"), std::string::npos) << err;
}

TEST(CudaBlas, ACompiledMatmulRunsThroughCublasWithItsEpilogueOnTheDevice) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  auto fn = [](const std::vector<Tensor>& v) { return std::vector{relu(matmul(v[0], v[1]) + v[2]), matmul(v[0], v[1]).t()}; };
  auto f = compile(fn);
  Tensor x = randn({16, 24}), w = randn({24, 8}), b = randn({8});
  std::vector<Tensor> in{x.to(kGpu), w.to(kGpu), b.to(kGpu)};
  std::vector<Tensor> got = f(in);
  std::vector<Tensor> want = fn({x, w, b});
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(kiln::testing::close(cpu(got[i]), want[i])) << "output " << i;
  Explanation e = f.explain(in);
  ASSERT_EQ(e.graphs.size(), 1u);
  const std::string& note = e.graphs[0].backend;
  EXPECT_NE(note.find("(cuBLAS)"), std::string::npos) << note;
  EXPECT_EQ(note.find("interpreted"), std::string::npos) << note;
}

// A product a compiled program stores into one of its planned buffers is written there by cuBLAS
// itself: the program's device memory at its peak is that buffer and the output, not a third
// buffer for the product plus a copy of it (attention_scores' 1 GiB scores at the gpu tier).
// Where the store cannot take it (einsum labels coming out permuted, an operand overlapping the
// store) the values still match.
TEST(CudaBlas, CompiledProductsAreWrittenIntoTheirStoreWithoutACopy) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  using V = const std::vector<Tensor>&;
  struct Program {
    std::string name;
    std::function<Tensor(V)> fn;
    std::vector<std::vector<int64_t>> shapes;
    bool direct;  // whether the product can be written into its store
  };
  const std::vector<Program> programs = {
      {"attention scores", [](V v) { return softmax(einsum("bhqd,bhkd->bhqk", {v[0], v[1]}) * 0.125, -1); },
       {{2, 3, 64, 16}, {2, 3, 64, 16}}, true},
      {"mm", [](V v) { return softmax(mm(v[0], v[1]), -1); }, {{96, 40}, {40, 128}}, true},
      {"bmm", [](V v) { return softmax(bmm(v[0], v[1]), -1); }, {{3, 64, 40}, {3, 40, 64}}, true},
      {"matmul, a batch folded into the rows", [](V v) { return softmax(matmul(v[0], v[1]), -1); },
       {{3, 32, 40}, {40, 128}}, true},
      {"matmul, a matrix repeated across the batch", [](V v) { return softmax(matmul(v[0], v[1]), -1); },
       {{32, 24}, {3, 24, 64}}, true},
      {"addmm", [](V v) { return softmax(addmm(v[0], v[1], v[2], 0.5, 2.0), -1); }, {{128}, {96, 40}, {40, 128}}, true},
      {"einsum with its labels permuted (copied)", [](V v) { return softmax(einsum("bij,bjk->bki", {v[0], v[1]}), -1); },
       {{3, 64, 40}, {3, 40, 64}}, false},
  };
  manual_seed(7);
  for (const Program& p : programs) {
    SCOPED_TRACE(p.name);
    std::vector<Tensor> host, dev;
    for (const auto& s : p.shapes) {
      host.push_back(randn(s));
      dev.push_back(host.back().to(kGpu));
    }
    auto f = compile([&](V v) { return std::vector{p.fn(v)}; });
    f(dev);  // (compiles)
    cuda::synchronize();
    const size_t base = cuda::memory_allocated();
    cuda::reset_peak_memory_stats();
    Tensor got = f(dev)[0];
    cuda::synchronize();
    const size_t peak = cuda::max_memory_allocated() - base, bytes = size_t(got.numel()) * 4;
    EXPECT_TRUE(kiln::testing::close(cpu(got), p.fn(host), {1e-4, 1e-5}));
    // the product's buffer and the softmax's output, each `bytes` (the pool rounds up)
    if (p.direct) EXPECT_LT(peak, bytes * 5 / 2) << "peak " << peak << " for results of " << bytes << " bytes";
    else EXPECT_GE(peak, bytes * 3) << "peak " << peak << " for results of " << bytes << " bytes";
  }
}

// The library call behind those stores, given a store an operand reads: x @ w into x itself is
// computed apart and copied over (cuBLAS would read elements it has already written), while a
// store elsewhere in the operand's own storage is written directly.
TEST(CudaBlas, AProductIntoMemoryItsOperandsReadIsComputedApart) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_unavailable_reason();
  manual_seed(8);
  Tensor x = randn({64, 64}), w = randn({64, 64});
  const Tensor want = mm(x, w);
  Tensor xd = x.to(kGpu), wd = w.to(kGpu);
  device_ops::run_library_into(OpId::Mm, std::vector{xd, wd}, {}, xd);
  EXPECT_TRUE(kiln::testing::close(cpu(xd), want, {1e-4, 1e-5}));

  Tensor both = cat({x, zeros({64, 64})}, 0).to(kGpu);  // x in rows 0-63, the store in rows 64-127
  device_ops::run_library_into(OpId::Mm, std::vector{both.narrow(0, 0, 64), wd}, {}, both.narrow(0, 64, 64));
  EXPECT_TRUE(kiln::testing::close(cpu(both.narrow(0, 64, 64)), want, {1e-4, 1e-5}));
  EXPECT_TRUE(kiln::testing::close(cpu(both.narrow(0, 0, 64)), x, {0, 0}));

  // einsum's product into one of its operands: the same
  Tensor q = randn({2, 8, 8}), qd = q.to(kGpu);
  const Tensor want_e = einsum("bij,bjk->bik", {q, q});
  device_ops::run_library_into(OpId::Einsum, std::vector{qd, qd}, {{"equation", std::string("bij,bjk->bik")}}, qd);
  EXPECT_TRUE(kiln::testing::close(cpu(qd), want_e, {1e-4, 1e-5}));
}

}  // namespace
