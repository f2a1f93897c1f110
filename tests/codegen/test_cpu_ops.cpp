// The CPU backend against eager, op by op: every elementwise op the kernel lowering handles
// (codegen/src/expr.cpp) in every dtype eager accepts, casts between every pair of dtypes,
// the layouts a kernel's loads and stores must address (transposed, broadcast, expanded,
// sliced with a step, at a storage offset, sizes 0 to 4097), and the ops the backend
// deliberately leaves to the reference executor (correct results and a one-line warning);
// integer division's zero-divisor error and its extremes.
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
#include <kiln/codegen/cpu.h>
#include <kiln/ir/graph.h>
#include <kiln/kiln.h>
#include <kiln/passes/pass.h>

#include <iterator>
#include <limits>
#include <regex>
#include <set>
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
// Integer pow with a tensor exponent runs on the reference executor by design: CpuOpsFallback
// covers it.
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
  // (NonZero: integer divisors are never 0, which eager refuses; float divisors still hold
  // zeros. Integer division by zero and INT_MIN / -1: CpuOpsIntegerDivision below.)
  binary("div_trunc", [](auto& a, auto& b) { return div(a, b, "trunc"); }, kAny, kNonZero, exact(true));
  binary("div_floor", [](auto& a, auto& b) { return div(a, b, "floor"); }, kAny, kNonZero, exact(true));
  binary("remainder", [](auto& a, auto& b) { return remainder(a, b); }, kAny, kNonZero, exact());
  binary("fmod", [](auto& a, auto& b) { return fmod(a, b); }, kAny, kNonZero, exact(true));
  binary("pow", [](auto& a, auto& b) { return pow(a, b); }, kPos, kAny, {}, not_integral);
  binary("atan2", [](auto& a, auto& b) { return atan2(a, b); });
  binary("hypot", [](auto& a, auto& b) { return hypot(a, b); }, kAny, kAny, {}, is_floating);
  binary("logaddexp", [](auto& a, auto& b) { return logaddexp(a, b); }, kAny, kAny, {}, is_floating);
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

// Every elementwise op of the op table has a case above under its name (cast has its own suite,
// CpuOpsCast below; fill's cases are fill_input_view and fill_intermediate): an op added to
// ops.def fails here until the CPU backend is tested on it.
TEST(CpuOpsCoverage, EveryElementwiseOpOfTheTableHasACase) {
  std::set<std::string> names;
  for (const OpCase& oc : cases()) names.insert(oc.name);
  for (int o = 0; o < ir::num_ops(); ++o) {
    const ir::OpInfo& info = ir::op_info(OpId(o));
    std::string name(info.name);
    if (info.category != ir::Category::Elementwise || name == "cast" || name == "fill") continue;
    EXPECT_TRUE(names.count(name)) << "no CPU op case for " << name;
  }
}

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
      // From 128 x 128 a transposed operand runs in 64 x 64 tiles (emit.cpp tiled()): full
      // tiles are transposed in registers in square blocks of 8 to 16 lanes by the element's
      // width (stage_blocks), partial ones (the last 32 columns, the last 3 rows) by a scalar
      // loop; one transposed operand, then two.
      {"tiles_192x160_and_contiguous", {192, 160}, L::Transposed, {}, L::Contiguous},
      {"tiles_131x256_both", {131, 256}, L::Transposed, {}, L::Transposed},
      // Past 2^16 elements a kernel with a math call (the probe's sin) runs its innermost loop
      // in prefetching chunks of 256 (emit.cpp chunked()): a partial last chunk, chunks that
      // end mid-row, a strided operand that is not prefetched, rows with a gap between them.
      {"prefetch_1d_65543", {65543}, L::Contiguous, {}, L::Contiguous},
      {"prefetch_rows_300x301_row", {300, 301}, L::Contiguous, {1, 301}, L::Contiguous},
      {"prefetch_sliced_70001", {70001}, L::Sliced, {}, L::Contiguous},
      {"prefetch_narrowed_260x260", {260, 260}, L::Narrowed, {}, L::Selected},
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

// add/sub with alpha: eager computes a + alpha * b as one multiply-add (std::fma, as PyTorch's
// vec::fmadd), so alpha * b never overflows on its own: inf - 3 * 3e38 = inf, not NaN. (The
// sanitizer build, at -O1, caught eager leaving the fusion to GCC, which contracts from -O2 on.)
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

// ---- integer division: div (trunc, floor), remainder and fmod in every integer dtype ----
// The kernels divide with a zero-divisor check (codegen/src/expr.h): values exactly eager's,
// negative operands on both sides, INT_MIN / -1 wrapping as eager's kernels do, and a zero
// divisor raising eager's error after the compiled call instead of trapping (x86's idiv raises
// SIGFPE on both; the checks that meet them run in a process of their own, so a trap fails
// that test and not the binary).

const std::vector<DType> kIntDTypes = {kInt8, kInt16, kInt32, kInt64, kUInt8};

struct IntDivCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> fn;
  std::string op;  // what the error names: the graph's op (floor_divide is a div node)
};

const std::vector<IntDivCase>& int_div_cases() {
  static const std::vector<IntDivCase> c = {
      {"div_trunc", [](const Tensor& a, const Tensor& b) { return div(a, b, "trunc"); }, "div"},
      {"div_floor", [](const Tensor& a, const Tensor& b) { return div(a, b, "floor"); }, "div"},
      // eager names floor_divide in its error; the trace records a div (rounding_mode floor),
      // which the compiled kernel and the reference executor both name
      {"floor_divide", [](const Tensor& a, const Tensor& b) { return floor_divide(a, b); }, "div"},
      {"remainder", [](const Tensor& a, const Tensor& b) { return remainder(a, b); }, "remainder"},
      {"fmod", [](const Tensor& a, const Tensor& b) { return fmod(a, b); }, "fmod"},
      // by numbers (constants in the kernel: no check) including -1, and by a tensor of -1s
      // (a zero in b: the first div raises)
      {"by_constants", [](const Tensor& a, const Tensor& b) {
         return div(a, b, "floor") + floor_divide(a, Scalar(-3)) + remainder(a, Scalar(7)) + fmod(a, Scalar(-1)) +
                div(a, full({1}, Scalar(-1), a.dtype()), "trunc");
       }, "div"},
  };
  return c;
}

// `values` repeated to `n` elements (a vector body and a remainder), as a tensor of `dt`.
Tensor repeated(const std::vector<int64_t>& values, int64_t n, DType dt) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(values[size_t(i) % values.size()]);
  return from_vector(v).to(dt);
}

// Every compiled graph of `f` for `in` compiled all of its kernels.
template <class F>
::testing::AssertionResult all_compiled(const F& f, const V& in) {
  Explanation ex = f.explain(in);
  for (const auto& g : ex.graphs) {
    std::optional<KernelCount> k = parse_backend(g.backend);
    if (!k || k->compiled != k->kernels) return ::testing::AssertionFailure() << describe(ex);
  }
  return ::testing::AssertionSuccess();
}

// The message eager raises for `in`, or "" when it raises nothing.
std::string eager_error(const std::function<V(const V&)>& fn, const V& in) {
  try {
    fn(in);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The compiled call on `in` raises exactly `want` (eager's error for the same inputs).
template <class F>
void expect_error(F& f, V in, const std::string& want) {
  try {
    f(in);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
}

class CpuOpsIntegerDivision : public ::testing::TestWithParam<size_t> {};

// Random operands: x over the dtype's range (int8, uint8) or +-1000 with 0, +-1, 127, -128 and
// 255 mixed in; divisors the same, never 0.
TEST_P(CpuOpsIntegerDivision, MatchesEager) {
  const IntDivCase& dc = int_div_cases()[GetParam()];
  for_each_dtype(dc.name, kIntDTypes, [&](DType dt) {
    Inputs inputs = [&](int call) {
      uint64_t s = seed_of(dc.name, uint64_t(dt) * 131 + uint64_t(call) * 7);
      return V{make(dt, {7, 33}, Layout::Contiguous, s), make(dt, {7, 33}, Layout::Contiguous, s + 1, Values::NonZero)};
    };
    return check([f = dc.fn](const V& in) { return V{f(in[0], in[1])}; }, inputs, exact());
  });
}

// The edges, signs and extremes of each dtype: INT_MIN / -1 (eager wraps: INT_MIN, and
// remainder 0), INT_MIN by INT_MIN, by 1 and by INT_MAX, and every sign combination with an
// inexact quotient (where trunc and floor, and remainder and fmod, differ).
TEST_P(CpuOpsIntegerDivision, ExtremesAndSigns) {
  const IntDivCase& dc = int_div_cases()[GetParam()];
  for_each_dtype(dc.name, kIntDTypes, [&](DType dt) {
    int64_t lo = dt == kInt8 ? INT8_MIN : dt == kInt16 ? INT16_MIN : dt == kInt32 ? INT32_MIN : dt == kInt64 ? INT64_MIN : 0;
    int64_t hi = dt == kInt8 ? INT8_MAX : dt == kInt16 ? INT16_MAX : dt == kInt32 ? INT32_MAX : dt == kInt64 ? INT64_MAX : 255;
    std::vector<int64_t> x, y;
    if (dt == kUInt8) {
      x = {255, 0, 7, 255, 254, 1, 128, 9};
      y = {1, 255, 2, 16, 255, 3, 255, 9};
    } else {
      x = {lo, lo, lo, lo, hi, hi, -7, 7, -7, 7, 0, -1, lo + 1, -6, 6, hi, lo};
      y = {-1, 1, lo, hi, -1, lo, 2, -2, -2, 2, -3, lo, -1, -3, -3, hi, 2};
    }
    Inputs inputs = [&](int) { return V{repeated(x, 7 * 33, dt), repeated(y, 7 * 33, dt)}; };
    in_child_process([&] { return check([f = dc.fn](const V& in) { return V{f(in[0], in[1])}; }, inputs, exact()); });
    return Outcome::Checked;
  });
}

// A zero divisor: the trace (no zeros) compiles the kernel; a later call with one zero raises
// eager's error; a call after it computes again. Small (one thread) and large (the outer loop
// split across threads, the zero in the last thread's part) kernels.
TEST_P(CpuOpsIntegerDivision, ZeroDivisorRaisesEagersError) {
  const IntDivCase& dc = int_div_cases()[GetParam()];
  in_child_process([&] {
    for (DType dt : kIntDTypes) {
      for (std::vector<int64_t> sizes : {std::vector<int64_t>{7, 33}, std::vector<int64_t>{64, 1024}}) {
        SCOPED_TRACE(dc.name + " on " + std::string(name(dt)) + (sizes[0] == 64 ? ", threads" : ", one thread"));
        std::function<V(const V&)> fn = [f = dc.fn](const V& in) { return V{f(in[0], in[1])}; };
        auto f = compile([fn](const V& in) { return fn(in); }, cpu_options());
        auto in = [&](int call, int64_t zero_at) {
          uint64_t s = seed_of(dc.name, uint64_t(dt) * 17 + uint64_t(call));
          Tensor y = make(dt, sizes, Layout::Contiguous, s + 1, Values::NonZero);
          if (zero_at >= 0) y.reshape({-1}).narrow(0, zero_at, 1).fill_(0);
          return V{make(dt, sizes, Layout::Contiguous, s), y};
        };
        V first = in(0, -1);
        EXPECT_TRUE(same_values(f(first)[0], fn(first)[0], false));
        EXPECT_TRUE(all_compiled(f, first));
        int64_t numel = sizes[0] * sizes[1];
        for (int64_t zero_at : {numel - 1, numel * 15 / 16 + 5, int64_t(0)}) {
          V bad = in(1, zero_at);
          std::string want = eager_error(fn, bad);
          EXPECT_EQ(want, "[" + (dc.name == "floor_divide" ? std::string("floor_divide") : dc.op) +
                              "] ZeroDivisionError: integer division or modulo by zero");
          std::string expected = "[" + dc.op + "] ZeroDivisionError: integer division or modulo by zero";
          try {
            f(bad);
            ADD_FAILURE() << "no error for a zero divisor at " << zero_at;
          } catch (const Error& e) {
            EXPECT_EQ(std::string(e.what()), expected);
          }
        }
        V after = in(2, -1);
        EXPECT_TRUE(same_values(f(after)[0], fn(after)[0], false));
        EXPECT_EQ(f.stats().compiles, 1u) << "the zero divisor was met by the compiled kernel, not a new trace";
      }
    }
    return Outcome::Checked;
  });
}

INSTANTIATE_TEST_SUITE_P(Integer, CpuOpsIntegerDivision, ::testing::Range<size_t>(0, int_div_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return int_div_cases()[info.param].name; });

// Several divisions fused into one kernel: the error is the one eager meets first (the
// lowest check flag), whichever thread or position met its zero.
TEST(CpuOpsIntegerDivisionEdgeCases, FusedDivisionsRaiseTheFirstOpsError) {
  in_child_process([] {
    std::function<V(const V&)> fn = [](const V& in) {
      Tensor r = remainder(in[0], in[1]);  // (in this order: the operands of + have none)
      Tensor q = div(in[0], in[2], "floor");
      return V{r * 2 + q};
    };
    auto f = compile([fn](const V& in) { return fn(in); }, cpu_options());
    auto in = [](bool zero_y, bool zero_z) {
      V v = {make(kInt32, {64, 1024}, Layout::Contiguous, 1), make(kInt32, {64, 1024}, Layout::Contiguous, 2, Values::NonZero),
             make(kInt32, {64, 1024}, Layout::Contiguous, 3, Values::NonZero)};
      if (zero_y) v[1].reshape({-1}).narrow(0, 60000, 1).fill_(0);
      if (zero_z) v[2].reshape({-1}).narrow(0, 7, 1).fill_(0);
      return v;
    };
    V ok = in(false, false);
    EXPECT_TRUE(same_values(f(ok)[0], fn(ok)[0], false));
    Explanation ex = f.explain(ok);
    EXPECT_NE(describe(ex).find("cpu: 1 of 1 kernels compiled"), std::string::npos) << "one fused kernel:\n" << describe(ex);
    for (auto [zy, zz] : {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
      V bad = in(zy, zz);
      std::string want = eager_error(fn, bad);
      EXPECT_EQ(want, std::string("[") + (zy ? "remainder" : "div") + "] ZeroDivisionError: integer division or modulo by zero");
      expect_error(f, bad, want);
    }
    return Outcome::Checked;
  });
}

// A transposed operand: the elementwise kernel runs in 64 x 64 tiles (the divisor staged
// through a tile buffer); values, and a zero in the last tile raising eager's error.
TEST(CpuOpsIntegerDivisionEdgeCases, TransposedOperandsInTiles) {
  in_child_process([] {
    std::function<V(const V&)> fn = [](const V& in) { return V{div(in[0], in[1], "floor"), fmod(in[0], in[1])}; };
    Inputs inputs = [](int call) {
      return V{make(kInt64, {200, 300}, Layout::Contiguous, 40 + uint64_t(call)),
               make(kInt64, {200, 300}, Layout::Transposed, 50 + uint64_t(call), Values::NonZero)};
    };
    check(fn, inputs, exact());
    auto f = compile([fn](const V& in) { return fn(in); }, cpu_options());
    f(inputs(0));
    V bad = inputs(1);
    bad[1].select(0, 199).select(0, 299).fill_(0);
    std::string want = eager_error(fn, bad);
    EXPECT_EQ(want, "[div] ZeroDivisionError: integer division or modulo by zero");
    expect_error(f, bad, want);
    return Outcome::Checked;
  });
}

// Integer division inside reductions (its check runs in the row loop) and a division of the
// results (after the loop): values, and the error for a zero anywhere.
TEST(CpuOpsIntegerDivisionEdgeCases, InsideReductions) {
  for (DType dt : {kInt32, kInt64, kInt8}) {
    SCOPED_TRACE(name(dt));
    std::function<V(const V&)> fn = [](const V& in) {
      Tensor q = div(in[0], in[1], "floor");
      return V{q.sum({-1}), remainder(in[0], in[1]).amax({0}), fmod(q.sum({-1}), in[2])};
    };
    Inputs inputs = [dt](int call) {
      return V{make(dt, {7, 33}, Layout::Contiguous, 10 + uint64_t(call)),
               make(dt, {7, 33}, Layout::Contiguous, 20 + uint64_t(call), Values::NonZero),
               make(kInt64, {7}, Layout::Contiguous, 30 + uint64_t(call), Values::NonZero)};
    };
    check(fn, inputs, exact());
    in_child_process([&] {
      auto f = compile([fn](const V& in) { return fn(in); }, cpu_options());
      f(inputs(0));
      for (int which : {1, 2}) {
        V bad = inputs(1);
        bad[size_t(which)].reshape({-1}).narrow(0, 5, 1).fill_(0);
        std::string want = eager_error(fn, bad);
        EXPECT_NE(want, "");
        expect_error(f, bad, want);
      }
      return Outcome::Checked;
    });
  }
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
      // (int16: the op matrix meets integer pow with a constant exponent in the other integer dtypes)
      {"pow_tensor_int16", "pow on int16", kInt16, {kAny, {Values::NearOne}},
       [](const V& in) { return V{pow(in[0], in[1].abs())}; }},
      {"norm_p3_float32", "norm on float32", kFloat32, {kAny}, [](const V& in) { return V{in[0].norm(3, {1})}; }},
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

// ---- streaming stores ----
// Kernels that move 64 MiB and more write their outputs with non-temporal stores, chunk by
// chunk (tile by tile, row by row) through a staging buffer (emit.cpp plan_streams()): the
// whole lines of an aligned destination stream, the rest is copied plainly. Each case against eager: a one-loop kernel whose
// threads' parts and last chunk are partial, rows whose starts are misaligned and whose ends
// cut a chunk, two outputs of different dtypes from one kernel, and a write into a narrowed
// view of an input (a destination whose alignment only the run time knows).

struct StreamCase {
  std::string name;
  std::vector<int64_t> sizes;
  DType dtype;
  Fn fn;
  bool transposed_a = false;  // the first input is given as the transpose of its sizes
  bool exact = true;          // elementwise results are eager's bit for bit; row sums are not
};

const std::vector<StreamCase>& stream_cases() {
  static const std::vector<StreamCase> c = {
      {"f32_1d_partial_chunks", {(int64_t(1) << 23) + 77}, kFloat32,
       [](const V& in) { return V{in[0] * 3 + in[1]}; }},
      {"f64_rows_4099", {1029, 4099}, kFloat64, [](const V& in) { return V{where(in[0] > in[1], in[0], in[1] * 2)}; }},
      {"bf16_and_bool_outputs", {(int64_t(1) << 24) + 5}, kBFloat16,
       [](const V& in) { return V{in[0] + in[1], gt(in[0], in[1])}; }},
      {"i64_into_narrowed_input", {1400, 3001}, kInt64, [](const V& in) {
         Tensor x = in[0];
         x.narrow(1, 1, 3000).copy_(in[1].narrow(1, 0, 3000) * 2);
         return V{x};
       }},
      // transposed reads run in 64 x 64 tiles, whose rows stream out (whole aligned rows) or
      // are copied (the edge tiles, and rows of 4099 elements that start misaligned)
      {"f32_tiles_aligned", {2048, 4096}, kFloat32, [](const V& in) { return V{in[0].t() + in[1]}; }, true},
      {"f32_tiles_ragged", {2051, 4099}, kFloat32, [](const V& in) { return V{in[0].t() * in[1]}; }, true},
      // row-wise kernels stream the row they store: aligned rows of 1024, and rows of 2051 that
      // start misaligned or end mid-line (their whole lines stream, the rest is copied)
      {"f32_softmax_rows_1024", {8195, 1024}, kFloat32, [](const V& in) { return V{softmax(in[0] + in[1], -1)}; }, false, false},
      {"f64_log_softmax_rows_2051", {2051, 2051}, kFloat64, [](const V& in) { return V{log_softmax(in[0], -1)}; }, false, false},
  };
  return c;
}

class CpuStreamingStores : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuStreamingStores, MatchesEager) {
  const StreamCase& sc = stream_cases()[GetParam()];
  Inputs inputs = [&](int call) {
    uint64_t s = seed_of(sc.name, uint64_t(call) * 131);
    std::vector<int64_t> a_sizes = sc.sizes;
    if (sc.transposed_a) std::reverse(a_sizes.begin(), a_sizes.end());
    return V{values_tensor(sc.dtype, a_sizes, s, Values::Bounded, Specials::Sparse),
             values_tensor(sc.dtype, sc.sizes, s + 1, Values::Bounded, Specials::Sparse)};
  };
  EXPECT_EQ(check(sc.fn, inputs, Expect{.exact = sc.exact}, 2), Outcome::Checked);
}

INSTANTIATE_TEST_SUITE_P(Large, CpuStreamingStores, ::testing::Range<size_t>(0, stream_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return stream_cases()[info.param].name; });

// ---- what the vectoriser is asked for ----

// On an AVX-512 host the vector loop is 512 bits wide whatever LLVM's tuning for the CPU model
// prefers (Intel's server cores default to 256): add_sin_cos calls the 16-lane SLEEF forms.
TEST(CpuVectorWidth, Avx512HostsGetSixteenFloatLanes) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "the host has no AVX-512";
  ir::Graph g = ir::parse(
      "graph @g(%a: f32[4096]{1}, %b: f32[4096]{1}) {\n"
      "  %0 = sin(%a) : f32[4096]{1}\n"
      "  %1 = cos(%b) : f32[4096]{1}\n"
      "  %2 = mul(%0, %1) : f32[4096]{1}\n"
      "  return %2\n"
      "}\n");
  passes::Module mod = passes::optimize(g);
  std::string ir = codegen::emit_cpu(*mod.program, codegen::CpuEmit::Llvm);
  EXPECT_NE(ir.find("<16 x float> @Sleef_sinf16_u10avx512f"), std::string::npos) << ir;
  EXPECT_NE(ir.find("<16 x float> @Sleef_cosf16_u10avx512f"), std::string::npos) << ir;
}
