#include "epilogue.h"

#include <algorithm>
#include <map>

namespace kiln::codegen {

std::optional<EpilogueSplit> split_epilogue(const passes::Kernel& k, int result_buffer) {
  if (k.kind != passes::KernelKind::Opaque) return std::nullopt;
  const ir::Graph& body = k.body;
  const std::vector<int64_t>& S = k.loops;
  // The library op: the body's one opaque node, with one output over the whole loop space.
  const ir::Node* lead = nullptr;
  for (const auto& n : body.nodes()) {
    if (n->op == OpId::Constant) continue;  // inline numbers, wherever they sit
    ir::Category c = ir::op_info(n->op).category;
    if (c == ir::Category::Opaque || c == ir::Category::Control || c == ir::Category::Reduction ||
        c == ir::Category::View) {
      if (lead || c != ir::Category::Opaque) return std::nullopt;
      lead = n.get();
    } else if (!lead) {
      return std::nullopt;  // elementwise work before the op: not an epilogue
    }
  }
  if (!lead || lead->outputs.size() != 1 || lead->outputs[0]->type.is_scalar() || lead->outputs[0]->type.sizes != S)
    return std::nullopt;
  const ir::Value* result = lead->outputs[0];

  // Which body inputs the op reads and which the epilogue reads; none may be read by both (the
  // op reads its operands whole, the epilogue through indices over the loop space).
  std::map<const ir::Value*, int> input_index;
  for (size_t j = 0; j < body.inputs().size(); ++j) input_index[body.inputs()[j]] = int(j);
  std::vector<char> by_op(body.inputs().size(), 0), by_epilogue(body.inputs().size(), 0);
  bool uses_result = false;
  for (const auto& n : body.nodes()) {
    if (n.get() == lead || n->op == OpId::Constant) continue;
    for (const ir::Value* v : n->inputs) {
      if (v == result) uses_result = true;
      if (auto it = input_index.find(v); it != input_index.end()) by_epilogue[size_t(it->second)] = 1;
    }
  }
  for (const ir::Value* v : lead->inputs)
    if (auto it = input_index.find(v); it != input_index.end()) by_op[size_t(it->second)] = 1;
  if (!uses_result) return std::nullopt;  // a plain library call: nothing to compile
  for (size_t j = 0; j < by_op.size(); ++j) {
    if (by_op[j] && by_epilogue[j]) return std::nullopt;
    const passes::Access& a = k.loads[j];
    if (by_epilogue[j] && a.buffer >= 0 && a.sizes.size() != S.size()) return std::nullopt;
  }
  for (const passes::Access& s : k.stores)
    if (s.sizes != S || s.strides.size() != S.size()) return std::nullopt;

  EpilogueSplit out;
  // The op alone, reading its operands whole.
  std::map<const ir::Value*, ir::Value*> op_val;
  for (const ir::Value* v : lead->inputs) {
    if (op_val.count(v)) continue;
    if (auto it = input_index.find(v); it != input_index.end()) {
      op_val[v] = out.op.add_input("in" + std::to_string(out.op_loads.size()), v->type);
      out.op_loads.push_back(it->second);
    } else {  // an inline constant
      const ir::Node& c = *v->producer;
      op_val[v] = out.op.add_node(c.op, {}, c.attrs, {v->type})->outputs[0];
    }
  }
  std::vector<ir::Value*> op_ins;
  for (const ir::Value* v : lead->inputs) op_ins.push_back(op_val.at(v));
  out.op.set_outputs(out.op.add_node(lead->op, op_ins, lead->attrs, {result->type})->outputs);

  // The epilogue: the op's result as its first load, then the loads it reads.
  passes::Kernel& e = out.epilogue;
  e.kind = passes::KernelKind::Elementwise;
  e.loops = S;
  e.reduce_from = int(S.size());
  passes::Access r;
  r.buffer = result_buffer;
  r.dtype = result->type.dtype;
  r.sizes = S;
  r.strides = ir::Type::contiguous(r.dtype, S).strides;
  r.cls = passes::StrideClass::Contiguous;
  r.align = 64;  // a fresh allocation
  e.loads.push_back(r);
  std::map<const ir::Value*, ir::Value*> val;
  val[result] = e.body.add_input("in0", ir::Type::contiguous(r.dtype, S, result->type.device));
  for (size_t j = 0; j < by_epilogue.size(); ++j) {
    if (!by_epilogue[j]) continue;
    const ir::Value* v = body.inputs()[j];
    val[v] = e.body.add_input("in" + std::to_string(e.loads.size()), v->type);
    e.loads.push_back(k.loads[j]);
    out.epilogue_loads.push_back(int(j));
  }
  for (const auto& n : body.nodes()) {
    if (n.get() == lead) continue;
    std::vector<ir::Value*> ins;
    for (const ir::Value* v : n->inputs) ins.push_back(val.at(v));
    std::vector<ir::Type> types;
    for (const ir::Value* o : n->outputs) types.push_back(o->type);
    ir::Node* c = e.body.add_node(n->op, std::move(ins), n->attrs, std::move(types));
    for (size_t j = 0; j < n->outputs.size(); ++j) val[n->outputs[j]] = c->outputs[j];
  }
  std::vector<ir::Value*> outs;
  for (const ir::Value* v : body.outputs()) outs.push_back(val.at(v));
  e.body.set_outputs(std::move(outs));
  e.stores = k.stores;
  e.bytes_read = k.bytes_read;
  e.bytes_written = k.bytes_written;
  return out;
}

}  // namespace kiln::codegen
