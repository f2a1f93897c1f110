// The CPU backend against eager, op by op: every elementwise op the kernel lowering handles
// (codegen/src/expr.cpp) in every dtype eager accepts, casts between every pair of dtypes,
// the layouts a kernel's loads and stores must address (transposed, broadcast, expanded,
// sliced with a step, at a storage offset, sizes 0 to 4097), and the ops the backend
// deliberately leaves to the reference executor (correct results and a one-line warning).
// Reductions are in test_cpu_reductions.cpp; the harness is cpu_diff.h.
//
// Each check calls the compiled function three times with fresh inputs of one signature (the
// trace, then two replays of compiled code) and compares every call with eager (cpu_diff.h).
// The op matrix uses [7, 33] (231 elements: the kernel's vector loop and its scalar
// remainder) with special values mixed in (NaN, infinities, signed zeros, huge, tiny and
// subnormal values; zeros in divisors). Tests are one per op (or cast source, or layout) with
// the dtypes inside, so ctest runs a few hundred processes rather than thousands; a failure
// names the op and dtype (a trace), and the dtypes eager refuses are recorded as the test
// property "eager_refuses" (the compiled call must refuse them too).
//
// Tolerances: close() (tests/common/close.h) per dtype, plus eager's infinities met exactly,
// except where a result must be exact: one IEEE operation (neg, abs, sqrt, division,
// rounding, comparisons, selections, casts) gives the same bits however it is computed, so
// those compare exactly, NaN meeting NaN, and where IEEE defines it, zeros keep their sign.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <iterator>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include "cpu_diff.h"

using namespace kiln;
using namespace kiln::cputest;

namespace {

struct Operand {
  Values values = Values::Any;
  std::optional<DType> dtype = std::nullopt;  // the test's dtype unless set (masks are bool)
};

struct OpCase {
  std::string name;
  std::vector<Operand> operands;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  Expect expect{};
  // The dtypes the case runs in (default: all). Combinations eager refuses are found at run time
  // and skipped; this only leaves out those another suite covers.
  std::function<bool(DType)> applies = nullptr;
};

using V = std::vector<Tensor>;
const Operand kAny{}, kPos{Values::Positive}, kUnit{Values::Unit}, kNonZero{Values::NonZero},
    kMask{Values::Any, kBool}, kBounded{Values::Bounded};

Expect exact(bool signed_zero = false) {
  Expect e;
  e.exact = true;
  e.signed_zero = signed_zero;
  return e;
}
// Integer rounding division, remainder and fmod and integer pow with a tensor exponent run on
// the reference executor by design: CpuOpsFallback covers them.
bool not_integral(DType d) { return is_floating(d) || d == kBool; }

std::vector<OpCase> elementwise_cases() {
  std::vector<OpCase> c;
  auto unary = [&](std::string name, Tensor (*f)(const Tensor&), Operand x = kAny, Expect e = {}) {
    c.push_back({std::move(name), {x}, [f](const V& in) { return f(in[0]); }, e, nullptr});
  };
  // ---- unary ----
  unary("neg", kiln::neg, kAny, exact(true));
  unary("abs", kiln::abs, kAny, exact(true));
  unary("sign", kiln::sign, kAny, exact());
  unary("exp", kiln::exp);
  unary("exp2", kiln::exp2);
  unary("expm1", kiln::expm1);
  unary("log", kiln::log, kPos);
  unary("log2", kiln::log2, kPos);
  unary("log1p", kiln::log1p, kPos);
  unary("sqrt", kiln::sqrt, kPos, exact(true));
  unary("rsqrt", kiln::rsqrt, kPos);
  unary("reciprocal", kiln::reciprocal, kAny, exact(true));
  unary("sin", kiln::sin);
  unary("cos", kiln::cos);
  unary("tan", kiln::tan);
  unary("asin", kiln::asin, kUnit);
  unary("acos", kiln::acos, kUnit);
  unary("atan", kiln::atan);
  unary("sinh", kiln::sinh);
  unary("cosh", kiln::cosh);
  unary("tanh", kiln::tanh);
  unary("sigmoid", kiln::sigmoid);
  unary("relu", kiln::relu, kAny, exact());
  unary("silu", kiln::silu);
  unary("erf", kiln::erf);
  unary("floor", kiln::floor, kAny, exact(true));
  unary("ceil", kiln::ceil, kAny, exact(true));
  unary("round", kiln::round, kAny, exact(true));
  unary("trunc", kiln::trunc, kAny, exact(true));
  unary("isnan", kiln::isnan, kAny, exact());
  unary("isinf", kiln::isinf, kAny, exact());
  unary("isfinite", kiln::isfinite, kAny, exact());
  unary("logical_not", kiln::logical_not, kAny, exact());
  unary("bitwise_not", kiln::bitwise_not, kAny, exact());
  c.push_back({"gelu", {kAny}, [](const V& in) { return gelu(in[0]); }});
  c.push_back({"gelu_tanh", {kAny}, [](const V& in) { return gelu(in[0], "tanh"); }});
  c.push_back({"nan_to_num", {kAny}, [](const V& in) { return nan_to_num(in[0]); }, exact(true)});
  c.push_back({"nan_to_num_values", {kAny}, [](const V& in) { return nan_to_num(in[0], 1.5, 100.0, -100.0); },
               exact(true)});

  // ---- binary (division by zero: both operands hold zeros, infinities and NaNs) ----
  auto binary = [&](std::string name, std::function<Tensor(const Tensor&, const Tensor&)> f, Operand a = kAny,
                    Operand b = kAny, Expect e = {}, std::function<bool(DType)> applies = nullptr) {
    c.push_back({std::move(name), {a, b}, [f](const V& in) { return f(in[0], in[1]); }, e, std::move(applies)});
  };
  binary("add", [](auto& a, auto& b) { return add(a, b); }, kAny, kAny, exact(true));
  binary("add_alpha2", [](auto& a, auto& b) { return add(a, b, 2); }, kBounded, kBounded);
  binary("add_alpha_float", [](auto& a, auto& b) { return add(a, b, -0.375); }, kBounded, kBounded);
  binary("sub", [](auto& a, auto& b) { return sub(a, b); }, kAny, kAny, exact(true));
  binary("sub_alpha3", [](auto& a, auto& b) { return sub(a, b, 3); }, kBounded, kBounded);
  binary("mul", [](auto& a, auto& b) { return mul(a, b); }, kAny, kAny, exact(true));
  binary("div", [](auto& a, auto& b) { return div(a, b); }, kAny, kAny, exact(true));
  binary("div_trunc", [](auto& a, auto& b) { return div(a, b, "trunc"); }, kAny, kAny, exact(true), not_integral);
  binary("div_floor", [](auto& a, auto& b) { return div(a, b, "floor"); }, kAny, kAny, exact(true), not_integral);
  binary("remainder", [](auto& a, auto& b) { return remainder(a, b); }, kAny, kAny, exact(), not_integral);
  binary("fmod", [](auto& a, auto& b) { return fmod(a, b); }, kAny, kAny, exact(true), not_integral);
  binary("pow", [](auto& a, auto& b) { return pow(a, b); }, kPos, kAny, {}, not_integral);
  binary("atan2", [](auto& a, auto& b) { return atan2(a, b); });
  binary("maximum", [](auto& a, auto& b) { return maximum(a, b); }, kAny, kAny, exact());
  binary("minimum", [](auto& a, auto& b) { return minimum(a, b); }, kAny, kAny, exact());
  binary("eq", [](auto& a, auto& b) { return eq(a, b); }, kAny, kAny, exact());
  binary("ne", [](auto& a, auto& b) { return ne(a, b); }, kAny, kAny, exact());
  binary("lt", [](auto& a, auto& b) { return lt(a, b); }, kAny, kAny, exact());
  binary("le", [](auto& a, auto& b) { return le(a, b); }, kAny, kAny, exact());
  binary("gt", [](auto& a, auto& b) { return gt(a, b); }, kAny, kAny, exact());
  binary("ge", [](auto& a, auto& b) { return ge(a, b); }, kAny, kAny, exact());
  binary("logical_and", [](auto& a, auto& b) { return logical_and(a, b); }, kAny, kAny, exact());
  binary("logical_or", [](auto& a, auto& b) { return logical_or(a, b); }, kAny, kAny, exact());
  binary("logical_xor", [](auto& a, auto& b) { return logical_xor(a, b); }, kAny, kAny, exact());
  binary("bitwise_and", [](auto& a, auto& b) { return bitwise_and(a, b); }, kAny, kAny, exact());
  binary("bitwise_or", [](auto& a, auto& b) { return bitwise_or(a, b); }, kAny, kAny, exact());
  binary("bitwise_xor", [](auto& a, auto& b) { return bitwise_xor(a, b); }, kAny, kAny, exact());
  // a tensor and a number (a wrapped 0-d constant in the graph)
  auto scalar = [&](std::string name, std::function<Tensor(const Tensor&)> f, Operand x = kAny, Expect e = {},
                    std::function<bool(DType)> applies = nullptr) {
    c.push_back({std::move(name), {x}, [f](const V& in) { return f(in[0]); }, e, std::move(applies)});
  };
  scalar("add_scalar", [](auto& x) { return x + 3; }, kAny, exact(true));
  scalar("mul_scalar_float", [](auto& x) { return x * 0.5; }, kAny, exact(true));
  scalar("rsub_scalar", [](auto& x) { return 2.5 - x; }, kAny, exact(true));
  scalar("div_scalar", [](auto& x) { return x / 3; }, kAny, exact(true));
  scalar("scalar_div", [](auto& x) { return 1.5 / x; }, kAny, exact(true));
  scalar("gt_scalar", [](auto& x) { return x > 0.5; }, kAny, exact());
  scalar("pow_2", [](auto& x) { return x.pow(2); });
  scalar("pow_3", [](auto& x) { return x.pow(3); });
  scalar("pow_half", [](auto& x) { return x.pow(0.5); }, kPos);
  scalar("pow_minus1", [](auto& x) { return x.pow(-1); });
  scalar("pow_2_5", [](auto& x) { return x.pow(2.5); }, kPos);
  // integer pow with a constant exponent the lowering has no product form for
  scalar("pow_4", [](auto& x) { return x.pow(4); });
  scalar("scalar_pow", [](auto& x) { return pow(2.0, x); });

  // ---- ternary and selections ----
  c.push_back({"where", {kMask, kAny, kAny}, [](const V& in) { return where(in[0], in[1], in[2]); }, exact(true)});
  c.push_back({"where_cmp", {kAny, kAny}, [](const V& in) { return where(in[0] > in[1], in[0], in[1]); }, exact(true)});
  c.push_back({"where_scalar", {kMask, kAny}, [](const V& in) { return where(in[0], in[1], 2); }, exact(true)});
  c.push_back({"clamp", {kAny}, [](const V& in) { return clamp(in[0], Scalar(-1.5), Scalar(2.5)); }, exact()});
  c.push_back({"clamp_int", {kAny}, [](const V& in) { return clamp(in[0], Scalar(-3), Scalar(7)); }, exact()});
  c.push_back({"clamp_min", {kAny}, [](const V& in) { return clamp(in[0], Scalar(0.5)); }, exact()});
  c.push_back({"clamp_max", {kAny}, [](const V& in) { return clamp(in[0], std::nullopt, Scalar(2)); }, exact()});
  c.push_back({"clamp_tensor", {kAny, kAny, kAny},
               [](const V& in) { return clamp(in[0], std::optional<Tensor>(in[1]), std::optional<Tensor>(in[2])); },
               exact()});
  c.push_back({"lerp", {kBounded, kBounded}, [](const V& in) { return lerp(in[0], in[1], 0.3); }});
  c.push_back({"lerp_tensor", {kBounded, kBounded, kUnit}, [](const V& in) { return lerp(in[0], in[1], in[2]); }});
  c.push_back({"addcmul", {kBounded, kBounded, kBounded}, [](const V& in) { return addcmul(in[0], in[1], in[2]); }});
  c.push_back({"addcmul_value2", {kBounded, kBounded, kBounded},
               [](const V& in) { return addcmul(in[0], in[1], in[2], 2); }});
  c.push_back({"addcmul_value_float", {kBounded, kBounded, kBounded},
               [](const V& in) { return addcmul(in[0], in[1], in[2], -0.25); }});
  c.push_back({"masked_fill", {kAny, kMask}, [](const V& in) { return masked_fill(in[0], in[1], 1); }, exact(true)});
  c.push_back({"masked_fill_float", {kAny, kMask}, [](const V& in) { return masked_fill(in[0], in[1], -2.5); },
               exact(true)});
  // fill_: into an argument through a view (a write-back the caller sees), and into a view of
  // an intermediate
  c.push_back({"fill_input_view", {kAny}, [](const V& in) {
                 Tensor x = in[0];
                 x.narrow(1, 2, 5).fill_(1);
                 return x;
               }, exact(true)});
  c.push_back({"fill_intermediate", {kAny, kAny}, [](const V& in) {
                 Tensor y = mul(in[0], in[1]);
                 y.narrow(1, 2, 5).fill_(0);
                 return y;
               }, exact(true)});
  c.push_back({"masked_fill_inplace", {kAny, kMask}, [](const V& in) {
                 Tensor x = in[0];
                 x.masked_fill_(in[1], 0);
                 return x;
               }, exact(true)});
  c.push_back({"clamp_inplace", {kAny}, [](const V& in) {
                 Tensor x = in[0];
                 x.clamp_(Scalar(-2), Scalar(2));
                 return x;
               }, exact()});
  // a few ops fused into one kernel: 16-bit floats stay float32 between them (eager rounds
  // each, so Bounded values: no intermediate overflows float16 where the result does not)
  c.push_back({"fused_chain", {kBounded, kBounded}, [](const V& in) {
                 return where(in[0] > 0, (in[0] * in[1] + 1).abs().sqrt(), in[1].tanh() * 0.5);
               }});
  return c;
}

const std::vector<OpCase>& cases() {
  static const std::vector<OpCase> c = elementwise_cases();
  return c;
}

uint64_t seed_of(const std::string& s, uint64_t salt) {
  uint64_t h = 1469598103934665603ull ^ salt;
  for (char ch : s) h = (h ^ uint8_t(ch)) * 1099511628211ull;
  return h;
}

// ---- every elementwise op in every dtype, [7, 33] contiguous (a vector body and a tail) ----
// One test per op (a process each under ctest), its dtypes in turn: a failure names both.

class CpuOps : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuOps, MatchesEager) {
  const OpCase& oc = cases()[GetParam()];
  std::vector<DType> dts;
  for (DType d : dtypes())
    if (!oc.applies || oc.applies(d)) dts.push_back(d);
  for_each_dtype(oc.name, dts, [&](DType dt) {
    Inputs inputs = [&](int call) {
      std::vector<Tensor> in;
      for (size_t j = 0; j < oc.operands.size(); ++j)
        in.push_back(make(oc.operands[j].dtype.value_or(dt), {7, 33}, Layout::Contiguous,
                          seed_of(oc.name, uint64_t(dt) * 97 + j * 13 + uint64_t(call) * 1009),
                          oc.operands[j].values));
      return in;
    };
    Fn fn = [f = oc.fn](const V& in) { return V{f(in)}; };
    return check(fn, inputs, oc.expect);
  });
}

INSTANTIATE_TEST_SUITE_P(Elementwise, CpuOps, ::testing::Range<size_t>(0, cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return ident(cases()[info.param].name); });

// ---- casts between every pair of dtypes ----
// Float -> integer casts read values within the target's range: outside it the conversion is
// undefined in C++ (eager has no defined result); float -> bool reads every special value.

class CpuOpsCast : public ::testing::TestWithParam<DType> {};

TEST_P(CpuOpsCast, MatchesEager) {
  DType from = GetParam();
  for_each_dtype("cast from " + std::string(name(from)) + " to", dtypes(), [&](DType to) {
    Values v = is_floating(from) && !is_floating(to) && to != kBool ? Values::InRange : Values::Any;
    bool to_unsigned = to == kUInt8 && is_floating(from);
    Inputs inputs = [&](int call) {
      Tensor x = make(from, {7, 33}, Layout::Contiguous,
                      seed_of("cast", uint64_t(from) * 31 + uint64_t(to) + 1000 * uint64_t(call)), v);
      if (to_unsigned) x = x.abs();  // (a negative float to uint8 is undefined too)
      return V{x};
    };
    Fn fn = [to](const V& in) { return V{in[0].to(to), (in[0] * 1).to(to)}; };
    return check(fn, inputs, exact(true));
  });
}

INSTANTIATE_TEST_SUITE_P(AllPairs, CpuOpsCast, ::testing::ValuesIn(dtypes()),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return "from_" + std::string(name(info.param));
                         });

// ---- layouts and sizes ----
// Two operands a (the output's sizes) and b (the same or broadcastable) in various layouts,
// through a few elementwise ops fused into one kernel.

struct LayoutCase {
  std::string name;
  std::vector<int64_t> sizes;    // a's and the outputs'
  Layout a;
  std::vector<int64_t> b_sizes;  // empty: as a's
  Layout b;
};

const std::vector<LayoutCase>& layout_cases() {
  using L = Layout;
  static const std::vector<LayoutCase> c = {
      {"contiguous_7x33", {7, 33}, L::Contiguous, {}, L::Contiguous},
      {"size0", {0}, L::Contiguous, {}, L::Contiguous},
      {"size1", {1}, L::Contiguous, {}, L::Contiguous},
      {"size7", {7}, L::Contiguous, {}, L::Contiguous},
      {"size1023", {1023}, L::Contiguous, {}, L::Contiguous},
      {"size4097", {4097}, L::Contiguous, {}, L::Contiguous},
      {"scalar_0d", {}, L::Contiguous, {}, L::Contiguous},
      {"empty_2d_0x33", {0, 33}, L::Contiguous, {33}, L::Contiguous},
      {"contiguous_64x1023", {64, 1023}, L::Contiguous, {}, L::Contiguous},
      {"transposed", {7, 33}, L::Transposed, {}, L::Transposed},
      {"contiguous_and_transposed", {7, 33}, L::Contiguous, {}, L::Transposed},
      {"broadcast_row_1xN", {7, 33}, L::Contiguous, {1, 33}, L::Contiguous},
      {"broadcast_vector_N", {7, 33}, L::Transposed, {33}, L::Contiguous},
      {"broadcast_column_Mx1", {7, 33}, L::Contiguous, {7, 1}, L::Contiguous},
      {"expanded", {7, 33}, L::Contiguous, {}, L::Expanded},
      {"expanded_both", {7, 33}, L::Expanded, {}, L::Expanded},
      {"expanded_3d", {3, 5, 33}, L::Transposed, {}, L::Expanded},
      {"sliced_step2", {7, 33}, L::Sliced, {}, L::Sliced},
      {"sliced_1d_1023", {1023}, L::Sliced, {}, L::Contiguous},
      {"narrowed_offset", {7, 33}, L::Narrowed, {}, L::Contiguous},
      {"selected_offset", {7, 33}, L::Selected, {}, L::Narrowed},
      {"transposed_64x1023_row", {64, 1023}, L::Transposed, {1, 1023}, L::Contiguous},
  };
  return c;
}

// Elementwise probes: each operand read with its strides, results of three dtypes stored.
Fn layout_probe(DType dt) {
  return [dt](const V& in) {
    const Tensor &a = in[0], &b = in[1];
    V out = {add(a, b), where(gt(a, b), a, b), a.to(kFloat64)};
    if (is_floating(dt)) out.push_back(sin(a) * b);
    else if (dt == kBool) out.push_back(logical_xor(a, b));
    else out.push_back(a * b - 1);
    return out;
  };
}

class CpuOpsLayouts : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuOpsLayouts, MatchesEager) {
  const LayoutCase& lc = layout_cases()[GetParam()];
  for_each_dtype(lc.name, dtypes(), [&](DType dt) {
    Inputs inputs = [&](int call) {
      uint64_t s = seed_of(lc.name, uint64_t(dt) * 7 + uint64_t(call) * 101);
      return V{make(dt, lc.sizes, lc.a, s), make(dt, lc.b_sizes.empty() ? lc.sizes : lc.b_sizes, lc.b, s + 1)};
    };
    return check(layout_probe(dt), inputs, Expect{});
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, CpuOpsLayouts, ::testing::Range<size_t>(0, layout_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return layout_cases()[info.param].name; });

// ---- edge cases pinned down with explicit values (float32, one kernel each) ----
// Where the random inputs above meet these only by chance: the compiled kernel must give
// eager's values exactly, zeros with their sign.

Inputs fixed(std::vector<std::vector<float>> values) {
  return [values](int) {
    V in;
    for (const auto& v : values) in.push_back(from_vector(v));
    return in;
  };
}
constexpr float kInf = std::numeric_limits<float>::infinity();

// Floor division with a zero quotient keeps the sign of the true quotient (PyTorch's
// copysign(0, a / b)): -0 / 5 and 0 / -5 floor to -0, and so does a quotient that underflows.
TEST(CpuOpsEdgeCases, DivFloorZeroQuotientKeepsItsSign) {
  check([](const V& in) { return V{div(in[0], in[1], "floor"), div(in[0], in[1], "trunc")}; },
        fixed({{-0.0f, 0.0f, 0.0f, -0.0f, 1e-30f, -1e-30f, 3.0f, -3.0f}, {5.0f, -5.0f, 5.0f, -5.0f, 1e30f, 1e30f, 7.0f, 7.0f}}),
        exact(true));
}

// lerp(a, b, w) takes PyTorch's two-sided form: a + w * (b - a) where |w| < 0.5, else
// b - (b - a) * (1 - w). With w = -1.03 and b = inf that is inf - inf = NaN.
TEST(CpuOpsEdgeCases, LerpNegativeWeightUsesTheUpperForm) {
  check([](const V& in) { return V{lerp(in[0], in[1], in[2])}; },
        fixed({{1.0f, 0.0f, 2.0f, -1.0f}, {kInf, -kInf, 4.0f, kInf}, {-1.03f, -0.7f, 0.25f, 0.75f}}), exact());
}

// add/sub with alpha: eager computes a + alpha * b as one multiply-add (GCC contracts it; PyTorch
// calls vec::fmadd), so alpha * b never overflows on its own: inf - 3 * 3e38 = inf, not NaN.
TEST(CpuOpsEdgeCases, SubWithAlphaDoesNotRoundTheProductFirst) {
  check([](const V& in) { return V{sub(in[0], in[1], 3), add(in[0], in[1], -3)}; },
        fixed({{kInf, -kInf, 1.0f, 2.0f}, {3e38f, -3e38f, 3e38f, 1.0f}}), exact());
}

// addcmul(s, t1, t2, value) = s + value * t1 * t2, the products in that order (PyTorch's
// formula): (-0.25 * 3e38) * 2 = -1.5e38, where -0.25 * (3e38 * 2) overflows to -inf.
TEST(CpuOpsEdgeCases, AddcmulMultipliesValueFirst) {
  check([](const V& in) { return V{addcmul(in[0], in[1], in[2], -0.25)}; },
        fixed({{1.0f, 0.0f}, {3e38f, 2.0f}, {2.0f, 3.0f}}), exact());
}

// sinh and cosh of float32 |x| in (88.72, 89.41] are finite (up to FLT_MAX), but SLEEF's
// sinhf/coshf_u10 (documented on [-88.5, 88.5] only) overflow there; eager calls SLEEF for
// every element. A 71-element kernel runs 64 elements in its vector loop (SLEEF) and the last
// 7 in its scalar remainder (the C library's sinhf): every position must agree with eager.
TEST(CpuOpsEdgeCases, SinhCoshNearOverflowAgreeWithEagerInEveryPosition) {
  check([](const V& in) { return V{sinh(in[0]), cosh(in[0]), sinh(-in[0])}; },
        [](int) { return V{linspace(88.6, 89.4, 71, kFloat32)}; }, Expect{});
}

// ---- what the backend deliberately does not compile ----
// Correct results through the reference executor, explain() naming the interpreted kernel, and
// one warning line per reason per process. Each test uses a reason no other test of this
// binary meets, so its first call is the process's first meeting with it.

struct FallbackCase {
  std::string name;
  std::string reason;  // what the warning names: "<op> on <dtype>" (a detail in parentheses may follow)
  DType dtype;
  std::vector<Operand> operands;
  std::function<V(const V&)> fn;
};

const std::vector<FallbackCase>& fallback_cases() {
  static const std::vector<FallbackCase> c = {
      {"div_trunc_int32", "div on int32", kInt32, {kAny, kNonZero},
       [](const V& in) { return V{div(in[0], in[1], "trunc")}; }},
      {"div_floor_int64", "div on int64", kInt64, {kAny, kNonZero},
       [](const V& in) { return V{div(in[0], in[1], "floor")}; }},
      {"floor_divide_int8", "div on int8", kInt8, {kAny, kNonZero},
       [](const V& in) { return V{floor_divide(in[0], in[1])}; }},
      {"div_trunc_uint8", "div on uint8", kUInt8, {kAny, kNonZero},
       [](const V& in) { return V{div(in[0], in[1], "trunc")}; }},
      {"remainder_int32", "remainder on int32", kInt32, {kAny, kNonZero},
       [](const V& in) { return V{remainder(in[0], in[1])}; }},
      {"remainder_int64", "remainder on int64", kInt64, {kAny, kNonZero},
       [](const V& in) { return V{in[0] % in[1]}; }},
      {"fmod_int64", "fmod on int64", kInt64, {kAny, kNonZero},
       [](const V& in) { return V{fmod(in[0], in[1])}; }},
      {"fmod_uint8", "fmod on uint8", kUInt8, {kAny, kNonZero},
       [](const V& in) { return V{fmod(in[0], in[1])}; }},
      // (int16: the op matrix meets integer pow with a constant exponent in the other integer dtypes)
      {"pow_tensor_int16", "pow on int16", kInt16, {kAny, {Values::NearOne}},
       [](const V& in) { return V{pow(in[0], in[1].abs())}; }},
      {"argmax_float32", "argmax on int64", kFloat32, {kAny}, [](const V& in) { return V{in[0].argmax(1)}; }},
      {"argmin_float64", "argmin on int64", kFloat64, {kAny}, [](const V& in) { return V{in[0].argmin(0, true)}; }},
      {"cumsum_float32", "cumsum on float32", kFloat32, {kAny}, [](const V& in) { return V{in[0].cumsum(1)}; }},
      {"cumsum_int32", "cumsum on int64", kInt32, {kAny}, [](const V& in) { return V{in[0].cumsum(0)}; }},
      {"max_dim_float32", "max on float32", kFloat32, {kAny},
       [](const V& in) { auto [v, i] = in[0].max(1); return V{v, i}; }},
      {"min_dim_int64", "min on int64", kInt64, {kAny},
       [](const V& in) { auto [v, i] = in[0].min(0, true); return V{v, i}; }},
  };
  return c;
}

class CpuOpsFallback : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuOpsFallback, CorrectAndWarnsOnce) {
  const FallbackCase& fc = fallback_cases()[GetParam()];
  auto inputs_for = [&](int salt) {
    return [&fc, salt](int call) {
      V in;
      for (size_t j = 0; j < fc.operands.size(); ++j)
        in.push_back(make(fc.operands[j].dtype.value_or(fc.dtype), {7, 33}, Layout::Contiguous,
                          seed_of(fc.name, j + 10 * uint64_t(call) + 1000 * uint64_t(salt)), fc.operands[j].values,
                          Specials::None));
      return in;
    };
  };
  Expect e;
  e.compiled = false;
  ::testing::internal::CaptureStderr();
  Outcome o = check(fc.fn, inputs_for(0), e);
  // a second function meeting the same reason (another shape: another kernel) warns no more
  check(fc.fn, [&](int call) {
    V in = inputs_for(1)(call);
    for (Tensor& t : in) t = t.narrow(0, 0, 5).contiguous();
    return in;
  }, e);
  std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(o, Outcome::Checked) << "eager refused " << fc.name;
  // "<op> on <dtype>", then maybe a parenthesised detail
  std::regex line("kiln: warning: \\[codegen\\] " + fc.reason +
                  "( \\([^)]*\\))? is not compiled for the CPU yet; its kernel runs on the reference executor\n");
  auto f = compile([fn = fc.fn](const V& in) { return fn(in); }, cpu_options());
  Explanation ex = f.explain(inputs_for(0)(0));
  auto n = std::distance(std::sregex_iterator(err.begin(), err.end(), line), std::sregex_iterator());
  EXPECT_EQ(n, 1) << "one warning line for " << fc.reason << " expected; stderr was:\n" << err << "\n" << describe(ex);
  // the interpreted kernel is named in explain()
  bool named = false;
  for (const auto& g : ex.graphs) named |= g.backend.find(fc.reason) != std::string::npos;
  EXPECT_TRUE(named) << describe(ex);
}

INSTANTIATE_TEST_SUITE_P(ByDesign, CpuOpsFallback, ::testing::Range<size_t>(0, fallback_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return fallback_cases()[info.param].name; });

}  // namespace
