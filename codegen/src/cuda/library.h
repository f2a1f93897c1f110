// Library ops on GPU tensors (library.cpp), internal to the CUDA backend: the opaque ops the
// renderer does not write as kernel code, run on the device as calls. A compiled program's
// opaque kernel of such an op, and the op's eager call, both come here, so neither copies its
// operands to the host.
//
//   matmul, mm, bmm, addmm   cuBLAS (device_ops::run_library, runtime/src/linalg.cpp);
//                            integer products on the host's loop
//   einsum                   its contraction's own steps on the device: views, sums, one bmm
//                            (cuBLAS) per pair of operands
//   cat                      device copies of each operand into its slice of the result
//   gather, index_select     one gather kernel (written here, compiled like a rendered one);
//                            the host reads its index check after it, to raise eager's error
#pragma once
#include <span>
#include <string>
#include <vector>

#include "kiln/codegen/cuda.h"
#include "kiln/ir/graph.h"

namespace kiln::codegen {

// Whether `op` runs on the GPU as a library call.
bool cuda_library(OpId op);

// How the op runs, for stats().library ("cuBLAS", "device copies", ...), and whether it needs
// cuBLAS (set up when a program is compiled, never inside a CUDA graph's capture).
std::string cuda_library_how(OpId op);
bool cuda_library_uses_blas(OpId op);

// Why a call of `op` whose result has dtype `result` cannot be captured in a CUDA graph, or ""
// when it can (work on the host, or a check the host reads after the call).
std::string cuda_library_graph_refusal(OpId op, DType result);

// The gather kernel that gathers x (at least 1-d) along d by `index` (int64, its sizes the loop
// space's) into `out`: only their sizes, strides and element size matter, so tests render it
// from host tensors (to compile it with NVRTC, which the emulated driver never does).
CudaKernel cuda_gather_kernel(const Tensor& x, int64_t d, const Tensor& index, const Tensor& out);

// The op on its operands (all on one GPU; sizes and dtypes as type inference accepted them),
// written into `dst`, a view with the sizes and dtype of the op's result.
void run_cuda_library_into(OpId op, std::span<const Tensor> operands, const std::vector<Attr>& attrs, Tensor dst);

// The op's result as a tensor of its own, laid out as eager lays it out (`result`: the type
// inference gave it).
Tensor run_cuda_library(OpId op, std::span<const Tensor> operands, const std::vector<Attr>& attrs,
                        const ir::Type& result);

}  // namespace kiln::codegen
