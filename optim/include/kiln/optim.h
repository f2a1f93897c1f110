// kiln::optim: libtorch's optimizers and learning-rate schedules.
//
//   kiln::optim::AdamW opt({w, b}, kiln::optim::AdamWOptions(1e-3).weight_decay(0.01));
//   kiln::optim::CosineAnnealingLR sched(opt, /*T_max=*/100);
//   for (...) {
//     opt.zero_grad();
//     loss(w, b).backward();
//     opt.step();
//     sched.step();
//   }
//
// Each optimizer follows PyTorch's algorithm step for step (torch.optim's documentation gives
// the formulas): SGD with momentum, dampening, Nesterov and weight decay; Adam and AdamW with
// amsgrad. Updates run under NoGradGuard. Options are per parameter group; a group's learning
// rate may be changed between steps (set_lr, or a schedule). The state (momentum buffers,
// moments, step counts) is readable through state().
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/compile.h"
#include "kiln/runtime/tensor.h"

namespace kiln::optim {

struct AdamCompiled;

// A builder-style option: `Options(0.1).momentum(0.9)` sets, `options.momentum()` reads.
#define KILN_OPTION(type, name)                \
 public:                                       \
  auto& name(const type& v) {                  \
    name##_ = v;                               \
    return *this;                              \
  }                                            \
  const type& name() const { return name##_; } \
                                               \
 private:                                      \
  type name##_

using Betas = std::tuple<double, double>;

// What every optimizer's options have: a learning rate a schedule can change.
class OptimizerOptions {
 public:
  virtual ~OptimizerOptions() = default;
  virtual double get_lr() const = 0;
  virtual void set_lr(double lr) = 0;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
};

template <typename Derived>
class OptionsBase : public OptimizerOptions {
 public:
  double get_lr() const override { return static_cast<const Derived*>(this)->lr(); }
  void set_lr(double lr) override { static_cast<Derived*>(this)->lr(lr); }
  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<Derived>(*static_cast<const Derived*>(this));
  }
};

class SGDOptions : public OptionsBase<SGDOptions> {
 public:
  explicit SGDOptions(double lr) : lr_(lr) {}
  KILN_OPTION(double, lr);
  KILN_OPTION(double, momentum) = 0;
  KILN_OPTION(double, dampening) = 0;
  KILN_OPTION(double, weight_decay) = 0;
  KILN_OPTION(bool, nesterov) = false;
};

class AdamOptions : public OptionsBase<AdamOptions> {
 public:
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  KILN_OPTION(double, lr);
  KILN_OPTION(Betas, betas) = {0.9, 0.999};
  KILN_OPTION(double, eps) = 1e-8;
  KILN_OPTION(double, weight_decay) = 0;
  KILN_OPTION(bool, amsgrad) = false;
  // The step as one compiled function over the group (kiln::compile): each parameter's whole
  // update one fused kernel, the hyperparameters graph inputs (a schedule's new learning rate
  // replays the same graph). Results equal the eager step's up to rounding.
  KILN_OPTION(bool, fused) = false;
};

class AdamWOptions : public OptionsBase<AdamWOptions> {
 public:
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}
  KILN_OPTION(double, lr);
  KILN_OPTION(Betas, betas) = {0.9, 0.999};
  KILN_OPTION(double, eps) = 1e-8;
  KILN_OPTION(double, weight_decay) = 1e-2;
  KILN_OPTION(bool, amsgrad) = false;
  KILN_OPTION(bool, fused) = false;  // as AdamOptions::fused
};

// Parameters that share options. A group made without options takes the optimizer's defaults.
class OptimizerParamGroup {
 public:
  OptimizerParamGroup(std::vector<Tensor> params) : params_(std::move(params)) {}  // NOLINT
  OptimizerParamGroup(std::vector<Tensor> params, std::unique_ptr<OptimizerOptions> options)
      : params_(std::move(params)), options_(std::move(options)) {}
  OptimizerParamGroup(const OptimizerParamGroup& o)
      : params_(o.params_), options_(o.options_ ? o.options_->clone() : nullptr) {}
  std::vector<Tensor>& params() { return params_; }
  const std::vector<Tensor>& params() const { return params_; }
  bool has_options() const { return bool(options_); }
  OptimizerOptions& options() const;
  void set_options(std::unique_ptr<OptimizerOptions> options) { options_ = std::move(options); }

 private:
  std::vector<Tensor> params_;
  std::unique_ptr<OptimizerOptions> options_;
};

// A parameter's state: its step count and named buffers ("momentum_buffer", "exp_avg",
// "exp_avg_sq", "max_exp_avg_sq"), as PyTorch names them.
struct ParamState {
  int64_t step = 0;
  std::map<std::string, Tensor> buffers;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient.
  virtual void step() = 0;
  // Resets the gradients: to undefined (set_to_none, PyTorch's default) or to zeros.
  void zero_grad(bool set_to_none = true);
  void add_param_group(const OptimizerParamGroup& group);
  std::vector<OptimizerParamGroup>& param_groups() { return groups_; }
  const std::vector<OptimizerParamGroup>& param_groups() const { return groups_; }
  const OptimizerOptions& defaults() const { return *defaults_; }
  // The state of parameter `p` (null before its first step).
  const ParamState* state(const Tensor& p) const;

 protected:
  Optimizer(std::vector<OptimizerParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults);
  ParamState& state_of(const Tensor& p);

 private:
  std::vector<OptimizerParamGroup> groups_;
  std::unique_ptr<OptimizerOptions> defaults_;
  std::map<const TensorImpl*, ParamState> state_;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions defaults);
  SGD(std::vector<OptimizerParamGroup> groups, SGDOptions defaults);
  void step() override;
};

// Adam and AdamW: one algorithm, AdamW's weight decay decoupled from the gradient.
template <typename Options, bool Decoupled>
class AdamFamily : public Optimizer {
 public:
  AdamFamily(std::vector<OptimizerParamGroup> groups, Options defaults);
  ~AdamFamily() override;
  void step() override;
  // The fused step's compiled functions' statistics (one per combination of options in use).
  std::vector<CompileStats> compile_stats() const;

 private:
  std::unique_ptr<AdamCompiled> compiled_;
};

class Adam : public AdamFamily<AdamOptions, false> {
 public:
  Adam(std::vector<Tensor> params, AdamOptions defaults = AdamOptions())
      : AdamFamily({OptimizerParamGroup(std::move(params))}, defaults) {}
  Adam(std::vector<OptimizerParamGroup> groups, AdamOptions defaults = AdamOptions())
      : AdamFamily(std::move(groups), defaults) {}
};

class AdamW : public AdamFamily<AdamWOptions, true> {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions defaults = AdamWOptions())
      : AdamFamily({OptimizerParamGroup(std::move(params))}, defaults) {}
  AdamW(std::vector<OptimizerParamGroup> groups, AdamWOptions defaults = AdamWOptions())
      : AdamFamily(std::move(groups), defaults) {}
};

// ---- learning-rate schedules: step() after each optimizer step (or epoch) sets every group's
// learning rate from its initial one, as PyTorch's closed forms do ----
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  void step();
  int64_t last_epoch() const { return epoch_; }
  std::vector<double> get_last_lr() const;

 protected:
  // The learning rate of a group whose initial one is `base` at epoch `epoch`.
  virtual double lr_at(double base, int64_t epoch) const = 0;

 private:
  Optimizer& optimizer_;
  std::vector<double> base_;
  int64_t epoch_ = 0;
};

// lr = base * gamma^(epoch / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double lr_at(double base, int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = eta_min + (base - eta_min) (1 + cos(pi epoch / T_max)) / 2
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0);

 protected:
  double lr_at(double base, int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

}  // namespace kiln::optim
