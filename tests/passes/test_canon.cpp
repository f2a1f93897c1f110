// The canonicalization passes (passes/src/canon): dce, cse, fold and writeback here, simplify
// and the passes together in test_canon_simplify.cpp.
//
// Each test parses a graph from its text form, runs one pass through the registry and checks
// the printed result, that the verifier accepts it, that a second run changes nothing, and that
// the graph computes the same results as before on random inputs (the reference executor, run
// on copies of the inputs so that writes into inputs are compared too).
#include "canon_check.h"

namespace kiln::passes::canon_test {
namespace {

using ir::Graph;

// ---- dce ----

TEST(CanonDce, RemovesUnusedChainsAndConstants) {
  EXPECT_EQ(check_pass("dce",
                       "graph @g(%x: f32[4]{1}) {\n"
                       "  %0 = constant() {value=2} : i64[]{} wrapped\n"
                       "  %1 = mul(%x, %0) : f32[4]{1}\n"
                       "  %2 = exp(%1) : f32[4]{1}\n"
                       "  %3 = neg(%x) : f32[4]{1}\n"
                       "  return %3\n"
                       "}\n"),
            "graph @g(%x: f32[4]{1}) {\n"
            "  %0 = neg(%x) : f32[4]{1}\n"
            "  return %0\n"
            "}\n");
}


TEST(CanonDce, KeepsWritesThatCanBeObserved) {
  // kept: a write into an input (through a view), a write into memory read later;
  // dropped: a write into a temporary nobody reads, with the chain computing it.
  std::string out = check_pass("dce",
                               "graph @g(%x: f32[4]{1}, %y: f32[4]{1}) {\n"
                               "  %0 = add(%y, %y) {alpha=1} : f32[4]{1}\n"
                               "  %1 = unsqueeze(%x) {dim=0} : f32[1,4]{4,1}\n"
                               "  %2 = copy(%1, %0) : f32[1,4]{4,1}\n"
                               "  %3 = neg(%y) : f32[4]{1}\n"
                               "  %4 = clone(%y) : f32[4]{1}\n"
                               "  %5 = copy(%4, %3) : f32[4]{1}\n"
                               "  %6 = mul(%y, %y) : f32[4]{1}\n"
                               "  %7 = clone(%y) : f32[4]{1}\n"
                               "  %8 = copy(%7, %6) : f32[4]{1}\n"
                               "  %9 = exp(%7) : f32[4]{1}\n"
                               "  return %9\n"
                               "}\n");
  EXPECT_EQ(out,
            "graph @g(%x: f32[4]{1}, %y: f32[4]{1}) {\n"
            "  %0 = add(%y, %y) {alpha=1} : f32[4]{1}\n"
            "  %1 = unsqueeze(%x) {dim=0} : f32[1,4]{4,1}\n"
            "  %2 = copy(%1, %0) : f32[1,4]{4,1}\n"
            "  %3 = mul(%y, %y) : f32[4]{1}\n"
            "  %4 = clone(%y) : f32[4]{1}\n"
            "  %5 = copy(%4, %3) : f32[4]{1}\n"
            "  %6 = exp(%4) : f32[4]{1}\n"
            "  return %6\n"
            "}\n");
}

TEST(CanonDce, UnchangedGraphIsLeftAlone) {
  check_pass("dce",
             "graph @g(%x: f32[4]{1}) {\n"
             "  %0 = neg(%x) : f32[4]{1}\n"
             "  %1 = copy(%x, %0) : f32[4]{1}\n"
             "  return %0\n"
             "}\n",
             false);
}

// Each pass counts its rewrites (PassRun::rewrites, --time-passes): dce the nodes it drops, cse
// those it merges; a kernel pass the kernels and buffers in which the program changed, none
// when it rebuilds what is there.
TEST(PassRewrites, EachPassCountsWhatItRewrote) {
  Module m(ir::parse("graph @g(%x: f32[4]{1}) {\n"
                     "  %0 = constant() {value=2} : i64[]{} wrapped\n"
                     "  %1 = mul(%x, %0) : f32[4]{1}\n"
                     "  %2 = exp(%1) : f32[4]{1}\n"
                     "  %3 = neg(%x) : f32[4]{1}\n"
                     "  %4 = neg(%x) : f32[4]{1}\n"
                     "  %5 = add(%3, %4) {alpha=1} : f32[4]{1}\n"
                     "  return %5\n"
                     "}\n"));
  PipelineOptions opts;
  opts.passes = {"dce", "cse", "cse", "fuse", "fuse", "layout", "layout", "memplan", "memplan"};
  PipelineReport r = run_pipeline(m, opts);
  ASSERT_EQ(r.runs.size(), 9u);
  EXPECT_EQ(r.runs[0].rewrites, 3);  // the constant, mul and exp
  EXPECT_EQ(r.runs[1].rewrites, 1);  // the second neg
  EXPECT_EQ(r.runs[2].rewrites, 0);
  EXPECT_GT(r.runs[3].rewrites, 0);  // a program where there was none
  EXPECT_EQ(r.runs[4].rewrites, 0);  // the same program again
  EXPECT_GT(r.runs[5].rewrites, 0);  // laid out (the program says so)
  EXPECT_EQ(r.runs[6].rewrites, 0);
  EXPECT_GT(r.runs[7].rewrites, 0);  // planned
  EXPECT_EQ(r.runs[8].rewrites, 0);
  const std::string table = r.timing_table();
  EXPECT_NE(table.find("dce        3 rewrites"), std::string::npos) << table;
  EXPECT_NE(table.find("cse        1 rewrite\n"), std::string::npos) << table;
  EXPECT_NE(table.find("(unchanged)"), std::string::npos) << table;
}

// ---- cse ----

TEST(CanonCse, MergesEqualNodesAndConstants) {
  EXPECT_EQ(check_pass("cse",
                       "graph @g(%x: f32[4]{1}) {\n"
                       "  %0 = constant() {value=2} : i64[]{} wrapped\n"
                       "  %1 = mul(%x, %0) : f32[4]{1}\n"
                       "  %2 = constant() {value=2} : i64[]{} wrapped\n"
                       "  %3 = mul(%x, %2) : f32[4]{1}\n"
                       "  %4 = constant() {value=2.0} : f64[]{} wrapped\n"
                       "  %5 = mul(%x, %4) : f32[4]{1}\n"
                       "  %6 = add(%1, %3) {alpha=1} : f32[4]{1}\n"
                       "  %7 = add(%6, %5) {alpha=1} : f32[4]{1}\n"
                       "  %8 = add(%6, %5) {alpha=2} : f32[4]{1}\n"
                       "  %9 = sin(%x) : f32[4]{1}\n"
                       "  %10 = sin(%x) : f32[4]{1}\n"
                       "  %11 = add(%10, %7) {alpha=1} : f32[4]{1}\n"
                       "  return %8, %9, %11\n"
                       "}\n"),
            "graph @g(%x: f32[4]{1}) {\n"
            "  %0 = constant() {value=2} : i64[]{} wrapped\n"
            "  %1 = mul(%x, %0) : f32[4]{1}\n"
            "  %2 = constant() {value=2.0} : f64[]{} wrapped\n"
            "  %3 = mul(%x, %2) : f32[4]{1}\n"
            "  %4 = add(%1, %1) {alpha=1} : f32[4]{1}\n"
            "  %5 = add(%4, %3) {alpha=1} : f32[4]{1}\n"
            "  %6 = add(%4, %3) {alpha=2} : f32[4]{1}\n"
            "  %7 = sin(%x) : f32[4]{1}\n"
            "  %8 = add(%7, %5) {alpha=1} : f32[4]{1}\n"
            "  return %6, %7, %8\n"
            "}\n");
}

TEST(CanonCse, RespectsWrites) {
  // exp(%x) before and after a write into %x differ; views of %x are merged across it; a
  // result that is written, and two results that are both returned, stay apart.
  EXPECT_EQ(check_pass("cse",
                       "graph @g(%x: f32[4]{1}, %y: f32[4]{1}) {\n"
                       "  %0 = exp(%x) : f32[4]{1}\n"
                       "  %1 = unsqueeze(%x) {dim=0} : f32[1,4]{4,1}\n"
                       "  %2 = copy(%x, %y) : f32[4]{1}\n"
                       "  %3 = exp(%x) : f32[4]{1}\n"
                       "  %4 = unsqueeze(%x) {dim=0} : f32[1,4]{4,1}\n"
                       "  %5 = add(%1, %4) {alpha=1} : f32[1,4]{4,1}\n"
                       "  %6 = neg(%y) : f32[4]{1}\n"
                       "  %7 = neg(%y) : f32[4]{1}\n"
                       "  %8 = copy(%7, %x) : f32[4]{1}\n"
                       "  %9 = cos(%y) : f32[4]{1}\n"
                       "  %10 = cos(%y) : f32[4]{1}\n"
                       "  return %0, %3, %5, %6, %8, %9, %10\n"
                       "}\n"),
            "graph @g(%x: f32[4]{1}, %y: f32[4]{1}) {\n"
            "  %0 = exp(%x) : f32[4]{1}\n"
            "  %1 = unsqueeze(%x) {dim=0} : f32[1,4]{4,1}\n"
            "  %2 = copy(%x, %y) : f32[4]{1}\n"
            "  %3 = exp(%x) : f32[4]{1}\n"
            "  %4 = add(%1, %1) {alpha=1} : f32[1,4]{4,1}\n"
            "  %5 = neg(%y) : f32[4]{1}\n"
            "  %6 = neg(%y) : f32[4]{1}\n"
            "  %7 = copy(%6, %x) : f32[4]{1}\n"
            "  %8 = cos(%y) : f32[4]{1}\n"
            "  %9 = cos(%y) : f32[4]{1}\n"
            "  return %0, %3, %4, %5, %7, %8, %9\n"
            "}\n");
}

TEST(CanonCse, NoMergeAcrossAWrite) {
  check_pass("cse",
             "graph @g(%x: f32[4]{1}, %y: f32[4]{1}) {\n"
             "  %0 = sum(%x) {dims=[], dtype=none, keepdim=false} : f32[]{}\n"
             "  %1 = copy(%x, %y) : f32[4]{1}\n"
             "  %2 = sum(%x) {dims=[], dtype=none, keepdim=false} : f32[]{}\n"
             "  %3 = add(%0, %2) {alpha=1} : f32[]{}\n"
             "  return %3\n"
             "}\n",
             false);
}

// ---- fold ----

TEST(CanonFold, FoldsNodesOfConstants) {
  // [1, 2] * 2 + 2 = [4, 6]; max over dim 0 folds both of its outputs
  EXPECT_EQ(check_pass("fold",
                       "graph @g(%x: f32[2]{1}) {\n"
                       "  %0 = constant() {data=\"0000803f00000040\"} : f32[2]{1}\n"
                       "  %1 = constant() {value=2} : i64[]{} wrapped\n"
                       "  %2 = mul(%0, %1) : f32[2]{1}\n"
                       "  %3 = add(%2, %1) {alpha=1} : f32[2]{1}\n"
                       "  %4 = add(%x, %3) {alpha=1} : f32[2]{1}\n"
                       "  %5, %6 = max(%3) {dim=0, keepdim=false} : f32[]{}, i64[]{}\n"
                       "  %7 = add(%4, %5) {alpha=1} : f32[2]{1}\n"
                       "  %8 = add(%7, %6) {alpha=1} : f32[2]{1}\n"
                       "  return %8\n"
                       "}\n"),
            "graph @g(%x: f32[2]{1}) {\n"
            "  %0 = constant() {data=\"0000803f00000040\"} : f32[2]{1}\n"
            "  %1 = constant() {value=2} : i64[]{} wrapped\n"
            "  %2 = constant() {data=\"0000004000008040\"} : f32[2]{1}\n"
            "  %3 = constant() {data=\"000080400000c040\"} : f32[2]{1}\n"
            "  %4 = add(%x, %3) {alpha=1} : f32[2]{1}\n"
            "  %5 = constant() {data=\"0000c040\"} : f32[]{}\n"
            "  %6 = constant() {data=\"0100000000000000\"} : i64[]{}\n"
            "  %7 = add(%4, %5) {alpha=1} : f32[2]{1}\n"
            "  %8 = add(%7, %6) {alpha=1} : f32[2]{1}\n"
            "  return %8\n"
            "}\n");
}

TEST(CanonFold, FillNeedsOnlyItsOperandsShape) {
  EXPECT_EQ(check_pass("fold",
                       "graph @g(%x: f32[2,3]{3,1}) {\n"
                       "  %0 = fill(%x) {value=1.5} : f32[2,3]{3,1}\n"
                       "  %1 = add(%x, %0) {alpha=1} : f32[2,3]{3,1}\n"
                       "  return %1\n"
                       "}\n"),
            "graph @g(%x: f32[2,3]{3,1}) {\n"
            "  %0 = constant() {data=\"0000c03f0000c03f0000c03f0000c03f0000c03f0000c03f\"} : f32[2,3]{3,1}\n"
            "  %1 = add(%x, %0) {alpha=1} : f32[2,3]{3,1}\n"
            "  return %1\n"
            "}\n");
}

TEST(CanonFold, RefusesLargeResults) {
  // 4096 elements fold, 4097 do not
  Graph g = ir::parse(
      "graph @g(%x: f32[4097]{1}, %y: i32[64,64]{64,1}) {\n"
      "  %0 = fill(%x) {value=1.5} : f32[4097]{1}\n"
      "  %1 = fill(%y) {value=2} : i32[64,64]{64,1}\n"
      "  %2 = add(%x, %0) {alpha=1} : f32[4097]{1}\n"
      "  %3 = add(%y, %1) {alpha=1} : i32[64,64]{64,1}\n"
      "  return %2, %3\n"
      "}\n");
  Graph original = clone(g);
  EXPECT_TRUE(run_pass("fold", g));
  EXPECT_EQ(count_op(g, "fill"), 1u);
  EXPECT_EQ(count_op(g, "constant"), 1u);
  EXPECT_EQ(g.nodes()[0]->outputs[0]->type.sizes, (std::vector<int64_t>{4097}));
  expect_same_results(original, g);
}

TEST(CanonFold, RefusesWrittenConstantsAndReturnedResults) {
  check_pass("fold",
             "graph @g(%x: f32[2]{1}) {\n"
             "  %0 = constant() {data=\"0000803f00000040\"} : f32[2]{1}\n"
             "  %1 = neg(%0) : f32[2]{1}\n"
             "  %2 = copy(%0, %x) : f32[2]{1}\n"
             "  %3 = add(%1, %2) {alpha=1} : f32[2]{1}\n"
             "  return %3\n"
             "}\n",
             false);
  check_pass("fold",
             "graph @g() {\n"
             "  %0 = constant() {data=\"0000803f00000040\"} : f32[2]{1}\n"
             "  %1 = neg(%0) : f32[2]{1}\n"
             "  %2 = unsqueeze(%1) {dim=0} : f32[1,2]{2,1}\n"
             "  return %2\n"
             "}\n",
             false);
}

// ---- writeback ----

TEST(CanonWriteback, InplaceChainBecomesOneWrite) {
  std::string out = check_pass("writeback", kInplaceChain);
  EXPECT_EQ(out,
            "graph @graph0(%a0: f32[1000]{1}) {\n"
            "  %0 = constant() {value=1} : i64[]{} wrapped\n"
            "  %1 = add(%a0, %0) {alpha=1} : f32[1000]{1}\n"
            "  %2 = relu(%1) : f32[1000]{1}\n"
            "  %3 = constant() {value=0} : i64[]{} wrapped\n"
            "  %4 = constant() {value=6} : i64[]{} wrapped\n"
            "  %5 = clamp(%2, %3, %4) {has_max=true, has_min=true} : f32[1000]{1}\n"
            "  %6 = constant() {value=0.5} : f64[]{} wrapped\n"
            "  %7 = mul(%5, %6) : f32[1000]{1}\n"
            "  %8 = copy(%a0, %7) : f32[1000]{1}\n"
            "  return %8\n"
            "}\n");
  Graph g = ir::parse(out);
  EXPECT_FALSE(run_pass("dce", g));  // the dropped copies are gone already; every constant is read
  EXPECT_EQ(count_op(g, "copy"), 1u);
}

TEST(CanonWriteback, NoForwardingAcrossAnotherWrite) {
  // %3 reads %x after the second write: it must not read %0
  check_pass("writeback",
             "graph @g(%x: f32[4]{1}, %y: f32[4]{1}) {\n"
             "  %0 = exp(%y) : f32[4]{1}\n"
             "  %1 = copy(%x, %0) : f32[4]{1}\n"
             "  %2 = copy(%x, %y) : f32[4]{1}\n"
             "  %3 = neg(%1) : f32[4]{1}\n"
             "  return %3\n"
             "}\n",
             false);
  // a converting write (f16 into f32) and a source that is itself written are not forwarded;
  // the first write stays because %x is read between the two writes
  check_pass("writeback",
             "graph @g(%x: f32[4]{1}, %h: f16[4]{1}, %y: f32[4]{1}) {\n"
             "  %0 = neg(%h) : f16[4]{1}\n"
             "  %1 = copy(%x, %0) : f32[4]{1}\n"
             "  %2 = exp(%1) : f32[4]{1}\n"
             "  %3 = sum(%x) {dims=[], dtype=none, keepdim=false} : f32[]{}\n"
             "  %4 = exp(%y) : f32[4]{1}\n"
             "  %5 = copy(%1, %4) : f32[4]{1}\n"
             "  %6 = copy(%4, %y) : f32[4]{1}\n"
             "  %7 = neg(%5) : f32[4]{1}\n"
             "  return %2, %3, %7\n"
             "}\n",
             false);
}

TEST(CanonWriteback, ForwardsIntoReductionsAndKeepsViewsOfTheBuffer) {
  // sum(%1) reads %0; the view %3 and the returned %1 stay on the buffer
  EXPECT_EQ(check_pass("writeback",
                       "graph @g(%x: f32[2,3]{3,1}, %y: f32[2,3]{3,1}) {\n"
                       "  %0 = mul(%y, %y) : f32[2,3]{3,1}\n"
                       "  %1 = copy(%x, %0) : f32[2,3]{3,1}\n"
                       "  %2 = sum(%1) {dims=[1], dtype=none, keepdim=false} : f32[2]{1}\n"
                       "  %3 = transpose(%1) {dim0=0, dim1=1} : f32[3,2]{1,3}\n"
                       "  %4 = neg(%3) : f32[3,2]{2,1}\n"
                       "  return %1, %2, %4\n"
                       "}\n"),
            "graph @g(%x: f32[2,3]{3,1}, %y: f32[2,3]{3,1}) {\n"
            "  %0 = mul(%y, %y) : f32[2,3]{3,1}\n"
            "  %1 = copy(%x, %0) : f32[2,3]{3,1}\n"
            "  %2 = sum(%0) {dims=[1], dtype=none, keepdim=false} : f32[2]{1}\n"
            "  %3 = transpose(%1) {dim0=0, dim1=1} : f32[3,2]{1,3}\n"
            "  %4 = neg(%3) : f32[3,2]{2,1}\n"
            "  return %1, %2, %4\n"
            "}\n");
}

}  // namespace
}  // namespace kiln::passes::canon_test
