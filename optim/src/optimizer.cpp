// The optimizers: PyTorch's single-tensor algorithms, applied to each parameter with a gradient.
#include <array>
#include <cstdio>
#include <optional>
#include <cmath>
#include <functional>

#include "kiln/compile.h"
#include "kiln/optim.h"
#include "kiln/runtime/autograd.h"
#include "kiln/runtime/factories.h"
#include "kiln/runtime/ops.h"
#include "kiln/runtime/symfloat.h"

namespace kiln::optim {

OptimizerOptions& OptimizerParamGroup::options() const {
  KILN_CHECK(options_, "optim", "this parameter group has no options (add it to an optimizer first)");
  return *options_;
}

Optimizer::Optimizer(std::vector<OptimizerParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults)
    : defaults_(std::move(defaults)) {
  for (const OptimizerParamGroup& g : groups) add_param_group(g);
}

void Optimizer::add_param_group(const OptimizerParamGroup& group) {
  OptimizerParamGroup g(group);
  if (!g.has_options()) g.set_options(defaults_->clone());
  for (size_t i = 0; i < g.params().size(); ++i) {
    const Tensor& p = g.params()[i];
    KILN_CHECK(p.defined() && p.is_leaf(), "optim", "can't optimize a non-leaf tensor (a parameter is a tensor "
               "made with requires_grad_(), not the result of an op)");
    for (size_t k = 0; k < i; ++k)
      KILN_CHECK(!p.is_same(g.params()[k]), "optim", "a parameter group lists parameter ", i,
                 " twice (also at ", k, "): each step would update it twice");
    for (const OptimizerParamGroup& other : groups_)
      for (const Tensor& q : other.params())
        KILN_CHECK(!p.is_same(q), "optim", "some parameters appear in more than one parameter group");
  }
  groups_.push_back(std::move(g));
}

void Optimizer::zero_grad(bool set_to_none) {
  for (OptimizerParamGroup& g : groups_)
    for (Tensor& p : g.params()) {
      if (set_to_none) {
        // (without reading it: a compiled step that starts here does not depend on it)
        autograd::detail::set_grad(p, Tensor());
        continue;
      }
      if (!p.grad().defined()) continue;
      {
        NoGradGuard no_grad;
        p.mutable_grad() = p.grad().detach();
        p.mutable_grad().zero_();
      }
    }
}

const ParamState* Optimizer::state(const Tensor& p) const {
  auto it = state_.find(&p.impl());
  return it == state_.end() ? nullptr : &it->second;
}
ParamState& Optimizer::state_of(const Tensor& p) { return state_[&p.impl()]; }

namespace {
std::vector<OptimizerParamGroup> one_group(std::vector<Tensor> params) {
  return {OptimizerParamGroup(std::move(params))};
}
// The buffer `name` of a parameter's state: zeros like it on first use. Made while a step is
// traced, it is host state to the trace (a captured tensor the step writes), so the first
// step's trace serves every later step.
Tensor& buffer(ParamState& s, const char* name, const Tensor& like) {
  Tensor& b = s.buffers[name];
  if (!b.defined()) {
    {
      trace::Pause pause;
      b = zeros_like(like);
    }
    trace::outside_state(b);
  }
  return b;
}
}  // namespace

// ---- inside a compiled function ----
// A step traced by kiln::compile is replayed without running this code, so the state it keeps
// on the host (step counts, options, which buffers exist) is declared to the trace
// (trace.h): options other than the learning rate are guarded (a change traces again), the
// learning rate and the bias corrections are live numbers (read at every replay: a schedule
// never retraces), and the step counts' increments are replayed.
namespace {
bool tracing() { return trace::active() != nullptr; }
std::string where(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}
}  // namespace

// ---- SGD ----
SGD::SGD(std::vector<Tensor> params, SGDOptions defaults) : SGD(one_group(std::move(params)), defaults) {}
SGD::SGD(std::vector<OptimizerParamGroup> groups, SGDOptions defaults)
    : Optimizer(std::move(groups), std::make_unique<SGDOptions>(defaults)) {
  KILN_CHECK(defaults.lr() >= 0, "SGD", "invalid learning rate: ", defaults.lr());
  KILN_CHECK(!defaults.nesterov() || (defaults.momentum() > 0 && defaults.dampening() == 0), "SGD",
             "nesterov momentum requires a momentum and zero dampening");
}

void SGD::step() {
  NoGradGuard no_grad;
  const bool traced = tracing();
  for (OptimizerParamGroup& g : param_groups()) {
    const auto& o = static_cast<const SGDOptions&>(g.options());
    std::optional<SymFloat> lr;
    if (traced) {
      trace::host_guard(
          [&o, m = o.momentum(), d = o.dampening(), wd = o.weight_decay(), n = o.nesterov()] {
            return o.momentum() == m && o.dampening() == d && o.weight_decay() == wd && o.nesterov() == n;
          },
          "SGD options (momentum, dampening, weight_decay, nesterov) of the group at " + where(&o));
      lr = SymFloat(trace::live_number([&o] { return o.lr(); }, "SGD learning rate of the group at " + where(&o)));
    }
    for (Tensor& p : g.params()) {
      if (!p.grad().defined()) continue;
      Tensor d = p.grad();
      if (o.weight_decay() != 0) d = d + p * o.weight_decay();
      if (o.momentum() != 0) {
        ParamState& s = state_of(p);
        Tensor& buf = s.buffers["momentum_buffer"];
        if (traced)
          trace::host_guard([&buf, had = buf.defined()] { return buf.defined() == had; },
                            "whether the momentum buffer at " + where(&buf) + " exists");
        if (!buf.defined()) {
          buf = d.clone();
        } else {
          buf.mul_(o.momentum()).add_(d, 1 - o.dampening());
        }
        d = o.nesterov() ? d + buf * o.momentum() : buf;
        s.step++;
        if (traced) trace::host_effect([&s] { s.step++; }, "SGD step count at " + where(&s));
      }
      if (lr) {
        p.sub_(d * *lr);
      } else {
        p.add_(d, -o.lr());
      }
    }
  }
}

// ---- Adam and AdamW ----
namespace {
// The hyperparameters of one Adam step, as numbers H: double for the eager step, SymFloat for
// the compiled one (graph inputs: a new learning rate or step count replays the same graph).
template <typename H>
struct AdamStep {
  H decay;      // AdamW's decoupled weight decay: p *= 1 - lr wd
  H l2;         // Adam's weight decay: g += wd p
  H beta1, one_minus_beta1, beta2, one_minus_beta2;
  H step_size;  // lr / (1 - beta1^step)
  H bc2_sqrt;   // sqrt(1 - beta2^step)
  H eps;
};
struct AdamFlags {
  bool decay, l2, amsgrad;
  auto operator<=>(const AdamFlags&) const = default;
};

// One parameter's update, written once for both steps.
template <typename H>
void adam_math(Tensor p, const Tensor& g, Tensor m, Tensor v, Tensor vmax, const AdamStep<H>& h, AdamFlags f) {
  if (f.decay) p.copy_(p * h.decay);
  Tensor grad = f.l2 ? g + p * h.l2 : g;
  m.copy_(m * h.beta1 + grad * h.one_minus_beta1);
  v.copy_(v * h.beta2 + grad * grad * h.one_minus_beta2);
  Tensor second = v;
  if (f.amsgrad) {
    vmax.copy_(maximum(vmax, v));
    second = vmax;
  }
  p.copy_(p - m / (second.sqrt() / h.bc2_sqrt + h.eps) * h.step_size);
}
}  // namespace

// The compiled step: one compiled function per combination of flags, over a group's tensors.
struct AdamCompiled {
  using Fn = std::function<void(const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>&,
                                const std::vector<Tensor>&, const std::vector<Tensor>&, const AdamStep<double>&)>;
  std::map<AdamFlags, Fn> by_flags;
  std::map<AdamFlags, std::function<CompileStats()>> stats;
  Fn& get(AdamFlags f) {
    auto it = by_flags.find(f);
    if (it != by_flags.end()) return it->second;
    CompileOptions o;
    o.name = "fused Adam step";
    o.recompile_limit = 64;  // (a trace per parameter group's shapes and a step's set of gradients)
    auto fn = compile(
        [f](const std::vector<Tensor>& p, const std::vector<Tensor>& g, const std::vector<Tensor>& m,
            const std::vector<Tensor>& v, const std::vector<Tensor>& vmax, SymFloat decay, SymFloat l2, SymFloat b1,
            SymFloat omb1, SymFloat b2, SymFloat omb2, SymFloat step_size, SymFloat bc2_sqrt, SymFloat eps) {
          const AdamStep<SymFloat> h{decay, l2, b1, omb1, b2, omb2, step_size, bc2_sqrt, eps};
          for (size_t i = 0; i < p.size(); ++i) adam_math(p[i], g[i], m[i], v[i], f.amsgrad ? vmax[i] : Tensor(), h, f);
        },
        o);
    stats[f] = [fn] { return fn.stats(); };
    return by_flags[f] = [fn](const auto& p, const auto& g, const auto& m, const auto& v, const auto& vmax,
                              const AdamStep<double>& h) {
      fn(p, g, m, v, vmax, h.decay, h.l2, h.beta1, h.one_minus_beta1, h.beta2, h.one_minus_beta2, h.step_size,
         h.bc2_sqrt, h.eps);
    };
  }
};

namespace {
// A group's Adam (AdamW: `decoupled`) step: eager, parameter by parameter, or compiled over the
// parameters with gradients that share a step count.
// `lr_of` reads the group's learning rate: while traced, at every replay.
void adam_group(std::vector<Tensor>& params, const std::function<double()>& lr_of, double beta1, double beta2,
                double eps, double wd, bool decoupled, bool amsgrad, AdamCompiled* compiled,
                const std::function<ParamState&(const Tensor&)>& state_of) {
  const double lr = lr_of();
  const bool traced = tracing();
  const AdamFlags f{decoupled && wd != 0, !decoupled && wd != 0, amsgrad};
  // Parameters with gradients, batched by step count (they share the bias corrections).
  std::map<int64_t, std::array<std::vector<Tensor>, 5>> batches;
  for (Tensor& p : params) {
    if (!p.grad().defined()) continue;
    ParamState& s = state_of(p);
    s.step++;
    auto& b = batches[s.step];
    b[0].push_back(p);
    b[1].push_back(p.grad());
    b[2].push_back(buffer(s, "exp_avg", p));
    b[3].push_back(buffer(s, "exp_avg_sq", p));
    if (amsgrad) b[4].push_back(buffer(s, "max_exp_avg_sq", p));
  }
  if (traced) {
    // The batches follow the step counts' differences (equal counts share a batch); each
    // replay adds one to every count, then reads the learning rate and bias corrections.
    std::vector<ParamState*> states;
    std::vector<int64_t> diffs;
    for (Tensor& p : params)
      if (p.grad().defined()) states.push_back(&state_of(p));
    for (ParamState* st : states) diffs.push_back(st->step - states.front()->step);
    const std::string at = where(states.empty() ? nullptr : states.front());
    trace::host_guard(
        [states, diffs] {
          for (size_t i = 0; i < states.size(); ++i)
            if (states[i]->step - states.front()->step != diffs[i]) return false;
          return true;
        },
        "Adam step counts' pattern of the group at " + at);
    trace::host_effect(
        [states] {
          for (ParamState* st : states) st->step++;
        },
        "Adam step counts of the group at " + at);
    for (auto& [step, b] : batches) {
      ParamState* first = &state_of(b[0][0]);
      auto live = [&](std::function<double()> f, const char* what) {
        return SymFloat(trace::live_number(std::move(f), std::string(what) + " of the group at " + at));
      };
      const AdamStep<SymFloat> h{live([lr_of, wd] { return 1 - lr_of() * wd; }, "Adam decay"), wd, beta1,
                                 1 - beta1, beta2, 1 - beta2,
                                 live([lr_of, first, beta1] { return lr_of() / (1 - std::pow(beta1, double(first->step))); },
                                      "Adam step size"),
                                 live([first, beta2] { return std::sqrt(1 - std::pow(beta2, double(first->step))); },
                                      "Adam bias correction"),
                                 eps};
      for (size_t i = 0; i < b[0].size(); ++i)
        adam_math(b[0][i], b[1][i], b[2][i], b[3][i], amsgrad ? b[4][i] : Tensor(), h, f);
    }
    return;
  }
  for (auto& [step, b] : batches) {
    const AdamStep<double> h{1 - lr * wd, wd, beta1, 1 - beta1, beta2, 1 - beta2,
                             lr / (1 - std::pow(beta1, double(step))), std::sqrt(1 - std::pow(beta2, double(step))), eps};
    if (compiled) {
      compiled->get(f)(b[0], b[1], b[2], b[3], b[4], h);
    } else {
      for (size_t i = 0; i < b[0].size(); ++i)
        adam_math(b[0][i], b[1][i], b[2][i], b[3][i], amsgrad ? b[4][i] : Tensor(), h, f);
    }
  }
}
}  // namespace

template <typename Options, bool Decoupled>
AdamFamily<Options, Decoupled>::AdamFamily(std::vector<OptimizerParamGroup> groups, Options defaults)
    : Optimizer(std::move(groups), std::make_unique<Options>(defaults)) {
  const auto [b1, b2] = defaults.betas();
  KILN_CHECK(defaults.lr() >= 0 && defaults.eps() >= 0 && b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1,
             Decoupled ? "AdamW" : "Adam", "invalid options: lr ", defaults.lr(), ", betas (", b1, ", ", b2, "), eps ",
             defaults.eps());
}
template <typename Options, bool Decoupled>
AdamFamily<Options, Decoupled>::~AdamFamily() = default;

template <typename Options, bool Decoupled>
void AdamFamily<Options, Decoupled>::step() {
  NoGradGuard no_grad;
  for (OptimizerParamGroup& g : param_groups()) {
    const auto& o = static_cast<const Options&>(g.options());
    const auto [b1, b2] = o.betas();
    if (tracing())
      trace::host_guard(
          [&o, b = o.betas(), eps = o.eps(), wd = o.weight_decay(), ams = o.amsgrad()] {
            return o.betas() == b && o.eps() == eps && o.weight_decay() == wd && o.amsgrad() == ams;
          },
          std::string(Decoupled ? "AdamW" : "Adam") + " options (betas, eps, weight_decay, amsgrad) of the group at " +
              where(&o));
    if (o.fused() && !compiled_) compiled_ = std::make_unique<AdamCompiled>();
    adam_group(g.params(), [&o] { return o.lr(); }, b1, b2, o.eps(), o.weight_decay(), Decoupled, o.amsgrad(),
               o.fused() ? compiled_.get() : nullptr, [&](const Tensor& p) -> ParamState& { return state_of(p); });
  }
}

template <typename Options, bool Decoupled>
std::vector<CompileStats> AdamFamily<Options, Decoupled>::compile_stats() const {
  std::vector<CompileStats> out;
  if (compiled_)
    for (auto& [f, s] : compiled_->stats) out.push_back(s());
  return out;
}

template class AdamFamily<AdamOptions, false>;
template class AdamFamily<AdamWOptions, true>;

// ---- schedules ----
LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (const OptimizerParamGroup& g : optimizer.param_groups()) base_.push_back(g.options().get_lr());
}
void LRScheduler::step() {
  ++epoch_;
  auto& groups = optimizer_.param_groups();
  for (size_t i = 0; i < groups.size() && i < base_.size(); ++i) groups[i].options().set_lr(lr_at(base_[i], epoch_));
}
std::vector<double> LRScheduler::get_last_lr() const {
  std::vector<double> out;
  for (const OptimizerParamGroup& g : optimizer_.param_groups()) out.push_back(g.options().get_lr());
  return out;
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  KILN_CHECK(step_size > 0, "StepLR", "step_size must be positive, got ", step_size);
}
double StepLR::lr_at(double base, int64_t epoch) const { return base * std::pow(gamma_, double(epoch / step_size_)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  KILN_CHECK(T_max > 0, "CosineAnnealingLR", "T_max must be positive, got ", T_max);
}
double CosineAnnealingLR::lr_at(double base, int64_t epoch) const {
  return eta_min_ + (base - eta_min_) * (1 + std::cos(M_PI * double(epoch) / double(t_max_))) / 2;
}

}  // namespace kiln::optim
