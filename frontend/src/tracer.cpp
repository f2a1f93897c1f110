// The tracer (see tracer.h).
#include "tracer.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "kiln/ir/exec.h"
#include "kiln/ir/infer.h"
#include "kiln/runtime/autograd.h"
#include "kiln/runtime/factories.h"

namespace kiln::detail {

std::string describe_location(const std::source_location& where, const void* pc) {
  if (where.line() != 0) {
    std::string s = std::string(where.file_name()) + ":" + std::to_string(where.line());
    if (where.function_name() && *where.function_name()) s += " (" + std::string(where.function_name()) + ")";
    return s;
  }
  if (pc) {
    Dl_info info{};
    if (dladdr(pc, &info) && info.dli_sname) {
      int status = 0;
      char* dm = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
      std::string name = status == 0 && dm ? dm : info.dli_sname;
      std::free(dm);
      auto off = static_cast<const char*>(pc) - static_cast<const char*>(info.dli_saddr);
      char buf[32];
      std::snprintf(buf, sizeof buf, "+0x%lx", static_cast<unsigned long>(off));
      return "in " + name + buf + " (no source line: use t.item<bool>() to record one)";
    }
    if (dladdr(pc, &info) && info.dli_fname) {
      // No exported symbol (an executable not linked with -rdynamic): name the binary and the
      // offset, which `addr2line -f -C -e BINARY OFFSET` turns into a function and line.
      char buf[48];
      std::snprintf(buf, sizeof buf, "+0x%lx",
                    static_cast<unsigned long>(static_cast<const char*>(pc) - static_cast<const char*>(info.dli_fbase)));
      return std::string(info.dli_fname) + buf + " (no source line: use t.item<bool>() to record one)";
    }
    char buf[48];
    std::snprintf(buf, sizeof buf, "code address %p", pc);
    return buf;
  }
  return "unknown location";
}

ir::Type Tracer::type_of(const Tensor& t) {
  return ir::Type::tensor(t.dtype(), t.sizes().vec(), t.strides().vec(), t.device());
}

namespace {
std::atomic<uint64_t> next_trace_id{1};
}  // namespace

Tracer::Tracer(std::span<const CallArg> args, std::vector<std::weak_ptr<TensorImpl>> captures, bool fullgraph,
               Tracer* parent, size_t max_graph_ops)
    : fullgraph_(fullgraph),
      parent_(parent),
      id_(next_trace_id.fetch_add(1, std::memory_order_relaxed)),
      start_serial_(next_tensor_serial()),
      captures_(std::move(captures)),
      max_graph_ops_(fullgraph || parent ? 0 : max_graph_ops) {
  trace::Pause pause;  // the tracer's own reads of the arguments' metadata
  head_ = std::make_unique<TreeNode>();
  head_->graph = ir::Graph("graph0");
  tail_ = head_.get();
  segments_ = 1;
  capture_grad_.assign(captures_.size(), -1);
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].is_tensor) continue;
    const Tensor& t = args[i].tensor;
    arg_index_.emplace(t.impl_ptr().get(), uint32_t(i));
    arg_tensors_.push_back(t);
    ir::Value* v = tail_->graph.add_input("a" + std::to_string(i), type_of(t));
    tail_->inputs.push_back({Ref::Space::Arg, uint32_t(i)});
    // The same tensor passed twice is one value; its second input is unused.
    auto it = known_.find(t.impl_ptr().get());
    if (it == known_.end() || it->second.impl.expired()) bind(t, v);
  }
}

void Tracer::bind(const Tensor& t, ir::Value* v) { known_[t.impl_ptr().get()] = Known{t.impl_ptr(), v}; }

ir::Value* Tracer::add_input(const Tensor& t, Ref ref) {
  // (a: argument, c: capture, v: value across a break, ga/gc: an argument's or capture's .grad,
  // h: a live host number)
  static const char* const prefix[] = {"a", "c", "v", "ga", "gc", "h"};
  const std::string name = prefix[size_t(ref.space)];
  ir::Value* v = tail_->graph.add_input(name + std::to_string(ref.index), type_of(t));
  tail_->inputs.push_back(ref);
  bind(t, v);
  return v;
}

ir::Value* Tracer::value_of(const Tensor& t) {
  const TensorImpl* impl = t.impl_ptr().get();
  KILN_CHECK(impl, "compile", "an undefined tensor was used while tracing");
  auto it = known_.find(impl);
  if (it != known_.end() && !it->second.impl.expired()) return it->second.value;
  if (impl->serial < start_serial_) {
    // A leaf's .grad as the call found it: read from the leaf at each call.
    if (auto g = grad_inputs_.find(impl); g != grad_inputs_.end()) return add_input(t, g->second);
    // A tensor that existed before the trace began: captured by the function's closure.
    // It becomes a graph input, read at call time, never a constant.
    return add_input(t, outside_ref(t));
  }
  KILN_FAIL("compile", "a tensor of shape ", t.sizes().vec(), " and dtype ", name(t.dtype()),
            " was made while tracing by an operation the tracer did not see; this is a kiln bug");
}

Ref Tracer::outside_ref(const Tensor& t) {
  const TensorImpl* impl = t.impl_ptr().get();
  if (auto a = arg_index_.find(impl); a != arg_index_.end()) return {Ref::Space::Arg, a->second};
  size_t i = 0;
  while (i < captures_.size() && captures_[i].lock().get() != impl) ++i;
  if (i == captures_.size()) {
    captures_.push_back(t.impl_ptr());
    capture_grad_.push_back(-1);
  }
  if (capture_grad_[i] < 0) capture_grad_[i] = t.requires_grad() ? 1 : 0;
  return {Ref::Space::Capture, uint32_t(i)};
}

std::vector<ir::Value*> Tracer::operand_values(std::span<const trace::Operand> inputs) {
  std::vector<ir::Value*> ins;
  for (const auto& in : inputs) {
    if (in.tensor) {
      ins.push_back(value_of(*in.tensor));
      continue;
    }
    // A Python-style number operand: a constant typed as a wrapped 0-d tensor of full
    // precision (bool, int64 or float64), which promotes like a number.
    const Scalar& s = in.scalar;
    ir::Type t = ir::Type::tensor(s.is_bool() ? kBool : s.is_integral() ? kInt64 : kFloat64, {}, {});
    t.wrapped = true;
    ins.push_back(tail_->graph.add_node(OpId::Constant, {}, {{"value", scalar_attr(s)}}, {t})->outputs[0]);
  }
  return ins;
}

void Tracer::record(OpId op, std::span<const trace::Operand> inputs, std::vector<Attr> attrs,
                    std::span<const Tensor> outputs) {
  trace::Pause pause;  // the tracer reads metadata for itself, not for the user
  if (!not_replayable_.empty()) return;
  split_if_long();
  std::vector<ir::Value*> ins = operand_values(inputs);
  std::vector<ir::Type> types;
  for (const Tensor& o : outputs) types.push_back(type_of(o));
  ir::Node* n = tail_->graph.add_node(op, std::move(ins), std::move(attrs), std::move(types));
  for (size_t k = 0; k < outputs.size(); ++k) bind(outputs[k], n->outputs[k]);
}

void Tracer::record_inplace(const Tensor& self, OpId op, std::span<const trace::Operand> inputs,
                            std::vector<Attr> attrs) {
  trace::Pause pause;  // the tracer reads metadata for itself, not for the user
  if (!not_replayable_.empty()) return;
  split_if_long();
  std::vector<ir::Value*> ins = operand_values(inputs);
  std::vector<ir::Type> in_types;
  for (const ir::Value* v : ins) in_types.push_back(v->type);
  // The types eager's functional op would give its result (ir/infer.h keeps them equal).
  std::vector<ir::Type> types = ir::infer_types(op, in_types, attrs);
  ir::Node* n = tail_->graph.add_node(op, std::move(ins), std::move(attrs), std::move(types));
  write_back_value(self, n->outputs.at(0));
}

void Tracer::write_back(const Tensor& dst, const Tensor& src) {
  trace::Pause pause;  // the tracer reads metadata for itself, not for the user
  if (!not_replayable_.empty()) return;
  split_if_long();
  write_back_value(dst, value_of(src));
}

void Tracer::write_back_value(const Tensor& dst, ir::Value* vs) {
  ir::Value* vd = value_of(dst);
  ir::Node* n = tail_->graph.add_node(OpId::Copy, {vd, vs}, {}, {type_of(dst)});
  bind(dst, n->outputs[0]);
  // A write into an argument or a captured tensor: remembered so that a replay which fails a
  // later guard can undo it before tracing again from the start.
  const ir::Value* root = ir::alias_root(vd);
  const auto& gin = tail_->graph.inputs();
  auto pos = std::find(gin.begin(), gin.end(), root);
  if (pos != gin.end()) {
    Ref r = tail_->inputs[size_t(pos - gin.begin())];
    // (a value handed over at a break may be an argument itself: x.mul_(2) before the break and
    // x.add_(1) after it write the same memory, so writes through those are undone too)
    if (std::find(tail_->written.begin(), tail_->written.end(), r) == tail_->written.end()) tail_->written.push_back(r);
  }
}

void Tracer::created(const Tensor& t, std::string_view factory, std::span<const Scalar> args) {
  trace::Pause pause;  // the tracer reads metadata for itself, not for the user
  if (!not_replayable_.empty()) return;
  static const char* refused[] = {"rand", "randn", "randint", "randperm"};
  for (const char* r : refused)
    KILN_CHECK(factory != r, "compile", factory, "() inside a compiled function: random values would be baked into "
               "the graph and repeat on every call; make the random tensor outside and pass it as an argument");
  KILN_CHECK(factory != "from_blob", "compile", "from_blob() inside a compiled function: the graph cannot read host "
             "memory at call time; wrap the memory outside and pass the tensor as an argument");
  if (ir::Value* made = make_factory(tail_->graph, t, factory, args)) {
    bind(t, made);
    return;
  }
  ir::Type type = ir::Type::contiguous(t.dtype(), t.sizes().vec(), t.device());
  std::string data;
  {
    trace::Pause p;  // reading the bytes is the tracer's business, not a host access of the program
    data = ir::encode_constant(t);
  }
  ir::Node* n = tail_->graph.add_node(OpId::Constant, {}, {{"data", std::move(data)}}, {type});
  bind(t, n->outputs[0]);
}

TreeNode* Tracer::cut(const Tensor* also_live) {
  if (also_live) value_of(*also_live);
  // Every tensor still alive in the user's code may be used after the break: hand it over.
  struct Live {
    std::shared_ptr<TensorImpl> impl;
    ir::Value* value;
  };
  std::vector<Live> live;
  for (auto it = known_.begin(); it != known_.end();) {
    if (auto sp = it->second.impl.lock()) {
      live.push_back({std::move(sp), it->second.value});
      ++it;
    } else {
      it = known_.erase(it);
    }
  }
  // A deterministic order (value ids), so equal traces give byte-identical graphs.
  std::sort(live.begin(), live.end(), [](const Live& a, const Live& b) {
    return a.value->id != b.value->id ? a.value->id < b.value->id : a.impl.get() < b.impl.get();
  });
  TreeNode* closed = tail_;
  std::vector<ir::Value*> outs;
  cut_slots_.clear();
  std::vector<std::pair<uint32_t, Tensor>> handed;  // slot, a tensor holding it
  for (const Live& l : live) {
    if (outs.empty() || outs.back() != l.value) {
      outs.push_back(l.value);
      closed->outputs.push_back(next_value_slot_++);
      handed.push_back({closed->outputs.back(), Tensor(l.impl)});
    }
    cut_slots_[l.impl.get()] = {Ref::Space::Value, closed->outputs.back()};
  }
  closed->graph.set_outputs(outs);

  auto next = std::make_unique<TreeNode>();
  next->graph = ir::Graph("graph" + std::to_string(segments_++));
  tail_ = next.get();
  closed->children.push_back({std::string(), std::move(next)});
  // The next graph's inputs are the handed-over values; every live tensor is rebound.
  std::unordered_map<uint32_t, ir::Value*> by_slot;
  for (auto& [slot, t] : handed) by_slot[slot] = add_input(t, {Ref::Space::Value, slot});
  for (const Live& l : live) bind(Tensor(l.impl), by_slot.at(cut_slots_.at(l.impl.get()).index));
  return closed;
}

Ref Tracer::slot_of(const Tensor& t) { return cut_slots_.at(t.impl_ptr().get()); }

namespace {
// The first frame of the call stack outside kiln's own libraries: where the user's code is.
std::string user_frame() {
  void* frames[48];
  const int n = backtrace(frames, 48);
  for (int i = 1; i < n; ++i) {
    Dl_info info{};
    if (!dladdr(frames[i], &info) || !info.dli_fname) continue;
    if (std::strstr(info.dli_fname, "libkiln_")) continue;
    // (a return address: the call sits just before it)
    return describe_location({}, static_cast<const char*>(frames[i]) - 1);
  }
  return "an unknown place";
}
}  // namespace

void Tracer::split_if_long() {
  if (max_graph_ops_ == 0 || tail_->graph.nodes().size() < max_graph_ops_) return;
  if (splits_++ == 0) split_where_ = user_frame();
  TreeNode* n = cut();
  n->exit = Exit::Split;
  n->reason = "the graph reached max_graph_ops (" + std::to_string(max_graph_ops_) + ")";
  n->where = split_where_;
  n->key.clear();
  n->children[0].first.clear();
}

void Tracer::grad_access(const Tensor& t, bool overwrite) {
  if (!not_replayable_.empty() || made_here(t)) return;
  const TensorImpl* impl = t.impl_ptr().get();
  for (const GradLeaf& l : grad_leaves_)
    if (l.impl.lock().get() == impl) return;
  KILN_CHECK(!parent_, "compile", "a kiln::cond branch read or changed the .grad of a tensor made before the call; "
             "read it outside the branch and pass it as an operand");
  const Ref leaf = outside_ref(t);
  if (overwrite) {
    // Replaced before any read: the .grad the call finds does not matter (no guard), and the
    // call's last .grad is always set.
    grad_leaves_.push_back({leaf, t.impl_ptr(), std::weak_ptr<TensorImpl>(), true});
    return;
  }
  const Tensor& g = t.grad();  // (recording is paused: no hook)
  grad_leaves_.push_back({leaf, t.impl_ptr(), g.defined() ? g.impl_ptr() : nullptr, g.defined()});
  tail_->grad_guards.push_back({leaf, g.defined()});
  if (g.defined() && !made_here(g)) {
    auto k = known_.find(g.impl_ptr().get());
    if (k == known_.end() || k->second.impl.expired())
      grad_inputs_[g.impl_ptr().get()] = {leaf.space == Ref::Space::Arg ? Ref::Space::ArgGrad : Ref::Space::CaptureGrad,
                                          leaf.index};
  }
}

void Tracer::host_effect(std::function<void()> effect, std::string what) {
  if (!not_replayable_.empty()) return;
  KILN_CHECK(!parent_, "compile", "a kiln::cond branch changed host state (", what, "): both branches are traced, "
             "so the change would be made twice; make it outside the branch");
  tail_->host_ops.push_back({HostOp::Kind::Effect, {}, std::move(effect), {}, 0, std::move(what)});
  has_effects_ = true;
}

Tensor Tracer::live_number(double now, std::function<double()> read, std::string what) {
  Tensor t = scalar_tensor(now, TensorOptions(kFloat64));
  if (!not_replayable_.empty()) return t;
  KILN_CHECK(!parent_, "compile", "a kiln::cond branch read a live host number (", what, "); read it outside the "
             "branch and pass it as an operand");
  const uint32_t slot = next_live_slot_++;
  add_input(t, {Ref::Space::Live, slot});
  tail_->host_ops.push_back({HostOp::Kind::Number, {}, {}, std::move(read), slot, std::move(what)});
  return t;
}

void Tracer::host_guard(std::function<bool()> holds, std::string what) {
  if (!not_replayable_.empty()) return;
  KILN_CHECK(!parent_, "compile", "a kiln::cond branch depends on host state (", what, "); decide outside the branch");
  tail_->host_ops.push_back({HostOp::Kind::Guard, std::move(holds), {}, {}, 0, std::move(what)});
}

void Tracer::host_access(const Tensor& t, trace::HostAccess what, const std::source_location& where, const void* pc) {
  if (!not_replayable_.empty()) return;
  std::string loc = describe_location(where, pc);
  KILN_CHECK(!fullgraph_, "compile", "graph break in fullgraph mode: ", trace::host_access_name(what),
             " on a traced tensor at ", loc, ". Data-dependent control flow cannot be captured in one graph; "
             "use kiln::where or kiln::cond, or compile without fullgraph");
  if (what == trace::HostAccess::DataPtr) {
    not_replayable_ = "data_ptr() at " + loc + " hands the tensor's memory to host code, which a replay cannot reproduce";
    return;
  }
  ++breaks_;
  TreeNode* n = cut(&t);
  n->exit = what == trace::HostAccess::Print ? Exit::Print : Exit::HostValue;
  n->access = what;
  n->guarded = slot_of(t);
  n->reason = std::string(trace::host_access_name(what)) + " on a traced tensor";
  n->where = loc;
  n->key = guard_key(n->exit, what, t);
  n->children[0].first = n->key;
}

void Tracer::data_dependent(std::string_view op, std::span<const Tensor> inputs, const Tensor& output,
                            std::function<Tensor(std::span<const Tensor>)> replay, const std::source_location& where) {
  trace::Pause pause;  // the tracer reads metadata for itself, not for the user
  if (!not_replayable_.empty()) return;
  std::string loc = describe_location(where, nullptr);
  KILN_CHECK(!fullgraph_, "compile", "graph break in fullgraph mode: ", op, "() at ", loc,
             ": its output shape depends on the data, so it cannot be traced into a graph");
  ++breaks_;
  for (const Tensor& t : inputs) value_of(t);
  std::vector<Tensor> keep(inputs.begin(), inputs.end());  // alive through the cut
  TreeNode* n = cut();
  n->exit = Exit::DataDependent;
  for (const Tensor& t : keep) n->dd_inputs.push_back(slot_of(t));
  n->dd_output = next_value_slot_++;
  n->replay = std::move(replay);
  n->reason = std::string(op) + "(): its output shape depends on the data";
  n->where = loc;
  n->key = guard_key(Exit::DataDependent, trace::HostAccess::Bool, output);
  n->children[0].first = n->key;
  add_input(output, {Ref::Space::Value, n->dd_output});
}

namespace {
std::string tensor_text(const Tensor& t) {
  std::string s = "a tensor of shape [";
  for (size_t d = 0; d < t.impl().sizes.size(); ++d) s += (d ? ", " : "") + std::to_string(t.impl().sizes[d]);
  return s + "] and dtype " + std::string(name(t.dtype()));
}
}  // namespace

void Tracer::check_end(const std::vector<Tensor>& outputs) {
  trace::Pause pause;
  if (!not_replayable_.empty()) return;
  // Results whose gradient history is live (backward() through them runs after the call): a
  // replay gives them a compiled backward (trace_backward), where the call is one graph.
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].defined() && autograd::detail::history_live(outputs[i])) {
      std::string why;
      if (!outputs[i].grad_fn()) why = "a tensor that requires grad made in the call, returned as it is";
      else if (head_.get() != tail_) why = "the call has graph breaks";
      for (size_t j = 0; j < i && why.empty(); ++j)
        if (outputs[j].defined() && outputs[j].is_same(outputs[i])) why = "the same tensor is returned twice";
      if (!why.empty()) {
        not_replayable_ = "it returns " + tensor_text(outputs[i]) + " (output " + std::to_string(i) +
                          ") whose gradient history is still live (backward() through it runs after the call), and " +
                          why + ": a replay could not give it that history. Call backward() inside the compiled "
                          "function, or compile under NoGradGuard for inference";
        return;
      }
      live_outputs_.push_back(uint32_t(i));
    }
  // Host effects are replayed before their graph runs, and cannot be undone: no check may fail
  // after them.
  bool effects_before = false;
  for (const TreeNode* n = head_.get(); n; n = n->children.empty() ? nullptr : n->children[0].second.get()) {
    bool fails = effects_before && (n->has_size_guards() || n->replay_checks());
    effects_before = effects_before || n->has_effects();
    fails = fails || (effects_before && (n->exit == Exit::HostValue || n->exit == Exit::DataDependent));
    if (fails) {
      not_replayable_ = "a library changed its own host state (an optimizer step) in a call whose later part is "
                        "guarded (a graph break, a size read, a .grad read): a replay could not undo that change if "
                        "the guard failed. Keep the graph break and the optimizer step in separate compiled functions";
      return;
    }
  }
  // Tensors made during the call and still alive: returned, or the .grad the call leaves in a
  // leaf, or held somewhere the trace cannot see (a replay would not update them).
  std::unordered_set<const TensorImpl*> accounted;
  for (const Tensor& t : outputs)
    if (t.defined()) accounted.insert(t.impl_ptr().get());
  for (const GradLeaf& l : grad_leaves_)
    if (auto leaf = l.impl.lock(); leaf && Tensor(leaf).grad().defined()) accounted.insert(Tensor(leaf).grad().impl_ptr().get());
  if (!live_outputs_.empty()) {  // (what the results' history saved: the backward's inputs)
    std::vector<Tensor> live;
    for (uint32_t i : live_outputs_) live.push_back(outputs[i]);
    for (const TensorImpl* held : autograd::detail::history_holds(live)) accounted.insert(held);
  }
  for (const auto& [impl, k] : known_) {
    auto sp = k.impl.lock();
    if (!sp || sp->serial < start_serial_ || accounted.count(impl)) continue;
    not_kept_ = tensor_text(Tensor(sp)) + " made during the call is still alive after it, but it is neither returned "
                "nor a .grad (stored in host state, as an optimizer stores new moments on its first step): a replay "
                "would not update it, so this trace is not kept and the next call traces again";
    return;
  }
}

void Tracer::trace_backward(const std::vector<Tensor>& outputs) {
  if (live_outputs_.empty() || !not_replayable_.empty() || !not_kept_.empty()) return;
  auto fail = [&](const std::string& why) {
    not_replayable_ = "it returns a tensor whose gradient history is still live (backward() through it runs after the "
                      "call), and its backward could not be traced: " + why;
  };
  // The leaves the gradients flow to: the arguments and captured tensors that require grad.
  std::vector<Tensor> leaves;
  std::vector<Ref> leaf_refs;
  {
    trace::Pause pause;
    for (size_t i = 0; i < arg_tensors_.size(); ++i)
      if (arg_tensors_[i].requires_grad()) {
        leaves.push_back(arg_tensors_[i]);
        leaf_refs.push_back(outside_ref(arg_tensors_[i]));
      }
    for (size_t i = 0; i < captures_.size(); ++i)
      if (auto sp = captures_[i].lock(); sp && Tensor(sp).requires_grad() && !arg_index_.count(sp.get())) {
        leaves.push_back(Tensor(sp));
        leaf_refs.push_back({Ref::Space::Capture, uint32_t(i)});
      }
  }
  if (leaves.empty()) return fail("no argument or captured tensor requires grad (a leaf made in the call?)");
  // The backward, run once on stand-in gradients with a tracer of its own: its graph reads the
  // forward's values and the parameters as captures, and the stand-ins as arguments.
  std::vector<Tensor> live, stand_ins;
  std::vector<CallArg> bargs;
  for (uint32_t i : live_outputs_) {
    live.push_back(outputs[i]);
    stand_ins.push_back(ones_like(outputs[i]).detach());
    CallArg a;
    a.tensor = stand_ins.back();
    a.is_tensor = true;
    bargs.push_back(std::move(a));
  }
  Tracer b(bargs, {}, /*fullgraph=*/false);
  std::vector<Tensor> grads;
  try {
    trace::Install install(&b);
    grads = autograd::grad(live, leaves, stand_ins, /*retain_graph=*/true, /*create_graph=*/false, /*allow_unused=*/true);
  } catch (const Error& e) {
    return fail(e.what());
  }
  std::vector<Tensor> returned;
  std::vector<Ref> grad_leaves;
  for (size_t i = 0; i < grads.size(); ++i)
    if (grads[i].defined()) {
      returned.push_back(grads[i]);
      grad_leaves.push_back(leaf_refs[i]);
    }
  if (returned.empty()) return fail("no leaf's gradient depends on the result");
  b.check_end(returned);
  if (!b.not_replayable().empty()) return fail(b.not_replayable());
  if (!b.not_kept().empty()) return fail(b.not_kept());
  if (b.breaks() > 0) return fail("the backward has graph breaks");
  std::unique_ptr<TreeNode> chain = b.finish(returned);
  if (!chain->children.empty()) return fail("the backward has graph breaks");
  // Where each of the backward's captures comes from: a value of the forward (saved), or a
  // tensor made before the call.
  trace::Pause pause;
  backward_ = std::make_shared<BackwardPlan>();
  backward_->outputs = live_outputs_;
  backward_->leaves = grad_leaves;
  for (const std::weak_ptr<TensorImpl>& w : b.captures()) {
    auto sp = w.lock();
    if (!sp) return fail("a tensor it reads was released");
    Tensor t(sp);
    if (!made_here(t)) {
      backward_->sources.push_back(outside_ref(t));
      source_saved_.push_back(-1);
      continue;
    }
    auto k = known_.find(sp.get());
    if (k == known_.end() || k->second.impl.expired()) return fail("it reads a tensor the forward's trace did not see");
    source_saved_.push_back(int(saved_.size()));
    backward_->sources.push_back({Ref::Space::Value, 0});  // (finish() gives the slot)
    saved_.push_back(t);
    backward_->saved_bytes += t.numel() * int64_t(itemsize(t.dtype()));
  }
  chain->graph.set_name(tail_->graph.name() + "_backward");
  backward_->node = std::move(chain);
}

std::unique_ptr<TreeNode> Tracer::finish(const std::vector<Tensor>& outputs) {
  trace::Pause pause;  // the tracer reads metadata for itself, not for the user
  KILN_CHECK(not_replayable_.empty() && not_kept_.empty(), "compile", "finish() on a trace that cannot be replayed");
  std::vector<ir::Value*> outs;
  for (const Tensor& t : outputs) outs.push_back(value_of(t));
  const size_t returned = outs.size();
  // The .grad each touched leaf is left with: a value of the graph (an output), a tensor made
  // before the call, or none.
  std::vector<std::pair<GradSet, bool>> sets;  // (set, its source is the next extra output)
  for (const GradLeaf& l : grad_leaves_) {
    auto leaf = l.impl.lock();
    if (!leaf) continue;
    const Tensor& g = Tensor(leaf).grad();
    if (!g.defined()) {
      if (l.started_defined) sets.push_back({{l.leaf, std::nullopt}, false});
    } else if (made_here(g)) {
      outs.push_back(value_of(g));
      sets.push_back({{l.leaf, std::nullopt}, true});
    } else if (g.impl_ptr() != l.start.lock()) {
      sets.push_back({{l.leaf, outside_ref(g)}, false});
    }
  }
  if (backward_) {
    // (the saved values come after the .grad values: their slots are found from there)
    for (const Tensor& t : saved_) outs.push_back(value_of(t));
  }
  if (outs.empty()) {
    // A function whose effect is writes into its arguments or captures (an optimizer step):
    // the last write-back into a graph input is the graph's output, which keeps the graph a
    // graph (the IR's graphs return something) and every write-back with it (dce keeps the writes
    // into inputs); replay drops it. (An input handed over at a break counts: it may be an
    // argument itself.)
    const auto& gin = tail_->graph.inputs();
    for (auto it = tail_->graph.nodes().rbegin(); it != tail_->graph.nodes().rend() && outs.empty(); ++it)
      if ((*it)->op == OpId::Copy && std::find(gin.begin(), gin.end(), ir::alias_root((*it)->inputs[0])) != gin.end())
        outs.push_back((*it)->outputs[0]);
    tail_->hidden_outputs = !outs.empty();
    tail_->empty = outs.empty();
  }
  tail_->graph.set_outputs(outs);
  tail_->exit = Exit::Return;
  for (size_t k = 0; k < outs.size(); ++k) {
    tail_->outputs.push_back(next_value_slot_++);
    if (k < returned) tail_->returns.push_back({Ref::Space::Value, tail_->outputs.back()});
  }
  size_t extra = returned;
  for (auto& [set, from_graph] : sets) {
    if (from_graph) set.source = Ref{Ref::Space::Value, tail_->outputs.at(extra++)};
    tail_->grad_sets.push_back(set);
  }
  if (backward_) {
    for (size_t i = 0; i < backward_->sources.size(); ++i)
      if (source_saved_[i] >= 0) backward_->sources[i] = {Ref::Space::Value, tail_->outputs.at(extra + size_t(source_saved_[i]))};
    tail_->backward = backward_;
  }
  for (TreeNode* n = head_.get(); n; n = n->children.empty() ? nullptr : n->children[0].second.get()) {
    n->hash = ir::hash(n->graph);
    n->erased_hash = ir::hash(n->graph, /*erase_sizes=*/true);
    if (!n->empty) n->exe = std::make_unique<ir::Executable>(n->graph);
  }
  return std::move(head_);
}

// ---- sizes read by the user's code ----

namespace {
constexpr int64_t kNegInf = std::numeric_limits<int64_t>::min();
constexpr int64_t kPosInf = std::numeric_limits<int64_t>::max();

const char* metadata_name(trace::Metadata m) {
  switch (m) {
    case trace::Metadata::Size: return "size";
    case trace::Metadata::Stride: return "stride";
    case trace::Metadata::Contiguity: return "is_contiguous";
    case trace::Metadata::Offset: return "storage_offset";
    default: return "?";
  }
}

// floor and ceiling of a / b for b != 0, in 128 bits.
__int128 floor_div(__int128 a, __int128 b) {
  __int128 q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__int128 ceil_div(__int128 a, __int128 b) { return -floor_div(-a, b); }
int64_t clamp64(__int128 v) { return v < kNegInf ? kNegInf : v > kPosInf ? kPosInf : int64_t(v); }

// A guard on one symbol becomes a range of that symbol (a * s + c in [lo, hi] -> s in [lo', hi']);
// the outside of a half-line is a half-line.
void normalise(SizeGuard& g) {
  if (g.terms.size() == 1 && g.terms[0].second != 0) {
    const __int128 a = g.terms[0].second, c = g.constant;
    __int128 lo = g.lo == kNegInf ? kNegInf : __int128(g.lo) - c;
    __int128 hi = g.hi == kPosInf ? kPosInf : __int128(g.hi) - c;
    __int128 nlo, nhi;
    if (a > 0) {
      nlo = lo == kNegInf ? kNegInf : ceil_div(lo, a);
      nhi = hi == kPosInf ? kPosInf : floor_div(hi, a);
    } else {
      nlo = hi == kPosInf ? kNegInf : ceil_div(hi, a);
      nhi = lo == kNegInf ? kPosInf : floor_div(lo, a);
    }
    g.terms[0].second = 1;
    g.constant = 0;
    g.lo = clamp64(nlo);
    g.hi = clamp64(nhi);
  }
  if (!g.inside && g.lo == kNegInf && g.hi != kPosInf) {
    g.lo = g.hi + 1, g.hi = kPosInf, g.inside = true;
  } else if (!g.inside && g.hi == kPosInf && g.lo != kNegInf) {
    g.hi = g.lo - 1, g.lo = kNegInf, g.inside = true;
  }
}

std::string bound_text(int64_t v) { return v == kNegInf ? "-inf" : v == kPosInf ? "inf" : std::to_string(v); }
}  // namespace

std::string describe_guard(const SizeGuard& g) {
  std::string form;
  for (size_t i = 0; i < g.terms.size(); ++i) {
    const auto [sym, coef] = g.terms[i];
    std::string name = i < g.names.size() ? g.names[i] : "symbol " + std::to_string(sym);
    if (!form.empty()) form += coef < 0 ? " - " : " + ";
    else if (coef < 0) form += "-";
    int64_t mag = coef < 0 ? -coef : coef;
    form += (mag == 1 ? "" : std::to_string(mag) + " * ") + name;
  }
  if (g.constant) form += (g.constant < 0 ? " - " : " + ") + std::to_string(g.constant < 0 ? -g.constant : g.constant);
  if (g.lo == g.hi) return form + (g.inside ? " == " : " != ") + bound_text(g.lo);
  if (g.inside && g.lo == kNegInf) return form + " <= " + bound_text(g.hi);
  if (g.inside && g.hi == kPosInf) return form + " >= " + bound_text(g.lo);
  return form + (g.inside ? " in [" : " outside [") + bound_text(g.lo) + ", " + bound_text(g.hi) + "]";
}

std::optional<uint32_t> Tracer::symbol(const Tensor& t, trace::Metadata kind, int32_t dim) {
  auto it = known_.find(t.impl_ptr().get());
  // A tensor the trace never used that existed before it (captured, or not used at all): its
  // metadata is the same at every call (a rebound capture is a new tensor, traced again).
  if (it == known_.end() || it->second.impl.expired()) return std::nullopt;
  ir::Value* v = it->second.value;
  SymbolKey key{tail_, v->id, kind, dim};
  auto found = symbol_ids_.find(key);
  if (found != symbol_ids_.end()) return found->second;
  const TensorImpl& impl = t.impl();
  int64_t value = kind == trace::Metadata::Size     ? impl.sizes.at(size_t(dim))
                  : kind == trace::Metadata::Stride ? impl.strides.at(size_t(dim))
                  : kind == trace::Metadata::Offset ? impl.offset
                                                    : int64_t(impl.contiguous);
  // Its name in messages: the argument or capture it is, else the value in the graph.
  std::string name;
  const auto& gin = tail_->graph.inputs();
  auto pos = std::find(gin.begin(), gin.end(), v);
  if (pos != gin.end()) {
    Ref r = tail_->inputs[size_t(pos - gin.begin())];
    name = r.space == Ref::Space::Arg       ? "argument " + std::to_string(r.index)
           : r.space == Ref::Space::Capture ? "captured tensor " + std::to_string(r.index)
                                            : "%" + v->name;
  } else {
    name = "the value %" + std::to_string(v->id) + " of " + tail_->graph.name();
  }
  name += std::string(" ") + metadata_name(kind) + "(" + (dim >= 0 ? std::to_string(dim) : "") + ")";
  const uint32_t id = uint32_t(symbol_values_.size());
  symbol_values_.push_back(value);
  symbol_names_.push_back(name);
  symbol_ids_.emplace(key, id);
  tail_->symbols.push_back({id, Symbol{v->id, kind, dim, value, name}});
  return id;
}

void Tracer::make_opaque(const std::string& why) {
  if (parent_) return parent_->make_opaque(why);
  if (tail_->opaque.empty()) tail_->opaque = why;
}

void Tracer::metadata_read(const Tensor& t, trace::Metadata what, int64_t dim, const void* pc) {
  if (!not_replayable_.empty()) return;
  if (parent_) {
    // A branch's values live in its region, where no guard can follow them.
    make_opaque(std::string("a cond branch read ") + (what == trace::Metadata::Size ? "a size" : "metadata") +
                " of a tensor (" + describe_location({}, pc) + ")");
    return;
  }
  using M = trace::Metadata;
  auto exact = [&](M kind, int32_t d) {
    std::optional<uint32_t> s = symbol(t, kind, d);
    if (!s) return;
    SymExpr e;
    e.trace = id_;
    e.terms = {{*s, 1}};
    const int64_t v = symbol_values_[*s];
    const char* how = kind == M::Size ? "size()" : kind == M::Stride ? "stride()" : kind == M::Offset ? "storage_offset()"
                                                                                                      : "is_contiguous()";
    constrain(e, v, v, true, how, {}, pc);
  };
  const int32_t n = int32_t(t.impl().sizes.size());
  switch (what) {
    case M::Sizes:
    case M::Numel:
      for (int32_t d = 0; d < n; ++d) exact(M::Size, d);
      break;
    case M::Size: exact(M::Size, int32_t(dim)); break;
    case M::Strides:
      for (int32_t d = 0; d < n; ++d) exact(M::Stride, d);
      break;
    case M::Stride: exact(M::Stride, int32_t(dim)); break;
    case M::Contiguity: exact(M::Contiguity, -1); break;
    case M::Offset: exact(M::Offset, -1); break;
  }
}

SymInt Tracer::sym_size(const Tensor& t, int64_t dim) {
  trace::Pause pause;
  const int64_t value = t.impl().sizes.at(size_t(dim));
  if (!not_replayable_.empty()) return value;
  if (parent_) {
    make_opaque("a cond branch read sym_size() of a tensor");
    return value;
  }
  std::optional<uint32_t> s = symbol(t, trace::Metadata::Size, int32_t(dim));
  if (!s) return value;
  auto e = std::make_shared<SymExpr>();
  e->trace = id_;
  e->terms = {{*s, 1}};
  return SymInt(value, std::move(e));
}

void Tracer::constrain(const SymExpr& form, int64_t lo, int64_t hi, bool inside, const char* what,
                       const std::source_location& where, const void* pc) {
  if (parent_) return parent_->constrain(form, lo, hi, inside, what, where, pc);
  if (!not_replayable_.empty()) return;
  SizeGuard g;
  g.terms = form.terms;
  g.constant = form.constant;
  g.lo = lo;
  g.hi = hi;
  g.inside = inside;
  normalise(g);
  // Guards on one form fold into one range (a loop's i < n for every i is one guard).
  for (SizeGuard& h : tail_->size_guards) {
    if (h.same(g)) return;
    if (g.inside && h.inside && h.terms == g.terms && h.constant == g.constant) {
      h.lo = std::max(h.lo, g.lo);
      h.hi = std::min(h.hi, g.hi);
      return;
    }
  }
  g.where = std::string(what) + " at " + describe_location(where, pc);
  for (auto [sym, coef] : g.terms) g.names.push_back(sym < symbol_names_.size() ? symbol_names_[sym] : "?");
  tail_->size_guards.push_back(std::move(g));
}

// ---- guard keys ----

std::string guard_key(Exit exit, trace::HostAccess access, const Tensor& t) {
  trace::Pause p;
  auto raw = [](const void* data, size_t n) { return std::string(static_cast<const char*>(data), n); };
  if (exit == Exit::Print || exit == Exit::Split) return std::string();
  if (exit == Exit::DataDependent) {
    auto sz = t.sizes().vec();
    return "s" + raw(sz.data(), sz.size() * sizeof(int64_t));
  }
  if (access == trace::HostAccess::Bool) return bool(t) ? "b1" : "b0";
  if (access == trace::HostAccess::Item) {
    Scalar s = t.item();
    if (s.is_floating()) {
      double d = s.to_double();
      return "f" + raw(&d, sizeof d);
    }
    int64_t i = s.to_int();
    return (s.is_bool() ? "b" : "i") + raw(&i, sizeof i);
  }
  // to_vector / str: the host saw every element (and the shape and dtype).
  Tensor c = t.contiguous();
  auto sz = t.sizes().vec();
  return "v" + std::string(name(t.dtype())) + ":" + raw(sz.data(), sz.size() * sizeof(int64_t)) + ":" +
         raw(c.data_ptr(), size_t(c.nbytes()));
}

std::string describe_key(Exit exit, trace::HostAccess access, const std::string& key) {
  if (exit == Exit::Print) return "(printed)";
  if (exit == Exit::Split) return "(split)";
  if (key.empty()) return "?";
  if (key[0] == 's') {
    std::vector<int64_t> sz((key.size() - 1) / sizeof(int64_t));
    std::memcpy(sz.data(), key.data() + 1, sz.size() * sizeof(int64_t));
    std::string s = "sizes [";
    for (size_t i = 0; i < sz.size(); ++i) s += (i ? ", " : "") + std::to_string(sz[i]);
    return s + "]";
  }
  if (access == trace::HostAccess::Bool && key.size() == 2) return key == "b1" ? "true" : "false";
  if (key[0] == 'f' && key.size() == 1 + sizeof(double)) {
    double d;
    std::memcpy(&d, key.data() + 1, sizeof d);
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", d);
    return buf;
  }
  if ((key[0] == 'i' || key[0] == 'b') && key.size() == 1 + sizeof(int64_t)) {
    int64_t i;
    std::memcpy(&i, key.data() + 1, sizeof i);
    return key[0] == 'b' ? (i ? "true" : "false") : std::to_string(i);
  }
  return "the tensor's " + std::to_string(key.size()) + "-byte contents";
}

}  // namespace kiln::detail

namespace kiln::detail {

void Tracer::record_cond(const Tensor& pred, const std::vector<Tensor>& operands, ir::Graph then_graph,
                         ir::Graph else_graph, const std::vector<Tensor>& outputs) {
  trace::Pause pause;  // the tracer reads metadata for itself, not for the user
  if (!not_replayable_.empty()) return;
  std::vector<ir::Value*> ins{value_of(pred)};
  for (const Tensor& t : operands) ins.push_back(value_of(t));
  std::vector<ir::Type> types;
  for (const Tensor& o : outputs) types.push_back(type_of(o));
  ir::Node* n = tail_->graph.add_node(OpId::Cond, std::move(ins), {}, std::move(types));
  n->regions.push_back(std::make_unique<ir::Graph>(std::move(then_graph)));
  n->regions.push_back(std::make_unique<ir::Graph>(std::move(else_graph)));
  for (size_t k = 0; k < outputs.size(); ++k) bind(outputs[k], n->outputs[k]);
}

}  // namespace kiln::detail
