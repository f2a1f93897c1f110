// The tracer: the runtime's Recorder while a compiled function runs for the first time on a
// signature (or along a new path). It maps every live tensor to the SSA value that produced
// it, appends nodes as eager ops report themselves, and cuts the trace into a chain of graphs
// at each graph break.
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/compile.h"
#include "trace_tree.h"

namespace kiln::detail {

// The ops that make a factory's tensor `t` again (frontend/src/factories.cpp), appended to
// `g`: its value, or null for a factory stored as a constant.
ir::Value* make_factory(ir::Graph& g, const Tensor& t, std::string_view factory, std::span<const Scalar> args);

class Tracer final : public trace::Recorder {
 public:
  // `args` are the call's arguments; `captures` the closure tensors known from earlier traces
  // of this signature (their slots stay stable across paths).
  // `parent`: the tracer of the function a cond branch is traced inside (the branch's own
  // graph becomes a region; guards on sizes go to the parent).
  Tracer(std::span<const CallArg> args, std::vector<std::weak_ptr<TensorImpl>> captures, bool fullgraph,
         Tracer* parent = nullptr, size_t max_graph_ops = 0);

  void record(OpId op, std::span<const trace::Operand> inputs, std::vector<Attr> attrs,
              std::span<const Tensor> outputs) override;
  void write_back(const Tensor& dst, const Tensor& src) override;
  void record_inplace(const Tensor& self, OpId op, std::span<const trace::Operand> inputs,
                      std::vector<Attr> attrs) override;
  void created(const Tensor& t, std::string_view factory, std::span<const Scalar> args) override;
  void host_access(const Tensor& t, trace::HostAccess what, const std::source_location& where,
                   const void* pc) override;
  void data_dependent(std::string_view op, std::span<const Tensor> inputs, const Tensor& output,
                      std::function<Tensor(std::span<const Tensor>)> replay,
                      const std::source_location& where) override;
  void metadata_read(const Tensor& t, trace::Metadata what, int64_t dim, const void* pc) override;
  void grad_access(const Tensor& t, bool overwrite) override;
  void host_effect(std::function<void()> effect, std::string what) override;
  Tensor live_number(double now, std::function<double()> read, std::string what) override;
  void host_guard(std::function<bool()> holds, std::string what) override;
  SymInt sym_size(const Tensor& t, int64_t dim) override;
  bool owns(uint64_t trace) const override { return trace == id_ || (parent_ && parent_->owns(trace)); }
  void constrain(const SymExpr& form, int64_t lo, int64_t hi, bool inside, const char* what,
                 const std::source_location& where, const void* pc) override;

  // A kiln::cond: both branches were traced into `then_graph` and `else_graph`; `outputs` are
  // the real results of the branch `pred` chose.
  void record_cond(const Tensor& pred, const std::vector<Tensor>& operands, ir::Graph then_graph,
                   ir::Graph else_graph, const std::vector<Tensor>& outputs);
  // For a branch tracer: whether the branch wrote into an operand.
  bool writes_inputs() const { return head_ && !head_->written.empty(); }

  // Ends the trace: the function returned `outputs`. Returns the chain of nodes, each the
  // only child of the previous one (under the key its guard saw).
  std::unique_ptr<TreeNode> finish(const std::vector<Tensor>& outputs);
  // Before finish(): whether the trace may be replayed (not_replayable) or kept (not_kept) at all.
  void check_end(const std::vector<Tensor>& outputs);
  // Before finish(), when check_end found returned tensors with live gradient history: traces
  // their backward into its own graph (a BackwardPlan that finish() puts on the Return node), or
  // says in not_replayable() why it cannot.
  void trace_backward(const std::vector<Tensor>& outputs);
  bool needs_backward() const { return !live_outputs_.empty(); }

  // Non-empty when the trace cannot be replayed (data_ptr escaped to the host, a returned
  // tensor's gradient history is still live): the signature runs eagerly.
  const std::string& not_replayable() const { return not_replayable_; }
  // Non-empty (after finish) when this trace cannot be kept but a later one may be: a tensor made
  // during the call outlived it without being returned (stored in host state, as an optimizer
  // stores its new moments on its first step). The next call traces again.
  const std::string& not_kept() const { return not_kept_; }
  // Whether the leaves' requires_grad flags were read (autograd recorded ops): `captures()`'s
  // flags as the trace found them, -1 where not read.
  const std::vector<int8_t>& capture_grad_flags() const { return capture_grad_; }
  const std::vector<std::weak_ptr<TensorImpl>>& captures() const { return captures_; }
  size_t breaks() const { return breaks_; }
  // Graphs cut for length (max_graph_ops), and where the user's code was at the first cut.
  size_t splits() const { return splits_; }
  const std::string& split_where() const { return split_where_; }

 private:
  struct Known {
    std::weak_ptr<TensorImpl> impl;
    ir::Value* value;
  };
  ir::Value* value_of(const Tensor& t);
  // The slot of a tensor made before the trace: its argument, or its capture (added when new;
  // `as_input` makes it a graph input too).
  Ref outside_ref(const Tensor& t);
  bool made_here(const Tensor& t) const { return t.impl().serial >= start_serial_; }
  ir::Value* add_input(const Tensor& t, Ref ref);
  std::vector<ir::Value*> operand_values(std::span<const trace::Operand> inputs);  // numbers become constants
  void write_back_value(const Tensor& dst, ir::Value* src);  // dst now holds src's values
  void bind(const Tensor& t, ir::Value* v);
  // Closes the current graph with every live value as an output and opens the next one,
  // whose inputs are those values. Returns the closed node.
  TreeNode* cut(const Tensor* also_live = nullptr);
  Ref slot_of(const Tensor& t);  // the Value slot a live tensor was handed out in at the last cut
  static ir::Type type_of(const Tensor& t);
  // The symbol for `kind` (and dim) of the traced tensor t, numbered on first read; nullopt
  // for a tensor whose metadata cannot vary between calls (made before the trace, not an input).
  std::optional<uint32_t> symbol(const Tensor& t, trace::Metadata kind, int32_t dim);
  // This node cannot run at other sizes (a size the guards cannot follow was read).
  void make_opaque(const std::string& why);
  // Cuts the graph when it has reached max_graph_ops (before the next node is recorded).
  void split_if_long();

  bool fullgraph_;
  Tracer* parent_;
  uint64_t id_;  // this trace's number, which its SymInts carry
  struct SymbolKey {
    const TreeNode* node;
    int value_id;
    trace::Metadata kind;
    int32_t dim;
    bool operator==(const SymbolKey&) const = default;
  };
  struct SymbolKeyHash {
    size_t operator()(const SymbolKey& k) const {
      return std::hash<const void*>()(k.node) ^ (size_t(k.value_id) * 1000003u) ^ (size_t(k.kind) << 20) ^
             (size_t(k.dim + 1) << 24);
    }
  };
  std::unordered_map<SymbolKey, uint32_t, SymbolKeyHash> symbol_ids_;
  std::vector<int64_t> symbol_values_;  // by number: the value when traced
  std::vector<std::string> symbol_names_;
  uint64_t start_serial_;
  std::vector<std::weak_ptr<TensorImpl>> captures_;
  std::unique_ptr<TreeNode> head_;
  TreeNode* tail_ = nullptr;  // the node being recorded
  std::unordered_map<const TensorImpl*, Known> known_;
  std::unordered_map<const TensorImpl*, Ref> cut_slots_;  // tensors handed across the last cut
  uint32_t next_value_slot_ = 0;
  size_t segments_ = 0, breaks_ = 0, splits_ = 0;
  size_t max_graph_ops_ = 0;
  std::string split_where_;
  std::string not_replayable_;
  std::string not_kept_;
  std::unordered_map<const TensorImpl*, uint32_t> arg_index_;  // the arguments' tensors
  std::vector<int8_t> capture_grad_;  // per capture: requires_grad when first met (-1: unknown)
  // Leaves (arguments, captures) whose .grad the trace touched, and the .grad each had when
  // first touched (a tensor made before the trace reads as the leaf's .grad at replay).
  struct GradLeaf {
    Ref leaf;
    std::weak_ptr<TensorImpl> impl, start;
    bool started_defined = false;
  };
  std::vector<GradLeaf> grad_leaves_;
  std::unordered_map<const TensorImpl*, Ref> grad_inputs_;  // a leaf's starting .grad -> its Grad slot
  uint32_t next_live_slot_ = 0;
  bool has_effects_ = false;
  std::vector<Tensor> arg_tensors_;
  std::vector<uint32_t> live_outputs_;        // returned outputs with live gradient history
  std::shared_ptr<BackwardPlan> backward_;    // traced by trace_backward, finished by finish()
  std::vector<Tensor> saved_;                 // the forward values the backward reads
  std::vector<int> source_saved_;             // per backward capture: its index in saved_, or -1
};

// "file:line (function)" for a source location; for a code address, the enclosing symbol.
std::string describe_location(const std::source_location& where, const void* pc);

}  // namespace kiln::detail
