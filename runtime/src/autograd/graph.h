// The backward graph's internals (autograd.h has the public side): the per-tensor autograd
// metadata, the nodes and the hooks the eager ops call to record themselves.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/runtime/autograd.h"
#include "kiln/runtime/trace.h"

namespace kiln::autograd {

class Fn;

// Where a gradient goes: input `input_nr` of node `fn` (null: nowhere).
struct Edge {
  std::shared_ptr<Fn> fn;
  uint32_t input_nr = 0;
  explicit operator bool() const { return bool(fn); }
};

// A tensor's autograd state (TensorImpl::autograd; absent for tensors autograd never saw).
struct Meta {
  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;
  std::shared_ptr<Fn> grad_fn;  // null for a leaf
  uint32_t output_nr = 0;
  std::weak_ptr<Fn> accumulator;  // a leaf's AccumulateGrad, while the graph holds it
};

// A node: takes the gradients of its outputs, gives those of its operands (one per edge).
class Fn : public Node, public std::enable_shared_from_this<Fn> {
 public:
  std::vector<Edge> next;  // one per operand
  // Each operand's sizes and dtype: a gradient is summed to the sizes and cast to the dtype.
  struct OperandInfo {
    std::vector<int64_t> sizes;
    DType dtype = DType::Float32;
  };
  std::vector<OperandInfo> operands;
  uint32_t outputs = 1;
  uint64_t sequence = 0;  // creation order: later nodes run first among the ready ones
  bool sink = false;      // a leaf's AccumulateGrad
  // Per output: the non-leaf tensors whose .grad keeps the gradient (retain_grad).
  std::vector<std::vector<std::weak_ptr<TensorImpl>>> retained;

  std::vector<std::shared_ptr<Node>> next_functions() const override;
  // The operands' gradients from the outputs' (undefined: zero). `create_graph`: the
  // computation is recorded (grad mode is on).
  virtual std::vector<Tensor> apply(std::vector<Tensor> grads, bool create_graph) = 0;
  // Frees what the node saved (backward without retain_graph).
  virtual void release() {}
  // Whether release() freed what the node saved (a backward through it would fail).
  virtual bool spent() const { return false; }
  // The tensors the node keeps (what it saved), appended to `out`.
  virtual void held(std::vector<const TensorImpl*>& out) const {}
};

// The edge a gradient of `t` flows into (null if t does not require grad).
Edge edge_of(const Tensor& t);
Meta* meta_of(const Tensor& t);
Meta& ensure_meta(const Tensor& t);

namespace detail {

extern thread_local bool grad_enabled;
inline bool active() { return used.load(std::memory_order_relaxed) && grad_enabled; }
bool any_requires_grad(std::span<const trace::Operand> in);
inline bool any_requires_grad(std::initializer_list<trace::Operand> in) {
  return any_requires_grad(std::span<const trace::Operand>(in.begin(), in.size()));
}

// An op autograd does not differentiate yet (no node of the op table: a device copy, a
// data-dependent selection): while autograd records and an operand requires grad it raises,
// rather than return a result cut off from the graph.
void refuse_while_recording(std::string_view op, std::initializer_list<trace::Operand> in, std::string_view hint);

// Records op `op` on `in` (computed, with autograd off, into `outputs`) as a node whose
// outputs are `outputs`. `attrs` is called only where the node needs its attributes.
void attach(OpId op, std::span<const trace::Operand> in, const std::function<std::vector<Attr>()>& attrs,
            std::span<Tensor> outputs);
// An in-place op on `self` while autograd records: `before_inplace` checks that it may run
// (not a leaf that requires grad, no views sharing the memory) and returns self's values
// before the write, with self's place in the graph; after the write, `attach_inplace` records
// op on `in` (in[0] being that snapshot) with `self` as its output.
Tensor before_inplace(const Tensor& self, OpId id, std::string_view op);
void attach_inplace(Tensor& self, OpId op, std::span<const trace::Operand> in,
                    const std::function<std::vector<Attr>()>& attrs);

}  // namespace detail
}  // namespace kiln::autograd
