// The pieces a compiled function is made of (internal to frontend/).
//
// A call's values live in an environment with three spaces: the call's arguments, the tensors
// captured by the function's closure, and the values that graphs hand to each other across
// graph breaks. A trace tree node is one graph plus what follows it: either the function's
// return, or a guard (the host value the C++ code took from a tensor) whose observed values
// lead to child nodes.
#pragma once
#include <atomic>
#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/codegen/cpu.h"
#include "kiln/ir/exec.h"
#include "kiln/ir/graph.h"
#include "kiln/runtime/trace.h"

namespace kiln::detail {

// Where a value of a call comes from: an argument, a captured tensor, a value handed across a
// graph break, the .grad of an argument or a captured tensor (read when the call starts), or a
// live host number (trace::live_number, read again at each call).
struct Ref {
  enum class Space : uint8_t { Arg, Capture, Value, ArgGrad, CaptureGrad, Live } space;
  uint32_t index;
  bool operator==(const Ref&) const = default;
};

struct Env {
  std::vector<Tensor> args, captures, values, live;
  std::vector<Tensor> arg_grads, capture_grads;  // resolved on first use
  Tensor& at(Ref r) {
    if (r.space == Ref::Space::ArgGrad || r.space == Ref::Space::CaptureGrad) {
      const bool arg = r.space == Ref::Space::ArgGrad;
      auto& g = arg ? arg_grads : capture_grads;
      if (g.size() <= r.index) g.resize(r.index + 1);
      if (!g[r.index].defined()) g[r.index] = at({arg ? Ref::Space::Arg : Ref::Space::Capture, r.index}).grad();
      return g[r.index];
    }
    auto& v = r.space == Ref::Space::Arg ? args : r.space == Ref::Space::Capture ? captures
              : r.space == Ref::Space::Live                                      ? live
                                                                                 : values;
    if (v.size() <= r.index) v.resize(r.index + 1);
    return v[r.index];
  }
};

// Host state a library keeps beside its tensors (trace.h's host_effect, live_number, host_guard),
// replayed in the order recorded before the node's graph runs (guards first).
struct HostOp {
  enum class Kind : uint8_t { Guard, Effect, Number } kind;
  std::function<bool()> holds;
  std::function<void()> effect;
  std::function<double()> read;
  uint32_t slot = 0;  // Number: its Live slot
  std::string what;
  bool same(const HostOp& o) const { return kind == o.kind && slot == o.slot && what == o.what; }
};

// The .grad of an argument or captured tensor (`leaf`) as the call found it: defined or not. A
// replay checks it before the node that first touched it runs.
struct GradGuard {
  Ref leaf;
  bool defined = false;
  bool operator==(const GradGuard&) const = default;
};
// What the call leaves in a leaf's .grad: the value in `source`, or nothing (set to none).
struct GradSet {
  Ref leaf;
  std::optional<Ref> source;
  bool operator==(const GradSet&) const = default;
};

// What ends a graph.
enum class Exit : uint8_t {
  Return,         // the function returned `returns`
  HostValue,      // the C++ code read a host value from `guarded` (bool, item, to_vector, str)
  Print,          // kiln::print(guarded): replayed as a print, no guard
  DataDependent,  // nonzero/masked_select/unique: replayed with `replay`, guarded on its shape
  Split,          // the graph reached CompileOptions::max_graph_ops: the next one goes on, no guard
};

struct TreeNode;

// A piece of a traced value's metadata that the user's code read (trace::Metadata): the size or
// stride of one dim, whether it is contiguous, its storage offset. Symbols are numbered per
// trace, in the order the code read them; a guard names them by number.
struct Symbol {
  int value_id = 0;                                  // the value, in its node's graph
  trace::Metadata kind = trace::Metadata::Size;      // Size, Stride, Contiguity or Offset
  int32_t dim = -1;                                  // for Size and Stride
  int64_t traced = 0;                                // its value when traced
  std::string name;                                  // for messages: "argument 0 size(1)"
  bool operator==(const Symbol& o) const {
    return value_id == o.value_id && kind == o.kind && dim == o.dim;
  }
};

// A guard on sizes: the user's code made a decision on the linear form sum(coef * symbol) +
// constant, which held when traced as recorded here: the form lies in [lo, hi] (inside) or
// outside it. A replay at other sizes runs the graph only where every guard still holds.
struct SizeGuard {
  std::vector<std::pair<uint32_t, int64_t>> terms;
  int64_t constant = 0, lo = 0, hi = 0;
  bool inside = true;
  std::string where;               // what decided and where: "> at f.cpp:12 (main)"
  std::vector<std::string> names;  // of the terms' symbols, for messages
  bool same(const SizeGuard& o) const {
    return terms == o.terms && constant == o.constant && lo == o.lo && hi == o.hi && inside == o.inside;
  }
};

// Speculation past a guard (docs/compile.md): a node's graph and the graph of one of its
// children, merged into one graph and compiled as one program. The passes then fuse across the
// break (x.sum() and the x * 2 that follows it read x once), and replay runs the child's
// kernels before the guard is read: when the guard leads to that child, its outputs are already
// there; when not, they are dropped (the child writes nothing) and replay goes on as without.
struct Speculation {
  const TreeNode* child = nullptr;
  ir::Graph graph;            // the node's nodes, then the child's
  std::vector<Ref> inputs;    // where each input of `graph` comes from
  size_t own_outputs = 0;     // the first outputs are the node's (its `outputs` slots), the rest the child's
  std::shared_ptr<exec::CompiledProgram> compiled;
  std::string note;           // for explain(): the kernels merged and apart
};

// Which child a replay speculates on: a two-level predictor, as processors predict branches.
// The last two children the guard led to index a table whose entry is the child that followed
// them last time and how many times in a row it did; the replay runs that child ahead once
// the count reaches kConfident. So a guard that always goes one way, or that alternates (a
// loop's even and odd steps), is predicted, and one that goes either way at random is mostly
// left alone (a wrong guess costs the dropped child's work). Updated by concurrent replays
// without a lock: a lost update only delays a prediction.
struct Predictor {
  static constexpr uint32_t kPaths = 4;       // children 0..2 are predicted; 3 stands for any later one
  static constexpr uint32_t kConfident = 2;   // a pattern followed this many times in a row
  // The child to run ahead of the guard, or -1.
  int guess() const;
  // The guard led to child `child`.
  void observe(size_t child);

  std::atomic<uint32_t> history{0};  // older * kPaths + newer
  std::atomic<uint32_t> table[kPaths * kPaths] = {};  // per history: child | in-a-row count << 8
};

// A node's graph at input sizes other than the traced ones (a dynamic dim's): its types
// inferred again for them, its symbols' values there, and its program of size-generic kernels.
struct Variant {
  bool typed = false;                           // inference followed the new sizes
  std::vector<std::optional<int64_t>> symbols;  // as the node's `symbols` (nullopt: not known here)
  std::optional<ir::Graph> graph;               // the graph retyped, until its program is built
  bool built = false;                           // the program was tried
  std::shared_ptr<exec::CompiledProgram> program;  // null: the reference executor runs it
};

struct TreeNode {
  ir::Graph graph;
  std::unique_ptr<ir::Executable> exe;
  // The graph optimized and compiled by the CPU backend, for inputs of the traced sizes and
  // strides (null: the reference executor `exe` runs it). `backend_note` says which and why.
  std::shared_ptr<exec::CompiledProgram> compiled;
  std::string backend_note;
  std::string label;  // its name in the kernel profile (kiln/runtime/profile.h)
  // Programs for other input sizes (a dynamic dim's sizes), by the inputs' sizes and strides,
  // built from size-generic kernels; null: that size runs on the reference executor. The last
  // kMaxVariants sizes are kept (a program costs the passes' time to rebuild, no compiling).
  static constexpr size_t kMaxVariants = 64;
  // On a GPU under reduce_overhead: variants are replayed as CUDA graphs too, at most this many
  // of the kept ones at a time (each graph holds its inputs', outputs' and temporaries' memory
  // for as long as it is kept); later sizes run their kernels without a graph.
  static constexpr size_t kMaxGraphVariants = 8;
  bool variant_graphs = false;
  mutable std::mutex variants_mu;
  mutable std::map<std::vector<int64_t>, std::shared_ptr<Variant>> variants;
  mutable std::deque<std::vector<int64_t>> variant_order;  // oldest first
  mutable uint64_t variants_built = 0;
  uint64_t hash = 0;
  std::vector<Ref> inputs;     // where each graph input comes from
  std::vector<uint32_t> outputs;  // the Value slots the graph's outputs go to
  // Argument and capture slots the graph writes into (restored if a later guard fails).
  std::vector<Ref> written;

  Exit exit = Exit::Return;
  std::vector<Ref> returns;
  // Autograd's and libraries' host state (above): checked and replayed before the graph runs;
  // grad_sets after the last graph (on the Return node).
  std::vector<GradGuard> grad_guards;
  std::vector<HostOp> host_ops;
  std::vector<GradSet> grad_sets;
  // A function whose result keeps gradient history (its backward runs after the call): the
  // backward, traced into its own graph when the function was; replays attach it to the result.
  std::shared_ptr<struct BackwardPlan> backward;
  bool has_effects() const {
    return std::any_of(host_ops.begin(), host_ops.end(), [](const HostOp& h) { return h.kind == HostOp::Kind::Effect; });
  }
  // Checks a replay makes before the graph runs, besides size guards (a speculation cannot run
  // the graph ahead of them).
  bool checks_can_fail() const {
    return !grad_guards.empty() ||
           std::any_of(host_ops.begin(), host_ops.end(), [](const HostOp& h) { return h.kind == HostOp::Kind::Guard; });
  }
  bool replay_checks() const {
    if (!grad_guards.empty() || !host_ops.empty()) return true;
    return std::any_of(inputs.begin(), inputs.end(), [](Ref r) {
      return r.space == Ref::Space::ArgGrad || r.space == Ref::Space::CaptureGrad || r.space == Ref::Space::Live;
    });
  }
  trace::HostAccess access = trace::HostAccess::Bool;
  Ref guarded{Ref::Space::Value, 0};
  std::vector<Ref> dd_inputs;
  uint32_t dd_output = 0;
  std::function<Tensor(std::span<const Tensor>)> replay;
  std::string reason, where;  // the break, for explain()

  // The symbols the user's code read in this node's graph (global number, definition), and the
  // guards on them recorded while it was traced. Checked when a dynamic dim's replay gives the
  // node inputs of other sizes; `opaque` (when set) says why this node cannot run at other
  // sizes at all (a size read inside a cond branch).
  std::vector<std::pair<uint32_t, Symbol>> symbols;
  std::vector<SizeGuard> size_guards;
  std::string opaque;
  // Another trace of this place of the tree, tried when this one's size guards fail (x.size(0)
  // > 100 traced one way, then the other).
  std::unique_ptr<TreeNode> alternative;
  // The hash of the graph with sizes and strides erased: two traces of one path at different
  // sizes of a dynamic dim are the same step.
  uint64_t erased_hash = 0;
  // The graph returns nothing (a function whose effect is writes into its inputs): its outputs
  // are the hidden ones the tracer added to keep the writes, dropped at replay.
  bool hidden_outputs = false;
  // The graph neither returns nor writes anything: replay skips it.
  bool empty = false;
  // A guard (a break's, or a size guard) can fail at or after this node: a replay then undoes the
  // writes into arguments made so far, so it saves what this node's graph overwrites. False after
  // the last guard of every path below (a long in-place trace cut for length saves nothing).
  bool guarded_below = true;

  // The guard's observed values (canonical bytes) and the subtree each leads to.
  std::vector<std::pair<std::string, std::unique_ptr<TreeNode>>> children;
  // The key recorded while tracing (used when merging a new path into the tree).
  std::string key;
  // Per child (as `children`), its speculation, or null where it cannot be speculated on
  // (speculation_note says why); the predictor picks the child a replay runs ahead.
  std::vector<std::unique_ptr<Speculation>> speculations;
  std::string speculation_note;
  mutable Predictor predictor;

  // Does `other` (a freshly traced node) describe the same graph, size guards and break as this
  // one? Under dynamic dims (`generic`) the graphs are compared with their sizes erased.
  bool same_step(const TreeNode& other, bool generic) const {
    if (!(generic ? erased_hash == other.erased_hash : hash == other.hash) || inputs != other.inputs ||
        outputs != other.outputs || exit != other.exit || returns != other.returns || guarded != other.guarded ||
        access != other.access || dd_inputs != other.dd_inputs || dd_output != other.dd_output ||
        opaque != other.opaque || symbols != other.symbols || size_guards.size() != other.size_guards.size() ||
        grad_guards != other.grad_guards || grad_sets != other.grad_sets || host_ops.size() != other.host_ops.size() ||
        bool(backward) != bool(other.backward) || (backward && !same_backward(other)))
      return false;
    for (size_t i = 0; i < host_ops.size(); ++i)
      if (!host_ops[i].same(other.host_ops[i])) return false;
    for (size_t i = 0; i < size_guards.size(); ++i)
      if (!size_guards[i].same(other.size_guards[i])) return false;
    // (equal hashes, then the graphs themselves: a hash collision must not merge two programs)
    return ir::structure_key(graph, generic) == ir::structure_key(other.graph, generic);
  }
  bool same_backward(const TreeNode& other) const;  // (below BackwardPlan)
  bool has_size_guards() const { return !symbols.empty() || !size_guards.empty() || !opaque.empty(); }
  // Sets guarded_below on this node, the nodes below it and its alternatives; returns this
  // node's.
  bool mark_guards() {
    bool below = exit == Exit::HostValue || exit == Exit::DataDependent || has_size_guards() || replay_checks();
    for (auto& [key, child] : children) below = child->mark_guards() || below;
    guarded_below = below;
    if (alternative) alternative->mark_guards();
    return below || alternative != nullptr;
  }
};

// The backward of a compiled forward whose result keeps gradient history (the partition of the
// joint graph): the forward graph returns, besides its results, the values the backward reads
// (`sources` that are Value slots: what is saved); the backward graph's inputs are the results'
// gradients (argument k: of returned output outputs[k]) and its captures (capture i: sources[i],
// a saved value or a tensor made before the call, a parameter); its outputs are the gradients
// of `leaves`, in order.
struct BackwardPlan {
  std::unique_ptr<TreeNode> node;
  std::vector<uint32_t> outputs;  // indices into the node's returns
  std::vector<Ref> leaves;
  std::vector<Ref> sources;
  int64_t saved_bytes = 0;        // what the forward keeps for the backward
};

inline bool TreeNode::same_backward(const TreeNode& other) const {
  const BackwardPlan &a = *backward, &b = *other.backward;
  return a.outputs == b.outputs && a.leaves == b.leaves && a.sources == b.sources && a.node->hash == b.node->hash &&
         ir::structure_key(a.node->graph, false) == ir::structure_key(b.node->graph, false);
}

// A size guard as text: "argument 0 size(0) >= 101".
std::string describe_guard(const SizeGuard& g);
// The canonical bytes of a host value read from `t` (the guard key).
std::string guard_key(Exit exit, trace::HostAccess access, const Tensor& t);
// A readable form of a guard key ("true", "3.5", "sizes [4, 1]", "12 values").
std::string describe_key(Exit exit, trace::HostAccess access, const std::string& key);

}  // namespace kiln::detail
