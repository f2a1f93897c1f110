// The fusion pass: groups the graph's nodes into kernels.
//
// Greedy, in program order. Each scheduled node starts as its own group and joins the group of
// an operand's producer when the rules below allow it; then groups that are siblings (they read
// the same value) merge. A group becomes one kernel (lower.cpp builds its loop nest and body).
//
// Legality (a merged group must still be one loop nest that computes the same thing):
// - elementwise groups merge when one's iteration space broadcasts into the other's;
// - an elementwise group joins a reduction group when its space broadcasts into the reduction's
//   operand shape (a prologue feeding the reduction, or an epilogue on the reduced rows, as in
//   softmax and layernorm); reductions merge when they reduce the same dims of the same shape;
//   a reduction that drops its dims (keepdim=false) ends its kernel: nothing in it reads it;
// - an opaque op that takes an epilogue (matmul family) absorbs elementwise consumers of its
//   output over the output's shape; other opaque ops and cond nodes stay alone; a reduction
//   that is the epilogue's only reader takes it over as its prologue (hand_epilogue_over);
// - merging never makes the kernel order cyclic (no path between the two groups through a
//   third), and a kernel that writes memory (a copy) reads that memory only before the write,
//   through the very view it writes, and only where it writes each element once (not a write
//   broadcast over a loop), so reading and writing element by element is sound.
// The cost model (thresholds below) refuses merges that are legal but slower.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

#include "lower.h"
#include "schedule.h"

namespace kiln::passes {

namespace {

using namespace detail;

// ---- cost model ----
// Fusing a group computed over a smaller shape into a kernel over a larger one recomputes its
// values once per broadcast element. Cheap work (arithmetic, comparisons, selects) is always
// fused: the backends hoist loop-invariant values out of the inner loops, and even recomputed,
// a few flops per element cost less than writing and re-reading a temporary. Expensive work
// (transcendentals: tens of cycles per element) is recomputed at most this many times per
// element it would otherwise compute once, i.e. never.
constexpr int64_t kMaxExpensiveRecompute = 1;
// A kernel's body values live in registers in the backends; past this many ops a loop body
// spills, and compile time grows with it.
constexpr size_t kMaxKernelNodes = 256;
// Distinct buffers a kernel reads: each is a pointer and a stream of loads in the inner loop.
constexpr size_t kMaxKernelInputs = 24;
// Horizontal fusion: the refused sibling merges a group tries before it gives up (each try
// checks the merged group's soundness and the graph's paths; without a bound, a value read by
// thousands of groups that cannot merge made the pass quadratic).
constexpr int kMaxSiblingFailures = 16;

struct Group {
  std::vector<int> nodes;  // sorted
  NodeClass kind = NodeClass::Elementwise;
  std::vector<int64_t> space;  // elementwise: output shape; reduction: the reduced operand's shape
  std::vector<int> red_dims;
  int opaque = -1;  // the opaque node of an Opaque group
  bool expensive = false;
  bool alive = true;
  // Set by sound() when it accepted exactly these nodes: the alias roots they read from memory
  // (sorted, distinct) and whether one of them is a write-back. A group made any other way
  // (a single node, a split) has `checked` false.
  bool checked = false;
  bool writes = false;
  std::vector<const ir::Value*> externals;
};

class Fuser {
 public:
  Fuser(const Analysis& a, bool exact_paths)
      : a_(a), exact_paths_(exact_paths), group_of_(a.nodes.size(), -1), succ_(a.nodes.size()) {
    const char* e = std::getenv("KILN_FUSE_CROSS_CHECK");
    cross_check_ = e && *e && std::string_view(e) != "0";
    for (size_t i = 0; i < a.nodes.size(); ++i)
      for (int p : a.preds[i]) succ_[size_t(p)].push_back(int(i));
  }

  // The kernels' node lists in a valid order; nullopt when the fast path search let a cycle
  // through (path_through_other).
  std::optional<std::vector<std::vector<int>>> run(bool fusion) {
    for (size_t i = 0; i < a_.nodes.size(); ++i) {
      const ir::Node& n = *a_.nodes[i];
      NodeClass c = classify(n);
      if (c == NodeClass::Free || c == NodeClass::Data) continue;
      int g = make_group(int(i), c);
      if (!fusion) continue;
      // Producers of the operands this node reads directly (not through a view: a viewed value
      // is materialised and read through its index).
      std::vector<int> cands;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        if (n.op == OpId::Copy && k == 0) continue;
        const ir::Value* v = n.inputs[k];
        if (!v->producer || classify(*v->producer) == NodeClass::Free || classify(*v->producer) == NodeClass::Data)
          continue;
        int pg = group_of_[size_t(a_.index_of(v->producer))];
        if (pg >= 0 && std::find(cands.begin(), cands.end(), pg) == cands.end()) cands.push_back(pg);
      }
      std::sort(cands.begin(), cands.end(), std::greater<>());
      for (int cg : cands) {
        if (!groups_[size_t(cg)].alive || cg == g) continue;
        if (hand_epilogue_over(cg, g)) continue;
        if (try_merge(cg, g)) g = cg;
      }
    }
    if (fusion) merge_siblings();
    return ordered();
  }

 private:
  int make_group(int node, NodeClass c) {
    const ir::Node& n = *a_.nodes[size_t(node)];
    Group gr;
    gr.nodes = {node};
    gr.kind = c;
    gr.expensive = ir::has_trait(n.op, ir::kCostly);
    if (c == NodeClass::Reduction) {
      gr.space = n.inputs[0]->type.sizes;
      gr.red_dims = reduce_info(n).dims;
    } else if (c == NodeClass::Elementwise || c == NodeClass::Opaque) {
      gr.space = n.outputs[0]->type.sizes;
      if (c == NodeClass::Opaque) gr.opaque = node;
    }
    groups_.push_back(std::move(gr));
    group_of_[size_t(node)] = int(groups_.size() - 1);
    return int(groups_.size() - 1);
  }

  // Whether fusing group `small` (over space `from`) into a kernel over `to` is worth it.
  static bool recompute_ok(const Group& small, const std::vector<int64_t>& to) {
    if (!small.expensive) return true;
    int64_t f = numel(small.space) == 0 ? 1 : numel(to) / std::max<int64_t>(numel(small.space), 1);
    return f <= kMaxExpensiveRecompute;
  }
  // A space that is per-row of a reduction over `red` on `s` (1 on every reduced dim): its values
  // are computed once per row, whatever the row length.
  static bool per_row(const std::vector<int64_t>& space, const std::vector<int64_t>& s, const std::vector<int>& red) {
    if (space.size() != s.size()) return false;
    for (int d : red)
      if (space[size_t(d)] != 1) return false;
    return broadcasts_to(space, s);
  }

  // The merged group's shape, or false when the kinds or spaces cannot share one loop nest.
  bool combine(const Group& x, const Group& y, Group& out) const {
    if (x.kind == NodeClass::Control || y.kind == NodeClass::Control) return false;
    if (x.kind == NodeClass::Opaque && y.kind == NodeClass::Opaque) return false;
    out = x;
    out.nodes.resize(x.nodes.size() + y.nodes.size());
    std::merge(x.nodes.begin(), x.nodes.end(), y.nodes.begin(), y.nodes.end(), out.nodes.begin());
    out.expensive = x.expensive || y.expensive;
    if (x.kind == NodeClass::Opaque || y.kind == NodeClass::Opaque) {
      const Group& op = x.kind == NodeClass::Opaque ? x : y;
      const Group& ep = x.kind == NodeClass::Opaque ? y : x;
      if (ep.kind != NodeClass::Elementwise || !ir::has_trait(a_.nodes[size_t(op.opaque)]->op, ir::kTakesEpilogue))
        return false;
      // An epilogue computes on the op's result; writes into other memory stay in their own kernel.
      for (int i : ep.nodes)
        if (a_.nodes[size_t(i)]->op == OpId::Copy) return false;
      if (ep.nodes.front() < op.opaque || !broadcasts_to(ep.space, op.space) || !recompute_ok(ep, op.space))
        return false;
      out.kind = NodeClass::Opaque;
      out.opaque = op.opaque;
      out.space = op.space;
      return true;
    }
    if (x.kind == NodeClass::Reduction && y.kind == NodeClass::Reduction) {
      if (x.space != y.space || x.red_dims != y.red_dims) return false;
      return true;
    }
    if (x.kind == NodeClass::Reduction || y.kind == NodeClass::Reduction) {
      const Group& red = x.kind == NodeClass::Reduction ? x : y;
      const Group& ew = x.kind == NodeClass::Reduction ? y : x;
      if (!broadcasts_to(ew.space, red.space)) return false;
      if (!per_row(ew.space, red.space, red.red_dims) && !recompute_ok(ew, red.space)) return false;
      out.kind = NodeClass::Reduction;
      out.space = red.space;
      out.red_dims = red.red_dims;
      return true;
    }
    // Both elementwise: the smaller space broadcasts into the larger.
    if (broadcasts_to(x.space, y.space)) {
      if (!recompute_ok(x, y.space)) return false;
      out.space = y.space;
      return true;
    }
    if (broadcasts_to(y.space, x.space)) {
      if (!recompute_ok(y, x.space)) return false;
      out.space = x.space;
      return true;
    }
    return false;
  }

  // Node-level rules of a candidate group: dropped-dim reductions end the kernel, an opaque op
  // reads its operands from memory, and memory a kernel writes is read only before the write,
  // through the same view. On success the group records what the checks found (checked,
  // writes, externals).
  //
  // `base`, where given, is a part of g that sound() accepted and that writes nothing, whose
  // nodes all come before g's others (a chain growing by its next node: the common merge). Its
  // nodes' checks cannot change, since no value made after them is their operand, so only the
  // new nodes are checked: a merge costs the size of what joins, not of the kernel.
  // KILN_FUSE_CROSS_CHECK=1 (the tests) checks every such merge in full too, and fails on a
  // disagreement.
  bool sound(Group& g, const Group* base) const {
    const bool ok = check(g, base);
    if (cross_check_ && base) {
      Group full = g;
      const bool full_ok = check(full, nullptr);
      auto verdict = [](bool sound, const Group& h) {
        return sound ? "sound, reading " + std::to_string(h.externals.size()) + " roots" : std::string("unsound");
      };
      KILN_CHECK(full_ok == ok && (!ok || full.externals == g.externals), "passes",
                 "fuse: internal error: the incremental soundness check of a group of ", g.nodes.size(),
                 " nodes says ", verdict(ok, g), ", the full one ", verdict(full_ok, full));
    }
    return ok;
  }
  bool check(Group& g, const Group* base) const {
    if (g.nodes.size() > kMaxKernelNodes) return false;  // (first: the checks below walk the nodes)
    struct Members {  // g.nodes is sorted
      const std::vector<int>& v;
      bool count(int i) const { return std::binary_search(v.begin(), v.end(), i); }
    } in{g.nodes};
    size_t first = 0;
    std::vector<const ir::Value*> external;
    if (base && base->checked && !base->writes && !base->nodes.empty() && base->nodes.size() < g.nodes.size() &&
        g.nodes[base->nodes.size() - 1] == base->nodes.back()) {
      first = base->nodes.size();
      for (size_t j = first; j < g.nodes.size() && first > 0; ++j)
        if (a_.nodes[size_t(g.nodes[j])]->op == OpId::Copy) first = 0;  // writes: check everything
      if (first > 0) external = base->externals;
    }
    bool writes = false;
    for (size_t j = first; j < g.nodes.size(); ++j) {
      const int i = g.nodes[j];
      const ir::Node& n = *a_.nodes[size_t(i)];
      writes = writes || n.op == OpId::Copy;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const ir::Value* v = n.inputs[k];
        const Analysis::ValueFacts& f = a_.facts(v);
        const int p = f.defined_by;
        bool inside = p >= 0 && in.count(p);
        // A view of a value computed here reads memory this kernel has not written yet.
        if (!inside && !(n.op == OpId::Copy && k == 0)) {
          int q = f.producer;
          if (q >= 0 && in.count(q)) return false;
          external.push_back(f.root);
        }
        if (!inside) continue;
        const ir::Node& pn = *a_.nodes[size_t(p)];
        if (i == g.opaque) return false;
        // A copy that broadcasts its source holds, in the body, the source's shape, not the
        // destination's: its readers read the written memory in a later kernel.
        if (pn.op == OpId::Copy && pn.inputs[1]->type.sizes != pn.outputs[0]->type.sizes) return false;
        if (classify(pn) == NodeClass::Reduction && !aligned_result(pn)) return false;
      }
    }
    std::sort(external.begin(), external.end());
    external.erase(std::unique(external.begin(), external.end()), external.end());
    if (external.size() > kMaxKernelInputs) return false;
    // Writes: each copy's destination view; reads of that root must precede the first write and
    // use the same view.
    if (writes) {
      for (int w : g.nodes) {
        const ir::Node& wn = *a_.nodes[size_t(w)];
        if (wn.op != OpId::Copy) continue;
        ViewKey dst = view_key(wn.inputs[0]);
        // Memory this kernel computes (a value's own store) written again through another view
        // (t = tanh(...); t.t().copy_(y)): element by element, the value's store at a later
        // iteration overwrites what the copy wrote at an earlier one.
        if (const ir::Node* rp = dst.root->producer; rp && classify(*rp) != NodeClass::Free &&
                                                       in.count(a_.index_of(rp)) && !(dst == view_key(dst.root)))
          return false;
        for (int r : g.nodes) {
          const ir::Node& rn = *a_.nodes[size_t(r)];
          for (size_t k = 0; k < rn.inputs.size(); ++k) {
            if (rn.op == OpId::Copy && k == 0) {
              if (r != w && a_.facts(rn.inputs[0]).root == dst.root && !(view_key(rn.inputs[0]) == dst)) return false;
              continue;
            }
            const ir::Value* v = rn.inputs[k];
            if (a_.facts(v).root != dst.root) continue;
            int p = a_.facts(v).defined_by;
            if (p >= 0 && in.count(p)) {
              // A body value made before the write no longer holds what its memory holds after it.
              if (r > w && p < w) return false;
              continue;
            }
            if (r > w || !(view_key(v) == dst) || repeats(wn.outputs[0]->type.sizes, g)) return false;
          }
        }
      }
    }
    g.checked = true;
    g.writes = writes;
    g.externals = std::move(external);
    return true;
  }

  // Whether a write of `sizes` in group g's loop space does not cover the space element for
  // element (a broadcast write: a[1, 3] written in a kernel over [5, 3], or a per-row write in a
  // reduction kernel). A read of the old values in the same kernel is then unsound: an
  // elementwise kernel writes the element at its first iteration and reads it again at the
  // next; a reduction kernel writes its per-row values before its last pass over the row, which
  // may read the memory again (a 0-d x written in place beside x.mean(), where(x > 0, x, y)).
  static bool repeats(const std::vector<int64_t>& sizes, const Group& g) {
    const size_t lead = g.space.size() - std::min(g.space.size(), sizes.size());
    for (size_t d = 0; d < g.space.size(); ++d)
      if ((d < lead ? 1 : sizes[d - lead]) == 1 && g.space[d] > 1) return true;
    return false;
  }

  // Whether `to` is reachable from `from` through some group other than the two.
  //
  // Every edge between nodes goes forward, so the fast search leaves out nodes after `to`'s last
  // and groups that start after it (without that, a search from an early group walked everything
  // after it, once per merge: quadratic in a long trace). That is not exact between groups: a
  // group holding an early and a late node can lead back to a group that ends before its late
  // node. A merge that this misses makes a cycle of kernels, which ordered() finds; fuse() then
  // groups the graph again with the exact search.
  bool path_through_other(int from, int to) const {
    const int last = exact_paths_ ? INT_MAX : groups_[size_t(to)].nodes.back();
    std::vector<int> stack;
    if (visited_.size() < groups_.size()) visited_.resize(groups_.size(), 0);
    ++search_;
    auto push_succs = [&](int g, bool first) {
      for (int i : groups_[size_t(g)].nodes)
        for (int s : succ_[size_t(i)]) {
          if (s > last) continue;
          int sg = group_of_[size_t(s)];
          if (sg < 0 || sg == g || groups_[size_t(sg)].nodes.front() > last) continue;
          if (first && sg == to) continue;  // a direct edge is internal after the merge
          if (visited_[size_t(sg)] == search_) continue;
          visited_[size_t(sg)] = search_;
          stack.push_back(sg);
        }
    };
    push_succs(from, true);
    while (!stack.empty()) {
      int g = stack.back();
      stack.pop_back();
      if (g == to) return true;
      push_succs(g, false);
    }
    return false;
  }

  // A reduction group `g` that reads an opaque op's epilogue (softmax(matmul(q, k) * scale))
  // takes the epilogue over as its prologue when nothing else reads it: the op's result is then
  // written once and read once by the reduction, where op + epilogue + reduction wrote and read
  // it again in between.
  bool hand_epilogue_over(int cg, int g) {
    const Group op = groups_[size_t(cg)];
    if (op.kind != NodeClass::Opaque || op.nodes.size() < 2 || groups_[size_t(g)].kind != NodeClass::Reduction)
      return false;
    std::vector<int> ep;
    for (int n : op.nodes)
      if (n != op.opaque) ep.push_back(n);
    const std::set<int> inside(ep.begin(), ep.end());
    const std::vector<int>& red = groups_[size_t(g)].nodes;
    Group e;
    e.kind = NodeClass::Elementwise;
    e.nodes = ep;
    e.space = op.space;
    for (int n : ep) {
      for (const ir::Value* v : a_.nodes[size_t(n)]->outputs)
        if (v->type.sizes != op.space) return false;
      for (int s : succ_[size_t(n)])
        if (!inside.count(s) && std::find(red.begin(), red.end(), s) == red.end()) return false;
      e.expensive = e.expensive || ir::has_trait(a_.nodes[size_t(n)]->op, ir::kCostly);
    }
    Group only = op;
    only.nodes = {op.opaque};
    only.checked = false;
    only.expensive = ir::has_trait(a_.nodes[size_t(op.opaque)]->op, ir::kCostly);
    groups_[size_t(cg)] = only;
    groups_.push_back(std::move(e));
    const int eg = int(groups_.size() - 1);
    for (int n : ep) group_of_[size_t(n)] = eg;
    if (try_merge(g, eg)) return true;
    groups_.pop_back();
    groups_[size_t(cg)] = op;
    for (int n : ep) group_of_[size_t(n)] = cg;
    return false;
  }

  bool try_merge(int keep, int other) {
    Group merged;
    const Group &a = groups_[size_t(keep)], &b = groups_[size_t(other)];
    if (!combine(a, b, merged)) return false;
    merged.checked = false;
    const Group* base = b.nodes.front() > a.nodes.back() ? &a : a.nodes.front() > b.nodes.back() ? &b : nullptr;
    if (!sound(merged, base)) return false;
    if (path_through_other(keep, other) || path_through_other(other, keep)) return false;
    for (int i : groups_[size_t(other)].nodes) group_of_[size_t(i)] = keep;
    groups_[size_t(keep)] = std::move(merged);
    groups_[size_t(other)].alive = false;
    groups_[size_t(other)].nodes.clear();
    return true;
  }

  // Horizontal fusion: groups over the same space that read a common value from memory. Each
  // group, in order, tries the later groups that read one of the same roots (through the lists
  // of each root's readers, not every pair); a group that writes a root is not a reader of it
  // here (its reads sit around its own write, where a sibling's read cannot join soundly); a
  // group stops trying once it is full or after kMaxSiblingFailures refusals.
  // A value of one element read by two groups saves no memory traffic when they merge: an
  // optimizer's learning rate read by every parameter's update would otherwise merge them all
  // into one kernel of dozens of streams, which ran at half the copy rate of one per parameter.
  static bool one_element(const ir::Value* v) {
    int64_t n = 1;
    for (int64_t d : v->type.sizes) n *= d;
    return n <= 1;
  }

  void merge_siblings() {
    auto eligible = [&](size_t g) {
      return groups_[g].alive && groups_[g].kind != NodeClass::Opaque && groups_[g].kind != NodeClass::Control;
    };
    std::vector<std::vector<const ir::Value*>> reads(groups_.size()), writes(groups_.size());
    std::unordered_map<const ir::Value*, std::vector<int>> readers;
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (!eligible(g)) continue;
      std::vector<const ir::Value*>&r = reads[g], &w = writes[g];
      for (int i : groups_[g].nodes) {
        const ir::Node& n = *a_.nodes[size_t(i)];
        if (n.op == OpId::Copy) w.push_back(a_.facts(n.inputs[0]).root);
        for (const ir::Value* v : n.inputs)
          if (!v->producer || classify(*v->producer) == NodeClass::Free || classify(*v->producer) == NodeClass::Data)
            if (!(v->producer && v->producer->op == OpId::Constant && !v->producer->attr("data")) && !one_element(v))
              r.push_back(a_.facts(v).root);
      }
      for (auto* list : {&r, &w}) {
        std::sort(list->begin(), list->end());
        list->erase(std::unique(list->begin(), list->end()), list->end());
      }
      for (const ir::Value* root : r)
        if (!std::binary_search(w.begin(), w.end(), root)) readers[root].push_back(int(g));
    }
    auto shares = [](const std::vector<const ir::Value*>& a, const std::vector<const ir::Value*>& b) {
      for (const ir::Value* v : a)
        if (std::binary_search(b.begin(), b.end(), v)) return true;
      return false;
    };
    auto add_union = [](std::vector<const ir::Value*>& a, const std::vector<const ir::Value*>& b) {
      std::vector<const ir::Value*> u;
      std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(u));
      a = std::move(u);
    };
    // Later readers of x's roots, tried in order, each once: the next few readers of each root
    // after a point (a group tries no more than it can merge or fail), merged in order through a
    // heap of cursors into the roots' reader lists, which advance as their readers are taken.
    // (Everything added after a pop is later than the popped group, so none comes back.)
    constexpr size_t kCandidates = size_t(kMaxSiblingFailures) + kMaxKernelNodes;
    struct Cursor {
      std::vector<int>::const_iterator next, end;
      size_t left;
    };
    std::vector<Cursor> cursors;
    std::vector<std::pair<int, size_t>> pending;  // (the cursor's reader, the cursor): a min-heap
    std::vector<int> tried_by(groups_.size(), -1);
    for (size_t x = 0; x < groups_.size(); ++x) {
      if (!eligible(x)) continue;
      cursors.clear();
      pending.clear();
      auto push = [&](size_t c) {
        Cursor& cur = cursors[c];
        if (cur.next == cur.end || cur.left == 0) return;
        pending.push_back({*cur.next, c});
        std::push_heap(pending.begin(), pending.end(), std::greater<>());
      };
      auto add_readers_of = [&](const std::vector<const ir::Value*>& roots, int after) {
        for (const ir::Value* root : roots) {
          auto it = readers.find(root);
          if (it == readers.end()) continue;
          cursors.push_back({std::upper_bound(it->second.begin(), it->second.end(), after), it->second.end(), kCandidates});
          push(cursors.size() - 1);
        }
      };
      add_readers_of(reads[x], int(x));
      int failures = 0;
      while (!pending.empty() && failures < kMaxSiblingFailures && groups_[x].nodes.size() < kMaxKernelNodes) {
        std::pop_heap(pending.begin(), pending.end(), std::greater<>());
        const auto [y, c] = pending.back();
        pending.pop_back();
        ++cursors[c].next;
        --cursors[c].left;
        push(c);
        if (tried_by[size_t(y)] == int(x)) continue;  // reached through another root too
        tried_by[size_t(y)] = int(x);
        if (!eligible(size_t(y)) || groups_[x].space != groups_[size_t(y)].space) continue;
        // (a write into what the other reads or writes: sound() refuses those, at a higher price)
        if (shares(writes[x], reads[size_t(y)]) || shares(writes[size_t(y)], reads[x]) ||
            shares(writes[x], writes[size_t(y)]))
          continue;
        if (try_merge(int(x), y)) {
          add_union(reads[x], reads[size_t(y)]);
          add_union(writes[x], writes[size_t(y)]);
          add_readers_of(reads[size_t(y)], y);
        } else {
          ++failures;
        }
      }
    }
  }

  // Live groups in an order that respects every dependence; ties go to the earliest node.
  std::optional<std::vector<std::vector<int>>> ordered() const {
    std::vector<int> live;
    for (size_t g = 0; g < groups_.size(); ++g)
      if (groups_[g].alive) live.push_back(int(g));
    std::vector<std::set<int>> preds(groups_.size());
    std::vector<std::vector<int>> succs(groups_.size());  // (each dependence once, from preds)
    std::vector<int> indeg(groups_.size(), 0);
    for (int g : live)
      for (int i : groups_[size_t(g)].nodes)
        for (int p : a_.preds[size_t(i)]) {
          int pg = group_of_[size_t(p)];
          if (pg >= 0 && pg != g && preds[size_t(g)].insert(pg).second) {
            ++indeg[size_t(g)];
            succs[size_t(pg)].push_back(g);
          }
        }
    std::set<std::pair<int, int>> ready;  // (first node, group)
    for (int g : live)
      if (indeg[size_t(g)] == 0) ready.insert({groups_[size_t(g)].nodes.front(), g});
    std::vector<std::vector<int>> out;
    while (!ready.empty()) {
      int g = ready.begin()->second;
      ready.erase(ready.begin());
      out.push_back(groups_[size_t(g)].nodes);
      for (int h : succs[size_t(g)])
        if (--indeg[size_t(h)] == 0) ready.insert({groups_[size_t(h)].nodes.front(), h});
    }
    if (out.size() != live.size()) return std::nullopt;
    return out;
  }

  const Analysis& a_;
  const bool exact_paths_;
  bool cross_check_ = false;  // KILN_FUSE_CROSS_CHECK (sound())
  std::vector<Group> groups_;
  std::vector<int> group_of_;
  std::vector<std::vector<int>> succ_;
  // path_through_other's visited groups: those marked with the current search's number
  mutable std::vector<uint64_t> visited_;
  mutable uint64_t search_ = 0;
};

}  // namespace

int fuse(Module& m, bool fusion) {
  Analysis a(m.graph);
  auto groups = Fuser(a, false).run(fusion);
  if (!groups) groups = Fuser(a, true).run(fusion);
  KILN_CHECK(groups, "passes", "fuse: internal error: the kernel order has a cycle");
  auto program = std::make_shared<KernelProgram>(lower(m.graph, *groups, LayoutPolicy{}));
  const int rewrites = m.program ? differences(*m.program, *program) : int(program->kernels.size()) + 1;
  m.program = std::move(program);
  return rewrites;
}

}  // namespace kiln::passes
