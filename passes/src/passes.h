// The built-in passes (registered in pass.cpp) and the helpers they share.
#pragma once
#include "kiln/passes/kernel.h"
#include "kiln/passes/pass.h"

namespace kiln::passes {

// ---- graph passes (canonicalization, src/canon/) ----
bool dead_code(ir::Graph& g);          // dce: nodes whose outputs are unused and that write nothing
bool common_subexpr(ir::Graph& g);     // cse: equal op, attributes and operands computed once
bool fold_constants(ir::Graph& g);     // fold: nodes of constants (small results) become constants
bool simplify(ir::Graph& g);           // simplify: the algebraic rule table
bool forward_writes(ir::Graph& g);     // writeback: reads of a write-back read the written value

// ---- kernel passes ----
// fuse: groups the graph's nodes into kernels (the cost model in fuse.cpp) and builds the
// kernel program; with `fusion` false every compute node is its own kernel.
bool fuse(Module& m, bool fusion = true);
bool layout(Module& m);   // loop order, coalescing, temporaries' layouts, operand classes
bool plan_memory(Module& m);  // liveness, reuse, arena offsets, peak

}  // namespace kiln::passes
