// writeback: store-to-load forwarding and dead write-backs.
//
// Traced in-place code is a chain of write-backs: x.add_(1); x.relu_() becomes
//   %1 = add(%x, 1); %2 = copy(%x, %1); %3 = relu(%2); %4 = copy(%2, %3)
// so every op reads the buffer it just wrote. Two rewrites untangle it:
//
//  1. Forwarding. A reader of %c = copy(%d, %s) reads what %s held, when %s is a fresh tensor of
//     the same dtype and sizes (the copy neither converted nor broadcast), nothing ever writes
//     %s's memory, and nothing writes %d's memory between the copy and the reader. Only
//     elementwise and reduction operands are rewritten: they only read data; a view of %c or a
//     write-back into %c is about %d's memory itself.
//  2. Dead writes. %c1 = copy(%d, %s1) followed by %c2 = copy(%c1, %s2) is overwritten whole by
//     the second copy. When %c1 has no other use and nothing between the two touches %d's
//     memory, the first copy goes and the second becomes copy(%d, %s2).
//
// The two feed each other (forwarding removes the other uses of %c1), so the pass repeats them
// until neither changes anything. Writes into inputs keep their final value and their order;
// only writes nobody can observe disappear.
#include "rewrite.h"

namespace kiln::passes {

namespace {

bool reads_only(const ir::Node& n) {
  auto c = ir::op_info(n.op).category;
  return c == ir::Category::Elementwise || c == ir::Category::Reduction;
}

// What a read of `v` at position `at` may read instead: the source of the copy that made v.
const ir::Value* forwarded_source(const ir::Value* v, int at, const canon::MemoryInfo& mem) {
  const ir::Node* c = v->producer;
  if (!c || c->op != OpId::Copy) return nullptr;
  const ir::Value* s = c->inputs[1];
  if (s->type.dtype != v->type.dtype || s->type.sizes != v->type.sizes || s->type.is_scalar()) return nullptr;
  if (!canon::is_fresh(s) || mem.written(mem.cls(s))) return nullptr;
  if (mem.written_between(mem.cls(v), mem.pos(c), at)) return nullptr;
  return s;
}

int forward_reads(ir::Graph& g) {
  canon::MemoryInfo mem(g);
  canon::Rebuilder rb(g);
  int forwarded = 0;
  for (const auto& np : g.nodes()) {
    const ir::Node& n = *np;
    if (!reads_only(n)) {
      rb.keep(n);
      continue;
    }
    std::vector<ir::Value*> ins = rb.operands(n);
    std::vector<ir::Type> want;
    for (const ir::Value* v : n.outputs) want.push_back(v->type);
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const ir::Value* s = forwarded_source(n.inputs[k], mem.pos(&n), mem);
      if (!s) continue;
      std::vector<ir::Value*> trial = ins;
      trial[k] = rb(s);
      if (canon::try_infer(n.op, canon::types_of(trial), n.attrs) == want) {
        ins = trial;
        ++forwarded;
      }
    }
    rb.keep(n, ins);
  }
  if (!forwarded) return 0;
  g = rb.finish();
  return forwarded;
}

int drop_dead_writes(ir::Graph& g) {
  canon::MemoryInfo mem(g);
  std::vector<bool> dead(g.nodes().size(), false);
  int dropped = 0;
  for (const auto& np : g.nodes()) {
    const ir::Node& second = *np;
    if (second.op != OpId::Copy) continue;
    const ir::Value* c1 = second.inputs[0];
    const ir::Node* first = c1->producer;
    if (!first || first->op != OpId::Copy || mem.is_output(c1) || mem.uses(c1).size() != 1) continue;
    if (first->inputs[0]->type != c1->type) continue;  // the second copy keeps its destination type
    if (mem.read_between(mem.cls(c1), mem.pos(first), mem.pos(&second))) continue;
    dead[size_t(mem.pos(first))] = true;
    ++dropped;
  }
  if (!dropped) return 0;
  canon::Rebuilder rb(g);
  for (const auto& np : g.nodes()) {
    if (dead[size_t(mem.pos(np.get()))])
      rb.replace(np->outputs[0], rb(np->inputs[0]));  // its one reader now writes into %d
    else
      rb.keep(*np);
  }
  g = rb.finish();
  return dropped;
}

}  // namespace

int forward_writes(ir::Graph& g) {
  int rewrites = 0;
  for (int again = 1; again;) {
    again = forward_reads(g);
    again += drop_dead_writes(g);
    rewrites += again;
  }
  return rewrites;
}

}  // namespace kiln::passes
