// Speculation past graph breaks: a node's graph and one child's as one graph, and the
// predictor that picks the child.
//
// A data-dependent branch cuts a trace into graphs, and each graph's kernels are fused only
// among themselves: `if (x.sum() > 0) return x * 2;` reads x once for the sum and again for
// the product. When the guard's outcome can be predicted (Predictor), the predicted child's
// graph can run before the guard is read, as part of the node's program: the passes then fuse
// across the break (one pass over x for both). That is only sound when the child's work can be
// dropped unseen, so neither graph may write into anything, and both must be compiled graphs
// (the reference executor gains nothing from merging).
#include "speculate.h"

#include <algorithm>
#include <unordered_map>

namespace kiln::detail {

namespace {

bool writes(const ir::Graph& g) {
  return std::any_of(g.nodes().begin(), g.nodes().end(), [](const auto& n) { return n->op == OpId::Copy; });
}
bool has_regions(const ir::Graph& g) {
  return std::any_of(g.nodes().begin(), g.nodes().end(), [](const auto& n) { return !n->regions.empty(); });
}

// Appends g's nodes to `out`, their operands through `map` (which gains their outputs).
void append_nodes(const ir::Graph& g, ir::Graph& out, std::unordered_map<const ir::Value*, ir::Value*>& map) {
  for (const auto& n : g.nodes()) {
    std::vector<ir::Value*> args;
    for (const ir::Value* v : n->inputs) args.push_back(map.at(v));
    std::vector<ir::Type> types;
    for (const ir::Value* v : n->outputs) types.push_back(v->type);
    ir::Node* m = out.add_node(n->op, std::move(args), n->attrs, std::move(types), n->loc);
    for (size_t k = 0; k < n->outputs.size(); ++k) map[n->outputs[k]] = m->outputs[k];
  }
}

}  // namespace

int Predictor::guess() const {
  uint32_t e = table[history.load(std::memory_order_relaxed)].load(std::memory_order_relaxed);
  uint32_t child = e & 0xff;
  return child < kPaths - 1 && (e >> 8) >= kConfident ? int(child) : -1;
}

void Predictor::observe(size_t child) {
  const uint32_t c = uint32_t(std::min<size_t>(child, kPaths - 1));
  const uint32_t h = history.load(std::memory_order_relaxed);
  const uint32_t e = table[h].load(std::memory_order_relaxed);
  const uint32_t count = (e & 0xff) == c ? std::min<uint32_t>((e >> 8) + 1, 255) : 0;
  table[h].store(c | count << 8, std::memory_order_relaxed);
  history.store((h % kPaths) * kPaths + c, std::memory_order_relaxed);
}

std::unique_ptr<Speculation> speculate(TreeNode& n, size_t child, const CompileGraph& compile) {
  auto no = [&](std::string why) {
    n.speculation_note = "not speculated: " + why;
    return nullptr;
  };
  if (n.exit == Exit::Split) return no("a graph cut for length: merging it with the next would undo the cut");
  if (n.exit != Exit::HostValue && n.exit != Exit::Print) return no("the next graph's inputs depend on the break's result");
  if (child >= Predictor::kPaths - 1) return no("the guard has led to more paths than are predicted");
  const TreeNode& c = *n.children.at(child).second;
  if (!n.compiled || !c.compiled) return no("a graph runs on the reference executor");
  if (!n.written.empty() || !c.written.empty() || writes(n.graph) || writes(c.graph))
    return no("a graph writes into a tensor (the next graph's work could not be dropped)");
  if (has_regions(n.graph) || has_regions(c.graph)) return no("a graph holds a control op");
  if (c.graph.outputs().empty()) return no("the next graph returns nothing");

  auto s = std::make_unique<Speculation>();
  s->child = &c;
  s->graph = ir::Graph(n.graph.name() + "_" + c.graph.name());
  std::unordered_map<const ir::Value*, ir::Value*> map;
  // One input per distinct source; both graphs may read the same argument or earlier value.
  auto input = [&](Ref r, const ir::Value* v) -> ir::Value* {
    for (size_t i = 0; i < s->inputs.size(); ++i)
      if (s->inputs[i] == r) return s->graph.inputs()[i]->type == v->type ? s->graph.inputs()[i] : nullptr;
    s->inputs.push_back(r);
    return s->graph.add_input("s" + std::to_string(s->inputs.size() - 1), v->type);
  };
  for (size_t i = 0; i < n.graph.inputs().size(); ++i)
    if (!(map[n.graph.inputs()[i]] = input(n.inputs[i], n.graph.inputs()[i]))) return no("an input's type differs");
  append_nodes(n.graph, s->graph, map);
  for (size_t i = 0; i < c.graph.inputs().size(); ++i) {
    const ir::Value* v = c.graph.inputs()[i];
    const Ref r = c.inputs[i];
    // A value the node hands over is the node's own value in the merged graph.
    auto slot = std::find(n.outputs.begin(), n.outputs.end(), r.index);
    if (r.space == Ref::Space::Value && slot != n.outputs.end()) {
      ir::Value* mine = map.at(n.graph.outputs()[size_t(slot - n.outputs.begin())]);
      if (!(mine->type == v->type)) return no("a handed-over value's type differs");
      map[v] = mine;
    } else if (!(map[v] = input(r, v))) {
      return no("an input's type differs");
    }
  }
  append_nodes(c.graph, s->graph, map);
  std::vector<ir::Value*> outs;
  for (const ir::Value* v : n.graph.outputs()) outs.push_back(map.at(v));
  s->own_outputs = outs.size();
  for (const ir::Value* v : c.graph.outputs()) outs.push_back(map.at(v));
  s->graph.set_outputs(std::move(outs));
  try {
    s->compiled = compile(s->graph);
  } catch (const Error& e) {
    return no(std::string("the merged graph did not compile: ") + e.what());
  }
  if (!s->compiled) return no("the merged graph did not compile");
  auto kernels = [](size_t k) { return std::to_string(k) + (k == 1 ? " kernel" : " kernels"); };
  s->note = kernels(s->compiled->stats().kernels) + " (" +
            kernels(n.compiled->stats().kernels + c.compiled->stats().kernels) + " apart)";
  return s;
}

}  // namespace kiln::detail
