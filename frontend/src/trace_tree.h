// The pieces a compiled function is made of (internal to frontend/).
//
// A call's values live in an environment with three spaces: the call's arguments, the tensors
// captured by the function's closure, and the values that graphs hand to each other across
// graph breaks. A trace tree node is one graph plus what follows it: either the function's
// return, or a guard (the host value the C++ code took from a tensor) whose observed values
// lead to child nodes.
#pragma once
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "kiln/codegen/cpu.h"
#include "kiln/ir/exec.h"
#include "kiln/ir/graph.h"
#include "kiln/runtime/trace.h"

namespace kiln::detail {

struct Ref {
  enum class Space : uint8_t { Arg, Capture, Value } space;
  uint32_t index;
  bool operator==(const Ref&) const = default;
};

struct Env {
  std::vector<Tensor> args, captures, values;
  Tensor& at(Ref r) {
    auto& v = r.space == Ref::Space::Arg ? args : r.space == Ref::Space::Capture ? captures : values;
    if (v.size() <= r.index) v.resize(r.index + 1);
    return v[r.index];
  }
};

// What ends a graph.
enum class Exit : uint8_t {
  Return,         // the function returned `returns`
  HostValue,      // the C++ code read a host value from `guarded` (bool, item, to_vector, str)
  Print,          // kiln::print(guarded): replayed as a print, no guard
  DataDependent,  // nonzero/masked_select/unique: replayed with `replay`, guarded on its shape
};

struct TreeNode {
  ir::Graph graph;
  std::unique_ptr<ir::Executable> exe;
  // The graph optimized and compiled by the CPU backend, for inputs of the traced sizes and
  // strides (null: the reference executor `exe` runs it). `backend_note` says which and why.
  std::shared_ptr<codegen::CompiledProgram> compiled;
  std::string backend_note;
  // Programs for other input sizes (a dynamic dim's sizes), by the inputs' sizes and strides,
  // built from size-generic kernels; null: that size runs on the reference executor. The last
  // kMaxVariants sizes are kept (a program costs the passes' time to rebuild, no compiling).
  static constexpr size_t kMaxVariants = 64;
  mutable std::mutex variants_mu;
  mutable std::map<std::vector<int64_t>, std::shared_ptr<codegen::CompiledProgram>> variants;
  mutable std::deque<std::vector<int64_t>> variant_order;  // oldest first
  mutable uint64_t variants_built = 0;
  uint64_t hash = 0;
  std::vector<Ref> inputs;     // where each graph input comes from
  std::vector<uint32_t> outputs;  // the Value slots the graph's outputs go to
  // Argument and capture slots the graph writes into (restored if a later guard fails).
  std::vector<Ref> written;

  Exit exit = Exit::Return;
  std::vector<Ref> returns;
  trace::HostAccess access = trace::HostAccess::Bool;
  Ref guarded{Ref::Space::Value, 0};
  std::vector<Ref> dd_inputs;
  uint32_t dd_output = 0;
  std::function<Tensor(std::span<const Tensor>)> replay;
  std::string reason, where;  // the break, for explain()

  // The guard's observed values (canonical bytes) and the subtree each leads to.
  std::vector<std::pair<std::string, std::unique_ptr<TreeNode>>> children;
  // The key recorded while tracing (used when merging a new path into the tree).
  std::string key;

  // Does `other` (a freshly traced node) describe the same graph and break as this one?
  bool same_step(const TreeNode& other) const {
    return hash == other.hash && inputs == other.inputs && outputs == other.outputs && exit == other.exit &&
           returns == other.returns && guarded == other.guarded && access == other.access &&
           dd_inputs == other.dd_inputs && dd_output == other.dd_output;
  }
};

// The canonical bytes of a host value read from `t` (the guard key).
std::string guard_key(Exit exit, trace::HostAccess access, const Tensor& t);
// A readable form of a guard key ("true", "3.5", "sizes [4, 1]", "12 values").
std::string describe_key(Exit exit, trace::HostAccess access, const std::string& key);

}  // namespace kiln::detail
