// The CUDA driver's entry points kiln calls, loaded with dlopen (internal to runtime/src/cuda).
// Declared with the C types of the driver ABI (handles are pointers, results are ints, device
// pointers 64-bit integers), so that building kiln needs no cuda.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace kiln::cuda::detail {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void*;
using CUstream = void*;
using CUevent = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUmemoryPool = void*;
using CUgraph = void*;
using CUgraphExec = void*;

// The driver's enum values kiln uses (from the driver API's documentation).
enum : int {
  kAttrMultiprocessors = 16,
  kAttrComputeMajor = 75,
  kAttrComputeMinor = 76,
  kAttrMemoryPools = 115,
  kPoolReleaseThreshold = 4,
  kPoolReservedCurrent = 5,
  kPoolUsedCurrent = 7,
  kStreamNonBlocking = 1,
  kCaptureThreadLocal = 1,  // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
};

struct Driver {
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem_v2)(size_t*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuStreamCreate)(CUstream*, unsigned) = nullptr;
  CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  CUresult (*cuEventDestroy_v2)(CUevent) = nullptr;
  CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool*, CUdevice) = nullptr;
  CUresult (*cuMemPoolSetAttribute)(CUmemoryPool, int, void*) = nullptr;
  CUresult (*cuMemPoolGetAttribute)(CUmemoryPool, int, void*) = nullptr;
  CUresult (*cuMemPoolTrimTo)(CUmemoryPool, size_t) = nullptr;
  CUresult (*cuMemAllocAsync)(CUdeviceptr*, size_t, CUstream) = nullptr;
  CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream) = nullptr;
  CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;
  CUresult (*cuMemcpyDtoHAsync_v2)(void*, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*cuMemcpyDtoDAsync_v2)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream) = nullptr;
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned) = nullptr;
  CUresult (*cuMemFreeHost)(void*) = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**) = nullptr;
  CUresult (*cuStreamBeginCapture_v2)(CUstream, int) = nullptr;
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*) = nullptr;
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long) = nullptr;
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream) = nullptr;
  CUresult (*cuGraphExecDestroy)(CUgraphExec) = nullptr;
  CUresult (*cuGraphDestroy)(CUgraph) = nullptr;
  int devices = 0;
  int version = 0;
  // The library exports kilnEmulatedDriver: kiln's host emulation of the driver for tests
  // (KILN_CUDA_DRIVER), which takes CUDA C++ source as a module image, not a CUBIN.
  bool emulated = false;
  std::string library;  // what was loaded
  std::string why;      // empty: usable

  // "cuInit: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)"
  std::string describe(const char* call, CUresult r) const;
  // Throws kiln::Error naming the call and the CUDA error unless r is CUDA_SUCCESS.
  void check(const char* call, CUresult r) const;
};

// The driver, loaded on first use (why says what failed). Every function above is set when
// why is empty.
const Driver& driver();
// driver(), or a kiln::Error naming `op` and why CUDA is unavailable.
const Driver& require(const char* op);

// Keeps `owner` (host memory a copy enqueued on the device's stream still reads: the pinned
// source of a non-blocking copy) alive until the device's next synchronize(), when the copy has run.
void hold_until_synchronized(std::shared_ptr<const void> owner, int device);

}  // namespace kiln::cuda::detail
