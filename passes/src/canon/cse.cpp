// cse: common-subexpression elimination.
//
// A node equal to an earlier one (same op, printed attributes, operands and output types; for
// constants their value or data) is dropped and its outputs replaced by the earlier node's.
//
// Memory decides what "equal" means. A node reads its operands' memory when it runs, so two
// equal reads with a write into the same memory between them differ: the key of a non-view node
// carries, per operand, how many writes its alias class had seen so far. Views only compute
// where elements are, never read them, so views are merged freely. A non-view result whose
// memory is ever written is never merged (the two results would become one buffer), nor are two
// results that are both returned (the caller would get one buffer twice). Write-backs and
// conds are effects and never merged.
#include <unordered_map>

#include "rewrite.h"

namespace kiln::passes {

namespace {

std::string key_of(const ir::Node& n, const std::vector<ir::Value*>& operands, const std::vector<int>& writes_seen,
                   const canon::MemoryInfo& mem, bool view) {
  std::string k(ir::op_info(n.op).name);
  k += "(";
  for (size_t i = 0; i < operands.size(); ++i) {
    k += "%" + std::to_string(operands[i]->id);
    if (!view) k += "@" + std::to_string(writes_seen[size_t(mem.cls(n.inputs[i]))]);
    k += ",";
  }
  k += ")";
  for (const ir::Attr& a : n.attrs) k += " " + a.name + "=" + ir::attr_str(a.value);
  for (const ir::Value* v : n.outputs) k += " : " + v->type.str() + (v->type.wrapped ? " wrapped" : "");
  return k;
}

}  // namespace

int common_subexpr(ir::Graph& g) {
  canon::MemoryInfo mem(g);
  canon::Rebuilder rb(g);
  std::unordered_map<std::string, const ir::Node*> seen;
  std::vector<int> writes_seen(size_t(mem.num_classes()), 0);
  auto returned = [&](const ir::Node& x) {
    for (const ir::Value* v : x.outputs)
      if (mem.has_output(mem.cls(v))) return true;
    return false;
  };
  int merged = 0;
  for (const auto& np : g.nodes()) {
    const ir::Node& n = *np;
    bool view = canon::is_view(n);
    bool candidate = n.op != OpId::Copy && n.op != OpId::Cond && n.regions.empty() && !n.outputs.empty();
    if (candidate && !view)
      for (const ir::Value* v : n.outputs) candidate = candidate && !mem.written(mem.cls(v));
    if (candidate) {
      std::vector<ir::Value*> operands = rb.operands(n);
      std::string key = key_of(n, operands, writes_seen, mem, view);
      auto [it, fresh] = seen.emplace(key, &n);
      const ir::Node& m = *it->second;
      bool both_returned = !view && returned(n) && returned(m);
      if (!fresh && !both_returned) {
        for (size_t k = 0; k < n.outputs.size(); ++k) rb.replace(n.outputs[k], rb(m.outputs[k]));
        ++merged;
        continue;
      }
    }
    rb.keep(n);
    for (int c : mem.writes_of(n)) ++writes_seen[size_t(c)];
  }
  if (!merged) return 0;
  g = rb.finish();
  return merged;
}

}  // namespace kiln::passes
