// dce: dead-code elimination.
//
// A node is dead when nothing needs its outputs and it has no effect. The walk goes backwards,
// so a chain of dead nodes dies in one run: a node's operands are marked needed only when the
// node itself stays.
//
// Effects are writes. A write-back (`copy`) stays when its destination's memory is observable
// after it: the memory of a graph input (the caller sees the write), of a graph output, or
// memory that a later surviving node reads. A cond whose branches contain a write-back may write
// into its operands, so it stays. Alias classes come from MemoryInfo (rewrite.h), which groups
// every value that may share memory.
#include <algorithm>
#include <unordered_set>

#include "rewrite.h"

namespace kiln::passes {

std::vector<bool> canon::live_nodes(const ir::Graph& g, const MemoryInfo& mem) {
  const auto& nodes = g.nodes();
  std::unordered_set<const ir::Value*> needed(g.outputs().begin(), g.outputs().end());
  // Classes read by a surviving later node or returned: their writes are observable.
  std::unordered_set<int> observed;
  for (const ir::Value* v : g.outputs()) observed.insert(mem.cls(v));
  std::vector<bool> live(nodes.size(), false);
  for (size_t i = nodes.size(); i-- > 0;) {
    const ir::Node& n = *nodes[i];
    bool keep = false;
    for (const ir::Value* v : n.outputs) keep = keep || needed.count(v);
    if (n.op == OpId::Copy) {
      int c = mem.cls(n.inputs[0]);
      keep = keep || mem.has_input(c) || observed.count(c);
    } else if (n.op == OpId::Cond) {
      keep = keep || canon::regions_write(n);
    }
    live[i] = keep;
    if (!keep) continue;
    for (const ir::Value* v : n.inputs) {
      needed.insert(v);
      observed.insert(mem.cls(v));
    }
  }
  return live;
}

int dead_code(ir::Graph& g) {
  canon::MemoryInfo mem(g);
  const auto& nodes = g.nodes();
  const std::vector<bool> live = canon::live_nodes(g, mem);
  const int dead = int(std::count(live.begin(), live.end(), false));
  if (!dead) return 0;
  canon::Rebuilder rb(g);
  for (size_t i = 0; i < nodes.size(); ++i)
    if (live[i]) rb.keep(*nodes[i]);
  g = rb.finish();
  return dead;
}

}  // namespace kiln::passes
