// The compiled-function engine's state and the pieces its files share (internal to frontend/):
// compile.cpp (signatures, the budget, call, replay, trace trees), nodes.cpp (compiling and
// running one graph of a tree, size guards), explain.cpp (explain() and its text).
#pragma once
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <shared_mutex>
#include <source_location>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/compile.h"
#include "trace_tree.h"

namespace kiln::detail {

using Key = std::vector<int64_t>;
struct KeyHash {
  size_t operator()(const Key& k) const;
};
using DynamicDims = std::set<std::pair<size_t, size_t>>;  // (argument, dim)

// The signature of a call: per tensor argument its dtype, device, sizes (a dynamic dim counts
// as -1), stride class and which earlier argument it aliases; per number its kind and value.
Key signature(std::span<const CallArg> args, const DynamicDims& dynamic);
// The signature as text: "(f32[4,3] contiguous, 0.5)".
std::string signature_text(std::span<const CallArg> args);

// What one argument of a call was, to say why a new signature was traced.
struct ArgDesc {
  bool is_tensor = false;
  DType dtype = DType::Float32;
  Device device = Device::cpu();
  std::vector<int64_t> sizes;
  int layout = 0;      // the stride class
  Scalar scalar;       // a number argument
  int64_t alias = -1;  // the earlier argument it shares storage with
};

// Why a function was traced again: one cause of the budget's use, tallied by `key` ("argument 2
// (double)", "item() at f.cpp:12"), with what it did and how to avoid it.
struct RetraceCause {
  std::string key;      // one per cause
  std::string subject;  // what took a new value: "argument 2 (double)", "item() ... at f.cpp:12"
  std::string noun;     // what it took: "values", "sizes", "outcomes"
  std::string fix;      // how to avoid the retrace
  std::string sample;   // the value this time, for the list of values seen
};

// A cause's retraces summed: how many, and the values they saw (the first few).
struct CauseTally {
  uint64_t count = 0;
  std::string what, noun, fix;
  std::vector<std::string> samples;
  static constexpr size_t kSamples = 6;
};

// The values of a trace's symbols met so far on a replay (by number; `known` marks them).
struct SymbolTable {
  std::vector<int64_t> values;
  std::vector<char> known;
};

struct Engine::State {
  CompileOptions opts;
  std::string where;  // the compile() call
  struct Entry {
    std::unique_ptr<TreeNode> root;
    std::vector<std::weak_ptr<TensorImpl>> captures;
    std::string eager_reason;
    std::string signature;
    std::vector<ArgDesc> args;  // of the call that created it
    size_t value_slots = 0, live_slots = 0;
    // Per capture: whether it required grad when traced (-1: not read). While autograd records,
    // a replay needs the same flags (they decide what the eager run records).
    std::vector<int8_t> capture_grad;
    std::string not_kept;  // why the last trace was not kept (the next call traces again)
    bool generic = false;  // traced under dynamic dims: replays check the size guards
  };
  mutable std::shared_mutex mu;
  std::unordered_map<Key, std::unique_ptr<Entry>, KeyHash> cache;
  DynamicDims dynamic;
  std::set<std::pair<size_t, size_t>> static_only;  // dims whose graphs depend on their size

  // Every trace and why, the newest kLogLines of them (older ones are counted).
  static constexpr size_t kLogLines = 64;
  std::deque<std::string> log;
  uint64_t log_dropped = 0;
  void note(std::string line);

  // The recompile budget: every trace after the first, whatever its cause, counts; past
  // opts.recompile_limit of them a call that needs a trace runs eagerly.
  std::map<std::string, CauseTally> causes;
  std::atomic<uint64_t> traces_taken{0};  // traces the budget has handed out
  std::atomic<bool> warned_budget{false};

  std::atomic<uint64_t> calls{0}, hits{0}, misses{0}, guard_failures{0}, compiles{0}, breaks{0}, eager_calls{0},
      budget_eager_calls{0};
  mutable std::atomic<uint64_t> speculated{0}, misspeculated{0};

  struct Replay {
    bool ok = false;
    std::string why;  // when not ok
    RetraceCause cause;
    bool reset = false;  // a captured tensor was released: the entry's tree is stale
    std::vector<Tensor> outputs;
  };
  Replay replay(const Entry& e, std::span<const CallArg> args) const;
  // Traces the call; `reset` drops the entry's tree first (a released capture), `generic` says
  // the key has dynamic dims.
  std::vector<Tensor> trace(const Key& key, std::span<const CallArg> args,
                            const std::function<std::vector<Tensor>()>& run_eager, std::string why, bool reset,
                            bool generic);
  void merge(Entry& e, std::unique_ptr<TreeNode> chain);
  // The KILN_LOGS lines of a fresh trace: its cause, breaks and the guards it recorded.
  void log_trace(const TreeNode& head, size_t number, const std::string& why) const;
  // Takes one trace from the budget, or refuses (below) and returns false.
  bool take_budget(const std::vector<RetraceCause>& why);
  bool budget_spent() const;
  // A call that needs a trace past the budget: warns once (with the causes), counts, logs.
  void refuse(const std::vector<RetraceCause>& why);
  std::string name() const { return opts.name.empty() ? "compiled function" : opts.name; }
  std::string who() const { return name() + (where.empty() ? "" : " (compiled at " + where + ")"); }
  std::string budget_text() const;        // for explain()
  std::string budget_causes_text() const;  // the causes, a line each
};

// ---- one graph of a trace tree (nodes.cpp) ----

// Optimizes a traced graph and compiles its kernel program for its device. Never throws: a graph
// the optimizer or the backend fails on runs on the reference executor, with a warning.
void compile_node(TreeNode& n, const CompileOptions& opts);
// The merged graph of a speculation, compiled (throws on failure).
std::shared_ptr<exec::CompiledProgram> compile_speculation(const TreeNode& n, const ir::Graph& g,
                                                              const CompileOptions& opts);
// Whether node `n`'s size guards hold for its inputs `ins`: its symbols' values go into `table`
// (from the traced types when the inputs have them, else from the graph's types inferred again
// for these inputs); `why` says which guard failed.
// `failed`, when given, gets the guard that failed (null when the sizes could not be followed).
bool size_guards_hold(const TreeNode& n, const std::vector<Tensor>& ins, SymbolTable& table, std::string* why,
                      const SizeGuard** failed = nullptr);
// Runs node `n`'s graph on `ins`: compiled for the traced sizes, a program of size-generic
// kernels for other sizes, or the reference executor.
std::vector<Tensor> run_node(const TreeNode& n, const std::vector<Tensor>& ins);
// Runs a speculation (a node's graph merged with its child's); nullopt when it does not take
// these inputs or fails (the node then runs alone).
std::optional<std::vector<Tensor>> run_speculation(const Speculation& s, Env& env);
// What runs node `n`, for explain(): the backend note and its size variants.
std::string backend_text(const TreeNode& n);
size_t count_ops(const ir::Graph& g);

}  // namespace kiln::detail
