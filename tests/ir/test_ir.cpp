#include <gtest/gtest.h>
#include <kiln/ir/graph.h>

#include <cmath>
#include <limits>

using namespace kiln;
using namespace kiln::ir;

namespace {

// A graph applying `op` to inputs of the right count, with attributes of every kind.
Graph graph_with(OpId op) {
  Graph g("one_op");
  int n = op_info(op).operands < 0 ? 3 : op_info(op).operands;
  std::vector<Value*> ins;
  for (int i = 0; i < n; ++i)
    ins.push_back(g.add_input("x" + std::to_string(i), Type::tensor(kFloat32, {2, 3}, {3, 1})));
  std::vector<Attr> attrs = {{"dims", IntList{1, -1}},     {"keepdim", true},
                             {"alpha", 0.1},               {"count", int64_t(-7)},
                             {"mode", std::string("tanh")}, {"dtype", kBFloat16},
                             {"maybe", NoneAttr{}}};
  Node* node = g.add_node(op, ins, attrs, {Type::tensor(kFloat32, {3, 2}, {1, 3})});
  g.set_outputs({node->outputs[0]});
  return g;
}

void expect_parse_error(std::string_view text, int line, int col, const std::string& needle) {
  try {
    parse(text);
    ADD_FAILURE() << "expected a parse error containing '" << needle << "'";
  } catch (const ParseError& e) {
    EXPECT_EQ(e.line, line) << e.what();
    EXPECT_EQ(e.col, col) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(IrOpTable, NamesAreUniqueAndResolve) {
  ASSERT_GT(num_ops(), 90);
  for (int i = 0; i < num_ops(); ++i) {
    OpId op = OpId(i);
    auto back = op_from_name(op_info(op).name);
    ASSERT_TRUE(back.has_value()) << op_info(op).name;
    EXPECT_EQ(*back, op) << "duplicate name " << op_info(op).name;
  }
  EXPECT_FALSE(op_from_name("no_such_op").has_value());
  EXPECT_EQ(op_info(OpId::Add).category, Category::Elementwise);
  EXPECT_EQ(op_info(OpId::Transpose).category, Category::View);
  EXPECT_EQ(op_info(OpId::Sum).category, Category::Reduction);
}

TEST(IrText, EveryOpRoundTripsThroughTextAndJson) {
  for (int i = 0; i < num_ops(); ++i) {
    Graph g = graph_with(OpId(i));
    ASSERT_FALSE(verify(g).has_value()) << op_info(OpId(i)).name << ": " << verify(g)->message;
    std::string text = print(g);
    Graph back = parse(text);
    EXPECT_EQ(print(back), text);
    EXPECT_EQ(hash(back), hash(g));
    Graph from_js = from_json(to_json(g));
    EXPECT_EQ(print(from_js), text) << op_info(OpId(i)).name;
  }
}

TEST(IrText, ReadableForm) {
  Graph g("add_sin_cos");
  Value* a = g.add_input("a", Type::contiguous(kFloat32, {1000}));
  Value* b = g.add_input("b", Type::contiguous(kFloat32, {1000}));
  Type t = Type::contiguous(kFloat32, {1000});
  Value* s = g.add_node(OpId::Add, {a, b}, {}, {t})->outputs[0];
  Value* sa = g.add_node(OpId::Sin, {a}, {}, {t})->outputs[0];
  Value* cb = g.add_node(OpId::Cos, {b}, {}, {t})->outputs[0];
  Value* m = g.add_node(OpId::Mul, {sa, cb}, {}, {t})->outputs[0];
  Value* r = g.add_node(OpId::Add, {s, m}, {{"alpha", int64_t(1)}}, {t})->outputs[0];
  g.set_outputs({r});
  EXPECT_EQ(print(g),
            "graph @add_sin_cos(%a: f32[1000]{1}, %b: f32[1000]{1}) {\n"
            "  %0 = add(%a, %b) : f32[1000]{1}\n"
            "  %1 = sin(%a) : f32[1000]{1}\n"
            "  %2 = cos(%b) : f32[1000]{1}\n"
            "  %3 = mul(%1, %2) : f32[1000]{1}\n"
            "  %4 = add(%0, %3) {alpha=1} : f32[1000]{1}\n"
            "  return %4\n"
            "}\n");
}

TEST(IrText, AttributesAndTypesKeepExactValues) {
  std::string text =
      "graph @g(%x: f32[]{} wrapped, %s: scalar<i64>, %d: bf16[4,0]{1,4}@cuda:1) {\n"
      "  %0, %1 = max(%x) {a=-0.0, b=1e-300, c=inf, d=-inf, e=nan, f=\"q\\\"\\\\\\n\", g=[], h=u8, "
      "i=none, j=false, k=-9223372036854775808} : f64[]{}, i64[]{}\n"
      "  return %1, %0\n"
      "}\n";
  // max is a reduction with one operand
  Graph g = parse(text);
  EXPECT_EQ(print(g), text);
  const Node& n = *g.nodes()[0];
  EXPECT_TRUE(std::signbit(std::get<double>(n.attr("a")->value)));
  EXPECT_EQ(std::get<double>(n.attr("b")->value), 1e-300);
  EXPECT_TRUE(std::isnan(std::get<double>(n.attr("e")->value)));
  EXPECT_EQ(std::get<std::string>(n.attr("f")->value), "q\"\\\n");
  EXPECT_EQ(std::get<int64_t>(n.attr("k")->value), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(std::get<DType>(n.attr("h")->value), kUInt8);
  EXPECT_TRUE(g.inputs()[0]->type.wrapped);
  EXPECT_TRUE(g.inputs()[1]->type.is_scalar());
  EXPECT_EQ(g.inputs()[2]->type.device, Device::cuda(1));
  EXPECT_EQ(print(from_json(to_json(g))), text);
  // 2 and 2.0 are different attributes
  Graph i = parse("graph @g(%x: f32[1]{1}) {\n  %0 = mul(%x, %x) {v=2} : f32[1]{1}\n  return %0\n}\n");
  Graph f = parse("graph @g(%x: f32[1]{1}) {\n  %0 = mul(%x, %x) {v=2.0} : f32[1]{1}\n  return %0\n}\n");
  EXPECT_NE(hash(i), hash(f));
  EXPECT_TRUE(std::holds_alternative<int64_t>(i.nodes()[0]->attrs[0].value));
  EXPECT_TRUE(std::holds_alternative<double>(f.nodes()[0]->attrs[0].value));
}

TEST(IrText, ParserErrorsSayWhereAndWhat) {
  expect_parse_error("graph @g(%x: f32[1]{1}) {\n  %0 = frobnicate(%x) : f32[1]{1}\n  return %0\n}", 2, 8,
                     "unknown op 'frobnicate'");
  expect_parse_error("graph @g(%x: f32[1]{1}) {\n  %0 = neg(%y) : f32[1]{1}\n  return %0\n}", 2, 12,
                     "use of undefined value %y");
  expect_parse_error("graph @g(%x: f32[1]{1}) {\n  %0 = add(%x) : f32[1]{1}\n  return %0\n}", 2, 3,
                     "add takes 2 operands, got 1");
  expect_parse_error("graph @g(%x: f32[1,2]{1}) {\n  return %x\n}", 1, 14, "2 sizes but 1 strides");
  expect_parse_error("graph @g(%x: f33[1]{1}) {\n  return %x\n}", 1, 14, "unknown dtype 'f33'");
  expect_parse_error("graph @g(%x: f32[1]{1}) {\n  %0 = neg(%x) {m=\"open} : f32[1]{1}\n", 2, 19,
                     "unterminated string");
  expect_parse_error("graph @g(%x: f32[1]{1}) {\n  %x = neg(%x) : f32[1]{1}\n  return %x\n}", 2, 3,
                     "defined twice");
  expect_parse_error("graph @g(%x: f32[1]{1}) {\n  return %x\n} extra", 3, 3, "unexpected text after the graph");
  expect_parse_error("graph @g(%x: f32[1]{1}) {\n  %0 = neg(%x) : f32[1]{1}\n", 3, 1, "but the text ended");
  expect_parse_error("graph @g(%x: f32[-1]{1}) {\n  return %x\n}", 1, 14, "negative size");
  expect_parse_error("graph @g(%x: f32[1]{1}) {\n  %0 = neg(%x) {k=99999999999999999999} : f32[1]{1}\n}", 2, 19,
                     "out-of-range integer");
  expect_parse_error("graph @g(%x: f32[1]{1}) {\n  %0 = neg(%x) {k=1, k=2} : f32[1]{1}\n}", 2, 22,
                     "attribute 'k' given twice");
  expect_parse_error("graph @g(%x: f32[1]{1}) {\n  %0 = neg(%x) : f32[1]{1}, f32[1]{1}\n}", 2, 3,
                     "1 results but 2 types");
  expect_parse_error("graph @g(%x: f32[1]{1}) $", 1, 25, "unexpected character '$'");
}

TEST(IrVerify, ReportsTheFirstProblem) {
  Graph g;
  Value* x = g.add_input("x", Type::contiguous(kFloat32, {2}));
  Graph other;
  Value* y = other.add_input("y", Type::contiguous(kFloat32, {2}));
  Node* n = g.add_node(OpId::Add, {x, y}, {}, {Type::contiguous(kFloat32, {2})});
  g.set_outputs({n->outputs[0]});
  auto err = verify(g);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->message.find("operand 1 is used before it is defined"), std::string::npos);
  Graph h;
  Value* z = h.add_input("z", Type::contiguous(kFloat32, {2}));
  h.add_node(OpId::Neg, {z}, {}, {Type::contiguous(kFloat32, {2})});
  ASSERT_TRUE(verify(h).has_value());
  EXPECT_NE(verify(h)->message.find("returns nothing"), std::string::npos);
  Graph k;
  Value* w = k.add_input("w", Type::contiguous(kFloat32, {2}));
  Node* bad = k.add_node(OpId::Where, {w, w}, {}, {Type::contiguous(kFloat32, {2})});
  k.set_outputs({bad->outputs[0]});
  EXPECT_NE(verify(k)->message.find("where takes 3 operands, got 2"), std::string::npos);
}

TEST(IrJson, MalformedInputIsAnError) {
  EXPECT_THROW(from_json("{"), Error);
  EXPECT_THROW(from_json(R"({"graph": "g", "inputs": [], "nodes": [{"op": "nope", "inputs": [], "attrs": [],
                              "outputs": []}], "outputs": []})"),
               Error);
  EXPECT_THROW(from_json(R"({"graph": "g", "inputs": [{"name": "x", "type": "f32[1]{1}"}], "nodes": [],
                              "outputs": ["%y"]})"),
               Error);
  EXPECT_THROW(from_json(R"({"graph": 3})"), Error);
}
