// The reference executor: runs any graph on the eager kernels.
//
// Preparing a graph decodes every node's attributes once into a step (a small closure that
// calls the eager op); running it walks the steps over a frame of values. Views are real views
// and write-backs (`copy`) really write, so a graph that mutates its inputs or returns views of
// them behaves exactly as the eager program it was traced from. A cond's results are new
// tensors, as in the kernel program: a branch that returns its operand (or a view of it, or a
// constant) gives a copy (docs/passes.md, "Writes and the IR"). Later issues add compiled
// backends beside this one; this one stays the reference they are tested against.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/ir/graph.h"
#include "kiln/runtime/tensor.h"

namespace kiln::ir {

// One value at run time: a tensor, or a wrapped host number (a Python-style scalar operand).
struct Slot {
  Tensor tensor;
  Scalar scalar;
  bool is_scalar = false;
};

class Executable {
 public:
  // Decodes the graph; throws kiln::Error ("[exec] ...") for a node it cannot run.
  explicit Executable(const Graph& g);
  ~Executable();
  Executable(Executable&&) noexcept;
  Executable& operator=(Executable&&) noexcept;

  // Runs the graph. Safe to call from several threads at once.
  std::vector<Tensor> run(std::span<const Tensor> inputs) const;
  std::vector<Slot> run_slots(std::span<const Slot> inputs) const;
  size_t num_inputs() const;
  size_t num_steps() const;

  struct Step;

 private:
  std::unique_ptr<struct Plan> plan_;
};

// A tensor `constant` node's value (its `data`: the bytes), and the data of a tensor (its
// row-major bytes): the one codec of tensor constants, shared by the tracer, the executor and
// the passes. (The text form writes the bytes as hex: ir/graph.h.)
// A constant typed for a GPU is decoded on the host and copied there (unless `on_host`).
Tensor decode_constant(const Node& n, bool on_host = false);
std::string encode_constant(const Tensor& t);
// The value of an `iota` node of these sizes: each element's row-major index (int64), made on
// the host and moved to `device`.
Tensor iota_value(const std::vector<int64_t>& sizes, Device device);
// The value whose memory `v` views: follows views and write-backs (`copy`) up to their source.
const Value* alias_root(const Value* v);

// Prepares and runs `g` once.
std::vector<Tensor> execute(const Graph& g, std::span<const Tensor> inputs);

}  // namespace kiln::ir
