// CUDA devices through the driver API (kiln/runtime/cuda.h): each device's primary context and
// kiln's stream on it, device memory from the driver's stream-ordered pool, copies, pinned host
// memory, modules, launches and events.
//
// One stream per device carries all of kiln's work on it (kernels, copies, allocations and
// frees), so the work is ordered without events and the host waits only where it needs a
// value: a copy to pageable host memory, item(), synchronize().
#include <array>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "driver.h"
#include "kiln/runtime/cuda.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/profile.h"

namespace kiln::cuda {

using namespace detail;

namespace {

constexpr int kMaxDevices = 16;

struct DeviceState {
  std::once_flag once;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  CUmemoryPool pool = nullptr;
  DeviceInfo info;
  std::atomic<size_t> allocated{0}, peak{0};
  std::atomic<size_t> to_host{0}, to_device{0}, on_device{0};  // bytes copied each way, and within
  std::mutex held_mu;
  std::vector<std::shared_ptr<const void>> held;  // hold_until_synchronized's
};

std::array<DeviceState, kMaxDevices>& states() {
  static auto* s = new std::array<DeviceState, kMaxDevices>();  // never destroyed (frees at exit)
  return *s;
}

// The device's state, set up on first use, with its context current on this thread.
DeviceState& state(int device, const char* op) {
  const Driver& d = require(op);
  KILN_CHECK(device >= 0 && device < d.devices && device < kMaxDevices, op, "no CUDA device ", device, " (", d.devices,
             " present)");
  DeviceState& s = states()[size_t(device)];
  std::call_once(s.once, [&] {
    d.check("cuDeviceGet", d.cuDeviceGet(&s.dev, device));
    d.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&s.ctx, s.dev));
    d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(s.ctx));
    d.check("cuStreamCreate", d.cuStreamCreate(&s.stream, kStreamNonBlocking));
    int pools = 0, major = 0, minor = 0;
    d.check("cuDeviceGetAttribute", d.cuDeviceGetAttribute(&pools, kAttrMemoryPools, s.dev));
    KILN_CHECK(pools, op, "CUDA device ", device, " has no stream-ordered memory pools (cuMemAllocAsync)");
    d.check("cuDeviceGetDefaultMemPool", d.cuDeviceGetDefaultMemPool(&s.pool, s.dev));
    // Freed memory stays in the pool for reuse instead of going back to the driver at every
    // synchronization (what makes cuMemAllocAsync a caching allocator); empty_cache() trims it.
    uint64_t keep = ~uint64_t(0);
    d.check("cuMemPoolSetAttribute", d.cuMemPoolSetAttribute(s.pool, kPoolReleaseThreshold, &keep));
    d.check("cuDeviceGetAttribute", d.cuDeviceGetAttribute(&s.info.multiprocessors, kAttrMultiprocessors, s.dev));
    d.check("cuDeviceGetAttribute", d.cuDeviceGetAttribute(&major, kAttrComputeMajor, s.dev));
    d.check("cuDeviceGetAttribute", d.cuDeviceGetAttribute(&minor, kAttrComputeMinor, s.dev));
    s.info.arch = major * 10 + minor;
    char name[256] = {};
    d.check("cuDeviceGetName", d.cuDeviceGetName(name, sizeof name, s.dev));
    s.info.name = name;
    d.check("cuDeviceTotalMem", d.cuDeviceTotalMem_v2(&s.info.total_memory, s.dev));
  });
  d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(s.ctx));
  return s;
}

}  // namespace

bool emulated() { return driver().why.empty() && driver().emulated; }

DeviceInfo device_info(int device) { return state(device, "cuda").info; }

void* stream(int device) { return state(device, "cuda").stream; }

void synchronize(int device) {
  DeviceState& s = state(device, "synchronize");
  driver().check("cuStreamSynchronize", driver().cuStreamSynchronize(s.stream));
  std::vector<std::shared_ptr<const void>> done;
  {
    std::lock_guard<std::mutex> lock(s.held_mu);
    done.swap(s.held);
  }
  // (released here, outside the lock: freeing pinned memory is a driver call)
}

void detail::hold_until_synchronized(std::shared_ptr<const void> owner, int device) {
  DeviceState& s = state(device, "to");
  std::lock_guard<std::mutex> lock(s.held_mu);
  s.held.push_back(std::move(owner));
}

// ---- memory ----

void* allocate(size_t nbytes, int device) {
  if (nbytes == 0) return nullptr;
  DeviceState& s = state(device, "alloc");
  CUdeviceptr p = 0;
  CUresult r = driver().cuMemAllocAsync(&p, nbytes, s.stream);
  if (r != 0) {
    // Out of memory with freed blocks cached: give them back and try once more.
    synchronize(device);
    driver().cuMemPoolTrimTo(s.pool, 0);
    r = driver().cuMemAllocAsync(&p, nbytes, s.stream);
  }
  KILN_CHECK(r == 0, "alloc", "cannot allocate ", nbytes, " bytes on cuda:", device, ": ", driver().describe("cuMemAllocAsync", r),
             "; ", s.allocated.load(), " bytes allocated by kiln");
  size_t now = s.allocated.fetch_add(nbytes) + nbytes, peak = s.peak.load();
  while (now > peak && !s.peak.compare_exchange_weak(peak, now)) {
  }
  // KILN_CUDA_POISON=1 (the GPU test runs): fresh memory reads as NaN / -1, as on the emulator,
  // so an element no kernel writes cannot pass for a result left behind by an earlier run.
  static const bool poison = [] {
    const char* v = std::getenv("KILN_CUDA_POISON");
    return v && *v && std::string_view(v) != "0";
  }();
  if (poison) driver().check("cuMemsetD8Async", driver().cuMemsetD8Async(p, 0xff, nbytes, s.stream));
  return reinterpret_cast<void*>(uintptr_t(p));
}

void release(void* p, size_t nbytes, int device) noexcept {
  if (!p) return;
  // (called from destructors: never throws; stream-ordered: the memory is reused only by work
  // enqueued after this; a failure at process exit, when the driver is gone, is harmless)
  DeviceState& s = states()[size_t(device)];
  driver().cuMemFreeAsync(CUdeviceptr(uintptr_t(p)), s.stream);
  s.allocated.fetch_sub(nbytes);
}

size_t memory_allocated(int device) { return state(device, "memory_allocated").allocated.load(); }
size_t max_memory_allocated(int device) { return state(device, "max_memory_allocated").peak.load(); }
void reset_peak_memory_stats(int device) {
  DeviceState& s = state(device, "reset_peak_memory_stats");
  s.peak.store(s.allocated.load());
}
size_t memory_reserved(int device) {
  DeviceState& s = state(device, "memory_reserved");
  uint64_t v = 0;
  driver().check("cuMemPoolGetAttribute", driver().cuMemPoolGetAttribute(s.pool, kPoolReservedCurrent, &v));
  return size_t(v);
}
void empty_cache(int device) {
  DeviceState& s = state(device, "empty_cache");
  synchronize(device);
  driver().check("cuMemPoolTrimTo", driver().cuMemPoolTrimTo(s.pool, 0));
}

// ---- copies ----

void copy_to_device(void* dst, const void* src, size_t n, int device) {
  if (n == 0) return;
  DeviceState& s = state(device, "to");
  s.to_device += n;
  driver().check("cuMemcpyHtoDAsync", driver().cuMemcpyHtoDAsync_v2(CUdeviceptr(uintptr_t(dst)), src, n, s.stream));
}
void copy_to_host(void* dst, const void* src, size_t n, int device) {
  if (n == 0) return;
  DeviceState& s = state(device, "to");
  s.to_host += n;
  driver().check("cuMemcpyDtoHAsync", driver().cuMemcpyDtoHAsync_v2(dst, CUdeviceptr(uintptr_t(src)), n, s.stream));
}
HostTransfers host_transfers(int device) {
  DeviceState& s = state(device, "host_transfers");
  return {s.to_host.load(), s.to_device.load(), s.on_device.load()};
}
void copy_on_device(void* dst, const void* src, size_t n, int device) {
  if (n == 0) return;
  DeviceState& s = state(device, "copy_");
  s.on_device += n;
  driver().check("cuMemcpyDtoDAsync",
                 driver().cuMemcpyDtoDAsync_v2(CUdeviceptr(uintptr_t(dst)), CUdeviceptr(uintptr_t(src)), n, s.stream));
}
void fill_bytes(void* dst, unsigned char value, size_t n, int device) {
  if (n == 0) return;
  DeviceState& s = state(device, "fill_");
  driver().check("cuMemsetD8Async", driver().cuMemsetD8Async(CUdeviceptr(uintptr_t(dst)), value, n, s.stream));
}

void* allocate_pinned(size_t nbytes) {
  const Driver& d = require("pin_memory");
  state(0, "pin_memory");  // a context must be current
  void* p = nullptr;
  d.check("cuMemHostAlloc", d.cuMemHostAlloc(&p, nbytes ? nbytes : 1, /*CU_MEMHOSTALLOC_PORTABLE*/ 1));
  return p;
}
void release_pinned(void* p) noexcept {
  if (p) driver().cuMemFreeHost(p);
}

// ---- modules and launches ----

Module::Module(const std::string& image, int device) : device_(device) {
  state(device, "cuModuleLoadData");
  driver().check("cuModuleLoadData", driver().cuModuleLoadData(&module_, image.data()));
}
Module::~Module() {
  if (module_) driver().cuModuleUnload(module_);
}
void* Module::function(const std::string& name) const {
  CUfunction f = nullptr;
  CUresult r = driver().cuModuleGetFunction(&f, module_, name.c_str());
  KILN_CHECK(r == 0, "cuda", driver().describe("cuModuleGetFunction", r), ": no kernel ", name, " in the module");
  return f;
}

void launch(void* function, unsigned grid, unsigned block, void** params, int device) {
  DeviceState& s = state(device, "launch");
  driver().check("cuLaunchKernel", driver().cuLaunchKernel(function, grid, 1, 1, block, 1, 1, 0, s.stream, params, nullptr));
}

// ---- graphs ----

Graph::Graph(const std::function<void()>& record, int device) : device_(device) {
  DeviceState& s = state(device, "Graph");
  const Driver& d = driver();
  d.check("cuStreamBeginCapture", d.cuStreamBeginCapture_v2(s.stream, kCaptureThreadLocal));
  try {
    profile::Pause captured;  // (the kernels' work is captured here, not run: nothing to time)
    record();
  } catch (...) {
    // End the capture whatever happened, so that the stream takes work again.
    void* g = nullptr;
    if (d.cuStreamEndCapture(s.stream, &g) == 0 && g) d.cuGraphDestroy(g);
    throw;
  }
  d.check("cuStreamEndCapture", d.cuStreamEndCapture(s.stream, &graph_));
  d.check("cuGraphInstantiateWithFlags", d.cuGraphInstantiateWithFlags(&exec_, graph_, 0));
}
Graph::~Graph() {
  if (exec_) driver().cuGraphExecDestroy(exec_);
  if (graph_) driver().cuGraphDestroy(graph_);
}
void Graph::launch() {
  driver().check("cuGraphLaunch", driver().cuGraphLaunch(exec_, state(device_, "Graph::launch").stream));
}

// ---- events ----

Event::Event(int device) : device_(device) {
  state(device, "Event");
  driver().check("cuEventCreate", driver().cuEventCreate(&event_, 0));
}
Event::~Event() {
  if (event_) driver().cuEventDestroy_v2(event_);
}
void Event::record() { driver().check("cuEventRecord", driver().cuEventRecord(event_, state(device_, "record").stream)); }
void Event::synchronize() { driver().check("cuEventSynchronize", driver().cuEventSynchronize(event_)); }
float Event::elapsed_ms(const Event& later) const {
  float ms = 0;
  driver().check("cuEventElapsedTime", driver().cuEventElapsedTime(&ms, event_, later.event_));
  return ms;
}

}  // namespace kiln::cuda
