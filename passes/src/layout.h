// Layout: the decisions that make a kernel's loops fast, taken on a description of the kernel
// that lowering builds without them. Lowering maps every operand of a kernel onto its iteration
// space S (a LoopSpace: strides over S, no loop order yet); plan_loops decides the loop order,
// the layouts of the temporaries the kernel writes and which loops merge (a LoopPlan); lowering
// then builds the kernel's accesses and body in the plan's loops. The `layout` pass re-lowers the
// fused program with every decision on; fuse lowers with every decision off.
#pragma once
#include <cstdint>
#include <vector>

#include "lower.h"

namespace kiln::passes::detail {

// A value a kernel stores, as layout sees it: its dims' sizes and strides, and the S dim each
// dim maps onto (-1: none). `free`: a temporary whose layout the plan may choose; `strides` is
// then its type's row-major layout, which the plan keeps unless the loop order changes it.
struct StoreSpace {
  std::vector<int64_t> sizes, strides;
  std::vector<int> sdim;
  bool free = false;
};

// A kernel's iteration space S, its reduced dims, and what it reads and writes over S.
struct LoopSpace {
  std::vector<int64_t> S;
  std::vector<int> red;                     // reduced S dims, sorted
  std::vector<std::vector<int64_t>> loads;  // each load's strides over S (0 where broadcast)
  std::vector<StoreSpace> stores;
};

// What layout decided for one kernel.
struct LoopPlan {
  std::vector<int> order;                        // S dims of more than one element, outermost first
  std::vector<std::vector<int64_t>> layouts;     // per store: its strides (a free store's as chosen)
  std::vector<std::vector<int64_t>> store_st;    // per store: its strides over S
  std::vector<std::vector<int>> loops;           // groups of S dims, one loop each, outermost first
  std::vector<int64_t> extents;                  // each loop's trip count
  int reduce_from = 0;                           // the first reduction loop (loops.size(): none)
};

LoopPlan plan_loops(const LoopSpace& space, const LayoutPolicy& policy);

// Strides over S (0 where a dim has one element or maps nowhere) of a value's own strides.
std::vector<int64_t> over_space(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                const std::vector<int>& sdim, size_t rank);

}  // namespace kiln::passes::detail
