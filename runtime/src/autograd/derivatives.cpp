// The derivative table: one record per op of the op table, in the op table's order. A rule
// returns each operand's gradient (undefined: none) in terms of kiln's own ops, so that a
// backward with create_graph is recorded like any program; the engine then sums each gradient
// to its operand's shape (broadcasting) and casts it to its dtype. Non-differentiable points
// follow PyTorch's conventions: relu'(0) = 0, abs'(0) = 0, ties of amax share the gradient
// evenly, clamp passes it at its bounds, a rounding op's gradient is 0.
#include "derivatives.h"

#include <array>
#include <cmath>
#include <numbers>

#include "graph.h"
#include "kiln/runtime/factories.h"
#include "kiln/runtime/ops.h"

namespace kiln::autograd {

using D = Derivative;
using K = Derivative::Kind;
using Grads = std::vector<Tensor>;

// ---- the context's helpers ----
Tensor RuleCtx::x(size_t i) const {
  if (in[i].defined()) return in[i];
  KILN_CHECK(number[i].has_value(), "autograd", "internal error: operand ", i, " was not saved");
  const Tensor& like = grad.empty() || !grad[0].defined() ? out[0] : grad[0];
  return scalar_tensor(*number[i], TensorOptions(like.dtype()).device(like.device()));
}
const Attr* RuleCtx::attr(std::string_view name) const {
  for (const Attr& a : *attrs)
    if (a.name == name) return &a;
  return nullptr;
}
int64_t RuleCtx::i64(std::string_view name) const {
  const Attr* a = attr(name);
  KILN_CHECK(a && std::holds_alternative<int64_t>(a->value), "autograd", "internal error: attribute ", name);
  return std::get<int64_t>(a->value);
}
double RuleCtx::f64(std::string_view name) const {
  const Attr* a = attr(name);
  KILN_CHECK(a, "autograd", "internal error: attribute ", name);
  if (auto* d = std::get_if<double>(&a->value)) return *d;
  if (auto* i = std::get_if<int64_t>(&a->value)) return double(*i);
  KILN_FAIL("autograd", "internal error: attribute ", name, " is not a number");
}
bool RuleCtx::flag(std::string_view name) const {
  const Attr* a = attr(name);
  return a && std::holds_alternative<bool>(a->value) && std::get<bool>(a->value);
}
IntList RuleCtx::ints(std::string_view name) const {
  const Attr* a = attr(name);
  return a && std::holds_alternative<IntList>(a->value) ? std::get<IntList>(a->value) : IntList{};
}
bool RuleCtx::is_none(std::string_view name) const {
  const Attr* a = attr(name);
  return !a || std::holds_alternative<NoneAttr>(a->value);
}
std::string RuleCtx::str(std::string_view name) const {
  const Attr* a = attr(name);
  return a && std::holds_alternative<std::string>(a->value) ? std::get<std::string>(a->value) : std::string();
}
Scalar RuleCtx::number_attr(std::string_view name) const {
  const Attr* a = attr(name);
  KILN_CHECK(a, "autograd", "internal error: attribute ", name);
  return attr_scalar(a->value);
}

Tensor sum_to(const Tensor& g, IntArrayRef to) {
  Tensor r = g;
  const int64_t lead = r.dim() - int64_t(to.size());
  if (lead > 0) {
    IntList dims(static_cast<size_t>(lead));
    for (int64_t d = 0; d < lead; ++d) dims[size_t(d)] = d;
    r = r.sum(dims);
  }
  IntList ones;
  for (size_t d = 0; d < to.size(); ++d)
    if (to[d] == 1 && r.impl().sizes[d] != 1) ones.push_back(int64_t(d));
  if (!ones.empty()) r = r.sum(ones, true);
  return r;
}

namespace {

// ---- shared pieces of rules ----
// A reduction's reduced dims of operand x (sorted, non-negative; all for an empty list).
IntList reduced_dims(const RuleCtx& c, int64_t rank, const char* attr = "dims") {
  IntList dims;
  if (c.attr(attr) && std::holds_alternative<int64_t>(c.attr(attr)->value)) {
    dims.push_back(c.i64(attr));
  } else {
    dims = c.ints(attr);
  }
  if (dims.empty())
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  for (int64_t& d : dims) d = d < 0 ? d + rank : d;
  std::sort(dims.begin(), dims.end());
  return dims;
}
// A reduction's result (or its gradient) brought back to the operand's shape by broadcasting.
Tensor unreduce(const Tensor& g, const RuleCtx& c, const std::vector<int64_t>& sizes, const char* attr = "dims") {
  Tensor r = g;
  if (!c.flag("keepdim"))
    for (int64_t d : reduced_dims(c, int64_t(sizes.size()), attr)) r = r.unsqueeze(d);
  return r.expand(sizes);
}
int64_t reduced_count(const RuleCtx& c, const std::vector<int64_t>& sizes, const char* attr = "dims") {
  int64_t n = 1;
  for (int64_t d : reduced_dims(c, int64_t(sizes.size()), attr)) n *= sizes[size_t(d)];
  return n;
}
Tensor zeros_as(const Tensor& like, const std::vector<int64_t>& sizes) {
  return zeros(sizes, TensorOptions(like.dtype()).device(like.device()));
}
// g spread into a zero tensor of `sizes` where `view` of it reads. (Differentiating this again
// would need the view's write to be recorded: refused under create_graph, never silently zero.)
template <typename View>
Tensor embed(const Tensor& g, const std::vector<int64_t>& sizes, const char* op, View view) {
  KILN_CHECK(!is_grad_enabled() || !g.requires_grad(), "autograd", "double backward through ", op,
             " (create_graph) is not supported by kiln yet");
  Tensor z = zeros_as(g, sizes);
  Tensor v = view(z);
  v.copy_(g);
  return z;
}
// An operand's sizes (rules that need them save the operand).
const std::vector<int64_t>& sizes_of(const Tensor& t) { return t.impl().sizes; }

// d(out)/d(x) * g for a unary op from a factor.
template <typename F>
Grads unary(const RuleCtx& c, F factor) {
  return {c.grad[0].defined() ? factor(c) : Tensor()};
}

Tensor matmul_grad_a(const Tensor& g, const Tensor& a, const Tensor& b) {
  // a [.., n, k] @ b [.., k, m]: 1-d operands are a row (a) or a column (b) vector.
  if (a.dim() == 1 && b.dim() == 1) return g * b;
  if (b.dim() == 1) return g.unsqueeze(-1) * b;  // g [.., n], b [k] -> [.., n, k]
  if (a.dim() == 1) return g.unsqueeze(-2).matmul(b.transpose(-1, -2)).squeeze(-2);
  return g.matmul(b.transpose(-1, -2));
}
Tensor matmul_grad_b(const Tensor& g, const Tensor& a, const Tensor& b) {
  if (a.dim() == 1 && b.dim() == 1) return g * a;
  if (a.dim() == 1) return a.unsqueeze(-1) * g.unsqueeze(-2);  // a [k], g [.., m] -> [.., k, m]
  if (b.dim() == 1) return a.transpose(-1, -2).matmul(g.unsqueeze(-1)).squeeze(-1);
  return a.transpose(-1, -2).matmul(g);
}

// Where x equals the extremum r (broadcast back), the gradient shared evenly among the ties.
Tensor share_among_ties(const RuleCtx& c, const Tensor& x, const Tensor& r, const Tensor& g, const char* attr) {
  Tensor mask = x == unreduce(r, c, x.impl().sizes, attr);
  Tensor count = mask.sum(reduced_dims(c, x.dim(), attr), true).expand(x.impl().sizes);
  Tensor share = unreduce(g, c, x.impl().sizes, attr) / count;
  return where(mask, share, zeros_as(share, {}));
}

// g (x - mean) / (N - correction), for var's and std's rules.
Tensor centred_over_count(const RuleCtx& c) {
  const Tensor& x = c.in[0];
  const double n = double(reduced_count(c, sizes_of(x))) - double(c.attr("correction") ? c.i64("correction") : 1);
  return unreduce(c.grad[0], c, sizes_of(x)) * (x - x.mean(reduced_dims(c, x.dim()), true)) / n;
}

// ---- the table ----
struct Table {
  std::array<Derivative, size_t(0)
#define KILN_OP(id, ...) +1
#include "kiln/runtime/ops.def"
#undef KILN_OP
  > rows{};
  std::array<bool, decltype(rows){}.size()> listed{};
  void rule(OpId op, Rule r, bool in, bool out) { set(op, {K::Rule, r, in, out, ""}); }
  void no_grad(OpId op) { set(op, {K::NotDifferentiable, nullptr, false, false, ""}); }
  void missing(OpId op, const char* why) { set(op, {K::Missing, nullptr, false, false, why}); }
  void set(OpId op, Derivative d) {
    rows[size_t(op)] = d;
    listed[size_t(op)] = true;
  }
};

constexpr bool In = true, Out = true, NoIn = false, NoOut = false;

Table build() {
  Table t;
  using O = OpId;
  t.no_grad(O::Constant);
  t.missing(O::Cond, "a cond's branches are graphs; eager code never records one");

  // ---- unary ----
  t.rule(O::Neg, [](const RuleCtx& c) { return unary(c, [](auto& c) { return -c.grad[0]; }); }, NoIn, NoOut);
  t.rule(O::Abs, [](const RuleCtx& c) { return unary(c, [](auto& c) { return c.grad[0] * c.in[0].sign(); }); }, In, NoOut);
  t.rule(O::Sign, [](const RuleCtx& c) { return unary(c, [](auto& c) { return zeros_like(c.grad[0]); }); }, NoIn, NoOut);
  t.rule(O::Exp, [](const RuleCtx& c) { return unary(c, [](auto& c) { return c.grad[0] * c.out[0]; }); }, NoIn, Out);
  t.rule(O::Exp2, [](const RuleCtx& c) {
    return unary(c, [](auto& c) { return c.grad[0] * c.out[0] * std::numbers::ln2; });
  }, NoIn, Out);
  t.rule(O::Expm1, [](const RuleCtx& c) { return unary(c, [](auto& c) { return c.grad[0] * (c.out[0] + 1); }); }, NoIn, Out);
  t.rule(O::Log, [](const RuleCtx& c) { return unary(c, [](auto& c) { return c.grad[0] / c.in[0]; }); }, In, NoOut);
  t.rule(O::Log2, [](const RuleCtx& c) {
    return unary(c, [](auto& c) { return c.grad[0] / (c.in[0] * std::numbers::ln2); });
  }, In, NoOut);
  t.rule(O::Log1p, [](const RuleCtx& c) { return unary(c, [](auto& c) { return c.grad[0] / (c.in[0] + 1); }); }, In, NoOut);
  t.rule(O::Sqrt, [](const RuleCtx& c) { return unary(c, [](auto& c) { return c.grad[0] / (c.out[0] * 2); }); }, NoIn, Out);
  t.rule(O::Rsqrt, [](const RuleCtx& c) {
    return unary(c, [](auto& c) { return c.grad[0] * c.out[0].pow(3) * -0.5; });
  }, NoIn, Out);
  t.rule(O::Reciprocal, [](const RuleCtx& c) {
    return unary(c, [](auto& c) { return -c.grad[0] * c.out[0] * c.out[0]; });
  }, NoIn, Out);
  t.rule(O::Sin, [](const RuleCtx& c) { return unary(c, [](auto& c) { return c.grad[0] * c.in[0].cos(); }); }, In, NoOut);
  t.rule(O::Cos, [](const RuleCtx& c) { return unary(c, [](auto& c) { return -c.grad[0] * c.in[0].sin(); }); }, In, NoOut);
  t.rule(O::Tan, [](const RuleCtx& c) {
    return unary(c, [](auto& c) { return c.grad[0] * (c.out[0] * c.out[0] + 1); });
  }, NoIn, Out);
  t.rule(O::Asin, [](const RuleCtx& c) {
    return unary(c, [](auto& c) { return c.grad[0] * (1 - c.in[0] * c.in[0]).rsqrt(); });
  }, In, NoOut);
  t.rule(O::Acos, [](const RuleCtx& c) {
    return unary(c, [](auto& c) { return -c.grad[0] * (1 - c.in[0] * c.in[0]).rsqrt(); });
  }, In, NoOut);
  t.rule(O::Atan, [](const RuleCtx& c) {
    return unary(c, [](auto& c) { return c.grad[0] / (c.in[0] * c.in[0] + 1); });
  }, In, NoOut);
  t.rule(O::Sinh, [](const RuleCtx& c) { return unary(c, [](auto& c) { return c.grad[0] * c.in[0].cosh(); }); }, In, NoOut);
  t.rule(O::Cosh, [](const RuleCtx& c) { return unary(c, [](auto& c) { return c.grad[0] * c.in[0].sinh(); }); }, In, NoOut);
  t.rule(O::Tanh, [](const RuleCtx& c) {
    return unary(c, [](auto& c) { return c.grad[0] * (1 - c.out[0] * c.out[0]); });
  }, NoIn, Out);
  t.rule(O::Sigmoid, [](const RuleCtx& c) {
    return unary(c, [](auto& c) { return c.grad[0] * c.out[0] * (1 - c.out[0]); });
  }, NoIn, Out);
  t.rule(O::Relu, [](const RuleCtx& c) {
    return unary(c, [](auto& c) { return where(c.out[0] > 0, c.grad[0], zeros_as(c.grad[0], {})); });
  }, NoIn, Out);
  t.rule(O::Gelu, [](const RuleCtx& c) {
    return unary(c, [](auto& c) {
      const Tensor& x = c.in[0];
      if (c.str("approximate") == "tanh") {
        // y = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
        const double k = std::sqrt(2.0 / std::numbers::pi);
        Tensor u = (x + x.pow(3) * 0.044715) * k;
        Tensor th = u.tanh();
        Tensor du = (x * x * (3 * 0.044715) + 1) * k;
        return c.grad[0] * ((th + 1) * 0.5 + x * 0.5 * (1 - th * th) * du);
      }
      // y = x Phi(x): Phi(x) + x phi(x)
      Tensor cdf = ((x * std::numbers::sqrt2 / 2).erf() + 1) * 0.5;
      Tensor pdf = (x * x * -0.5).exp() * (1 / std::sqrt(2 * std::numbers::pi));
      return c.grad[0] * (cdf + x * pdf);
    });
  }, In, NoOut);
  t.rule(O::Silu, [](const RuleCtx& c) {
    return unary(c, [](auto& c) {
      Tensor s = c.in[0].sigmoid();
      return c.grad[0] * s * (1 + c.in[0] * (1 - s));
    });
  }, In, NoOut);
  t.rule(O::Erf, [](const RuleCtx& c) {
    return unary(c, [](auto& c) { return c.grad[0] * (-c.in[0] * c.in[0]).exp() * (2 / std::sqrt(std::numbers::pi)); });
  }, In, NoOut);
  for (OpId op : {O::Floor, O::Ceil, O::Round, O::Trunc})
    t.rule(op, [](const RuleCtx& c) { return unary(c, [](auto& c) { return zeros_like(c.grad[0]); }); }, NoIn, NoOut);
  for (OpId op : {O::IsNan, O::IsInf, O::IsFinite, O::LogicalNot, O::BitwiseNot}) t.no_grad(op);
  t.rule(O::NanToNum, [](const RuleCtx& c) {
    return unary(c, [](auto& c) { return where(c.in[0].isfinite(), c.grad[0], zeros_as(c.grad[0], {})); });
  }, In, NoOut);
  // (the engine casts the gradient back to the operand's dtype)
  t.rule(O::Cast, [](const RuleCtx& c) { return Grads{c.grad[0]}; }, NoIn, NoOut);
  t.rule(O::Fill, [](const RuleCtx& c) { return Grads{c.grad[0].defined() ? zeros_like(c.grad[0]) : Tensor()}; }, NoIn, NoOut);

  // ---- binary ----
  t.rule(O::Add, [](const RuleCtx& c) {
    const Scalar alpha = c.attr("alpha") ? c.number_attr("alpha") : Scalar(1);
    return Grads{c.grad[0], c.needs[1] ? c.grad[0] * alpha : Tensor()};
  }, NoIn, NoOut);
  t.rule(O::Sub, [](const RuleCtx& c) {
    const Scalar alpha = c.attr("alpha") ? c.number_attr("alpha") : Scalar(1);
    return Grads{c.grad[0], c.needs[1] ? c.grad[0] * (alpha.is_floating() ? Scalar(-alpha.to_double()) : Scalar(-alpha.to_int())) : Tensor()};
  }, NoIn, NoOut);
  t.rule(O::Mul, [](const RuleCtx& c) {
    return Grads{c.needs[0] ? c.grad[0] * c.x(1) : Tensor(), c.needs[1] ? c.grad[0] * c.x(0) : Tensor()};
  }, In, NoOut);
  t.rule(O::Div, [](const RuleCtx& c) {
    if (!c.is_none("rounding_mode")) return Grads{c.needs[0] ? zeros_like(c.grad[0]) : Tensor(), c.needs[1] ? zeros_like(c.grad[0]) : Tensor()};
    Tensor b = c.x(1);
    return Grads{c.needs[0] ? c.grad[0] / b : Tensor(), c.needs[1] ? -c.grad[0] * c.x(0) / (b * b) : Tensor()};
  }, In, NoOut);
  t.rule(O::Remainder, [](const RuleCtx& c) {
    return Grads{c.grad[0], c.needs[1] ? -c.grad[0] * floor_divide(c.x(0), c.x(1)) : Tensor()};
  }, In, NoOut);
  t.rule(O::Fmod, [](const RuleCtx& c) {
    return Grads{c.grad[0], c.needs[1] ? -c.grad[0] * div(c.x(0), c.x(1), "trunc") : Tensor()};
  }, In, NoOut);
  t.rule(O::Pow, [](const RuleCtx& c) {
    Tensor a = c.x(0), b = c.x(1);
    Tensor ga, gb;
    Tensor zero = zeros_as(c.grad[0], {});
    // PyTorch: a's gradient is 0 where the exponent is 0 (0^0's included); b's is 0 where a is 0
    // and b >= 0 (the limit of a^b log a).
    if (c.needs[0]) ga = where(b == 0, zero, c.grad[0] * b * a.pow(b - 1));
    if (c.needs[1]) gb = where((a == 0) & (b >= 0), zero, c.grad[0] * c.out[0] * a.log());
    return Grads{ga, gb};
  }, In, Out);
  t.rule(O::Atan2, [](const RuleCtx& c) {
    Tensor a = c.x(0), b = c.x(1);
    Tensor r = c.grad[0] / (a * a + b * b);
    return Grads{c.needs[0] ? r * b : Tensor(), c.needs[1] ? -r * a : Tensor()};
  }, In, NoOut);
  t.rule(O::Hypot, [](const RuleCtx& c) {
    Tensor r = c.grad[0] / c.out[0];
    return Grads{c.needs[0] ? r * c.x(0) : Tensor(), c.needs[1] ? r * c.x(1) : Tensor()};
  }, In, Out);
  t.rule(O::LogAddExp, [](const RuleCtx& c) {
    Tensor a = c.x(0), b = c.x(1);
    return Grads{c.needs[0] ? c.grad[0] * (a - b).sigmoid() : Tensor(), c.needs[1] ? c.grad[0] * (b - a).sigmoid() : Tensor()};
  }, In, NoOut);
  // maximum/minimum: the gradient to the larger (smaller) operand, halved between equal ones.
  t.rule(O::Maximum, [](const RuleCtx& c) {
    Tensor a = c.x(0), b = c.x(1), zero = zeros_as(c.grad[0], {}), half = c.grad[0] / 2;
    return Grads{c.needs[0] ? where(a == b, half, where(a > b, c.grad[0], zero)) : Tensor(),
                 c.needs[1] ? where(a == b, half, where(b > a, c.grad[0], zero)) : Tensor()};
  }, In, NoOut);
  t.rule(O::Minimum, [](const RuleCtx& c) {
    Tensor a = c.x(0), b = c.x(1), zero = zeros_as(c.grad[0], {}), half = c.grad[0] / 2;
    return Grads{c.needs[0] ? where(a == b, half, where(a < b, c.grad[0], zero)) : Tensor(),
                 c.needs[1] ? where(a == b, half, where(b < a, c.grad[0], zero)) : Tensor()};
  }, In, NoOut);
  for (OpId op : {O::Eq, O::Ne, O::Lt, O::Le, O::Gt, O::Ge, O::LogicalAnd, O::LogicalOr, O::LogicalXor,
                  O::BitwiseAnd, O::BitwiseOr, O::BitwiseXor})
    t.no_grad(op);

  // ---- ternary ----
  t.rule(O::Where, [](const RuleCtx& c) {
    Tensor cond = c.in[0];
    Tensor zero = zeros_as(c.grad[0], {});
    return Grads{Tensor(), c.needs[1] ? where(cond, c.grad[0], zero) : Tensor(),
                 c.needs[2] ? where(cond, zero, c.grad[0]) : Tensor()};
  }, In, NoOut);
  t.rule(O::Clamp, [](const RuleCtx& c) {
    // clamp(x, lo, hi) = min(max(x, lo), hi): at a bound the gradient goes to x.
    Tensor x = c.in[0];
    Tensor zero = zeros_as(c.grad[0], {});
    size_t k = 1;
    std::optional<size_t> lo_at, hi_at;
    if (c.flag("has_min")) lo_at = k++;
    if (c.flag("has_max")) hi_at = k++;
    Tensor y1 = lo_at ? maximum(x, c.x(*lo_at).to(x.dtype())) : x;
    Tensor below_hi = hi_at ? y1 <= c.x(*hi_at) : ones_like(x, TensorOptions(kBool));
    Tensor to_y1 = where(below_hi, c.grad[0], zero);
    Grads g(c.needs.size());
    if (c.needs[0]) g[0] = lo_at ? where(x >= c.x(*lo_at), to_y1, zero) : to_y1;
    if (lo_at && c.needs[*lo_at]) g[*lo_at] = where(x < c.x(*lo_at), to_y1, zero);
    if (hi_at && c.needs[*hi_at]) g[*hi_at] = where(below_hi, zero, c.grad[0]);
    return g;
  }, In, NoOut);
  t.rule(O::Lerp, [](const RuleCtx& c) {
    Tensor w = c.x(2);
    return Grads{c.needs[0] ? c.grad[0] * (1 - w) : Tensor(), c.needs[1] ? c.grad[0] * w : Tensor(),
                 c.needs[2] ? c.grad[0] * (c.x(1) - c.x(0)) : Tensor()};
  }, In, NoOut);
  t.rule(O::Addcmul, [](const RuleCtx& c) {
    Scalar v = c.number_attr("value");
    return Grads{c.grad[0], c.needs[1] ? c.grad[0] * c.x(2) * v : Tensor(), c.needs[2] ? c.grad[0] * c.x(1) * v : Tensor()};
  }, In, NoOut);
  t.rule(O::MaskedFill, [](const RuleCtx& c) {
    return Grads{c.needs[0] ? where(c.in[1], zeros_as(c.grad[0], {}), c.grad[0]) : Tensor(), Tensor()};
  }, In, NoOut);

  // ---- reductions ----
  t.rule(O::Sum, [](const RuleCtx& c) { return Grads{unreduce(c.grad[0], c, sizes_of(c.in[0]))}; }, In, NoOut);
  t.rule(O::NanSum, [](const RuleCtx& c) {
    Tensor g = unreduce(c.grad[0], c, sizes_of(c.in[0]));
    return Grads{where(c.in[0].isnan(), zeros_as(g, {}), g)};
  }, In, NoOut);
  t.rule(O::Mean, [](const RuleCtx& c) {
    return Grads{unreduce(c.grad[0], c, sizes_of(c.in[0])) / double(reduced_count(c, sizes_of(c.in[0])))};
  }, In, NoOut);
  t.rule(O::Prod, [](const RuleCtx& c) {
    // out / x where x has no zero in its slice; the product of the others for the one zero of a
    // slice with one; 0 elsewhere.
    const Tensor& x = c.in[0];
    IntList dims = reduced_dims(c, x.dim());
    Tensor g = unreduce(c.grad[0], c, sizes_of(x));
    Tensor out = unreduce(c.out[0], c, sizes_of(x));
    Tensor is_zero = x == 0;
    Tensor zeros_in_slice = is_zero.sum(dims, true).expand(sizes_of(x));
    Tensor others = where(is_zero, ones_like(x), x).prod(dims, true).expand(sizes_of(x));
    Tensor zero = zeros_as(g, {});
    return Grads{where(zeros_in_slice == 0, g * out / x, where((zeros_in_slice == 1) & is_zero, g * others, zero))};
  }, In, Out);
  for (OpId op : {O::Amax, O::Amin})
    t.rule(op, [](const RuleCtx& c) { return Grads{share_among_ties(c, c.in[0], c.out[0], c.grad[0], "dims")}; }, In, Out);
  t.rule(O::Aminmax, [](const RuleCtx& c) {
    Tensor g;
    for (int k = 0; k < 2; ++k)
      if (c.grad[size_t(k)].defined()) {
        Tensor part = share_among_ties(c, c.in[0], c.out[size_t(k)], c.grad[size_t(k)], "dims");
        g = g.defined() ? g + part : part;
      }
    return Grads{g};
  }, In, Out);
  // max(dim)/min(dim): the gradient goes to the index the op returned.
  auto to_index = [](const RuleCtx& c) {
    const Tensor& x = c.in[0];
    const int64_t dim = reduced_dims(c, x.dim(), "dim")[0];
    Tensor idx = c.out[1];
    if (!c.flag("keepdim")) idx = idx.unsqueeze(dim);
    std::vector<int64_t> shape(size_t(x.dim()), 1);
    shape[size_t(dim)] = x.impl().sizes[size_t(dim)];
    Tensor pos = arange(x.impl().sizes[size_t(dim)], TensorOptions(kInt64).device(x.device())).view(shape);
    Tensor g = unreduce(c.grad[0], c, sizes_of(x), "dim");
    return Grads{where(pos == idx, g, zeros_as(g, {}))};
  };
  t.rule(O::MaxDim, to_index, In, Out);
  t.rule(O::MinDim, to_index, In, Out);
  for (OpId op : {O::Argmax, O::Argmin, O::Any, O::All}) t.no_grad(op);
  t.rule(O::Norm, [](const RuleCtx& c) {
    const Tensor& x = c.in[0];
    const double p = c.attr("p") ? c.f64("p") : 2.0;
    Tensor g = unreduce(c.grad[0], c, sizes_of(x));
    Tensor n = unreduce(c.out[0], c, sizes_of(x));
    Tensor zero = zeros_as(g, {});
    if (p == 0) return Grads{zeros_like(x)};
    if (p == 1) return Grads{g * x.sign()};
    if (std::isinf(p)) {
      Tensor mask = x.abs() == n;
      Tensor count = mask.sum(reduced_dims(c, x.dim()), true).expand(sizes_of(x));
      return Grads{where(mask, g * x.sign() / count, zero)};
    }
    if (p == 2) return Grads{where(n == 0, zero, g * x / n)};
    // x |x|^(p-2) / n^(p-1)
    return Grads{where(n == 0, zero, g * x * x.abs().pow(p - 2) / n.pow(p - 1))};
  }, In, Out);
  // var: g 2 (x - mean) / (N - correction); std: var's over 2 std (0 where std is 0).
  t.rule(O::Var, [](const RuleCtx& c) { return Grads{centred_over_count(c) * 2.0}; }, In, NoOut);
  t.rule(O::Std, [](const RuleCtx& c) {
    Tensor s = unreduce(c.out[0], c, sizes_of(c.in[0]));
    Tensor d = centred_over_count(c);
    return Grads{where(s == 0, zeros_as(d, {}), d / s)};
  }, In, Out);
  t.rule(O::LogSumExp, [](const RuleCtx& c) {
    const Tensor& x = c.in[0];
    return Grads{unreduce(c.grad[0], c, sizes_of(x)) * (x - unreduce(c.out[0], c, sizes_of(x))).exp()};
  }, In, Out);
  t.rule(O::Softmax, [](const RuleCtx& c) {
    const int64_t dim = c.i64("dim");
    Tensor gy = c.grad[0] * c.out[0];
    return Grads{gy - c.out[0] * gy.sum({dim}, true)};
  }, NoIn, Out);
  t.rule(O::LogSoftmax, [](const RuleCtx& c) {
    const int64_t dim = c.i64("dim");
    return Grads{c.grad[0] - c.out[0].exp() * c.grad[0].sum({dim}, true)};
  }, NoIn, Out);
  t.rule(O::Cumsum, [](const RuleCtx& c) {
    // the sum of the gradients at and after each position
    const int64_t dim = c.i64("dim");
    const Tensor& g = c.grad[0];
    return Grads{g.sum({dim}, true) - g.cumsum(dim) + g};
  }, NoIn, NoOut);

  // ---- views ----
  t.rule(O::View, [](const RuleCtx& c) { return Grads{c.grad[0].reshape(sizes_of(c.in[0]))}; }, In, NoOut);
  t.rule(O::Transpose, [](const RuleCtx& c) { return Grads{c.grad[0].transpose(c.i64("dim0"), c.i64("dim1"))}; }, NoIn, NoOut);
  t.rule(O::Permute, [](const RuleCtx& c) {
    IntList dims = c.ints("dims"), inverse(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) {
      int64_t d = dims[i] < 0 ? dims[i] + int64_t(dims.size()) : dims[i];
      inverse[size_t(d)] = int64_t(i);
    }
    return Grads{c.grad[0].permute(inverse)};
  }, NoIn, NoOut);
  t.rule(O::Slice, [](const RuleCtx& c) {
    const int64_t dim = c.attr("dim") ? c.i64("dim") : 0, start = c.attr("start") ? c.i64("start") : 0;
    const int64_t step = c.attr("step") ? c.i64("step") : 1;
    std::optional<int64_t> end;
    if (!c.is_none("end")) end = c.i64("end");
    return Grads{embed(c.grad[0], sizes_of(c.in[0]), "slice", [&](const Tensor& z) { return z.slice(dim, start, end, step); })};
  }, In, NoOut);
  t.rule(O::Select, [](const RuleCtx& c) {
    const int64_t dim = c.i64("dim"), index = c.i64("index");
    return Grads{embed(c.grad[0], sizes_of(c.in[0]), "select", [&](const Tensor& z) { return z.select(dim, index); })};
  }, In, NoOut);
  // (expand's gradient is summed back by the engine)
  t.rule(O::Expand, [](const RuleCtx& c) { return Grads{c.grad[0]}; }, NoIn, NoOut);
  t.rule(O::Squeeze, [](const RuleCtx& c) { return Grads{c.grad[0].reshape(sizes_of(c.in[0]))}; }, In, NoOut);
  t.rule(O::Unsqueeze, [](const RuleCtx& c) { return Grads{c.grad[0].squeeze(c.i64("dim"))}; }, NoIn, NoOut);
  t.rule(O::Diagonal, [](const RuleCtx& c) {
    const int64_t offset = c.attr("offset") ? c.i64("offset") : 0, d1 = c.attr("dim1") ? c.i64("dim1") : 0;
    const int64_t d2 = c.attr("dim2") ? c.i64("dim2") : 1;
    return Grads{embed(c.grad[0], sizes_of(c.in[0]), "diagonal", [&](const Tensor& z) { return z.diagonal(offset, d1, d2); })};
  }, In, NoOut);
  t.missing(O::AsStrided, "a general strided view may overlap itself; its gradient needs a scatter over storage");

  // ---- opaque ----
  t.rule(O::Contiguous, [](const RuleCtx& c) { return Grads{c.grad[0]}; }, NoIn, NoOut);
  t.rule(O::Clone, [](const RuleCtx& c) { return Grads{c.grad[0]}; }, NoIn, NoOut);
  t.no_grad(O::Iota);
  auto product = [](const RuleCtx& c) {
    return Grads{c.needs[0] ? matmul_grad_a(c.grad[0], c.in[0], c.in[1]) : Tensor(),
                 c.needs[1] ? matmul_grad_b(c.grad[0], c.in[0], c.in[1]) : Tensor()};
  };
  t.rule(O::Matmul, product, In, NoOut);
  t.rule(O::Mm, product, In, NoOut);
  t.rule(O::Bmm, product, In, NoOut);
  t.rule(O::Addmm, [](const RuleCtx& c) {
    Scalar alpha = c.attr("alpha") ? c.number_attr("alpha") : Scalar(1);
    Scalar beta = c.attr("beta") ? c.number_attr("beta") : Scalar(1);
    return Grads{c.needs[0] ? c.grad[0] * beta : Tensor(),
                 c.needs[1] ? c.grad[0].mm(c.in[2].t()) * alpha : Tensor(),
                 c.needs[2] ? c.in[1].t().mm(c.grad[0]) * alpha : Tensor()};
  }, In, NoOut);
  t.missing(O::Einsum, "comes with the einsum gradient plan (each operand's equation from the others')");
  t.rule(O::Cat, [](const RuleCtx& c) {
    int64_t dim = c.i64("dim");
    Grads g;
    int64_t at = 0;
    for (size_t i = 0; i < c.in.size(); ++i) {
      const auto& s = sizes_of(c.in[i]);
      if (s.size() == 1 && s[0] == 0 && c.grad[0].dim() != 1) {  // (cat skips 1-d empty tensors)
        g.push_back(Tensor());
        continue;
      }
      int64_t d = dim < 0 ? dim + c.grad[0].dim() : dim;
      g.push_back(c.needs[i] ? c.grad[0].narrow(d, at, s[size_t(d)]) : Tensor());
      at += s[size_t(d)];
    }
    return g;
  }, In, NoOut);
  t.missing(O::IndexSelect, "needs index_add (the scatter family, with the core opset)");
  t.missing(O::Gather, "needs scatter_add (the scatter family, with the core opset)");
  // copy_(dst, src): dst's old values are gone; src's gradient is summed and cast back to it.
  t.rule(O::Copy, [](const RuleCtx& c) {
    return Grads{c.needs[0] ? zeros_like(c.grad[0]) : Tensor(), c.grad[0]};
  }, NoIn, NoOut);
  return t;
}

const Table& table() {
  static const Table t = build();
  return t;
}

constexpr std::string_view kIds[] = {
#define KILN_OP(id, ...) #id,
#include "kiln/runtime/ops.def"
#undef KILN_OP
};
constexpr std::string_view kNames[] = {
#define KILN_OP(id, name, ...) name,
#include "kiln/runtime/ops.def"
#undef KILN_OP
};

}  // namespace

const Derivative& derivative(OpId op) {
  const Table& t = table();
  KILN_CHECK(t.listed[size_t(op)], "autograd", "internal error: op ", kNames[size_t(op)],
             " has no record in the derivative table");
  return t.rows[size_t(op)];
}
bool has_derivative_record(OpId op) { return table().listed[size_t(op)]; }
std::string backward_name(OpId op) { return std::string(kIds[size_t(op)]) + "Backward0"; }
std::string_view op_name(OpId op) { return kNames[size_t(op)]; }

}  // namespace kiln::autograd
