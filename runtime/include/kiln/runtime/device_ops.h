// Eager ops on tensors that live on a GPU.
//
// The runtime's eager kernels are CPU code. An op with an operand on another device runs
// through the handler the backend for that device installs: the CUDA backend (kiln_codegen)
// compiles the op as a one-node kernel program, cached by the op, its attributes and its
// operands' dtypes, sizes and strides, and launches it on the device's stream. Each public op
// checks its operands at entry (runtime/src/trace_ops.h); views (reshape, transpose, slices)
// only change the tensor's metadata and never come here.
#pragma once
#include <initializer_list>
#include <span>
#include <vector>

#include "kiln/runtime/trace.h"

namespace kiln::device_ops {

using Handler = Tensor (*)(OpId op, std::span<const trace::Operand> inputs, std::vector<Attr> attrs);
// Installs the handler of ops on GPU tensors (done by the CUDA backend when it loads).
void install(Handler h);

// Whether a handler is installed (the CUDA backend is linked in).
bool installed();

// Whether an op of this kind goes to the handler: everything but views and graph structure.
bool dispatched(OpId op);

inline bool any_on_device(std::initializer_list<trace::Operand> in) {
  for (const trace::Operand& o : in)
    if (o.tensor && !o.tensor->device().is_cpu()) [[unlikely]]
      return true;
  return false;
}

// Runs `op`: a library op (has_library) on tensors of one device as its own call there
// (run_library), any other through the installed handler; without one, a kiln::Error naming the
// op and device.
Tensor run(OpId op, std::span<const trace::Operand> inputs, std::vector<Attr> attrs);

// Library ops computed on their operands' own device without going through the handler: the
// matmul family (matmul, mm, bmm, addmm; GPU tensors go through cuBLAS) and einsum (views, sums
// and one bmm per contraction, each on the device). The CUDA backend calls this for the opaque
// kernels of its programs; run() calls it for these ops' eager calls. Operands in the op's order;
// attributes as the op records them (addmm's alpha and beta, einsum's equation).
bool has_library(OpId op);
Tensor run_library(OpId op, std::span<const Tensor> operands, const std::vector<Attr>& attrs);
// The same op with its result written into `dst` (of the result's sizes): a product writes there
// directly where dst is contiguous and overlaps no operand, else the result is copied over.
void run_library_into(OpId op, std::span<const Tensor> operands, const std::vector<Attr>& attrs, const Tensor& dst);

}  // namespace kiln::device_ops
