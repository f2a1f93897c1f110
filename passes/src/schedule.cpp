// Scheduling facts shared by fusion and lowering (see schedule.h).
#include "schedule.h"

#include <algorithm>
#include <map>

#include "kiln/ir/attrs.h"

namespace kiln::passes::detail {

namespace {
int64_t attr_int(const ir::Node& n, std::string_view name, int64_t dflt) {
  const ir::Attr* a = n.attr(name);
  if (!a) return dflt;
  if (auto* i = std::get_if<int64_t>(&a->value)) return *i;
  return dflt;
}
int norm_dim(int64_t d, size_t rank) { return int(d < 0 ? d + int64_t(rank) : d); }
}  // namespace

NodeClass classify(const ir::Node& n) {
  switch (n.op) {
    case OpId::Constant:
      return n.attr("data") ? NodeClass::Data : NodeClass::Free;
    case OpId::Iota:  // (a buffer of indices, read through views like a constant's)
      return NodeClass::Data;
    case OpId::Cond:
      return NodeClass::Control;
    case OpId::Contiguous:
    case OpId::Clone:
    case OpId::Copy:
      return NodeClass::Elementwise;
    default:
      break;
  }
  switch (ir::op_info(n.op).category) {
    case ir::Category::View: return NodeClass::Free;
    case ir::Category::Elementwise: return NodeClass::Elementwise;
    case ir::Category::Reduction: return NodeClass::Reduction;
    case ir::Category::Control: return NodeClass::Control;
    case ir::Category::Opaque: return NodeClass::Opaque;
  }
  return NodeClass::Opaque;
}

ViewKey view_key(const ir::Value* v) {
  ViewKey k;
  k.sizes = v->type.sizes;
  k.strides = v->type.strides;
  // Walk up to the root, summing the element offsets the views add.
  const ir::Value* cur = v;
  while (cur->producer) {
    const ir::Node& n = *cur->producer;
    if (n.op == OpId::Copy) {
      cur = n.inputs[0];
      continue;
    }
    if (ir::op_info(n.op).category != ir::Category::View) break;
    const ir::Type& in = n.inputs[0]->type;
    auto stride = [&](int64_t d) { return in.strides[size_t(norm_dim(d, in.sizes.size()))]; };
    switch (n.op) {
      case OpId::Slice: {
        ir::attrs::Slice a = ir::decode<OpId::Slice>(n);
        int d = norm_dim(a.dim, in.sizes.size());
        int64_t size = in.sizes[size_t(d)], start = a.start;
        if (start < 0) start += size;
        start = std::clamp<int64_t>(start, 0, size);
        k.offset += start * stride(d);
        break;
      }
      case OpId::Select: {
        ir::attrs::Select a = ir::decode<OpId::Select>(n);
        int d = norm_dim(a.dim, in.sizes.size());
        int64_t index = a.index;
        if (index < 0) index += in.sizes[size_t(d)];
        k.offset += index * stride(d);
        break;
      }
      case OpId::Diagonal: {
        ir::attrs::Diagonal a = ir::decode<OpId::Diagonal>(n);
        k.offset += a.offset >= 0 ? a.offset * stride(a.dim2) : -a.offset * stride(a.dim1);
        break;
      }
      case OpId::AsStrided: {
        if (std::optional<int64_t> off = ir::decode<OpId::AsStrided>(n).offset) {
          // An absolute storage offset: what came below it no longer matters.
          k.offset += *off;
          k.storage_relative = true;
          cur = ir::alias_root(n.inputs[0]);
          k.root = cur;
          return k;
        }
        break;
      }
      default:
        break;
    }
    cur = n.inputs[0];
  }
  k.root = cur;
  return k;
}

ReduceInfo reduce_info(const ir::Node& n) {
  ReduceInfo r;
  size_t rank = n.inputs[0]->type.sizes.size();
  const ir::Attr* keep = n.attr("keepdim");
  r.keepdim = keep && std::holds_alternative<bool>(keep->value) && std::get<bool>(keep->value);
  if (ir::has_trait(n.op, ir::kRowOp)) {
    r.full_output = true;
    r.keepdim = true;
    if (rank > 0) r.dims = {norm_dim(attr_int(n, "dim", 0), rank)};
    return r;
  }
  if (const ir::Attr* dims = n.attr("dims")) {
    // (a 0-d tensor's dim 0 or -1 is its one element: a reduction over all of its no dims)
    if (rank > 0)
      for (int64_t d : std::get<IntList>(dims->value)) r.dims.push_back(norm_dim(d, rank));
  } else if (const ir::Attr* dim = n.attr("dim"); dim && std::holds_alternative<int64_t>(dim->value)) {
    if (rank > 0) r.dims = {norm_dim(std::get<int64_t>(dim->value), rank)};
  }
  if (r.dims.empty()) {
    r.all = true;
    for (size_t d = 0; d < rank; ++d) r.dims.push_back(int(d));
  }
  std::sort(r.dims.begin(), r.dims.end());
  r.dims.erase(std::unique(r.dims.begin(), r.dims.end()), r.dims.end());
  return r;
}

bool aligned_result(const ir::Node& n) {
  ReduceInfo r = reduce_info(n);
  if (r.keepdim || r.full_output) return true;
  for (size_t j = 0; j < r.dims.size(); ++j)
    if (r.dims[j] != int(j)) return false;
  return true;
}

bool broadcasts_to(const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
  if (from.size() > to.size()) return false;
  size_t lead = to.size() - from.size();
  for (size_t k = 0; k < from.size(); ++k)
    if (from[k] != 1 && from[k] != to[lead + k]) return false;
  return true;
}

int64_t numel(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

Analysis::Analysis(const ir::Graph& graph) : g(graph) {
  for (const auto& n : g.nodes()) nodes.push_back(n.get());
  value_facts.resize(g.num_values());
  auto note = [&](const ir::Value* v) {
    ValueFacts& f = value_facts[size_t(v->id)];
    f.defined_by = v->producer && classify(*v->producer) != NodeClass::Free ? index_of(v->producer) : -1;
    f.producer = producer(v);
    f.root = ir::alias_root(v);
  };
  for (const ir::Value* v : g.inputs()) note(v);
  for (const ir::Node* n : nodes)
    for (const ir::Value* v : n->outputs) note(v);
  preds.resize(nodes.size());
  is_output_root.assign(nodes.size(), false);
  // Memory order per alias root: readers before a write run before it; the write runs before
  // every later reader and writer.
  struct RootState {
    int last_write = -1;
    std::vector<int> readers_since;
  };
  std::map<const ir::Value*, RootState> roots;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const ir::Value* v = n.inputs[k];
      users[v].push_back(int(i));
      int p = producer(v);
      if (p >= 0) preds[i].push_back(p);
    }
    if (classify(n) == NodeClass::Free) continue;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (n.op == OpId::Copy && k == 0) continue;
      RootState& st = roots[ir::alias_root(n.inputs[k])];
      if (st.last_write >= 0) preds[i].push_back(st.last_write);
      st.readers_since.push_back(int(i));
    }
    if (n.op == OpId::Copy) {
      RootState& st = roots[ir::alias_root(n.inputs[0])];
      for (int r : st.readers_since)
        if (r != int(i)) preds[i].push_back(r);
      if (st.last_write >= 0) preds[i].push_back(st.last_write);
      st.readers_since.clear();
      st.last_write = int(i);
    }
  }
  for (auto& p : preds) {
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
  }
  for (const ir::Value* out : g.outputs()) {
    const ir::Value* r = ir::alias_root(out);
    if (r->producer) is_output_root[size_t(index_of(r->producer))] = true;
  }
}

int Analysis::producer(const ir::Value* v) const {
  // Through views and copies: a view's reader depends on whoever made (or last wrote) its memory.
  while (v->producer) {
    const ir::Node* n = v->producer;
    NodeClass c = classify(*n);
    if (c != NodeClass::Free) return index_of(n);
    if (n->op == OpId::Constant) return -1;
    v = n->inputs[0];
  }
  return -1;
}

bool Analysis::is_graph_output(const ir::Value* v) const {
  for (const ir::Value* o : g.outputs())
    if (o == v) return true;
  return false;
}

const ir::Value* Analysis::written_root(int node) const {
  const ir::Node& n = *nodes[size_t(node)];
  return n.op == OpId::Copy ? ir::alias_root(n.inputs[0]) : nullptr;
}

}  // namespace kiln::passes::detail
