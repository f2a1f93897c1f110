// The compiled-function engine: the signature cache, trace trees, replay with guards, the
// recompile budget with dynamic dimensions, statistics and explain().
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <optional>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <sstream>
#include <unordered_map>

#include "kiln/codegen/cuda.h"
#include "kiln/compile.h"
#include "kiln/passes/kernel.h"
#include "kiln/ir/infer.h"
#include "kiln/passes/pass.h"
#include "speculate.h"
#include "tracer.h"

namespace kiln {
namespace detail {

namespace {

// ---- signatures ----

// The stride class of a tensor: what the cache keys on besides dtype, device and sizes.
// Views of a tensor (view(), reshape()) depend on its layout, so a permuted tensor also
// keys on its dimension order, and a broadcast or general one on its exact strides.
// The stride classes of the kernel program's operands (kiln/passes/kernel.h), here of arguments.
using passes::StrideClass;

StrideClass stride_class(const Tensor& t, std::vector<int64_t>* detail) {
  if (t.is_contiguous()) return StrideClass::Contiguous;
  auto sz = t.sizes(), st = t.strides();
  bool broadcast = false;
  for (size_t i = 0; i < sz.size(); ++i) broadcast |= st[i] == 0 && sz[i] > 1;
  if (!broadcast) {
    // dense in some order: sorting the dims by stride gives row-major strides
    std::vector<size_t> order(sz.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return st[a] > st[b]; });
    int64_t expect = 1;
    bool dense = true;
    for (size_t k = order.size(); k-- > 0;) {
      size_t d = order[k];
      if (sz[d] == 1) continue;
      dense &= st[d] == expect;
      expect *= sz[d];
    }
    if (dense) {
      for (size_t d : order) detail->push_back(int64_t(d));
      return StrideClass::Permuted;
    }
  }
  for (int64_t s : st) detail->push_back(s);
  return broadcast ? StrideClass::Broadcast : StrideClass::General;
}

using Key = std::vector<int64_t>;
struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (int64_t v : k) {
      h ^= uint64_t(v);
      h *= 1099511628211ull;
    }
    return size_t(h);
  }
};

using DynamicDims = std::set<std::pair<size_t, size_t>>;  // (argument, dim)

// The signature of a call: per tensor argument its dtype, device, sizes (a dynamic dim counts
// as -1), stride class and which earlier argument it aliases; per number its kind and value.
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
  return k;
}

std::string arg_text(const CallArg& a) {
  if (!a.is_tensor) {
    const Scalar& s = a.scalar;
    std::ostringstream o;
    o.precision(17);
    if (s.is_bool()) o << (s.to_bool() ? "true" : "false");
    else if (s.is_integral()) o << s.to_int();
    else o << s.to_double();
    return o.str();
  }
  std::vector<int64_t> detail;
  std::string s = std::string(ir::short_name(a.tensor.dtype())) + "[";
  for (int64_t d = 0; d < a.tensor.dim(); ++d) s += (d ? "," : "") + std::to_string(a.tensor.size(d));
  s += "] ";
  s += passes::stride_class_name(stride_class(a.tensor, &detail));
  if (!a.tensor.device().is_cpu()) s += " @" + a.tensor.device().str();
  return s;
}

std::string signature_text(std::span<const CallArg> args) {
  std::string s = "(";
  for (size_t i = 0; i < args.size(); ++i) {
    s += (i ? ", " : "") + arg_text(args[i]);
    for (size_t j = 0; j < i; ++j)
      if (args[i].is_tensor && args[j].is_tensor && args[j].tensor.is_alias_of(args[i].tensor)) {
        s += " aliasing arg " + std::to_string(j);
        break;
      }
  }
  return s + ")";
}

// The graphs of a trace with sizes and strides erased: equal for two traces at different
// sizes exactly when no attribute or constant depends on the sizes.
std::string shape_erased(const TreeNode& root) {
  std::string out;
  for (const TreeNode* n = &root; n; n = n->children.empty() ? nullptr : n->children[0].second.get()) {
    std::string text = ir::print(n->graph);
    std::string s;
    for (size_t i = 0; i < text.size(); ++i) {
      // a type is a short dtype name followed by [sizes]{strides}
      if (text[i] == '[' && i > 0 && std::isalnum(static_cast<unsigned char>(text[i - 1]))) {
        size_t close = text.find(']', i);
        if (close != std::string::npos && close + 1 < text.size() && text[close + 1] == '{') {
          size_t brace = text.find('}', close);
          if (brace != std::string::npos) {
            s += "[?]";
            i = brace;
            continue;
          }
        }
      }
      s += text[i];
    }
    out += s + "|" + std::to_string(int(n->exit)) + "\n";
  }
  return out;
}

size_t count_ops(const ir::Graph& g) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += node->op != OpId::Constant;
  return n;
}

}  // namespace

// ---- the backend ----

// The device a graph's tensors live on: a GPU when any input or constant is there (one op
// never mixes devices; a graph that does is refused by the CUDA backend's runner and runs on the
// reference executor), else the cpu.
static Device graph_device(const ir::Graph& g) {
  for (const ir::Value* v : g.inputs())
    if (!v->type.is_scalar() && v->type.device.is_cuda()) return v->type.device;
  for (const auto& n : g.nodes())
    for (const ir::Value* v : n->outputs)
      if (!v->type.is_scalar() && v->type.device.is_cuda()) return v->type.device;
  return Device::cpu();
}

static codegen::CudaCompileOptions cuda_options(const CompileOptions& opts) {
  codegen::CudaCompileOptions o;
  o.graphs = opts.mode == CompileOptions::Mode::ReduceOverhead;
  return o;
}

// Optimizes a graph and compiles its kernel program for its device (throws on failure).
static std::shared_ptr<codegen::CompiledProgram> compile_graph(const ir::Graph& g, const CompileOptions& opts) {
  passes::Module m = passes::optimize(g);
  std::vector<ir::Type> types;
  for (const ir::Value* v : g.inputs()) types.push_back(v->type);
  const Device dev = graph_device(g);
  return dev.is_cuda() ? codegen::compile_cuda(m.program, std::move(types), dev, cuda_options(opts))
                       : codegen::compile_cpu(m.program, std::move(types));
}

// A traced graph's name in the kernel profile (kiln/runtime/profile.h): the function's name, the
// graph's as explain() prints it, and its hash, which tells a guard's paths apart.
static std::string graph_tag(const TreeNode& n) {
  char hash[16];
  std::snprintf(hash, sizeof hash, "%08x", unsigned(n.hash & 0xffffffffu));
  return "@" + n.graph.name() + " " + hash;
}
static std::string node_label(const CompileOptions& opts, const TreeNode& n) {
  return (opts.name.empty() ? "compiled function" : opts.name) + " " + graph_tag(n);
}

// Optimizes a traced graph and compiles its kernel program for its device. Never throws: a graph
// the optimizer or the backend fails on runs on the reference executor, with a warning.
static void compile_node(TreeNode& n, const CompileOptions& opts) {
  if (opts.backend == CompileOptions::Backend::Reference) {
    n.backend_note = "reference executor (CompileOptions::backend)";
    return;
  }
  if (n.graph.outputs().empty()) {  // the IR's graphs return something; a void trace replays as it is
    n.backend_note = "reference executor: the graph returns nothing";
    return;
  }
  try {
    const Device dev = graph_device(n.graph);
    n.compiled = compile_graph(n.graph, opts);
    n.label = node_label(opts, n);
    n.compiled->set_label(n.label);
    n.variant_graphs = dev.is_cuda() && cuda_options(opts).graphs;
    const codegen::CompileStats& st = n.compiled->stats();
    n.backend_note = dev.str() + ": " + std::to_string(st.compiled) + " of " + std::to_string(st.kernels) +
                     " kernels compiled (" + std::to_string(st.memory_hits) + " from memory, " +
                     std::to_string(st.disk_hits) + " from disk) in " + std::to_string(int(st.compile_ms)) + " ms";
    if (st.epilogues > 0)
      n.backend_note += "; " + std::to_string(st.epilogues) + " library op" + (st.epilogues > 1 ? "s" : "") +
                        " with a compiled epilogue";
    for (const std::string& what : st.library) n.backend_note += "; library " + what;
    for (const std::string& why : st.interpreted) n.backend_note += "; interpreted " + why;
    if (!st.graphs.empty()) n.backend_note += "; " + st.graphs;
  } catch (const Error& e) {
    n.compiled.reset();
    n.backend_note = std::string("reference executor: the backend failed: ") + e.what();
    std::fprintf(stderr, "kiln: warning: %s\n", n.backend_note.c_str());
  }
}

// The graph with new input types and every node's output types inferred again (a graph traced
// at one size of a dynamic dim, re-specialised for another). nullopt when inference refuses
// (the graph depends on the old sizes) or the graph has regions.
static std::optional<ir::Graph> retype(const ir::Graph& g, const std::vector<Tensor>& ins) {
  ir::Graph out(g.name());
  std::unordered_map<const ir::Value*, ir::Value*> map;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const ir::Value* v = g.inputs()[i];
    map[v] = out.add_input(v->name, ir::Type::tensor(ins[i].dtype(), ins[i].sizes().vec(), ins[i].strides().vec(),
                                                     ins[i].device()));
  }
  try {
    for (const auto& n : g.nodes()) {
      if (!n->regions.empty()) return std::nullopt;
      std::vector<ir::Value*> args;
      std::vector<ir::Type> types;
      for (const ir::Value* v : n->inputs) {
        args.push_back(map.at(v));
        types.push_back(args.back()->type);
      }
      std::vector<ir::Type> outs;
      if (n->op == OpId::Constant)
        for (const ir::Value* v : n->outputs) outs.push_back(v->type);
      else
        outs = ir::infer_types(n->op, types, n->attrs);
      ir::Node* m = out.add_node(n->op, args, n->attrs, outs, n->loc);
      for (size_t k = 0; k < n->outputs.size(); ++k) map[n->outputs[k]] = m->outputs[k];
    }
  } catch (const Error&) {
    return std::nullopt;
  }
  std::vector<ir::Value*> outs;
  for (const ir::Value* v : g.outputs()) outs.push_back(map.at(v));
  out.set_outputs(outs);
  return out;
}

// Runs one graph of the trace tree: compiled when its inputs have the sizes and strides the
// kernels were specialised on. Other sizes (a dynamic dim's) get a program of their own, from
// size-generic kernels on either device (sizes as arguments: the first other size compiles
// them, later sizes find them in the kernel caches and only rerun the passes); the last
// kMaxVariants of them are kept.
static std::vector<Tensor> run_node(const TreeNode& n, const std::vector<Tensor>& ins) {
  if (!n.compiled) return n.exe->run(ins);
  std::vector<ir::Slot> slots(ins.size());
  for (size_t i = 0; i < ins.size(); ++i) slots[i].tensor = ins[i];
  if (auto outs = n.compiled->try_run(slots)) return std::move(*outs);
  std::vector<int64_t> key;
  for (const Tensor& t : ins) {
    key.push_back(t.dim());
    for (int64_t d = 0; d < t.dim(); ++d) key.push_back(t.sizes()[size_t(d)]), key.push_back(t.strides()[size_t(d)]);
  }
  std::shared_ptr<codegen::CompiledProgram> variant;
  {
    std::lock_guard<std::mutex> lock(n.variants_mu);
    auto it = n.variants.find(key);
    if (it != n.variants.end()) {
      variant = it->second;
    } else {
      try {
        if (std::optional<ir::Graph> g = retype(n.graph, ins)) {
          passes::Module m = passes::optimize(*g);
          std::vector<ir::Type> types;
          for (const ir::Value* v : g->inputs()) types.push_back(v->type);
          const Device dev = graph_device(*g);
          size_t graphs = 0;
          for (const auto& [k, v] : n.variants) graphs += v && v->replays();
          variant = dev.is_cuda() ? codegen::compile_cuda(m.program, std::move(types), dev,
                                                          {.graphs = n.variant_graphs && graphs < TreeNode::kMaxGraphVariants,
                                                           .generic = true})
                                  : codegen::compile_cpu(m.program, std::move(types), {.generic = true});
          variant->set_label(n.label + " (size variant)");
        }
      } catch (const Error&) {
        variant.reset();
      }
      if (n.variants.size() >= TreeNode::kMaxVariants) {  // the oldest size goes
        n.variants.erase(n.variant_order.front());
        n.variant_order.pop_front();
      }
      n.variants.emplace(key, variant);
      n.variant_order.push_back(key);
      n.variants_built++;
    }
  }
  if (variant)
    if (auto outs = variant->try_run(slots)) return std::move(*outs);
  return n.exe->run(ins);
}

// Runs a node's speculation (its graph and its child's as one program): the node's outputs,
// then the child's. nullopt when the program does not take these inputs (other sizes of a
// dynamic dim) or fails (an error the child's kernels raise on values its guard would have
// kept it from): the node then runs alone, as it would have without speculation (it writes
// nothing, so running it again is safe).
static std::optional<std::vector<Tensor>> run_speculation(const Speculation& s, Env& env) {
  std::vector<ir::Slot> slots(s.inputs.size());
  for (size_t i = 0; i < s.inputs.size(); ++i) slots[i].tensor = env.at(s.inputs[i]);
  try {
    return s.compiled->try_run(slots);
  } catch (const Error&) {
    return std::nullopt;
  }
}

struct Engine::State {
  CompileOptions opts;
  struct Entry {
    std::unique_ptr<TreeNode> root;
    std::vector<std::weak_ptr<TensorImpl>> captures;
    std::string eager_reason;
    std::string signature;
    std::vector<std::vector<int64_t>> arg_sizes;  // of the call that created it
    size_t value_slots = 0;
  };
  mutable std::shared_mutex mu;
  std::unordered_map<Key, std::unique_ptr<Entry>, KeyHash> cache;
  DynamicDims dynamic;
  std::set<std::pair<size_t, size_t>> static_only;  // dims whose graphs depend on their size
  std::vector<std::string> log;                   // every trace and why
  bool warned = false;
  std::atomic<uint64_t> calls{0}, hits{0}, misses{0}, guard_failures{0}, compiles{0}, breaks{0}, eager_calls{0};
  mutable std::atomic<uint64_t> speculated{0}, misspeculated{0};

  struct Replay {
    bool ok = false;
    std::string why;  // when not ok
    std::vector<Tensor> outputs;
  };
  Replay replay(const Entry& e, std::span<const CallArg> args) const;
  std::vector<Tensor> trace(const Key& key, std::span<const CallArg> args,
                            const std::function<std::vector<Tensor>()>& run_eager, std::string why);
  void merge(Entry& e, std::unique_ptr<TreeNode> chain);
  std::string name() const { return opts.name.empty() ? "compiled function" : opts.name; }
};

Engine::Engine(CompileOptions options) : state_(std::make_unique<State>()) { state_->opts = std::move(options); }
Engine::~Engine() = default;
const CompileOptions& Engine::options() const { return state_->opts; }

Engine::State::Replay Engine::State::replay(const Entry& e, std::span<const CallArg> args) const {
  Replay r;
  Env env;
  env.args.resize(args.size());
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].is_tensor) env.args[i] = args[i].tensor;
  env.captures.resize(e.captures.size());
  for (size_t i = 0; i < e.captures.size(); ++i) {
    auto sp = e.captures[i].lock();
    if (!sp) {
      r.why = "captured tensor #" + std::to_string(i) + " was released (rebound or destroyed): trace again";
      return r;
    }
    env.captures[i] = Tensor(std::move(sp));
  }
  env.values.resize(e.value_slots);
  // Writes into arguments or captures made before a guard that then fails are undone, so the
  // fresh trace starts from the caller's values.
  std::vector<std::pair<Tensor, Tensor>> saved;
  auto undo = [&] {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) it->first.copy_(it->second);
  };
  const TreeNode* n = e.root.get();
  // The outputs of a speculated child (n's speculation ran it with n), kept until the guard is
  // read; `ran` when n is that child and its outputs are already in env.
  std::vector<Tensor> ahead;
  bool ran = false;
  while (true) {
    if (n->exit != Exit::Return)
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
        if (!spec) {
          std::vector<Tensor> ins;
          ins.reserve(n->inputs.size());
          for (Ref ref : n->inputs) ins.push_back(env.at(ref));
          outs = run_node(*n, ins);
        }
      } catch (...) {
        undo();
        throw;
      }
      for (size_t k = 0; k < outs.size(); ++k) env.values[n->outputs[k]] = std::move(outs[k]);
    }
    ran = false;
    if (n->exit == Exit::Return) {
      for (Ref ref : n->returns) r.outputs.push_back(env.at(ref));
      r.ok = true;
      return r;
    }
    std::string key;
    if (n->exit == Exit::Print) {
      print(env.at(n->guarded));
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
    if (spec) {
      if (next == spec->child) {
        for (size_t k = 0; k < ahead.size(); ++k) env.values[next->outputs[k]] = std::move(ahead[k]);
        ran = true;
        speculated++;
      } else {
        misspeculated++;  // the child's outputs are dropped; it wrote nothing
      }
      ahead.clear();
    }
    if (!next) {
      undo();
      std::string seen;
      for (const auto& [k, child] : n->children) seen += (seen.empty() ? "" : ", ") + describe_key(n->exit, n->access, k);
      r.why = "guard failed: " + n->reason + " at " + n->where + " gave " + describe_key(n->exit, n->access, key) +
              " (traced: " + seen + ")";
      return r;
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
    TreeNode* cur = slot->get();
    TreeNode* nw = owner->get();
    if (!cur || !cur->same_step(*nw)) {
      // A different graph where the tree had one (a function whose trace does not depend on
      // its inputs and guards alone): the new path replaces the old subtree.
      if (cur) log.push_back("  (the new trace differs from the cached one at this point; it replaces it)");
      *slot = std::move(*owner);
      for (TreeNode* n = slot->get(); n && !n->children.empty(); n = n->children[0].second.get()) n->predictor.observe(0);
      return;
    }
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

std::vector<Tensor> Engine::State::trace(const Key& key, std::span<const CallArg> args,
                                         const std::function<std::vector<Tensor>()>& run_eager, std::string why) {
  std::vector<std::weak_ptr<TensorImpl>> known_captures;
  {
    std::shared_lock lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) known_captures = it->second->captures;
  }
  size_t known = known_captures.size();
  Tracer tracer(args, std::move(known_captures), opts.fullgraph);
  std::vector<Tensor> outs;
  {
    trace::Install install(&tracer);
    outs = run_eager();
  }
  compiles++;
  breaks += tracer.breaks();
  std::unique_ptr<TreeNode> chain;
  if (tracer.not_replayable().empty()) {
    chain = tracer.finish(outs);
    for (TreeNode* n = chain.get(); n; n = n->children.empty() ? nullptr : n->children[0].second.get())
      compile_node(*n, opts);
    if (opts.speculate && opts.backend == CompileOptions::Backend::Compiled)
      for (TreeNode* n = chain.get(); n; n = n->children.empty() ? nullptr : n->children[0].second.get())
        if (n->exit != Exit::Return)
          n->speculations.push_back(speculate(*n, 0, [&](const ir::Graph& g) {
            auto c = compile_graph(g, opts);
            c->set_label(node_label(opts, *n) + " speculating " + graph_tag(*n->children[0].second));
            return c;
          }));
  }

  std::unique_lock lock(mu);
  auto& slot = cache[key];
  if (!slot) {
    slot = std::make_unique<Entry>();
    slot->signature = signature_text(args);
    for (const CallArg& a : args) slot->arg_sizes.push_back(a.is_tensor ? a.tensor.sizes().vec() : std::vector<int64_t>{});
  }
  Entry& e = *slot;
  log.push_back("trace #" + std::to_string(compiles.load()) + " " + e.signature + ": " + why);
  if (!chain) {
    e.eager_reason = tracer.not_replayable();
    log.push_back("  not replayable: " + e.eager_reason + "; this signature runs eagerly from now on");
    return outs;
  }
  if (e.captures.size() != known) return outs;  // another thread extended the captures meanwhile
  e.captures = tracer.captures();
  for (const TreeNode* n = chain.get(); n; n = n->children.empty() ? nullptr : n->children[0].second.get()) {
    for (uint32_t s : n->outputs) e.value_slots = std::max<size_t>(e.value_slots, s + 1);
    if (n->exit == Exit::DataDependent) e.value_slots = std::max<size_t>(e.value_slots, n->dd_output + 1);
  }
  merge(e, std::move(chain));
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
      s.guard_failures++;
    }
  }
  if (why.empty()) {
    s.misses++;
    std::unique_lock lock(s.mu);
    why = s.cache.empty() ? "first call" : "new input signature";
    if (!s.cache.empty()) {
      // Which sizes differ from the entries already cached (the candidates for dynamic dims).
      std::set<std::pair<size_t, size_t>> varying;
      for (const auto& [k, e] : s.cache)
        for (size_t i = 0; i < args.size() && i < e->arg_sizes.size(); ++i)
          if (args[i].is_tensor && int64_t(e->arg_sizes[i].size()) == args[i].tensor.dim())
            for (size_t d = 0; d < e->arg_sizes[i].size(); ++d)
              if (e->arg_sizes[i][d] != args[i].tensor.sizes()[d]) varying.insert({i, d});
      if (s.cache.size() >= size_t(std::max(0, s.opts.recompile_limit))) {
        std::string dims;
        for (auto& v : varying)
          if (!s.static_only.count(v) && !s.dynamic.count(v)) {
            s.dynamic.insert(v);
            dims += (dims.empty() ? "" : ", ") + ("arg " + std::to_string(v.first) + " dim " + std::to_string(v.second));
          }
        if (!dims.empty()) {
          if (!s.warned)
            std::cerr << "kiln: warning: " << s.name() << " was traced for " << s.cache.size()
                      << " input signatures (recompile_limit " << s.opts.recompile_limit
                      << "); marking the varying dimensions dynamic: " << dims << "\n";
          s.warned = true;
          why += "; recompile_limit reached, dynamic: " + dims;
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
  std::vector<Tensor> outs = s.trace(key, args, run_eager, why);
  // A graph traced under dynamic dims is kept for all sizes only when it matches, sizes
  // erased, a trace of the same function at other sizes; otherwise the dims stay static.
  std::unique_lock lock(s.mu);
  auto it = s.cache.find(key);
  if (dynamic_key && it != s.cache.end() && it->second->root) {
    std::string mine = shape_erased(*it->second->root);
    bool generic = false;
    for (const auto& [k, e] : s.cache)
      if (e.get() != it->second.get() && e->root && shape_erased(*e->root) == mine) generic = true;
    if (!generic) {
      s.log.push_back("  the graph depends on the dynamic sizes (view sizes, constants): the dims stay static");
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
  st.speculated = s.speculated;
  st.misspeculated = s.misspeculated;
  return st;
}

Explanation Engine::explain(std::span<const CallArg> args) const {
  const State& s = *state_;
  Explanation ex;
  ex.stats = stats();
  std::shared_lock lock(s.mu);
  ex.recompiles = s.log;
  Key key = signature(args, s.dynamic);
  auto it = s.cache.find(key);
  ex.signature = signature_text(args);
  if (it == s.cache.end()) return ex;
  const State::Entry& e = *it->second;
  ex.eager_reason = e.eager_reason;
  if (!e.root) return ex;
  // Walk the tree: every graph, every break and its guard with the values seen.
  std::vector<const TreeNode*> stack{e.root.get()};
  std::set<std::string> seen_breaks;
  while (!stack.empty()) {
    const TreeNode* n = stack.back();
    stack.pop_back();
    std::string note = n->backend_note;
    {
      std::lock_guard<std::mutex> vlock(n->variants_mu);
      size_t compiled = 0, replayed = 0;
      for (const auto& [k, v] : n->variants) {
        compiled += v != nullptr;
        replayed += v && v->replays();
      }
      if (!n->variants.empty())
        note += "; other sizes: " + std::to_string(n->variants_built) + " seen, " + std::to_string(compiled) +
                " kept with size-generic kernels" +
                (n->variant_graphs ? " (" + std::to_string(replayed) + " replayed as CUDA graphs)" : "") + ", " +
                std::to_string(n->variants.size() - compiled) + " on the reference executor";
    }
    ex.graphs.push_back({ir::print(n->graph), count_ops(n->graph), note});
    if (n->exit == Exit::Return) continue;
    if (seen_breaks.insert(n->reason + "@" + n->where).second) ex.breaks.push_back({n->reason, n->where});
    std::string g = n->reason + " at " + n->where;
    if (n->exit == Exit::Print) {
      g += ": printed on every call (no guard)";
    } else {
      g += n->exit == Exit::DataDependent ? ": output shape in {" : ": value in {";
      for (size_t k = 0; k < n->children.size(); ++k)
        g += (k ? ", " : "") + describe_key(n->exit, n->access, n->children[k].first);
      g += "}";
    }
    std::string spec;
    for (size_t k = 0; k < n->speculations.size() && k < n->children.size(); ++k)
      if (n->speculations[k])
        spec += (spec.empty() ? "" : ", ") + describe_key(n->exit, n->access, n->children[k].first) + ": " +
                n->speculations[k]->note;
    if (!spec.empty()) g += "; speculated when predicted: {" + spec + "}";
    if (!n->speculation_note.empty()) g += "; " + n->speculation_note;
    ex.guards.push_back(g);
    for (auto it2 = n->children.rbegin(); it2 != n->children.rend(); ++it2) stack.push_back(it2->second.get());
  }
  return ex;
}

}  // namespace detail

std::string Explanation::str() const {
  std::ostringstream o;
  o << "signature " << signature << "\n";
  if (!eager_reason.empty()) o << "runs eagerly: " << eager_reason << "\n";
  o << graphs.size() << " graph" << (graphs.size() == 1 ? "" : "s") << ", " << breaks.size() << " graph break"
    << (breaks.size() == 1 ? "" : "s") << "\n";
  for (size_t i = 0; i < breaks.size(); ++i) o << "break " << i << ": " << breaks[i].reason << " at " << breaks[i].where << "\n";
  for (size_t i = 0; i < guards.size(); ++i) o << "guard " << i << ": " << guards[i] << "\n";
  for (size_t i = 0; i < graphs.size(); ++i) {
    o << "graph " << i << " (" << graphs[i].ops << " ops):\n" << graphs[i].text;
    if (!graphs[i].backend.empty()) o << "  runs on: " << graphs[i].backend << "\n";
  }
  o << "traces of this function:\n";
  for (const auto& r : recompiles) o << "  " << r << "\n";
  o << "stats: calls " << stats.calls << ", hits " << stats.hits << ", misses " << stats.misses << ", guard failures "
    << stats.guard_failures << ", compiles " << stats.compiles << ", breaks " << stats.breaks << ", eager calls "
    << stats.eager_calls << ", speculated " << stats.speculated << ", misspeculated " << stats.misspeculated << "\n";
  return o.str();
}

std::ostream& operator<<(std::ostream& os, const Explanation& e) { return os << e.str(); }

}  // namespace kiln
