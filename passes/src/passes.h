// The built-in passes (registered in pass.cpp) and the helpers they share.
#pragma once
#include "kiln/passes/kernel.h"
#include "kiln/passes/pass.h"

namespace kiln::passes {

// Every pass returns the number of rewrites it made (0: the module is as it was).

// ---- graph passes (canonicalization, src/canon/) ----
int dead_code(ir::Graph& g);       // dce: nodes whose outputs are unused and that write nothing (nodes dropped)
int common_subexpr(ir::Graph& g);  // cse: equal op, attributes and operands computed once (nodes merged)
int fold_constants(ir::Graph& g);  // fold: nodes of constants (small results) become constants (nodes folded)
int simplify(ir::Graph& g);        // simplify: the algebraic rule table (rules fired, nodes merged between walks)
int forward_writes(ir::Graph& g);  // writeback: reads of a write-back read the written value (operands
                                   // forwarded, write-backs dropped)

// ---- kernel passes ----
// fuse: groups the graph's nodes into kernels (the cost model in fuse.cpp) and builds the
// kernel program; with `fusion` false every compute node is its own kernel.
int fuse(Module& m, bool fusion = true);  // (kernels unlike the previous program's)
int layout(Module& m);                    // loop order, coalescing, temporaries' layouts, operand classes
                                          // (kernels and buffers it changed)
int plan_memory(Module& m);               // liveness, reuse, arena offsets, peak (buffers placed anew)

}  // namespace kiln::passes
