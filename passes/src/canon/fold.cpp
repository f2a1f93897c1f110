// fold: constant folding.
//
// A node whose operands are all constants (wrapped numbers or data tensors) is run once, now,
// on the reference executor, and replaced by a data constant holding its result: the same eager
// kernels compute the same bits the graph would have computed at run time. `fill` needs only
// its operand's shape and dtype, so it folds whatever its operand is.
//
// What is not folded, and why:
//  - results larger than kFoldMaxElements, or not row-major (a data constant holds the bytes of
//    a contiguous tensor);
//  - views, write-backs and conds (they are about memory or control, not values);
//  - nodes reading a constant that a write-back modifies (its value depends on when it is read);
//  - results that are returned, directly or through a view: the executor hands out a
//    constant's one tensor on every run, so a caller writing into a returned constant would
//    change what later runs return;
//  - nodes the executor refuses (an error at run time stays an error at run time).
#include "kiln/ir/exec.h"
#include "kiln/runtime/factories.h"
#include "rewrite.h"

namespace kiln::passes {

namespace {

// A constant is printed as hex, two characters a byte, and graphs are hashed and compared
// printed: 4096 float32 elements are 32 KiB of text, past which a folded constant costs more
// (in graph size, hashing and parsing) than the node it replaces saves.
constexpr int64_t kFoldMaxElements = 4096;

bool foldable_type(const ir::Type& t) {
  if (t.is_scalar() || t.wrapped || !t.device.is_cpu()) return false;
  if (t != ir::Type::contiguous(t.dtype, t.sizes, t.device)) return false;
  int64_t numel = 1;
  for (int64_t s : t.sizes) {
    numel *= s;
    if (numel > kFoldMaxElements) return false;
  }
  return true;
}

// Runs `n` on its (new, constant) operands: a tiny graph of copies of the constant nodes and n.
// `fill` of a non-constant operand runs on zeros of the operand's type instead.
std::optional<std::vector<Tensor>> evaluate(const ir::Node& n, const std::vector<ir::Value*>& operands,
                                            bool shape_only) {
  ir::Graph tiny("fold");
  std::vector<ir::Value*> ins;
  std::vector<Tensor> args;
  for (const ir::Value* v : operands) {
    if (shape_only) {
      ins.push_back(tiny.add_input("x", v->type));
      args.push_back(zeros(v->type.sizes, TensorOptions(v->type.dtype).device(v->type.device)));
    } else {
      ins.push_back(tiny.add_node(OpId::Constant, {}, v->producer->attrs, {v->type})->outputs[0]);
    }
  }
  std::vector<ir::Type> types;
  for (const ir::Value* v : n.outputs) types.push_back(v->type);
  ir::Node* m = tiny.add_node(n.op, ins, n.attrs, types);
  tiny.set_outputs(m->outputs);
  try {
    std::vector<Tensor> out = ir::execute(tiny, args);
    for (size_t k = 0; k < out.size(); ++k)
      if (out[k].dtype() != types[k].dtype || out[k].sizes().vec() != types[k].sizes) return std::nullopt;
    return out;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

int fold_constants(ir::Graph& g) {
  canon::MemoryInfo mem(g);
  canon::Rebuilder rb(g);
  int folded = 0;
  for (const auto& np : g.nodes()) {
    const ir::Node& n = *np;
    bool ok = n.op != OpId::Constant && n.op != OpId::Copy && n.op != OpId::Cond && n.regions.empty() &&
              !canon::is_view(n) && !n.inputs.empty() && !n.outputs.empty();
    for (const ir::Value* v : n.outputs) ok = ok && foldable_type(v->type) && !mem.has_output(mem.cls(v));
    std::vector<ir::Value*> operands = rb.operands(n);
    bool all_constant = true;
    for (size_t k = 0; k < operands.size(); ++k) {
      const ir::Node* p = operands[k]->producer;
      all_constant = all_constant && p && p->op == OpId::Constant && !mem.written(mem.cls(n.inputs[k]));
    }
    bool shape_only = n.op == OpId::Fill && !all_constant && !operands[0]->type.is_scalar();
    std::optional<std::vector<Tensor>> result;
    if (ok && (all_constant || shape_only)) result = evaluate(n, operands, shape_only);
    if (!result) {
      rb.keep(n);
      continue;
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) rb.replace(n.outputs[k], rb.data((*result)[k], n.outputs[k]->type));
    ++folded;
  }
  if (!folded) return 0;
  g = rb.finish();
  return folded;
}

}  // namespace kiln::passes
