// Lowering: builds the kernel program from groups of graph nodes (one kernel per group).
#pragma once
#include <vector>

#include "passes.h"

namespace kiln::passes {

// What the layout pass decides; fuse builds with everything off (logical loop order, no
// coalescing, every temporary row-major as its type says).
struct LayoutPolicy {
  bool reorder = false;       // order the non-reduced loops by the dominant operand's strides
  bool coalesce = false;      // merge adjacent loops that are contiguous in every operand
  bool temp_layouts = false;  // lay temporaries out in the loop order of the kernel writing them
};

// `groups` lists, in execution order, the nodes (graph indices) each kernel computes; every
// scheduled node (not a view or a constant) is in exactly one group.
KernelProgram lower(const ir::Graph& g, const std::vector<std::vector<int>>& groups, const LayoutPolicy& policy);

// The memory plan (memplan.cpp): arena offsets with reuse, and the peak estimate.
void plan_memory_of(KernelProgram& p);
// The plan without reuse: every temporary in its own arena bytes.
void plan_without_reuse(KernelProgram& p);

}  // namespace kiln::passes
