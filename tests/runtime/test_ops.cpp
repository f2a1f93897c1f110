#include <cstring>
#include <limits>
#include <random>

#include "test_util.h"

using namespace kiln;
using kiln::testing::expect_error;
using kiln::testing::expect_values;

TEST(Elementwise, BroadcastingArithmetic) {
  Tensor m = arange(6, kFloat32).view({2, 3});
  Tensor b = from_vector<float>({10, 20, 30});
  expect_values(m + b, {2, 3}, {10, 21, 32, 13, 24, 35}, 0);
  expect_values(add(m, b, 2), {2, 3}, {20, 41, 62, 23, 44, 65}, 0);
  expect_values(m.t() + m.t(), {3, 2}, {0, 6, 2, 8, 4, 10}, 0);
  expect_values(2 - m, {2, 3}, {2, 1, 0, -1, -2, -3}, 0);
  expect_values(1.0 / (m + 1), {2, 3}, {1, 0.5, 1.0 / 3, 0.25, 0.2, 1.0 / 6});
  expect_values(m.unsqueeze(2) * b.view({1, 1, 3}), {2, 3, 3},
                {0, 0, 0, 10, 20, 30, 20, 40, 60, 30, 60, 90, 40, 80, 120, 50, 100, 150}, 0);
}

TEST(Elementwise, LargeStridedMatchesContiguous) {
  // exercises the threaded path and dim coalescing on a permuted input
  manual_seed(1);
  Tensor x = randn({64, 128, 40});
  Tensor p = x.permute({2, 0, 1});
  Tensor got = (p * 2 + 1).contiguous();
  Tensor want = (p.contiguous() * 2 + 1);
  EXPECT_TRUE(eq(got, want).all().item<bool>());
}

TEST(Elementwise, Division) {
  Tensor a = from_vector<int64_t>({7, -7, 7, -7}), b = from_vector<int64_t>({2, 2, -2, -2});
  EXPECT_EQ(div(a, b).dtype(), kFloat32);
  expect_values(div(a, b), {4}, {3.5, -3.5, -3.5, 3.5});
  expect_values(div(a, b, "trunc"), {4}, {3, -3, -3, 3}, 0);
  expect_values(div(a, b, "floor"), {4}, {3, -4, -4, 3}, 0);
  expect_values(floor_divide(a, b), {4}, {3, -4, -4, 3}, 0);
  expect_values(remainder(a, b), {4}, {1, 1, -1, -1}, 0);
  expect_values(fmod(a, b), {4}, {1, -1, 1, -1}, 0);
  Tensor f = from_vector<double>({7.5, -7.5});
  expect_values(div(f, 2.0, "floor"), {2}, {3, -4}, 0);
  expect_values(remainder(f, 2.0), {2}, {1.5, 0.5}, 0);
  expect_values(div(from_vector<float>({1, -1, 0}), 0.0), {3}, {INFINITY, -INFINITY, NAN});
  expect_error([&] { div(a, zeros({4}, kInt64), "trunc"); }, "ZeroDivisionError");
  expect_error([&] { remainder(a, 0); }, "ZeroDivisionError");
  expect_error([&] { div(a, b, "round"); }, "rounding_mode");
}

TEST(Elementwise, PowAndMath) {
  Tensor x = from_vector<float>({1, 2, 3});
  expect_values(pow(x, 2), {3}, {1, 4, 9}, 0);
  expect_values(pow(x, 0.5), {3}, {1, std::sqrt(2.0), std::sqrt(3.0)});
  expect_values(pow(2, x), {3}, {2, 4, 8});
  Tensor i = from_vector<int64_t>({2, 3, -2});
  expect_values(pow(i, 3), {3}, {8, 27, -8}, 0);
  EXPECT_EQ(pow(i, 3).dtype(), kInt64);
  expect_error([&] { pow(i, -1); }, "Integers to negative integer powers are not allowed");
  expect_values(exp(from_vector<double>({0, 1})), {2}, {1, M_E}, 1e-12);
  expect_values(sigmoid(from_vector<float>({0})), {1}, {0.5});
  expect_values(gelu(from_vector<double>({1.0})), {1}, {0.8413447460685429}, 1e-9);
  expect_values(gelu(from_vector<double>({1.0}), "tanh"), {1}, {0.8411919906082768}, 1e-9);
  expect_values(silu(from_vector<double>({1.0})), {1}, {0.7310585786300049}, 1e-12);
  EXPECT_EQ(sin(from_vector<int32_t>({0})).dtype(), kFloat32);
  expect_values(round(from_vector<float>({0.5, 1.5, 2.5, -0.5})), {4}, {0, 2, 2, -0}, 0);
  expect_values(nan_to_num(from_vector<float>({NAN, INFINITY, -INFINITY, 1})), {4},
                {0, 3.4028234663852886e38, -3.4028234663852886e38, 1}, 1e-6);
}

TEST(Elementwise, TranscendentalsMatchLibmOnLargeArrays) {
  // the vector (SLEEF) path must agree with the scalar libm path to ~1 ulp
  manual_seed(3);
  Tensor x = randn({4099}) * 3;
  Tensor xd = x.to(kFloat64);
  for (auto f : {+[](const Tensor& t) { return sin(t); }, +[](const Tensor& t) { return exp(t); },
                 +[](const Tensor& t) { return tanh(t); }, +[](const Tensor& t) { return erf(t); }}) {
    Tensor got = f(x).to(kFloat64), want = f(xd);
    double err = (got - want).abs().max().item<double>();
    EXPECT_LT(err, 1e-5 * std::max(1.0, want.abs().max().item<double>()));
  }
}

// float32 exp, erf and tanh are kiln's own (runtime/src/cpu/vec.h), checked on every 64th
// float32 of each sign (33 million a sign, every binade, subnormals included) against the float64
// function: within `bound` ulps (of the float32 result, subnormal spacing below the normals), erf
// and tanh odd to the bit, and the same values in the scalar path (every other element of a
// view: the loop one element at a time).
enum class Parity { Odd, None };
static void expect_float32_function(Tensor (*op)(const Tensor&), double (*ref)(double), double bound, Parity parity) {
  const int64_t n = int64_t(0x7f800000) / 64 + 1;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = uint32_t(i * 64);
    std::memcpy(&v[size_t(i)], &bits, 4);
  }
  Tensor x = from_vector<float>(v);
  Tensor y = op(x), neg = op(-x);
  const float* py = y.data_ptr<float>();
  const float* pn = neg.data_ptr<float>();
  double worst = 0;
  float worst_at = 0;
  int64_t not_odd = 0;
  auto check = [&](float at, float got) {
    const double want = ref(double(at));
    const float w = float(want);
    if (std::isinf(w)) {  // (an exact result rounds to infinity: overflow)
      if (got != w) worst = 1e9, worst_at = at;
      return;
    }
    const double ulp = w == 0 ? double(std::numeric_limits<float>::denorm_min())
                              : double(std::nextafter(std::fabs(w), INFINITY)) - std::fabs(w);
    const double e = std::fabs(double(got) - want) / ulp;
    if (e > worst) worst = e, worst_at = at;
  };
  for (int64_t i = 0; i < n; ++i) {
    check(v[size_t(i)], py[i]);
    if (parity == Parity::Odd) not_odd += pn[i] != -py[i];
    else check(-v[size_t(i)], pn[i]);
  }
  EXPECT_LE(worst, bound) << "at x = " << worst_at;
  EXPECT_EQ(not_odd, 0);
  for (Tensor t : {x, -x}) {
    Tensor s = t.slice(0, 0, 1 << 20).view({-1, 2}).select(1, 1);
    EXPECT_TRUE(eq(op(s), op(t).slice(0, 0, 1 << 20).view({-1, 2}).select(1, 1)).all().item<bool>());
  }
}

// The exhaustive maxima when they were written: exp 0.77 ulp (at x = -87.86, a subnormal
// result), erf 0.77 (at x = 0.5007), tanh 0.9985 (at x = 0.975); SLEEF's u10 functions, used
// before: 0.99, 1.096 and 1.0.
TEST(Elementwise, Float32ExpWithinAnUlpEverywhere) {
  expect_float32_function(+[](const Tensor& t) { return exp(t); }, +[](double v) { return std::exp(v); }, 1.0, Parity::None);
  // overflow past log(FLT_MAX) = 88.72284, zero below log of half the smallest subnormal (-103.972)
  const std::vector<float> got =
      exp(from_vector<float>({NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 88.72283f, 88.72284f, -103.97f, -103.98f})).to_vector<float>();
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_EQ(std::vector<float>(got.begin() + 1, got.end()),
            (std::vector<float>{INFINITY, 0.0f, 1.0f, 1.0f, float(std::exp(double(88.72283f))), INFINITY,
                                std::numeric_limits<float>::denorm_min(), 0.0f}));
}
TEST(Elementwise, Float32ErfWithinAnUlpEverywhere) {
  expect_float32_function(+[](const Tensor& t) { return erf(t); }, +[](double v) { return std::erf(v); }, 1.0, Parity::Odd);
  expect_values(erf(from_vector<float>({NAN, INFINITY, -INFINITY, 0.0f, 100.0f, -100.0f})), {6}, {NAN, 1, -1, 0, 1, -1}, 0);
}
TEST(Elementwise, Float32TanhWithinAnUlpEverywhere) {
  expect_float32_function(+[](const Tensor& t) { return tanh(t); }, +[](double v) { return std::tanh(v); }, 1.0, Parity::Odd);
  expect_values(tanh(from_vector<float>({NAN, INFINITY, -INFINITY, 0.0f, 100.0f, -100.0f})), {6}, {NAN, 1, -1, 0, 1, -1}, 0);
}

// pow and atan2 of float tensors run SLEEF's vector forms where the output is contiguous and
// each operand contiguous or broadcast, C's one element at a time elsewhere. In every layout:
// float32 within 1 ulp of the float64 result; float64 within 2 ulps of C's (both within 1 ulp
// of the exact value), C's taken on a view with a step of 2 (the scalar loop); special values
// as C.
TEST(Elementwise, PowAndAtan2InEveryLayoutWithinAnUlp) {
  manual_seed(5);
  Tensor base = rand({67, 33}) * 4, expo = randn({67, 33}) * 3, y = randn({67, 33}), x = randn({67, 33});
  // The largest distance between got and want in units of got's dtype's spacing at want.
  auto ulps = [](const Tensor& got, const Tensor& want) {
    const bool f32 = got.dtype() == kFloat32;
    Tensor g = got.to(kFloat64).contiguous(), w = want.to(kFloat64).contiguous();
    double worst = 0;
    for (int64_t i = 0; i < g.numel(); ++i) {
      const double a = g.data_ptr<double>()[i], b = w.data_ptr<double>()[i];
      if (std::isnan(b) || std::isinf(b)) {
        worst = std::max(worst, (std::isnan(a) && std::isnan(b)) || a == b ? 0.0 : 1e9);
        continue;
      }
      const double spacing = f32 ? double(std::nextafter(std::fabs(float(b)), INFINITY)) - std::fabs(float(b))
                                 : std::nextafter(std::fabs(b), INFINITY) - std::fabs(b);
      worst = std::max(worst, std::fabs(a - b) / spacing);
    }
    return worst;
  };
  auto stepped = [](const Tensor& t) { return stack({t, t}, -1).select(-1, 0); };  // same values, step 2
  for (DType d : {kFloat32, kFloat64}) {
    Tensor b = base.to(d), e = expo.to(d), yy = y.to(d), xx = x.to(d);
    const std::vector<std::pair<Tensor, Tensor>> pow_layouts = {
        {b, e},                            // contiguous
        {b, e.select(0, 3)},               // the exponent broadcast along dim 0
        {b.select(1, 2).unsqueeze(1), e},  // the base broadcast along dim 1
        {b.t(), e.t()},                    // transposed
    };
    // f(u, v) against its reference: float64 operands for float32, the stepped views for float64
    auto within = [&](auto f, const Tensor& u, const Tensor& v) {
      const Tensor got = f(u, v);
      const Tensor want = d == kFloat32 ? f(u.to(kFloat64), v.to(kFloat64))
                                        : f(stepped(u.expand(got.sizes())), stepped(v.expand(got.sizes())));
      return ulps(got, want) <= (d == kFloat32 ? 1.0 : 2.0);
    };
    auto p = [](const Tensor& u, const Tensor& v) { return pow(u, v); };
    auto a2 = [](const Tensor& u, const Tensor& v) { return atan2(u, v); };
    for (const auto& [u, v] : pow_layouts) EXPECT_TRUE(within(p, u, v)) << name(d);
    for (const auto& [u, v] : std::vector<std::pair<Tensor, Tensor>>{{yy, xx}, {yy, xx.select(0, 1)}, {yy.t(), xx.t()}})
      EXPECT_TRUE(within(a2, u, v)) << name(d);
  }
  // special values, contiguous (vector) and in a strided view (one element at a time)
  Tensor sb = from_vector<float>({-2, -2, 0, 0, NAN, 1, -1, INFINITY, 0.5f, 2, -0.0f, 0});
  Tensor se = from_vector<float>({3, 0.5f, -1, 0, 0, NAN, INFINITY, -1, INFINITY, -INFINITY, -3, 0});
  const std::vector<double> want = {-8, NAN, INFINITY, 1, 1, 1, 1, 0, 0, 0, -INFINITY, 1};
  expect_values(pow(sb, se), {12}, want, 0);
  expect_values(pow(stack({sb, sb}, 1).select(1, 0), stack({se, se}, 1).select(1, 0)), {12}, want, 0);  // (step 2)
  expect_values(atan2(from_vector<float>({0.0f, -0.0f, 1, -1, NAN}), from_vector<float>({-0.0f, -0.0f, 0, 0, 1})), {5},
                {M_PI, -M_PI, M_PI / 2, -M_PI / 2, NAN}, 1e-6);
}

// float32 fmod, remainder and floor division run kiln's exact vector fmod (cpu/vec.h) where the
// operands are contiguous or broadcast: bit for bit C's fmod (and Python's sign rule on it; for
// floor division, the scalar loop's result) on quotients of every size (exponents -140..140),
// dividends a few ulps from a multiple of the divisor (the rounded quotient then lands on the
// wrong side of an integer), quotients near 2^23 (the edge of the fast path), signed zeros,
// infinities, NaN and zero divisors; a divisor broadcast too.
TEST(Elementwise, Float32FmodRemainderAndFloorDivisionAreExact) {
  std::mt19937_64 g(11);
  auto power = [&](int range) {
    const double m = std::uniform_real_distribution<double>(-1, 1)(g);
    return float(std::ldexp(m, int(g() % uint64_t(2 * range + 1)) - range));
  };
  const int64_t n = 1 << 18;
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  for (size_t i = 0; i < a.size(); ++i) {
    b[i] = power(i % 3 == 0 ? 140 : 10);
    switch (g() % 8) {
      case 0: a[i] = power(140); break;
      case 1: a[i] = std::nextafter(b[i] * float(int(g() % 2001) - 1000), g() % 2 ? INFINITY : -INFINITY); break;
      case 2: a[i] = b[i] * float(int(g() % 2001) - 1000); break;
      case 3: a[i] = b[i] * std::ldexp(float(g() % 64 + 1), 17) * (g() % 2 ? 1.0f : -1.0f); break;  // near 2^23
      case 4: a[i] = std::nextafter(b[i] * 8388607.0f, 0.0f); break;
      case 5: {
        const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN};
        a[i] = specials[g() % 5];
        if (g() % 2) b[i] = specials[g() % 5];
        break;
      }
      default: a[i] = power(10);
    }
  }
  auto same = [](float x, float y) { return std::memcmp(&x, &y, 4) == 0 || (std::isnan(x) && std::isnan(y)); };
  auto python = [](float m, float y) { return m != 0 && ((y < 0) != (m < 0)) ? m + y : m; };
  Tensor ta = from_vector<float>(a), tb = from_vector<float>(b);
  Tensor f = fmod(ta, tb), r = remainder(ta, tb);
  int64_t bad_fmod = 0, bad_remainder = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float want = std::fmod(a[i], b[i]);
    bad_fmod += !same(f.data_ptr<float>()[i], want);
    bad_remainder += !same(r.data_ptr<float>()[i], python(want, b[i]));
  }
  EXPECT_EQ(bad_fmod, 0);
  EXPECT_EQ(bad_remainder, 0);
  // floor division runs on the same fmod (cpu::vec::floor_divf): the vector path gives the
  // scalar path's bits (a view with a step of 2 takes the scalar loop)
  Tensor q = div(ta, tb, "floor");
  Tensor q_scalar = div(stack({ta, ta}, 1).select(1, 0), stack({tb, tb}, 1).select(1, 0), "floor");
  int64_t bad_floor = 0;
  for (size_t i = 0; i < a.size(); ++i) bad_floor += !same(q.data_ptr<float>()[i], q_scalar.data_ptr<float>()[i]);
  EXPECT_EQ(bad_floor, 0);
  // a broadcast divisor, and the divisor as a number
  Tensor fb = fmod(ta, tb.slice(0, 5, 6)), rb = remainder(ta, Scalar(-2.75));
  int64_t bad_broadcast = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    bad_broadcast += !same(fb.data_ptr<float>()[i], std::fmod(a[i], b[5]));
    bad_broadcast += !same(rb.data_ptr<float>()[i], python(std::fmod(a[i], -2.75f), -2.75f));
  }
  EXPECT_EQ(bad_broadcast, 0);
}

#if defined(__AVX512F__)
#include <immintrin.h>
extern "C" __m512 kiln_expf16(__m512);
extern "C" __m256 kiln_expf8(__m256);
extern "C" __m512 kiln_erff16(__m512);
extern "C" __m256 kiln_erff8(__m256);
extern "C" __m512 kiln_tanhf16(__m512);
extern "C" __m256 kiln_tanhf8(__m256);
extern "C" __m512 kiln_fmodf16(__m512, __m512);
extern "C" __m256 kiln_fmodf8(__m256, __m256);
#endif

// A compiled loop of 8 lanes in an AVX-512 build calls kiln_expf8 (and erf, tanh and fmod's),
// which runs the 16-lane function on its vector widened in registers: each of the 8 lanes is the
// 16-lane function's, bit for bit, whatever the other lanes hold (the upper half of the widened
// vector is zero; fmod's divisor there is 1).
TEST(Elementwise, EightLaneMathExportsAreTheSixteenLaneFunctions) {
#if defined(__AVX512F__)
  std::mt19937 g(5);
  std::uniform_real_distribution<float> u(-30.0f, 30.0f);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -89.0f, 88.7f};
  int differ = 0;
  for (int round = 0; round < 2000; ++round) {
    alignas(64) float x[16], y[16], w16[16], w8[8];
    for (int i = 0; i < 16; ++i) {
      x[i] = round < 8 && i == round ? specials[round] : u(g);
      y[i] = u(g) / 7;
    }
    auto same = [&](const char* what) {
      for (int i = 0; i < 8; ++i)
        if (std::memcmp(&w8[i], &w16[i], 4) != 0 && !(std::isnan(w8[i]) && std::isnan(w16[i]))) {
          ADD_FAILURE() << what << " lane " << i << " of x = " << x[i] << ": " << w8[i] << " against " << w16[i];
          ++differ;
        }
    };
    const __m512 x16 = _mm512_load_ps(x), y16 = _mm512_load_ps(y);
    const __m256 x8 = _mm256_load_ps(x), y8 = _mm256_load_ps(y);
    _mm512_store_ps(w16, kiln_expf16(x16)), _mm256_store_ps(w8, kiln_expf8(x8)), same("exp");
    _mm512_store_ps(w16, kiln_erff16(x16)), _mm256_store_ps(w8, kiln_erff8(x8)), same("erf");
    _mm512_store_ps(w16, kiln_tanhf16(x16)), _mm256_store_ps(w8, kiln_tanhf8(x8)), same("tanh");
    _mm512_store_ps(w16, kiln_fmodf16(x16, y16)), _mm256_store_ps(w8, kiln_fmodf8(x8, y8)), same("fmod");
    if (differ > 8) break;
  }
#else
  GTEST_SKIP() << "the 8-lane forms run the 16-lane ones only in AVX-512 builds";
#endif
}

TEST(Elementwise, ComparisonsLogicalBitwise) {
  Tensor a = from_vector<float>({1, 2, NAN}), b = from_vector<float>({1, 3, NAN});
  expect_values(a == b, {3}, {1, 0, 0}, 0);
  expect_values(a != b, {3}, {0, 1, 1}, 0);
  expect_values(a < 2, {3}, {1, 0, 0}, 0);
  EXPECT_EQ((a >= b).dtype(), kBool);
  Tensor t = from_vector(std::vector<bool>{true, false, true});
  expect_values(logical_xor(t, from_vector(std::vector<bool>{true, true, false})), {3}, {0, 1, 1}, 0);
  expect_values(~t, {3}, {0, 1, 0}, 0);
  Tensor i = from_vector<int32_t>({12, 10});
  expect_values(i & 6, {2}, {4, 2}, 0);
  expect_values(i ^ i, {2}, {0, 0}, 0);
  expect_values(~i, {2}, {-13, -11}, 0);
  expect_error([&] { a & a; }, "not implemented for 'float32'");
  expect_values(maximum(a, b), {3}, {1, 3, NAN});
}

TEST(Elementwise, WhereClampLerpAddcmulMaskedFill) {
  Tensor x = from_vector<float>({-2, -0.5, 0.5, 2});
  expect_values(where(x > 0, x, zeros({1})), {4}, {0, 0, 0.5, 2}, 0);
  expect_values(where(x > 0, 1.0, -1.0), {4}, {-1, -1, 1, 1}, 0);
  expect_values(clamp(x, -1, 1), {4}, {-1, -0.5, 0.5, 1}, 0);
  expect_values(clamp(x, std::nullopt, 0), {4}, {-2, -0.5, 0, 0}, 0);
  expect_values(clamp(from_vector<float>({NAN}), 0, 1), {1}, {NAN});
  expect_values(lerp(zeros({2}), ones({2}) * 10, 0.25), {2}, {2.5, 2.5}, 0);
  expect_values(addcmul(ones({2}), from_vector<float>({2, 3}), from_vector<float>({4, 5}), 0.5), {2}, {5, 8.5}, 0);
  expect_values(masked_fill(x, x < 0, 9), {4}, {9, 9, 0.5, 2}, 0);
  expect_error([&] { where(x, x, x); }, "boolean");
  expect_error([&] { masked_fill(x, x, 1); }, "boolean masks");
  expect_error([&] { clamp(x, std::optional<Scalar>(), std::optional<Scalar>()); }, "At least one of 'min' or 'max'");
}

// where and masked_fill move values by a bit mask on their storage (1, 2, 4 and 8 bytes), with
// fast paths for dense operands and a broadcast second or third one: in each dtype and layout
// (dense, a scalar either side, a broadcast row, a strided view, in place) every element is the
// one the condition picks, -0.0 and NaN bits included.
TEST(Elementwise, WhereAndMaskedFillInEveryLayoutAndSize) {
  manual_seed(21);
  Tensor base = randn({37, 41});
  base.index({3, 4}) = NAN;
  base.index({5, 6}) = -0.0;
  Tensor cond = randn({37, 41}) > 0;
  std::vector<bool> c;
  for (uint8_t v : cond.to(kUInt8).to_vector<uint8_t>()) c.push_back(v != 0);
  for (DType d : {kBool, kInt8, kFloat16, kFloat32, kFloat64, kInt64}) {
    Tensor x = d == kBool ? base > 0.3 : (base * 10).to(d), y = d == kBool ? base < -0.3 : (base * -3).to(d);
    auto expect_picks = [&](const Tensor& got, const Tensor& a, const Tensor& b, const std::string& what) {
      Tensor G = got.contiguous(), A = a.expand({37, 41}).contiguous(), B = b.expand({37, 41}).contiguous();
      const size_t w = itemsize(d);
      const auto* g = static_cast<const uint8_t*>(G.data_ptr());
      const auto* va = static_cast<const uint8_t*>(A.data_ptr());
      const auto* vb = static_cast<const uint8_t*>(B.data_ptr());
      int64_t wrong = 0;
      for (size_t i = 0; i < c.size(); ++i) wrong += std::memcmp(g + i * w, (c[i] ? va : vb) + i * w, w) != 0;
      EXPECT_EQ(wrong, 0) << what << " " << name(d);
    };
    Tensor s1 = d == kBool ? scalar_tensor(true, kBool) : scalar_tensor(2, d);
    expect_picks(where(cond, x, y), x, y, "dense");
    expect_picks(where(cond, x, s1), x, s1, "scalar third");
    expect_picks(where(cond, s1, y), s1, y, "scalar second");
    expect_picks(where(cond, x.select(0, 0), y), x.select(0, 0), y, "broadcast row");
    Tensor xt = x.t().contiguous().t();  // the same values at other strides
    expect_picks(where(cond, xt, y), x, y, "strided");
    expect_picks(masked_fill(y, cond, d == kBool ? Scalar(true) : Scalar(2)), s1, y, "masked_fill");
    Tensor z = y.clone();
    z.masked_fill_(cond, d == kBool ? Scalar(true) : Scalar(2));
    expect_picks(z, s1, y, "masked_fill_");
  }
}

// floor, ceil and trunc of floats run the vector rounding instructions where the tensor is
// contiguous and C's functions elsewhere: bit for bit the same, -0.0, NaN, infinities, halves and
// values past 2^23 (2^52 for float64) included, in each float dtype.
TEST(Elementwise, FloorCeilTruncByVectorsAreCs) {
  std::vector<double> v = {-0.0, 0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.99, 1e-40, -1e-40, 8388607.5, -8388607.5,
                           16777217.0, 4503599627370495.5, -4503599627370495.5, 1e300, NAN, INFINITY, -INFINITY};
  manual_seed(4);
  for (double r : (randn({70}) * 1000).to_vector<double>()) v.push_back(r);
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    Tensor x = from_vector<double>(v).to(d);
    Tensor strided = stack({x, x}, -1).select(-1, 0);  // the same values, step 2: the scalar loop
    for (auto [op, ref] : {std::pair{+[](const Tensor& t) { return floor(t); }, +[](double a) { return std::floor(a); }},
                           std::pair{+[](const Tensor& t) { return ceil(t); }, +[](double a) { return std::ceil(a); }},
                           std::pair{+[](const Tensor& t) { return trunc(t); }, +[](double a) { return std::trunc(a); }}}) {
      std::vector<double> got = op(x).to_vector<double>(), scalar = op(strided).to_vector<double>(), in = x.to_vector<double>();
      for (size_t i = 0; i < in.size(); ++i) {
        const double want = double(from_vector<double>({ref(in[i])}).to(d).item<double>());  // C's, rounded to d
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got[i]) && std::isnan(scalar[i])) << name(d) << " at " << in[i];
        } else {
          EXPECT_EQ(got[i], want) << name(d) << " at " << in[i];
          EXPECT_EQ(std::signbit(got[i]), std::signbit(want)) << name(d) << " at " << in[i];
          EXPECT_EQ(scalar[i], want) << name(d) << " at " << in[i];
        }
      }
    }
  }
}

// nan_to_num runs by explicit vectors for float32 and float64 and one element at a time
// elsewhere: in each float dtype, contiguous (past a vector's length) and strided, NaN and the
// infinities become the replacements as the dtype holds them (a replacement past its range
// becomes infinity, as a cast), and every other value, -0.0 included, stays as it is.
TEST(Elementwise, NanToNumInEveryFloatDtypeAndLayout) {
  std::vector<double> v;
  for (int i = 0; i < 41; ++i) v.push_back(i % 5 == 0 ? NAN : i % 5 == 1 ? INFINITY : i % 5 == 2 ? -INFINITY : i % 5 == 3 ? -0.0 : 1.25 * i);
  for (DType d : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    Tensor x = from_vector<double>(v).to(d);
    Tensor strided = stack({x, x}, -1).select(-1, 0);
    for (auto [n, p, m] : {std::tuple<std::optional<double>, std::optional<double>, std::optional<double>>{},
                           std::tuple<std::optional<double>, std::optional<double>, std::optional<double>>{7.5, 1e40, -3.0}}) {
      auto cast = [&](double a) { return from_vector<double>({a}).to(d).item<double>(); };
      const double hi = d == kFloat16 ? 65504.0 : d == kBFloat16 ? 3.3895313892515355e38
                        : d == kFloat32 ? double(std::numeric_limits<float>::max()) : std::numeric_limits<double>::max();
      const double wn = cast(n.value_or(0.0)), wp = cast(p.value_or(hi)), wm = cast(m.value_or(-hi));
      for (const Tensor& t : {x, strided}) {
        std::vector<double> got = nan_to_num(t, n, p, m).to_vector<double>(), in = t.to_vector<double>();
        for (size_t i = 0; i < in.size(); ++i) {
          const double want = std::isnan(in[i]) ? wn : in[i] == INFINITY ? wp : in[i] == -INFINITY ? wm : in[i];
          EXPECT_EQ(got[i], want) << name(d) << " at " << i;
          EXPECT_EQ(std::signbit(got[i]), std::signbit(want)) << name(d) << " at " << i;
        }
      }
    }
  }
}

TEST(InPlace, KeepsDestinationDtypeAndWritesBase) {
  Tensor i = from_vector<int32_t>({1, 2, 3});
  i.add_(from_vector<int64_t>({10, 10, 10}));
  EXPECT_EQ(i.dtype(), kInt32);
  expect_values(i, {3}, {11, 12, 13}, 0);
  expect_error([&] { i.add_(0.5); }, "result type float32 can't be cast to the desired output type int32");
  expect_error([&] { i.div_(2); }, "can't be cast");
  Tensor f = zeros({2, 3});
  f.add_(from_vector<float>({1, 2, 3}));  // broadcast into the destination
  expect_error([&] { f.slice(0, 0, 1).add_(zeros({2, 3})); }, "doesn't match the broadcast shape");
  Tensor col = f.select(1, 0);
  col.mul_(5);
  col.sub_(1);
  col.div_(2);
  expect_values(f, {2, 3}, {2, 2, 3, 2, 2, 3}, 0);
  Tensor r = from_vector<float>({-1, 3, 9});
  r.relu_().clamp_(0, 6);
  expect_values(r, {3}, {0, 3, 6}, 0);
  Tensor z = ones({2, 2});
  z.zero_();
  z += 2;
  z *= z;
  z -= 1;
  z /= 3;
  expect_values(z, {2, 2}, {1, 1, 1, 1}, 0);
  Tensor c = zeros({2, 2}, kInt64);
  c.copy_(from_vector<double>({1.9, -1.9}));
  expect_values(c, {2, 2}, {1, -1, 1, -1}, 0);
}

// While tracing, an in-place op runs eagerly once and reports its functional form (op,
// operands, attributes) for the recorder to type; the functional result is never computed:
// the traced op allocates no more than the untraced one.
TEST(InPlace, TracingReportsTheFunctionalFormWithoutComputingIt) {
  Tensor x = randn({1 << 20}), y = randn({1 << 20}), mask = randn({1 << 20}) > 0;
  struct Case {
    const char* what;
    OpId op;
    size_t operands, tensors;
    std::vector<Attr> attrs;
    std::function<void(Tensor&)> run;
  };
  const std::vector<Case> cases = {
      {"add_ tensor", OpId::Add, 2, 2, {{"alpha", scalar_attr(2.0)}}, [&](Tensor& t) { t.add_(y, 2.0); }},
      {"add_ number", OpId::Add, 2, 1, {{"alpha", scalar_attr(int64_t(1))}}, [](Tensor& t) { t.add_(1.5); }},
      {"sub_ tensor", OpId::Sub, 2, 2, {{"alpha", scalar_attr(int64_t(1))}}, [&](Tensor& t) { t.sub_(y); }},
      {"mul_ number", OpId::Mul, 2, 1, {}, [](Tensor& t) { t.mul_(0.5); }},
      {"div_ floor", OpId::Div, 2, 2, {{"rounding_mode", std::string("floor")}},
       [&](Tensor& t) { t.div_(y, "floor"); }},
      {"relu_", OpId::Relu, 1, 1, {}, [](Tensor& t) { t.relu_(); }},
      {"clamp_ max only", OpId::Clamp, 2, 1, {{"has_max", true}, {"has_min", false}},
       [](Tensor& t) { t.clamp_(std::nullopt, 0.25); }},
      {"masked_fill_", OpId::MaskedFill, 2, 2, {{"value", scalar_attr(3.0)}},
       [&](Tensor& t) { t.masked_fill_(mask, 3.0); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Tensor want = x.clone(), got = x.clone();
    const auto a0 = cpu_allocator::stats();
    c.run(want);
    const auto a1 = cpu_allocator::stats();
    kiln::testing::FakeRecorder rec;
    {
      trace::Install install(&rec);
      c.run(got);
    }
    const auto a2 = cpu_allocator::stats();
    EXPECT_EQ(a2.hits + a2.misses - a1.hits - a1.misses, a1.hits + a1.misses - a0.hits - a0.misses);
    EXPECT_TRUE(eq(got, want).all().item<bool>());  // the eager op computed the values
    ASSERT_EQ(rec.inplace.size(), 1u);
    EXPECT_EQ(rec.records, 0);  // the functional op did not run (it would report itself)
    EXPECT_EQ(rec.write_backs, 0);
    const auto& r = rec.inplace[0];
    EXPECT_EQ(r.op, c.op);
    EXPECT_EQ(r.self, got.impl_ptr().get());
    EXPECT_EQ(r.operands, c.operands);
    ASSERT_EQ(r.tensors.size(), c.tensors);
    EXPECT_EQ(r.tensors[0], got.impl_ptr().get());
    EXPECT_EQ(r.attrs, c.attrs);
  }
  // A failing in-place op raises eager's error and reports nothing.
  Tensor i = from_vector<int32_t>({1, 2, 3});
  kiln::testing::FakeRecorder rec;
  {
    trace::Install install(&rec);
    expect_error([&] { i.add_(0.5); }, "result type float32 can't be cast to the desired output type int32");
  }
  EXPECT_EQ(rec.other_reports(), 0);
}

TEST(Elementwise, EmptyAndZeroDim) {
  Tensor e = empty({0, 4});
  EXPECT_EQ((e + 1).sizes().vec(), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(sin(e).numel(), 0);
  Tensor s = scalar_tensor(3.0);
  EXPECT_EQ((s * ones({2})).dim(), 1);
  EXPECT_EQ((s + s).dim(), 0);
  EXPECT_EQ((e + ones({1, 4})).sizes().vec(), (std::vector<int64_t>{0, 4}));
}

TEST(Join, CatStackIndexSelectGather) {
  Tensor a = arange(6).view({2, 3}), b = arange(3).view({1, 3});
  expect_values(cat({a, b}), {3, 3}, {0, 1, 2, 3, 4, 5, 0, 1, 2}, 0);
  expect_values(cat({a, a}, 1), {2, 6}, {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}, 0);
  EXPECT_EQ(cat({ones({2}, kInt32), ones({2}, kFloat64)}).dtype(), kFloat64);
  EXPECT_EQ(stack({a, a}, 1).sizes().vec(), (std::vector<int64_t>{2, 2, 3}));
  expect_error([&] { cat({a, arange(4).view({1, 4})}); }, "Sizes of tensors must match except in dimension 0");
  expect_values(index_select(a, 1, from_vector<int64_t>({2, 0})), {2, 2}, {2, 0, 5, 3}, 0);
  expect_values(gather(a, 1, from_vector<int64_t>({0, 0, 2, 1}, {2, 2})), {2, 2}, {0, 0, 5, 4}, 0);
  expect_error([&] { index_select(a, 0, from_vector<int64_t>({2})); }, "index out of range");
  expect_error([&] { gather(a, 1, from_vector<int64_t>({3}, {1, 1})); }, "out of bounds");
}

// cat of contiguous inputs of out's dtype along an inner dim copies each input's slab into each
// outer row; against copies into narrowed views of the output (the general path), bit for bit:
// middle and last dims, an input empty along the dim, PyTorch's legacy [0], 16-bit and bool
// elements, rows enough to run on the threads; a strided input and mixed dtypes take the
// general path and agree too.
TEST(Join, CatAlongAnInnerDimCopiesSlabs) {
  manual_seed(9);
  auto reference = [](const std::vector<Tensor>& ts, int64_t d, DType dt) {
    std::vector<int64_t> shape;
    for (const Tensor& t : ts)
      if (t.dim() > 1) shape = t.sizes().vec();
    shape[size_t(d)] = 0;
    for (const Tensor& t : ts)
      if (t.dim() > 1) shape[size_t(d)] += t.sizes()[d];
    Tensor out = empty(shape, dt);
    int64_t at = 0;
    for (const Tensor& t : ts) {
      if (t.dim() == 1) continue;
      out.narrow(d, at, t.sizes()[d]).copy_(t);
      at += t.sizes()[d];
    }
    return out;
  };
  struct Case { std::string what; std::vector<Tensor> ts; int64_t dim; };
  const std::vector<Case> cases = {
      {"middle dim, an empty input", {randn({7, 3, 5}), randn({7, 0, 5}), randn({7, 2, 5})}, 1},
      {"last dim", {randn({3, 4, 5}), randn({3, 4, 1}), randn({3, 4, 2})}, 2},
      {"negative dim, legacy empty", {randn({6, 2}), empty({0}), randn({6, 3})}, -1},
      {"float16", {randn({9, 16}).to(kFloat16), randn({9, 1}).to(kFloat16)}, 1},
      {"bool", {randint(0, 2, {5, 3}).to(kBool), randint(0, 2, {5, 4}).to(kBool)}, 1},
      {"threaded rows", {randint(-9, 9, {70000, 3}, kInt32), randint(-9, 9, {70000, 5}, kInt32)}, 1},
      {"strided input", {randn({8, 6}).t(), randn({6, 2})}, 1},
      {"mixed dtypes", {randn({4, 3}), randint(0, 5, {4, 2}, kInt64)}, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Tensor got = cat(c.ts, c.dim);
    const Tensor want = reference(c.ts, c.dim < 0 ? c.dim + got.dim() : c.dim, got.dtype());
    ASSERT_EQ(got.sizes().vec(), want.sizes().vec());
    ASSERT_TRUE(got.is_contiguous());
    EXPECT_EQ(std::memcmp(got.data_ptr(), want.contiguous().data_ptr(), size_t(got.nbytes())), 0);
  }
}

// index_select's two paths (a memcpy per block when x is contiguous and the slices after dim d
// hold at least 16 elements; one gather over every element otherwise) against slice-by-slice
// copies: every dim, contiguous and strided sources, short and long slices, repeated and int32
// indices, several dtypes, an empty index.
TEST(Join, IndexSelectMatchesSliceCopies) {
  manual_seed(4);
  auto reference = [](const Tensor& x, int64_t d, const Tensor& index) {
    std::vector<int64_t> idx = index.to(kInt64).to_vector<int64_t>();
    std::vector<int64_t> shape = x.sizes().vec();
    shape[size_t(d)] = int64_t(idx.size());
    Tensor out = empty(shape, x.dtype());
    for (size_t i = 0; i < idx.size(); ++i) out.select(d, int64_t(i)).copy_(x.select(d, idx[i]));
    return out;
  };
  std::vector<std::pair<std::string, Tensor>> sources = {
      {"contiguous 3-d, long rows", randn({5, 6, 40})},
      {"contiguous 3-d, short rows", randn({7, 5, 3})},
      {"transposed", randn({40, 30}).t()},
      {"sliced", randn({9, 64}).slice(1, 3, 60, 2)},
      {"float16", randn({6, 32}).to(kFloat16)},
      {"bool", randint(0, 2, {8, 20}).to(kBool)},
      {"int64 1-d", randint(-100, 100, {50}, kInt64)},
  };
  for (const auto& [name, x] : sources)
    for (int64_t d = 0; d < x.dim(); ++d) {
      SCOPED_TRACE(name + " along dim " + std::to_string(d));
      const int64_t size = x.sizes()[size_t(d)];
      Tensor idx = randint(0, size, {size + 3});  // (repeats some)
      for (const Tensor& index : {idx, idx.to(kInt32), idx.narrow(0, 0, 0), idx.slice(0, 0, size + 3, 2)}) {
        Tensor got = index_select(x, d, index), want = reference(x, d, index);
        ASSERT_EQ(got.sizes().vec(), want.sizes().vec());
        EXPECT_TRUE(got.eq(want).all().item<bool>());
      }
      Tensor neg = from_vector<int64_t>({0, -1});
      expect_error([&] { index_select(x, d, neg); }, "index out of range in self: index -1 at position 1");
    }
}

// Large operands contiguous along another dim than the output's innermost (a transpose, a
// permute) are copied into the output's order first (elementwise.cpp, in_walk_order): every op
// gives exactly the values it gives on a contiguous copy, in binary, unary, ternary and in-place
// forms, broadcast too, in float32, float16 and int64.
TEST(Elementwise, TransposedOperandsGiveTheContiguousResult) {
  manual_seed(43);
  auto same = [](const Tensor& a, const Tensor& b) {
    return a.sizes() == b.sizes() && a.dtype() == b.dtype() && eq(a, b).all().item<bool>();
  };
  for (DType d : {kFloat32, kFloat16, kInt64}) {
    SCOPED_TRACE(name(d));
    const Tensor t = (randn({400, 300}) * 4).to(d).t();            // [300, 400], strides {1, 300}
    const Tensor p = (randn({8, 120, 90}) * 4).to(d).permute({0, 2, 1});  // [8, 90, 120]
    const Tensor b = (randn({300, 400}) * 4).to(d), tc = t.contiguous(), pc = p.contiguous();
    ASSERT_FALSE(t.is_contiguous());
    EXPECT_TRUE(same(t + b, tc + b));
    EXPECT_TRUE(same(b * t, b * tc));
    EXPECT_TRUE(same(t - t, tc - tc));
    EXPECT_TRUE(same(p + p, pc + pc));
    EXPECT_TRUE(same(maximum(p, pc), pc));
    EXPECT_TRUE(same(t.unsqueeze(0) + b.unsqueeze(0).expand({3, 300, 400}), (tc + b).unsqueeze(0).expand({3, 300, 400})));
    EXPECT_TRUE(same(where(t > b, t, b), where(tc > b, tc, b)));
    EXPECT_TRUE(same(neg(t), neg(tc)));
    if (d != kInt64) {
      EXPECT_TRUE(same(exp(t), exp(tc)));
    }
    Tensor in_place = b.clone(), want = b.clone();
    in_place.add_(t);
    want.add_(tc);
    EXPECT_TRUE(same(in_place, want));
    // (an in-place update reading its own transpose)
    Tensor sq = (randn({300, 300}) * 4).to(d);
    const Tensor sq_want = sq + sq.t().contiguous();
    sq.add_(sq.t());
    EXPECT_TRUE(same(sq, sq_want));
    // in-place into a transposed or permuted destination: the operands go into its layout
    Tensor base = (randn({400, 300}) * 4).to(d);
    const Tensor base_want = (base.t().contiguous() + b).t().contiguous();
    base.t().add_(b);
    EXPECT_TRUE(same(base, base_want));
    Tensor base3 = (randn({8, 120, 90}) * 4).to(d);
    const Tensor other = (randn({8, 90, 120}) * 4).to(d);
    const Tensor base3_want = (base3.permute({0, 2, 1}).contiguous() * other).permute({0, 2, 1}).contiguous();
    base3.permute({0, 2, 1}).mul_(other);
    EXPECT_TRUE(same(base3, base3_want));
    Tensor base4 = (randn({16, 80, 60}) * 4).to(d);  // (a permutation that is not its own inverse)
    const Tensor other4 = (randn({80, 60, 16}) * 4).to(d);
    const Tensor base4_want = (base4.permute({1, 2, 0}).contiguous() - other4).permute({2, 0, 1}).contiguous();
    base4.permute({1, 2, 0}).sub_(other4);
    EXPECT_TRUE(same(base4, base4_want));
    Tensor row_base = (randn({400, 300}) * 4).to(d), row = (randn({400}) * 4).to(d);  // (a broadcast row)
    const Tensor row_want = (row_base.t().contiguous() - row).t().contiguous();
    row_base.t().sub_(row);
    EXPECT_TRUE(same(row_base, row_want));
    Tensor sq2 = (randn({300, 300}) * 4).to(d);
    const Tensor sq2_want = (sq2.t().contiguous() + sq2).t().contiguous();
    sq2.t().add_(sq2);
    EXPECT_TRUE(same(sq2, sq2_want));
  }
}

TEST(Elementwise, FastPathsAgreeWithGeneralForms) {
  manual_seed(21);
  Tensor x = randn({5000});
  Tensor xd = x.to(kFloat64);
  // scalar exponents have dedicated loops; compare with float64 std::pow
  for (double e : {3.0, -2.0, -0.5, 2.5, 1.7}) {
    Tensor base = e == -0.5 || e == 2.5 || e == 1.7 ? x.abs() + 0.1 : x;
    Tensor got = pow(base, e).to(kFloat64), want = pow(base.to(kFloat64), e);
    double rel = ((got - want).abs() / (want.abs() + 1e-30)).max().item<double>();
    EXPECT_LT(rel, 2e-6) << "exponent " << e;
  }
  // clamp with scalar bounds, including min > max (gives max, as PyTorch)
  expect_values(clamp(from_vector<float>({-5, 0, 5, NAN}), 1, -1), {4}, {-1, -1, -1, NAN});
  Tensor big = randn({100000});
  Tensor want = where(big < -0.5, full({1}, -0.5), where(big > 0.5, full({1}, 0.5), big));
  EXPECT_TRUE(eq(clamp(big, -0.5, 0.5), want).all().item<bool>());
  // 16-bit floats take the widened vector path: within bfloat16 rounding of float32
  Tensor b = randn({4099}).to(kBFloat16);
  double err = (sin(b).to(kFloat64) - sin(b.to(kFloat64))).abs().max().item<double>();
  EXPECT_LE(err, 1.0 / 256);
  Tensor h = randn({4099}).to(kFloat16);
  err = (exp(h).to(kFloat64) - exp(h.to(kFloat64))).abs().div(exp(h.to(kFloat64))).max().item<double>();
  EXPECT_LE(err, 1.0 / 1024);
}
