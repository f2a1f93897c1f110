// explain(): what a compiled function has seen (its trace trees, breaks, guards, recompiles and
// budget), and its text.
#include <algorithm>
#include <set>
#include <sstream>

#include "engine.h"

namespace kiln {
namespace detail {

namespace {

// Adds one signature's tree to `ex`: every graph (alternatives included), every break and its
// guard with the values seen, every size guard.
void explain_entry(const Engine::State::Entry& e, Explanation& ex) {
  if (!e.eager_reason.empty() && ex.eager_reason.empty()) ex.eager_reason = e.eager_reason;
  if (!e.root) return;
  std::vector<const TreeNode*> stack;
  for (const TreeNode* m = e.root.get(); m; m = m->alternative.get()) stack.push_back(m);
  std::reverse(stack.begin(), stack.end());
  std::set<std::string> seen_breaks;
  while (!stack.empty()) {
    const TreeNode* n = stack.back();
    stack.pop_back();
    ex.graphs.push_back({ir::print(n->graph), count_ops(n->graph), backend_text(*n)});
    if (n->backward) {
      // The partition: the forward returns, after its results, the values the backward reads.
      const BackwardPlan& b = *n->backward;
      size_t saved = 0;
      for (Ref r : b.sources) saved += r.space == Ref::Space::Value ? 1 : 0;
      ex.graphs.push_back({ir::print(b.node->graph), count_ops(b.node->graph),
                           "the backward of " + n->graph.name() + " (CompiledFunctionBackward, run by backward() after "
                           "the call): " + std::to_string(saved) + " forward values saved for it, " +
                               std::to_string(b.saved_bytes) + " bytes; " + backend_text(*b.node)});
    }
    for (const SizeGuard& g : n->size_guards)
      ex.size_guards.push_back(n->graph.name() + ": " + describe_guard(g) + " (" + g.where + ")");
    if (!n->opaque.empty()) ex.size_guards.push_back(n->graph.name() + ": runs only at its traced sizes: " + n->opaque);
    if (n->exit == Exit::Return) continue;
    if (seen_breaks.insert(n->reason + "@" + n->where).second) ex.breaks.push_back({n->reason, n->where});
    std::string g = n->reason + " at " + n->where;
    if (n->exit == Exit::Print) {
      g += ": printed on every call (no guard)";
    } else if (n->exit == Exit::Split) {
      g += ": no guard";
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
    for (auto it = n->children.rbegin(); it != n->children.rend(); ++it) {
      std::vector<const TreeNode*> alts;
      for (const TreeNode* m = it->second.get(); m; m = m->alternative.get()) alts.push_back(m);
      stack.insert(stack.end(), alts.rbegin(), alts.rend());
    }
  }
}

void explain_function(const Engine::State& s, Explanation& ex) {
  if (s.log_dropped)
    ex.recompiles.push_back("(" + std::to_string(s.log_dropped) + " earlier lines not kept)");
  ex.recompiles.insert(ex.recompiles.end(), s.log.begin(), s.log.end());
  ex.budget = s.budget_text();
}

}  // namespace

Explanation Engine::explain(std::span<const CallArg> args) const {
  const State& s = *state_;
  Explanation ex;
  ex.stats = stats();
  std::shared_lock lock(s.mu);
  explain_function(s, ex);
  Key key = signature(args, s.dynamic);
  auto it = s.cache.find(key);
  ex.signature = signature_text(args);
  if (it != s.cache.end()) explain_entry(*it->second, ex);
  return ex;
}

Explanation Engine::explain() const {
  const State& s = *state_;
  Explanation ex;
  ex.stats = stats();
  std::shared_lock lock(s.mu);
  explain_function(s, ex);
  ex.signature = "every signature (" + std::to_string(s.cache.size()) + ")";
  // In the order they were first traced would need a clock; by signature text is stable.
  std::vector<const State::Entry*> entries;
  for (const auto& [k, e] : s.cache) entries.push_back(e.get());
  std::sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->signature < b->signature; });
  for (const State::Entry* e : entries) {
    ex.signatures.push_back(e->signature + (e->generic ? " (dynamic dims)" : ""));
    explain_entry(*e, ex);
  }
  return ex;
}

}  // namespace detail

std::string Explanation::str() const {
  std::ostringstream o;
  o << "signature " << signature << "\n";
  for (const auto& sig : signatures) o << "  " << sig << "\n";
  if (!eager_reason.empty()) o << "runs eagerly: " << eager_reason << "\n";
  o << graphs.size() << " graph" << (graphs.size() == 1 ? "" : "s") << ", " << breaks.size() << " graph break"
    << (breaks.size() == 1 ? "" : "s") << "\n";
  for (size_t i = 0; i < breaks.size(); ++i) o << "break " << i << ": " << breaks[i].reason << " at " << breaks[i].where << "\n";
  for (size_t i = 0; i < guards.size(); ++i) o << "guard " << i << ": " << guards[i] << "\n";
  for (size_t i = 0; i < size_guards.size(); ++i) o << "size guard " << i << ": " << size_guards[i] << "\n";
  for (size_t i = 0; i < graphs.size(); ++i) {
    o << "graph " << i << " (" << graphs[i].ops << " ops):\n" << ir::shorten_constants(graphs[i].text);
    if (!graphs[i].backend.empty()) o << "  runs on: " << graphs[i].backend << "\n";
  }
  o << "traces of this function:\n";
  for (const auto& r : recompiles) o << "  " << r << "\n";
  if (!budget.empty()) o << "recompile budget: " << budget << "\n";
  o << "stats: calls " << stats.calls << ", hits " << stats.hits << ", misses " << stats.misses << ", guard failures "
    << stats.guard_failures << ", compiles " << stats.compiles << ", breaks " << stats.breaks << ", eager calls "
    << stats.eager_calls << " (past the budget " << stats.budget_eager_calls << "), speculated " << stats.speculated
    << ", misspeculated " << stats.misspeculated << "\n";
  return o.str();
}

std::ostream& operator<<(std::ostream& os, const Explanation& e) { return os << e.str(); }

}  // namespace kiln
