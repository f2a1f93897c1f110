// Compiled training steps: compile(fn) where fn runs the forward, backward() and an optimizer
// step. Each test runs the same step eagerly on a twin of the parameters and compares, call
// after call, the losses, the parameters, their .grad and the optimizer's state.
#include <gtest/gtest.h>

#include <functional>

#include "kiln/kiln.h"
#include "kiln/optim.h"

using namespace kiln;

namespace {

void expect_close(const Tensor& a, const Tensor& b, double tol = 1e-12) {
  ASSERT_EQ(a.defined(), b.defined());
  if (!a.defined()) return;
  ASSERT_EQ(a.sizes().vec(), b.sizes().vec());
  const double diff = (a.detach() - b.detach()).abs().max().item<double>();
  const double scale = 1 + b.detach().abs().max().item<double>();
  EXPECT_LE(diff, tol * scale) << "got\n" << a << "\nwant\n" << b;
}

// A small model's parameters, and a twin with the same values.
struct Model {
  Tensor w1, b1, w2;
  explicit Model(uint64_t seed) {
    manual_seed(seed);
    w1 = (randn({6, 8}, kFloat64) * 0.3).requires_grad_();
    b1 = zeros({8}, kFloat64).requires_grad_();
    w2 = (randn({8, 3}, kFloat64) * 0.3).requires_grad_();
  }
  Model twin() const {
    Model m = *this;
    m.w1 = w1.detach().clone().requires_grad_();
    m.b1 = b1.detach().clone().requires_grad_();
    m.w2 = w2.detach().clone().requires_grad_();
    return m;
  }
  std::vector<Tensor> params() const { return {w1, b1, w2}; }
  Tensor loss(const Tensor& x, const Tensor& y) const {
    Tensor h = gelu(x.matmul(w1) + b1);
    Tensor logp = log_softmax(h.matmul(w2), 1);
    return -(logp * y).sum(1).mean();
  }
};

struct Batch {
  Tensor x, y;
};
Batch batch(int i) {
  manual_seed(100 + uint64_t(i));
  Tensor x = randn({5, 6}, kFloat64);
  Tensor y = softmax(randn({5, 3}, kFloat64), 1);  // soft targets
  return {x, y};
}

// The usual training step: zero_grad, forward, backward, step; returns the loss.
std::function<Tensor(const Tensor&, const Tensor&)> train_step(Model& m, optim::Optimizer& o) {
  return [&m, &o](const Tensor& x, const Tensor& y) {
    o.zero_grad();
    Tensor loss = m.loss(x, y);
    loss.backward();
    o.step();
    return loss;
  };
}

void expect_same_params(const Model& a, const Model& b) {
  for (size_t i = 0; i < a.params().size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    expect_close(a.params()[i], b.params()[i]);
    expect_close(a.params()[i].grad(), b.params()[i].grad());
  }
}

}  // namespace

// A hand-written SGD step: forward, backward, an update under NoGradGuard, the gradients set to
// none. Traced once, then every call replays it: the gradients flow through the compiled graph.
TEST(CompiledTraining, ManualSgdStepReplays) {
  Model m(1), e = m.twin();
  const double lr = 0.1;
  auto step_of = [lr](Model& mm) {
    return [&mm, lr](const Tensor& x, const Tensor& y) {
      Tensor loss = mm.loss(x, y);
      loss.backward();
      {
        NoGradGuard no_grad;
        for (Tensor p : mm.params()) {
          p.sub_(p.grad() * lr);
          p.mutable_grad() = Tensor();
        }
      }
      return loss;
    };
  };
  auto eager_step = step_of(e);
  auto compiled = compile(step_of(m));
  for (int i = 0; i < 6; ++i) {
    Batch b = batch(i);
    Tensor got = compiled(b.x, b.y), want = eager_step(b.x, b.y);
    expect_close(got, want);
    expect_same_params(m, e);
  }
  EXPECT_EQ(compiled.stats().compiles, 1u) << compiled.explain();
  EXPECT_EQ(compiled.stats().hits, 5u) << compiled.explain();
}

// Gradients accumulate across calls, as eager's do: the first call leaves a new .grad, later
// calls add into the one they find (read as a graph input, written in place).
TEST(CompiledTraining, GradientsAccumulateAcrossCalls) {
  Model m(2), e = m.twin();
  auto f = compile([&](const Tensor& x, const Tensor& y) {
    Tensor loss = m.loss(x, y);
    loss.backward();
    return loss.detach();
  });
  for (int i = 0; i < 5; ++i) {
    Batch b = batch(i);
    Tensor got = f(b.x, b.y);
    Tensor want = e.loss(b.x, b.y);
    want.backward();
    expect_close(got, want);
    expect_same_params(m, e);
  }
  // Call 1 left new gradients; call 2 found them defined (a second trace); calls 3-5 replay.
  EXPECT_EQ(f.stats().compiles, 2u) << f.explain();
  EXPECT_EQ(f.stats().hits, 3u) << f.explain();
  // A .grad set to none outside is seen: the first trace serves again.
  for (Tensor p : m.params()) p.mutable_grad() = Tensor();
  for (Tensor p : e.params()) p.mutable_grad() = Tensor();
  Batch b = batch(9);
  f(b.x, b.y);
  e.loss(b.x, b.y).backward();
  expect_same_params(m, e);
  EXPECT_EQ(f.stats().compiles, 2u) << f.explain();
}

// The whole training step with kiln::optim inside: zero_grad, forward, backward, step. The
// optimizers' host state (step counts, the learning rate a schedule changes) is replayed.
void check_optimizer_step(const std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>& make,
                          int steps, uint64_t max_compiles) {
  Model m(3), e = m.twin();
  auto opt = make(m.params());
  auto eopt = make(e.params());
  optim::StepLR sched(*opt, 2, 0.5), esched(*eopt, 2, 0.5);
  auto compiled = compile(train_step(m, *opt));
  auto eager = train_step(e, *eopt);
  for (int i = 0; i < steps; ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    Batch b = batch(i);
    expect_close(compiled(b.x, b.y), eager(b.x, b.y));
    expect_same_params(m, e);
    sched.step();
    esched.step();
  }
  EXPECT_LE(compiled.stats().compiles, max_compiles) << compiled.explain();
  EXPECT_GE(compiled.stats().hits, uint64_t(steps) - max_compiles) << compiled.explain();
}

TEST(CompiledTraining, SgdMomentumWithScheduleReplays) {
  // (trace 1 makes the momentum buffers as copies of the gradients: not kept; trace 2 finds them)
  check_optimizer_step(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3));
      },
      8, 2);
}

TEST(CompiledTraining, AdamWWithScheduleReplays) {
  check_optimizer_step(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions(0.01).weight_decay(0.1));
      },
      8, 2);
}

TEST(CompiledTraining, AdamAmsgradFusedReplays) {
  check_optimizer_step(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions(0.01).amsgrad(true).fused(true));
      },
      6, 2);
}

// An option changed between calls is host state the graph was traced with: the call traces
// again rather than replay the old value.
TEST(CompiledTraining, ChangedOptionsTraceAgain) {
  Model m(4), e = m.twin();
  optim::SGD opt(m.params(), optim::SGDOptions(0.1).momentum(0.5));
  optim::SGD eopt(e.params(), optim::SGDOptions(0.1).momentum(0.5));
  auto f = compile(train_step(m, opt));
  auto g = train_step(e, eopt);
  for (int i = 0; i < 6; ++i) {
    if (i == 3) {
      static_cast<optim::SGDOptions&>(opt.param_groups()[0].options()).momentum(0.8);
      static_cast<optim::SGDOptions&>(eopt.param_groups()[0].options()).momentum(0.8);
    }
    Batch b = batch(i);
    expect_close(f(b.x, b.y), g(b.x, b.y));
    expect_same_params(m, e);
  }
  EXPECT_NE(f.explain().str().find("host state changed: SGD options"), std::string::npos) << f.explain();
}

// A tensor made during the call and kept outside it (not returned) is not something a replay
// would update: such a trace is not kept, every call is right, and the budget bounds the traces.
TEST(CompiledTraining, TensorsKeptOutsideTheCallAreNeverStale) {
  Tensor kept;
  CompileOptions o;
  o.recompile_limit = 3;
  auto f = compile(
      [&](const Tensor& x) {
        kept = x * 2;
        return x + 1;
      },
      o);
  for (int i = 0; i < 8; ++i) {
    Tensor x = full({3}, double(i), kFloat64);
    expect_close(f(x), x + 1);
    expect_close(kept, x * 2);
  }
  EXPECT_LE(f.stats().compiles, 4u);
  EXPECT_NE(f.explain().str().find("not kept"), std::string::npos) << f.explain();
}

// The forward compiled, backward() after the call (as most PyTorch users write it): the trace
// also traces the backward into a graph of its own, and every replay gives its result that
// backward as grad_fn, holding the values the forward saved for it.
TEST(CompiledTraining, ForwardCompiledBackwardAfterTheCall) {
  Model m(5), e = m.twin();
  auto f = compile([&](const Tensor& x, const Tensor& y) { return m.loss(x, y); });
  for (int i = 0; i < 4; ++i) {
    Batch b = batch(i);
    for (Tensor p : m.params()) p.mutable_grad() = Tensor();
    for (Tensor p : e.params()) p.mutable_grad() = Tensor();
    Tensor loss = f(b.x, b.y), want = e.loss(b.x, b.y);
    ASSERT_TRUE(loss.requires_grad());
    expect_close(loss, want);
    loss.backward();
    want.backward();
    expect_same_params(m, e);
    if (i > 0) {
      EXPECT_EQ(loss.grad_fn()->name(), "CompiledFunctionBackward");
      // A second backward through the freed graph is an error, as eager's is.
      EXPECT_THROW(loss.backward(), Error);
    }
  }
  EXPECT_EQ(f.stats().compiles, 1u) << f.explain();
  EXPECT_EQ(f.stats().hits, 3u) << f.explain();
  const std::string text = f.explain().str();
  EXPECT_NE(text.find("graph0_backward"), std::string::npos) << text;
  EXPECT_NE(text.find("forward values saved for it"), std::string::npos) << text;
  // retain_graph keeps it: two backwards accumulate twice.
  Batch b = batch(7);
  for (Tensor p : m.params()) p.mutable_grad() = Tensor();
  for (Tensor p : e.params()) p.mutable_grad() = Tensor();
  Tensor loss = f(b.x, b.y), want = e.loss(b.x, b.y);
  loss.backward({}, true);
  loss.backward();
  want.backward({}, true);
  want.backward();
  expect_same_params(m, e);
  // A compiled backward is not differentiable again.
  EXPECT_THROW(f(b.x, b.y).backward({}, true, /*create_graph=*/true), Error);
}

// Results of which backward() reaches one: the other's gradient counts as zeros. An argument
// that requires grad gets its gradient too, and a leaf no result depends on gets none.
TEST(CompiledTraining, CompiledForwardWithSeveralResultsAndArgumentLeaves) {
  manual_seed(8);
  Tensor w = randn({4, 3}, kFloat64).requires_grad_(), unused = randn({2}, kFloat64).requires_grad_();
  auto fn = [&](const Tensor& x) {
    Tensor h = x.matmul(w);
    (void)unused;
    return std::make_tuple(h.tanh().sum(), (h * h).mean(1));
  };
  auto f = compile(fn);
  for (int i = 0; i < 3; ++i) {
    Tensor x = randn({5, 4}, kFloat64).requires_grad_(), xe = x.detach().clone().requires_grad_();
    Tensor we = w.detach().clone().requires_grad_();
    w.mutable_grad() = Tensor();
    auto [a, bvec] = f(x);
    a.backward({}, /*retain_graph=*/true);
    Tensor he = xe.matmul(we);
    Tensor ae = he.tanh().sum(), be = (he * he).mean(1);
    ae.backward({}, true);
    expect_close(w.grad(), we.grad());
    expect_close(x.grad(), xe.grad());
    EXPECT_FALSE(unused.grad().defined());
    // the second result's own backward, later, through the same saved values
    bvec.sum().backward();
    be.sum().backward();
    expect_close(w.grad(), we.grad());
    expect_close(x.grad(), xe.grad());
  }
  EXPECT_GE(f.stats().hits, 2u) << f.explain();
}

// JAX's transforms (transforms.h): grad, value_and_grad, argnums, nesting, and compiled.
TEST(Transforms, GradAndValueAndGradMatchAutograd) {
  manual_seed(21);
  Tensor w = randn({4, 3}, kFloat64), x = randn({5, 4}, kFloat64);
  auto loss = [](const Tensor& w, const Tensor& x) { return (x.matmul(w).tanh() * 0.5).sum(); };
  Tensor wl = w.clone().requires_grad_(), xl = x.clone().requires_grad_();
  Tensor want_value = loss(wl, xl);
  std::vector<Tensor> want = autograd::grad({want_value}, {wl, xl});
  expect_close(kiln::grad(loss)(w, x), want[0]);
  auto [value, dw] = kiln::value_and_grad(loss)(w, x);
  expect_close(value, want_value);
  expect_close(dw, want[0]);
  EXPECT_FALSE(value.requires_grad());
  std::vector<Tensor> both = kiln::grad(loss, {1, 0})(w, x);
  expect_close(both[0], want[1]);
  expect_close(both[1], want[0]);
  // The caller's tensors are untouched.
  EXPECT_FALSE(w.requires_grad());
  EXPECT_FALSE(w.grad().defined());
  // An argument the result does not read gets zeros, as in JAX.
  auto ignores_x = [](const Tensor& w, const Tensor& x) { return (w * w).sum(); };
  std::vector<Tensor> g = kiln::grad(ignores_x, {0, 1})(w, x);
  expect_close(g[0], w * 2);
  expect_close(g[1], zeros_like(x));
}

TEST(Transforms, BadCallsSayWhy) {
  Tensor w = randn({3}, kFloat64);
  auto not_scalar = [](const Tensor& w) { return w * 2; };
  try {
    kiln::grad(not_scalar)(w);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("grad"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("one-element"), std::string::npos) << e.what();
  }
  auto f = [](const Tensor& w, double s) { return (w * s).sum(); };
  EXPECT_THROW(kiln::grad(f, {1})(w, 2.0), Error);
  EXPECT_THROW(kiln::grad(f, {2})(w, 2.0), Error);
  auto g = [](const Tensor& i) { return i.sum().to(kFloat64); };
  EXPECT_THROW(kiln::grad(g)(arange(0, 3, 1, TensorOptions(kInt64))), Error);
}

TEST(Transforms, NestedGradGivesTheSecondDerivative) {
  Tensor x = full({1}, 0.7, kFloat64);
  auto cube = [](const Tensor& x) { return (x * x * x).sum(); };
  auto d1 = kiln::grad(cube);
  auto d2 = kiln::grad([&](const Tensor& x) { return d1(x).sum(); });
  expect_close(d1(x), x * x * 3);
  expect_close(d2(x), x * 6);
}

// compile(value_and_grad(f)): forward and backward traced into one graph and replayed.
TEST(Transforms, CompiledTransformsReplay) {
  manual_seed(22);
  Tensor w = randn({6, 3}, kFloat64);
  auto loss = [](const Tensor& w, const Tensor& x) { return gelu(x.matmul(w)).pow(2).mean(); };
  auto step = compile(kiln::value_and_grad(loss));
  auto both = compile(kiln::grad(loss, {0, 1}));
  for (int i = 0; i < 4; ++i) {
    Tensor x = randn({5, 6}, kFloat64);
    auto [v, dw] = step(w, x);
    auto [ev, edw] = kiln::value_and_grad(loss)(w, x);
    expect_close(v, ev);
    expect_close(dw, edw);
    std::vector<Tensor> g = both(w, x), eg = kiln::grad(loss, {0, 1})(w, x);
    expect_close(g[0], eg[0]);
    expect_close(g[1], eg[1]);
  }
  EXPECT_EQ(step.stats().compiles, 1u) << step.explain();
  EXPECT_EQ(step.stats().hits, 3u) << step.explain();
  EXPECT_EQ(both.stats().hits, 3u) << both.explain();
}

// An MLP of realistic width trained with AdamW, compiled whole, against eager for several
// steps. Its graph fuses each bias's update (a [1024] value) into its weight's ([784, 1024]) as
// a store broadcast over the weight's rows; the memory planner once let that store reuse the
// memory of a value the same kernel reads, so each row after the first read back what the
// previous one wrote, and the bias became inf on the second step.
TEST(CompiledTraining, WideAdamWStepsMatchEagerOverManySteps) {
  manual_seed(31);
  auto make = [] {
    return std::vector<Tensor>{(randn({784, 1024}) * 0.03).requires_grad_(), zeros({1024}).requires_grad_(),
                               (randn({1024, 10}) * 0.03).requires_grad_(), zeros({10}).requires_grad_()};
  };
  std::vector<Tensor> p = make();
  std::vector<Tensor> q;
  for (const Tensor& t : p) q.push_back(t.detach().clone().requires_grad_());
  Tensor x = randn({64, 784}), y = softmax(randn({64, 10}) * 4, 1);
  optim::AdamW popt(p, optim::AdamWOptions(1e-3).weight_decay(0.01)), qopt(q, optim::AdamWOptions(1e-3).weight_decay(0.01));
  auto step = [x, y](std::vector<Tensor>& w, optim::Optimizer& o) {
    o.zero_grad();
    Tensor loss = -(log_softmax(gelu(x.matmul(w[0]) + w[1]).matmul(w[2]) + w[3], 1) * y).sum(1).mean();
    loss.backward();
    o.step();
    return loss.detach();
  };
  auto compiled = compile([&] { return step(p, popt); });
  for (int i = 0; i < 5; ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    expect_close(compiled(), step(q, qopt), 1e-4);
    for (size_t k = 0; k < p.size(); ++k) expect_close(p[k], q[k], 1e-4);
  }
  EXPECT_GE(compiled.stats().hits, 3u) << compiled.explain();
}
