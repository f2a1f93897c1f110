// The layout decisions (passes/src/layout.h) on kernels described by hand: loop order, loop
// coalescing and the layouts of temporaries, each with its policy switch on and off.
#include <gtest/gtest.h>

#include "layout.h"

namespace kiln::passes::detail {
namespace {

const LayoutPolicy kAll{true, true, true};
const LayoutPolicy kNone{};

// A store of a value of `sizes`, right-aligned onto an S of `rank` dims.
StoreSpace store(std::vector<int64_t> sizes, std::vector<int64_t> strides, size_t rank, bool free) {
  StoreSpace s{std::move(sizes), std::move(strides), {}, free};
  for (size_t j = 0; j < s.sizes.size(); ++j) s.sdim.push_back(int(rank - s.sizes.size() + j));
  return s;
}

TEST(Layout, ContiguousDimsMergeIntoOneLoop) {
  LoopSpace s{{4, 8, 16}, {}, {{128, 16, 1}}, {store({4, 8, 16}, {128, 16, 1}, 3, false)}};
  LoopPlan p = plan_loops(s, kAll);
  EXPECT_EQ(p.extents, (std::vector<int64_t>{512}));
  EXPECT_EQ(p.reduce_from, 1);
  LoopPlan off = plan_loops(s, kNone);
  EXPECT_EQ(off.extents, (std::vector<int64_t>{4, 8, 16}));
}

TEST(Layout, LoopsFollowTheDominantLoadAndTheTemporaryFollowsTheLoops) {
  // A transposed load (x.t() of a row-major [16, 4]) computing a temporary whose layout is free.
  LoopSpace s{{4, 16}, {}, {{1, 4}}, {store({4, 16}, {16, 1}, 2, true)}};
  LoopPlan p = plan_loops(s, kAll);
  EXPECT_EQ(p.order, (std::vector<int>{1, 0}));
  EXPECT_EQ(p.layouts[0], (std::vector<int64_t>{1, 4}));  // column-major: one linear store stream
  EXPECT_EQ(p.extents, (std::vector<int64_t>{64}));        // then both walk memory as one loop
  // Without temporary layouts the store keeps its row-major type, and the loops cannot merge.
  LoopPlan rowmajor = plan_loops(s, LayoutPolicy{true, true, false});
  EXPECT_EQ(rowmajor.layouts[0], (std::vector<int64_t>{16, 1}));
  EXPECT_EQ(rowmajor.extents, (std::vector<int64_t>{16, 4}));
  // Without reordering the logical order stays.
  EXPECT_EQ(plan_loops(s, LayoutPolicy{false, true, true}).order, (std::vector<int>{0, 1}));
}

TEST(Layout, AStoreWhoseLayoutIsFixedDominatesTheLoads) {
  // The result is returned (row-major, fixed) though the load is transposed.
  LoopSpace s{{4, 16}, {}, {{1, 4}}, {store({4, 16}, {16, 1}, 2, false)}};
  LoopPlan p = plan_loops(s, kAll);
  EXPECT_EQ(p.order, (std::vector<int>{0, 1}));
  EXPECT_EQ(p.layouts[0], (std::vector<int64_t>{16, 1}));
  EXPECT_EQ(p.extents, (std::vector<int64_t>{4, 16}));
}

TEST(Layout, AColumnReductionsRowValuesAreLaidOutAsItsOperand) {
  // g = x * 2 stored beside g.sum(0), x a contiguous [32, 8]: the reduced dim 0 runs inside the
  // kept dim 1, and the free store of g spans both. It is laid out as x is (row-major), so that
  // the by-columns code writes it along the run it reads; in loop order it would be column-major.
  StoreSpace sums{{8}, {1}, {1}, true};
  StoreSpace g = store({32, 8}, {8, 1}, 2, true);
  LoopSpace s{{32, 8}, {0}, {{8, 1}}, {sums, g}};
  LoopPlan p = plan_loops(s, kAll);
  EXPECT_EQ(p.order, (std::vector<int>{1, 0}));
  EXPECT_EQ(p.layouts[1], (std::vector<int64_t>{8, 1}));
  EXPECT_EQ(p.layouts[0], (std::vector<int64_t>{1}));
  // A row reduction (x.sum(1): the operand runs along the reduced dim) keeps the loop order's.
  StoreSpace rows{{32}, {1}, {0}, true};
  LoopSpace r{{32, 8}, {1}, {{8, 1}}, {rows, store({32, 8}, {1, 32}, 2, true)}};
  EXPECT_EQ(plan_loops(r, kAll).layouts[1], (std::vector<int64_t>{8, 1}));
  // So does one whose operand runs contiguously along no kept dim.
  LoopSpace t{{32, 8}, {0}, {{1, 32}}, {sums, g}};
  EXPECT_EQ(plan_loops(t, kAll).layouts[1], (std::vector<int64_t>{1, 32}));
}

TEST(Layout, ReducedDimsRunInnermostAndNeverMergeWithKeptOnes) {
  // x.sum(0) of a contiguous [32, 8]: the reduced dim 0 goes inside the kept dim 1.
  StoreSpace out{{8}, {1}, {1}, true};
  LoopSpace s{{32, 8}, {0}, {{8, 1}}, {out}};
  LoopPlan p = plan_loops(s, kAll);
  EXPECT_EQ(p.order, (std::vector<int>{1, 0}));
  EXPECT_EQ(p.extents, (std::vector<int64_t>{8, 32}));
  EXPECT_EQ(p.reduce_from, 1);
  // Two reduced dims contiguous in every operand merge into one reduction loop.
  LoopSpace all{{2, 4, 8}, {1, 2}, {{32, 8, 1}}, {StoreSpace{{2}, {1}, {0}, true}}};
  LoopPlan q = plan_loops(all, kAll);
  EXPECT_EQ(q.extents, (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(q.reduce_from, 1);
}

TEST(Layout, SizeOneDimsAreNoLoopsAndAScalarSpaceHasOne) {
  LoopSpace s{{1, 8, 1}, {}, {{0, 1, 0}}, {store({1, 8, 1}, {8, 1, 1}, 3, false)}};
  EXPECT_EQ(plan_loops(s, kAll).extents, (std::vector<int64_t>{8}));
  LoopSpace one{{1}, {}, {{0}}, {store({1}, {1}, 1, false)}};
  EXPECT_EQ(plan_loops(one, kAll).extents, (std::vector<int64_t>{1}));
  LoopSpace none{{}, {}, {{}}, {store({}, {}, 0, false)}};
  EXPECT_TRUE(plan_loops(none, kAll).extents.empty());
}

TEST(Layout, AnOperandBroadcastAlongOneDimStopsCoalescingAScalarOneDoesNot) {
  // b of [16] broadcast over the rows of a [4, 16] (strides [0, 1]): one loop of 64 would need
  // b's outer stride to be 16, so the loops stay two.
  LoopSpace s{{4, 16}, {}, {{16, 1}, {0, 1}}, {store({4, 16}, {16, 1}, 2, false)}};
  EXPECT_EQ(plan_loops(s, kAll).extents, (std::vector<int64_t>{4, 16}));
  // An operand broadcast along both dims (strides [0, 0]) walks them as one.
  LoopSpace scalar{{4, 16}, {}, {{16, 1}, {0, 0}}, {store({4, 16}, {16, 1}, 2, false)}};
  EXPECT_EQ(plan_loops(scalar, kAll).extents, (std::vector<int64_t>{64}));
}

}  // namespace
}  // namespace kiln::passes::detail
