#include "test_util.h"

#include <cstring>

#include <omp.h>

#include <atomic>
#include <bit>
#include <cstdio>
#include <filesystem>

#include "../../runtime/src/cpu/loop.h"  // (parallel_grain: internal to the runtime)

#include <kiln/runtime/env.h>

using namespace kiln;
using kiln::testing::expect_error;
using kiln::testing::expect_values;

TEST(Reduce, SumMeanProdOverDims) {
  Tensor x = arange(24, kFloat32).view({2, 3, 4});
  EXPECT_EQ(x.sum().item<float>(), 276.0f);
  expect_values(x.sum({1}), {2, 4}, {12, 15, 18, 21, 48, 51, 54, 57}, 0);
  expect_values(x.sum({0, 2}, true), {1, 3, 1}, {60, 92, 124}, 0);
  expect_values(x.sum({-1}), {2, 3}, {6, 22, 38, 54, 70, 86}, 0);
  // a permuted input takes the "innermost dim kept" path
  expect_values(x.permute({2, 0, 1}).sum({1, 2}), {4}, {60, 66, 72, 78}, 0);
  expect_values(x.mean({2}), {2, 3}, {1.5, 5.5, 9.5, 13.5, 17.5, 21.5});
  expect_values(from_vector<int32_t>({1, 2, 3, 4}).prod(), {}, {24}, 0);
  EXPECT_EQ(from_vector<int32_t>({1}).sum().dtype(), kInt64);
  EXPECT_EQ(ones({3}, kBool).sum().item<int64_t>(), 3);
  EXPECT_EQ(x.sum({1}, false, kFloat64).dtype(), kFloat64);
  expect_error([&] { arange(3).mean(); }, "could not infer output dtype");
  expect_error([&] { x.sum({1, 1}); }, "appears multiple times");
  expect_error([&] { x.sum({3}); }, "Dimension out of range (expected to be in range of [-3, 2], but got 3)");
}

TEST(Reduce, EmptyAndZeroDim) {
  EXPECT_EQ(zeros({0}).sum().item<float>(), 0.0f);
  EXPECT_EQ(zeros({0}).prod().item<float>(), 1.0f);
  EXPECT_TRUE(std::isnan(zeros({0}).mean().item<float>()));
  expect_values(zeros({2, 0}).sum({1}), {2}, {0, 0}, 0);
  EXPECT_EQ(zeros({0, 3}).sum({0}).sizes().vec(), (std::vector<int64_t>{3}));
  expect_error([] { zeros({0}).max(); }, "Expected reduction dim to be specified");
  expect_error([] { zeros({0, 2}).amax({0}); }, "Expected reduction dim 0 to have non-zero size");
  Tensor s = scalar_tensor(5.0);
  EXPECT_EQ(s.sum({0}).item<float>(), 5.0f);
  EXPECT_EQ(s.amax().item<float>(), 5.0f);
}

TEST(Reduce, AccurateFloatSums) {
  // 1 + many tiny values: a naive float accumulator loses them all
  Tensor x = full({1 << 20}, 1e-8, kFloat32);
  x.index({0}) = 1.0;
  EXPECT_NEAR(x.sum().item<double>(), 1.0 + 1e-8 * ((1 << 20) - 1), 1e-6);
  manual_seed(7);
  Tensor d = randn({1000003}, kFloat64);
  std::vector<double> v = d.to_vector<double>();
  long double ref = 0;
  for (double e : v) ref += e;
  EXPECT_NEAR(d.sum().item<double>(), double(ref), 1e-9);
}

TEST(Reduce, ExtremaNaNAndIndices) {
  Tensor x = from_vector<float>({3, 1, 4, 1, 5, 9, 2, 6}, {2, 4});
  expect_values(x.amax({1}), {2}, {4, 9}, 0);
  expect_values(x.amin({0}), {4}, {3, 1, 2, 1}, 0);
  auto [v, i] = x.max(1);
  expect_values(v, {2}, {4, 9}, 0);
  expect_values(i, {2}, {2, 1}, 0);
  auto [mv, mi] = x.min(1, true);
  EXPECT_EQ(mi.sizes().vec(), (std::vector<int64_t>{2, 1}));
  expect_values(mi, {2, 1}, {1, 2}, 0);  // first occurrence wins
  EXPECT_EQ(x.argmax().item<int64_t>(), 5);
  expect_values(x.argmin(0), {4}, {0, 0, 1, 0}, 0);
  Tensor n = from_vector<float>({1, NAN, 3});
  EXPECT_TRUE(std::isnan(n.max().item<float>()));
  EXPECT_EQ(n.argmax().item<int64_t>(), 1);
  EXPECT_EQ(nansum(n).item<float>(), 4.0f);
}

TEST(Reduce, NormVarStdAnyAll) {
  Tensor x = from_vector<double>({3, -4, 0, 12}, {2, 2});
  expect_values(x.norm(), {}, {13}, 1e-12);
  expect_values(x.norm(1, {1}), {2}, {7, 12}, 1e-12);
  expect_values(x.norm(INFINITY, {0}), {2}, {3, 12}, 0);
  Tensor v = from_vector<double>({1, 2, 3, 4});
  expect_values(v.var(), {}, {5.0 / 3}, 1e-12);
  expect_values(v.var({}, 0), {}, {1.25}, 1e-12);
  expect_values(v.std({0}, 1, true), {1}, {std::sqrt(5.0 / 3)}, 1e-12);
  Tensor b = from_vector(std::vector<bool>{false, true, false, false}, {2, 2});
  expect_values(b.any({1}), {2}, {1, 0}, 0);
  expect_values(b.all({0}), {2}, {0, 0}, 0);
  EXPECT_EQ(ones({2}, kUInt8).any().dtype(), kUInt8);
  EXPECT_EQ(ones({2}, kFloat32).all().dtype(), kBool);
  expect_error([] { arange(4).norm(); }, "floating point");
}

// var and std of a whole tensor take two float64 passes straight over it (each split across
// the threads, long enough here to be): against a long double reference, float32 and float64,
// contiguous, transposed and strided, a large offset (the mean matters), every correction and
// keepdim; NaN and infinity give NaN; one element with correction 1 divides by zero.
TEST(Reduce, VarOfAWholeTensorInTwoPasses) {
  manual_seed(5);
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor base = (randn({700, 331}, kFloat64) * 3 + 1000).to(dt);
    for (const Tensor& x : {base, base.t(), base.slice(1, 0, 331, 2)}) {
      SCOPED_TRACE(std::string(name(dt)) + (x.is_contiguous() ? " contiguous" : " strided"));
      const std::vector<double> v = x.contiguous().to(kFloat64).to_vector<double>();
      long double s = 0, ss = 0;
      for (double e : v) s += e;
      const long double m = s / v.size();
      for (double e : v) ss += (e - m) * (e - m);
      for (int64_t c : {0, 1, 5}) {
        const double want = double(ss / (v.size() - c));
        const double tol = dt == kFloat32 ? 1e-6 * want : 1e-12 * want;
        EXPECT_NEAR(x.var({}, c).item<double>(), want, tol) << "correction " << c;
        EXPECT_NEAR(x.std({0, 1}, c, true).item<double>(), std::sqrt(want), tol) << "correction " << c;
        EXPECT_EQ(x.var({}, c, true).sizes().vec(), (std::vector<int64_t>{1, 1}));
        EXPECT_EQ(x.var({}, c).dtype(), dt);
      }
    }
    Tensor bad = base.clone();
    bad.index({3, 7}) = NAN;
    EXPECT_TRUE(std::isnan(bad.var().item<double>()));
    bad.index({3, 7}) = INFINITY;
    EXPECT_TRUE(std::isnan(bad.std().item<double>()));
    EXPECT_TRUE(std::isnan(full({1}, 2.0, dt).var().item<double>()));  // 0 / 0
    EXPECT_EQ(full({1}, 2.0, dt).var({}, 0).item<double>(), 0.0);
  }
}

TEST(Reduce, SoftmaxLogSoftmaxLogsumexpCumsum) {
  Tensor x = from_vector<float>({1, 2, 3, 1000, 1000, 1000}, {2, 3});
  Tensor s = softmax(x, -1);
  expect_values(s.sum({1}), {2}, {1, 1});
  expect_values(s.select(0, 1), {3}, {1.0 / 3, 1.0 / 3, 1.0 / 3});
  expect_values(log_softmax(x, 1).select(0, 0), {3}, {-2.40760596, -1.40760596, -0.40760596}, 1e-5);
  expect_values(softmax(x, 0).select(1, 0), {2}, {0, 1});
  expect_values(logsumexp(x, {1}), {2}, {3.40760596, 1001.09861229}, 1e-5);
  Tensor ninf = full({2}, -INFINITY);
  EXPECT_EQ(logsumexp(ninf, {0}).item<float>(), -INFINITY);
  expect_values(cumsum(arange(5), 0), {5}, {0, 1, 3, 6, 10}, 0);
  expect_values(cumsum(arange(6, kFloat32).view({2, 3}), 0), {2, 3}, {0, 1, 2, 3, 5, 7}, 0);
  EXPECT_EQ(cumsum(ones({2}, kInt8), 0).dtype(), kInt64);
}

// Contiguous float32 rows take the vector path (the row max by vectors, a NaN anywhere in the
// row turning it all NaN), here rows of 37: two vectors of 16 and a tail of 5. Each row matches
// the float64 rows (the scalar path) wherever the row holds its NaN or largest value (a max
// missed would make exp overflow).
TEST(Reduce, SoftmaxRowsByVectorsKeepNaNAndTheMax) {
  manual_seed(3);
  const int64_t n = 37;
  Tensor x = randn({8, n});
  std::vector<float> v = x.to_vector<float>();
  v[size_t(0 * n + 3)] = NAN;        // a NaN in the first vector
  v[size_t(1 * n + 20)] = NAN;       // in the second
  v[size_t(2 * n + 35)] = NAN;       // in the tail
  v[size_t(3 * n + 34)] = 100.0f;    // the row's max in the tail (exp overflows from any other shift)
  v[size_t(4 * n + 17)] = 100.0f;    // in a vector
  v[size_t(5 * n + 9)] = INFINITY;   // a row with +inf: NaN, as in PyTorch
  v[size_t(6 * n + 36)] = -INFINITY;  // -inf takes no share
  x = from_vector<float>(v, {8, n});
  for (bool log_form : {false, true}) {
    Tensor got = log_form ? log_softmax(x, 1) : softmax(x, 1);
    Tensor want = (log_form ? log_softmax(x.to(kFloat64), 1) : softmax(x.to(kFloat64), 1)).to(kFloat32);
    std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
    for (int64_t r = 0; r < 8; ++r)
      for (int64_t c = 0; c < n; ++c) {
        const size_t i = size_t(r * n + c);
        if (r == 0 || r == 1 || r == 2 || r == 5) {
          EXPECT_TRUE(std::isnan(g[i])) << "row " << r << " col " << c;
        } else if (std::isinf(w[i])) {
          EXPECT_EQ(g[i], w[i]) << "row " << r << " col " << c;
        } else {
          EXPECT_NEAR(g[i], w[i], 1e-6 * std::max(1.0f, std::fabs(w[i]))) << "row " << r << " col " << c;
        }
      }
  }
  EXPECT_NEAR(softmax(x, 1).select(0, 3).select(0, 34).item<float>(), 1.0f, 1e-6);
}

// Contiguous float32 and float64 rows go by vectors (kiln's float32 exp, SLEEF's float64 one):
// against softmax written out in long double, within a few ulps of the largest term, in both
// forms, with NaN rows, the max in the tail, +inf (NaN), -inf (no share) and an all -inf row
// (NaN, as in PyTorch), over rows shorter than a vector, of one vector, one and a half and more.
template <typename T>
void expect_softmax_rows_match_long_double(DType dtype, double ulps) {
  manual_seed(5);
  for (int64_t n : {1, 2, 5, 8, 15, 16, 17, 31, 33, 37, 1000}) {
    // (40 rows where log_softmax takes 16 float32 or 8 float64 rows a group, rows of 64 or
    // fewer, so that the last group is part of one. Rows of 1000 stay 8 as before: with more,
    // some float32 sum of 1000 terms in 8 lanes rounds past the 4 ulps asked here.)
    const int64_t rows = n <= 64 ? 40 : 8;
    std::vector<T> v = (randn({rows, n}, dtype) * 5).template to_vector<T>();
    v[size_t(0 * n + 3 % n)] = NAN;
    v[size_t(1 * n + (n >= 2 ? n - 2 : 0))] = NAN;   // in the tail
    v[size_t(2 * n + n - 1)] = T(80);                // the max in the tail (exp overflows from any other shift)
    v[size_t(3 * n + 5 % n)] = INFINITY;             // NaN, as in PyTorch
    v[size_t(4 * n + 6 % n)] = -INFINITY;            // no share
    for (int64_t c = 0; c < n; ++c) v[size_t(5 * n + c)] = -INFINITY;  // NaN
    const Tensor x = from_vector<T>(v, {rows, n});
    for (bool log_form : {false, true}) {
      const std::vector<T> got = (log_form ? log_softmax(x, 1) : softmax(x, 1)).template to_vector<T>();
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = v.data() + r * n;
        long double mx = -INFINITY, sum = 0;
        for (int64_t c = 0; c < n; ++c) mx = std::max<long double>(mx, row[c]);
        for (int64_t c = 0; c < n; ++c) sum += std::exp((long double)row[c] - mx);
        for (int64_t c = 0; c < n; ++c) {
          const double g = got[size_t(r * n + c)];
          SCOPED_TRACE(std::string(name(dtype)) + " n " + std::to_string(n) + " row " + std::to_string(r) + " col " +
                       std::to_string(c) + (log_form ? " log" : ""));
          if (r <= 1 || r == 3 || r == 5 || (r == 4 && n == 1)) {
            EXPECT_TRUE(std::isnan(g));
            continue;
          }
          const long double want = log_form ? (long double)row[c] - mx - std::log(sum) : std::exp((long double)row[c] - mx) / sum;
          const double eps = std::numeric_limits<T>::epsilon() * ulps;
          if (std::isinf(double(want))) EXPECT_EQ(g, double(want));
          else EXPECT_NEAR(g, double(want), eps * std::max({1.0, std::fabs(double(want)), std::fabs(double(row[c] - mx))}));
        }
      }
    }
  }
}

TEST(Reduce, Float32AndFloat64SoftmaxRowsByVectors) {
  expect_softmax_rows_match_long_double<float>(kFloat32, 4);
  expect_softmax_rows_match_long_double<double>(kFloat64, 18);
}

// softmax over a strided dim of a large tensor runs its rows contiguous (a tiled transpose there
// and back), and 16-bit rows run in float32 by vectors: each matches the float64 softmax to the
// dtype's rounding, in both forms, over dim 0 and 1 of [300, 200] and dim 1 of a [4, 3, 5000].
TEST(Reduce, SoftmaxOverAStridedDimAndIn16BitFloats) {
  manual_seed(8);
  Tensor base = randn({300, 200}) * 4;
  Tensor b3 = randn({4, 3, 5000});
  for (DType d : {kFloat32, kFloat16, kBFloat16}) {
    const double tol = d == kFloat32 ? 2e-6 : d == kFloat16 ? 2e-3 : 1.6e-2;
    for (auto [x, dim] : {std::pair{base, int64_t(0)}, std::pair{base, int64_t(1)}, std::pair{b3, int64_t(1)}}) {
      Tensor xd = x.to(d);
      for (bool log_form : {false, true}) {
        Tensor got = (log_form ? log_softmax(xd, dim) : softmax(xd, dim)).to(kFloat64);
        Tensor want = log_form ? log_softmax(xd.to(kFloat64), dim) : softmax(xd.to(kFloat64), dim);
        EXPECT_EQ(got.sizes().vec(), x.sizes().vec());
        // relative, against max(|want|, floor): log-probabilities near 0 against 1, and 16-bit
        // probabilities below float16's normals (which underflow) against 1e-4
        const double floor = log_form ? 1.0 : d == kFloat32 ? 1e-30 : 1e-4;
        const double err = ((got - want).abs() / want.abs().clamp(floor)).amax().item<double>();
        EXPECT_LT(err, tol) << name(d) << " dim " << dim << (log_form ? " log" : "");
      }
    }
  }
}

// cumsum of a contiguous tensor along an outer dim steps whole rows (a running sum per inner
// position, in blocks of 512): the same sums in the same order as the walk down each column
// that a strided view of the same values takes, bit for bit, in float32 (float64 sums), float64,
// bfloat16 and int32 (into int64), over dim 0 and a middle dim, inner sizes past a block.
TEST(Reduce, CumsumAlongAnOuterDimByRows) {
  manual_seed(12);
  for (DType d : {kFloat32, kFloat64, kBFloat16, kInt32}) {
    Tensor x = (randn({6, 40, 700}) * 100).to(d);
    for (int64_t dim : {int64_t(0), int64_t(1)}) {
      Tensor strided = stack({x, x}, -1).select(-1, 0);
      ASSERT_FALSE(strided.is_contiguous());
      Tensor got = cumsum(x, dim), want = cumsum(strided, dim);
      ASSERT_EQ(got.dtype(), want.dtype());
      EXPECT_TRUE(eq(got, want).all().item<bool>()) << name(d) << " dim " << dim;
    }
  }
  // and the running sums themselves, against float64 ones
  Tensor y = randn({300, 70});
  std::vector<double> v = y.to_vector<double>(), c = cumsum(y, 0).to_vector<double>();
  std::vector<double> acc(70, 0.0);
  double worst = 0;
  for (int64_t i = 0; i < 300; ++i)
    for (int64_t j = 0; j < 70; ++j) {
      acc[size_t(j)] += v[size_t(i * 70 + j)];
      worst = std::max(worst, std::abs(c[size_t(i * 70 + j)] - double(float(acc[size_t(j)]))));
    }
  EXPECT_EQ(worst, 0.0);
}

// max/min with indices and argmax/argmin over contiguous float rows take two passes (the
// extremum by vectors, then its first occurrence); a strided view takes the one-element walk.
// Both give the same index and the same element: the first of repeated extrema, the first NaN,
// the first zero of a -0.0 / 0.0 tie with its sign, and a row of -inf.
TEST(Reduce, ArgExtremaOfFloatRowsMatchTheWalk) {
  manual_seed(14);
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {  // (16-bit rows: widened first)
    std::vector<double> v = (randn({8, 150}) * 3).to_vector<double>();
    auto at = [&](int64_t r, int64_t c) -> double& { return v[size_t(r * 150 + c)]; };
    at(0, 10) = 20, at(0, 90) = 20, at(0, 11) = -20, at(0, 140) = -20;  // repeated extrema
    at(1, 70) = NAN, at(1, 100) = NAN;                                  // the first NaN wins
    for (int64_t c = 0; c < 150; ++c) at(2, c) = c % 3 == 0 ? 0.0 : -1.0;
    at(2, 0) = -0.0;                                                    // -0.0 first, then 0.0s
    for (int64_t c = 0; c < 150; ++c) at(3, c) = -INFINITY;
    at(4, 149) = 50;                                                    // the last element
    Tensor x = from_vector<double>(v, {8, 150}).to(d);
    Tensor strided = stack({x, x}, -1).select(-1, 0);
    for (bool is_max : {true, false}) {
      auto [gv, gi] = is_max ? max(x, 1) : min(x, 1);
      auto [wv, wi] = is_max ? max(strided, 1) : min(strided, 1);
      EXPECT_EQ(gi.to_vector<int64_t>(), wi.to_vector<int64_t>()) << name(d) << (is_max ? " max" : " min");
      EXPECT_EQ((is_max ? argmax(x, 1) : argmin(x, 1)).to_vector<int64_t>(), wi.to_vector<int64_t>());
      std::vector<double> a = gv.to_vector<double>(), b = wv.to_vector<double>();
      for (size_t r = 0; r < a.size(); ++r) {
        EXPECT_TRUE(std::memcmp(&a[r], &b[r], sizeof(double)) == 0 || (std::isnan(a[r]) && std::isnan(b[r])))
            << name(d) << " row " << r << ": " << a[r] << " vs " << b[r];
      }
    }
    EXPECT_EQ(argmax(x, 1).index({1}).item<int64_t>(), 70);
    EXPECT_EQ(argmax(x, 1).index({0}).item<int64_t>(), 10);
    EXPECT_EQ(argmin(x, 1).index({0}).item<int64_t>(), 11);
    EXPECT_TRUE(std::signbit(std::get<0>(max(x, 1)).index({2}).item<double>()));
  }
}

TEST(Reduce, LargeRowAndColumnSums) {
  manual_seed(11);
  Tensor x = randn({300, 500}, kFloat64);
  Tensor rows = x.sum({1}), cols = x.sum({0});
  std::vector<double> v = x.to_vector<double>();
  for (int r : {0, 150, 299}) {
    double ref = 0;
    for (int c = 0; c < 500; ++c) ref += v[size_t(r * 500 + c)];
    EXPECT_NEAR(rows.index({r}).item<double>(), ref, 1e-10);
  }
  for (int c : {0, 250, 499}) {
    double ref = 0;
    for (int r = 0; r < 300; ++r) ref += v[size_t(r * 500 + c)];
    EXPECT_NEAR(cols.index({c}).item<double>(), ref, 1e-10);
  }
}

// Sums over an outer dim (x.sum(0)) accumulate blocks of up to 256 columns four rows a pass,
// and a narrow matrix's rows run in slices of 1024, each summed from zero, the slices then added
// in order: the documented order written out here, bit for bit, with addends of very different
// sizes so that another order would round differently. Shapes: [4100, 16] (one block, five
// slices, rows that follow one another), [1030, 300] (two blocks, no slices, a tail of two rows)
// and [2051, 3] (three slices, the last of three rows); float64, float16 (widened, float32
// accumulators) and int64; max with a NaN, var, and any and all on a sliced bool column.
TEST(Reduce, OuterDimSumsInSlicesInTheDocumentedOrder) {
  manual_seed(19);
  // (whole slices in groups of four and one shorter; two groups, the second of two; whole
  // slices only; one row of outputs every second column, so not contiguous along the outputs)
  for (auto [rows, cols, gap] : {std::tuple<int64_t, int64_t, bool>{4100, 16, false}, {1030, 300, false},
                                 {2051, 3, false}, {7000, 8, false}, {8192, 5, false}, {6200, 4, true}}) {
    SCOPED_TRACE("[" + std::to_string(rows) + ", " + std::to_string(cols) + "]" + (gap ? " every second column" : ""));
    const int64_t slice = cols < 8 * 256 && rows >= 2048 ? 1024 : rows;
    Tensor x = randn({rows, cols}, kFloat64) * exp(randn({rows, cols}, kFloat64) * 8);
    if (gap) x = stack({x, randn({rows, cols}, kFloat64)}, 2).reshape({rows, 2 * cols}).slice(1, 0, 2 * cols, 2);
    ASSERT_EQ(x.stride(1), gap ? 2 : 1);
    auto documented = [&](const std::vector<double>& v, auto acc0) {
      std::vector<double> want(static_cast<size_t>(cols));
      for (int64_t c = 0; c < cols; ++c) {
        decltype(acc0) total = 0;
        for (int64_t lo = 0; lo < rows; lo += slice) {
          decltype(acc0) part = 0;
          for (int64_t r = lo; r < std::min(rows, lo + slice); ++r) part += decltype(acc0)(v[size_t(r * cols + c)]);
          total = lo == 0 ? part : total + part;
        }
        want[size_t(c)] = double(total);
      }
      return want;
    };
    EXPECT_EQ(x.sum({0}).to_vector<double>(), documented(x.to_vector<double>(), 0.0));
    const Tensor h = x.clamp(-60000, 60000).to(kFloat16);
    std::vector<double> hw = documented(h.to(kFloat64).to_vector<double>(), 0.0f);
    for (double& w : hw) w = double(float(Half(float(w))));
    EXPECT_EQ(h.sum({0}).to(kFloat64).to_vector<double>(), hw);
    const Tensor i = (x.clamp(-1e15, 1e15)).to(kInt64);
    EXPECT_EQ(i.sum({0}).to(kFloat64).to_vector<double>(), documented(i.to(kFloat64).to_vector<double>(), int64_t(0)));
    // max: the same in any order, NaN in the column that has one
    std::vector<double> v = x.to_vector<double>();
    v[size_t((rows - 2) * cols + 1)] = NAN;
    const std::vector<double> mx = from_vector<double>(v, {rows, cols}).amax({0}).to_vector<double>();
    for (int64_t c = 0; c < cols; ++c) {
      double m = -INFINITY;
      for (int64_t r = 0; r < rows; ++r) m = std::max(m, v[size_t(r * cols + c)]);
      if (c == 1) EXPECT_TRUE(std::isnan(mx[size_t(c)]));
      else EXPECT_EQ(mx[size_t(c)], m) << "col " << c;
    }
    // var: the slices' moments combine
    const Tensor u = randn({rows, cols}, kFloat64) + 3;
    const std::vector<double> uv = u.to_vector<double>(), var = u.var({0}).to_vector<double>();
    for (int64_t c = 0; c < cols; ++c) {
      long double mean = 0, ss = 0;
      for (int64_t r = 0; r < rows; ++r) mean += uv[size_t(r * cols + c)];
      mean /= rows;
      for (int64_t r = 0; r < rows; ++r) ss += (uv[size_t(r * cols + c)] - mean) * (uv[size_t(r * cols + c)] - mean);
      EXPECT_NEAR(var[size_t(c)], double(ss / (rows - 1)), 1e-12) << "col " << c;
    }
    // any and all: one true (false) in the last slice, one in the first
    Tensor b = zeros({rows, cols}, kBool);
    b.index({rows - 1, 0}) = true;
    b.index({3, cols - 1}) = true;
    const std::vector<bool> any = b.any({0}).to_vector<bool>(), all = b.logical_not().all({0}).to_vector<bool>();
    for (int64_t c = 0; c < cols; ++c) {
      const bool hit = c == 0 || c == cols - 1;
      EXPECT_EQ(bool(any[size_t(c)]), hit) << "col " << c;
      EXPECT_EQ(bool(all[size_t(c)]), !hit) << "col " << c;
    }
  }
}

TEST(Reduce, ThreadedFullReductionAndVectorExtrema) {
  manual_seed(13);
  Tensor x = randn({1 << 20}, kFloat64);
  std::vector<double> v = x.to_vector<double>();
  long double ref = 0;
  double mx = -INFINITY;
  for (double e : v) ref += e, mx = std::max(mx, e);
  EXPECT_NEAR(x.sum().item<double>(), double(ref), 1e-9);
  EXPECT_EQ(x.amax().item<double>(), mx);
  EXPECT_EQ(x.view({1024, 1024}).sum().item<double>(), x.sum().item<double>());
  x.index({777777}) = NAN;
  EXPECT_TRUE(std::isnan(x.amax().item<double>()));
  EXPECT_TRUE(std::isnan(x.amin().item<double>()));
  Tensor rows = randn({64, 1000});
  rows.index({3, 500}) = NAN;
  Tensor m = rows.amax({1});
  EXPECT_TRUE(std::isnan(m.index({3}).item<float>()));
  EXPECT_FALSE(std::isnan(m.index({4}).item<float>()));
}

// Contiguous float32 and float64 runs of amax, amin and nansum update their lanes by vectors (max and min
// four blocks of 16 at a time); a strided run takes the scalar lanes. Both give the same result:
// equal extrema (NaN wherever the row has one) and nansum bit for bit, over rows of 203 (three
// steps of 64, then 16s, then a tail of 11) and 5000 (split pairwise) and over everything.
TEST(Reduce, FloatExtremaAndNanSumByVectorsMatchTheScalarLanes) {
  manual_seed(17);
  for (int64_t n : {int64_t(203), int64_t(5000)}) {
    std::vector<float> v = randn({9, n}).to_vector<float>();
    auto at = [&](int64_t r, int64_t c) -> float& { return v[size_t(r * n + c)]; };
    at(0, 5) = NAN;            // in a block of 64
    at(1, 200) = NAN;          // in the tail
    at(2, 180) = NAN;          // in a block of 16
    at(3, 7) = 50, at(3, 8) = -50;      // the extrema in the first block
    at(4, 201) = 50, at(4, 202) = -50;  // in the tail
    at(5, 190) = INFINITY, at(5, 191) = -INFINITY;
    at(6, 100) = NAN, at(6, 101) = INFINITY;
    for (int64_t c = 0; c < n; ++c) at(7, c) = -INFINITY;  // a row of -inf
    for (DType d : {kFloat32, kFloat64}) {
      Tensor x = from_vector<float>(v, {9, n}).to(d);
      Tensor strided = x.t().contiguous().t();  // the same values, each row at a stride
      ASSERT_NE(strided.strides()[1], 1);
      for (auto op : {+[](const Tensor& t, IntArrayRef r) { return amax(t, r); },
                      +[](const Tensor& t, IntArrayRef r) { return amin(t, r); },
                      +[](const Tensor& t, IntArrayRef r) { return nansum(t, r); }}) {
        for (std::vector<int64_t> dims : {std::vector<int64_t>{1}, std::vector<int64_t>{}}) {
          std::vector<double> got = op(x, dims).contiguous().to_vector<double>(),
                              want = op(strided, dims).contiguous().to_vector<double>();
          ASSERT_EQ(got.size(), want.size());
          for (size_t i = 0; i < got.size(); ++i) {
            if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got[i])) << name(d) << " n " << n << " at " << i;
            else EXPECT_EQ(got[i], want[i]) << name(d) << " n " << n << " at " << i;
          }
        }
      }
      EXPECT_TRUE(std::isnan(amax(x, {1}).index({1}).item<double>()));
      EXPECT_EQ(amax(x, {1}).index({4}).item<double>(), 50.0);
      EXPECT_EQ(amin(x, {1}).index({4}).item<double>(), -50.0);
      EXPECT_EQ(amax(x, {1}).index({5}).item<double>(), INFINITY);
      EXPECT_TRUE(std::isnan(amin(x, {1}).index({6}).item<double>()));
      EXPECT_EQ(amax(x, {1}).index({7}).item<double>(), -INFINITY);
    }
  }
}

// A full reduction over threads cuts the run into one slice per thread, whole vectors each:
// lengths just past a multiple of the threads' vectors (the remainder once fell off the end),
// at whatever thread count this process has, and at the counts of common machines.
TEST(Reduce, ThreadedFullReductionsCoverTheWholeRun) {
  std::vector<int64_t> lengths;
  for (int64_t nt : {int64_t(kiln::env::num_threads()), int64_t(2), int64_t(3), int64_t(8), int64_t(16)}) {
    const int64_t step = nt * 16, m = (4 * 32768 + step - 1) / step;  // (whole vectors per thread; split: 4 grains at least)
    for (int64_t r : {int64_t(1), nt - 1})
      if (r > 0) lengths.push_back(step * m + r);
  }
  for (int64_t n : lengths) {
    SCOPED_TRACE("length " + std::to_string(n));
    EXPECT_EQ(ones({n}).sum().item<double>(), double(n));
    EXPECT_EQ(ones({n}, kInt64).sum().item<int64_t>(), n);
    EXPECT_EQ(arange(n, kFloat64).amax().item<double>(), double(n - 1));
    EXPECT_EQ(ones({n}).mean().item<double>(), 1.0);
  }
}

// A run's order of operations, as reduce.h defines it (runs up to 4096 long): element i goes
// into lane i % 16 by whole blocks of 16, the rest into lane 0 in turn, then the lanes fold in
// halves (lane j with lane j + 8, then j + 4, ...). Where the reduced dim is not the innermost
// (rows at a stride), each output accumulates its elements in turn. Sums and extrema over rows
// of every length class, contiguous and strided, give exactly that, bit for bit: rows of zeros
// of random signs make max's result depend on the order, and float64 sums of wide magnitudes
// round differently in other orders, and so do their products. (NaN rows give NaN; which NaN's
// payload is not specified.)
template <typename T, typename F>
T lane_order_reference(const T* x, int64_t n, T identity, F reduce) {
  T lanes[16];
  for (T& l : lanes) l = identity;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) lanes[j] = reduce(lanes[j], x[i + j]);
  for (; i < n; ++i) lanes[0] = reduce(lanes[0], x[i]);
  for (int w = 8; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) lanes[j] = reduce(lanes[j], lanes[j + w]);
  return lanes[0];
}
template <typename T, typename F>
T in_turn_reference(const T* x, int64_t n, T identity, F reduce) {
  T acc = identity;
  for (int64_t i = 0; i < n; ++i) acc = reduce(acc, x[i]);
  return acc;
}

template <typename T>
void check_lane_order(DType d) {
  manual_seed(23);
  auto max_step = [](T a, T x) { return x > a || x != x ? x : a; };
  auto min_step = [](T a, T x) { return x < a || x != x ? x : a; };
  auto add = [](T a, T x) { return a + x; };
  auto mul = [](T a, T x) { return a * x; };
  auto same = [](T a, T b) { return std::memcmp(&a, &b, sizeof(T)) == 0 || (a != a && b != b); };
  for (int64_t n : {1, 5, 10, 15, 16, 17, 31, 48, 64, 100, 203, 1000}) {
    const int64_t rows = 12;
    std::vector<double> r = (randn({rows, n}) * 4).to_vector<double>();
    std::vector<double> u = rand({rows, n}).to_vector<double>();
    std::vector<T> v(size_t(rows * n));
    for (int64_t i = 0; i < rows * n; ++i) {
      const int64_t row = i / n;
      if (row < 4) v[size_t(i)] = u[size_t(i)] < 0.5 ? T(-0.0) : T(0.0);  // zeros of random signs
      else if (row < 6) v[size_t(i)] = u[size_t(i)] < 0.1 ? std::numeric_limits<T>::quiet_NaN() : T(r[size_t(i)]);
      else v[size_t(i)] = T(r[size_t(i)] * std::exp(3 * r[size_t(i)]));  // wide magnitudes
    }
    Tensor x = from_vector<T>(v, {rows, n});
    ASSERT_EQ(x.dtype(), d);
    Tensor strided = x.t().contiguous().t();
    for (const Tensor& t : {x, strided}) {
      const bool lanes = t.is_contiguous();
      const std::vector<T> mx = amax(t, {1}).template to_vector<T>(), mn = amin(t, {1}).template to_vector<T>(),
                           sm = sum(t, {1}).template to_vector<T>(), pr = prod(t, {1}).template to_vector<T>();
      for (int64_t row = 0; row < rows; ++row) {
        const T* p = v.data() + row * n;
        SCOPED_TRACE(std::string(name(d)) + " n " + std::to_string(n) + " row " + std::to_string(row) +
                     (lanes ? " contiguous" : " strided"));
        auto want = [&](T identity, auto step) {
          return lanes ? lane_order_reference<T>(p, n, identity, step) : in_turn_reference<T>(p, n, identity, step);
        };
        EXPECT_TRUE(same(mx[size_t(row)], want(-INFINITY, max_step)));
        EXPECT_TRUE(same(mn[size_t(row)], want(INFINITY, min_step)));
        // (float32 sums accumulate in float64, not in this reference)
        if (std::is_same_v<T, double>) {
          EXPECT_TRUE(same(sm[size_t(row)], want(T(0), add)));
          EXPECT_TRUE(same(pr[size_t(row)], want(T(1), mul)));
        }
      }
    }
  }
}

TEST(Reduce, RunsFoldTheirLanesInTheDocumentedOrder) {
  check_lane_order<float>(kFloat32);
  check_lane_order<double>(kFloat64);
}

// cumsum of contiguous 16-bit rows scans widened blocks: the same values, bit for bit, as the
// element-wise scan a strided row takes.
TEST(Reduce, SixteenBitCumsumRowsByWidenedBlocks) {
  manual_seed(41);
  for (DType d : {kFloat16, kBFloat16})
    for (int64_t n : {int64_t(5), int64_t(300), int64_t(2000)}) {
      Tensor x = (randn({3, n}) * 2).to(d);
      Tensor strided = x.t().contiguous().t();
      ASSERT_FALSE(strided.is_contiguous());
      Tensor got = x.cumsum(1), want = strided.cumsum(1).contiguous();
      EXPECT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), size_t(3 * n) * 2), 0) << name(d) << " n " << n;
    }
}

// 16-bit float rows reduce their values widened to float32 (float16's by F16C first, reduce.h):
// the same lane order over the widened values, accumulated in float32 (sums), rounded once.
TEST(Reduce, SixteenBitRowsReduceTheirWidenedValuesInLaneOrder) {
  manual_seed(29);
  for (DType d : {kFloat16, kBFloat16})
    for (int64_t n : {1, 10, 16, 100, 203, 1000}) {
      Tensor rows = (randn({4, n}) * 3).to(d);
      rows.index({3, n / 2}) = NAN;  // (nansum skips it)
      const std::vector<float> w = rows.to(kFloat32).to_vector<float>();
      const std::vector<float> s = rows.sum({1}).to(kFloat32).to_vector<float>(),
                               ns = rows.nansum({1}).to(kFloat32).to_vector<float>(),
                               m = rows.amin({1}).to(kFloat32).to_vector<float>();
      auto round = [&](float v) { return d == kFloat16 ? float(Half(v)) : float(BFloat16(v)); };
      for (int64_t r = 0; r < 4; ++r) {
        const float* p = w.data() + r * n;
        const float sum_want = lane_order_reference<float>(p, n, 0.0f, [](float a, float x) { return a + x; });
        const float nansum_want = lane_order_reference<float>(p, n, 0.0f, [](float a, float x) { return x != x ? a : a + x; });
        const float min_want = lane_order_reference<float>(p, n, INFINITY, [](float a, float x) { return x < a || x != x ? x : a; });
        SCOPED_TRACE(std::string(name(d)) + " n " + std::to_string(n) + " row " + std::to_string(r));
        if (r < 3) {
          EXPECT_EQ(s[size_t(r)], round(sum_want));
        }
        EXPECT_EQ(ns[size_t(r)], round(nansum_want));
        if (r < 3) {
          EXPECT_EQ(m[size_t(r)], min_want);
        } else {
          EXPECT_TRUE(std::isnan(m[size_t(r)]));
        }
      }
    }
}

// ---- eager ops' threads and OpenMP's wait policy ----
// An eager op goes threaded from cpu::parallel_grain() elements per thread: 2^15, and 16 times
// that under OMP_WAIT_POLICY=passive, where waking a sleeping thread costs more than an op of a
// few hundred thousand elements takes (runtime/src/cpu/loop.h). The policy is read once per
// process, so EagerThreads.GrainFollowsTheWaitPolicy runs this test in children under each
// policy; on its own it checks the process's own.
TEST(EagerThreads, GrainInThisProcess) {
  const int64_t grain = kiln::cpu::parallel_grain();
  EXPECT_EQ(grain, kiln::env::omp_passive_wait() ? 16 * 32768 : 32768);
  std::printf("parallel grain %lld\n", static_cast<long long>(grain));
  if (kiln::cpu::num_threads() < 2) return;
  // parallel_for takes a thread per grain: n = grain stays on one, n = 2 * grain goes on two.
  auto threads_for = [](int64_t n, int64_t g) {
    std::atomic<int> parts{0};
    kiln::cpu::parallel_for(n, g, [&](int64_t, int64_t) { parts++; });
    EXPECT_EQ(parts.load(), kiln::cpu::last_parallel_threads());
    return parts.load();
  };
  EXPECT_EQ(threads_for(grain, grain), 1);
  EXPECT_EQ(threads_for(2 * grain, grain), 2);
  // And the ops split where it says: a full sum runs whole below 4 grains (reduce.h), and its
  // result is the same either side of it.
  kiln::Tensor x = kiln::ones({4 * grain + 8}, kiln::kFloat64);
  EXPECT_EQ(x.sum().item<double>(), double(4 * grain + 8));
}

// Costly elementwise ops split sooner: a thread takes 2^15 / cost elements before a second
// joins in (elementwise.cpp's Cost: sinh 4, pow 8, sin 2, exp and add 1), so just past grain / 8
// elements pow runs on two threads and exp on one, and just past grain / 4 sinh on two.
TEST(EagerThreads, CostlyOpsSplitSooner) {
  if (kiln::cpu::num_threads() < 2) GTEST_SKIP() << "one kernel thread";
  const int64_t grain = kiln::cpu::parallel_grain();
  kiln::Tensor x = kiln::rand({grain / 4 + 64}) + 0.5, small = x.slice(0, 0, grain / 8 + 64);
  auto threads = [](const std::function<kiln::Tensor()>& op) {
    op();
    return kiln::cpu::last_parallel_threads();
  };
  EXPECT_EQ(threads([&] { return kiln::pow(small, small); }), 2);
  EXPECT_EQ(threads([&] { return kiln::atan2(small, small); }), 1);  // (cost 4: needs grain / 4)
  EXPECT_EQ(threads([&] { return kiln::exp(small); }), 1);
  EXPECT_EQ(threads([&] { return small + small; }), 1);
  EXPECT_EQ(threads([&] { return kiln::sinh(x); }), 2);
  EXPECT_EQ(threads([&] { return kiln::atan2(x, x); }), 2);
  EXPECT_EQ(threads([&] { return kiln::sin(x); }), 1);  // (cost 2)
  // (the values are the op's either way: each element is computed alone)
  EXPECT_TRUE(kiln::eq(kiln::sinh(x).slice(0, 0, 100), kiln::sinh(x.slice(0, 0, 100))).all().item<bool>());
}

TEST(EagerThreads, GrainFollowsTheWaitPolicy) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  auto grain_under = [&](const std::string& policy) -> long long {
    const std::string cmd = "env OMP_WAIT_POLICY=" + policy + " KILN_NUM_THREADS=2 '" + self +
                            "' --gtest_filter=EagerThreads.GrainInThisProcess 2>&1";
    FILE* f = popen(cmd.c_str(), "r");
    if (!f) return -1;
    std::string out;
    char buf[512];
    while (fgets(buf, sizeof buf, f)) out += buf;
    const int status = pclose(f);
    EXPECT_EQ(status, 0) << out;
    EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
    const size_t at = out.find("parallel grain ");
    return at == std::string::npos ? -1 : std::stoll(out.substr(at + 15));
  };
  EXPECT_EQ(grain_under("ACTIVE"), 32768);
  EXPECT_EQ(grain_under("passive"), 16 * 32768);
}
