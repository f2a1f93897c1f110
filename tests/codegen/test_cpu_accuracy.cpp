// The accuracy of the CPU backend's transcendental functions, in ulps.
//
// Each function is compiled over 2^20 float32 points spread over its useful domain (large
// sin/cos/tan arguments up to 1e4, subnormal inputs and results, values near the domain's
// edges and poles) and every result is compared with a float64 reference (the std:: function
// on the double of the input): the error of a result y for the reference r is |y - r| in units
// of the float32 spacing at r (2^(e - 23) for r in [2^e, 2^(e+1)), 2^-149 below 2^-126), so a
// correctly rounded result has error <= 0.5. A NaN must meet a NaN and an infinity the same
// infinity (the reference rounded to float32 overflowing counts as infinity).
//
// The vector loop of a large kernel calls SLEEF's u10 functions (Sleef_expf16_u10avx512f ...,
// whose documented bound is 1.0 ulp), float32 erf and tanh kiln's own (kiln_erff16, ...); a
// kernel's scalar remainder calls the C library's (expf ...), or kiln's (kiln_erff, ...). The
// 2^20-point kernels run almost entirely in the vector loop; a size-7 kernel runs only its
// scalar code, fed the points with the largest vector errors and a sample of the domain, and
// must meet the same bound.
//
// Bounds: SLEEF's documented ones: 1.0 ulp (sinhf and coshf_u10: on
// [-88.5, 88.5], so their domains stop there: beyond it SLEEF may return infinity although the
// float32 result is finite up to |x| = 89.41, which test_cpu_ops.cpp's
// CpuOpsEdgeCases.SinhCoshNearOverflowAgreeWithEagerInEveryPosition looks at).
// The composites are several rounded float32 operations around one u10 call, so their bounds
// add those roundings (the measured maxima are well inside). To first order each rounding adds
// its relative error (u10: 2^-23, one IEEE operation or a float32 constant: 2^-24), damped by
// the condition number of what follows, and a relative error e is at most e / 2^-24 ulps (a
// significand near 2):
//   sigmoid = 1 / (1 + exp(-x)): exp 2^-23 (damped by e / (1 + e) <= 1), the add and the
//     division 2^-24 each: 2^-22, bound 4.0 ulp (measured about 2.4), on [-87, 88]: below
//     -87.3 exp(-x) overflows float32 and the formula gives 0 where sigmoid is a float32
//     subnormal (eager uses the same formula).
//   gelu = 0.5 x (1 + erf(x c)), c = 1/sqrt 2: for x >= 0 nothing cancels: x c and c's
//     rounding 2^-23 (erf's condition number is <= 1), erf 2^-23, both halved by 1 + t, the
//     add and the product 2^-24 each: 2^-22, bound 4.0 ulp (measured about 1.5).
//   gelu tanh form, 0.5 x (1 + tanh(c (x + 0.044715 x^3))): the argument carries 7 roundings
//     (7 * 2^-24), tanh 2^-23, halved by 1 + t, then 2 * 2^-24: 6.5 * 2^-24, bound 6.5 ulp
//     (measured about 1.8 to 2.9).
//   For x < 0, 1 + erf(..) and 1 + tanh(..) cancel (at x = -5, 1 + tanh(..) ~ 1e-7), so the
//   bound is on the absolute error, in units of 2^-24 |x| (an ulp of the terms that cancel):
//   the relative errors of t above times |t| <= 1, the add, times 0.5 |x|, plus the product's
//   rounding: 3.0 units (erf form) and 5.5 (tanh form); measured below 1.
// The table of measured maxima is printed and recorded as test properties.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <functional>
#include <iomanip>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_diff.h"

using namespace kiln;
using namespace kiln::cputest;

namespace {

using V = std::vector<Tensor>;
constexpr int64_t kPoints = int64_t(1) << 20;
constexpr double kInf = std::numeric_limits<double>::infinity();

// The float32 spacing at |r| (r a double, possibly outside float32's range).
double ulp_f32(double r) {
  r = std::abs(r);
  if (r < 0x1p-126) return 0x1p-149;
  int e;
  std::frexp(r, &e);  // r = m * 2^e, m in [0.5, 1)
  return std::ldexp(1.0, std::min(e - 1, 127) - 23);
}
double ulp_f64(long double r) {
  r = std::fabs(r);
  if (r < 0x1p-1022L) return 0x1p-1074;
  int e;
  std::frexp(r, &e);
  return std::ldexp(1.0, std::min(e - 1, 1023) - 52);
}

// The error of `got` against the reference `ref`, in float32 ulps (infinite for a NaN or an
// infinity that the reference does not have).
double ulp_error_f32(float got, double ref) {
  if (std::isnan(ref) || std::isnan(got)) return std::isnan(ref) && std::isnan(got) ? 0 : kInf;
  float r = float(ref);
  if (std::isinf(got)) return got == r ? 0 : kInf;
  return std::abs(double(got) - ref) / ulp_f32(ref);
}
double ulp_error_f64(double got, long double ref) {
  if (std::isnan(ref) || std::isnan(got)) return std::isnan(ref) && std::isnan(got) ? 0 : kInf;
  double r = double(ref);
  if (std::isinf(got)) return got == r ? 0 : kInf;
  return double(std::fabs((long double)got - ref) / ulp_f64(ref));
}

// ---- domains: points drawn from weighted pieces ----

struct Piece {
  double weight;
  std::function<double(std::mt19937_64&)> draw;
};
std::function<double(std::mt19937_64&)> uniform(double lo, double hi) {
  return [=](std::mt19937_64& g) { return std::uniform_real_distribution<double>(lo, hi)(g); };
}
// |x| log-uniform in [lo, hi] (lo > 0), with a random sign unless `positive`.
std::function<double(std::mt19937_64&)> log_uniform(double lo, double hi, bool positive = false) {
  return [=](std::mt19937_64& g) {
    double x = std::exp(std::uniform_real_distribution<double>(std::log(lo), std::log(hi))(g));
    return positive || g() % 2 ? x : -x;
  };
}
// Points near k * step for |k| <= kmax (poles and zeros of the trigonometric functions).
std::function<double(std::mt19937_64&)> near_multiples(double step, int kmax, double spread) {
  return [=](std::mt19937_64& g) {
    int k = int(g() % uint64_t(2 * kmax + 1)) - kmax;
    return k * step + std::uniform_real_distribution<double>(-spread, spread)(g);
  };
}
std::vector<float> points(const std::vector<Piece>& pieces, int64_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  double total = 0;
  for (const Piece& p : pieces) total += p.weight;
  std::vector<float> out;
  out.reserve(size_t(n));
  for (const Piece& p : pieces) {
    int64_t k = int64_t(double(n) * p.weight / total);
    for (int64_t i = 0; i < k; ++i) out.push_back(float(p.draw(g)));
  }
  while (int64_t(out.size()) < n) out.push_back(float(pieces[0].draw(g)));
  std::shuffle(out.begin(), out.end(), g);
  return out;
}

struct Case {
  std::string name;
  std::string domain;  // for the table
  std::function<Tensor(const V&)> fn;
  std::function<double(double, double)> ref;  // the float64 reference of f(x) or f(x, y)
  std::vector<Piece> x, y;                   // y: binary functions only
  double bound;                              // ulps
  // For the gelus: points below this are held to an absolute bound instead, in units of
  // max(2^-24 |x|, 2^-149) (see the file comment); -inf: none.
  double ulp_from = -kInf;
  double abs_bound = 0;
};

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;

const std::vector<Case>& cases() {
  auto tiny = log_uniform(1e-45, 1e-3);     // subnormal to small, both signs
  auto subnormal = log_uniform(1e-45, 1.2e-38);
  static const std::vector<Case> c = {
      {"exp", "[-104, 89]: subnormal results, overflow; tiny", [](const V& in) { return exp(in[0]); },
       [](double x, double) { return std::exp(x); },
       {{6, uniform(-104, 89)}, {2, uniform(-104, -87)}, {1, uniform(-1, 1)}, {1, tiny}}, {}, 1.0},
      {"exp2", "[-151, 129]: subnormal results, overflow; tiny", [](const V& in) { return exp2(in[0]); },
       [](double x, double) { return std::exp2(x); },
       {{6, uniform(-151, 129)}, {2, uniform(-150, -126)}, {1, uniform(-1, 1)}, {1, tiny}}, {}, 1.0},
      {"expm1", "[-20, 89]; tiny and subnormal", [](const V& in) { return expm1(in[0]); },
       [](double x, double) { return std::expm1(x); },
       {{6, uniform(-20, 89)}, {2, uniform(-1, 1)}, {2, tiny}}, {}, 1.0},
      {"log", "(0, 3.4e38] log-uniform incl. subnormals; [0.5, 2]", [](const V& in) { return log(in[0]); },
       [](double x, double) { return std::log(x); },
       {{5, log_uniform(1e-45, 3.4e38, true)}, {3, uniform(0.5, 2)}, {1, subnormal}, {1, uniform(-1, 0)}}, {}, 1.0},
      {"log2", "(0, 3.4e38] log-uniform incl. subnormals; [0.5, 2]", [](const V& in) { return log2(in[0]); },
       [](double x, double) { return std::log2(x); },
       {{5, log_uniform(1e-45, 3.4e38, true)}, {3, uniform(0.5, 2)}, {1, subnormal}}, {}, 1.0},
      {"log1p", "(-1, 1e10]; near -1; tiny and subnormal", [](const V& in) { return log1p(in[0]); },
       [](double x, double) { return std::log1p(x); },
       {{4, log_uniform(1e-7, 1e10, true)}, {2, uniform(-1, 1)}, {2, [](std::mt19937_64& g) {
          return -1 + std::exp(std::uniform_real_distribution<double>(std::log(6e-8), std::log(0.5))(g));
        }}, {2, tiny}}, {}, 1.0},
      {"sin", "[-1e4, 1e4]; near k*pi/2; tiny and subnormal", [](const V& in) { return sin(in[0]); },
       [](double x, double) { return std::sin(x); },
       {{5, uniform(-1e4, 1e4)}, {2, uniform(-10, 10)}, {2, near_multiples(M_PI / 2, 6000, 1e-3)}, {1, tiny}}, {},
       1.0},
      {"cos", "[-1e4, 1e4]; near k*pi/2; tiny and subnormal", [](const V& in) { return cos(in[0]); },
       [](double x, double) { return std::cos(x); },
       {{5, uniform(-1e4, 1e4)}, {2, uniform(-10, 10)}, {2, near_multiples(M_PI / 2, 6000, 1e-3)}, {1, tiny}}, {},
       1.0},
      {"tan", "[-1e4, 1e4]; near the poles; tiny and subnormal", [](const V& in) { return tan(in[0]); },
       [](double x, double) { return std::tan(x); },
       {{5, uniform(-1e4, 1e4)}, {2, uniform(-1.6, 1.6)}, {2, near_multiples(M_PI / 2, 6000, 1e-3)}, {1, tiny}}, {},
       1.0},
      {"asin", "[-1, 1]; near +-1; tiny and subnormal", [](const V& in) { return asin(in[0]); },
       [](double x, double) { return std::asin(x); },
       {{6, uniform(-1, 1)}, {2, [](std::mt19937_64& g) {
          double d = std::exp(std::uniform_real_distribution<double>(std::log(6e-8), std::log(0.1))(g));
          return g() % 2 ? 1 - d : d - 1;
        }}, {2, tiny}}, {}, 1.0},
      {"acos", "[-1, 1]; near +-1; tiny", [](const V& in) { return acos(in[0]); },
       [](double x, double) { return std::acos(x); },
       {{6, uniform(-1, 1)}, {2, [](std::mt19937_64& g) {
          double d = std::exp(std::uniform_real_distribution<double>(std::log(6e-8), std::log(0.1))(g));
          return g() % 2 ? 1 - d : d - 1;
        }}, {2, tiny}}, {}, 1.0},
      {"atan", "+-[1e-45, 1e30] log-uniform; [-10, 10]", [](const V& in) { return atan(in[0]); },
       [](double x, double) { return std::atan(x); },
       {{5, log_uniform(1e-45, 1e30)}, {5, uniform(-10, 10)}}, {}, 1.0},
      {"sinh", "[-88.5, 88.5]; tiny", [](const V& in) { return sinh(in[0]); },
       [](double x, double) { return std::sinh(x); },
       {{6, uniform(-88.5, 88.5)}, {2, uniform(-1, 1)}, {2, tiny}}, {}, 1.0},
      {"cosh", "[-88.5, 88.5]; tiny", [](const V& in) { return cosh(in[0]); },
       [](double x, double) { return std::cosh(x); },
       {{6, uniform(-88.5, 88.5)}, {2, uniform(-1, 1)}, {2, tiny}}, {}, 1.0},
      // kiln's own tanh (runtime/src/cpu/vec.h, as erf below): 0.998 ulp at most over every
      // float32 input, measured exhaustively. (SLEEF states 1.0001 ulp for tanhf_u10.)
      {"tanh", "[-10, 10]; tiny and subnormal", [](const V& in) { return tanh(in[0]); },
       [](double x, double) { return std::tanh(x); },
       {{6, uniform(-10, 10)}, {2, uniform(-1, 1)}, {2, tiny}}, {}, 1.0},
      {"erf", "[-5, 5]; tiny and subnormal", [](const V& in) { return erf(in[0]); },
       [](double x, double) { return std::erf(x); },
       // kiln's own erf (runtime/src/cpu/vec.h, every lane and the remainder loop): 0.994 ulp
       // at most over every float32 input, measured exhaustively. (SLEEF 3.5.1's erff_u10,
       // used before, reached 1.85 ulp in its scalar form near |x| = 1e-38.)
       {{6, uniform(-5, 5)}, {2, uniform(-1, 1)}, {2, tiny}}, {}, 1.0},
      {"pow", "x (0, 1e10] log-uniform, y [-20, 20]; x < 0 with integer y",
       [](const V& in) { return pow(in[0], in[1]); }, [](double x, double y) { return std::pow(x, y); },
       {{7, log_uniform(1e-10, 1e10, true)}, {2, uniform(0.5, 2)}, {1, uniform(-10, 0)}},
       {{8, uniform(-20, 20)}, {2, [](std::mt19937_64& g) { return double(int(g() % 41) - 20); }}}, 1.0},
      {"atan2", "y, x +-[1e-30, 1e30] log-uniform; [-10, 10]", [](const V& in) { return atan2(in[0], in[1]); },
       [](double y, double x) { return std::atan2(y, x); },
       {{5, log_uniform(1e-30, 1e30)}, {5, uniform(-10, 10)}}, {{5, log_uniform(1e-30, 1e30)}, {5, uniform(-10, 10)}},
       // SLEEF's scalar atan2f_u10 (the remainder loop) reaches 1.23 ulp where the result is
       // subnormal (|y / x| ~ 1e-39); the vector form stays under 1.0.
       1.25},
      {"sigmoid", "[-87, 88]; tiny", [](const V& in) { return sigmoid(in[0]); },
       [](double x, double) { return 1 / (1 + std::exp(-x)); }, {{6, uniform(-87, 88)}, {3, uniform(-5, 5)}, {1, tiny}},
       {}, 4.0},
      {"gelu", "[-10, 10]; tiny (ulps for x >= 0)", [](const V& in) { return gelu(in[0]); },
       [](double x, double) { return 0.5 * x * std::erfc(-x * kSqrt1_2); },
       {{6, uniform(-10, 10)}, {3, uniform(-1, 3)}, {1, tiny}}, {}, 4.0, 0.0, 3.0},
      {"gelu_tanh", "[-10, 10]; tiny (ulps for x >= 0)", [](const V& in) { return gelu(in[0], "tanh"); },
       [](double x, double) { return 0.5 * x * (1 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x))); },
       {{6, uniform(-10, 10)}, {3, uniform(-1, 3)}, {1, tiny}}, {}, 6.5, 0.0, 5.5},
  };
  return c;
}

// Runs `fn` compiled on `inputs`: the first call traces (eagerly), the second runs the kernel.
Tensor compiled_run(const std::function<Tensor(const V&)>& fn, const V& inputs, std::string* backend) {
  auto f = compile([fn](const V& in) { return fn(in); }, cpu_options());
  f(inputs);
  Tensor out = f(inputs);
  Explanation ex = f.explain(inputs);
  *backend = ex.graphs.empty() ? "" : ex.graphs[0].backend;
  return out;
}

struct Measured {
  double max_ulp = 0;       // over the points held to ulps
  double max_abs_rel = 0;   // gelus below ulp_from: |error| / (2^-24 * |x|)
  size_t worst = 0;         // the index of the largest ulp error
  std::vector<size_t> order;  // indices by decreasing error (the first few)
};

Measured measure(const Case& c, const std::vector<float>& x, const std::vector<float>& y, const std::vector<float>& got) {
  Measured m;
  std::vector<double> err(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double r = c.ref(double(x[i]), y.empty() ? 0.0 : double(y[i]));
    if (double(x[i]) < c.ulp_from) {
      double unit = std::max(0x1p-24 * std::abs(double(x[i])), 0x1p-149);
      double a = std::isnan(r) ? (std::isnan(got[i]) ? 0 : kInf) : std::abs(double(got[i]) - r) / unit;
      m.max_abs_rel = std::max(m.max_abs_rel, a);
      err[i] = a / 4;  // in units of the absolute bound, for picking the worst points
      continue;
    }
    err[i] = ulp_error_f32(got[i], r);
    if (err[i] > m.max_ulp) {
      m.max_ulp = err[i];
      m.worst = i;
    }
  }
  std::vector<size_t> idx(x.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  size_t k = std::min<size_t>(448, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + ptrdiff_t(k), idx.end(), [&](size_t a, size_t b) { return err[a] > err[b]; });
  m.order.assign(idx.begin(), idx.begin() + ptrdiff_t(k));
  return m;
}

std::string table_line(const std::string& name, const std::string& path, double ulp, const std::string& domain) {
  std::ostringstream o;
  o << std::left << std::setw(10) << name << std::setw(8) << path << std::right << std::setw(9) << std::fixed
    << std::setprecision(3) << ulp << "  " << domain;
  return o.str();
}

class CpuAccuracy : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuAccuracy, Float32WithinBound) {
  const Case& c = cases()[GetParam()];
  uint64_t seed = std::hash<std::string>{}(c.name) % 1000003 + 0x5eed;  // stable per function
  std::vector<float> x = points(c.x, kPoints, seed), y = c.y.empty() ? std::vector<float>{} : points(c.y, kPoints, seed + 1);
  V in = {from_vector(x)};
  if (!y.empty()) in.push_back(from_vector(y));
  std::string backend;
  Tensor out = compiled_run(c.fn, in, &backend);
  std::optional<KernelCount> k = parse_backend(backend);
  ASSERT_TRUE(k && k->compiled == k->kernels && k->kernels >= 1) << backend;
  std::vector<float> got = out.to_vector<float>();
  Measured m = measure(c, x, y, got);
  auto where = [&](size_t i) {
    std::ostringstream o;
    o.precision(9);
    o << "x = " << x[i];
    if (!y.empty()) o << ", y = " << y[i];
    o << ": compiled " << got[i] << ", reference " << std::setprecision(17) << c.ref(x[i], y.empty() ? 0.0 : y[i]);
    return o.str();
  };
  std::cout << table_line(c.name, "vector", m.max_ulp, c.domain) << "\n";
  RecordProperty("max_ulp_vector", std::to_string(m.max_ulp));
  EXPECT_LE(m.max_ulp, c.bound) << c.name << " over " << c.domain << "; worst at " << where(m.worst);
  if (c.ulp_from > -kInf) {
    std::cout << table_line(c.name, "abs", m.max_abs_rel, "x < " + std::to_string(int(c.ulp_from)) + ": |error| / (2^-24 |x|)") << "\n";
    RecordProperty("max_abs_error_over_2^-24_x", std::to_string(m.max_abs_rel));
    EXPECT_LE(m.max_abs_rel, c.abs_bound) << c.name << " below " << c.ulp_from;
  }

  // The scalar code: a size-7 kernel, fed the worst points of the vector run and a sample.
  std::vector<float> tx, ty;
  for (size_t i : m.order) {
    tx.push_back(x[i]);
    if (!y.empty()) ty.push_back(y[i]);
  }
  for (size_t i = 0; i < 7 * 600; ++i) {
    size_t j = (i * 2654435761u) % x.size();
    tx.push_back(x[j]);
    if (!y.empty()) ty.push_back(y[j]);
  }
  while (tx.size() % 7) {
    tx.push_back(x[tx.size()]);
    if (!y.empty()) ty.push_back(y[ty.size()]);
  }
  auto f = compile([fn = c.fn](const V& v) { return fn(v); }, cpu_options());
  std::vector<float> tgot(tx.size());
  for (size_t b = 0; b < tx.size(); b += 7) {
    V tin = {from_vector(std::vector<float>(tx.begin() + ptrdiff_t(b), tx.begin() + ptrdiff_t(b + 7)))};
    if (!y.empty()) tin.push_back(from_vector(std::vector<float>(ty.begin() + ptrdiff_t(b), ty.begin() + ptrdiff_t(b + 7))));
    if (b == 0) f(tin);  // the trace
    std::vector<float> r = f(tin).to_vector<float>();
    std::copy(r.begin(), r.end(), tgot.begin() + ptrdiff_t(b));
  }
  {
    V tin = {from_vector(std::vector<float>(tx.begin(), tx.begin() + 7))};
    if (!y.empty()) tin.push_back(from_vector(std::vector<float>(ty.begin(), ty.begin() + 7)));
    std::optional<KernelCount> tk = parse_backend(f.explain(tin).graphs.at(0).backend);
    ASSERT_TRUE(tk && tk->compiled == tk->kernels) << "the size-7 kernel is not compiled";
  }
  Measured t = measure(c, tx, ty, tgot);
  std::cout << table_line(c.name, "tail", t.max_ulp, "size-7 kernel: the worst vector points and a sample") << "\n";
  RecordProperty("max_ulp_tail", std::to_string(t.max_ulp));
  std::ostringstream worst;
  worst.precision(9);
  worst << "x = " << tx[t.worst];
  if (!ty.empty()) worst << ", y = " << ty[t.worst];
  worst << ": compiled " << tgot[t.worst] << ", reference " << std::setprecision(17)
        << c.ref(tx[t.worst], ty.empty() ? 0.0 : ty[t.worst]);
  EXPECT_LE(t.max_ulp, c.bound) << c.name << " in the scalar tail; worst at " << worst.str();
  if (c.ulp_from > -kInf) {
    EXPECT_LE(t.max_abs_rel, c.abs_bound) << c.name << " in the scalar tail below " << c.ulp_from;
  }
}

INSTANTIATE_TEST_SUITE_P(Sleef, CpuAccuracy, ::testing::Range<size_t>(0, cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return cases()[info.param].name; });

// ---- float64: a few functions against long double (x87's 64-bit significand) ----

struct Case64 {
  std::string name, domain;
  std::function<Tensor(const Tensor&)> fn;
  std::function<long double(long double)> ref;
  std::function<double(std::mt19937_64&)> draw;
};

class CpuAccuracy64 : public ::testing::TestWithParam<size_t> {};

const std::vector<Case64>& cases64() {
  static const std::vector<Case64> c = {
      {"exp", "[-745, 709.7]", [](const Tensor& x) { return exp(x); }, [](long double x) { return expl(x); },
       uniform(-745, 709.7)},
      {"log", "(0, 1e308] log-uniform incl. subnormals", [](const Tensor& x) { return log(x); },
       [](long double x) { return logl(x); }, log_uniform(4.9e-324, 1e308, true)},
      {"sin", "[-1e4, 1e4]", [](const Tensor& x) { return sin(x); }, [](long double x) { return sinl(x); },
       uniform(-1e4, 1e4)},
      {"tanh", "[-20, 20]", [](const Tensor& x) { return tanh(x); }, [](long double x) { return tanhl(x); },
       uniform(-20, 20)},
  };
  return c;
}

TEST_P(CpuAccuracy64, Float64WithinOneUlp) {
  const Case64& c = cases64()[GetParam()];
  std::mt19937_64 g(0xf64 + GetParam());
  std::vector<double> x(size_t(kPoints / 2));
  for (double& v : x) v = c.draw(g);
  auto f = compile([fn = c.fn](const Tensor& t) { return fn(t); }, cpu_options());
  Tensor in = from_vector(x);
  f(in);
  std::vector<double> got = f(in).to_vector<double>();
  std::optional<KernelCount> k = parse_backend(f.explain(in).graphs.at(0).backend);
  ASSERT_TRUE(k && k->compiled == k->kernels);
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double e = ulp_error_f64(got[i], c.ref(x[i]));
    if (e > worst) {
      worst = e;
      at = i;
    }
  }
  std::cout << table_line(c.name + "64", "vector", worst, c.domain) << "\n";
  RecordProperty("max_ulp_vector", std::to_string(worst));
  EXPECT_LE(worst, 1.0) << c.name << " float64; worst at x = " << std::setprecision(17) << x[at] << ": compiled "
                        << got[at] << ", reference " << double(c.ref(x[at]));
}

INSTANTIATE_TEST_SUITE_P(Sleef, CpuAccuracy64, ::testing::Range<size_t>(0, cases64().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return cases64()[info.param].name; });

// float32 exp, erf and tanh are kiln's own functions (runtime/src/cpu/vec.h), which compiled
// kernels call in the 16-lane body, the 8-lane remainder and the scalar tail (the Jit maps expf,
// erff and tanhf to kiln_expf16, kiln_expf8 and kiln_expf, ...): a compiled kernel over 2^16 +
// 13 points gives eager's values bit for bit, and so do sigmoid on exp and gelu on erf. (SLEEF's
// forms, used before, differ from them by up to an ulp. gelu's tanh form is left out: its
// polynomial argument is rounded differently in the kernel.)
TEST(CpuAccuracy, OwnMathIsEagersFunctionInEveryLane) {
  const std::vector<float> x =
      points({{6, uniform(-6, 6)}, {2, uniform(-1, 1)}, {2, log_uniform(1e-45, 1e-3)}, {2, uniform(-105, 90)}},
             (int64_t(1) << 16) + 13, 17);
  const Tensor in = from_vector<float>(x);
  const std::vector<std::pair<std::string, std::function<Tensor(const V&)>>> ops = {
      {"exp", [](const V& v) { return exp(v[0]); }},
      {"sigmoid", [](const V& v) { return sigmoid(v[0]); }},
      {"silu", [](const V& v) { return silu(v[0]); }},
      {"erf", [](const V& v) { return erf(v[0]); }},
      {"tanh", [](const V& v) { return tanh(v[0]); }},
      {"gelu", [](const V& v) { return gelu(v[0]); }},
  };
  for (const auto& [name, fn] : ops) {
    std::string backend;
    const Tensor got = compiled_run(fn, {in}, &backend), want = fn({in});
    std::optional<KernelCount> k = parse_backend(backend);
    ASSERT_TRUE(k && k->compiled == k->kernels && k->kernels >= 1) << name << ": " << backend;
    const float* g = got.data_ptr<float>();
    const float* w = want.data_ptr<float>();
    int64_t differ = 0, first = -1;
    for (int64_t i = 0; i < in.numel(); ++i)
      if (std::memcmp(&g[i], &w[i], sizeof(float)) != 0 && !(std::isnan(g[i]) && std::isnan(w[i])))
        differ += 1, first = first < 0 ? i : first;
    EXPECT_EQ(differ, 0) << name << ": first at x = " << (first < 0 ? 0.0f : x[size_t(first)]);
  }
}

}  // namespace
