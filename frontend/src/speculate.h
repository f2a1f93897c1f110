// Speculation past graph breaks (trace_tree.h's Speculation; docs/compile.md).
#pragma once
#include <functional>
#include <memory>

#include "trace_tree.h"

namespace kiln::detail {

using CompileGraph = std::function<std::shared_ptr<exec::CompiledProgram>(const ir::Graph&)>;

// Merges node `n`'s graph with its child `child`'s and compiles the result with `compile`. Null,
// with n.speculation_note saying why, when the break is not one replay can run past: the exit
// is not a guard on a host value or a print, either graph writes into an argument, a capture or
// an intermediate (the child's work must be droppable, and the node must be safe to run again
// alone), either graph is not compiled, or holds a control op.
std::unique_ptr<Speculation> speculate(TreeNode& n, size_t child, const CompileGraph& compile);

}  // namespace kiln::detail
