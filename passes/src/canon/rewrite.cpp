// The canonicalization passes' shared machinery (see rewrite.h).
#include "rewrite.h"

#include <algorithm>
#include <numeric>

#include "kiln/ir/exec.h"
#include "kiln/ir/infer.h"

namespace kiln::passes::canon {

bool is_view(const ir::Node& n) { return ir::op_info(n.op).category == ir::Category::View; }

bool aliases_operands(const ir::Node& n) {
  switch (n.op) {
    case OpId::Cast:
      return n.inputs[0]->type.dtype == n.outputs[0]->type.dtype;
    case OpId::Contiguous:
      return n.inputs[0]->type == n.outputs[0]->type || n.inputs[0]->type.wrapped;
    case OpId::Einsum:
      return n.inputs.size() == 1;
    case OpId::Cond:
      return true;
    default:
      return false;
  }
}

bool regions_write(const ir::Node& n) {
  for (const auto& r : n.regions)
    for (const auto& m : r->nodes())
      if (m->op == OpId::Copy || regions_write(*m)) return true;
  return false;
}

bool is_fresh(const ir::Value* v) {
  const ir::Node* p = v->producer;
  return p && !is_view(*p) && p->op != OpId::Copy && p->op != OpId::Constant && p->op != OpId::Cond &&
         !aliases_operands(*p);
}

// ---- MemoryInfo ----

MemoryInfo::MemoryInfo(const ir::Graph& g) : g_(&g) {
  // Union-find over the graph's values, by id.
  uses_.resize(g.num_values());
  std::vector<size_t> parent(g.num_values());
  std::iota(parent.begin(), parent.end(), size_t(0));
  auto find = [&](size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  auto unite = [&](const ir::Value* a, const ir::Value* b) { parent[find(slot(a))] = find(slot(b)); };
  for (const auto& n : g.nodes()) {
    for (size_t k = 0; k < n->inputs.size(); ++k) uses_[slot(n->inputs[k])].push_back({n.get(), k});
    if (is_view(*n) || n->op == OpId::Copy) unite(n->outputs[0], n->inputs[0]);
    if (n->op == OpId::Cond) {
      for (const ir::Value* out : n->outputs)
        for (size_t k = 1; k < n->inputs.size(); ++k) unite(out, n->inputs[k]);
    } else if (aliases_operands(*n)) {
      for (const ir::Value* in : n->inputs) unite(n->outputs[0], in);
    }
  }
  // Dense class ids, in order of each class's first value (the inputs, then the nodes' outputs).
  std::vector<int> ids(g.num_values(), -1);
  cls_.assign(g.num_values(), -1);
  auto number = [&](const ir::Value* v) {
    int& id = ids[find(size_t(v->id))];
    if (id < 0) {
      id = int(info_.size());
      info_.emplace_back();
    }
    cls_[size_t(v->id)] = id;
  };
  for (const ir::Value* v : g.inputs()) number(v);
  for (const auto& n : g.nodes())
    for (const ir::Value* v : n->outputs) number(v);
  for (const ir::Value* v : g.inputs()) info_[size_t(cls(v))].input = true;
  for (const ir::Value* v : g.outputs()) info_[size_t(cls(v))].output = true;
  for (const auto& n : g.nodes()) {
    if (n->op == OpId::Constant) info_[size_t(cls(n->outputs[0]))].constant = true;
    for (int c : writes_of(*n)) info_[size_t(c)].writes.push_back(pos(n.get()));
    for (const ir::Value* v : n->inputs) {
      auto& reads = info_[size_t(cls(v))].reads;
      if (reads.empty() || reads.back() != pos(n.get())) reads.push_back(pos(n.get()));
    }
  }
}

bool MemoryInfo::is_output(const ir::Value* v) const {
  const auto& outs = g_->outputs();
  return std::find(outs.begin(), outs.end(), v) != outs.end();
}

int MemoryInfo::last_read(int c) const {
  const ClassInfo& ci = info_[size_t(c)];
  if (ci.output) return INT_MAX;
  return ci.reads.empty() ? -1 : ci.reads.back();
}

std::vector<int> MemoryInfo::writes_of(const ir::Node& n) const {
  std::vector<int> out;
  if (n.op == OpId::Copy) out.push_back(cls(n.inputs[0]));
  if (n.op == OpId::Cond && regions_write(n))
    for (const ir::Value* v : n.inputs) out.push_back(cls(v));
  return out;
}

size_t MemoryInfo::slot(const ir::Value* v) const {
  KILN_CHECK(g_->owns(v), "passes", "MemoryInfo: value %", v->id, " is not a value of graph @", g_->name());
  return size_t(v->id);
}

const std::vector<MemoryInfo::Use>& MemoryInfo::uses(const ir::Value* v) const { return uses_[slot(v)]; }

bool MemoryInfo::any_between(const std::vector<int>& sorted, int lo, int hi) {
  auto it = std::upper_bound(sorted.begin(), sorted.end(), lo);
  return it != sorted.end() && *it < hi;
}

// ---- Rebuilder ----

Rebuilder::Rebuilder(const ir::Graph& old)
    : old_(old), g_(old.name()), map_(old.num_values(), nullptr) {
  for (const ir::Value* v : old.inputs()) map_[size_t(v->id)] = g_.add_input(v->name, v->type);
}

size_t Rebuilder::slot(const ir::Value* old) const {
  KILN_CHECK(old_.owns(old), "passes", "rewrite: value %", old->id, " is not a value of graph @", old_.name());
  return size_t(old->id);
}

ir::Value* Rebuilder::operator()(const ir::Value* old) const {
  ir::Value* v = map_[slot(old)];
  KILN_CHECK(v, "passes", "rewrite: value %", old->id, " is used before the pass defined it");
  return v;
}

std::vector<ir::Value*> Rebuilder::operands(const ir::Node& n) const {
  std::vector<ir::Value*> ins;
  for (const ir::Value* v : n.inputs) ins.push_back((*this)(v));
  return ins;
}

ir::Node* Rebuilder::keep(const ir::Node& n) { return keep(n, operands(n)); }

ir::Node* Rebuilder::keep(const ir::Node& n, std::vector<ir::Value*> inputs) {
  std::vector<ir::Type> types;
  for (const ir::Value* v : n.outputs) types.push_back(v->type);
  ir::Node* m = g_.add_node(n.op, std::move(inputs), n.attrs, std::move(types), n.loc);
  for (const auto& r : n.regions) m->regions.push_back(std::make_unique<ir::Graph>(clone(*r)));
  for (size_t k = 0; k < n.outputs.size(); ++k) map_[slot(n.outputs[k])] = m->outputs[k];
  return m;
}

ir::Node* Rebuilder::emit(OpId op, std::vector<ir::Value*> inputs, std::vector<ir::Attr> attrs) {
  std::vector<ir::Type> types = ir::infer_types(op, types_of(inputs), attrs);
  return g_.add_node(op, std::move(inputs), std::move(attrs), std::move(types));
}

ir::Value* Rebuilder::number(const AttrValue& value, const ir::Type& t) {
  return g_.add_node(OpId::Constant, {}, {{"value", value}}, {t})->outputs[0];
}

ir::Value* Rebuilder::data(const Tensor& value, const ir::Type& t) {
  return g_.add_node(OpId::Constant, {}, {{"data", ir::encode_constant(value)}}, {t})->outputs[0];
}

ir::Graph Rebuilder::finish() {
  std::vector<ir::Value*> outs;
  for (const ir::Value* v : old_.outputs()) outs.push_back((*this)(v));
  g_.set_outputs(std::move(outs));
  return std::move(g_);
}

// ---- helpers ----

std::optional<std::vector<ir::Type>> try_infer(OpId op, const std::vector<ir::Type>& inputs,
                                               const std::vector<ir::Attr>& attrs) {
  try {
    return ir::infer_types(op, inputs, attrs);
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::vector<ir::Type> types_of(const std::vector<ir::Value*>& values) {
  std::vector<ir::Type> t;
  for (const ir::Value* v : values) t.push_back(v->type);
  return t;
}

std::optional<double> constant_number(const ir::Value* v, const MemoryInfo& mem) {
  const ir::Node* p = v->producer;
  if (!p || p->op != OpId::Constant) return std::nullopt;
  if (const ir::Attr* a = p->attr("value")) {
    if (const auto* b = std::get_if<bool>(&a->value)) return *b ? 1.0 : 0.0;
    if (const auto* i = std::get_if<int64_t>(&a->value)) return double(*i);
    if (const auto* d = std::get_if<double>(&a->value)) return *d;
    return std::nullopt;
  }
  // A data constant can be the destination of a write-back: then its value depends on when
  // it is read.
  const ir::Type& t = v->type;
  int64_t numel = 1;
  for (int64_t s : t.sizes) numel *= s;
  if (numel != 1 || !t.device.is_cpu() || mem.written(mem.cls(v))) return std::nullopt;
  try {
    return ir::decode_constant(*p).item().to_double();
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::optional<double> attr_number(const ir::Node& n, std::string_view name, double dflt) {
  const ir::Attr* a = n.attr(name);
  if (!a) return dflt;
  if (const auto* b = std::get_if<bool>(&a->value)) return *b ? 1.0 : 0.0;
  if (const auto* i = std::get_if<int64_t>(&a->value)) return double(*i);
  if (const auto* d = std::get_if<double>(&a->value)) return *d;
  return std::nullopt;
}

}  // namespace kiln::passes::canon
