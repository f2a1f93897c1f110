// cuBLAS, loaded with dlopen (internal to the runtime): the matrix products of GPU tensors
// (runtime/src/linalg.cpp). Declared with the C types of the cuBLAS ABI, as driver.h does for
// the driver, so that building kiln needs no CUDA headers.
#pragma once
#include <cstdint>
#include <string>

#include "kiln/runtime/dtype.h"

namespace kiln::cuda::detail {

// C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i] for i < batch, in cuBLAS's column-major
// terms: op(A) is m x k, op(B) k x n, C m x n with leading dims lda, ldb, ldc; the matrices of
// batch i start stride_* elements after those of batch i - 1 (0: the same matrix for every i).
// beta == 0 never reads C. dtype: float32 and float64 accumulate in their own type, float16 and
// bfloat16 in float32 (no TF32: float32 products are exact float32 math, as PyTorch's default).
struct Gemm {
  DType dtype = DType::Float32;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 1, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 1, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 1, stride_c = 0;
  int64_t batch = 1;
  double alpha = 1, beta = 0;
};

// The cuBLAS entry points kiln calls (handles are pointers, statuses and enums ints).
using cublasStatus = int;
using cublasHandle = void*;
struct Blas {
  cublasStatus (*cublasCreate_v2)(cublasHandle*) = nullptr;
  cublasStatus (*cublasSetStream_v2)(cublasHandle, void*) = nullptr;
  cublasStatus (*cublasSetWorkspace_v2)(cublasHandle, void*, size_t) = nullptr;  // (optional: cuBLAS 11.4+)
  cublasStatus (*cublasGemmStridedBatchedEx)(cublasHandle, int, int, int, int, int, const void*, const void*, int, int,
                                             long long, const void*, int, int, long long, const void*, void*, int, int,
                                             long long, int, int, int) = nullptr;
  const char* (*cublasGetStatusName)(cublasStatus) = nullptr;    // (optional: cuBLAS 11.4.2+)
  const char* (*cublasGetStatusString)(cublasStatus) = nullptr;  // (optional)
  std::string why;  // empty: usable
};
// cuBLAS, loaded on first use (runtime/src/cuda/loader.cpp): the emulated driver's own when the
// driver is kiln's emulation, else KILN_CUBLAS or the toolkit's libcublas.so.
const Blas& blas();

// Enqueues the product on the device's stream (kiln::Error naming the cuBLAS call and status,
// or why cuBLAS is unavailable; sizes past cuBLAS's 32-bit arguments are refused by name).
void gemm(const Gemm& g, int device);

}  // namespace kiln::cuda::detail
