// The backward graph and its engine: recording nodes as ops run, and backward()/grad(), which
// run the nodes in reverse topological order and hand gradients along the edges.
#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "derivatives.h"
#include "graph.h"
#include "kiln/runtime/factories.h"
#include "kiln/runtime/ops.h"

namespace kiln {

namespace autograd::detail {
std::atomic<bool> used{false};
thread_local bool grad_enabled = true;
}  // namespace autograd::detail

bool is_grad_enabled() { return autograd::detail::grad_enabled; }
void set_grad_enabled(bool enabled) { autograd::detail::grad_enabled = enabled; }
AutoGradMode::AutoGradMode(bool enabled) : saved_(autograd::detail::grad_enabled) {
  autograd::detail::grad_enabled = enabled;
}
AutoGradMode::~AutoGradMode() { autograd::detail::grad_enabled = saved_; }

namespace autograd {

namespace {
std::atomic<uint64_t> next_sequence{0};

std::string describe(const Tensor& t) { return std::string(name(t.dtype())) + kiln::detail::shape_str(t.impl().sizes); }

// A tensor as a node saved it: its values (and version, to detect a later write in place) and,
// for an output of the node itself, nothing more (the node rebuilds its place in the graph on
// use: holding the output would hold the node from itself).
struct Saved {
  Tensor value;
  uint64_t version = 0;
  bool is_output = false;
  uint32_t output_nr = 0;
  void save(const Tensor& t, bool output, uint32_t nr) {
    is_output = output;
    output_nr = nr;
    version = t.storage()->version();
    value = output ? t.detach() : t;
  }
  Tensor unpack(const std::shared_ptr<Fn>& owner, const std::string& node, size_t index, bool create_graph) const {
    if (!value.defined()) return value;
    KILN_CHECK(value.storage()->version() == version, "autograd",
               "one of the tensors needed for gradient computation has been modified by an inplace operation: ",
               is_output ? "the output " : "the operand ", index, " of ", node, " (", describe(value),
               ") is at version ", value.storage()->version(), "; expected version ", version,
               " instead. Write to a clone of it, or compute it again after the write.");
    if (!is_output || !create_graph) return value;
    Tensor t = value.detach();
    Meta& m = ensure_meta(t);
    m.requires_grad = true;
    m.grad_fn = owner;
    m.output_nr = output_nr;
    return t;
  }
};

// An op of the op table, differentiated by its record in the derivative table.
class OpFn final : public Fn {
 public:
  OpId op;
  std::vector<Attr> attrs;
  std::vector<Saved> inputs;                  // per operand (undefined where not saved)
  std::vector<std::optional<Scalar>> numbers;  // per operand
  std::vector<Saved> results;
  bool released = false;

  std::string name() const override { return backward_name(op); }
  std::vector<Tensor> apply(std::vector<Tensor> grads, bool create_graph) override {
    const Derivative& d = derivative(op);
    KILN_CHECK(d.kind == Derivative::Kind::Rule, "autograd", "the derivative of ", op_name(op),
               " is not implemented in kiln yet", *d.note ? std::string(" (") + d.note + ")" : std::string(),
               "; backward reached it through ", name());
    KILN_CHECK(!released, "autograd", "trying to backward through the graph a second time: the tensors ", name(),
               " saved were freed by the first backward. Pass retain_graph=true to the first backward "
               "to backward through the graph again.");
    RuleCtx c;
    c.attrs = &attrs;
    auto self = shared_from_this();
    for (size_t i = 0; i < inputs.size(); ++i) c.in.push_back(inputs[i].unpack(self, name(), i, create_graph));
    c.number = numbers;
    for (size_t i = 0; i < results.size(); ++i) c.out.push_back(results[i].unpack(self, name(), i, create_graph));
    c.grad = std::move(grads);
    for (const Edge& e : next) c.needs.push_back(bool(e));
    return d.rule(c);
  }
  void release() override {
    if (!derivative(op).saves_inputs && !derivative(op).saves_outputs) return;
    inputs.assign(inputs.size(), Saved{});
    results.assign(results.size(), Saved{});
    released = true;
  }
  bool spent() const override { return released; }
  void held(std::vector<const TensorImpl*>& out) const override {
    for (const Saved& v : inputs)
      if (v.value.defined()) out.push_back(v.value.impl_ptr().get());
    for (const Saved& v : results)
      if (v.value.defined()) out.push_back(v.value.impl_ptr().get());
  }
};

// A node whose backward is a function of its outputs' gradients (a compiled backward program:
// detail::attach_function).
class FunctionFn final : public Fn {
 public:
  std::string label;
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> backward;
  std::vector<OperandInfo> out_info;  // per output: an undefined gradient is zeros of this
  std::string name() const override { return label; }
  std::vector<Tensor> apply(std::vector<Tensor> grads, bool create_graph) override {
    KILN_CHECK(!create_graph, "autograd", label, ": a compiled function's backward is not differentiable again "
               "(create_graph); call the function uncompiled for higher derivatives");
    KILN_CHECK(bool(backward), "autograd", "trying to backward through the graph a second time: the tensors ", label,
               " saved were freed by the first backward. Pass retain_graph=true to the first backward to backward "
               "through the graph again.");
    for (size_t k = 0; k < grads.size() && k < out_info.size(); ++k)
      if (!grads[k].defined()) grads[k] = zeros(out_info[k].sizes, TensorOptions(out_info[k].dtype));
    return backward(grads);
  }
  void release() override { backward = nullptr; }
  bool spent() const override { return !backward; }
};

// A leaf's gradient sink: accumulates into its .grad.
class AccumulateGrad final : public Fn {
 public:
  std::shared_ptr<TensorImpl> leaf;
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads, bool create_graph) override {
    Tensor g = grads.empty() ? Tensor() : grads[0];
    if (!g.defined()) return {};
    Tensor t(leaf);
    trace::grad_access(t);
    Meta& m = ensure_meta(t);
    if (!m.grad.defined()) {
      // (a fresh tensor of the leaf's layout: the gradient may be a view or shared)
      m.grad = create_graph ? g : g.detach().clone();
    } else if (create_graph || is_grad_enabled()) {
      m.grad = m.grad + g;
    } else {
      m.grad.add_(g);
    }
    return {};
  }
};

}  // namespace

std::vector<std::shared_ptr<Node>> Fn::next_functions() const {
  std::vector<std::shared_ptr<Node>> out;
  for (const Edge& e : next) out.push_back(e.fn);
  return out;
}

void become_output(Tensor& t, const std::shared_ptr<Fn>& n, uint32_t nr);

namespace detail {
void attach_function(std::string name, std::span<Tensor> outputs, const std::vector<Tensor>& inputs,
                     std::function<std::vector<Tensor>(const std::vector<Tensor>&)> backward) {
  auto n = std::make_shared<FunctionFn>();
  n->label = std::move(name);
  n->backward = std::move(backward);
  n->sequence = next_sequence++;
  n->outputs = uint32_t(outputs.size());
  n->retained.resize(outputs.size());
  for (const Tensor& t : inputs) {
    n->next.push_back(edge_of(t));
    n->operands.push_back({t.impl().sizes, t.dtype()});
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    Tensor& t = outputs[k];
    n->out_info.push_back({t.impl().sizes, t.dtype()});
    become_output(t, n, uint32_t(k));
  }
}

void set_grad(const Tensor& t, Tensor g) {
  trace::grad_access(t, /*overwrite=*/true);
  ensure_meta(t).grad = std::move(g);
}

std::vector<const TensorImpl*> history_holds(const std::vector<Tensor>& outputs) {
  std::vector<const TensorImpl*> out;
  std::vector<const Fn*> stack;
  for (const Tensor& t : outputs)
    if (Meta* m = meta_of(t); m && m->grad_fn) stack.push_back(m->grad_fn.get());
  std::unordered_set<const Fn*> seen;
  while (!stack.empty()) {
    const Fn* f = stack.back();
    stack.pop_back();
    if (!seen.insert(f).second) continue;
    f->held(out);
    for (const Edge& e : f->next)
      if (e.fn) stack.push_back(e.fn.get());
  }
  return out;
}

bool history_live(const Tensor& t) {
  Meta* m = meta_of(t);
  if (!m || !m->requires_grad) return false;
  if (!m->grad_fn) return true;
  // Live while some path from t reaches a leaf through nodes a backward has not freed.
  std::vector<const Fn*> stack{m->grad_fn.get()};
  std::unordered_set<const Fn*> seen;
  while (!stack.empty()) {
    const Fn* f = stack.back();
    stack.pop_back();
    if (!seen.insert(f).second || f->spent()) continue;
    if (f->sink) return true;
    for (const Edge& e : f->next)
      if (e.fn) stack.push_back(e.fn.get());
  }
  return false;
}
}  // namespace detail

Meta* meta_of(const Tensor& t) { return t.defined() ? t.impl().autograd.get() : nullptr; }
Meta& ensure_meta(const Tensor& t) {
  auto& m = t.impl().autograd;
  if (!m) m = std::make_shared<Meta>();
  return *m;
}

// `t` is output `nr` of node `n`: its history starts there.
void become_output(Tensor& t, const std::shared_ptr<Fn>& n, uint32_t nr) {
  Meta& m = ensure_meta(t);
  m.requires_grad = true;
  m.grad_fn = n;
  m.output_nr = nr;
  m.grad = Tensor();
  m.retains_grad = false;
}

Edge edge_of(const Tensor& t) {
  Meta* m = meta_of(t);
  if (!m || !m->requires_grad) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  std::shared_ptr<Fn> acc = m->accumulator.lock();
  if (!acc) {
    auto a = std::make_shared<AccumulateGrad>();
    a->sink = true;
    a->leaf = t.impl_ptr();
    a->operands.push_back({t.impl().sizes, t.dtype()});
    a->sequence = next_sequence++;
    m->accumulator = a;
    acc = a;
  }
  return {acc, 0};
}

namespace detail {

bool any_requires_grad(std::span<const trace::Operand> in) {
  for (const trace::Operand& o : in)
    if (o.tensor && o.tensor->defined()) {
      Meta* m = meta_of(*o.tensor);
      if (m && m->requires_grad) return true;
    }
  return false;
}

void refuse_while_recording(std::string_view op, std::initializer_list<trace::Operand> in, std::string_view hint) {
  if (!active() || !any_requires_grad(in)) return;
  KILN_FAIL(op, "kiln's autograd cannot differentiate ", op, " yet, and an operand requires grad; ", hint);
}

namespace {
std::shared_ptr<OpFn> make_node(OpId op, std::span<const trace::Operand> in,
                                const std::function<std::vector<Attr>()>& attrs, std::span<Tensor> outputs) {
  const Derivative& d = derivative(op);
  auto n = std::make_shared<OpFn>();
  n->op = op;
  n->sequence = next_sequence++;
  n->outputs = uint32_t(outputs.size());
  n->retained.resize(outputs.size());
  {
    trace::Pause pause;  // (the attributes' reads of sizes are kiln's, not the user's)
    n->attrs = attrs();
  }
  for (const trace::Operand& o : in) {
    Saved s;
    if (o.tensor) {
      n->next.push_back(edge_of(*o.tensor));
      n->operands.push_back({o.tensor->impl().sizes, o.tensor->dtype()});
      if (d.saves_inputs) s.save(*o.tensor, false, 0);
      n->numbers.push_back(std::nullopt);
    } else {
      n->next.push_back({});
      n->operands.push_back({{}, DType::Float64});
      n->numbers.push_back(o.scalar);
    }
    n->inputs.push_back(std::move(s));
  }
  n->results.resize(outputs.size());
  return n;
}

void set_history(const std::shared_ptr<OpFn>& n, std::span<Tensor> outputs) {
  const bool saves = derivative(n->op).saves_outputs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& t = outputs[i];
    if (!t.defined()) continue;
    if (saves) n->results[i].save(t, true, uint32_t(i));
    if (!is_floating(t.dtype())) continue;  // indices and bools never require grad
    become_output(t, n, uint32_t(i));
  }
}
}  // namespace

void attach(OpId op, std::span<const trace::Operand> in, const std::function<std::vector<Attr>()>& attrs,
            std::span<Tensor> outputs) {
  if (derivative(op).kind == Derivative::Kind::NotDifferentiable) return;
  set_history(make_node(op, in, attrs, outputs), outputs);
}

Tensor before_inplace(const Tensor& self, OpId id, std::string_view op) {
  Meta* m = meta_of(self);
  KILN_CHECK(!(m && m->requires_grad && !m->grad_fn), op,
             "a leaf tensor that requires grad is being used in an in-place operation (",
             describe(self), "). Write to it under kiln::NoGradGuard, or to a clone of it.");
  // A view's write reaches its base, and a base's write its views: autograd here does not yet
  // carry one's new history to the other, so it refuses rather than give wrong gradients.
  KILN_CHECK(self.storage().use_count() <= 1, op, "an in-place operation on a tensor (", describe(self),
             ") whose memory another tensor shares (a view, the base of one, or an output autograd saved) is not "
             "supported by kiln's autograd yet; use the out-of-place op");
  // The old values are copied only where the op's rule reads its operands (mul_, not add_).
  Tensor old;
  {
    AutoGradMode off(false);
    old = derivative(id).saves_inputs ? self.clone() : self.detach();
  }
  if (m && m->requires_grad) {
    Meta& o = ensure_meta(old);
    o.requires_grad = true;
    o.grad_fn = m->grad_fn;
    o.output_nr = m->output_nr;
  }
  return old;
}

void attach_inplace(Tensor& self, OpId op, std::span<const trace::Operand> in,
                    const std::function<std::vector<Attr>()>& attrs) {
  Meta& m = ensure_meta(self);
  if (derivative(op).kind == Derivative::Kind::NotDifferentiable) {
    m.requires_grad = false;
    m.grad_fn = nullptr;
    return;
  }
  auto n = make_node(op, in, attrs, std::span<Tensor>(&self, 1));
  set_history(n, std::span<Tensor>(&self, 1));
}

}  // namespace detail

// ---- the engine ----
namespace {

struct Target {
  Edge edge;          // where the input's gradient arrives
  Tensor* result;     // grad(): its slot in the result; null for backward(inputs=...)
};

struct Run {
  bool create_graph = false;
  bool keep_graph = false;
  bool capture_only = false;  // grad(): accumulate into no leaf
  std::vector<Target> targets;
  std::set<const Fn*> accumulate_only;  // backward(inputs=...): the leaves' sinks to run
  bool restrict_leaves = false;
};

void execute(const std::vector<Edge>& roots, const std::vector<Tensor>& root_grads, Run& run) {
  // The graph reachable from the roots, and each node's count of incoming edges.
  std::unordered_map<Fn*, int> deps;
  std::unordered_map<Fn*, std::shared_ptr<Fn>> keep;
  std::vector<Fn*> stack;
  for (const Edge& e : roots)
    if (e && !keep.count(e.fn.get())) {
      keep[e.fn.get()] = e.fn;
      stack.push_back(e.fn.get());
    }
  std::vector<Fn*> order;
  while (!stack.empty()) {
    Fn* f = stack.back();
    stack.pop_back();
    order.push_back(f);
    for (const Edge& e : f->next) {
      if (!e) continue;
      ++deps[e.fn.get()];
      if (!keep.count(e.fn.get())) {
        keep[e.fn.get()] = e.fn;
        stack.push_back(e.fn.get());
      }
    }
  }
  // With targets (grad()), only nodes on a path to one run.
  std::unordered_map<Fn*, bool> needed;
  std::map<std::pair<Fn*, uint32_t>, std::vector<Tensor*>> captures;
  if (!run.targets.empty()) {
    std::set<Fn*> target_fns;
    for (const Target& t : run.targets)
      if (t.edge) {
        target_fns.insert(t.edge.fn.get());
        if (t.result) captures[{t.edge.fn.get(), t.edge.input_nr}].push_back(t.result);
      }
    // (reverse reachability, by iterating to a fixed point over the discovery order reversed)
    bool changed = true;
    for (Fn* f : order) needed[f] = false;
    while (changed) {
      changed = false;
      for (auto it = order.rbegin(); it != order.rend(); ++it) {
        Fn* f = *it;
        if (needed[f]) continue;
        bool n = false;
        for (const Edge& e : f->next) n = n || (e && (target_fns.count(e.fn.get()) || needed[e.fn.get()]));
        if (n) {
          needed[f] = true;
          changed = true;
        }
      }
    }
  }
  // Input buffers, filled by the roots' gradients and then by each node run.
  std::unordered_map<Fn*, std::vector<Tensor>> buffers;
  auto deliver = [&](const Edge& e, const Tensor& g) {
    if (!e || !g.defined()) return;
    auto& buf = buffers[e.fn.get()];
    if (buf.size() < e.fn->outputs) buf.resize(e.fn->outputs);
    Tensor& slot = buf[e.input_nr];
    slot = slot.defined() ? slot + g : g;
  };
  for (size_t i = 0; i < roots.size(); ++i) deliver(roots[i], root_grads[i]);
  auto later_first = [](Fn* a, Fn* b) { return a->sequence < b->sequence; };
  std::priority_queue<Fn*, std::vector<Fn*>, decltype(later_first)> ready(later_first);
  for (auto& [f, _] : keep)
    if (!deps.count(f)) ready.push(f);
  while (!ready.empty()) {
    Fn* f = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(buffers[f]);
    buffers.erase(f);
    grads.resize(f->outputs);
    // Gradients kept for the caller: grad()'s inputs, and tensors that retain_grad.
    for (uint32_t i = 0; i < f->outputs; ++i) {
      if (auto c = captures.find({f, i}); c != captures.end())
        for (Tensor* r : c->second)
          if (grads[i].defined()) *r = r->defined() ? *r + grads[i] : grads[i];
      if (i < f->retained.size() && !run.capture_only)
        for (auto& w : f->retained[i])
          if (auto impl = w.lock(); impl && grads[i].defined()) {
            trace::grad_access(Tensor(impl));
            Meta& m = ensure_meta(Tensor(impl));
            m.grad = m.grad.defined() ? m.grad + grads[i] : (run.create_graph ? grads[i] : grads[i].detach().clone());
          }
    }
    bool is_leaf_sink = f->sink;
    bool run_it = run.targets.empty() ? true : needed[f];
    if (is_leaf_sink) run_it = !run.capture_only && (!run.restrict_leaves || run.accumulate_only.count(f));
    std::vector<Tensor> out;
    if (run_it) {
      AutoGradMode mode(run.create_graph);
      out = f->apply(std::move(grads), run.create_graph);
      if (!run.keep_graph) f->release();
    }
    for (size_t j = 0; j < f->next.size(); ++j) {
      const Edge& e = f->next[j];
      if (!e) continue;
      if (j < out.size() && out[j].defined()) {
        Tensor g = out[j];
        const Fn::OperandInfo& info = f->operands[j];
        AutoGradMode mode(run.create_graph);
        if (g.impl().sizes != info.sizes) g = sum_to(g, info.sizes);
        if (g.dtype() != info.dtype && is_floating(info.dtype)) g = g.to(info.dtype);
        deliver(e, g);
      }
      if (--deps[e.fn.get()] == 0) ready.push(e.fn.get());
    }
  }
}

// The roots' gradients: given, or 1 for a one-element root.
std::vector<Tensor> root_gradients(const std::vector<Tensor>& outputs, const std::vector<Tensor>& given,
                                   std::string_view op) {
  KILN_CHECK(given.empty() || given.size() == outputs.size(), op, "got ", given.size(), " gradients for ",
             outputs.size(), " tensors");
  std::vector<Tensor> g;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i];
    KILN_CHECK(t.defined(), op, "tensor ", i, " is undefined");
    Meta* m = meta_of(t);
    KILN_CHECK(m && m->requires_grad, op, "element ", i, " of tensors does not require grad and does not have a "
               "grad_fn (", describe(t), ")");
    if (!given.empty() && given[i].defined()) {
      KILN_CHECK(given[i].impl().sizes == t.impl().sizes, op, "gradient ", i, " has shape ",
                 given[i].impl().sizes, " but its tensor has shape ", t.impl().sizes);
      g.push_back(given[i]);
    } else {
      KILN_CHECK(t.impl().numel == 1, op, "grad can be implicitly created only for scalar outputs: tensor ", i,
                 " is ", describe(t), "; pass its gradient");
      AutoGradMode off(false);
      g.push_back(ones_like(t));
    }
  }
  return g;
}

}  // namespace

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph, bool create_graph,
                         bool allow_unused) {
  std::vector<Tensor> roots_g = root_gradients(outputs, grad_outputs, "grad");
  std::vector<Edge> roots;
  for (const Tensor& t : outputs) roots.push_back(edge_of(t));
  std::vector<Tensor> result(inputs.size());
  Run run;
  run.create_graph = create_graph;
  run.keep_graph = retain_graph || create_graph;
  run.capture_only = true;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Meta* m = meta_of(inputs[i]);
    KILN_CHECK(m && m->requires_grad, "grad", "input ", i, " does not require grad (", describe(inputs[i]), ")");
    run.targets.push_back({edge_of(inputs[i]), &result[i]});
  }
  execute(roots, roots_g, run);
  for (size_t i = 0; i < inputs.size(); ++i)
    KILN_CHECK(result[i].defined() || allow_unused, "grad", "input ", i, " (", describe(inputs[i]),
               ") is not used to compute the outputs; pass allow_unused=true to get an undefined gradient for it");
  return result;
}

void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors, bool retain_graph,
              bool create_graph, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> roots_g = root_gradients(tensors, grad_tensors, "backward");
  std::vector<Edge> roots;
  for (const Tensor& t : tensors) roots.push_back(edge_of(t));
  Run run;
  run.create_graph = create_graph;
  run.keep_graph = retain_graph || create_graph;
  // With `inputs`, only their .grad is written: a leaf's by its sink, a non-leaf's from the
  // gradient that reaches it.
  std::vector<Tensor> reached(inputs.size());
  if (!inputs.empty()) {
    run.restrict_leaves = true;
    for (size_t i = 0; i < inputs.size(); ++i) {
      Meta* m = meta_of(inputs[i]);
      KILN_CHECK(m && m->requires_grad, "backward", "input ", i, " does not require grad");
      Edge e = edge_of(inputs[i]);
      run.targets.push_back({e, m->grad_fn ? &reached[i] : nullptr});
      if (!m->grad_fn) run.accumulate_only.insert(e.fn.get());
    }
  }
  execute(roots, roots_g, run);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (reached[i].defined() && !meta_of(inputs[i])->retains_grad) {  // (retain_grad wrote it already)
      trace::grad_access(inputs[i]);
      Tensor& g = meta_of(inputs[i])->grad;
      g = g.defined() ? g + reached[i] : (create_graph ? reached[i] : reached[i].detach().clone());
    }
}

}  // namespace autograd

// ---- the Tensor methods ----
using autograd::Meta;
using autograd::meta_of;

Tensor& Tensor::requires_grad_(bool requires_grad) {
  Meta* m = meta_of(*this);
  if (!requires_grad) {
    KILN_CHECK(!(m && m->grad_fn), "requires_grad_", "you can only change requires_grad flags of leaf tensors; "
               "use detach() to get a tensor that does not require grad");
    if (m) m->requires_grad = false;
    return *this;
  }
  KILN_CHECK(is_floating(dtype()), "requires_grad_", "only tensors of floating point dtype can require gradients (got ",
             name(dtype()), ")");
  autograd::ensure_meta(*this).requires_grad = true;
  autograd::detail::used.store(true, std::memory_order_relaxed);
  return *this;
}
bool Tensor::requires_grad() const {
  Meta* m = meta_of(*this);
  return m && m->requires_grad;
}
bool Tensor::is_leaf() const {
  Meta* m = meta_of(*this);
  return !m || !m->grad_fn;
}
const Tensor& Tensor::grad() const {
  static const Tensor undefined;
  trace::grad_access(*this);
  Meta* m = meta_of(*this);
  return m ? m->grad : undefined;
}
Tensor& Tensor::mutable_grad() {
  trace::grad_access(*this);
  return autograd::ensure_meta(*this).grad;
}
std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  Meta* m = meta_of(*this);
  return m ? m->grad_fn : nullptr;
}
int64_t Tensor::output_nr() const {
  Meta* m = meta_of(*this);
  return m ? m->output_nr : 0;
}
Tensor& Tensor::detach_() {
  if (Meta* m = meta_of(*this)) {
    m->grad_fn = nullptr;
    m->requires_grad = false;
    m->output_nr = 0;
  }
  return *this;
}
void Tensor::retain_grad() const {
  Meta* m = meta_of(*this);
  KILN_CHECK(m && m->requires_grad, "retain_grad", "can't retain_grad on a tensor that has requires_grad=False");
  if (!m->grad_fn || m->retains_grad) return;  // a leaf keeps its gradient anyway
  m->retains_grad = true;
  auto& slots = m->grad_fn->retained;
  if (slots.size() <= m->output_nr) slots.resize(m->output_nr + 1);
  slots[m->output_nr].push_back(impl_ptr());
}
bool Tensor::retains_grad() const {
  Meta* m = meta_of(*this);
  return m && m->retains_grad;
}
void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph, bool create_graph,
                      const std::vector<Tensor>& inputs) const {
  autograd::backward({*this}, {gradient}, retain_graph.value_or(create_graph), create_graph, inputs);
}
int64_t Tensor::_version() const { return int64_t(storage()->version()); }

}  // namespace kiln
