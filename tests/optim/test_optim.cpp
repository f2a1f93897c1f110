// kiln::optim against PyTorch: SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW
// (amsgrad) and the step and cosine schedules, run from the same parameters on the same
// gradients as tests/optim/generate.py ran PyTorch's; then a small training loop end to end.
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/optim.h>

#include <fstream>
#include <nlohmann/json.hpp>

using namespace kiln;
using json = nlohmann::json;

namespace {

const json& cases() {
  static const json j = [] {
    std::ifstream in(KILN_OPTIM_CASES);
    return json::parse(in);
  }();
  return j;
}

Tensor tensor_of(const json& values, const json& shape) {
  return from_vector(values.get<std::vector<double>>(), shape.get<std::vector<int64_t>>());
}

std::unique_ptr<optim::Optimizer> make(const std::string& kind, const json& o, std::vector<Tensor> params,
                                       bool fused = false) {
  auto num = [&](const char* k, double d) { return o.contains(k) ? o[k].get<double>() : d; };
  auto flag = [&](const char* k) { return o.contains(k) && o[k].get<bool>(); };
  if (kind == "sgd")
    return std::make_unique<optim::SGD>(params, optim::SGDOptions(num("lr", 0))
                                                    .momentum(num("momentum", 0))
                                                    .dampening(num("dampening", 0))
                                                    .weight_decay(num("weight_decay", 0))
                                                    .nesterov(flag("nesterov")));
  optim::Betas betas{0.9, 0.999};
  if (o.contains("betas")) betas = {o["betas"][0].get<double>(), o["betas"][1].get<double>()};
  if (kind == "adam")
    return std::make_unique<optim::Adam>(params, optim::AdamOptions(num("lr", 1e-3))
                                                     .betas(betas)
                                                     .eps(num("eps", 1e-8))
                                                     .weight_decay(num("weight_decay", 0))
                                                     .amsgrad(flag("amsgrad"))
                                                     .fused(fused));
  return std::make_unique<optim::AdamW>(params, optim::AdamWOptions(num("lr", 1e-3))
                                                    .betas(betas)
                                                    .eps(num("eps", 1e-8))
                                                    .weight_decay(num("weight_decay", 1e-2))
                                                    .amsgrad(flag("amsgrad"))
                                                    .fused(fused));
}

// Each case run eagerly, and (Adam, AdamW) fused: compiled, to within rounding of PyTorch.
void run_cases(bool fused) {
  const json& j = cases();
  const json& shapes = j["shapes"];
  for (const json& c : j["cases"]) {
    if (fused && c["optimizer"] == "sgd") continue;
    SCOPED_TRACE(c["optimizer"].get<std::string>() + " " + c["options"].dump());
    std::vector<Tensor> params;
    for (size_t i = 0; i < shapes.size(); ++i) params.push_back(tensor_of(j["params0"][i], shapes[i]).requires_grad_());
    auto opt = make(c["optimizer"], c["options"], params, fused);
    std::unique_ptr<optim::LRScheduler> sched;
    if (!c["schedule"].is_null()) {
      const json& s = c["schedule"];
      if (s["kind"] == "step")
        sched = std::make_unique<optim::StepLR>(*opt, s["step_size"].get<int64_t>(), s["gamma"].get<double>());
      else
        sched = std::make_unique<optim::CosineAnnealingLR>(*opt, s["T_max"].get<int64_t>());
    }
    for (size_t k = 0; k < c["steps"].size(); ++k) {
      for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = tensor_of(j["grads"][k][i], shapes[i]);
      opt->step();
      if (sched) sched->step();
      const json& want = c["steps"][k];
      EXPECT_NEAR(opt->param_groups()[0].options().get_lr(), want["lr"].get<double>(), 1e-15) << "step " << k;
      for (size_t i = 0; i < params.size(); ++i) {
        std::vector<double> got = params[i].to_vector<double>();
        std::vector<double> exp = want["params"][i].get<std::vector<double>>();
        ASSERT_EQ(got.size(), exp.size());
        for (size_t e = 0; e < got.size(); ++e)
          EXPECT_NEAR(got[e], exp[e], (fused ? 1e-10 : 1e-12) * std::max(1.0, std::abs(exp[e])))
              << "step " << k << " param " << i << " [" << e << "]";
      }
    }
  }
}

TEST(Optim, StepsMatchPyTorch) { run_cases(false); }
TEST(Optim, FusedStepsMatchPyTorch) { run_cases(true); }

// The fused step's learning rate is a graph input: a schedule changing it every step replays
// one compiled graph.
TEST(Optim, AScheduleNeverRecompilesTheFusedStep) {
  manual_seed(1);
  std::vector<Tensor> params{randn({64, 32}).requires_grad_(), randn({32}).requires_grad_()};
  optim::AdamW opt(params, optim::AdamWOptions(1e-2).fused(true));
  optim::CosineAnnealingLR sched(opt, 10);
  for (int i = 0; i < 20; ++i) {
    opt.zero_grad();
    params[0].matmul(params[1]).tanh().pow(2).sum().backward();
    opt.step();
    sched.step();
  }
  auto stats = opt.compile_stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].compiles, 1u);
  EXPECT_EQ(stats[0].hits, 19u);
  EXPECT_EQ(stats[0].eager_calls, 0u);
}

TEST(Optim, ZeroGradAndStateFollowPyTorch) {
  Tensor w = ones({3}, kFloat64).requires_grad_();
  optim::SGD opt({w}, optim::SGDOptions(0.5).momentum(0.9));
  EXPECT_EQ(opt.state(w), nullptr);
  (w * w).sum().backward();
  opt.step();
  ASSERT_NE(opt.state(w), nullptr);
  EXPECT_EQ(opt.state(w)->step, 1);
  EXPECT_TRUE(opt.state(w)->buffers.at("momentum_buffer").defined());
  Tensor g = w.grad();
  opt.zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().abs().sum().item<double>(), 0.0);
  opt.zero_grad();
  EXPECT_FALSE(w.grad().defined());
  // a parameter without a gradient is left alone
  Tensor before = w.detach().clone();
  opt.step();
  EXPECT_EQ(w.to_vector<double>(), before.to_vector<double>());
}

TEST(Optim, ParamGroupsHaveTheirOwnOptions) {
  Tensor a = ones({2}, kFloat64).requires_grad_();
  Tensor b = ones({2}, kFloat64).requires_grad_();
  std::vector<optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{a});
  groups.emplace_back(std::vector<Tensor>{b}, std::make_unique<optim::SGDOptions>(0.01));
  optim::SGD opt(groups, optim::SGDOptions(1.0));
  (a.sum() + b.sum()).backward();
  opt.step();
  EXPECT_DOUBLE_EQ(a[0].item<double>(), 0.0);
  EXPECT_DOUBLE_EQ(b[0].item<double>(), 0.99);
  opt.param_groups()[0].options().set_lr(2.0);
  opt.step();
  EXPECT_DOUBLE_EQ(a[0].item<double>(), -2.0);
  try {
    optim::SGD bad({a, a}, optim::SGDOptions(0.1));
    ADD_FAILURE() << "a parameter twice was accepted";
  } catch (const Error&) {
  }
  try {
    optim::SGD bad({a * 2}, optim::SGDOptions(0.1));
    ADD_FAILURE() << "a non-leaf parameter was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-leaf"), std::string::npos) << e.what();
  }
}

// A least-squares fit trained with AdamW: the loss falls and the fit recovers the weights.
TEST(Optim, ALinearRegressionTrains) {
  manual_seed(3);
  Tensor x = randn({64, 3});
  Tensor true_w = from_vector(std::vector<float>{1.5f, -2.0f, 0.5f}, {3, 1});
  Tensor y = x.matmul(true_w) + 0.25;
  Tensor w = zeros({3, 1}).requires_grad_();
  Tensor b = zeros({1}).requires_grad_();
  optim::AdamW opt({w, b}, optim::AdamWOptions(0.05).weight_decay(0));
  optim::StepLR sched(opt, 100, 0.5);
  double first = 0, last = 0;
  for (int i = 0; i < 300; ++i) {
    opt.zero_grad();
    Tensor loss = (x.matmul(w) + b - y).pow(2).mean();
    loss.backward();
    opt.step();
    sched.step();
    (i == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, first * 1e-3);
  std::vector<float> got = w.to_vector<float>();
  EXPECT_NEAR(got[0], 1.5, 1e-2);
  EXPECT_NEAR(got[1], -2.0, 1e-2);
  EXPECT_NEAR(b.item<double>(), 0.25, 1e-2);
}

// A small MLP (GELU, log_softmax cross-entropy) trained 50 steps with SGD-momentum and with
// AdamW in float32, from the weights and on the batches tests/optim/generate_training.py trained
// PyTorch's with: kiln eager, and kiln with the whole step compiled (one joint graph, replayed),
// each against PyTorch's losses step by step and its final weights.
TEST(Optim, AnMlpTrainsAsPyTorchsDoesEagerAndCompiled) {
  static const json data = [] {
    std::ifstream in(KILN_OPTIM_TRAINING);
    return json::parse(in);
  }();
  const auto& sizes = data["sizes"];
  const int64_t batch = data["batch"][0], in = data["batch"][1], out = data["batch"][2];
  auto f32 = [](const json& v, std::vector<int64_t> shape) {
    return from_vector(v.get<std::vector<double>>(), shape).to(kFloat32);
  };
  for (const json& run : data["runs"]) {
    for (bool compiled : {false, true}) {
      const std::string kind = run["optimizer"];
      SCOPED_TRACE(kind + (compiled ? " compiled" : " eager"));
      std::vector<Tensor> params;
      for (size_t i = 0; i < 4; ++i)
        params.push_back(f32(data["params0"][i], sizes[i].get<std::vector<int64_t>>()).requires_grad_());
      auto opt = make(kind, run["options"], params);
      auto step = [&](const Tensor& x, const Tensor& y) {
        opt->zero_grad();
        Tensor h = gelu(x.matmul(params[0]) + params[1]);
        Tensor loss = -(log_softmax(h.matmul(params[2]) + params[3], 1) * y).sum(1).mean();
        loss.backward();
        opt->step();
        return loss;
      };
      auto fn = compile(step);
      const auto& losses = run["losses"];
      for (size_t k = 0; k < losses.size(); ++k) {
        const size_t b = k % data["xs"].size();
        Tensor x = f32(data["xs"][b], {batch, in}), y = f32(data["ys"][b], {batch, out});
        const double got = (compiled ? fn(x, y) : step(x, y)).item<double>(), want = losses[k];
        ASSERT_NEAR(got, want, 2e-5 * (1 + std::abs(want))) << "step " << k;
      }
      if (compiled) {
        // (SGD's first step makes its momentum buffers and that trace is not kept; AdamW's is kept)
        EXPECT_LE(fn.stats().compiles, 2u) << fn.explain();
        EXPECT_GE(fn.stats().hits, losses.size() - 2) << fn.explain();
      }
      for (size_t i = 0; i < 4; ++i) {
        std::vector<float> got = params[i].detach().to_vector<float>();
        std::vector<double> want = run["final"][i];
        ASSERT_EQ(got.size(), want.size());
        for (size_t j = 0; j < got.size(); ++j)
          ASSERT_NEAR(got[j], want[j], 1e-4 * (1 + std::abs(want[j]))) << "parameter " << i << " element " << j;
      }
    }
  }
}

}  // namespace
