// Loaded kernels (launch.cpp), internal to the CUDA backend: a rendered or hand-written kernel
// named after its content and loaded once per device for the life of the process.
#pragma once
#include <memory>

#include "kiln/codegen/cuda.h"
#include "kiln/runtime/cuda.h"

namespace kiln::codegen {

// Renames the kernel (entry points and body) `kiln_<hash of its body>`: identical kernels of
// different programs, and the single-op kernels of eager calls, share one cache entry and one
// loaded module.
void name_by_content(CudaKernel& k);

struct LoadedKernel {
  std::shared_ptr<cuda::Module> module;
  void* main = nullptr;
  void* finish = nullptr;
  CudaBinary::From from = CudaBinary::From::Memory;
};

// The kernel's module on `device`: its CUBIN for sm_<arch> through the caches (NVRTC on a
// miss), or on the emulated driver its source.
LoadedKernel load_kernel(const CudaKernel& k, int device, int arch);

}  // namespace kiln::codegen
