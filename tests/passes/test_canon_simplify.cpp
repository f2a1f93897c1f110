// The canonicalization passes (passes/src/canon): simplify's rule table, and the five passes
// together on graphs in the shape of the workloads. Checks as in test_canon.cpp.
#include "canon_check.h"

namespace kiln::passes::canon_test {
namespace {

using ir::Graph;

// ---- simplify ----

TEST(CanonSimplify, MulByOne) {
  // x*1 and 1*x read x; a returned x*1 stays (returning x would hand the caller its input)
  EXPECT_EQ(check_pass("simplify",
                       "graph @g(%x: f32[4]{1}) {\n"
                       "  %0 = constant() {value=1} : i64[]{} wrapped\n"
                       "  %1 = mul(%x, %0) : f32[4]{1}\n"
                       "  %2 = mul(%0, %x) : f32[4]{1}\n"
                       "  %3 = add(%1, %2) {alpha=1} : f32[4]{1}\n"
                       "  %4 = exp(%x) : f32[4]{1}\n"
                       "  %5 = constant() {value=1.0} : f64[]{} wrapped\n"
                       "  %6 = mul(%4, %5) : f32[4]{1}\n"
                       "  %7 = mul(%x, %5) : f32[4]{1}\n"
                       "  return %3, %6, %7\n"
                       "}\n"),
            "graph @g(%x: f32[4]{1}) {\n"
            "  %0 = constant() {value=1} : i64[]{} wrapped\n"
            "  %1 = add(%x, %x) {alpha=1} : f32[4]{1}\n"
            "  %2 = exp(%x) : f32[4]{1}\n"
            "  %3 = constant() {value=1.0} : f64[]{} wrapped\n"
            "  %4 = mul(%x, %3) : f32[4]{1}\n"
            "  return %1, %2, %4\n"
            "}\n");
}

TEST(CanonSimplify, AddingZeroOnlyWhereExact) {
  // floats: x + -0.0 and x - 0.0 are x (alpha counted), x + 0.0 and x - -0.0 are not;
  // integers: any zero
  const std::string text =
      "graph @g(%x: f32[4]{1}, %i: i32[4]{1}) {\n"
      "  %0 = constant() {value=-0.0} : f64[]{} wrapped\n"
      "  %1 = constant() {value=0.0} : f64[]{} wrapped\n"
      "  %2 = constant() {value=0} : i64[]{} wrapped\n"
      "  %3 = add(%x, %0) {alpha=1} : f32[4]{1}\n"
      "  %4 = sub(%x, %1) {alpha=1} : f32[4]{1}\n"
      "  %5 = add(%x, %1) {alpha=1} : f32[4]{1}\n"
      "  %6 = sub(%x, %0) {alpha=1} : f32[4]{1}\n"
      "  %7 = add(%x, %1) {alpha=-1} : f32[4]{1}\n"
      "  %8 = sub(%x, %1) {alpha=-1} : f32[4]{1}\n"
      "  %9 = add(%0, %x) {alpha=1} : f32[4]{1}\n"
      "  %10 = add(%x, %2) {alpha=1} : f32[4]{1}\n"
      "  %11 = cat(%3, %4, %5, %6, %7, %8, %9, %10) {dim=0} : f32[32]{1}\n"
      "  %12 = add(%i, %2) {alpha=1} : i32[4]{1}\n"
      "  %13 = sub(%i, %2) {alpha=3} : i32[4]{1}\n"
      "  %14 = mul(%12, %13) : i32[4]{1}\n"
      "  return %11, %14\n"
      "}\n";
  EXPECT_EQ(check_pass("simplify", text), "graph @g(%x: f32[4]{1}, %i: i32[4]{1}) {\n"
            "  %0 = constant() {value=-0.0} : f64[]{} wrapped\n"
            "  %1 = constant() {value=0.0} : f64[]{} wrapped\n"
            "  %2 = constant() {value=0} : i64[]{} wrapped\n"
            "  %3 = add(%x, %1) {alpha=1} : f32[4]{1}\n"
            "  %4 = sub(%x, %0) {alpha=1} : f32[4]{1}\n"
            "  %5 = sub(%x, %1) {alpha=-1} : f32[4]{1}\n"
            "  %6 = add(%x, %2) {alpha=1} : f32[4]{1}\n"
            "  %7 = cat(%x, %x, %3, %4, %x, %5, %x, %6) {dim=0} : f32[32]{1}\n"
            "  %8 = mul(%i, %i) : i32[4]{1}\n"
            "  return %7, %8\n"
            "}\n");
  // and on signed zeros themselves
  Graph before = ir::parse(text), after = clone(before);
  run_pass("simplify", after);
  std::vector<Tensor> in = {from_vector<float>({-0.0f, 0.0f, 1.5f, -2.0f}), from_vector<int32_t>({0, -1, 7, 3})};
  auto a = ir::execute(before, in), b = ir::execute(after, in);
  EXPECT_TRUE(bitwise_equal(a[0], b[0]));
  EXPECT_TRUE(bitwise_equal(a[1], b[1]));
}

TEST(CanonSimplify, InvolutionsAndPowers) {
  // neg(neg(x)), not(not(b)), pow(x, 1) -> x; pow(x, 2) -> mul(x, x); pow(x, 3) stays
  EXPECT_EQ(check_pass("simplify",
                       "graph @g(%x: f32[4]{1}, %b: b8[4]{1}, %i: i8[4]{1}) {\n"
                       "  %0 = neg(%x) : f32[4]{1}\n"
                       "  %1 = neg(%0) : f32[4]{1}\n"
                       "  %2 = logical_not(%b) : b8[4]{1}\n"
                       "  %3 = logical_not(%2) : b8[4]{1}\n"
                       "  %4 = constant() {value=1} : i64[]{} wrapped\n"
                       "  %5 = pow(%x, %4) : f32[4]{1}\n"
                       "  %6 = constant() {value=2} : i64[]{} wrapped\n"
                       "  %7 = pow(%x, %6) : f32[4]{1}\n"
                       "  %8 = constant() {value=3} : i64[]{} wrapped\n"
                       "  %9 = pow(%x, %8) : f32[4]{1}\n"
                       "  %10 = cat(%1, %5, %7, %9) {dim=0} : f32[16]{1}\n"
                       "  %11 = logical_and(%3, %3) : b8[4]{1}\n"
                       "  %12 = neg(%i) : i8[4]{1}\n"
                       "  %13 = neg(%12) : i8[4]{1}\n"
                       "  %14 = add(%13, %13) {alpha=1} : i8[4]{1}\n"
                       "  return %10, %11, %14\n"
                       "}\n",
                       true, 1e-6),
            "graph @g(%x: f32[4]{1}, %b: b8[4]{1}, %i: i8[4]{1}) {\n"
            "  %0 = neg(%x) : f32[4]{1}\n"
            "  %1 = logical_not(%b) : b8[4]{1}\n"
            "  %2 = constant() {value=1} : i64[]{} wrapped\n"
            "  %3 = constant() {value=2} : i64[]{} wrapped\n"
            "  %4 = mul(%x, %x) : f32[4]{1}\n"
            "  %5 = constant() {value=3} : i64[]{} wrapped\n"
            "  %6 = pow(%x, %5) : f32[4]{1}\n"
            "  %7 = cat(%x, %x, %4, %6) {dim=0} : f32[16]{1}\n"
            "  %8 = logical_and(%b, %b) : b8[4]{1}\n"
            "  %9 = neg(%i) : i8[4]{1}\n"
            "  %10 = add(%i, %i) {alpha=1} : i8[4]{1}\n"
            "  return %7, %8, %10\n"
            "}\n");
}

TEST(CanonSimplify, DivisionByAPowerOfTwo) {
  // x/2 -> x*0.5, h/0.25 -> h*4.0 (f16), x/t for a 0-d tensor t = 2 -> x*t' (t' = 0.5, same
  // dtype); x/3 and floor division stay, and so does h/2^20 (2^20 overflows f16)
  EXPECT_EQ(check_pass("simplify",
                       "graph @g(%x: f32[4]{1}, %h: f16[4]{1}) {\n"
                       "  %0 = constant() {value=2} : i64[]{} wrapped\n"
                       "  %1 = div(%x, %0) {rounding_mode=none} : f32[4]{1}\n"
                       "  %2 = constant() {value=3} : i64[]{} wrapped\n"
                       "  %3 = div(%x, %2) {rounding_mode=none} : f32[4]{1}\n"
                       "  %4 = div(%x, %0) {rounding_mode=\"floor\"} : f32[4]{1}\n"
                       "  %5 = constant() {data=\"00000040\"} : f32[]{}\n"
                       "  %6 = div(%x, %5) {rounding_mode=none} : f32[4]{1}\n"
                       "  %7 = cat(%1, %3, %4, %6) {dim=0} : f32[16]{1}\n"
                       "  %8 = constant() {value=0.25} : f64[]{} wrapped\n"
                       "  %9 = div(%h, %8) {rounding_mode=none} : f16[4]{1}\n"
                       "  %10 = constant() {value=1048576.0} : f64[]{} wrapped\n"
                       "  %11 = div(%h, %10) {rounding_mode=none} : f16[4]{1}\n"
                       "  %12 = add(%9, %11) {alpha=1} : f16[4]{1}\n"
                       "  return %7, %12\n"
                       "}\n"),
            "graph @g(%x: f32[4]{1}, %h: f16[4]{1}) {\n"
            "  %0 = constant() {value=2} : i64[]{} wrapped\n"
            "  %1 = constant() {value=0.5} : f64[]{} wrapped\n"
            "  %2 = mul(%x, %1) : f32[4]{1}\n"
            "  %3 = constant() {value=3} : i64[]{} wrapped\n"
            "  %4 = div(%x, %3) {rounding_mode=none} : f32[4]{1}\n"
            "  %5 = div(%x, %0) {rounding_mode=\"floor\"} : f32[4]{1}\n"
            "  %6 = constant() {data=\"00000040\"} : f32[]{}\n"
            "  %7 = constant() {data=\"0000003f\"} : f32[]{}\n"
            "  %8 = mul(%x, %7) : f32[4]{1}\n"
            "  %9 = cat(%2, %4, %5, %8) {dim=0} : f32[16]{1}\n"
            "  %10 = constant() {value=0.25} : f64[]{} wrapped\n"
            "  %11 = constant() {value=4.0} : f64[]{} wrapped\n"
            "  %12 = mul(%h, %11) : f16[4]{1}\n"
            "  %13 = constant() {value=1048576.0} : f64[]{} wrapped\n"
            "  %14 = div(%h, %13) {rounding_mode=none} : f16[4]{1}\n"
            "  %15 = add(%12, %14) {alpha=1} : f16[4]{1}\n"
            "  return %9, %15\n"
            "}\n");
}

TEST(CanonSimplify, Casts) {
  // same dtype -> x; f32->f64->f32, f16->f32->f16, i8->i32->i8, bf16->f32->bf16 -> x;
  // f32->f16->f32 and i32->f32->i32 lose values and stay
  EXPECT_EQ(check_pass("simplify",
                       "graph @g(%x: f32[4]{1}, %h: f16[4]{1}, %b: i8[4]{1}, %i: i32[4]{1}, %z: bf16[4]{1}) {\n"
                       "  %0 = cast(%x) {dtype=f32} : f32[4]{1}\n"
                       "  %1 = cast(%x) {dtype=f64} : f64[4]{1}\n"
                       "  %2 = cast(%1) {dtype=f32} : f32[4]{1}\n"
                       "  %3 = cast(%x) {dtype=f16} : f16[4]{1}\n"
                       "  %4 = cast(%3) {dtype=f32} : f32[4]{1}\n"
                       "  %5 = cat(%0, %2, %4) {dim=0} : f32[12]{1}\n"
                       "  %6 = cast(%h) {dtype=f32} : f32[4]{1}\n"
                       "  %7 = cast(%6) {dtype=f16} : f16[4]{1}\n"
                       "  %8 = neg(%7) : f16[4]{1}\n"
                       "  %9 = cast(%b) {dtype=i32} : i32[4]{1}\n"
                       "  %10 = cast(%9) {dtype=i8} : i8[4]{1}\n"
                       "  %11 = neg(%10) : i8[4]{1}\n"
                       "  %12 = cast(%i) {dtype=f32} : f32[4]{1}\n"
                       "  %13 = cast(%12) {dtype=i32} : i32[4]{1}\n"
                       "  %14 = neg(%13) : i32[4]{1}\n"
                       "  %15 = cast(%z) {dtype=f32} : f32[4]{1}\n"
                       "  %16 = cast(%15) {dtype=bf16} : bf16[4]{1}\n"
                       "  %17 = neg(%16) : bf16[4]{1}\n"
                       "  return %5, %8, %11, %14, %17\n"
                       "}\n"),
            "graph @g(%x: f32[4]{1}, %h: f16[4]{1}, %b: i8[4]{1}, %i: i32[4]{1}, %z: bf16[4]{1}) {\n"
            "  %0 = cast(%x) {dtype=f64} : f64[4]{1}\n"
            "  %1 = cast(%x) {dtype=f16} : f16[4]{1}\n"
            "  %2 = cast(%1) {dtype=f32} : f32[4]{1}\n"
            "  %3 = cat(%x, %x, %2) {dim=0} : f32[12]{1}\n"
            "  %4 = cast(%h) {dtype=f32} : f32[4]{1}\n"
            "  %5 = neg(%h) : f16[4]{1}\n"
            "  %6 = cast(%b) {dtype=i32} : i32[4]{1}\n"
            "  %7 = neg(%b) : i8[4]{1}\n"
            "  %8 = cast(%i) {dtype=f32} : f32[4]{1}\n"
            "  %9 = cast(%8) {dtype=i32} : i32[4]{1}\n"
            "  %10 = neg(%9) : i32[4]{1}\n"
            "  %11 = cast(%z) {dtype=f32} : f32[4]{1}\n"
            "  %12 = neg(%z) : bf16[4]{1}\n"
            "  return %3, %5, %7, %10, %12\n"
            "}\n");
}

TEST(CanonSimplify, NoOpViews) {
  EXPECT_EQ(check_pass("simplify",
                       "graph @g(%x: f32[2,3]{3,1}) {\n"
                       "  %0 = view(%x) {sizes=[2,3]} : f32[2,3]{3,1}\n"
                       "  %1 = permute(%x) {dims=[0,1]} : f32[2,3]{3,1}\n"
                       "  %2 = transpose(%x) {dim0=1, dim1=1} : f32[2,3]{3,1}\n"
                       "  %3 = slice(%x) {dim=1, end=3, start=0, step=1} : f32[2,3]{3,1}\n"
                       "  %4 = expand(%x) {sizes=[2,3]} : f32[2,3]{3,1}\n"
                       "  %5 = squeeze(%x) {dims=[]} : f32[2,3]{3,1}\n"
                       "  %6 = unsqueeze(%x) {dim=1} : f32[2,1,3]{3,3,1}\n"
                       "  %7 = squeeze(%6) {dims=[1]} : f32[2,3]{3,1}\n"
                       "  %8 = transpose(%x) {dim0=0, dim1=1} : f32[3,2]{1,3}\n"
                       "  %9 = transpose(%8) {dim0=1, dim1=0} : f32[2,3]{3,1}\n"
                       "  %10 = contiguous(%x) : f32[2,3]{3,1}\n"
                       "  %11 = slice(%x) {dim=1, end=3, start=1, step=1} : f32[2,2]{3,1}\n"
                       "  %12 = contiguous(%8) : f32[3,2]{2,1}\n"
                       "  %13 = cat(%0, %1, %2, %3, %4, %5, %7, %9, %10) {dim=0} : f32[18,3]{3,1}\n"
                       "  return %13, %11, %12, %0\n"
                       "}\n"),
            "graph @g(%x: f32[2,3]{3,1}) {\n"
            "  %0 = unsqueeze(%x) {dim=1} : f32[2,1,3]{3,3,1}\n"
            "  %1 = transpose(%x) {dim0=0, dim1=1} : f32[3,2]{1,3}\n"
            "  %2 = slice(%x) {dim=1, end=3, start=1, step=1} : f32[2,2]{3,1}\n"
            "  %3 = contiguous(%1) : f32[3,2]{2,1}\n"
            "  %4 = cat(%x, %x, %x, %x, %x, %x, %x, %x, %x) {dim=0} : f32[18,3]{3,1}\n"
            "  return %4, %2, %3, %x\n"
            "}\n");
}

TEST(CanonSimplify, BroadcastOnlyViewsOfElementwiseOperands) {
  // the nbody pattern: mul(%a, unsqueeze(%b, 0)) -> mul(%a, %b); an unsqueeze that adds a
  // trailing dim changes which dims broadcast and stays
  EXPECT_EQ(check_pass("simplify",
                       "graph @g(%a: f32[2,4,4]{16,4,1}, %b: f32[4,4]{4,1}, %m: f32[4]{1}) {\n"
                       "  %0 = unsqueeze(%b) {dim=0} : f32[1,4,4]{16,4,1}\n"
                       "  %1 = mul(%a, %0) : f32[2,4,4]{16,4,1}\n"
                       "  %2 = unsqueeze(%m) {dim=1} : f32[4,1]{1,1}\n"
                       "  %3 = add(%b, %2) {alpha=1} : f32[4,4]{4,1}\n"
                       "  %4 = expand(%m) {sizes=[4,4]} : f32[4,4]{0,1}\n"
                       "  %5 = add(%b, %4) {alpha=1} : f32[4,4]{4,1}\n"
                       "  %6 = view(%m) {sizes=[1,4]} : f32[1,4]{4,1}\n"
                       "  %7 = sub(%b, %6) {alpha=1} : f32[4,4]{4,1}\n"
                       "  return %1, %3, %5, %7\n"
                       "}\n"),
            "graph @g(%a: f32[2,4,4]{16,4,1}, %b: f32[4,4]{4,1}, %m: f32[4]{1}) {\n"
            "  %0 = unsqueeze(%b) {dim=0} : f32[1,4,4]{16,4,1}\n"
            "  %1 = mul(%a, %b) : f32[2,4,4]{16,4,1}\n"
            "  %2 = unsqueeze(%m) {dim=1} : f32[4,1]{1,1}\n"
            "  %3 = add(%b, %2) {alpha=1} : f32[4,4]{4,1}\n"
            "  %4 = expand(%m) {sizes=[4,4]} : f32[4,4]{0,1}\n"
            "  %5 = add(%b, %m) {alpha=1} : f32[4,4]{4,1}\n"
            "  %6 = view(%m) {sizes=[1,4]} : f32[1,4]{4,1}\n"
            "  %7 = sub(%b, %m) {alpha=1} : f32[4,4]{4,1}\n"
            "  return %1, %3, %5, %7\n"
            "}\n");
}

// A reduction that drops inner dims (x.sum({0, 2}) of [4, 5, 6] is [5], which broadcasting
// lines up with x's last dim) keeps them and is viewed without them; the elementwise ops after
// it compute on the kept-dims value, a dimensioned operand (b) unsqueezed to line up, a 0-d one
// (s) as it is, each viewed back: one loop nest for fusion. An op whose result is larger than
// the view (the sub with y: [3, 5]) still reads the view.
TEST(CanonSimplify, ReductionsKeepTheirDimsForTheWorkAfterThem) {
  EXPECT_EQ(check_pass("simplify",
                       "graph @g(%x: f32[4,5,6]{30,6,1}, %b: f32[5]{1}, %s: f32[]{}, %y: f32[3,5]{5,1}) {\n"
                       "  %0 = sum(%x) {dims=[0,2], dtype=none, keepdim=false} : f32[5]{1}\n"
                       "  %1 = add(%0, %b) {alpha=1} : f32[5]{1}\n"
                       "  %2 = mul(%1, %s) : f32[5]{1}\n"
                       "  %3 = sqrt(%2) : f32[5]{1}\n"
                       "  %4 = sub(%0, %y) {alpha=1} : f32[3,5]{5,1}\n"
                       "  return %3, %0, %4\n"
                       "}\n"),
            "graph @g(%x: f32[4,5,6]{30,6,1}, %b: f32[5]{1}, %s: f32[]{}, %y: f32[3,5]{5,1}) {\n"
            "  %0 = sum(%x) {dims=[0,2], dtype=none, keepdim=true} : f32[1,5,1]{5,1,1}\n"
            "  %1 = view(%0) {sizes=[5]} : f32[5]{1}\n"
            "  %2 = unsqueeze(%b) {dim=1} : f32[5,1]{1,1}\n"
            "  %3 = add(%0, %2) {alpha=1} : f32[1,5,1]{5,1,1}\n"
            "  %4 = view(%3) {sizes=[5]} : f32[5]{1}\n"
            "  %5 = mul(%3, %s) : f32[1,5,1]{5,1,1}\n"
            "  %6 = view(%5) {sizes=[5]} : f32[5]{1}\n"
            "  %7 = sqrt(%5) : f32[1,5,1]{5,1,1}\n"
            "  %8 = view(%7) {sizes=[5]} : f32[5]{1}\n"
            "  %9 = sub(%1, %y) {alpha=1} : f32[3,5]{5,1}\n"
            "  return %8, %1, %9\n"
            "}\n");
  // keepdim left to its default (false) in a hand-written graph: the same rewrite
  EXPECT_EQ(check_pass("simplify",
                       "graph @g(%x: f32[4,5,6]{30,6,1}) {\n"
                       "  %0 = norm(%x) {dims=[0,2], p=2.0} : f32[5]{1}\n"
                       "  %1 = sqrt(%0) : f32[5]{1}\n"
                       "  return %1\n"
                       "}\n"),
            "graph @g(%x: f32[4,5,6]{30,6,1}) {\n"
            "  %0 = norm(%x) {dims=[0,2], keepdim=true, p=2.0} : f32[1,5,1]{5,1,1}\n"
            "  %1 = view(%0) {sizes=[5]} : f32[5]{1}\n"
            "  %2 = sqrt(%0) : f32[1,5,1]{5,1,1}\n"
            "  %3 = view(%2) {sizes=[5]} : f32[5]{1}\n"
            "  return %3\n"
            "}\n");
  // a reduction whose memory is written (an in-place op on its result) stays as it is
  check_pass("simplify",
             "graph @g(%x: f32[4,5]{5,1}) {\n"
             "  %0 = sum(%x) {dims=[1], dtype=none, keepdim=false} : f32[4]{1}\n"
             "  %1 = exp(%0) : f32[4]{1}\n"
             "  %2 = copy(%0, %1) : f32[4]{1}\n"
             "  return %2\n"
             "}\n",
             false);
}

// A chain of elementwise ops after such a reduction moves in one walk, each op reading the one
// before as rewritten: 100 of them (more than simplify's walks) all end up on the kept dims.
TEST(CanonSimplify, LongChainsAfterAReductionKeepItsDims) {
  std::string text = "graph @g(%x: f32[4,5]{5,1}) {\n  %0 = sum(%x) {dims=[1], dtype=none, keepdim=false} : f32[4]{1}\n";
  for (int i = 1; i <= 100; ++i) text += "  %" + std::to_string(i) + " = relu(%" + std::to_string(i - 1) + ") : f32[4]{1}\n";
  text += "  return %100\n}\n";
  std::string got = check_pass("simplify", text);
  // every relu computes on [4, 1]; the return reads a view of the last one
  size_t relus = 0;
  for (size_t at = got.find("= relu("); at != std::string::npos; at = got.find("= relu(", at + 1)) {
    ++relus;
    EXPECT_EQ(got.substr(got.find(':', at), 13), ": f32[4,1]{1,") << got.substr(at, 60);
  }
  EXPECT_EQ(relus, 100u);
  const size_t ret = got.rfind("return ") + 7;
  const std::string name = got.substr(ret, got.find('\n', ret) - ret);
  const size_t def = got.find("  " + name + " = ");
  ASSERT_NE(def, std::string::npos) << got;
  EXPECT_EQ(got.substr(def + name.size() + 5, 5), "view(") << got.substr(def, 60);
}

TEST(CanonSimplify, ForwardingRespectsWrites) {
  // %1 = x*1 is read after a write into %x: reading %x there would see the write
  check_pass("simplify",
             "graph @g(%x: f32[4]{1}, %y: f32[4]{1}) {\n"
             "  %0 = constant() {value=1} : i64[]{} wrapped\n"
             "  %1 = mul(%x, %0) : f32[4]{1}\n"
             "  %2 = copy(%x, %y) : f32[4]{1}\n"
             "  %3 = neg(%1) : f32[4]{1}\n"
             "  return %3\n"
             "}\n",
             false);
  // ... but a write after the last read is fine
  EXPECT_EQ(check_pass("simplify",
                       "graph @g(%x: f32[4]{1}, %y: f32[4]{1}) {\n"
                       "  %0 = constant() {value=1} : i64[]{} wrapped\n"
                       "  %1 = mul(%x, %0) : f32[4]{1}\n"
                       "  %2 = neg(%1) : f32[4]{1}\n"
                       "  %3 = copy(%x, %y) : f32[4]{1}\n"
                       "  return %2\n"
                       "}\n"),
            "graph @g(%x: f32[4]{1}, %y: f32[4]{1}) {\n"
            "  %0 = constant() {value=1} : i64[]{} wrapped\n"
            "  %1 = neg(%x) : f32[4]{1}\n"
            "  %2 = copy(%x, %y) : f32[4]{1}\n"
            "  return %1\n"
            "}\n");
  // a result that is itself written keeps its own memory
  check_pass("simplify",
             "graph @g(%x: f32[4]{1}, %y: f32[4]{1}) {\n"
             "  %0 = constant() {value=1} : i64[]{} wrapped\n"
             "  %1 = mul(%x, %0) : f32[4]{1}\n"
             "  %2 = copy(%1, %y) : f32[4]{1}\n"
             "  %3 = neg(%2) : f32[4]{1}\n"
             "  return %3\n"
             "}\n",
             false);
}

// ---- the passes together ----

// Runs the canonicalization pipeline (the default order) on graphs in the shape of the
// workloads; each pass is checked for verification and idempotence, the end result against
// the original on random inputs.
TEST(CanonPipeline, WorkloadShapedGraphsKeepTheirResults) {
  const std::vector<std::string> graphs = {
      kInplaceChain,
      // layernorm
      "graph @graph0(%a0: f32[8,16]{16,1}, %a1: f32[16]{1}, %a2: f32[16]{1}) {\n"
      "  %0 = mean(%a0) {dims=[-1], keepdim=true} : f32[8,1]{1,1}\n"
      "  %1 = var(%a0) {correction=0, dims=[-1], keepdim=true} : f32[8,1]{1,1}\n"
      "  %2 = constant() {value=1e-05} : f64[]{} wrapped\n"
      "  %3 = add(%1, %2) {alpha=1} : f32[8,1]{1,1}\n"
      "  %4 = sqrt(%3) : f32[8,1]{1,1}\n"
      "  %5 = sub(%a0, %0) {alpha=1} : f32[8,16]{16,1}\n"
      "  %6 = div(%5, %4) {rounding_mode=none} : f32[8,16]{16,1}\n"
      "  %7 = mul(%6, %a1) : f32[8,16]{16,1}\n"
      "  %8 = add(%7, %a2) {alpha=1} : f32[8,16]{16,1}\n"
      "  return %8\n"
      "}\n",
      // nbody_forces
      "graph @graph0(%a0: f32[2,8]{8,1}, %a1: f32[8]{1}) {\n"
      "  %0 = unsqueeze(%a0) {dim=2} : f32[2,8,1]{8,1,1}\n"
      "  %1 = unsqueeze(%a0) {dim=1} : f32[2,1,8]{8,8,1}\n"
      "  %2 = sub(%1, %0) {alpha=1} : f32[2,8,8]{64,8,1}\n"
      "  %3 = norm(%2) {dims=[0], keepdim=false, p=2.0} : f32[8,8]{8,1}\n"
      "  %4 = div(%2, %3) {rounding_mode=none} : f32[2,8,8]{64,8,1}\n"
      "  %5 = constant() {value=2} : i64[]{} wrapped\n"
      "  %6 = pow(%3, %5) : f32[8,8]{8,1}\n"
      "  %7 = unsqueeze(%a1) {dim=0} : f32[1,8]{8,1}\n"
      "  %8 = unsqueeze(%a1) {dim=1} : f32[8,1]{1,1}\n"
      "  %9 = constant() {value=6.67e-11} : f64[]{} wrapped\n"
      "  %10 = mul(%8, %9) : f32[8,1]{1,1}\n"
      "  %11 = mul(%10, %7) : f32[8,8]{8,1}\n"
      "  %12 = div(%11, %6) {rounding_mode=none} : f32[8,8]{8,1}\n"
      "  %13 = unsqueeze(%12) {dim=0} : f32[1,8,8]{64,8,1}\n"
      "  %14 = mul(%4, %13) : f32[2,8,8]{64,8,1}\n"
      "  %15 = nansum(%14) {dims=[2], keepdim=false} : f32[2,8]{8,1}\n"
      "  return %15\n"
      "}\n",
      // where_scale, with the traced duplicate constant
      "graph @graph0(%a0: f32[10,10]{10,1}) {\n"
      "  %0 = constant() {value=2} : i64[]{} wrapped\n"
      "  %1 = div(%a0, %0) {rounding_mode=none} : f32[10,10]{10,1}\n"
      "  %2 = constant() {value=2} : i64[]{} wrapped\n"
      "  %3 = mul(%a0, %2) : f32[10,10]{10,1}\n"
      "  %4 = constant() {value=0.5} : f64[]{} wrapped\n"
      "  %5 = gt(%a0, %4) : b8[10,10]{10,1}\n"
      "  %6 = where(%5, %3, %1) : f32[10,10]{10,1}\n"
      "  return %6\n"
      "}\n",
      // a factory constant, an in-place update of it and a shape-only fill
      "graph @g(%x: f32[3]{1}) {\n"
      "  %0 = constant() {data=\"0000803f0000004000004040\"} : f32[3]{1}\n"
      "  %1 = fill(%x) {value=2.0} : f32[3]{1}\n"
      "  %2 = mul(%0, %1) : f32[3]{1}\n"
      "  %3 = copy(%0, %x) : f32[3]{1}\n"
      "  %4 = add(%2, %3) {alpha=1} : f32[3]{1}\n"
      "  %5 = neg(%x) : f32[3]{1}\n"
      "  %6 = neg(%5) : f32[3]{1}\n"
      "  %7 = mul(%6, %4) : f32[3]{1}\n"
      "  return %7\n"
      "}\n",
      // a cond over values that cse merges; its regions are carried along
      "graph @g(%p: b8[]{}, %x: f32[4]{1}) {\n"
      "  %0 = constant() {value=2} : i64[]{} wrapped\n"
      "  %1 = mul(%x, %0) : f32[4]{1}\n"
      "  %2 = constant() {value=2} : i64[]{} wrapped\n"
      "  %3 = mul(%x, %2) : f32[4]{1}\n"
      "  %4 = cond(%p, %1, %3) : f32[4]{1} {\n"
      "    graph @then(%a: f32[4]{1}, %b: f32[4]{1}) {\n"
      "      %0 = add(%a, %b) {alpha=1} : f32[4]{1}\n"
      "      return %0\n"
      "    }\n"
      "    graph @else(%a: f32[4]{1}, %b: f32[4]{1}) {\n"
      "      %0 = neg(%a) : f32[4]{1}\n"
      "      return %0\n"
      "    }\n"
      "  }\n"
      "  return %4\n"
      "}\n",
  };
  for (const std::string& text : graphs) {
    SCOPED_TRACE(text);
    Graph g = ir::parse(text);
    ASSERT_FALSE(ir::verify(g).has_value());
    Graph original = clone(g);
    for (const char* pass : {"dce", "writeback", "fold", "simplify", "cse", "dce"}) run_pass(pass, g);
    expect_same_results(original, g, 1e-6);
  }
}

TEST(CanonPipeline, NbodyBroadcastViewIsBypassed) {
  Graph g = ir::parse(
      "graph @graph0(%a0: f32[2,64,64]{4096,64,1}, %a1: f32[64,64]{64,1}) {\n"
      "  %0 = unsqueeze(%a1) {dim=0} : f32[1,64,64]{4096,64,1}\n"
      "  %1 = mul(%a0, %0) : f32[2,64,64]{4096,64,1}\n"
      "  return %1\n"
      "}\n");
  EXPECT_TRUE(run_pass("simplify", g));
  EXPECT_TRUE(run_pass("dce", g));
  EXPECT_EQ(ir::print(g),
            "graph @graph0(%a0: f32[2,64,64]{4096,64,1}, %a1: f32[64,64]{64,1}) {\n"
            "  %0 = mul(%a0, %a1) : f32[2,64,64]{4096,64,1}\n"
            "  return %0\n"
            "}\n");
}

// A kernel's traffic counts each buffer's distinct elements once (at most the buffer) and a
// loop of no iterations nothing, its broadcast operand included.
TEST(KernelTraffic, DistinctElementsOncePerBufferAndNoneForAnEmptyLoop) {
  passes::KernelProgram p;
  for (int id = 0; id < 3; ++id) {
    passes::Buffer b;
    b.id = id;
    b.numel = id == 0 ? 4 : 12;  // b0: a row of 4 floats; b1: [3, 4]; b2: the [3, 4] result
    p.buffers.push_back(b);
  }
  passes::Kernel k;
  k.loops = {3, 4};
  auto access = [](int buffer, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
    passes::Access a;
    a.buffer = buffer;
    a.sizes = std::move(sizes);
    a.strides = std::move(strides);
    return a;
  };
  k.loads = {access(0, {3, 4}, {0, 1}), access(0, {1, 4}, {0, 1}), access(1, {3, 4}, {4, 1})};
  k.stores = {access(2, {3, 4}, {4, 1})};
  EXPECT_EQ(passes::traffic_bytes(p, k), (4 + 12 + 12) * 4);  // (b0 read twice: its 4 floats once)
  k.loops = {0, 4};
  EXPECT_EQ(passes::traffic_bytes(p, k), 0);
}

// n-body's distances: the norm over the two components of a difference becomes the sum of the
// two slices' squares (selects moved past the difference down to views of the input), and the
// whole program one kernel, with no [2, N, N] buffer. Bit for bit eager's results
// (check_pass compares with the reference executor, which runs eager's kernels).
TEST(CanonSimplify, ReductionsOverAFewElementsBecomeElementwise) {
  const std::string nbody =
      "graph @g(%p: f32[2,6]{6,1}, %m: f32[6]{1}) {\n"
      "  %0 = unsqueeze(%p) {dim=2} : f32[2,6,1]{6,1,1}\n"
      "  %1 = unsqueeze(%p) {dim=1} : f32[2,1,6]{6,6,1}\n"
      "  %2 = sub(%1, %0) {alpha=1} : f32[2,6,6]{36,6,1}\n"
      "  %3 = norm(%2) {dims=[0], keepdim=false, p=2.0} : f32[6,6]{6,1}\n"
      "  %4 = div(%2, %3) {rounding_mode=none} : f32[2,6,6]{36,6,1}\n"
      "  %5 = mul(%4, %m) : f32[2,6,6]{36,6,1}\n"
      "  %6 = nansum(%5) {dims=[2], keepdim=false} : f32[2,6]{6,1}\n"
      "  return %6, %3\n"
      "}\n";
  ir::Graph g = ir::parse(check_pass("simplify", nbody));
  EXPECT_EQ(count_op(g, "norm"), 0u);
  EXPECT_EQ(count_op(g, "sqrt"), 1u);
  for (const auto& n : g.nodes()) {  // (every select reads an input's view, not the difference)
    if (n->op == OpId::Select) {
      EXPECT_EQ(n->inputs[0]->producer->op, OpId::Unsqueeze) << ir::print(g);
    }
  }
  Module m = optimize(ir::parse(nbody), {});
  ASSERT_EQ(m.program->kernels.size(), 1u);
  // Its traffic (the kernel profile's bytes) is each buffer once: p and m read, the forces and
  // the distances written; the loop nest asks for p's elements once per pair.
  const passes::Kernel& k = m.program->kernels[0];
  EXPECT_EQ(passes::traffic_bytes(*m.program, k), (12 + 6 + 12 + 36) * 4) << passes::print(*m.program);
  EXPECT_GT(k.bytes_read, 2 * 6 * 6 * 4);

  // sum with a dtype= cast, in 16-bit floats (accumulated in float32), keepdim, over 3 and 4
  // elements, a size-1 reduced dim beside the long one
  check_pass("simplify",
             "graph @g(%x: f16[3,5]{5,1}, %y: bf16[4,1,7]{7,7,1}) {\n"
             "  %0 = exp(%x) : f16[3,5]{5,1}\n"
             "  %1 = sum(%0) {dims=[0], dtype=f32, keepdim=true} : f32[1,5]{5,1}\n"
             "  %2 = neg(%y) : bf16[4,1,7]{7,7,1}\n"
             "  %3 = sum(%2) {dims=[0,1], dtype=none, keepdim=false} : bf16[7]{1}\n"
             "  %4 = norm(%2) {dims=[-3], keepdim=true, p=2.0} : bf16[1,1,7]{7,7,1}\n"
             "  return %1, %3, %4\n"
             "}\n");
  // left alone: five elements; two long dims; a float64 norm (eager's a + x*x may be an fma);
  // another p; an input (already in memory); amax
  check_pass("simplify",
             "graph @g(%x: f32[5,3]{3,1}, %y: f32[2,2,3]{6,3,1}, %z: f64[2,3]{3,1}) {\n"
             "  %0 = exp(%x) : f32[5,3]{3,1}\n"
             "  %1 = sum(%0) {dims=[0], dtype=none, keepdim=false} : f32[3]{1}\n"
             "  %2 = exp(%y) : f32[2,2,3]{6,3,1}\n"
             "  %3 = sum(%2) {dims=[0,1], dtype=none, keepdim=false} : f32[3]{1}\n"
             "  %4 = exp(%z) : f64[2,3]{3,1}\n"
             "  %5 = norm(%4) {dims=[0], keepdim=false, p=2.0} : f64[3]{1}\n"
             "  %6 = norm(%2) {dims=[0], keepdim=false, p=1.0} : f32[2,3]{3,1}\n"
             "  %7 = sum(%x) {dims=[1], dtype=none, keepdim=false} : f32[5]{1}\n"
             "  %8 = amax(%2) {dims=[0], keepdim=false} : f32[2,3]{3,1}\n"
             "  return %1, %3, %5, %6, %7, %8\n"
             "}\n",
             false);
}

// A select is moved past an elementwise op only where the op's operands are not written in
// between: here the amax's memory is scaled in place after `%3 = %1 * 0.5`, and the sum reads
// %3, not the scaled %1 (the differential test's seed 20 found this).
TEST(CanonSimplify, SelectsPastElementwiseSeeWritesInBetween) {
  std::string out = check_pass("simplify",
                               "graph @g(%a: f32[4,5,5]{25,5,1}) {\n"
                               "  %0 = exp(%a) : f32[4,5,5]{25,5,1}\n"
                               "  %1 = amax(%0) {dims=[2], keepdim=true} : f32[4,5,1]{5,1,1}\n"
                               "  %2 = constant() {value=0.5} : f64[]{} wrapped\n"
                               "  %3 = mul(%1, %2) : f32[4,5,1]{5,1,1}\n"
                               "  %4 = copy(%1, %3) : f32[4,5,1]{5,1,1}\n"
                               "  %5 = sum(%3) {dims=[0], dtype=none, keepdim=true} : f32[1,5,1]{5,1,1}\n"
                               "  return %4, %5\n"
                               "}\n");
  EXPECT_EQ(count_op(ir::parse(out), "sum"), 0u);
}

}  // namespace

TEST(CanonSimplify, InvolutionsSeeWritesInBetween) {
  // neg(%0) reads %0 after relu_ wrote into it: it is not -(-x) any more, so it stays
  // (found by the property tests, seed 2346).
  const char* text =
      "graph @g(%x: f32[4]{1}) {\n"
      "  %0 = neg(%x) : f32[4]{1}\n"
      "  %1 = relu(%0) : f32[4]{1}\n"
      "  %2 = copy(%0, %1) : f32[4]{1}\n"
      "  %3 = neg(%0) : f32[4]{1}\n"
      "  return %3\n"
      "}\n";
  check_pass("simplify", text, /*expect_change=*/false);
}

}  // namespace kiln::passes::canon_test
