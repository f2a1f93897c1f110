// Autograd: reverse-mode differentiation of eager programs, with libtorch's API and rules.
//
// A tensor that requires grad (x.requires_grad_()) makes every differentiable op that reads it,
// while grad mode is on, record a node of the backward graph: the op, what its derivative rule
// needs (saved tensors, attributes) and edges to the nodes that made its operands. backward()
// walks that graph from the loss in reverse topological order, calls each node's rule
// (runtime/src/autograd/derivatives.cpp, one record per op of the op table) and accumulates the
// gradients of the leaves into their .grad. The rules are written with kiln's own ops, so a
// backward with create_graph is itself recorded (higher derivatives).
//
// PyTorch's rules hold: gradients accumulate until zeroed; a graph is freed by backward unless
// retain_graph; a tensor saved for backward and then written in place is detected (a version
// counter on its storage) and backward raises; integer and bool tensors cannot require grad;
// gradients are reduced to each operand's shape (broadcasting) and cast to its dtype.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensor.h"

namespace kiln {

// Whether ops record for autograd on this thread (on by default).
bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// libtorch's guards: grad mode off (or set) for a scope, restored after.
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled);
  ~AutoGradMode();
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool saved_;
};
class NoGradGuard : public AutoGradMode {
 public:
  NoGradGuard() : AutoGradMode(false) {}
};

namespace autograd {

namespace detail {
// Set once any tensor requires grad: until then nothing can record, at the cost of one load.
extern std::atomic<bool> used;
// Whether `t` carries gradient history a later backward() could still use: a leaf that requires
// grad, or a result whose grad_fn has not been freed by a backward (compile() replays
// cannot give a returned tensor that history).
bool history_live(const Tensor& t);
// Sets t's .grad to `g` without reading it (optim's zero_grad(set_to_none)): a compiled call
// that does so first does not depend on the .grad it finds.
void set_grad(const Tensor& t, Tensor g);
// The tensors the gradient history of `outputs` keeps alive (what its nodes saved).
std::vector<const TensorImpl*> history_holds(const std::vector<Tensor>& outputs);
// Makes `outputs` the outputs of one backward node named `name` (their grad_fn; output k its
// output k), whose gradients flow to `inputs` (as an op's do to its operands): `backward` takes
// the outputs' gradients (an undefined one as zeros) and returns one per input (undefined:
// none). A backward without retain_graph frees `backward` and what it holds. compile() uses it
// for a compiled forward whose backward runs after the call.
void attach_function(std::string name, std::span<Tensor> outputs, const std::vector<Tensor>& inputs,
                     std::function<std::vector<Tensor>(const std::vector<Tensor>&)> backward);
}  // namespace detail
// Whether an op could record for autograd on this thread now: some tensor has required grad,
// and grad mode is on.
inline bool may_record() { return detail::used.load(std::memory_order_relaxed) && is_grad_enabled(); }

// A node of the backward graph (a tensor's grad_fn): enough to print the graph.
class Node {
 public:
  virtual ~Node() = default;
  // PyTorch's spelling: "MulBackward0", "AccumulateGrad".
  virtual std::string name() const = 0;
  // The nodes gradients flow to next, one per operand (null where the operand needs none).
  virtual std::vector<std::shared_ptr<Node>> next_functions() const = 0;
};

// The gradients of `outputs` with respect to `inputs` (dot products with `grad_outputs`; a
// one-element output may leave its gradient out: 1). Leaves' .grad is not touched. An input no
// path reaches is an error unless allow_unused (then its gradient is undefined). create_graph
// records the backward itself, so the gradients can be differentiated again.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);

// backward() of several outputs at once (libtorch's torch::autograd::backward): gradients
// accumulate into the leaves' .grad (into `inputs`' only, where given).
void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors = {},
              bool retain_graph = false, bool create_graph = false, const std::vector<Tensor>& inputs = {});

}  // namespace autograd
}  // namespace kiln
