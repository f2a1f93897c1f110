// Matrix products on the device through cuBLAS (blas.h): one handle per device, bound to kiln's
// stream on it, so a product is ordered with every other piece of kiln's work there.
#include "blas.h"

#include <array>
#include <climits>
#include <mutex>

#include "kiln/runtime/cuda.h"
#include "kiln/runtime/error.h"

namespace kiln::cuda::detail {

namespace {

// cudaDataType and cublasComputeType_t values (from cuBLAS's documentation).
enum : int {
  kR32F = 0,
  kR64F = 1,
  kR16F = 2,
  kR16BF = 14,
  kCompute32F = 68,
  kCompute64F = 70,
  kGemmDefault = -1,
};

void check(const Blas& b, const char* call, cublasStatus s) {
  if (s == 0) [[likely]]
    return;
  const char* name = b.cublasGetStatusName ? b.cublasGetStatusName(s) : nullptr;
  const char* text = b.cublasGetStatusString ? b.cublasGetStatusString(s) : nullptr;
  KILN_FAIL("cuda", call, ": ", name ? name : "cuBLAS status " + std::to_string(s), " (", text ? text : "no description", ")");
}

// A handle per device, created on first use and bound to kiln's stream there, with a workspace
// of its own (so that cuBLAS never allocates while a CUDA graph is being captured: 32 MiB, what
// cuBLAS asks for on Hopper; counted in memory_allocated). A handle is not safe to use from two
// threads at once: calls on one device are serialised.
struct Handle {
  std::once_flag once;
  std::mutex mu;
  cublasHandle h = nullptr;
};

Handle& handle(const Blas& b, int device) {
  static auto* handles = new std::array<Handle, 16>();  // (never destroyed, as the devices' state)
  KILN_CHECK(device >= 0 && device < int(handles->size()), "matmul", "no CUDA device ", device);
  Handle& h = (*handles)[size_t(device)];
  std::call_once(h.once, [&] {
    void* s = stream(device);  // (sets up the device and makes its context current)
    check(b, "cublasCreate", b.cublasCreate_v2(&h.h));
    check(b, "cublasSetStream", b.cublasSetStream_v2(h.h, s));
    if (b.cublasSetWorkspace_v2 && !emulated()) {
      constexpr size_t kWorkspace = size_t(32) << 20;
      check(b, "cublasSetWorkspace", b.cublasSetWorkspace_v2(h.h, allocate(kWorkspace, device), kWorkspace));
    }
  });
  return h;
}

Handle& prepared(int device) {
  const Blas& b = blas();
  KILN_CHECK(b.why.empty(), "matmul", "cannot multiply matrices on cuda:", device, ": ", b.why);
  return handle(b, device);
}

}  // namespace

void gemm(const Gemm& g, int device) {
  Handle& h = prepared(device);
  const Blas& b = blas();
  for (int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.batch})
    KILN_CHECK(v <= INT_MAX, "matmul", "a product of ", g.m, "x", g.k, " and ", g.k, "x", g.n, " matrices (", g.batch,
               " of them) exceeds cuBLAS's 32-bit sizes");
  int type = 0, compute = kCompute32F;
  switch (g.dtype) {
    case DType::Float32: type = kR32F; break;
    case DType::Float64: type = kR64F, compute = kCompute64F; break;
    case DType::Float16: type = kR16F; break;
    case DType::BFloat16: type = kR16BF; break;
    default: KILN_FAIL("matmul", "cuBLAS has no product of ", name(g.dtype), " matrices");
  }
  // alpha and beta in the compute type, read from the host.
  const float af = float(g.alpha), bf = float(g.beta);
  const void* alpha = compute == kCompute64F ? static_cast<const void*>(&g.alpha) : &af;
  const void* beta = compute == kCompute64F ? static_cast<const void*>(&g.beta) : &bf;
  std::lock_guard<std::mutex> lock(h.mu);
  stream(device);  // (this thread's current context: the device's)
  check(b, "cublasGemmStridedBatchedEx",
        b.cublasGemmStridedBatchedEx(h.h, g.trans_a ? 1 : 0, g.trans_b ? 1 : 0, int(g.m), int(g.n), int(g.k), alpha, g.a, type,
                                     int(g.lda), g.stride_a, g.b, type, int(g.ldb), g.stride_b, beta, g.c, type, int(g.ldc),
                                     g.stride_c, int(g.batch), compute, kGemmDefault));
}

}  // namespace kiln::cuda::detail

namespace kiln::cuda {
void blas_prepare(int device) { detail::prepared(device); }
}  // namespace kiln::cuda
