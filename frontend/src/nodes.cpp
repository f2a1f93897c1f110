// One graph of a trace tree: compiled for its device, run at the traced sizes or at a dynamic
// dim's other sizes (size-generic kernels), and its size guards checked there.
#include <cstdio>
#include <unordered_map>

#include "engine.h"
#include "kiln/exec/backend.h"
#include "kiln/ir/infer.h"
#include "kiln/passes/kernel.h"
#include "kiln/passes/pass.h"
#include "kiln/runtime/log.h"

namespace kiln::detail {

namespace {

using exec::graph_device;

exec::BackendOptions backend_options(const CompileOptions& opts) {
  return {.graphs = opts.mode == CompileOptions::Mode::ReduceOverhead};
}

// A traced graph's name in the kernel profile (kiln/runtime/profile.h): the function's name, the
// graph's as explain() prints it, and its hash, which tells a guard's paths apart.
std::string graph_tag(const TreeNode& n) {
  char hash[16];
  std::snprintf(hash, sizeof hash, "%08x", unsigned(n.hash & 0xffffffffu));
  return "@" + n.graph.name() + " " + hash;
}
std::string node_label(const CompileOptions& opts, const TreeNode& n) {
  return (opts.name.empty() ? "compiled function" : opts.name) + " " + graph_tag(n);
}

// The graph with new input types and every node's output types inferred again (a graph traced
// at one size of a dynamic dim, re-specialised for another), and the new type of each old value
// by id. nullopt when inference refuses (the graph depends on the old sizes) or the graph has
// regions.
std::optional<ir::Graph> retype(const ir::Graph& g, const std::vector<Tensor>& ins,
                                std::unordered_map<int, const ir::Type*>* types_by_id) {
  ir::Graph out(g.name());
  std::unordered_map<const ir::Value*, ir::Value*> map;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const ir::Value* v = g.inputs()[i];
    const TensorImpl& t = ins[i].impl();
    map[v] = out.add_input(v->name, ir::Type::tensor(t.dtype, t.sizes, t.strides, ins[i].device()));
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
  if (types_by_id)
    for (const auto& [old, now] : map) (*types_by_id)[old->id] = &now->type;
  return out;
}

// Are these the sizes and strides the graph was traced with?
bool traced_layout(const ir::Graph& g, const std::vector<Tensor>& ins) {
  for (size_t i = 0; i < ins.size() && i < g.inputs().size(); ++i) {
    const ir::Type& t = g.inputs()[i]->type;
    if (t.is_scalar()) continue;
    const TensorImpl& impl = ins[i].impl();
    if (impl.sizes != t.sizes || impl.strides != t.strides) return false;
  }
  return true;
}

bool dense_row_major(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t expect = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expect) return false;
    expect *= sizes[d];
  }
  return true;
}

// A symbol's value in a value of type `t` (nullopt: the type does not hold it).
std::optional<int64_t> symbol_value(const Symbol& s, const ir::Type& t) {
  switch (s.kind) {
    case trace::Metadata::Size:
      if (size_t(s.dim) < t.sizes.size()) return t.sizes[size_t(s.dim)];
      return std::nullopt;
    case trace::Metadata::Stride:
      if (size_t(s.dim) < t.strides.size()) return t.strides[size_t(s.dim)];
      return std::nullopt;
    case trace::Metadata::Contiguity: return int64_t(dense_row_major(t.sizes, t.strides));
    default: return std::nullopt;  // an offset is not part of a type
  }
}

// The node's variant for these inputs (of other sizes than traced), made on first use; the
// newest kMaxVariants are kept.
std::shared_ptr<Variant> variant_of(const TreeNode& n, const std::vector<Tensor>& ins) {
  std::vector<int64_t> key;
  for (const Tensor& t : ins) {
    const TensorImpl& impl = t.impl();
    key.push_back(int64_t(impl.sizes.size()));
    for (size_t d = 0; d < impl.sizes.size(); ++d) key.push_back(impl.sizes[d]), key.push_back(impl.strides[d]);
  }
  std::lock_guard<std::mutex> lock(n.variants_mu);
  auto it = n.variants.find(key);
  if (it != n.variants.end()) return it->second;
  auto v = std::make_shared<Variant>();
  std::unordered_map<int, const ir::Type*> types;
  v->graph = retype(n.graph, ins, &types);
  v->typed = v->graph.has_value();
  for (const auto& [id, sym] : n.symbols) {
    auto t = types.find(sym.value_id);
    v->symbols.push_back(v->typed && t != types.end() ? symbol_value(sym, *t->second) : std::nullopt);
  }
  if (n.variants.size() >= TreeNode::kMaxVariants) {  // the oldest size goes
    n.variants.erase(n.variant_order.front());
    n.variant_order.pop_front();
  }
  n.variants.emplace(key, v);
  n.variant_order.push_back(key);
  n.variants_built++;
  return v;
}

// The variant's program of size-generic kernels, compiled on its first run (sizes as arguments:
// the first other size compiles them, later sizes find them in the kernel caches and only rerun
// the passes). Null where the graph cannot be retyped or the backend refuses it.
std::shared_ptr<exec::CompiledProgram> program_of(const TreeNode& n, Variant& v) {
  std::lock_guard<std::mutex> lock(n.variants_mu);
  if (v.built) return v.program;
  v.built = true;
  if (!v.graph) return nullptr;
  try {
    size_t graphs = 0;
    for (const auto& [k, other] : n.variants) graphs += other->program && other->program->replays();
    v.program = exec::compile_graph(
        *v.graph, {.generic = true, .graphs = n.variant_graphs && graphs < TreeNode::kMaxGraphVariants});
    v.program->set_label(n.label + " (size variant)");
  } catch (const Error&) {
    v.program.reset();
  }
  v.graph.reset();
  return v.program;
}

}  // namespace

void compile_node(TreeNode& n, const CompileOptions& opts) {
  if (n.empty) {
    n.backend_note = "nothing to run: the graph returns nothing and writes into no argument or capture";
    return;
  }
  if (opts.backend == CompileOptions::Backend::Reference) {
    n.backend_note = "reference executor (CompileOptions::backend)";
    return;
  }
  try {
    const Device dev = graph_device(n.graph);
    n.compiled = exec::compile_graph(n.graph, backend_options(opts));
    n.label = node_label(opts, n);
    n.compiled->set_label(n.label);
    n.variant_graphs = dev.is_cuda() && backend_options(opts).graphs;
    const exec::CompileStats& st = n.compiled->stats();
    n.backend_note = dev.str() + ": " + std::to_string(st.compiled) + " of " + std::to_string(st.kernels) +
                     " kernels compiled (" + std::to_string(st.memory_hits) + " from memory, " +
                     std::to_string(st.disk_hits) + " from disk) in " + std::to_string(int(st.compile_ms)) + " ms";
    if (st.epilogues > 0)
      n.backend_note += "; " + std::to_string(st.epilogues) + " library op" + (st.epilogues > 1 ? "s" : "") +
                        " with a compiled epilogue";
    for (const std::string& what : st.library) n.backend_note += "; library " + what;
    for (const std::string& why : st.interpreted) n.backend_note += "; interpreted " + why;
    if (!st.graphs.empty()) n.backend_note += "; " + st.graphs;
    if (n.hidden_outputs) n.backend_note += "; returns nothing (its writes into the arguments are its effect)";
    for (const std::string& why : st.interpreted)
      logs::emit(logs::Channel::PerfHints, node_label(opts, n) + ": a kernel runs on the kernel interpreter: " + why);
  } catch (const Error& e) {
    n.compiled.reset();
    n.backend_note = std::string("reference executor: the backend failed: ") + e.what();
    std::fprintf(stderr, "kiln: warning: %s\n", n.backend_note.c_str());
    logs::emit(logs::Channel::PerfHints, node_label(opts, n) + " runs op by op: " + n.backend_note);
  }
}

std::shared_ptr<exec::CompiledProgram> compile_speculation(const TreeNode& n, const ir::Graph& g,
                                                              const CompileOptions& opts) {
  auto c = exec::compile_graph(g, backend_options(opts));
  c->set_label(node_label(opts, n) + " speculating " + graph_tag(*n.children[0].second));
  return c;
}

bool size_guards_hold(const TreeNode& n, const std::vector<Tensor>& ins, SymbolTable& table, std::string* why,
                      const SizeGuard** failed) {
  if (!n.has_size_guards()) return true;
  const bool traced = traced_layout(n.graph, ins);
  std::shared_ptr<Variant> v;
  if (!traced) {
    if (!n.opaque.empty()) {
      *why = "the graph cannot follow other sizes: " + n.opaque;
      return false;
    }
    v = variant_of(n, ins);
  }
  for (size_t k = 0; k < n.symbols.size(); ++k) {
    const auto& [id, sym] = n.symbols[k];
    std::optional<int64_t> value;
    if (traced) {
      value = sym.traced;
    } else if (sym.kind == trace::Metadata::Offset) {
      const auto& gin = n.graph.inputs();  // an input's offset is the argument's own
      for (size_t i = 0; i < gin.size() && i < ins.size(); ++i)
        if (gin[i]->id == sym.value_id) value = ins[i].impl().offset;
    } else {
      value = v->symbols[k];
    }
    if (!value) {
      *why = sym.name + ", which the code read, cannot be known at these sizes before the graph runs";
      return false;
    }
    if (table.values.size() <= id) table.values.resize(id + 1), table.known.resize(id + 1);
    table.values[id] = *value;
    table.known[id] = 1;
  }
  for (const SizeGuard& g : n.size_guards) {
    __int128 form = g.constant;
    std::string values;
    for (size_t i = 0; i < g.terms.size(); ++i) {
      const auto [sym, coef] = g.terms[i];
      if (sym >= table.known.size() || !table.known[sym]) {
        *why = "size guard " + describe_guard(g) + " names a symbol this path has not met (a kiln bug)";
        return false;
      }
      form += __int128(coef) * table.values[sym];
      values += (values.empty() ? "" : ", ") + (i < g.names.size() ? g.names[i] : "?") + " = " +
                std::to_string(table.values[sym]);
    }
    if ((form >= g.lo && form <= g.hi) != g.inside) {
      if (failed) *failed = &g;
      *why = "size guard failed: " + describe_guard(g) + " (" + g.where + ") does not hold for " + values;
      return false;
    }
  }
  return true;
}

std::vector<Tensor> run_node(const TreeNode& n, const std::vector<Tensor>& ins) {
  if (n.empty) return {};
  if (!n.compiled) return n.exe->run(ins);
  std::vector<ir::Slot> slots(ins.size());
  for (size_t i = 0; i < ins.size(); ++i) slots[i].tensor = ins[i];
  if (auto outs = n.compiled->try_run(slots)) return std::move(*outs);
  std::shared_ptr<Variant> v = variant_of(n, ins);
  if (std::shared_ptr<exec::CompiledProgram> program = program_of(n, *v))
    if (auto outs = program->try_run(slots)) return std::move(*outs);
  return n.exe->run(ins);
}

std::optional<std::vector<Tensor>> run_speculation(const Speculation& s, Env& env) {
  std::vector<ir::Slot> slots(s.inputs.size());
  for (size_t i = 0; i < s.inputs.size(); ++i) slots[i].tensor = env.at(s.inputs[i]);
  try {
    return s.compiled->try_run(slots);
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::string backend_text(const TreeNode& n) {
  std::string note = n.backend_note;
  std::lock_guard<std::mutex> lock(n.variants_mu);
  size_t compiled = 0, replayed = 0, reference = 0;
  for (const auto& [k, v] : n.variants) {
    compiled += v->program != nullptr;
    replayed += v->program && v->program->replays();
    reference += v->built && !v->program;
  }
  if (!n.variants.empty())
    note += "; other sizes: " + std::to_string(n.variants_built) + " seen, " + std::to_string(compiled) +
            " kept with size-generic kernels" +
            (n.variant_graphs ? " (" + std::to_string(replayed) + " replayed as CUDA graphs)" : "") + ", " +
            std::to_string(reference) + " on the reference executor";
  return note;
}

size_t count_ops(const ir::Graph& g) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += node->op != OpId::Constant;
  return n;
}

}  // namespace kiln::detail
