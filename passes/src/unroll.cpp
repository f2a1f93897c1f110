// A reduction kernel's short outermost loop unrolled into its body (kernel.h: unroll_outer_loop).
//
// n-body's forces reduce [2, N, N]: per component c and body i, a sum over j. The distance
// between i and j, its square root, the divisions by it and the masses do not depend on c, yet a
// loop nest over c computes them once per component. With c unrolled into the body the kernel
// loops over [N, N] and computes them once, then each component's own work, into one
// accumulator per component.
#include <algorithm>
#include <unordered_map>

#include "kiln/ir/infer.h"
#include "kiln/passes/kernel.h"

namespace kiln::passes {

namespace {

// The access without loop 0, at copy `c` of it (its offset moved on by c steps of loop 0). Its
// stride class stays: dropping the outermost loop keeps a contiguous or broadcast access so, and
// leaves a permuted or general one at worst as the class says (a conservative class).
Access without_loop0(const Access& a, int64_t c, size_t rank) {
  Access out = a;
  if (a.sizes.size() != rank) return out;  // (a host number's access: no loop space)
  const int64_t step = a.buffer >= 0 && a.sizes[0] > 1 ? a.strides[0] : 0;
  out.sizes.erase(out.sizes.begin());
  out.strides.erase(out.strides.begin());
  out.offset += c * step;
  // The first element moved by c * step elements: its alignment is at most what that keeps.
  const int64_t moved = c * step * int64_t(itemsize(a.dtype));
  if (moved != 0) out.align = int(std::min<int64_t>(a.align, moved & -moved));
  return out;
}

// A node's attributes with its dims counted without loop 0 (a negative dim counts from the end
// and stays).
std::optional<std::vector<Attr>> attrs_without_loop0(const std::vector<Attr>& attrs) {
  std::vector<Attr> out = attrs;
  for (Attr& a : out) {
    if (a.name == "dims") {
      auto* dims = std::get_if<IntList>(&a.value);
      if (!dims) return std::nullopt;
      for (int64_t& d : *dims) {
        if (d == 0) return std::nullopt;  // (loop 0 is never reduced here; refuse rather than guess)
        if (d > 0) d--;
      }
    } else if (a.name == "dim") {
      auto* d = std::get_if<int64_t>(&a.value);
      if (!d || *d == 0) return std::nullopt;
      if (*d > 0) (*d)--;
    }
  }
  return out;
}

}  // namespace

std::optional<Kernel> unroll_outer_loop(const Kernel& k, int max_copies) {
  const size_t rank = k.loops.size();
  if (k.kind != KernelKind::Reduction || rank < 3 || k.reduce_from < 2 || k.reduce_from >= int(rank)) return std::nullopt;
  const int64_t copies = k.loops[0];
  if (copies < 2 || copies > max_copies) return std::nullopt;
  for (const Access& a : k.loads)
    if (a.buffer >= 0 && a.sizes.size() != rank) return std::nullopt;
  for (const Access& a : k.stores) {
    if (a.buffer < 0 || a.sizes.size() != rank) return std::nullopt;
    // A store into a buffer the kernel reads (in place, or reused memory): the copies would read
    // and write it through different indices, which the program's verifier refuses.
    for (const Access& l : k.loads)
      if (l.buffer == a.buffer) return std::nullopt;
  }
  // A value varies along loop 0 when its size there is the loop's; else it is shared by every copy.
  auto varies = [&](const ir::Value* v) { return !v->type.is_scalar() && !v->type.sizes.empty() && v->type.sizes[0] > 1; };
  auto dropped = [](const ir::Type& t) {
    if (t.is_scalar() || t.sizes.empty()) return t;
    std::vector<int64_t> sizes(t.sizes.begin() + 1, t.sizes.end());
    return ir::Type::contiguous(t.dtype, sizes, t.device);
  };
  bool shared_work = false, own_work = false;
  for (const auto& n : k.body.nodes()) {
    const ir::Category cat = ir::op_info(n->op).category;
    if (n->op != OpId::Constant && cat != ir::Category::Elementwise && cat != ir::Category::Reduction) return std::nullopt;
    if (ir::has_trait(n->op, ir::kRowOp)) return std::nullopt;
    bool out_varies = false;
    for (const ir::Value* v : n->outputs) out_varies = out_varies || varies(v);
    if (!out_varies)
      for (const ir::Value* v : n->inputs)
        if (varies(v)) return std::nullopt;  // (only a reduction over loop 0 could do that)
    if (n->op == OpId::Constant) continue;
    (out_varies ? own_work : shared_work) = true;
  }
  if (!shared_work || !own_work) return std::nullopt;  // (nothing to share, or nothing per copy)

  Kernel u;
  u.kind = k.kind;
  u.loops.assign(k.loops.begin() + 1, k.loops.end());
  u.reduce_from = k.reduce_from - 1;
  u.nodes = k.nodes;
  u.bytes_read = k.bytes_read;
  u.bytes_written = k.bytes_written;
  u.body = ir::Graph(k.body.name());
  // Per original value: its copies in the new body (one when shared by all).
  std::unordered_map<const ir::Value*, std::vector<ir::Value*>> copy_of;
  auto at = [&](const ir::Value* v, int64_t c) {
    const std::vector<ir::Value*>& vs = copy_of.at(v);
    return vs.size() == 1 ? vs[0] : vs[size_t(c)];
  };
  for (size_t j = 0; j < k.loads.size(); ++j) {
    const ir::Value* in = k.body.inputs()[j];
    const bool per_copy = varies(in) && k.loads[j].buffer >= 0;
    for (int64_t c = 0; c < (per_copy ? copies : 1); ++c) {
      u.loads.push_back(without_loop0(k.loads[j], c, rank));
      std::string name = in->name + (per_copy ? "_" + std::to_string(c) : "");
      copy_of[in].push_back(u.body.add_input(std::move(name), dropped(in->type)));
    }
  }
  try {
    for (const auto& n : k.body.nodes()) {
      bool per_copy = false;
      for (const ir::Value* v : n->outputs) per_copy = per_copy || varies(v);
      std::optional<std::vector<Attr>> attrs = attrs_without_loop0(n->attrs);
      if (!attrs) return std::nullopt;
      for (int64_t c = 0; c < (per_copy ? copies : 1); ++c) {
        std::vector<ir::Value*> ins;
        std::vector<ir::Type> types;
        for (const ir::Value* v : n->inputs) {
          ins.push_back(at(v, c));
          types.push_back(ins.back()->type);
        }
        std::vector<ir::Type> outs;
        if (n->op == OpId::Constant)
          for (const ir::Value* v : n->outputs) outs.push_back(dropped(v->type));
        else
          outs = ir::infer_types(n->op, types, *attrs);
        ir::Node* m = u.body.add_node(n->op, std::move(ins), *attrs, std::move(outs), n->loc);
        for (size_t o = 0; o < n->outputs.size(); ++o) copy_of[n->outputs[o]].push_back(m->outputs[o]);
      }
    }
  } catch (const Error&) {
    return std::nullopt;  // (a type the unrolled body does not infer: leave the kernel as it is)
  }
  std::vector<ir::Value*> outs;
  for (size_t j = 0; j < k.stores.size(); ++j) {
    const ir::Value* v = k.body.outputs()[j];
    const bool per_copy = k.stores[j].sizes[0] > 1;
    if (per_copy != varies(v)) return std::nullopt;  // (a shared value stored along loop 0, or the reverse)
    for (int64_t c = 0; c < (per_copy ? copies : 1); ++c) {
      u.stores.push_back(without_loop0(k.stores[j], c, rank));
      outs.push_back(at(v, c));
    }
  }
  u.body.set_outputs(std::move(outs));
  return u;
}

}  // namespace kiln::passes
