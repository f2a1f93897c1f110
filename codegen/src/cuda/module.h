// Loaded kernels (launch.cpp), internal to the CUDA backend: a rendered or hand-written kernel
// named after its content and loaded once per device for the life of the process.
#pragma once
#include <memory>

#include "kiln/codegen/cuda.h"
#include "kiln/runtime/cuda.h"
#include "kiln/runtime/tensor.h"

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

// A device allocation for the length of one launch (freed in stream order after it).
struct DeviceScratch {
  void* p;
  size_t n;
  int device;
  DeviceScratch(size_t bytes, int dev) : p(cuda::allocate(bytes, dev)), n(bytes), device(dev) {}
  ~DeviceScratch() { cuda::release(p, n, device); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
};

// The address of a tensor's first element (a device address for a GPU tensor).
inline char* first_byte(const Tensor& t) {
  return static_cast<char*>(t.storage()->data()) + t.storage_offset() * t.element_size();
}

}  // namespace kiln::codegen
