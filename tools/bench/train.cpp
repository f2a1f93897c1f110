// kiln-train: training steps (forward, backward, optimizer update) timed eager and compiled,
// against tools/bench/train_torch.py (the same steps in PyTorch, eager and under
// torch.compile, timed the same way). Each program is a model, a batch and an optimizer; its
// step is the loop body a user writes:
//
//   opt.zero_grad(); Tensor loss = model(x, y); loss.backward(); opt.step();
//
// kiln compiles that whole body (one joint graph of forward, backward and update, replayed;
// docs/autograd.md); PyTorch's twin compiles the same body with torch.compile.
//
// Usage: kiln-train [--reps N] [--explain] [NAME...]     (no name: every program)
//        kiln-train --list
// --explain prints each compiled step's explain() (its joint graph, what runs it) after its line.
// Prints per program "kiln NAME eager E ms compiled C ms first F ms": the median of N steps
// (default 20) after 3 untimed ones, and the time of the compiled step's calls that traced and
// compiled (one, or two where the first step makes the optimizer's buffers: SGD's momentum);
// and a second line
// with the forward alone compiled, backward() and the update after the call. adam_step also
// prints its memory roofline: the bytes it must move at a STREAM copy's rate, measured in the run. Before timing,
// the compiled and eager steps run 5 steps from the same weights and their losses must agree
// (float32 tolerances); a mismatch exits with status 1.
#include <kiln/kiln.h>
#include <kiln/optim.h>
#include <kiln/runtime/env.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench.h"

using namespace kiln;
using bench::median_ms;

namespace {

// A program's state: its parameters, optimizer and batch, and the step over them.
struct Session {
  std::vector<Tensor> params;
  std::unique_ptr<optim::Optimizer> opt;
  Tensor x, y;
  std::function<Tensor(const Tensor&, const Tensor&)> loss;  // the model's forward and loss
  bool step_only = false;  // adam_step: the update alone (the gradients are given)
  // The bytes a step must move at least (adam_step: each parameter, gradient and moment read,
  // each parameter and moment written), for the roofline against a STREAM copy; 0: not given.
  double min_bytes = 0;
  // The loop body.
  Tensor step(const Tensor& xb, const Tensor& yb) {
    if (step_only) {
      opt->step();
      return Tensor();
    }
    opt->zero_grad();
    Tensor l = loss(xb, yb);
    l.backward();
    opt->step();
    return l;
  }
};

Tensor param(std::vector<int64_t> sizes, double scale) { return (randn(sizes) * scale).requires_grad_(); }
Tensor zero_param(std::vector<int64_t> sizes) { return zeros(sizes).requires_grad_(); }
struct Program {
  const char* name;
  const char* what;
  std::function<std::unique_ptr<Session>()> make;  // after manual_seed: the same weights each time
};

std::unique_ptr<Session> mlp_train() {
  auto s = std::make_unique<Session>();
  Tensor w1 = param({784, 1024}, 1 / std::sqrt(784.0)), b1 = zero_param({1024});
  Tensor w2 = param({1024, 10}, 1 / std::sqrt(1024.0)), b2 = zero_param({10});
  s->params = {w1, b1, w2, b2};
  s->x = randn({256, 784});
  s->y = softmax(randn({256, 10}) * 6, 1);
  s->loss = [=](const Tensor& x, const Tensor& y) {
    Tensor h = gelu(x.matmul(w1) + b1);
    return -(log_softmax(h.matmul(w2) + b2, 1) * y).sum(1).mean();
  };
  s->opt = std::make_unique<optim::AdamW>(s->params, optim::AdamWOptions(1e-3).weight_decay(0.01));
  return s;
}

std::unique_ptr<Session> layernorm_train() {
  auto s = std::make_unique<Session>();
  Tensor w = param({1024, 1024}, 1 / 32.0), b = zero_param({1024});
  Tensor g = ones({1024}).requires_grad_(), beta = zero_param({1024});
  s->params = {w, b, g, beta};
  s->x = randn({1024, 1024});
  s->y = randn({1024, 1024});
  s->loss = [=](const Tensor& x, const Tensor& y) {
    Tensor h = x.matmul(w) + b;
    Tensor mu = h.mean({1}, true);
    Tensor var = (h - mu).pow(2).mean({1}, true);
    Tensor n = (h - mu) / (var + 1e-5).sqrt() * g + beta;
    return (n - y).pow(2).mean();
  };
  s->opt = std::make_unique<optim::SGD>(s->params, optim::SGDOptions(0.01).momentum(0.9));
  return s;
}

std::unique_ptr<Session> attention_train() {
  auto s = std::make_unique<Session>();
  const int64_t B = 8, T = 128, D = 256;
  Tensor wq = param({D, D}, 1 / 16.0), wk = param({D, D}, 1 / 16.0), wv = param({D, D}, 1 / 16.0),
         wo = param({D, D}, 1 / 16.0);
  s->params = {wq, wk, wv, wo};
  s->x = randn({B, T, D});
  s->y = randn({B, T, D});
  s->loss = [=](const Tensor& x, const Tensor& y) {
    Tensor q = x.matmul(wq), k = x.matmul(wk), v = x.matmul(wv);
    Tensor scores = q.matmul(k.transpose(1, 2)) / std::sqrt(double(D));
    Tensor pos = arange(0, T, 1, TensorOptions(kInt64));
    Tensor future = pos.unsqueeze(0) > pos.unsqueeze(1);  // the causal mask: above the diagonal
    Tensor att = softmax(scores.masked_fill(future, -INFINITY), -1);
    Tensor out = att.matmul(v).matmul(wo);
    return (out - y).pow(2).mean();
  };
  s->opt = std::make_unique<optim::AdamW>(s->params, optim::AdamWOptions(1e-3));
  return s;
}

std::unique_ptr<Session> adam_step() {
  auto s = std::make_unique<Session>();
  for (int i = 0; i < 10; ++i) {
    Tensor p = param({1000, 1000}, 1.0);
    p.mutable_grad() = randn({1000, 1000});
    s->params.push_back(p);
  }
  s->x = s->y = zeros({1});
  s->step_only = true;
  s->min_bytes = 10 * 1e6 * 4 * 7;
  s->opt = std::make_unique<optim::AdamW>(s->params, optim::AdamWOptions(1e-3).weight_decay(0.01));
  return s;
}

std::unique_ptr<Session> rnn_train() {
  auto s = std::make_unique<Session>();
  const int64_t B = 64, I = 128, H = 256, T = 16;
  Tensor wx = param({I, H}, 1 / std::sqrt(double(I))), wh = param({H, H}, 1 / std::sqrt(double(H))),
         b = zero_param({H}), wo = param({H, 1}, 1 / 16.0);
  s->params = {wx, wh, b, wo};
  s->x = randn({T, B, I});
  s->y = randn({B, 1});
  s->loss = [=](const Tensor& x, const Tensor& y) {
    Tensor h = zeros({B, H});
    for (int64_t t = 0; t < T; ++t) h = (x.select(0, t).matmul(wx) + h.matmul(wh) + b).tanh();  // a C++ loop
    return (h.matmul(wo) - y).pow(2).mean();
  };
  s->opt = std::make_unique<optim::SGD>(s->params, optim::SGDOptions(0.01));
  return s;
}

std::unique_ptr<Session> regression_sgd() {
  auto s = std::make_unique<Session>();
  Tensor w = zero_param({16, 1}), b = zero_param({1});
  s->params = {w, b};
  s->x = randn({10000, 16});
  s->y = s->x.matmul(randn({16, 1})) + 0.5 + randn({10000, 1}) * 0.1;
  s->loss = [=](const Tensor& x, const Tensor& y) { return (x.matmul(w) + b - y).pow(2).mean(); };
  s->opt = std::make_unique<optim::SGD>(s->params, optim::SGDOptions(0.05));
  return s;
}

const std::vector<Program>& programs() {
  static const std::vector<Program> list = {
      {"mlp_train", "784-1024-10 MLP, GELU, log_softmax cross-entropy, AdamW; batch 256", mlp_train},
      {"layernorm_train", "linear 1024x1024 + layernorm (affine), MSE, SGD momentum; batch 1024", layernorm_train},
      {"attention_train", "one causal attention head (masked_fill), D 256, T 128, batch 8, MSE, AdamW",
       attention_train},
      {"adam_step", "AdamW update alone, 10 tensors of 1M (gradients given)", adam_step},
      {"rnn_train", "Elman RNN unrolled 16 steps in a C++ loop, H 256, batch 64, MSE, SGD", rnn_train},
      {"regression_sgd", "linear regression, 10000 x 16, MSE, SGD", regression_sgd},
  };
  return list;
}

double ms_of(const std::function<void()>& f) {
  auto a = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  bench::ProgramArgs args;
  args.reps = 20;
  std::vector<std::pair<std::string, std::string>> known;
  for (const Program& p : programs()) known.push_back({p.name, p.what});
  if (int status = bench::parse_program_args(argc, argv, "kiln-train", known, args); status >= 0) return status;
  const int reps = args.reps;
  for (const Program& p : programs()) {
    if (!args.wanted(p.name)) continue;
    manual_seed(0);
    std::unique_ptr<Session> eager = p.make();
    manual_seed(0);
    std::unique_ptr<Session> comp = p.make();
    Session* cs = comp.get();
    auto compiled = compile([cs](const Tensor& x, const Tensor& y) {
      Tensor l = cs->step(x, y);
      return l.defined() ? l.detach() : Tensor(cs->params[0]).detach().sum();
    });
    // Five steps from the same weights (the traces and three replays): the losses (or, for the
    // update alone, a parameter) must agree before any time is taken.
    double first = 0;
    // The forward alone compiled, backward() and the update after the call (a compiled backward
    // attached to the loss), as torch.compile(model) is mostly used.
    manual_seed(0);
    std::unique_ptr<Session> fwd = p.make();
    Session* fs = fwd.get();
    auto forward = compile([fs](const Tensor& x, const Tensor& y) { return fs->loss(x, y); });
    auto forward_step = [&] {
      fs->opt->zero_grad();
      Tensor l = forward(fs->x, fs->y);
      l.backward();
      fs->opt->step();
      return l.detach();
    };
    auto agree = [&](const Tensor& got, const Tensor& want, int i, const char* how) {
      const double g = got.item<double>(), w = want.item<double>();
      if (std::abs(g - w) <= 1e-4 * std::abs(w) + 1e-5) return true;
      std::fprintf(stderr, "kiln-train: %s: step %d: %s loss %.9g, eager %.9g\n", p.name, i, how, g, w);
      return false;
    };
    for (int i = 0; i < 5; ++i) {
      Tensor got;
      const uint64_t traces = compiled.stats().compiles;
      const double t = ms_of([&] { got = compiled(cs->x, cs->y); });
      if (compiled.stats().compiles > traces) first += t;  // (the calls that traced)
      Tensor want = eager->step(eager->x, eager->y);
      want = want.defined() ? want.detach() : eager->params[0].detach().sum();
      if (!agree(got, want, i, "compiled")) return 1;
      if (!cs->step_only && !agree(forward_step(), want, i, "forward-compiled")) return 1;
    }
    const double e = median_ms([&] { eager->step(eager->x, eager->y); }, reps);
    const double c = median_ms([&] { compiled(cs->x, cs->y); }, reps);
    const CompileStats st = compiled.stats();
    std::printf("kiln %-16s eager %9.3f ms  compiled %9.3f ms  first %8.1f ms  (traces %llu, replays %llu)\n", p.name,
                e, c, first, (unsigned long long)st.compiles, (unsigned long long)st.hits);
    if (!cs->step_only) {
      const double fc = median_ms([&] { forward_step(); }, reps);
      std::printf("kiln %-16s forward compiled, backward and step after the call %9.3f ms\n", p.name, fc);
    }
    if (cs->min_bytes > 0) {
      const double gbps = bench::stream_copy_gbps(env::num_threads());
      const double roof = cs->min_bytes / (gbps * 1e9) * 1e3;
      std::printf("kiln %-16s roofline %.3f ms (%.0f MB at the STREAM copy rate %.1f GB/s): compiled at %.2fx it\n",
                  p.name, roof, cs->min_bytes / 1e6, gbps, c / roof);
    }
    if (args.explain) std::printf("%s\n", compiled.explain().str().c_str());
    std::fflush(stdout);
  }
  return 0;
}
