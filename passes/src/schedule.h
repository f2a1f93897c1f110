// What fusion and lowering both need to know about a graph: how each node is scheduled, where
// each value lives in memory, and the order constraints between nodes (data and memory).
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "passes.h"

namespace kiln::passes::detail {

// How a node is scheduled. Views and wrapped numbers are free (index math, immediates); data
// constants are buffers; contiguous, clone and copy are elementwise (a copy is a store).
enum class NodeClass : uint8_t { Free, Data, Elementwise, Reduction, Opaque, Control };
NodeClass classify(const ir::Node& n);

// A value's place in memory: the value that owns the memory (ir::alias_root) and the view of
// it: sizes, strides (elements) and offset from the root's first element. `storage_relative`:
// the offset counts from the root's storage start (as_strided with an explicit offset).
struct ViewKey {
  const ir::Value* root = nullptr;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  bool storage_relative = false;
  bool operator==(const ViewKey&) const = default;
};
// From the graph's types: the root's own layout as typed.
ViewKey view_key(const ir::Value* v);

// A reduction node's reduced dims of its operand (sorted, non-negative), whether it keeps them
// (size 1) and whether its output has the operand's full shape (softmax, log_softmax, cumsum).
struct ReduceInfo {
  std::vector<int> dims;
  bool keepdim = false;
  bool full_output = false;
  bool all = false;  // dim=none or dims=[]: every dim
};
ReduceInfo reduce_info(const ir::Node& n);
// Whether a reduction's result lines up with its operand's shape right-aligned, as broadcasting
// reads it in the kernel: it keeps its dims, or it drops only leading ones (sum over dim 0, a
// sum of everything). Otherwise (x.sum(1) of a matrix) its readers belong to a later kernel,
// unless simplify's keep-reduced-dims has given it its dims back.
bool aligned_result(const ir::Node& n);

// Broadcasting helpers (right-aligned, as PyTorch).
bool broadcasts_to(const std::vector<int64_t>& from, const std::vector<int64_t>& to);
int64_t numel(const std::vector<int64_t>& sizes);

// Node-level facts of one graph.
struct Analysis {
  explicit Analysis(const ir::Graph& g);
  const ir::Graph& g;
  std::vector<const ir::Node*> nodes;
  // The node's index here, or -1 for a node of another graph (a region's).
  int index_of(const ir::Node* n) const {
    return n->index < int(nodes.size()) && nodes[size_t(n->index)] == n ? n->index : -1;
  }
  std::unordered_map<const ir::Value*, std::vector<int>> users;  // node indices, in order
  std::vector<std::vector<int>> preds;  // node -> nodes it must run after (data and memory)
  std::vector<bool> is_output_root;     // per node: a graph output views one of its outputs
  // The scheduled node (not Free) that computes v, or -1 (graph inputs, free nodes).
  int producer(const ir::Value* v) const;
  // The same facts of a value of this graph, computed once (the fuser asks them per merge):
  // the scheduled node that defines v itself (-1 when v is an input or a free node's result),
  // producer(v), and ir::alias_root(v).
  struct ValueFacts {
    int defined_by = -1;
    int producer = -1;
    const ir::Value* root = nullptr;
  };
  std::vector<ValueFacts> value_facts;  // by value id
  const ValueFacts& facts(const ir::Value* v) const { return value_facts[size_t(v->id)]; }
  bool is_graph_output(const ir::Value* v) const;
  // The alias roots each node reads from memory (operands not in `skip`), and the root a copy writes.
  const ir::Value* written_root(int node) const;
};

}  // namespace kiln::passes::detail
