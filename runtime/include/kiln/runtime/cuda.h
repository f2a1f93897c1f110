// CUDA at run time: the driver (libcuda.so.1) and NVRTC are loaded with dlopen when first
// asked for, so one kiln binary runs on machines without a GPU, without a driver or without the
// toolkit, and says why CUDA is unavailable there. Every driver and NVRTC call is checked; a
// failure raises kiln::Error naming the call and CUDA's error name and text (for NVRTC, the
// compile log with the offending source lines).
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace kiln {

// Whether a CUDA device can be used: the driver loads, cuInit succeeds and there is a device.
bool cuda_is_available();
// Why not (empty when available): e.g. "libcuda.so.1 cannot be loaded (no NVIDIA driver): ...".
std::string cuda_unavailable_reason();

namespace cuda {

// Devices the driver reports (0 when CUDA is unavailable).
int device_count();
// The driver's CUDA version as major * 1000 + minor * 10 (cuDriverGetVersion); 0 if unavailable.
int driver_version();

// ---- devices (each call below throws kiln::Error naming the op when CUDA is unavailable) ----

struct DeviceInfo {
  std::string name;
  int multiprocessors = 0;
  int arch = 0;  // compute capability as a number: 90 for sm_90
  size_t total_memory = 0;
};
DeviceInfo device_info(int device = 0);
// The driver is kiln's host emulation (KILN_CUDA_DRIVER in the tests): module images are CUDA
// C++ source, which it compiles for the host, instead of CUBINs.
bool emulated();
// kiln's stream on the device (a CUstream): all of kiln's work on the device is ordered on it.
void* stream(int device = 0);
// Waits until the device's stream has run everything enqueued so far.
void synchronize(int device = 0);

// ---- memory: the driver's stream-ordered pool (cuMemAllocAsync), as PyTorch reports it ----

void* allocate(size_t nbytes, int device = 0);
void release(void* p, size_t nbytes, int device = 0) noexcept;
size_t memory_allocated(int device = 0);      // bytes held by live tensors
size_t max_memory_allocated(int device = 0);  // the most since the start (or the last reset)
void reset_peak_memory_stats(int device = 0);
size_t memory_reserved(int device = 0);       // bytes the pool holds, in use or cached
void empty_cache(int device = 0);             // returns the cached bytes to the driver

// Copies on the device's stream; the host waits only at synchronize() (or a copy to pageable
// memory, which the driver completes before returning).
void copy_to_device(void* dst, const void* src, size_t n, int device = 0);
void copy_to_host(void* dst, const void* src, size_t n, int device = 0);
void copy_on_device(void* dst, const void* src, size_t n, int device = 0);
// Bytes copied between the host and the device since the process started: what shows whether
// a program kept its work on the GPU (a status word read back is 8 bytes); and bytes copied
// within the device by copy_on_device (a CUDA graph's inputs copied into its fixed buffers).
struct HostTransfers {
  size_t to_host = 0, to_device = 0, on_device = 0;
};
HostTransfers host_transfers(int device = 0);
void fill_bytes(void* dst, unsigned char value, size_t n, int device = 0);
// Page-locked host memory: copies from it are asynchronous.
void* allocate_pinned(size_t nbytes);
void release_pinned(void* p) noexcept;

// ---- modules, launches, events ----

// A loaded module (a CUBIN; CUDA C++ source for the emulated driver).
class Module {
 public:
  Module(const std::string& image, int device = 0);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  void* function(const std::string& name) const;  // a CUfunction
  int device() const { return device_; }

 private:
  void* module_ = nullptr;
  int device_ = 0;
};
// Enqueues a kernel on the device's stream; `params` as cuLaunchKernel takes them (a pointer to
// each argument's value).
void launch(void* function, unsigned grid, unsigned block, void** params, int device = 0);

class Event {
 public:
  explicit Event(int device = 0);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record();       // on the device's stream
  void synchronize();  // waits for the work before record()
  float elapsed_ms(const Event& later) const;

 private:
  void* event_ = nullptr;
  int device_ = 0;
};

// A CUDA graph: the work `record` enqueues on the device's stream, captured (not run) and
// instantiated, then replayed as one launch. Kernel arguments are captured by value, so a
// replay touches the same memory as the capture: callers keep those buffers alive and fixed.
// `record` must only enqueue (no allocation, copy to the host or synchronize).
class Graph {
 public:
  Graph(const std::function<void()>& record, int device = 0);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void launch();  // on the device's stream

 private:
  void* graph_ = nullptr;
  void* exec_ = nullptr;
  int device_ = 0;
};

// cuBLAS (libcublas.so, loaded on first use): matrix products of GPU tensors (matmul, mm, bmm,
// addmm in float32/float64/float16/bfloat16; integer products run on the host's kernels).
bool blas_is_available();
std::string blas_unavailable_reason();
// Sets up cuBLAS on the device now (its handle and workspace), as the CUDA backend does when it
// compiles a program with a product, so that nothing is set up inside a CUDA graph's capture.
void blas_prepare(int device = 0);

// NVRTC, the run-time CUDA C++ compiler (it needs no GPU).
bool nvrtc_is_available();
std::string nvrtc_unavailable_reason();
// "13.0"
std::string nvrtc_version();

// Compiles CUDA C++ `source` (a translation unit called `name` in messages) to a CUBIN for
// sm_<arch> (e.g. 90), so that the driver loads it without a JIT step. `options` follow kiln's
// own (-arch=sm_<arch> -std=c++17 -default-device). Throws kiln::Error with NVRTC's log, each
// line it blames followed by that source line, when the compile fails.
std::string compile_cubin(const std::string& source, const std::string& name, int arch,
                          const std::vector<std::string>& options = {});
// The same source as PTX for compute_<arch> (what dump-ir --emit=ptx shows).
std::string compile_ptx(const std::string& source, const std::string& name, int arch,
                        const std::vector<std::string>& options = {});

}  // namespace cuda
}  // namespace kiln
