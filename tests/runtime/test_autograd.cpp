// Autograd: the API and PyTorch's rules (accumulation, freed graphs, in-place writes to saved
// tensors, broadcasting and dtypes, non-differentiable points), and every rule of the
// derivative table against finite differences in float64.
#include <map>
#include <set>

#include "autograd/derivatives.h"
#include "test_util.h"

namespace kiln::testing {
namespace {

Tensor leaf(std::vector<double> v, std::vector<int64_t> sizes, DType dt = kFloat64) {
  return from_vector(v, sizes).to(dt).requires_grad_();
}

TEST(Autograd, BackwardGivesTheLeavesTheirGradients) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = leaf({4, 5, 6}, {3});
  Tensor loss = (x * y + x * x).sum();
  EXPECT_FALSE(loss.is_leaf());
  EXPECT_TRUE(loss.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(x.grad().defined());
  loss.backward();
  expect_values(x.grad(), {3}, {6, 9, 12});
  expect_values(y.grad(), {3}, {1, 2, 3});
  EXPECT_EQ(loss.grad_fn()->name(), "SumBackward0");
  EXPECT_EQ(loss.grad_fn()->next_functions()[0]->name(), "AddBackward0");
}

TEST(Autograd, GradientsAccumulateUntilZeroed) {
  Tensor x = leaf({1, 2}, {2});
  for (int i = 0; i < 3; ++i) (x * 3).sum().backward();
  expect_values(x.grad(), {2}, {9, 9});
  x.mutable_grad().zero_();
  (x * x).sum().backward();
  expect_values(x.grad(), {2}, {2, 4});
  x.mutable_grad() = Tensor();
  (x * 5).sum().backward();
  expect_values(x.grad(), {2}, {5, 5});
}

TEST(Autograd, ASecondBackwardThroughAFreedGraphIsAnError) {
  Tensor x = leaf({1, 2}, {2});
  Tensor loss = x.exp().sum();
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();
  expect_values(x.grad(), {2}, {2 * std::exp(1.0), 2 * std::exp(2.0)});
  expect_error([&] { loss.backward(); }, "backward through the graph a second time");
}

TEST(Autograd, BroadcastGradientsAreSummedToEachOperandsShape) {
  Tensor a = leaf({1, 2, 3}, {3, 1});
  Tensor b = leaf({10, 20, 30, 40}, {4});
  (a * b).sum().backward();
  expect_values(a.grad(), {3, 1}, {100, 100, 100});
  expect_values(b.grad(), {4}, {6, 6, 6, 6});
}

TEST(Autograd, GradientsTakeTheirOperandsDtype) {
  Tensor a = leaf({1, 2}, {2}, kFloat32);
  Tensor b = leaf({3, 4}, {2}, kFloat64);
  Tensor h = leaf({0.5, 0.25}, {2}, kBFloat16);
  (a * b + h).sum().backward();
  EXPECT_EQ(a.grad().dtype(), kFloat32);
  EXPECT_EQ(b.grad().dtype(), kFloat64);
  EXPECT_EQ(h.grad().dtype(), kBFloat16);
  expect_values(a.grad(), {2}, {3, 4});
  expect_values(h.grad(), {2}, {1, 1});
}

TEST(Autograd, OnlyFloatingTensorsRequireGrad) {
  Tensor i = from_vector(std::vector<int64_t>{1, 2}, {2});
  expect_error([&] { i.requires_grad_(); }, "only tensors of floating point dtype");
  Tensor x = leaf({1.5, -2.5}, {2});
  Tensor idx = x.argmax();
  EXPECT_FALSE(idx.requires_grad());
  EXPECT_FALSE((x > 0).requires_grad());
  auto [v, k] = x.max(0);
  EXPECT_TRUE(v.requires_grad());
  EXPECT_FALSE(k.requires_grad());
}

TEST(Autograd, NoGradGuardAndDetachRecordNothing) {
  Tensor x = leaf({1, 2}, {2});
  {
    NoGradGuard g;
    EXPECT_FALSE(is_grad_enabled());
    EXPECT_FALSE((x * 2).requires_grad());
    {
      AutoGradMode on(true);
      EXPECT_TRUE((x * 2).requires_grad());
    }
  }
  EXPECT_TRUE(is_grad_enabled());
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_alias_of(x));
  Tensor y = x * 2;
  y.detach_();
  EXPECT_FALSE(y.requires_grad());
  expect_error([&] { (x * 2).requires_grad_(false); }, "only change requires_grad flags of leaf");
  expect_error([&] { (d * 2).sum().backward(); }, "does not require grad");
}

TEST(Autograd, RetainGradKeepsANonLeafsGradient) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = x * 3;
  y.retain_grad();
  Tensor z = y * y;
  z.sum().backward();
  expect_values(y.grad(), {2}, {6, 12});
  expect_values(x.grad(), {2}, {18, 36});
  EXPECT_FALSE(z.grad().defined());
}

TEST(Autograd, GradReturnsGradientsWithoutTouchingDotGrad) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = leaf({3, 4}, {2});
  Tensor z = (x * y).sum();
  auto g = autograd::grad({z}, {x});
  expect_values(g[0], {2}, {3, 4});
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(y.grad().defined());
  Tensor w = leaf({1}, {1});
  expect_error([&] { autograd::grad({(x * 2).sum()}, {w}); }, "not used to compute the outputs");
  auto unused = autograd::grad({(x * 2).sum()}, {w}, {}, false, false, /*allow_unused=*/true);
  EXPECT_FALSE(unused[0].defined());
  // with respect to a non-leaf
  Tensor h = x * 2;
  auto gh = autograd::grad({(h * h).sum()}, {h});
  expect_values(gh[0], {2}, {4, 8});
}

TEST(Autograd, BackwardWithInputsWritesOnlyTheirGrad) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = leaf({3, 4}, {2});
  Tensor h = x * 2;
  (h * y).sum().backward(Tensor(), std::nullopt, false, {y, h});
  expect_values(y.grad(), {2}, {2, 4});
  expect_values(h.grad(), {2}, {3, 4});  // a non-leaf input gets its .grad, as in PyTorch
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, CreateGraphGivesSecondDerivatives) {
  Tensor x = leaf({1, 2, -1}, {3});
  Tensor y = (x * x * x).sum();
  auto g = autograd::grad({y}, {x}, {}, false, /*create_graph=*/true);
  expect_values(g[0], {3}, {3, 12, 3});
  EXPECT_TRUE(g[0].requires_grad());
  auto gg = autograd::grad({g[0].sum()}, {x});
  expect_values(gg[0], {3}, {6, 12, -6});
  // through a rule that reads its own output: d2/dx2 exp = exp
  Tensor e = x.exp().sum();
  auto ge = autograd::grad({e}, {x}, {}, false, true);
  auto gge = autograd::grad({ge[0].sum()}, {x});
  expect_values(gge[0], {3}, {std::exp(1.0), std::exp(2.0), std::exp(-1.0)});
}

TEST(Autograd, AWriteToASavedTensorIsDetectedAtBackward) {
  Tensor x = leaf({1, 2}, {2});
  Tensor a = x * 2;
  Tensor b = a.sin();  // saves a
  a.add_(1);
  EXPECT_EQ(a._version(), 1);
  expect_error([&] { b.sum().backward(); }, "modified by an inplace operation");
}

TEST(Autograd, InPlaceOpsOnNonLeavesAreDifferentiated) {
  Tensor x = leaf({1, 2, -3}, {3});
  Tensor y = x * 2;
  y.mul_(x);      // y = 2 x^2
  y.add_(x, 3);   // + 3 x
  y.relu_();
  y.sum().backward();
  expect_values(x.grad(), {3}, {4 * 1 + 3, 4 * 2 + 3, 4 * -3 + 3});  // (2x^2+3x at -3 is 9 > 0)
  EXPECT_EQ(y.grad_fn()->name(), "ReluBackward0");
}

TEST(Autograd, InPlaceOnALeafThatRequiresGradIsRefused) {
  Tensor x = leaf({1, 2}, {2});
  expect_error([&] { x.add_(1); }, "leaf tensor that requires grad is being used in an in-place operation");
  {
    NoGradGuard g;
    x.add_(1);  // allowed: an optimizer's update
  }
  expect_values(x, {2}, {2, 3});
}

TEST(Autograd, CopyIntoATensorCarriesTheGradientToTheSource) {
  Tensor x = leaf({1, 2}, {2}, kFloat32);
  Tensor buf = zeros({2, 2}, kFloat64);
  buf.copy_(x);  // broadcast and converted
  EXPECT_TRUE(buf.requires_grad());
  (buf * 3).sum().backward();
  EXPECT_EQ(x.grad().dtype(), kFloat32);
  expect_values(x.grad(), {2}, {6, 6});
}

TEST(Autograd, OpsWithoutADerivativeYetRefuseRatherThanCutTheGraph) {
  Tensor x = leaf({1, -2, 3}, {3});
  expect_error([&] { masked_select(x, x > 0); }, "cannot differentiate masked_select yet");
  expect_error([&] { x.to(Device::cuda()); }, "cannot differentiate to yet");
  expect_error([&] { x.pin_memory(); }, "cannot differentiate pin_memory yet");
  NoGradGuard no_grad;  // without autograd recording they run
  expect_values(masked_select(x, x > 0), {2}, {1, 3});
}

// ---- PyTorch's values at non-differentiable points ----
TEST(Autograd, NonDifferentiablePointsFollowPyTorch) {
  auto g1 = [](std::function<Tensor(const Tensor&)> f, std::vector<double> v) {
    Tensor x = leaf(v, {int64_t(v.size())});
    f(x).sum().backward();
    return x.grad();
  };
  // (not {1/3, 1/3, 1/3, 0}: g++ 12.2 with AVX-512 builds that vector as four thirds)
  const double third = 1.0 / 3;
  expect_values(g1([](const Tensor& x) { return x.relu(); }, {-1, 0, 2}), {3}, {0, 0, 1});
  expect_values(g1([](const Tensor& x) { return x.abs(); }, {-1, 0, 2}), {3}, {-1, 0, 1});
  expect_values(g1([](const Tensor& x) { return x.amax(); }, {3, 1, 3}), {3}, {0.5, 0, 0.5});
  expect_values(g1([](const Tensor& x) { return x.max(); }, {3, 1, 3, 3}), {4}, {third, 0, third, third});
  expect_values(g1([](const Tensor& x) { return std::get<0>(x.max(0)); }, {3, 1, 3}), {3}, {1, 0, 0});
  expect_values(g1([](const Tensor& x) { return x.clamp(0, 1); }, {-1, 0, 0.5, 1, 2}), {5}, {0, 1, 1, 1, 0});
  expect_values(g1([](const Tensor& x) { return x.sqrt(); }, {0, 4}), {2}, {INFINITY, 0.25});
  expect_values(g1([](const Tensor& x) { return x.norm(); }, {0, 0}), {2}, {0, 0});
  Tensor a = leaf({2, 1}, {2}), b = leaf({2, 3}, {2});
  maximum(a, b).sum().backward();
  expect_values(a.grad(), {2}, {0.5, 0});
  expect_values(b.grad(), {2}, {0.5, 1});
  Tensor x = leaf({1, -1}, {2});
  where(x > 0, x * 2, x.log()).sum().backward();  // the unselected branch's NaN gradient is not taken
  expect_values(x.grad(), {2}, {2, -1});
  Tensor p = leaf({0, 0, 2}, {3});
  p.pow(leaf({0, 2, 0}, {3})).sum().backward();
  expect_values(p.grad(), {3}, {0, 0, 0});
}

// ---- every rule against finite differences ----
// One case per differentiable op of the table (at least): float64 operands drawn in [lo, hi]
// (a domain away from the op's non-differentiable points), the gradient of sum(f(x) * w) for a
// fixed random w, against central differences.
struct GradCase {
  std::string op;  // the op table's name of the op it checks
  std::vector<std::vector<int64_t>> shapes;
  std::function<Tensor(const std::vector<Tensor>&)> f;
  double lo = -2, hi = 2;
  double eps = 1e-6;
};

std::vector<GradCase> grad_cases() {
  using V = const std::vector<Tensor>&;
  std::vector<GradCase> c;
  auto unary = [&](std::string op, std::function<Tensor(const Tensor&)> f, double lo = -2, double hi = 2) {
    c.push_back({op, {{3, 4}}, [f](V x) { return f(x[0]); }, lo, hi});
  };
  unary("neg", [](const Tensor& x) { return -x; });
  unary("abs", [](const Tensor& x) { return x.abs(); });
  unary("sign", [](const Tensor& x) { return x.sign(); });
  unary("exp", [](const Tensor& x) { return x.exp(); });
  unary("exp2", [](const Tensor& x) { return x.exp2(); });
  unary("expm1", [](const Tensor& x) { return x.expm1(); });
  unary("log", [](const Tensor& x) { return x.log(); }, 0.5, 2);
  unary("log2", [](const Tensor& x) { return x.log2(); }, 0.5, 2);
  unary("log1p", [](const Tensor& x) { return x.log1p(); }, -0.5, 2);
  unary("sqrt", [](const Tensor& x) { return x.sqrt(); }, 0.5, 2);
  unary("rsqrt", [](const Tensor& x) { return x.rsqrt(); }, 0.5, 2);
  unary("reciprocal", [](const Tensor& x) { return x.reciprocal(); }, 0.5, 2);
  unary("sin", [](const Tensor& x) { return x.sin(); });
  unary("cos", [](const Tensor& x) { return x.cos(); });
  unary("tan", [](const Tensor& x) { return x.tan(); }, -1, 1);
  unary("asin", [](const Tensor& x) { return x.asin(); }, -0.9, 0.9);
  unary("acos", [](const Tensor& x) { return x.acos(); }, -0.9, 0.9);
  unary("atan", [](const Tensor& x) { return x.atan(); });
  unary("sinh", [](const Tensor& x) { return x.sinh(); });
  unary("cosh", [](const Tensor& x) { return x.cosh(); });
  unary("tanh", [](const Tensor& x) { return x.tanh(); });
  unary("sigmoid", [](const Tensor& x) { return x.sigmoid(); });
  unary("relu", [](const Tensor& x) { return x.relu(); });
  unary("gelu", [](const Tensor& x) { return x.gelu(); });
  unary("gelu", [](const Tensor& x) { return x.gelu("tanh"); });
  unary("silu", [](const Tensor& x) { return x.silu(); });
  unary("erf", [](const Tensor& x) { return x.erf(); });
  unary("floor", [](const Tensor& x) { return x.floor(); });
  unary("ceil", [](const Tensor& x) { return x.ceil(); });
  unary("round", [](const Tensor& x) { return x.round(); });
  unary("trunc", [](const Tensor& x) { return x.trunc(); });
  unary("nan_to_num", [](const Tensor& x) { return x.nan_to_num(); });
  c.push_back({"cast", {{5}}, [](V x) { return x[0].to(kFloat32) * 3; }, -2, 2, 1e-2});
  unary("fill", [](const Tensor& x) { Tensor y = x * 1; y.fill_(2); return y * x; });

  auto binary = [&](std::string op, std::function<Tensor(const Tensor&, const Tensor&)> f, double lo = -2, double hi = 2) {
    c.push_back({op, {{3, 4}, {4}}, [f](V x) { return f(x[0], x[1]); }, lo, hi});
    c.push_back({op, {{2, 1}, {1, 3}}, [f](V x) { return f(x[0], x[1]); }, lo, hi});
  };
  binary("add", [](const Tensor& a, const Tensor& b) { return a.add(b, 2.5); });
  binary("sub", [](const Tensor& a, const Tensor& b) { return a.sub(b, 0.5); });
  binary("mul", [](const Tensor& a, const Tensor& b) { return a * b; });
  binary("div", [](const Tensor& a, const Tensor& b) { return a / b; }, 0.5, 2);
  binary("div", [](const Tensor& a, const Tensor& b) { return a.div(b, "floor"); }, 0.5, 2);
  binary("remainder", [](const Tensor& a, const Tensor& b) { return a.remainder(b); }, 0.5, 2);
  binary("fmod", [](const Tensor& a, const Tensor& b) { return a.fmod(b); }, 0.5, 2);
  binary("pow", [](const Tensor& a, const Tensor& b) { return a.pow(b); }, 0.5, 2);
  binary("atan2", [](const Tensor& a, const Tensor& b) { return a.atan2(b); });
  binary("hypot", [](const Tensor& a, const Tensor& b) { return hypot(a, b); });
  binary("logaddexp", [](const Tensor& a, const Tensor& b) { return logaddexp(a, b); });
  binary("maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); });
  binary("minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); });
  unary("mul", [](const Tensor& x) { return x * 2.5; });
  unary("pow", [](const Tensor& x) { return x.pow(3); });
  unary("pow", [](const Tensor& x) { return pow(2.0, x); });
  unary("div", [](const Tensor& x) { return div(2, x); }, 0.5, 2);
  unary("sub", [](const Tensor& x) { return 1 - x; });

  c.push_back({"where", {{3, 4}, {4}}, [](V x) { return where(x[0] > 0, x[0] * 2, x[1]); }});
  unary("clamp", [](const Tensor& x) { return x.clamp(-1, 1); });
  unary("clamp", [](const Tensor& x) { return x.clamp(std::nullopt, 0.5); });
  c.push_back({"clamp", {{3, 4}, {4}, {3, 1}}, [](V x) { return clamp(x[0], x[1] - 1, x[2] + 1); }});
  c.push_back({"lerp", {{3, 4}, {4}, {3, 1}}, [](V x) { return lerp(x[0], x[1], x[2]); }});
  c.push_back({"lerp", {{3, 4}, {4}}, [](V x) { return lerp(x[0], x[1], 0.25); }});
  c.push_back({"addcmul", {{3, 4}, {4}, {3, 1}}, [](V x) { return addcmul(x[0], x[1], x[2], 0.5); }});
  unary("masked_fill", [](const Tensor& x) { return x.masked_fill(x > 0.5, 3); });

  auto reduction = [&](std::string op, std::function<Tensor(const Tensor&)> f, double lo = -2, double hi = 2) {
    c.push_back({op, {{3, 4, 5}}, [f](V x) { return f(x[0]); }, lo, hi});
  };
  reduction("sum", [](const Tensor& x) { return x.sum(); });
  reduction("sum", [](const Tensor& x) { return x.sum({0, 2}, true); });
  reduction("sum", [](const Tensor& x) { return x.sum({-1}); });
  reduction("nansum", [](const Tensor& x) { return x.nansum({1}); });
  reduction("mean", [](const Tensor& x) { return x.mean({1}); });
  reduction("mean", [](const Tensor& x) { return x.mean(); });
  reduction("prod", [](const Tensor& x) { return x.prod({2}); }, 0.5, 1.5);
  reduction("prod", [](const Tensor& x) { return x.prod({1}, true); }, -1.5, -0.5);
  reduction("amax", [](const Tensor& x) { return x.amax({1}); });
  reduction("amin", [](const Tensor& x) { return x.amin({0, 2}, true); });
  reduction("amax", [](const Tensor& x) { return x.max(); });
  reduction("aminmax", [](const Tensor& x) { auto [a, b] = aminmax(x, 1); return a * 2 + b; });
  reduction("max", [](const Tensor& x) { return std::get<0>(x.max(1)); });
  reduction("min", [](const Tensor& x) { return std::get<0>(x.min(2, true)); });
  reduction("norm", [](const Tensor& x) { return x.norm(); });
  reduction("norm", [](const Tensor& x) { return x.norm(1, {1}); });
  reduction("norm", [](const Tensor& x) { return x.norm(3, {2}, true); });
  reduction("norm", [](const Tensor& x) { return x.norm(INFINITY, {0}); });
  reduction("var", [](const Tensor& x) { return x.var({1}); });
  reduction("var", [](const Tensor& x) { return x.var({}, 0); });
  reduction("std", [](const Tensor& x) { return x.std({2}, 1, true); });
  reduction("logsumexp", [](const Tensor& x) { return x.logsumexp({1}); });
  reduction("softmax", [](const Tensor& x) { return x.softmax(1); });
  reduction("log_softmax", [](const Tensor& x) { return x.log_softmax(-1); });
  reduction("cumsum", [](const Tensor& x) { return x.cumsum(1); });

  reduction("view", [](const Tensor& x) { return x.view({12, 5}); });
  reduction("view", [](const Tensor& x) { return x.transpose(0, 2).reshape({60}); });
  reduction("transpose", [](const Tensor& x) { return x.transpose(0, 2); });
  reduction("permute", [](const Tensor& x) { return x.permute({2, 0, 1}); });
  reduction("slice", [](const Tensor& x) { return x.slice(2, 1, 5, 2); });
  reduction("select", [](const Tensor& x) { return x.select(1, 2); });
  c.push_back({"expand", {{3, 1}}, [](V x) { return x[0].expand({2, 3, 4}); }});
  c.push_back({"squeeze", {{3, 1, 2}}, [](V x) { return x[0].squeeze(1); }});
  reduction("unsqueeze", [](const Tensor& x) { return x.unsqueeze(1); });
  reduction("diagonal", [](const Tensor& x) { return x.diagonal(1, 1, 2); });
  reduction("contiguous", [](const Tensor& x) { return x.transpose(0, 1).contiguous(); });
  reduction("clone", [](const Tensor& x) { return x.clone(); });

  c.push_back({"matmul", {{3, 4}, {4, 2}}, [](V x) { return x[0].matmul(x[1]); }});
  c.push_back({"matmul", {{2, 3, 4}, {4}}, [](V x) { return x[0].matmul(x[1]); }});
  c.push_back({"matmul", {{4}, {2, 4, 3}}, [](V x) { return x[0].matmul(x[1]); }});
  c.push_back({"matmul", {{4}, {4}}, [](V x) { return x[0].matmul(x[1]); }});
  c.push_back({"matmul", {{2, 1, 3, 4}, {5, 4, 2}}, [](V x) { return x[0].matmul(x[1]); }});
  c.push_back({"mm", {{3, 4}, {4, 2}}, [](V x) { return x[0].mm(x[1].t().t()); }});
  c.push_back({"bmm", {{2, 3, 4}, {2, 4, 5}}, [](V x) { return x[0].bmm(x[1]); }});
  c.push_back({"addmm", {{2}, {3, 4}, {4, 2}}, [](V x) { return addmm(x[0], x[1], x[2], 0.5, 2); }});
  c.push_back({"cat", {{2, 3}, {4, 3}}, [](V x) { return cat({x[0], x[1] * 2}, 0); }});
  c.push_back({"cat", {{2, 3}, {2, 1}}, [](V x) { return cat({x[0], x[1]}, -1); }});
  c.push_back({"copy", {{3}}, [](V x) { Tensor b = zeros({2, 3}, kFloat64); b.copy_(x[0]); return b * b; }});
  return c;
}

// The gradients of sum(f(x) * w), analytic and by central differences.
void gradcheck(const GradCase& gc, size_t index) {
  SCOPED_TRACE("case " + std::to_string(index) + " (" + gc.op + ")");
  manual_seed(100 + index);
  std::vector<Tensor> x;
  for (const auto& s : gc.shapes) x.push_back((rand(s, kFloat64) * (gc.hi - gc.lo) + gc.lo).requires_grad_());
  Tensor out = gc.f(x);
  ASSERT_TRUE(out.requires_grad());
  Tensor w = randn(out.sizes().vec(), kFloat64);
  auto analytic = autograd::grad({(out.to(kFloat64) * w).sum()}, x, {}, false, false, true);
  NoGradGuard no_grad;
  auto loss = [&](const std::vector<Tensor>& in) { return (gc.f(in).to(kFloat64) * w).sum().item<double>(); };
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<Tensor> in;
    for (const Tensor& t : x) in.push_back(t.detach().clone());
    double* p = in[i].data_ptr<double>();
    for (int64_t k = 0; k < in[i].numel(); ++k) {
      const double v = p[k];
      p[k] = v + gc.eps;
      const double up = loss(in);
      p[k] = v - gc.eps;
      const double down = loss(in);
      p[k] = v;
      const double numeric = (up - down) / (2 * gc.eps);
      const double got = analytic[i].defined() ? analytic[i].reshape({-1}).to_vector<double>()[size_t(k)] : 0.0;
      EXPECT_NEAR(got, numeric, 1e-5 + 1e-4 * std::abs(numeric)) << "operand " << i << " element " << k;
    }
  }
}

TEST(AutogradRules, EveryRuleMatchesFiniteDifferences) {
  auto cases = grad_cases();
  for (size_t i = 0; i < cases.size(); ++i) gradcheck(cases[i], i);
}

TEST(AutogradRules, EveryOpHasARecordAndEveryRuleACase) {
  std::set<std::string> checked;
  for (const GradCase& c : grad_cases()) checked.insert(c.op);
  for (size_t i = 0; i < size_t(0)
#define KILN_OP(id, ...) +1
#include "kiln/runtime/ops.def"
#undef KILN_OP
       ; ++i) {
    const OpId op = OpId(i);
    const std::string name(autograd::op_name(op));
    ASSERT_TRUE(autograd::has_derivative_record(op)) << name << " has no record in the derivative table";
    if (autograd::derivative(op).kind == autograd::Derivative::Kind::Rule) {
      EXPECT_TRUE(checked.count(name)) << name << "'s rule has no finite-difference case";
    }
  }
}

TEST(AutogradRules, AMissingRuleRaisesAtBackwardNamingTheOp) {
  Tensor x = leaf({1, 2, 3, 4}, {4});
  Tensor y = x.as_strided({2}, {2});
  EXPECT_TRUE(y.requires_grad());
  expect_error([&] { y.sum().backward(); }, "the derivative of as_strided is not implemented in kiln yet");
}

}  // namespace
}  // namespace kiln::testing
