// One small valid graph per op of the op table (ops.def), with operand types and attributes as
// a program would give them: what the tests that iterate the table (text round trips, every
// op on each backend) build their graphs from. An op added to the table with no case here
// gets its category's default operands (elementwise: one int32 or two float32 operands;
// reduction: dims [0]); a category without one fails the test that asks.
#pragma once
#include <gtest/gtest.h>
#include <kiln/ir/graph.h>
#include <kiln/ir/infer.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace kiln::testing {
namespace one_op {

using namespace kiln::ir;

inline Type f32(std::vector<int64_t> sizes) { return Type::contiguous(kFloat32, std::move(sizes)); }
inline Type wrapped(DType dt) {
  Type t = Type::tensor(dt, {}, {});
  t.wrapped = true;
  return t;
}

// Operand types and realistic attributes for one application of `op` (ops.def's conventions).
struct OpCase {
  std::vector<Type> inputs;
  std::vector<Attr> attrs;
};
inline OpCase op_case(OpId op) {
  Type x = f32({2, 3}), row = f32({3}), i32 = Type::contiguous(kInt32, {2, 3});
  Type mask = Type::contiguous(kBool, {2, 3}), xt = Type::tensor(kFloat32, {3, 2}, {1, 3});
  auto s = [](const char* v) { return AttrValue(std::string(v)); };
  switch (op) {
    case OpId::Gelu: return {{x}, {{"approximate", s("tanh")}}};
    case OpId::Silu: return {{xt}, {}};
    case OpId::NanToNum: return {{x}, {{"nan", 0.0}, {"posinf", NoneAttr{}}, {"neginf", -1e30}}};
    case OpId::BitwiseNot: return {{i32}, {}};
    case OpId::Cast: return {{x}, {{"dtype", kFloat16}}};
    case OpId::Fill: return {{x}, {{"value", 1.5}}};
    case OpId::Add: return {{x, row}, {{"alpha", int64_t(2)}}};
    case OpId::Sub: return {{x, Type::scalar(kFloat64)}, {{"alpha", 0.5}}};
    case OpId::Div: return {{i32, row}, {{"rounding_mode", s("floor")}}};
    case OpId::Pow: return {{i32, Type::scalar(kFloat64)}, {}};
    case OpId::BitwiseAnd: case OpId::BitwiseOr: case OpId::BitwiseXor: return {{i32, Type::scalar(kInt64)}, {}};
    case OpId::LogicalAnd: case OpId::LogicalOr: case OpId::LogicalXor: return {{mask, row}, {}};
    case OpId::Where: return {{mask, x, Type::scalar(kFloat64)}, {}};
    case OpId::Clamp: return {{x, Type::scalar(kInt64), Type::scalar(kFloat64)}, {{"has_max", true}, {"has_min", true}}};
    case OpId::Lerp: return {{x, x, Type::scalar(kFloat64)}, {}};
    case OpId::Addcmul: return {{x, row, x}, {{"value", 0.5}}};
    case OpId::MaskedFill: return {{x, mask}, {{"value", int64_t(-1)}}};
    case OpId::Sum: return {{i32}, {{"dims", IntList{1}}, {"dtype", kFloat64}, {"keepdim", true}}};
    case OpId::MaxDim: case OpId::MinDim: return {{x}, {{"dim", int64_t(1)}, {"keepdim", false}}};
    case OpId::Argmax: return {{x}, {{"dim", NoneAttr{}}, {"keepdim", true}}};
    case OpId::Argmin: return {{x}, {{"dim", int64_t(-1)}, {"keepdim", false}}};
    case OpId::Norm: return {{x}, {{"dims", IntList{1}}, {"keepdim", false}, {"p", std::numeric_limits<double>::infinity()}}};
    case OpId::Var: case OpId::Std: return {{x}, {{"correction", int64_t(0)}, {"dims", IntList{}}, {"keepdim", false}}};
    case OpId::Softmax: case OpId::LogSoftmax: return {{xt}, {{"dim", int64_t(-1)}}};
    case OpId::Cumsum: return {{i32}, {{"dim", int64_t(0)}}};
    case OpId::View: return {{x}, {{"sizes", IntList{3, -1}}}};
    case OpId::Transpose: return {{x}, {{"dim0", int64_t(0)}, {"dim1", int64_t(1)}}};
    case OpId::Permute: return {{f32({2, 3, 4})}, {{"dims", IntList{2, 0, 1}}}};
    case OpId::Slice: return {{x}, {{"dim", int64_t(1)}, {"end", int64_t(3)}, {"start", int64_t(0)}, {"step", int64_t(2)}}};
    case OpId::Select: return {{x}, {{"dim", int64_t(0)}, {"index", int64_t(1)}}};
    case OpId::Expand: return {{f32({2, 1})}, {{"sizes", IntList{4, 2, 5}}}};
    case OpId::Squeeze: return {{f32({2, 1, 3})}, {{"dims", IntList{1}}}};
    case OpId::Unsqueeze: return {{x}, {{"dim", int64_t(-1)}}};
    case OpId::Diagonal: return {{f32({3, 3})}, {{"dim1", int64_t(0)}, {"dim2", int64_t(1)}, {"offset", int64_t(1)}}};
    case OpId::AsStrided: return {{x}, {{"offset", int64_t(0)}, {"sizes", IntList{2, 2}}, {"strides", IntList{1, 2}}}};
    case OpId::Contiguous: case OpId::Clone: case OpId::Iota: return {{xt}, {}};
    case OpId::Matmul: return {{f32({2, 2, 3}), f32({3})}, {}};
    case OpId::Mm: return {{x, f32({3, 4})}, {}};
    case OpId::Bmm: return {{f32({2, 2, 3}), f32({2, 3, 4})}, {}};
    case OpId::Addmm: return {{f32({4}), x, f32({3, 4})}, {{"alpha", int64_t(2)}, {"beta", 0.5}}};
    case OpId::Einsum: return {{x, f32({3, 4})}, {{"equation", s("ij,jk->ki")}}};
    case OpId::Cat: return {{x, i32}, {{"dim", int64_t(0)}}};
    case OpId::IndexSelect: return {{x, Type::contiguous(kInt64, {2})}, {{"dim", int64_t(1)}}};
    case OpId::Gather: return {{x, Type::contiguous(kInt64, {2, 2})}, {{"dim", int64_t(1)}}};
    case OpId::Copy: return {{x, row}, {}};
    default: break;
  }
  switch (op_info(op).category) {
    case Category::Reduction: return {{x}, {{"dims", IntList{0}}, {"keepdim", false}}};
    case Category::Elementwise:
      if (op_info(op).operands == 1) return {{i32}, {}};  // unary: integers promote or stay
      return {{x, row}, {}};
    default: ADD_FAILURE() << "no case for " << op_info(op).name; return {};
  }
}

// then: a + b, else: a * b, chosen by a bool predicate.
inline Graph cond_graph() {
  Graph g("choose");
  Value* p = g.add_input("p", Type::contiguous(kBool, {}));
  Value* a = g.add_input("a", f32({4}));
  Value* b = g.add_input("b", f32({4}));
  Node* n = g.add_node(OpId::Cond, {p, a, b}, {}, {f32({4})});
  for (auto [name, op] : {std::pair{"then", OpId::Add}, std::pair{"else", OpId::Mul}}) {
    auto r = std::make_unique<Graph>(name);
    Value* ra = r->add_input("a", f32({4}));
    Value* rb = r->add_input("b", f32({4}));
    r->set_outputs({r->add_node(op, {ra, rb}, {}, {f32({4})})->outputs[0]});
    n->regions.push_back(std::move(r));
  }
  g.set_outputs({n->outputs[0]});
  return g;
}

// A valid graph applying `op` once; constant in its value= (variant 0) or data= (variant 1) form.
inline Graph graph_with(OpId op, int variant = 0) {
  if (op == OpId::Cond) return cond_graph();
  Graph g("one_op");
  if (op == OpId::Constant) {
    Node* c = variant == 0 ? g.add_node(op, {}, {{"value", 0.25}}, {wrapped(kFloat64)})
                           : g.add_node(op, {}, {{"data", *hex_to_bytes("0000803f000000c0")}}, {f32({2})});
    g.set_outputs({c->outputs[0]});
    return g;
  }
  OpCase oc = op_case(op);
  std::vector<Value*> ins;
  for (size_t i = 0; i < oc.inputs.size(); ++i) ins.push_back(g.add_input("x" + std::to_string(i), oc.inputs[i]));
  Node* node = g.add_node(op, ins, oc.attrs, infer_types(op, oc.inputs, oc.attrs));
  g.set_outputs(node->outputs);
  return g;
}

}  // namespace one_op

using one_op::cond_graph;
using one_op::f32;
using one_op::graph_with;
using one_op::wrapped;

}  // namespace kiln::testing
