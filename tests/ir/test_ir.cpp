#include <gtest/gtest.h>
#include <kiln/ir/attrs.h>
#include <kiln/ir/graph.h>
#include <kiln/ir/exec.h>
#include <kiln/ir/infer.h>
#include <kiln/runtime/factories.h>
#include <kiln/runtime/ops.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "../common/one_op_graphs.h"

using namespace kiln;
using namespace kiln::ir;

namespace {

using kiln::testing::cond_graph;
using kiln::testing::f32;
using kiln::testing::graph_with;
using kiln::testing::wrapped;

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

// The op table's traits agree with the categories the passes read them with: a row op is a
// reduction over one `dim` whose output has its operand's shape, an op taking an epilogue is a
// library (opaque) op, a costly op is elementwise.
TEST(IrOpTable, TraitsFitTheirCategories) {
  int rows = 0, products = 0, costly = 0;
  for (int i = 0; i < num_ops(); ++i) {
    const OpId op = OpId(i);
    SCOPED_TRACE(std::string(op_info(op).name));
    if (has_trait(op, kRowOp)) {
      ++rows;
      EXPECT_EQ(op_info(op).category, Category::Reduction);
      Type x = Type::contiguous(kFloat32, {3, 5});
      std::vector<Type> out = infer_types(op, {x}, {{"dim", int64_t(1)}});
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0].sizes, x.sizes);
    }
    if (has_trait(op, kTakesEpilogue)) {
      ++products;
      EXPECT_EQ(op_info(op).category, Category::Opaque);
    }
    if (has_trait(op, kCostly)) {
      ++costly;
      EXPECT_EQ(op_info(op).category, Category::Elementwise);
    }
  }
  EXPECT_EQ(rows, 3);  // softmax, log_softmax, cumsum
  EXPECT_EQ(products, 5);
  EXPECT_GT(costly, 20);
  EXPECT_TRUE(has_trait(OpId::Softmax, kRowOp) && has_trait(OpId::Mm, kTakesEpilogue) && has_trait(OpId::Exp, kCostly));
  EXPECT_FALSE(has_trait(OpId::Add, kCostly) || has_trait(OpId::Sum, kRowOp) || has_trait(OpId::Cat, kTakesEpilogue));
}

// The float traits give an elementwise op's result dtype: integers compute in float32 under
// kFloatCompute and are refused under kFloatOnly; no op has both.
TEST(IrOpTable, FloatTraitsGiveTheResultDtype) {
  int traited = 0;
  for (int i = 0; i < num_ops(); ++i) {
    const OpId op = OpId(i);
    bool fc = has_trait(op, kFloatCompute), fo = has_trait(op, kFloatOnly);
    if (!fc && !fo) continue;
    SCOPED_TRACE(std::string(op_info(op).name));
    ++traited;
    EXPECT_FALSE(fc && fo);
    EXPECT_EQ(op_info(op).category, Category::Elementwise);
    const int n = op_info(op).operands;
    ASSERT_TRUE(n == 1 || n == 2);
    std::vector<Attr> attrs;
    if (op == OpId::Gelu) attrs.push_back({"approximate", AttrValue(std::string("none"))});
    std::vector<Type> ints(size_t(n), Type::contiguous(kInt32, {2, 3}));
    std::vector<Type> halves(size_t(n), Type::contiguous(kFloat16, {2, 3}));
    if (fc) EXPECT_EQ(infer_types(op, ints, attrs)[0].dtype, kFloat32);
    else EXPECT_THROW(infer_types(op, ints, attrs), Error);
    EXPECT_EQ(infer_types(op, halves, attrs)[0].dtype, kFloat16);
  }
  EXPECT_GT(traited, 20);
}

// The accuracy traits the conformance tests read (ops.def): at most one per op; views and
// products each have theirs, and every math-library op (costly and float-computing) is kApprox.
TEST(IrOpTable, AccuracyTraitsAreConsistent) {
  int exact = 0, approx = 0;
  for (int i = 0; i < num_ops(); ++i) {
    const OpId op = OpId(i);
    SCOPED_TRACE(std::string(op_info(op).name));
    int n = int(has_trait(op, kExact)) + int(has_trait(op, kExactValue)) + int(has_trait(op, kApprox));
    EXPECT_LE(n, 1);
    exact += has_trait(op, kExact);
    approx += has_trait(op, kApprox);
    if (op_info(op).category == Category::View) {
      EXPECT_TRUE(has_trait(op, kExact));
    }
    if (op_info(op).category == Category::Control) {
      EXPECT_EQ(n, 0);
    }
    if (has_trait(op, kTakesEpilogue)) {
      EXPECT_TRUE(has_trait(op, kApprox));
    }
    if (has_trait(op, kCostly) && (has_trait(op, kFloatCompute) || has_trait(op, kFloatOnly))) {
      EXPECT_TRUE(has_trait(op, kApprox));
    }
  }
  EXPECT_GT(exact, 20);
  EXPECT_GT(approx, 30);
}

// The schema column of ops.def gives each attribute its default once (ir::attr_default): PyTorch's
// defaults where an attribute has one, none where it is required. Reading any op's schema parses
// every op's, so a schema text the parser cannot read fails here, not at a user's first call.
TEST(IrOpTable, AttributeSchemasGiveTheirDefaults) {
  for (int i = 0; i < num_ops(); ++i) EXPECT_EQ(attr_default(OpId(i), "no_such_attribute"), nullptr);
  auto dflt = [](OpId op, std::string_view name) {
    const AttrValue* v = attr_default(op, name);
    return v ? attr_str(*v) : std::string("(required)");
  };
  EXPECT_EQ(dflt(OpId::Add, "alpha"), "1");
  EXPECT_EQ(dflt(OpId::Sum, "dims"), "[]");
  EXPECT_EQ(dflt(OpId::Sum, "keepdim"), "false");
  EXPECT_EQ(dflt(OpId::Sum, "dtype"), "none");
  EXPECT_EQ(dflt(OpId::Norm, "p"), "2.0");
  EXPECT_EQ(dflt(OpId::Var, "correction"), "1");
  EXPECT_EQ(dflt(OpId::Gelu, "approximate"), "\"none\"");
  EXPECT_EQ(dflt(OpId::Slice, "step"), "1");
  EXPECT_EQ(dflt(OpId::Slice, "end"), "none");  // (to the dim's size)
  EXPECT_EQ(dflt(OpId::AsStrided, "offset"), "none");  // (the operand's own)
  EXPECT_EQ(dflt(OpId::AsStrided, "sizes"), "(required)");
  EXPECT_EQ(dflt(OpId::Softmax, "dim"), "(required)");
  EXPECT_EQ(dflt(OpId::Argmax, "dim"), "none");
  // an attribute the schema does not name is refused, naming the ones it does
  try {
    infer_types(OpId::Slice, {Type::contiguous(kFloat32, {4})}, {{"stop", int64_t(2)}});
    ADD_FAILURE() << "an unknown attribute was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("slice takes dim, end, start, step"), std::string::npos) << e.what();
  }
  // and one of a kind it does not allow
  EXPECT_THROW(infer_types(OpId::Softmax, {Type::contiguous(kFloat32, {4})}, {{"dim", 1.5}}), Error);
}

// Structural identity: a graph's key says what its text says (equal texts, equal keys; any
// difference in a name, op, operand, attribute, type or output, a different key), and with its
// sizes erased, two graphs that differ only in their types' sizes and strides share a key.
TEST(IrIdentity, KeysFollowTheTextAndEraseSizes) {
  const std::string base =
      "graph @g(%x: f32[4,3]{3,1}, %y: f32[3]{1}) {\n"
      "  %0 = add(%x, %y) {alpha=2} : f32[4,3]{3,1}\n"
      "  %1 = sum(%0) {dims=[1], keepdim=false} : f32[4]{1}\n"
      "  return %1, %0\n"
      "}\n";
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = base;
    for (size_t at = t.find(from); at != std::string::npos; at = t.find(from, at + to.size())) t.replace(at, from.size(), to);
    return parse(t);
  };
  const Graph g = parse(base);
  EXPECT_EQ(structure_key(copy(g)), structure_key(g));
  EXPECT_EQ(structure_key(parse(print(g))), structure_key(g));
  EXPECT_EQ(hash(parse(print(g))), hash(g));
  // other sizes throughout: a different key, the same erased one
  Graph resized = parse(
      "graph @g(%x: f32[8,5]{5,1}, %y: f32[5]{1}) {\n"
      "  %0 = add(%x, %y) {alpha=2} : f32[8,5]{5,1}\n"
      "  %1 = sum(%0) {dims=[1], keepdim=false} : f32[8]{1}\n"
      "  return %1, %0\n"
      "}\n");
  EXPECT_NE(structure_key(resized), structure_key(g));
  EXPECT_EQ(structure_key(resized, true), structure_key(g, true));
  EXPECT_EQ(hash(resized, true), hash(g, true));
  // every other difference shows, erased or not
  for (const Graph& other : {with("alpha=2", "alpha=3"), with("alpha=2", "alpha=2.0"), with("dims=[1]", "dims=[0]"),
                             with("add(%x, %y)", "sub(%x, %y)"), with("@g", "@h"), with("%y", "%z"),
                             with("return %1, %0", "return %0, %1")}) {
    SCOPED_TRACE(print(other));
    EXPECT_NE(structure_key(other), structure_key(g));
    EXPECT_NE(structure_key(other, true), structure_key(g, true));
    EXPECT_NE(hash(other), hash(g));
  }
}

TEST(IrText, EveryOpRoundTripsThroughTextAndJson) {
  for (int i = 0; i < num_ops(); ++i) {
    for (int variant = 0; variant < (OpId(i) == OpId::Constant ? 2 : 1); ++variant) {
      SCOPED_TRACE(std::string(op_info(OpId(i)).name) + " variant " + std::to_string(variant));
      Graph g = graph_with(OpId(i), variant);
      auto err = verify(g);
      ASSERT_FALSE(err.has_value()) << err->str() << "\n" << print(g);
      std::string text = print(g);
      Graph back = parse(text);
      EXPECT_EQ(print(back), text);
      EXPECT_EQ(hash(back), hash(g));
      EXPECT_FALSE(verify(back).has_value());
      std::string js = to_json(g);
      Graph from_js = from_json(js);
      EXPECT_EQ(print(from_js), text);
      EXPECT_EQ(to_json(from_js), js);
      EXPECT_EQ(hash(from_js), hash(g));
    }
  }
}

TEST(IrText, RegionsNestAfterTheNodeLine) {
  Graph g = cond_graph();
  const std::string text =
      "graph @choose(%p: b8[]{}, %a: f32[4]{1}, %b: f32[4]{1}) {\n"
      "  %0 = cond(%p, %a, %b) : f32[4]{1} {\n"
      "    graph @then(%a: f32[4]{1}, %b: f32[4]{1}) {\n"
      "      %0 = add(%a, %b) : f32[4]{1}\n"
      "      return %0\n"
      "    }\n"
      "    graph @else(%a: f32[4]{1}, %b: f32[4]{1}) {\n"
      "      %0 = mul(%a, %b) : f32[4]{1}\n"
      "      return %0\n"
      "    }\n"
      "  }\n"
      "  return %0\n"
      "}\n";
  EXPECT_EQ(print(g), text);
  Graph back = parse(text);
  ASSERT_EQ(back.nodes()[0]->regions.size(), 2u);
  EXPECT_EQ(back.nodes()[0]->regions[1]->name(), "else");
  EXPECT_EQ(back.nodes()[0]->regions[0]->nodes()[0]->loc.line, 4);  // locations count from the file's start
  EXPECT_EQ(back.nodes()[0]->regions[0]->nodes()[0]->loc.col, 7);
  EXPECT_FALSE(verify(back).has_value());
  EXPECT_EQ(infer_types(*back.nodes()[0]), std::vector<Type>{f32({4})});
  // regions are part of the identity: a different branch body hashes differently
  std::string other = text;
  other.replace(other.find("mul("), 3, "sub");
  EXPECT_NE(hash(parse(other)), hash(g));
  // regions nest: a cond inside a branch, printed two levels further in
  std::string nested =
      "graph @g(%p: b8[]{}, %x: f32[4]{1}) {\n"
      "  %0 = cond(%p, %p, %x) : f32[4]{1} {\n"
      "    graph @then(%q: b8[]{}, %x: f32[4]{1}) {\n"
      "      %0 = cond(%q, %x) : f32[4]{1} {\n"
      "        graph @then(%x: f32[4]{1}) {\n"
      "          %0 = neg(%x) : f32[4]{1}\n"
      "          return %0\n"
      "        }\n"
      "        graph @else(%x: f32[4]{1}) {\n"
      "          return %x\n"
      "        }\n"
      "      }\n"
      "      return %0\n"
      "    }\n"
      "    graph @else(%q: b8[]{}, %x: f32[4]{1}) {\n"
      "      return %x\n"
      "    }\n"
      "  }\n"
      "  return %0\n"
      "}\n";
  Graph n = parse(nested);
  EXPECT_EQ(print(n), nested);
  EXPECT_FALSE(verify(n).has_value()) << verify(n)->str();
  EXPECT_EQ(print(from_json(to_json(n))), nested);
}

// ir::copy copies a graph structurally (no print and parse): the same text, value ids and
// source locations, regions included, also where an input was added after a node (as the tracer
// adds captured tensors), and the copy is a graph of its own.
TEST(IrCopy, KeepsTextIdsAndLocationsAndOwnsItsValues) {
  Graph g("late_input");
  Value* a = g.add_input("a", f32({4}));
  Node* n = g.add_node(OpId::Neg, {a}, {}, {f32({4})}, {7, 3});
  Value* w = g.add_input("w", f32({4}));  // after the node: id 2
  Node* m = g.add_node(OpId::Mul, {n->outputs[0], w}, {}, {f32({4})});
  g.set_outputs({m->outputs[0]});
  Graph c = copy(g);
  EXPECT_EQ(print(c), print(g));
  ASSERT_EQ(c.inputs().size(), 2u);
  EXPECT_EQ(c.inputs()[1]->id, w->id);
  EXPECT_EQ(c.nodes()[0]->loc.line, 7);
  EXPECT_EQ(c.nodes()[0]->loc.col, 3);
  EXPECT_TRUE(c.owns(c.outputs()[0]));
  EXPECT_FALSE(c.owns(g.outputs()[0]));
  EXPECT_FALSE(verify(c).has_value());
  Graph r = cond_graph();
  EXPECT_EQ(print(copy(r)), print(r));
  EXPECT_NE(copy(r).nodes()[0]->regions[0].get(), r.nodes()[0]->regions[0].get());
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

// Each op's attributes decode into its generated struct (kiln/ir/attrs.h): given values, the
// schema's defaults for the rest, and a clear error for a missing or ill-kinded one.
TEST(IrOpTable, AttributesDecodeIntoEachOpsStruct) {
  attrs::Sum sum = decode<OpId::Sum>(std::vector<Attr>{{"dims", IntList{1, -1}}});
  EXPECT_EQ(sum.dims, (IntList{1, -1}));
  EXPECT_FALSE(sum.keepdim);
  EXPECT_FALSE(sum.dtype.has_value());
  attrs::Slice slice = decode<OpId::Slice>(std::vector<Attr>{{"end", int64_t(7)}, {"step", int64_t(2)}});
  EXPECT_EQ(slice.dim, 0);
  EXPECT_EQ(slice.start, 0);
  EXPECT_EQ(slice.end, std::optional<int64_t>(7));
  EXPECT_EQ(slice.step, 2);
  attrs::Addmm addmm = decode<OpId::Addmm>(std::vector<Attr>{{"beta", 0.5}});
  EXPECT_EQ(addmm.alpha.to_int(), 1);
  EXPECT_EQ(addmm.beta.to_double(), 0.5);
  EXPECT_EQ(decode<OpId::Norm>(std::vector<Attr>{{"p", int64_t(3)}}).p, 3.0);  // an int where a float goes
  EXPECT_EQ(decode<OpId::Cast>(std::vector<Attr>{{"dtype", kBFloat16}}).dtype, kBFloat16);
  EXPECT_EQ(decode<OpId::Div>(std::vector<Attr>{{"rounding_mode", AttrValue(std::string("floor"))}}).rounding_mode,
            std::optional<std::string>("floor"));
  try {
    decode<OpId::Softmax>(std::vector<Attr>{});
    ADD_FAILURE() << "a missing required attribute decoded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("softmax: missing attribute 'dim'"), std::string::npos) << e.what();
  }
  try {
    decode<OpId::Softmax>(std::vector<Attr>{{"dim", 1.5}});
    ADD_FAILURE() << "an attribute of the wrong kind decoded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("softmax: attribute 'dim' has the wrong kind (1.5)"), std::string::npos)
        << e.what();
  }
  // and inference reports a missing one as its own error, as before
  try {
    infer_types(OpId::Softmax, {f32({4})}, {});
    ADD_FAILURE() << "inference accepted a missing attribute";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[infer] softmax: missing attribute 'dim' (int)"), std::string::npos)
        << e.what();
  }
}

// A number enters a graph as scalar<dt>; an input typed as a wrapped number would promote as one
// in the graph's types but run as the 0-d tensor its caller passes (pow(i32, f64[] wrapped) is
// f32, pow(i32, f64[]) is f64), so verify() refuses it, naming the input.
TEST(IrVerify, AGraphInputIsNeverAWrappedNumber) {
  Graph g = parse(
      "graph @g(%x: i32[3]{1}, %e: f64[]{} wrapped) {\n"
      "  %0 = pow(%x, %e) : f32[3]{1}\n"
      "  return %0\n"
      "}\n");
  auto e = verify(g);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find("graph input %e has type f64[]{} wrapped: a number enters a graph as scalar<f64>"),
            std::string::npos)
      << e->message;
  EXPECT_FALSE(verify(parse("graph @g(%x: i32[3]{1}, %e: scalar<f64>) {\n"
                            "  %0 = pow(%x, %e) : f32[3]{1}\n"
                            "  return %0\n"
                            "}\n"))
                   .has_value());
}

// clamp's bounds are both numbers or both tensors, as PyTorch's overloads take them.
TEST(IrInfer, ClampRefusesANumberAndATensorBound) {
  Type x = f32({2, 3});
  std::vector<Attr> both = {{"has_max", true}, {"has_min", true}};
  EXPECT_NO_THROW(infer_types(OpId::Clamp, {x, Type::scalar(kInt64), Type::scalar(kFloat64)}, both));
  EXPECT_NO_THROW(infer_types(OpId::Clamp, {x, f32({3}), f32({2, 1})}, both));
  try {
    infer_types(OpId::Clamp, {x, Type::scalar(kInt64), f32({3})}, both);
    ADD_FAILURE() << "a number and a tensor bound were accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("min and max must both be numbers or both be tensors"), std::string::npos)
        << err.what();
  }
}

TEST(IrText, AttributesAndTypesKeepExactValues) {
  std::string text =
      "graph @g(%x: f32[]{} wrapped, %s: scalar<i64>, %d: bf16[4,0]{1,4}@cuda:1) {\n"
      "  %0, %1 = max(%x) {a=-0.0, b=1e-300, c=inf, d=-inf, e=nan, f=\"q\\\"\\\\\\n\", g=[], h=u8, "
      "i=none, j=false, k=-9223372036854775808} : f64[]{}, i64[]{}\n"
      "  return %1, %0\n"
      "}\n";
  // parse() checks structure only (max is a reduction with one operand), so attributes of
  // every kind survive it; verify() then refuses the ones max does not take
  Graph g = parse(text);
  EXPECT_EQ(print(g), text);
  ASSERT_TRUE(verify(g).has_value());
  EXPECT_NE(verify(g)->message.find("node 0 (%0, %1 = max): unknown attribute 'a'"), std::string::npos) << verify(g)->message;
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

// A type whose element count or bytes pass int64 is refused where it is read (text, JSON) and by
// the verifier: dump-ir --run allocated a wrapped byte count for one and wrote past it.
TEST(IrText, TypesPastInt64AreRefused) {
  expect_parse_error("graph @g(%x: f32[4611686018427387905]{1}) {\n  return %x\n}", 1, 14,
                     "malformed type: sizes [4611686018427387905] and strides {1} of f32 reach more bytes than "
                     "int64 can count");
  expect_parse_error("graph @g(%x: f32[4294967296,4294967296]{0,0}) {\n  return %x\n}", 1, 14,
                     "malformed type: sizes [4294967296,4294967296] have more elements than int64 can count");
  // a negative stride reaches as far as a positive one
  expect_parse_error("graph @g(%x: i8[3]{-4611686018427387904}) {\n  return %x\n}", 1, 14, "reach more bytes");
  expect_parse_error("graph @g(%x: f32[1]{1}) {\n  %0 = expand(%x) {sizes=[4294967296,4294967296]} : "
                     "f32[4294967296,4294967296]{0,0}\n  return %0\n}",
                     2, 53, "have more elements than int64 can count");
  // from_json reads its types with the same parser
  std::string js = to_json(parse("graph @g(%x: f32[4]{1}) {\n  %0 = neg(%x) : f32[4]{1}\n  return %0\n}\n"));
  for (size_t at; (at = js.find("f32[4]{1}")) != std::string::npos;) js.replace(at, 9, "f32[4611686018427387905]{1}");
  try {
    from_json(js);
    ADD_FAILURE() << "expected from_json to refuse the type";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("malformed type: sizes [4611686018427387905]"), std::string::npos) << e.what();
  }
  // a graph built in code: the verifier refuses it too
  Graph g;
  Value* x = g.add_input("x", Type::tensor(kFloat32, {(int64_t(1) << 62) + 1}, {1}));
  g.set_outputs({x});
  auto err = verify(g);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->message.find("graph input %x has a malformed type: sizes [4611686018427387905]"), std::string::npos)
      << err->message;
  // the edges: 2^62 bytes of f64 fit, 2^63 do not; a size-0 dim leaves nothing to count
  EXPECT_EQ(size_problem(Type::contiguous(kFloat64, {int64_t(1) << 59})), "");
  EXPECT_NE(size_problem(Type::contiguous(kFloat64, {int64_t(1) << 60})), "");
  EXPECT_EQ(size_problem(Type::tensor(kFloat32, {int64_t(1) << 62, int64_t(1) << 62, 0}, {1, 1, 1})), "");
  EXPECT_EQ(size_problem(Type::scalar(kFloat64)), "");
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

// ---- JSON: only kiln::Error leaves from_json, saying what and where ----

namespace {

// The JSON of a graph with one neg node whose attribute list is `attr` (structure only:
// from_json does not check attributes against the op).
std::string neg_json(const std::string& attr) {
  return R"({"graph": "g", "inputs": [{"name": "x", "type": "f32[2]{1}"}],
  "nodes": [{"op": "neg", "inputs": ["%x"], "attrs": [)" + attr + R"(], "outputs": ["f32[2]{1}"]}],
  "outputs": ["%0"]})";
}

void expect_json_error(const std::string& text, const std::string& needle) {
  try {
    from_json(text);
    ADD_FAILURE() << "expected from_json to refuse: " << needle << "\n" << text.substr(0, 400);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "an exception other than kiln::Error left from_json: " << e.what();
  }
}

}  // namespace

// 1e999 is valid JSON syntax whose value no double holds: nlohmann's json::parse threw its own
// out_of_range for it, which left from_json (and dump-ir) as a foreign exception with no
// position. It is a ParseError at the number's line and column now.
TEST(IrJson, ANumberOutOfRangeIsAParseErrorAtItsPosition) {
  const std::string js = neg_json(R"({"name": "k", "kind": "float", "value": 1e999})");
  const size_t at = js.find("1e999");
  const int line = 1 + int(std::count(js.begin(), js.begin() + std::ptrdiff_t(at), '\n'));
  const int col = int(at - js.rfind('\n', at));
  for (int form = 0; form < 2; ++form) {
    try {
      if (form == 0) from_json(js);
      else graphs_from_json(js);
      ADD_FAILURE() << "expected a ParseError";
    } catch (const ParseError& e) {
      EXPECT_EQ(e.line, line) << e.what();
      EXPECT_EQ(e.col, col) << e.what();
      EXPECT_NE(std::string(e.what()).find("malformed JSON: number overflow parsing '1e999'"), std::string::npos)
          << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a kiln::ParseError: " << e.what();
    }
  }
  // a syntax error keeps its position too
  try {
    from_json("{\n  \"graph\": \"g\",\n  \"inputs\": [1, ]\n}");
    ADD_FAILURE() << "expected a ParseError";
  } catch (const ParseError& e) {
    EXPECT_EQ(e.line, 3) << e.what();
    EXPECT_EQ(e.col, 17) << e.what();
    EXPECT_NE(std::string(e.what()).find("malformed JSON: syntax error"), std::string::npos) << e.what();
  }
}

// Each field is checked for its kind before it is read: an int attribute of 2.5 was read as 2,
// and one past int64 wrapped.
TEST(IrJson, EveryFieldIsCheckedBeforeItIsRead) {
  expect_json_error(R"({"graph": 3})", "\"graph\" (its name): expected a string, found the integer 3");
  expect_json_error(R"([1, 2])", "expected an object, found array");
  expect_json_error(R"({"graph": "g", "inputs": {}, "nodes": [], "outputs": []})",
                    "graph: \"inputs\": expected an array, found object");
  expect_json_error(R"({"graph": "g", "inputs": [], "nodes": [{"inputs": []}], "outputs": []})",
                    "graph: node 0: \"op\" is missing");
  expect_json_error(R"({"graph": "g", "inputs": [{"name": "x", "type": "f32["}], "nodes": [], "outputs": ["%x"]})",
                    "graph: input 0: \"type\": type 'f32['");
  expect_json_error(neg_json(R"({"name": "k", "kind": "int", "value": 2.5})"),
                    "attribute 'k': \"value\": expected an integer, found the number 2.5");
  expect_json_error(neg_json(R"({"name": "k", "kind": "int", "value": 18446744073709551615})"),
                    "18446744073709551615 is out of the range of a 64-bit integer");
  expect_json_error(neg_json(R"({"name": "k", "kind": "bool", "value": 1})"), "expected true or false");
  expect_json_error(neg_json(R"({"name": "k", "kind": "ints", "value": [1, "2"]})"), "expected an integer, found string");
  expect_json_error(neg_json(R"({"name": "k", "kind": "float", "value": "big"})"), "bad float 'big'");
  expect_json_error(neg_json(R"({"name": "k", "kind": "complex", "value": 1})"), "unknown attribute kind 'complex'");
  expect_json_error(std::string(100000, '[') + std::string(100000, ']'), "nested deeper than 512 levels");
  // the values that are in range still read exactly
  Graph g = from_json(neg_json(R"({"name": "k", "kind": "int", "value": -9223372036854775808},
                                  {"name": "m", "kind": "int", "value": 9223372036854775807})"));
  EXPECT_EQ(std::get<int64_t>(g.nodes()[0]->attr("k")->value), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(std::get<int64_t>(g.nodes()[0]->attr("m")->value), std::numeric_limits<int64_t>::max());
}

// The documents dump-ir writes hold one graph, one under "graph" or several under "graphs".
TEST(IrJson, DocumentsOfSeveralGraphs) {
  Graph a = parse("graph @a(%x: f32[2]{1}) {\n  %0 = neg(%x) : f32[2]{1}\n  return %0\n}\n");
  Graph b = parse("graph @b(%y: f32[3]{1}) {\n  %0 = exp(%y) : f32[3]{1}\n  return %0\n}\n");
  const std::string ja = to_json(a), jb = to_json(b);
  auto printed = [](const std::vector<Graph>& gs) {
    std::vector<std::string> out;
    for (const Graph& g : gs) out.push_back(print(g));
    return out;
  };
  EXPECT_EQ(printed(graphs_from_json(ja)), std::vector<std::string>{print(a)});
  EXPECT_EQ(printed(graphs_from_json(R"({"graph": )" + ja + R"(, "outputs": []})")), std::vector<std::string>{print(a)});
  EXPECT_EQ(printed(graphs_from_json(R"({"workload": "w", "graphs": [)" + ja + ", " + jb + "]}")),
            (std::vector<std::string>{print(a), print(b)}));
  try {
    graphs_from_json(R"({"graphs": [)" + ja + R"(, {"graph": 3}]})");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("graph 1: \"graph\" (its name): expected a string"), std::string::npos) << e.what();
  }
  EXPECT_THROW(graphs_from_json(R"({"graphs": []})"), Error);
}

// ---- names ----

// Every name the verifier accepts prints and parses back; the others are refused wherever the
// graph comes from (JSON accepted them, and dump-ir then printed text that did not parse).
TEST(IrNames, OnlyNamesTheTextFormReadsBackVerify) {
  auto graph = [](const std::string& name, const std::string& input, const std::string& attr) {
    Graph g(name);
    Value* x = g.add_input(input, f32({2}));
    Node* n = g.add_node(OpId::Neg, {x}, attr.empty() ? std::vector<Attr>{} : std::vector<Attr>{{attr, int64_t(1)}},
                         {f32({2})});
    g.set_outputs({n->outputs[0]});
    return g;
  };
  for (const std::string name : {"main", "1st", "_", "graph_0"})
    for (const std::string input : {"x", "_1", "a0", "X_y"}) {
      Graph g = graph(name, input, "k_1");
      auto err = verify_structure(g);
      ASSERT_FALSE(err.has_value()) << name << " " << input << ": " << err->str();
      EXPECT_EQ(print(parse(print(g))), print(g));
      EXPECT_EQ(print(from_json(to_json(g))), print(g));
    }
  struct Case {
    std::string name, input, attr, needle;
  };
  const std::vector<Case> refused = {
      {"", "x", "", "graph name '' cannot be written in the text form"},
      {"a b", "x", "", "graph name 'a b' cannot be written in the text form"},
      {"a-b", "x", "", "graph name 'a-b'"},
      {"caf\xc3\xa9", "x", "", "graph name 'caf\\xc3\\xa9'"},
      {"g", "1x", "", "graph input name '1x' cannot be written in the text form"},
      {"g", "x.y", "", "graph input name 'x.y'"},
      {"g", "%x", "", "graph input name '%x'"},
      {"g", "x", "a b", "attribute name 'a b' cannot be written in the text form"},
      {"g", "x", "1a", "attribute name '1a'"},
  };
  for (const Case& c : refused) {
    SCOPED_TRACE(c.needle);
    Graph g = graph(c.name, c.input, c.attr);
    auto err = verify(g);
    ASSERT_TRUE(err.has_value());
    EXPECT_NE(err->message.find(c.needle), std::string::npos) << err->message;
    expect_json_error(to_json(g), c.needle);
  }
  EXPECT_TRUE(is_valid_name(NameKind::Graph, "0"));
  EXPECT_FALSE(is_valid_name(NameKind::Input, "0"));  // %0 names a node's result
  EXPECT_FALSE(is_valid_name(NameKind::Attribute, "0"));
}

// ---- writes ----

// A cond's branches are functional: a write into a region's input is a write into the cond's
// operand, memory the kernel program does not see written (it returned the old values where
// the reference executor returned the new ones). The verifier refuses it, through a view too.
TEST(IrVerify, ARegionMustNotWriteItsInputs) {
  const std::string writes = R"(graph @g(%p: b8[]{}, %x: f32[4]{1}, %b: f32[4]{1}) {
  %0 = neg(%x) : f32[4]{1}
  %1 = cond(%p, %x, %b) : f32[4]{1} {
    graph @then(%u: f32[4]{1}, %v: f32[4]{1}) {
      %0 = copy(%u, %v) : f32[4]{1}
      return %0
    }
    graph @else(%u: f32[4]{1}, %v: f32[4]{1}) {
      return %v
    }
  }
  %2 = neg(%x) : f32[4]{1}
  return %2, %1, %0
})";
  expect_parse_error(writes, 5, 7,
                     "in region 0 (@then) of node 1 (%1 = cond): node 0 (%0 = copy): writes into %u, an input of the "
                     "region: a cond's branches must not write their operands");
  const std::string through_view = R"(graph @g(%p: b8[]{}, %x: f32[4]{1}, %b: f32[]{}) {
  %0 = cond(%p, %x, %b) : f32[4]{1} {
    graph @then(%u: f32[4]{1}, %v: f32[]{}) {
      return %u
    }
    graph @else(%u: f32[4]{1}, %v: f32[]{}) {
      %0 = select(%u) {dim=0, index=2} : f32[]{}
      %1 = copy(%0, %v) : f32[]{}
      %2 = neg(%u) : f32[4]{1}
      return %2
    }
  }
  return %0
})";
  expect_parse_error(through_view, 8, 7, "in region 1 (@else) of node 0 (%0 = cond): node 1 (%1 = copy): writes into %u");
  // a branch may write memory of its own
  const std::string own = R"(graph @g(%p: b8[]{}, %x: f32[4]{1}, %b: f32[4]{1}) {
  %0 = cond(%p, %x, %b) : f32[4]{1} {
    graph @then(%u: f32[4]{1}, %v: f32[4]{1}) {
      %0 = neg(%u) : f32[4]{1}
      %1 = copy(%0, %v) : f32[4]{1}
      return %1
    }
    graph @else(%u: f32[4]{1}, %v: f32[4]{1}) {
      return %v
    }
  }
  return %0
})";
  Graph g = parse(own);
  auto err = verify(g);
  EXPECT_FALSE(err.has_value()) << err->str();
}

// A cond's results are new memory, as the kernel program makes them: a branch that returns its
// operand, or a constant, hands back a copy. The reference executor returned the operand
// itself, so a later write into the result reached the operand (and a write into a returned
// constant reached every later run).
TEST(IrExec, ACondResultIsNewMemory) {
  Graph g = parse(R"(graph @g(%p: b8[]{}, %x: f32[4]{1}, %b: f32[4]{1}) {
  %0 = cond(%p, %x) : f32[4]{1} {
    graph @then(%u: f32[4]{1}) {
      return %u
    }
    graph @else(%u: f32[4]{1}) {
      %0 = constant() {data="0000803f000000400000404000008040"} : f32[4]{1}
      return %0
    }
  }
  %1 = neg(%0) : f32[4]{1}
  %2 = copy(%0, %b) : f32[4]{1}
  %3 = neg(%x) : f32[4]{1}
  return %3, %1, %2
})");
  ASSERT_FALSE(verify(g).has_value()) << verify(g)->str();
  Executable exe(g);
  auto same = [](const Tensor& a, const Tensor& b) { return a.sizes().vec() == b.sizes().vec() && a.eq(b).all().item<bool>(); };
  const Tensor constant = from_vector<float>({1, 2, 3, 4}, {4});
  for (bool p : {true, false, false}) {
    SCOPED_TRACE(p);
    Tensor pred = full(std::vector<int64_t>{}, p, TensorOptions(kBool));
    Tensor x = randn({4}), b = randn({4});
    const Tensor x0 = x.clone();
    std::vector<Tensor> out = exe.run(std::vector<Tensor>{pred, x, b});
    ASSERT_EQ(out.size(), 3u);
    EXPECT_TRUE(same(x, x0)) << "the write into the cond's result reached its operand";
    EXPECT_TRUE(same(out[0], x0.neg()));
    EXPECT_TRUE(same(out[1], p ? x0.neg() : constant.neg())) << "a write of an earlier run reached the constant";
    EXPECT_TRUE(same(out[2], b));
    EXPECT_FALSE(out[2].is_alias_of(x));
  }
}

// aminmax names one dim or none in the API, but a graph the passes rewrote may list several:
// the executor computes amin and amax over all of them, as inference types them.
TEST(IrExec, AminmaxOverSeveralDimsIsAminAndAmaxOverThem) {
  Graph g = parse(R"(graph @g(%x: f32[2,3,4]{12,4,1}) {
  %0, %1 = aminmax(%x) {dims=[0, 2], keepdim=true} : f32[1,3,1]{3,1,1}, f32[1,3,1]{3,1,1}
  return %0, %1
})");
  ASSERT_FALSE(verify(g).has_value()) << verify(g)->str();
  Tensor x = randn({2, 3, 4});
  std::vector<Tensor> out = Executable(g).run(std::vector<Tensor>{x});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].sizes().vec(), (std::vector<int64_t>{1, 3, 1}));
  EXPECT_TRUE(out[0].eq(amin(x, {0, 2}, true)).all().item<bool>());
  EXPECT_TRUE(out[1].eq(amax(x, {0, 2}, true)).all().item<bool>());
}

// A hand-written graph may leave out the attributes with a default in the op table's schema
// (PyTorch's: add's alpha, a reduction's dims and keepdim, norm's p, ...): it verifies and runs
// as if they were spelled out. Required ones stay required, in inference and in the executor.
TEST(IrDefaults, LeftOutAttributesTakeTheSchemaDefaults) {
  const char* bare = R"(graph @g(%x: f32[4,3]{3,1}, %y: f32[3]{1}) {
  %0 = add(%x, %y) : f32[4,3]{3,1}
  %1 = sum(%0) : f32[]{}
  %2 = slice(%0) {start=1} : f32[3,3]{3,1}
  %3 = norm(%0) : f32[]{}
  %4 = var(%0) : f32[]{}
  %5 = gelu(%0) : f32[4,3]{3,1}
  %6 = amax(%0) : f32[]{}
  return %1, %2, %3, %4, %5, %6
})";
  const char* spelled = R"(graph @g(%x: f32[4,3]{3,1}, %y: f32[3]{1}) {
  %0 = add(%x, %y) {alpha=1} : f32[4,3]{3,1}
  %1 = sum(%0) {dims=[], dtype=none, keepdim=false} : f32[]{}
  %2 = slice(%0) {dim=0, end=4, start=1, step=1} : f32[3,3]{3,1}
  %3 = norm(%0) {dims=[], keepdim=false, p=2.0} : f32[]{}
  %4 = var(%0) {correction=1, dims=[], keepdim=false} : f32[]{}
  %5 = gelu(%0) {approximate="none"} : f32[4,3]{3,1}
  %6 = amax(%0) {dims=[], keepdim=false} : f32[]{}
  return %1, %2, %3, %4, %5, %6
})";
  Graph a = parse(bare), b = parse(spelled);
  ASSERT_FALSE(verify(a).has_value()) << verify(a)->str();
  ASSERT_FALSE(verify(b).has_value()) << verify(b)->str();
  Tensor x = randn({4, 3}), y = randn({3});
  std::vector<Tensor> ra = execute(a, std::vector<Tensor>{x, y}), rb = execute(b, std::vector<Tensor>{x, y});
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(ra[i].sizes().vec(), rb[i].sizes().vec()) << "output " << i;
    EXPECT_TRUE(ra[i].eq(rb[i]).all().item<bool>()) << "output " << i;
  }
  EXPECT_TRUE(ra[1].eq((x + y).slice(0, 1, 4, 1)).all().item<bool>());

  // the table: values of the schema's kinds; none where there is no default
  ASSERT_NE(attr_default(OpId::Add, "alpha"), nullptr);
  EXPECT_EQ(std::get<int64_t>(*attr_default(OpId::Add, "alpha")), 1);
  EXPECT_EQ(std::get<double>(*attr_default(OpId::Norm, "p")), 2.0);
  EXPECT_FALSE(std::get<bool>(*attr_default(OpId::Sum, "keepdim")));
  EXPECT_TRUE(std::get<IntList>(*attr_default(OpId::Squeeze, "dims")).empty());
  EXPECT_EQ(std::get<std::string>(*attr_default(OpId::Gelu, "approximate")), "none");
  EXPECT_TRUE(std::holds_alternative<NoneAttr>(*attr_default(OpId::Argmax, "dim")));
  EXPECT_TRUE(std::holds_alternative<NoneAttr>(*attr_default(OpId::Slice, "end")));  // (the dim's size)
  EXPECT_EQ(attr_default(OpId::Transpose, "dim0"), nullptr);  // required
  EXPECT_EQ(attr_default(OpId::Permute, "dims"), nullptr);    // required
  EXPECT_EQ(attr_default(OpId::Add, "beta"), nullptr);        // not an attribute of add

  // a required attribute left out: inference names it
  Graph t = parse(R"(graph @t(%x: f32[4,3]{3,1}) {
  %0 = transpose(%x) {dim0=0} : f32[3,4]{1,3}
  return %0
})");
  auto err = verify(t);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->str().find("missing attribute 'dim1'"), std::string::npos) << err->str();
}
