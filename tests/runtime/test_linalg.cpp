#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "../common/scoped_env.h"
#include "test_util.h"

using namespace kiln;
using kiln::testing::expect_error;
using kiln::testing::expect_values;
using kiln::testing::ScopedEnv;

namespace {
// Reference product through broadcasting and sum, independent of the BLAS path.
Tensor ref_mm(const Tensor& a, const Tensor& b) { return (a.unsqueeze(2) * b.unsqueeze(0)).sum({1}); }
double max_diff(const Tensor& a, const Tensor& b) { return (a.to(kFloat64) - b.to(kFloat64)).abs().max().item<double>(); }

// The libraries float32 products can run on (KILN_CPU_BLAS, read at each product): each is
// tested, and the default (null: unset).
std::vector<const char*> cpu_blas_settings() {
#if KILN_TEST_ONEDNN
  return {"openblas", "onednn", nullptr};
#else
  return {"openblas", nullptr};
#endif
}
}  // namespace

TEST(Linalg, MmAllLayouts) {
  manual_seed(5);
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor a = randn({5, 7}, dt), b = randn({7, 3}, dt);
    Tensor want = ref_mm(a, b);
    EXPECT_LT(max_diff(mm(a, b), want), 1e-4);
    EXPECT_LT(max_diff(mm(a.t().contiguous().t(), b), want), 1e-4);
    EXPECT_LT(max_diff(mm(a, b.t().contiguous().t()), want), 1e-4);
    EXPECT_LT(max_diff(mm(a.slice(1, 0, 7, 1), b.slice(0, 0, 7)), want), 1e-4);
    Tensor big = randn({5, 14}, dt);
    EXPECT_LT(max_diff(mm(big.slice(1, 0, 14, 2), b), ref_mm(big.slice(1, 0, 14, 2), b)), 1e-4);
  }
  Tensor ia = arange(6, kInt32).view({2, 3}), ib = arange(6, kInt32).view({3, 2});
  expect_values(mm(ia, ib), {2, 2}, {10, 13, 28, 40}, 0);
  EXPECT_LT(max_diff(mm(ia.to(kFloat16), ib.to(kFloat16)), mm(ia, ib)), 1e-3);
  expect_error([&] { mm(ia, ia); }, "mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)");
  expect_error([&] { mm(ia, ib.to(kInt64)); }, "same dtype");
}

TEST(Linalg, MatmulRankCases) {
  manual_seed(6);
  Tensor v = randn({4}), w = randn({4}), m = randn({3, 4}), n = randn({4, 5});
  EXPECT_EQ(matmul(v, w).dim(), 0);
  EXPECT_NEAR(matmul(v, w).item<double>(), (v * w).sum().item<double>(), 1e-5);
  EXPECT_EQ(matmul(m, v).sizes().vec(), (std::vector<int64_t>{3}));
  EXPECT_EQ(matmul(v, n).sizes().vec(), (std::vector<int64_t>{5}));
  Tensor b3 = randn({2, 3, 4}), b4 = randn({2, 1, 4, 5});
  EXPECT_EQ(matmul(b3, n).sizes().vec(), (std::vector<int64_t>{2, 3, 5}));
  EXPECT_EQ(matmul(b3, v).sizes().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(matmul(v, b4).sizes().vec(), (std::vector<int64_t>{2, 1, 5}));
  Tensor r = matmul(b3, b4);
  EXPECT_EQ(r.sizes().vec(), (std::vector<int64_t>{2, 2, 3, 5}));
  EXPECT_LT(max_diff(r.index({1, 0}), ref_mm(b3[0], b4.index({1, 0}))), 1e-4);
  EXPECT_LT(max_diff(bmm(b3, b4.squeeze(1)).select(0, 1), ref_mm(b3[1], b4.index({1, 0}))), 1e-4);
  expect_error([&] { matmul(scalar_tensor(1.0), v); }, "at least 1D");
  expect_error([&] { bmm(m, n); }, "3D tensor");
}

TEST(Linalg, AddmmAndEinsum) {
  manual_seed(8);
  Tensor a = randn({3, 4}), b = randn({4, 2}), c = randn({2});
  EXPECT_LT(max_diff(addmm(c, a, b, 0.5, 2.0), c * 0.5 + mm(a, b) * 2.0), 1e-5);
  EXPECT_LT(max_diff(einsum("ij,jk->ik", {a, b}), mm(a, b)), 1e-5);
  EXPECT_LT(max_diff(einsum("ij,jk", {a, b}), mm(a, b)), 1e-5);  // implicit output
  EXPECT_EQ(max_diff(einsum("ij->ji", {a}), a.t()), 0);
  EXPECT_LT(max_diff(einsum("ij->", {a}), a.sum()), 1e-5);
  Tensor sq = randn({4, 4});
  EXPECT_EQ(max_diff(einsum("ii->i", {sq}), sq.diagonal()), 0);
  EXPECT_LT(max_diff(einsum("ii", {sq}), sq.diagonal().sum()), 1e-6);
  Tensor q = randn({2, 3, 5, 8}), k = randn({2, 3, 6, 8});
  Tensor s = einsum("bhqd,bhkd->bhqk", {q, k});
  EXPECT_EQ(s.sizes().vec(), (std::vector<int64_t>{2, 3, 5, 6}));
  EXPECT_LT(max_diff(s, matmul(q, k.transpose(-1, -2))), 1e-4);
  EXPECT_LT(max_diff(einsum("...ij,...jk->...ik", {q, k.transpose(-1, -2)}), s), 1e-4);
  EXPECT_LT(max_diff(einsum("i,j->ij", {c, c}), c.unsqueeze(1) * c), 1e-6);
  EXPECT_LT(max_diff(einsum("ij,ij,ij->i", {a, a, a}), (a * a * a).sum({1})), 1e-5);
  expect_error([&] { einsum("ij,jk->ik", {a}); }, "einsum");
  expect_error([&] { einsum("ijk->i", {a}); }, "does not match the number of dimensions");
  expect_error([&] { einsum("ij->iz", {a}); }, "output subscript z does not appear");
}

// Which library runs float32 products: oneDNN where kiln was built with it, by default for
// products of at least 2^15 multiply-adds. The libraries round differently (they sum a row's
// 512 products in other orders), so the default's bits show which one ran: [8, 512] x [512, 8]
// (2^15) those of KILN_CPU_BLAS=onednn, [8, 511] x [511, 8] those of openblas. A bad setting
// names itself, for float64 products too.
TEST(Linalg, Float32ProductsChooseTheirLibrary) {
  auto product = [](const char* setting, int64_t k) {
    ScopedEnv s("KILN_CPU_BLAS", setting);
    manual_seed(40);
    Tensor a = randn({8, k}), b = randn({k, 8});
    return mm(a, b);
  };
  auto same_bits = [](const Tensor& x, const Tensor& y) { return x.eq(y).all().item<bool>(); };
#if KILN_TEST_ONEDNN
  EXPECT_NE(blas_library().find("oneDNN"), std::string::npos) << blas_library();
  for (int64_t k : {512, 511}) {
    Tensor by_default = product(nullptr, k), one = product("onednn", k), open = product("openblas", k);
    EXPECT_LT(max_diff(one, open), 1e-3);
    // (on a CPU where both libraries happen to sum in the same order there is nothing to tell)
    if (same_bits(one, open)) {
      std::printf("note: oneDNN and OpenBLAS agree to the bit on k = %ld here: which one ran is not checked\n", long(k));
      continue;
    }
    EXPECT_TRUE(same_bits(by_default, k == 512 ? one : open)) << "k = " << k;
  }
#else
  EXPECT_EQ(blas_library().find("oneDNN"), std::string::npos) << blas_library();
  {
    ScopedEnv only("KILN_CPU_BLAS", "onednn");
    expect_error([] { mm(ones({40, 40}), ones({40, 40})); }, "built without oneDNN");
  }
#endif
  ScopedEnv bad("KILN_CPU_BLAS", "mkl");
  expect_error([] { mm(ones({40, 40}), ones({40, 40})); }, "KILN_CPU_BLAS=mkl: expected auto, onednn or openblas");
  // (a product too small for oneDNN reads the setting too, and so does a float64 one)
  expect_error([] { mm(ones({2, 2}), ones({2, 2})); }, "KILN_CPU_BLAS=mkl");
  Tensor d = ones({40, 40}, kFloat64);
  expect_error([&] { mm(d, d); }, "KILN_CPU_BLAS=mkl");
}

// Products large enough to be split across threads (kGemmParallelWork multiply-adds; 2^20 on
// oneDNN, 2^24 under OMP_WAIT_POLICY=PASSIVE, where oneDNN's cases here run whole): by whole
// matrices of a batch, by row slabs and by column slabs of one matrix, with transposed, sliced
// and repeated (batch stride 0) operands and addmm's alpha/beta, each against the reference, on
// each library.
TEST(Linalg, ThreadedProductsCoverEveryPartition) {
  for (const char* blas : cpu_blas_settings()) {
  ScopedEnv setting("KILN_CPU_BLAS", blas);
  SCOPED_TRACE(std::string("KILN_CPU_BLAS=") + (blas ? blas : "(unset)"));
  manual_seed(12);
  for (DType dt : {kFloat32, kFloat64}) {
    const double tol = dt == kFloat32 ? 2e-3 : 1e-9;
    auto check_bmm = [&](const Tensor& a, const Tensor& b) {
      Tensor got = bmm(a, b);
      for (int64_t i = 0; i < a.sizes()[0]; ++i)
        EXPECT_LT(max_diff(got.select(0, i), ref_mm(a.select(0, i), b.select(0, i))), tol) << "batch " << i;
    };
    check_bmm(randn({6, 40, 256}, dt), randn({6, 256, 50}, dt));                  // whole matrices
    check_bmm(randn({3, 70, 256}, dt), randn({3, 50, 256}, dt).transpose(1, 2));  // row slabs, b transposed
    check_bmm(randn({3, 64, 70}, dt).transpose(1, 2), randn({1, 64, 90}, dt).expand({3, 64, 90}));  // a transposed, b repeated
    Tensor wide = randn({8, 300}, dt), tall = randn({300, 700}, dt);                 // column slabs
    EXPECT_LT(max_diff(mm(wide, tall), ref_mm(wide, tall)), tol);
    EXPECT_LT(max_diff(mm(wide, tall.t().contiguous().t()), ref_mm(wide, tall)), tol);
    Tensor rows = randn({200, 130}, dt), cols = randn({260, 150}, dt).slice(0, 0, 260, 2);  // a strided slice
    EXPECT_LT(max_diff(mm(rows, cols), ref_mm(rows, cols)), tol);
    Tensor c = randn({150}, dt);
    EXPECT_LT(max_diff(addmm(c, rows, cols, 0.5, -2.0), c * 0.5 + ref_mm(rows, cols) * -2.0), 2 * tol);
    Tensor q = randn({4, 8, 100, 64}, dt), k = randn({4, 8, 100, 64}, dt);
    Tensor s = einsum("bhqd,bhkd->bhqk", {q, k});
    EXPECT_LT(max_diff(s.index({3, 5}), ref_mm(q.index({3, 5}), k.index({3, 5}).t())), tol);
    // both operands transposed, just over oneDNN's threshold (one thread)
    Tensor at = randn({33, 40}, dt).t(), bt2 = randn({30, 33}, dt).t();
    EXPECT_LT(max_diff(mm(at, bt2), ref_mm(at, bt2)), tol);
    // addmm's beta = 0 ignores its input, NaNs included; a NaN in a row of a spreads along it only
    Tensor nan_in = full({30}, std::nan(""), TensorOptions(dt));
    EXPECT_FALSE(addmm(nan_in, at, bt2, 0.0, 1.0).isnan().any().item<bool>());
    Tensor an = at.contiguous();
    an.index_put_({5, 7}, std::nan(""));
    Tensor rows_nan = mm(an, bt2).isnan().any({1});
    EXPECT_TRUE(rows_nan.index({5}).item<bool>());
    EXPECT_EQ(rows_nan.sum().item<int64_t>(), 1);
  }
  }
}

// Single products of at least 1024 columns run as one BLAS call that OpenBLAS's OpenMP build
// threads over kiln's team when kiln's thread count is OpenMP's (linalg.cpp); with another
// count, or the pthread build, kiln splits them and sets OpenBLAS to one thread meanwhile. The
// eager kernels read KILN_NUM_THREADS once per process, so each count runs in a process of its
// own (this binary again, running the child test below). There: results against the reference
// (one column count over and one under kBlasThreadedMinCols, a transposed operand, addmm's beta,
// a batch of 3 that does not split by whole matrices), the same products from two threads at
// once, and every thread's OpenMP thread count unchanged after.
TEST(Linalg, WideProductsChild) {
  if (!std::getenv("KILN_LINALG_CHILD")) GTEST_SKIP() << "run by Linalg.WideProductsThreadedByTheBlas";
  auto products = [](uint64_t seed) {
    const int before = omp_get_max_threads();
    manual_seed(seed);
    for (DType dt : {kFloat32, kFloat64}) {
      const double tol = dt == kFloat32 ? 2e-3 : 1e-9;
      for (int64_t cols : {1100, 700}) {
        Tensor a = randn({37, 90}, dt), b = randn({90, cols}, dt);
        EXPECT_LT(max_diff(mm(a, b), ref_mm(a, b)), tol) << cols << " columns";
        Tensor bt = randn({cols, 90}, dt).t();
        EXPECT_LT(max_diff(mm(a, bt), ref_mm(a, bt)), tol) << cols << " columns, b transposed";
        Tensor c = randn({cols}, dt);
        EXPECT_LT(max_diff(addmm(c, a, b, 2.0, 0.5), c * 2.0 + ref_mm(a, b) * 0.5), 2 * tol) << cols << " columns";
      }
      Tensor x = randn({3, 20, 40}, dt), y = randn({3, 40, 1030}, dt);
      Tensor got = bmm(x, y);
      for (int64_t i = 0; i < 3; ++i)
        EXPECT_LT(max_diff(got.select(0, i), ref_mm(x.select(0, i), y.select(0, i))), tol) << "batch " << i;
    }
    EXPECT_EQ(omp_get_max_threads(), before) << "a product left this thread's OpenMP thread count changed";
  };
  products(31);
  std::thread other([&] { products(32); });
  products(33);
  other.join();
}

TEST(Linalg, WideProductsThreadedByTheBlas) {
  EXPECT_NE(blas_library().find("OpenBLAS"), std::string::npos) << blas_library();
#if KILN_TEST_OPENMP_BLAS  // (CMake found OpenBLAS's OpenMP build: the binaries must load it)
  EXPECT_NE(blas_library().find("(OpenMP build)"), std::string::npos) << blas_library();
#endif
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (const char* blas : cpu_blas_settings())
  for (const char* threads : {"", "3", "1"}) {
    // (env's -u options before its assignments)
    std::string cmd = std::string("env ") + (*threads ? "" : "-u KILN_NUM_THREADS ") + (blas ? "" : "-u KILN_CPU_BLAS ") +
                      (*threads ? std::string("KILN_NUM_THREADS=") + threads + " " : "") +
                      (blas ? std::string("KILN_CPU_BLAS=") + blas + " " : "") + "KILN_LINALG_CHILD=1 '" + self +
                      "' --gtest_filter=Linalg.WideProductsChild 2>&1";
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    char buf[4096];
    while (p && std::fgets(buf, sizeof buf, p)) out += buf;
    const int status = p ? pclose(p) : -1;
    EXPECT_TRUE(status == 0 && out.find("[  PASSED  ] 1 test") != std::string::npos)
        << "KILN_CPU_BLAS=" << (blas ? blas : "(unset)") << " KILN_NUM_THREADS=" << threads << ":\n" << out;
  }
}
