// The compiled-function engine: the signature cache, trace trees, replay with guards, the
// recompile budget with dynamic dimensions, and statistics (explain() is in explain.cpp, one
// graph's compiling and running in nodes.cpp).
#include <algorithm>
#include <cstring>
#include <iostream>
#include <mutex>
#include <sstream>
#include <unordered_set>

#include "engine.h"
#include "kiln/runtime/autograd.h"
#include "kiln/runtime/factories.h"
#include "kiln/runtime/log.h"
#include "speculate.h"
#include "tracer.h"

namespace kiln {
namespace detail {

size_t KeyHash::operator()(const Key& k) const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
  for (int64_t v : k) {
    h ^= uint64_t(v);
    h *= 1099511628211ull;
  }
  return size_t(h);
}

namespace {

// ---- signatures ----

// The stride class of a tensor (rules::stride_class), with what else the key needs of its
// layout: views of a tensor (view(), reshape()) depend on it, so a permuted tensor also keys on
// its dimension order, and a broadcast or general one on its exact strides.
using passes::StrideClass;

StrideClass stride_class(const Tensor& t, std::vector<int64_t>* detail) {
  if (t.is_contiguous()) return StrideClass::Contiguous;
  StrideClass c = rules::stride_class(t.sizes(), t.strides(), false, detail);
  if (c != StrideClass::Permuted) detail->assign(t.strides().begin(), t.strides().end());
  return c;
}

}  // namespace

Key signature(std::span<const CallArg> args, const DynamicDims& dynamic) {
  Key k;
  k.reserve(args.size() * 8);
  for (size_t i = 0; i < args.size(); ++i) {
    const CallArg& a = args[i];
    if (!a.is_tensor) {
      const Scalar& s = a.scalar;
      k.push_back(-2 - int64_t(s.kind()));
      if (s.is_floating()) {
        double d = s.to_double();
        int64_t bits;
        std::memcpy(&bits, &d, sizeof bits);
        k.push_back(bits);
      } else {
        k.push_back(s.to_int());
      }
      continue;
    }
    const Tensor& t = a.tensor;
    KILN_CHECK(t.defined(), "compile", "argument ", i, " is an undefined tensor");
    k.push_back(int64_t(t.dtype()));
    k.push_back(int64_t(t.device().type) * 1024 + t.device().index);
    k.push_back(t.dim());
    for (int64_t d = 0; d < t.dim(); ++d) k.push_back(dynamic.count({i, size_t(d)}) ? -1 : t.sizes()[size_t(d)]);
    std::vector<int64_t> detail;
    k.push_back(int64_t(stride_class(t, &detail)));
    k.push_back(int64_t(detail.size()));
    k.insert(k.end(), detail.begin(), detail.end());
    int64_t alias = -1, same = -1;
    for (size_t j = 0; j < i && alias < 0; ++j)
      if (args[j].is_tensor && args[j].tensor.is_alias_of(t)) {
        alias = int64_t(j);
        same = args[j].tensor.is_same(t) ? 1 : 0;
      }
    k.push_back(alias);
    k.push_back(same);
  }
  // With grad mode on, what autograd records depends on which arguments require grad (grad
  // mode itself, not whether any tensor has required grad yet: a function that makes the first
  // such tensor would otherwise see its second call as a new signature).
  if (is_grad_enabled()) {
    k.push_back(-100);
    for (const CallArg& a : args)
      if (a.is_tensor) k.push_back(a.tensor.requires_grad() ? 1 : 0);
  }
  return k;
}

namespace {


// The graphs along a trace's first path with their sizes erased (ir::structure_key): equal for
// two traces at different sizes exactly when no attribute or constant depends on the sizes.
std::string chain_erased(const TreeNode& root) {
  std::string out;
  for (const TreeNode* n = &root; n; n = n->children.empty() ? nullptr : n->children[0].second.get())
    out += ir::structure_key(n->graph, /*erase_sizes=*/true) + char(n->exit);
  return out;
}

const char* kind_name(const Scalar& s) { return s.is_bool() ? "bool" : s.is_integral() ? "integer" : "double"; }

std::vector<ArgDesc> describe_args(std::span<const CallArg> args) {
  std::vector<ArgDesc> out(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    ArgDesc& d = out[i];
    d.is_tensor = args[i].is_tensor;
    if (!d.is_tensor) {
      d.scalar = args[i].scalar;
      continue;
    }
    const Tensor& t = args[i].tensor;
    d.dtype = t.dtype();
    d.device = t.device();
    d.sizes = t.impl().sizes;
    std::vector<int64_t> detail;
    d.layout = int(stride_class(t, &detail));
    for (size_t j = 0; j < i; ++j)
      if (args[j].is_tensor && args[j].tensor.is_alias_of(t)) {
        d.alias = int64_t(j);
        break;
      }
  }
  return out;
}

std::string arg_text(const ArgDesc& d) {
  if (!d.is_tensor) {
    const Scalar& s = d.scalar;
    std::ostringstream o;
    o.precision(17);
    if (s.is_bool()) o << (s.to_bool() ? "true" : "false");
    else if (s.is_integral()) o << s.to_int();
    else o << s.to_double();
    return o.str();
  }
  std::string s = std::string(ir::short_name(d.dtype)) + "[";
  for (size_t k = 0; k < d.sizes.size(); ++k) s += (k ? "," : "") + std::to_string(d.sizes[k]);
  s += "] ";
  s += passes::stride_class_name(StrideClass(d.layout));
  if (!d.device.is_cpu()) s += " @" + d.device.str();
  if (d.alias >= 0) s += " aliasing arg " + std::to_string(d.alias);
  return s;
}

bool same_number(const Scalar& a, const Scalar& b) {
  if (a.kind() != b.kind()) return false;
  if (!a.is_floating()) return a.to_int() == b.to_int();
  const double x = a.to_double(), y = b.to_double();
  return std::memcmp(&x, &y, sizeof x) == 0;
}

// Why a new signature was traced: how its arguments differ from the nearest signature traced
// before (the one with the fewest differences).
std::vector<RetraceCause> signature_causes(const std::vector<ArgDesc>& now,
                                           const std::vector<const std::vector<ArgDesc>*>& before) {
  std::vector<RetraceCause> best;
  bool first = true;
  for (const std::vector<ArgDesc>* old : before) {
    std::vector<RetraceCause> diff;
    if (old->size() != now.size()) continue;
    for (size_t i = 0; i < now.size(); ++i) {
      const ArgDesc &a = now[i], &b = (*old)[i];
      const std::string arg = "argument " + std::to_string(i);
      if (a.is_tensor != b.is_tensor) {
        diff.push_back({arg, arg, "kinds", "a tensor and a number take turns in this place", ""});
        continue;
      }
      if (!a.is_tensor) {
        if (same_number(a.scalar, b.scalar)) continue;
        std::ostringstream v;
        v.precision(17);
        if (a.scalar.is_floating()) v << a.scalar.to_double();
        else v << a.scalar.to_int();
        const std::string subject = arg + " (" + kind_name(a.scalar) + ")";
        diff.push_back({subject, subject, "values",
                        "every value of a number argument is traced on its own; pass it as kiln::SymFloat(v) "
                        "(or a 0-d tensor), a graph input read at every call, to trace once",
                        v.str()});
        continue;
      }
      if (a.dtype != b.dtype)
        diff.push_back({arg + " dtype", arg, "dtypes", "each dtype is a graph of its own", std::string(name(a.dtype))});
      if (!(a.device == b.device))
        diff.push_back({arg + " device", arg, "devices", "each device is a graph of its own", a.device.str()});
      if (a.sizes.size() != b.sizes.size()) {
        diff.push_back({arg + " rank", arg, "numbers of dims", "each rank is a graph of its own",
                        std::to_string(a.sizes.size()) + "-d"});
      } else {
        for (size_t d = 0; d < a.sizes.size(); ++d)
          if (a.sizes[d] != b.sizes[d]) {
            const std::string subject = arg + " size(" + std::to_string(d) + ")";
            diff.push_back({subject, subject, "sizes",
                            "a dim whose size varies is made dynamic (one graph for every size) once recompile_limit "
                            "signatures are traced, unless the graph or the host code depends on the size "
                            "(explain() says which)",
                            std::to_string(a.sizes[d])});
          }
      }
      if (a.layout != b.layout)
        diff.push_back({arg + " layout", arg, "layouts (stride classes)",
                        "each layout (contiguous, permuted, broadcast, strided) is a graph of its own; pass "
                        "x.contiguous() where the layouts vary",
                        std::string(passes::stride_class_name(passes::StrideClass(a.layout)))});
      if (a.alias != b.alias)
        diff.push_back({arg + " aliasing", arg, "aliasings", "which arguments share memory is part of the signature",
                        a.alias < 0 ? "no alias" : "aliasing argument " + std::to_string(a.alias)});
    }
    if (first || diff.size() < best.size()) best = std::move(diff);
    first = false;
  }
  return best;
}

std::string join_causes(const std::vector<RetraceCause>& causes) {
  std::string s;
  for (const RetraceCause& c : causes)
    s += (s.empty() ? "" : "; ") + c.subject + (c.sample.empty() ? "" : " is now " + c.sample);
  return s;
}

// The cause of a retrace that a guard failing on replay made.
RetraceCause guard_cause(const TreeNode& n, const std::string& key) {
  RetraceCause c;
  c.key = n.reason + " at " + n.where;
  c.subject = c.key;
  c.sample = describe_key(n.exit, n.access, key);
  if (n.exit == Exit::DataDependent) {
    c.noun = "output shapes";
    c.fix = "each output size of a data-dependent op is a graph of its own; keep the shape fixed with a mask "
            "(kiln::where) where the data decides";
  } else if (n.access == trace::HostAccess::Item) {
    c.noun = "values";
    c.fix = "each value item() returns is a graph of its own; compare on the tensor instead, "
            "`(loss < 1e-3).item<bool>()` has two outcomes, or keep the decision in the graph (kiln::where, kiln::cond)";
  } else if (n.access == trace::HostAccess::Bool) {
    c.noun = "outcomes";
    c.fix = "each outcome of a branch on a tensor is a graph of its own (kiln::cond keeps both in one graph)";
  } else {
    c.noun = "values";
    c.fix = "the host read the tensor's elements: each new content is a graph of its own; keep the logic on tensors";
  }
  return c;
}

// The cause of a retrace that a size guard failing on replay made.
RetraceCause size_guard_cause(const SizeGuard* g, const std::string& why) {
  RetraceCause c;
  if (!g) {
    c.key = why;
    c.subject = why;
    c.noun = "sizes";
    c.fix = "the graph depends on sizes it cannot follow: it is traced again for each";
    return c;
  }
  const bool exact = g->inside && g->lo == g->hi && g->terms.size() == 1 && g->where.find("sym") == std::string::npos;
  c.key = "size guard " + g->where;
  c.subject = "the size guard `" + describe_guard(*g) + "` (" + g->where + ")";
  c.noun = exact ? "sizes" : "outcomes";
  c.fix = exact ? "size(), sizes(), numel() and strides() hand the host the exact value, so each new size is "
                  "traced again; compare on x.sym_size(d) instead (docs/compile.md, \"Sizes and host code\"): one "
                  "graph per outcome of the comparison"
                : "each outcome of a comparison on sizes is a graph of its own";
  return c;
}

}  // namespace

// The signature as explain() and the cache's reports print it, from the arguments' descriptions.
std::string signature_text(std::span<const CallArg> args) {
  std::string s = "(";
  std::vector<ArgDesc> ds = describe_args(args);
  for (size_t i = 0; i < ds.size(); ++i) s += (i ? ", " : "") + arg_text(ds[i]);
  return s + ")";
}

// ---- the engine ----

Engine::Engine(CompileOptions options, std::source_location where) : state_(std::make_unique<State>()) {
  state_->opts = std::move(options);
  if (where.line() != 0) state_->where = std::string(where.file_name()) + ":" + std::to_string(where.line());
}
Engine::~Engine() = default;
const CompileOptions& Engine::options() const { return state_->opts; }

void Engine::State::note(std::string line) {
  if (log.size() >= kLogLines) {
    log.pop_front();
    log_dropped++;
  }
  log.push_back(std::move(line));
}

std::string Engine::State::budget_text() const {
  const uint64_t limit = uint64_t(std::max(0, opts.recompile_limit));
  const uint64_t taken = traces_taken.load(std::memory_order_relaxed), used = taken > 0 ? taken - 1 : 0;
  std::string s = std::to_string(used) + " of " + std::to_string(limit) + " retraces used";
  if (budget_eager_calls > 0)
    s += "; spent: " + std::to_string(budget_eager_calls.load()) + " calls needed a new trace and ran eagerly";
  if (!causes.empty()) s += "; the retraces' causes:" + budget_causes_text();
  return s;
}

bool Engine::State::budget_spent() const {
  return traces_taken.load(std::memory_order_relaxed) >= 1 + uint64_t(std::max(0, opts.recompile_limit));
}

void Engine::State::refuse(const std::vector<RetraceCause>& why) {
  if (!warned_budget.exchange(true)) {
    std::shared_lock lock(mu);
    std::cerr << "kiln: warning: " << who() << " has used its recompile budget (recompile_limit "
              << opts.recompile_limit << ": " << 1 + std::max(0, opts.recompile_limit)
              << " traces); calls that need a new trace run eagerly from now on (correct, not compiled). The traces "
              << "were caused by:" << budget_causes_text()
              << "\n  Raise CompileOptions::recompile_limit if these traces are wanted.\n";
  }
  const uint64_t n = ++budget_eager_calls;
  if ((n & (n - 1)) == 0)  // the 1st, 2nd, 4th, ... such call: the log stays short
    logs::emit(logs::Channel::PerfHints, who() + ": call past the recompile budget ran eagerly (" + std::to_string(n) +
                                             " so far); it needed a trace because: " +
                                             (why.empty() ? std::string("a new input signature") : join_causes(why)));
}

bool Engine::State::take_budget(const std::vector<RetraceCause>& why) {
  {
    std::unique_lock lock(mu);
    if (!budget_spent()) {
      if (traces_taken.fetch_add(1, std::memory_order_relaxed) > 0)
        for (const RetraceCause& c : why) {
          CauseTally& t = causes[c.key];
          t.count++;
          t.what = c.subject;
          t.noun = c.noun;
          t.fix = c.fix;
          if (!c.sample.empty() && t.samples.size() < CauseTally::kSamples &&
              std::find(t.samples.begin(), t.samples.end(), c.sample) == t.samples.end())
            t.samples.push_back(c.sample);
        }
      return true;
    }
  }
  refuse(why);
  return false;
}

std::string Engine::State::budget_causes_text() const {
  std::string s;
  for (const auto& [key, t] : causes) {
    s += "\n  - " + t.what + " took " + std::to_string(t.count) + " new " + t.noun;
    if (!t.samples.empty()) {
      s += " (";
      for (size_t i = 0; i < t.samples.size(); ++i) s += (i ? ", " : "") + t.samples[i];
      s += t.count > t.samples.size() ? ", ...)" : ")";
    }
    s += ": " + t.fix;
  }
  return s.empty() ? "\n  - (no cause recorded)" : s;
}

namespace {
std::string leaf_text(Ref leaf) {
  return (leaf.space == Ref::Space::Arg ? "argument " : "captured tensor #") + std::to_string(leaf.index);
}

// Why node `n` cannot run on this call's host state (empty: it can): a library's guard, a
// leaf's .grad defined where it was not (or the reverse), a .grad read as a graph input whose
// type differs from the traced one.
std::string host_checks(const TreeNode& n, Env& env) {
  for (const HostOp& h : n.host_ops)
    if (h.kind == HostOp::Kind::Guard && !h.holds()) return "host state changed: " + h.what;
  for (const GradGuard& g : n.grad_guards)
    if (env.at(g.leaf).grad().defined() != g.defined)
      return "the .grad of " + leaf_text(g.leaf) + (g.defined ? " is undefined" : " is defined") + " (it was " +
             (g.defined ? "defined" : "undefined") + " when traced)";
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const Ref r = n.inputs[k];
    if (r.space != Ref::Space::ArgGrad && r.space != Ref::Space::CaptureGrad) continue;
    const Tensor& t = env.at(r);
    const ir::Type& want = n.graph.inputs()[k]->type;
    if (!t.defined() || t.dtype() != want.dtype || t.device() != want.device || t.sizes().vec() != want.sizes ||
        t.strides().vec() != want.strides)
      return "the .grad of " + leaf_text({r.space == Ref::Space::ArgGrad ? Ref::Space::Arg : Ref::Space::Capture, r.index}) +
             " changed type, sizes or strides since it was traced";
  }
  return {};
}

void run_host_ops(const TreeNode& n, Env& env) {
  for (const HostOp& h : n.host_ops) {
    if (h.kind == HostOp::Kind::Effect) h.effect();
    if (h.kind == HostOp::Kind::Number) env.at({Ref::Space::Live, h.slot}) = scalar_tensor(h.read(), TensorOptions(kFloat64));
  }
}

// The memory of the call's arguments and captured tensors.
std::unordered_set<const void*> input_storages(const Env& env) {
  std::unordered_set<const void*> out;
  for (const auto* group : {&env.args, &env.captures})
    for (const Tensor& t : *group)
      if (t.defined()) out.insert(t.storage().get());
  return out;
}

// Leaves each touched leaf's .grad as the eager run left it. A .grad is a tensor of its own, as
// eager's are (a program may hand out one buffer for equal values, or an input): those are copied.
void set_grads(const TreeNode& n, Env& env, const std::vector<Tensor>& returned) {
  std::unordered_set<const void*> taken = input_storages(env);
  for (const Tensor& t : returned)
    if (t.defined()) taken.insert(t.storage().get());
  for (const GradSet& g : n.grad_sets) {
    Tensor grad;
    if (g.source) {
      grad = env.at(*g.source);
      if (!taken.insert(grad.storage().get()).second) grad = grad.clone();
    }
    env.at(g.leaf).mutable_grad() = std::move(grad);
  }
}
// Gives the results that kept gradient history in the traced call the compiled backward as
// their grad_fn ("CompiledFunctionBackward"): it holds what the forward saved and the leaves'
// tensors until a backward without retain_graph frees it. A result sharing memory with an input
// is copied first (its history must not become the input's).
void attach_backward(const std::shared_ptr<BackwardPlan>& plan, Env& env, std::vector<Tensor>& returned) {
  std::vector<Tensor> leaves, sources, outs;
  for (Ref l : plan->leaves) leaves.push_back(env.at(l));
  for (Ref s : plan->sources) sources.push_back(env.at(s));
  const std::unordered_set<const void*> inputs = input_storages(env);
  for (uint32_t k : plan->outputs) {
    Tensor& o = returned.at(k);
    if (inputs.count(o.storage().get())) o = o.clone();
    outs.push_back(o);
  }
  autograd::detail::attach_function(
      "CompiledFunctionBackward", outs, leaves, [plan, sources = std::move(sources)](const std::vector<Tensor>& grads) {
        std::vector<Tensor> ins;
        for (Ref r : plan->node->inputs) ins.push_back(r.space == Ref::Space::Arg ? grads.at(r.index) : sources.at(r.index));
        return run_node(*plan->node, ins);
      });
}
}  // namespace

Engine::State::Replay Engine::State::replay(const Entry& e, std::span<const CallArg> args) const {
  // A replay records nothing for autograd (a result that needs history gets its compiled
  // backward explicitly): the reference executor's eager ops write into parameters as kernels do.
  AutoGradMode no_grad(false);
  Replay r;
  if (!e.root && !e.not_kept.empty()) {
    r.why = "the last trace was not kept: " + e.not_kept;
    r.cause = {"not kept", "a tensor made during the call and kept outside it", "traces",
               "return the tensor, or update a tensor made before the call in place (t.copy_(...))", ""};
    return r;
  }
  Env env;
  env.args.resize(args.size());
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].is_tensor) env.args[i] = args[i].tensor;
  env.captures.resize(e.captures.size());
  for (size_t i = 0; i < e.captures.size(); ++i) {
    auto sp = e.captures[i].lock();
    if (!sp) {
      r.why = "captured tensor #" + std::to_string(i) + " was released (rebound or destroyed): trace again";
      r.cause = {"captured tensor #" + std::to_string(i), "captured tensor #" + std::to_string(i),
                 "tensors (it was rebound or released)",
                 "a rebound capture is a new graph input, traced again; update it in place (w.copy_(new_w)) or "
                 "pass it as an argument",
                 ""};
      r.reset = true;
      return r;
    }
    env.captures[i] = Tensor(std::move(sp));
    if (i < e.captures.size() && i < e.capture_grad.size() && e.capture_grad[i] >= 0 && autograd::may_record() &&
        env.captures[i].requires_grad() != bool(e.capture_grad[i])) {
      const std::string now = env.captures[i].requires_grad() ? "now requires grad" : "no longer requires grad";
      r.why = "captured tensor #" + std::to_string(i) + " " + now + ": trace again";
      r.cause = {"captured tensor #" + std::to_string(i) + " requires_grad", "captured tensor #" + std::to_string(i),
                 "requires_grad flags", "set requires_grad before the first call", ""};
      r.reset = true;
      return r;
    }
  }
  env.values.resize(e.value_slots);
  env.live.resize(e.live_slots);
  // Writes into arguments or captures made before a guard that then fails are undone, so the
  // fresh trace starts from the caller's values.
  std::vector<std::pair<Tensor, Tensor>> saved;
  auto undo = [&] {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) it->first.copy_(it->second);
  };
  auto inputs_of = [&](const TreeNode& n) {
    std::vector<Tensor> ins;
    ins.reserve(n.inputs.size());
    for (Ref ref : n.inputs) ins.push_back(env.at(ref));
    return ins;
  };
  // Under dynamic dims a place of the tree may hold several traces (alternatives), told apart by
  // their size guards: the first whose guards hold for these sizes runs.
  SymbolTable table;
  // So may host state: a trace per state of the leaves' .grad, or of a library's guarded state.
  auto select = [&](const TreeNode* n) -> const TreeNode* {
    for (const TreeNode* m = n; m; m = m->alternative.get()) {
      if (e.generic && m->has_size_guards()) {
        std::string why;
        const SizeGuard* failed = nullptr;
        if (!size_guards_hold(*m, inputs_of(*m), table, &why, &failed)) {
          r.why = why;
          r.cause = size_guard_cause(failed, why);
          continue;
        }
      }
      if (m->replay_checks()) {
        std::string why = host_checks(*m, env);
        if (!why.empty()) {
          r.why = why;
          r.cause = {"host state", "host state a library or autograd keeps", "values",
                     "(the state a compiled function reads: .grad defined or not, an optimizer's options)", ""};
          continue;
        }
      }
      return m;
    }
    return nullptr;
  };
  const TreeNode* n = select(e.root.get());
  if (!n) return r;
  r.why.clear();
  // The outputs of a speculated child (n's speculation ran it with n), kept until the guard is
  // read; `ran` when n is that child and its outputs are already in env.
  std::vector<Tensor> ahead;
  bool ran = false;
  while (true) {
    if (!ran) run_host_ops(*n, env);  // (select() checked them)
    if (n->exit != Exit::Return && n->guarded_below)
      for (Ref w : n->written) saved.push_back({env.at(w), env.at(w).clone()});
    const int guess = ran ? -1 : n->predictor.guess();
    const Speculation* spec = guess >= 0 && size_t(guess) < n->speculations.size() ? n->speculations[size_t(guess)].get() : nullptr;
    if (!ran) {
      std::vector<Tensor> outs;
      try {
        if (spec) {
          std::optional<std::vector<Tensor>> both = run_speculation(*spec, env);
          if (both) {
            ahead.assign(std::make_move_iterator(both->begin() + ptrdiff_t(spec->own_outputs)),
                         std::make_move_iterator(both->end()));
            both->resize(spec->own_outputs);
            outs = std::move(*both);
          } else {
            spec = nullptr;
          }
        }
        if (!spec) outs = run_node(*n, inputs_of(*n));
      } catch (...) {
        undo();
        throw;
      }
      for (size_t k = 0; k < outs.size(); ++k) env.values[n->outputs[k]] = std::move(outs[k]);
    }
    ran = false;
    if (n->exit == Exit::Return) {
      for (Ref ref : n->returns) r.outputs.push_back(env.at(ref));
      if (!n->grad_sets.empty()) set_grads(*n, env, r.outputs);
      if (n->backward) attach_backward(n->backward, env, r.outputs);
      r.ok = true;
      return r;
    }
    std::string key;
    if (n->exit == Exit::Print) {
      print(env.at(n->guarded));
    } else if (n->exit == Exit::Split) {
    } else if (n->exit == Exit::DataDependent) {
      std::vector<Tensor> dd;
      for (Ref ref : n->dd_inputs) dd.push_back(env.at(ref));
      Tensor out = n->replay(dd);
      key = guard_key(n->exit, n->access, out);
      env.at({Ref::Space::Value, n->dd_output}) = std::move(out);
    } else {
      key = guard_key(n->exit, n->access, env.at(n->guarded));
    }
    const TreeNode* next = nullptr;
    for (size_t k = 0; k < n->children.size() && !next; ++k)
      if (n->children[k].first == key) {
        next = n->children[k].second.get();
        n->predictor.observe(k);  // (a path not traced yet is observed when merge() adds it)
      }
    if (spec && next != spec->child) {
      misspeculated++;  // the child's outputs are dropped; it wrote nothing
      ahead.clear();
      spec = nullptr;
    }
    if (!next) {
      undo();
      std::string seen;
      size_t shown = 0;
      for (const auto& [k, child] : n->children)
        if (shown++ < 8) seen += (seen.empty() ? "" : ", ") + describe_key(n->exit, n->access, k);
      if (n->children.size() > 8) seen += ", and " + std::to_string(n->children.size() - 8) + " more";
      r.why = "guard failed: " + n->reason + " at " + n->where + " gave " + describe_key(n->exit, n->access, key) +
              " (traced: " + seen + ")";
      r.cause = guard_cause(*n, key);
      return r;
    }
    next = select(next);
    if (!next) {
      undo();
      return r;
    }
    r.why.clear();
    if (spec) {
      if (next == spec->child) {  // (not another trace of its place, chosen by size guards)
        for (size_t k = 0; k < ahead.size(); ++k) env.values[next->outputs[k]] = std::move(ahead[k]);
        ran = true;
        speculated++;
      } else {
        misspeculated++;
      }
      ahead.clear();
    }
    n = next;
  }
}

// Adds a freshly traced chain to the entry's tree; every guard on its path observes the child
// the trace took (the trace is a call too, for the predictors).
void Engine::State::merge(Entry& e, std::unique_ptr<TreeNode> chain) {
  std::unique_ptr<TreeNode>* slot = &e.root;
  std::unique_ptr<TreeNode>* owner = &chain;
  while (true) {
    TreeNode* nw = owner->get();
    std::unique_ptr<TreeNode>* alt = slot;
    while (*alt && !(*alt)->same_step(*nw, e.generic)) alt = &(*alt)->alternative;
    if (!*alt) {
      bool guarded = *slot != nullptr;
      for (const TreeNode* m = slot->get(); m && guarded; m = m->alternative.get())
        guarded = (e.generic && m->has_size_guards()) || m->checks_can_fail();
      if (guarded) {
        // Every trace here has guards (size guards, checks of host state), and they failed for
        // the call this one was traced at.
        *alt = std::move(*owner);
      } else {
        // A different graph where the tree had one (a function whose trace does not depend on
        // its inputs and guards alone): the new path replaces the old subtree.
        if (*slot) note("  (the new trace differs from the cached one at this point; it replaces it)");
        *slot = std::move(*owner);
        alt = slot;
      }
      for (TreeNode* n = alt->get(); n && !n->children.empty(); n = n->children[0].second.get()) n->predictor.observe(0);
      return;
    }
    TreeNode* cur = alt->get();
    if (nw->exit == Exit::Return) return;  // already there (another thread traced it first)
    auto& [key, next_new] = nw->children.at(0);
    auto it = std::find_if(cur->children.begin(), cur->children.end(), [&](auto& c) { return c.first == key; });
    if (it == cur->children.end()) {
      cur->children.push_back({key, std::move(next_new)});
      // the new path's speculation, built against the new node's (same) graph
      cur->speculations.resize(cur->children.size() - 1);
      cur->speculations.push_back(nw->speculations.empty() ? nullptr : std::move(nw->speculations[0]));
      if (!cur->speculations.back() && !nw->speculation_note.empty()) cur->speculation_note = nw->speculation_note;
      cur->predictor.observe(cur->children.size() - 1);
      for (TreeNode* n = cur->children.back().second.get(); n && !n->children.empty(); n = n->children[0].second.get())
        n->predictor.observe(0);
      return;
    }
    cur->predictor.observe(size_t(it - cur->children.begin()));
    slot = &it->second;
    owner = &next_new;
  }
}

// The KILN_LOGS lines of a fresh trace: its breaks and the guards it recorded.
void Engine::State::log_trace(const TreeNode& head, size_t number, const std::string& why) const {
  const State& s = *this;
  logs::emit(logs::Channel::Recompiles, s.who() + ": trace #" + std::to_string(number) + ": " + why);
  for (const TreeNode* n = &head; n; n = n->children.empty() ? nullptr : n->children[0].second.get()) {
    if (n->exit != Exit::Return && n->exit != Exit::Split) {
      logs::emit(logs::Channel::GraphBreaks, s.who() + ": graph break after " + n->graph.name() + ": " + n->reason +
                                               " at " + n->where + " (the graph so far runs; tracing goes on in a new one)");
      if (n->exit != Exit::Print && n->exit != Exit::Split)
        logs::emit(logs::Channel::Guards, s.who() + ": guard on " + n->reason + " at " + n->where + ": " +
                                            describe_key(n->exit, n->access, n->children.at(0).first));
    }
    for (const SizeGuard& g : n->size_guards)
      logs::emit(logs::Channel::Guards, s.who() + ": size guard in " + n->graph.name() + ": " + describe_guard(g) +
                                          " (" + g.where + ")");
    if (!n->opaque.empty())
      logs::emit(logs::Channel::Guards, s.who() + ": " + n->graph.name() + " runs only at its traced sizes: " + n->opaque);
  }
}

std::vector<Tensor> Engine::State::trace(const Key& key, std::span<const CallArg> args,
                                         const std::function<std::vector<Tensor>()>& run_eager, std::string why,
                                         bool reset, bool generic) {
  std::vector<std::weak_ptr<TensorImpl>> known_captures;
  if (!reset) {
    std::shared_lock lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) known_captures = it->second->captures;
  }
  size_t known = known_captures.size();
  Tracer tracer(args, std::move(known_captures), opts.fullgraph, nullptr, size_t(std::max(0, opts.max_graph_ops)));
  std::vector<Tensor> outs;
  {
    trace::Install install(&tracer);
    outs = run_eager();
  }
  const size_t number = ++compiles;
  breaks += tracer.breaks();
  std::unique_ptr<TreeNode> chain;
  tracer.check_end(outs);
  // (a compiled backward serves the traced sizes: under dynamic dims such a call runs eagerly)
  if (tracer.needs_backward() && !generic) tracer.trace_backward(outs);
  if (tracer.not_replayable().empty() && tracer.not_kept().empty() && !(generic && tracer.needs_backward())) {
    chain = tracer.finish(outs);
    for (TreeNode* n = chain.get(); n; n = n->children.empty() ? nullptr : n->children[0].second.get()) {
      compile_node(*n, opts);
      if (n->backward) compile_node(*n->backward->node, opts);
    }
    if (opts.speculate && opts.backend == CompileOptions::Backend::Compiled)
      for (TreeNode* n = chain.get(); n; n = n->children.empty() ? nullptr : n->children[0].second.get())
        if (n->exit != Exit::Return && !n->children[0].second->replay_checks())
          n->speculations.push_back(
              speculate(*n, 0, [&](const ir::Graph& g) { return compile_speculation(*n, g, opts); }));
    log_trace(*chain, number, why);
    if (tracer.splits() > 0)
      logs::emit(logs::Channel::PerfHints,
                 who() + ": trace #" + std::to_string(number) + " is long: it was cut into " +
                     std::to_string(tracer.splits() + 1) + " graphs of at most " + std::to_string(opts.max_graph_ops) +
                     " ops; it passed that length at " + tracer.split_where() +
                     ". A host loop unrolled into the trace? Compile its body as a function of its own and call that "
                     "from the host loop: one compile serves every iteration");
  }

  std::unique_lock lock(mu);
  auto& slot = cache[key];
  if (!slot) {
    slot = std::make_unique<Entry>();
    slot->signature = signature_text(args);
    slot->args = describe_args(args);
    slot->generic = generic;
  }
  Entry& e = *slot;
  note("trace #" + std::to_string(number) + " " + e.signature + ": " + why);
  if (!chain && !tracer.not_kept().empty()) {
    e.not_kept = tracer.not_kept();
    note("  not kept: " + e.not_kept);
    logs::emit(logs::Channel::Recompiles, who() + ": trace #" + std::to_string(number) + " not kept: " + e.not_kept);
    return outs;
  }
  if (!chain) {
    e.eager_reason = !tracer.not_replayable().empty()
                         ? tracer.not_replayable()
                         : "it returns a tensor whose gradient history is still live, and its sizes are dynamic: a "
                           "compiled backward serves one size";
    note("  not replayable: " + e.eager_reason + "; this signature runs eagerly from now on");
    return outs;
  }
  e.not_kept.clear();
  if (reset) {
    // A capture was released: the tree's graphs read it, so they all go.
    e.root.reset();
    e.captures.clear();
    e.capture_grad.clear();
    e.value_slots = 0;
    note("  a captured tensor was released: the signature's trace tree is traced anew");
  } else if (e.captures.size() != known) {
    return outs;  // another thread extended the captures meanwhile
  }
  e.captures = tracer.captures();
  e.capture_grad.resize(e.captures.size(), -1);
  for (size_t i = 0; i < tracer.capture_grad_flags().size() && i < e.capture_grad.size(); ++i)
    if (tracer.capture_grad_flags()[i] >= 0) e.capture_grad[i] = tracer.capture_grad_flags()[i];
  for (const TreeNode* n = chain.get(); n; n = n->children.empty() ? nullptr : n->children[0].second.get()) {
    for (const HostOp& h : n->host_ops)
      if (h.kind == HostOp::Kind::Number) e.live_slots = std::max<size_t>(e.live_slots, h.slot + 1);
    for (uint32_t s : n->outputs) e.value_slots = std::max<size_t>(e.value_slots, s + 1);
    if (n->exit == Exit::DataDependent) e.value_slots = std::max<size_t>(e.value_slots, n->dd_output + 1);
  }
  merge(e, std::move(chain));
  if (e.root) e.root->mark_guards();
  return outs;
}

std::vector<Tensor> Engine::call(std::span<const CallArg> args, const std::function<std::vector<Tensor>()>& run_eager) {
  State& s = *state_;
  s.calls++;
  // Called while another function is being traced: run inline, so the outer trace records
  // these ops into its own graph.
  if (trace::active()) {
    s.eager_calls++;
    return run_eager();
  }
  Key key;
  bool dynamic_key;
  std::string why;
  std::vector<RetraceCause> causes;
  bool reset = false;
  {
    // One reader lock covers the signature (it reads the dynamic dims), lookup and replay.
    std::shared_lock lock(s.mu);
    key = signature(args, s.dynamic);
    dynamic_key = !s.dynamic.empty();
    auto it = s.cache.find(key);
    if (it != s.cache.end()) {
      const State::Entry& e = *it->second;
      if (!e.eager_reason.empty()) {
        lock.unlock();
        s.eager_calls++;
        return run_eager();
      }
      State::Replay r = s.replay(e, args);
      if (r.ok) {
        s.hits++;
        return std::move(r.outputs);
      }
      why = r.why;
      causes.push_back(std::move(r.cause));
      reset = r.reset;
      s.guard_failures++;
    }
  }
  if (why.empty()) {
    s.misses++;
    if (s.budget_spent()) {  // (no trace can follow: no need to say why it would have)
      s.refuse({});
      s.eager_calls++;
      return run_eager();
    }
    std::unique_lock lock(s.mu);
    why = s.cache.empty() ? "first call" : "new input signature";
    if (!s.cache.empty()) {
      std::vector<const std::vector<ArgDesc>*> before;
      for (const auto& [k, e] : s.cache) before.push_back(&e->args);
      const std::vector<ArgDesc> now = describe_args(args);
      causes = signature_causes(now, before);
      if (!causes.empty()) why += ": " + join_causes(causes);
      // Which sizes differ from the entries already cached (the candidates for dynamic dims).
      std::set<std::pair<size_t, size_t>> varying;
      for (const auto& [k, e] : s.cache)
        for (size_t i = 0; i < args.size() && i < e->args.size(); ++i)
          if (args[i].is_tensor && e->args[i].is_tensor && e->args[i].sizes.size() == now[i].sizes.size())
            for (size_t d = 0; d < now[i].sizes.size(); ++d)
              if (e->args[i].sizes[d] != now[i].sizes[d]) varying.insert({i, d});
      if (s.cache.size() >= size_t(std::max(0, std::min(s.opts.recompile_limit, s.opts.dynamic_after)))) {
        std::string dims;
        for (auto& v : varying)
          if (!s.static_only.count(v) && !s.dynamic.count(v)) {
            s.dynamic.insert(v);
            dims += (dims.empty() ? "" : ", ") + ("arg " + std::to_string(v.first) + " dim " + std::to_string(v.second));
          }
        if (!dims.empty()) {
          logs::emit(logs::Channel::Recompiles, s.who() + " was traced for " + std::to_string(s.cache.size()) +
                                                    " input signatures (dynamic_after " +
                                                    std::to_string(s.opts.dynamic_after) + ", recompile_limit " +
                                                    std::to_string(s.opts.recompile_limit) +
                                                    "): the varying dimensions become dynamic: " + dims);
          why += "; dynamic: " + dims;
          key = signature(args, s.dynamic);
          dynamic_key = true;
          auto it = s.cache.find(key);
          if (it != s.cache.end() && it->second->eager_reason.empty()) {
            State::Replay r = s.replay(*it->second, args);
            if (r.ok) {
              s.hits++;
              return std::move(r.outputs);
            }
          }
        }
      }
    }
  }
  if (!s.take_budget(causes)) {
    s.eager_calls++;
    return run_eager();
  }
  std::vector<Tensor> outs = s.trace(key, args, run_eager, why, reset, dynamic_key);
  // A graph traced under dynamic dims is kept for all sizes only when it matches, sizes
  // erased, a trace of the same function at other sizes; otherwise the dims stay static.
  std::unique_lock lock(s.mu);
  auto it = s.cache.find(key);
  if (dynamic_key && it != s.cache.end() && it->second->root) {
    std::string mine = chain_erased(*it->second->root);
    bool generic = false;
    for (const auto& [k, e] : s.cache)
      if (e.get() != it->second.get() && e->root && chain_erased(*e->root) == mine) generic = true;
    if (!generic) {
      s.note("  the graph depends on the dynamic sizes (view sizes, constants): the dims stay static");
      for (auto& d : s.dynamic) s.static_only.insert(d);
      s.dynamic.clear();
      s.cache.erase(it);
    }
  }
  return outs;
}

CompileStats Engine::stats() const {
  const State& s = *state_;
  CompileStats st;
  st.calls = s.calls;
  st.hits = s.hits;
  st.misses = s.misses;
  st.guard_failures = s.guard_failures;
  st.compiles = s.compiles;
  st.breaks = s.breaks;
  st.eager_calls = s.eager_calls;
  st.budget_eager_calls = s.budget_eager_calls;
  st.speculated = s.speculated;
  st.misspeculated = s.misspeculated;
  return st;
}

}  // namespace detail
}  // namespace kiln
