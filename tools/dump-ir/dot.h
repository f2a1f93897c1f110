// Graphviz (DOT) form of a kiln graph, for dump-ir --format dot.
#pragma once
#include <kiln/ir/graph.h>

#include <string>
#include <string_view>

namespace kiln::tools {

// One `digraph`: graph inputs as inverted houses, ops as boxes (constants as ellipses)
// labelled with the op, its attributes and its output types, an edge per use of a value
// (labelled with the output index when the producer has several), the returned values as
// houses, and each region of a control node (cond: then, else) as a cluster, its inputs fed by
// dashed edges from the node's operands and its results flowing back into the node.
std::string to_dot(const ir::Graph& g, std::string_view title = {});

}  // namespace kiln::tools
