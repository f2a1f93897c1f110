// A CUDA driver for machines without a GPU: the entry points kiln calls (runtime/src/cuda/
// driver.h), implemented on the host, so that the CUDA runtime and backend run end to end in
// CI. Tests load it instead of libcuda.so.1 with KILN_CUDA_DRIVER=<this library>.
//
// One device, "kiln emulated CUDA device", 1 multiprocessor, sm_90. Device memory is host
// memory (a device pointer is a host address), filled with 0xff bytes when allocated (NaN in
// every float type, -1 in every integer type), so a kernel that leaves an output element
// unwritten shows. Work runs when enqueued: streams and events order nothing. A module image is
// CUDA C++ source (kiln checks for the exported kilnEmulatedDriver and hands over the source
// instead of a CUBIN): it is compiled with the host compiler against cuda_emu.h, and a launch
// calls the kernel's NAME_emu entry point, which runs the grid on this library's host threads
// (emu_runtime.h, handed to the module when it loads). While kiln's stream is captured, work is
// recorded for the graph instead of run (copies to or from the host and synchronisation are
// refused), and allocations become graph memory that must be freed within the capture.
//
// Under AddressSanitizer (and UBSan) the kernels are compiled with them and device allocations
// are bounded exactly (see flags() below): the sanitizer build of the tests is memcheck for
// every kernel.
//
// It also exports the cuBLAS entry points kiln calls (kiln loads them from here when the driver
// is this one): a plain triple loop over host memory, column-major as cuBLAS is, accumulating
// in float (double for float64) and never reading C when beta is 0.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "emu_runtime.h"

// The emulator runs a grid's blocks one after another, each block's threads as host threads:
// kiln's default grid of one block per step of work (KILN_CUDA_GRID_PER_SM=0) would start a
// block of 256 host threads per 1024 elements. Unless the variable is set, it launches at most
// 8 blocks per multiprocessor here (1 multiprocessor); the kernels are grid-stride loops, so
// this changes only how the work is spread, and tests that set 0 run uncapped.
__attribute__((constructor)) static void cap_emulated_grid() { setenv("KILN_CUDA_GRID_PER_SM", "8", 0); }

namespace {

enum : int {
  kSuccess = 0,
  kInvalidValue = 1,
  kOutOfMemory = 2,
  kInvalidImage = 200,
  kNotFound = 500,
  kCaptureUnsupported = 900,
};

struct State {
  std::mutex mu;
  std::map<void*, size_t> device_blocks;  // live allocations
  size_t cached = 0;                      // freed bytes the "pool" still counts as reserved
  size_t live = 0;
  uint64_t release_threshold = 0;
  // Stream capture (kiln's one stream): while set, work is recorded here instead of run.
  std::vector<std::function<void()>>* capture = nullptr;
  // Allocations made during the capture (graph memory nodes): address -> size, freed in the capture.
  struct CapturedBlock {
    size_t n = 0;
    bool freed = false;
  };
  std::map<void*, CapturedBlock> captured_blocks;
  std::map<void*, int> param_counts;  // per kernel entry: its parameters (8 bytes each)
};
State& st() {
  static State* s = new State();
  return *s;
}

struct Event {
  std::chrono::steady_clock::time_point at;
};

using Entry = void (*)(void**, unsigned, unsigned);

// Memcheck without a GPU: in a process running under AddressSanitizer (the sanitizer build of
// the tests) the kernels are compiled with it too, and the bytes of each device allocation past
// the size asked for are poisoned, so a kernel that reads or writes outside its buffers fails
// with ASan's report, where compute-sanitizer's memcheck would report it on a GPU.
using PoisonFn = void (*)(const volatile void*, size_t);
PoisonFn asan_call(const char* name) { return reinterpret_cast<PoisonFn>(dlsym(RTLD_DEFAULT, name)); }
PoisonFn asan_poison() {
  static const PoisonFn f = asan_call("__asan_poison_memory_region");
  return f;
}
PoisonFn asan_unpoison() {
  static const PoisonFn f = asan_call("__asan_unpoison_memory_region");
  return f;
}

const std::string& flags() {
  static const std::string f =
      std::string(" -std=c++20 -O1 -w -fPIC -pthread") +
      (asan_poison() ? " -fsanitize=address -fno-omit-frame-pointer" : "") +
      // (and UBSan where the process has it: an index that overflows its 32-bit type is caught)
      (dlsym(RTLD_DEFAULT, "__ubsan_handle_add_overflow") ? " -fsanitize=undefined -fno-sanitize=float-cast-overflow -fno-sanitize-recover=undefined" : "");
  return f;
}

// Device memory: n usable bytes of a block rounded up to 256 (the tail poisoned under ASan).
size_t rounded(size_t n) { return (n + 255) / 256 * 256; }
void* device_block(size_t n) {
  void* m = std::aligned_alloc(256, rounded(n));
  if (m && asan_poison() && rounded(n) > n) asan_poison()(static_cast<char*>(m) + n, rounded(n) - n);
  return m;
}
void free_device_block(void* m, size_t n) {
  if (asan_unpoison()) asan_unpoison()(m, rounded(n));
  std::free(m);
}

// What a compiled module depends on besides its source: the headers' text and the flags.
const std::string& header_tag() {
  static const std::string tag = [] {
    std::string text;
    for (const char* h : {KILN_EMULATION_DIR "/cuda_emu.h", KILN_EMULATION_DIR "/emu_runtime.h"}) {
      std::ifstream in(h);
      text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return std::to_string(std::hash<std::string>{}(text + flags() + KILN_EMULATION_CXX));
  }();
  return tag;
}

// ---- the threads of a launch (emu_runtime.h), handed to each module as it loads

// One block: its barrier, one per warp, and a shuffle slot per thread.
struct Block {
  std::unique_ptr<std::barrier<>> all;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<unsigned long long> lanes;
};

void launch_grid(unsigned grid, unsigned block, kiln_emu::Runtime::Thread thread, void* ctx) {
  for (unsigned b = 0; b < grid; ++b) {
    Block blk;
    blk.all = std::make_unique<std::barrier<>>(block);
    for (unsigned w = 0; w < (block + 31) / 32; ++w)
      blk.warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, block - 32 * w)));
    blk.lanes.assign(block, 0);
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t)
      threads.emplace_back([&, t] {
        thread(ctx, grid, block, b, t, &blk);
        // a finished thread no longer holds up the others' barriers
        blk.all->arrive_and_drop();
        blk.warps[t / 32]->arrive_and_drop();
      });
    for (auto& th : threads) th.join();
  }
}

void sync_block(void* blk) { static_cast<Block*>(blk)->all->arrive_and_wait(); }

unsigned long long shuffle_xor(void* blk, unsigned t, unsigned long long bits, unsigned lane_mask) {
  Block& b = *static_cast<Block*>(blk);
  const unsigned warp = t / 32;
  b.lanes[t] = bits;
  b.warps[warp]->arrive_and_wait();
  unsigned long long other = b.lanes[(t & ~31u) | ((t & 31u) ^ lane_mask)];
  b.warps[warp]->arrive_and_wait();  // every lane has read before any writes again
  return other;
}

const kiln_emu::Runtime kRuntime{launch_grid, sync_block, shuffle_xor};

// Runs a shell command, appending its output to *log; true when it succeeded.
bool shell(const std::string& cmd, std::string* log) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  while (p && std::fgets(buf, sizeof buf, p)) *log += buf;
  return p && pclose(p) == 0;
}

// cuda_emu.h precompiled once per cache directory (parsing it is most of a module's compile
// time): the path to pass to -include, or "" to include the header itself.
std::string precompiled_header(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::string h = (dir / ("emu-" + header_tag() + ".h")).string();
  if (fs::exists(h + ".gch")) return h;
  std::string tag = "." + std::to_string(getpid()), log;
  std::ofstream(h) << "#define KILN_CUDA_EMULATION 1\n#include \"" KILN_EMULATION_DIR "/cuda_emu.h\"\n";
  if (!shell(std::string(KILN_EMULATION_CXX) + flags() + " -x c++-header -o " + h + ".gch" + tag + " " + h, &log)) return "";
  fs::rename(h + ".gch" + tag, h + ".gch");
  return h;
}

std::string compile_module(const std::string& source, std::string* log) {
  namespace fs = std::filesystem;
  // KILN_EMULATION_CACHE (the test builds share one: a module compiles the same in each), else
  // under KILN_CACHE_DIR, else the temp directory.
  const char* shared = std::getenv("KILN_EMULATION_CACHE");
  const char* cache = std::getenv("KILN_CACHE_DIR");
  fs::path dir = shared && *shared ? fs::path(shared)
                 : fs::path(cache && *cache ? cache : fs::temp_directory_path().string()) / "cuda-emulation";
  fs::create_directories(dir);
  std::string stem = (dir / ("module-" + std::to_string(std::hash<std::string>{}(header_tag() + source)))).string();
  std::string so = stem + ".so";
  if (fs::exists(so)) return so;
  std::string pch = precompiled_header(dir);
  std::string text = pch.empty() ? "#define KILN_CUDA_EMULATION 1\n#include \"" KILN_EMULATION_DIR "/cuda_emu.h\"\n" + source : source;
  std::string tag = "." + std::to_string(getpid()), cpp = stem + tag + ".cpp", tmp = stem + tag + ".so";
  std::ofstream(cpp) << text;
  bool ok = shell(std::string(KILN_EMULATION_CXX) + flags() + " -shared" + (pch.empty() ? "" : " -include " + pch) + " -o " +
                  tmp + " " + cpp, log);
  fs::remove(cpp);
  if (!ok) return "";
  fs::rename(tmp, so);
  return so;
}

}  // namespace

extern "C" {

int kilnEmulatedDriver = 1;

int cuInit(unsigned) { return kSuccess; }
int cuDeviceGetCount(int* n) {
  *n = 1;
  return kSuccess;
}
int cuDriverGetVersion(int* v) {
  *v = 13000;
  return kSuccess;
}
int cuGetErrorName(int r, const char** s) {
  *s = r == kCaptureUnsupported ? "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
       : r == kInvalidValue    ? "CUDA_ERROR_INVALID_VALUE"
       : r == kOutOfMemory   ? "CUDA_ERROR_OUT_OF_MEMORY"
       : r == kInvalidImage  ? "CUDA_ERROR_INVALID_IMAGE"
       : r == kNotFound      ? "CUDA_ERROR_NOT_FOUND"
                             : "CUDA_ERROR_UNKNOWN";
  return kSuccess;
}
int cuGetErrorString(int r, const char** s) {
  *s = r == kCaptureUnsupported ? "operation not permitted when stream is capturing"
       : r == kInvalidValue    ? "invalid argument"
       : r == kOutOfMemory   ? "out of memory"
       : r == kInvalidImage  ? "device kernel image is invalid"
       : r == kNotFound      ? "named symbol not found"
                             : "unknown error";
  return kSuccess;
}
int cuDeviceGet(int* d, int i) {
  if (i != 0) return kInvalidValue;
  *d = 0;
  return kSuccess;
}
int cuDeviceGetAttribute(int* v, int attr, int) {
  switch (attr) {
    case 16: *v = 1; return kSuccess;    // multiprocessors (few: every block is host threads)
    case 75: *v = 9; return kSuccess;    // compute capability 9.0
    case 76: *v = 0; return kSuccess;
    case 115: *v = 1; return kSuccess;   // memory pools
    default: return kInvalidValue;
  }
}
int cuDeviceGetName(char* name, int len, int) {
  std::snprintf(name, size_t(len), "%s", "kiln emulated CUDA device");
  return kSuccess;
}
int cuDeviceTotalMem_v2(size_t* bytes, int) {
  *bytes = size_t(4) << 30;
  return kSuccess;
}
int cuDevicePrimaryCtxRetain(void** ctx, int) {
  static int context;
  *ctx = &context;
  return kSuccess;
}
int cuCtxSetCurrent(void*) { return kSuccess; }
int cuCtxSynchronize() { return st().capture ? kCaptureUnsupported : kSuccess; }
int cuStreamCreate(void** s, unsigned) {
  static int stream;
  *s = &stream;
  return kSuccess;
}
int cuStreamSynchronize(void*) { return st().capture ? kCaptureUnsupported : kSuccess; }
int cuEventCreate(void** e, unsigned) {
  *e = new Event();
  return kSuccess;
}
int cuEventRecord(void* e, void*) {
  static_cast<Event*>(e)->at = std::chrono::steady_clock::now();
  return kSuccess;
}
int cuEventSynchronize(void*) { return st().capture ? kCaptureUnsupported : kSuccess; }
int cuEventElapsedTime(float* ms, void* a, void* b) {
  *ms = std::chrono::duration<float, std::milli>(static_cast<Event*>(b)->at - static_cast<Event*>(a)->at).count();
  return kSuccess;
}
int cuEventDestroy_v2(void* e) {
  delete static_cast<Event*>(e);
  return kSuccess;
}
int cuDeviceGetDefaultMemPool(void** pool, int) {
  static int p;
  *pool = &p;
  return kSuccess;
}
int cuMemPoolSetAttribute(void*, int attr, void* v) {
  if (attr != 4) return kInvalidValue;
  st().release_threshold = *static_cast<uint64_t*>(v);
  return kSuccess;
}
int cuMemPoolGetAttribute(void*, int attr, void* v) {
  std::lock_guard<std::mutex> lock(st().mu);
  if (attr == 5) *static_cast<uint64_t*>(v) = st().live + st().cached;  // reserved
  else if (attr == 7) *static_cast<uint64_t*>(v) = st().live;           // used
  else return kInvalidValue;
  return kSuccess;
}
int cuMemPoolTrimTo(void*, size_t keep) {
  std::lock_guard<std::mutex> lock(st().mu);
  if (st().cached > keep) st().cached = keep;
  return kSuccess;
}
int cuMemAllocAsync(unsigned long long* p, size_t n, void*) {
  // (no GPU has a TiB: past that a request fails as on a device, without asking the host's
  // allocator, which a sanitizer build would stop on)
  if (n > (size_t(1) << 40)) return kOutOfMemory;
  void* m = device_block(n);
  if (!m) return kOutOfMemory;
  std::memset(m, 0xff, n);
  if (st().capture) {
    // A graph memory node: the address stays the graph's for its life (the memory is released
    // with the graph); each launch finds it poisoned again, as undefined as CUDA leaves it.
    st().captured_blocks[m] = {n, false};
    st().capture->push_back([m, n] { std::memset(m, 0xff, n); });
    *p = reinterpret_cast<uintptr_t>(m);
    return kSuccess;
  }
  std::lock_guard<std::mutex> lock(st().mu);
  st().device_blocks[m] = n;
  st().live += n;
  st().cached -= std::min(st().cached, n);  // (the pool reuses what it holds)
  *p = reinterpret_cast<uintptr_t>(m);
  return kSuccess;
}
int cuMemFreeAsync(unsigned long long p, void*) {
  void* m = reinterpret_cast<void*>(uintptr_t(p));
  if (st().capture) {
    // Only memory the capture allocated may be freed in it.
    auto it = st().captured_blocks.find(m);
    if (it == st().captured_blocks.end() || it->second.freed) return kCaptureUnsupported;
    it->second.freed = true;
    return kSuccess;
  }
  std::lock_guard<std::mutex> lock(st().mu);
  auto it = st().device_blocks.find(m);
  if (it == st().device_blocks.end()) return kInvalidValue;
  st().live -= it->second;
  st().cached += it->second;
  const size_t n = it->second;
  st().device_blocks.erase(it);
  free_device_block(m, n);
  return kSuccess;
}
int cuMemcpyHtoDAsync_v2(unsigned long long d, const void* s, size_t n, void*) {
  if (st().capture) return kCaptureUnsupported;
  std::memcpy(reinterpret_cast<void*>(uintptr_t(d)), s, n);
  return kSuccess;
}
int cuMemcpyDtoHAsync_v2(void* d, unsigned long long s, size_t n, void*) {
  if (st().capture) return kCaptureUnsupported;
  std::memcpy(d, reinterpret_cast<const void*>(uintptr_t(s)), n);
  return kSuccess;
}
int cuMemcpyDtoDAsync_v2(unsigned long long d, unsigned long long s, size_t n, void*) {
  auto run = [d, s, n] { std::memmove(reinterpret_cast<void*>(uintptr_t(d)), reinterpret_cast<const void*>(uintptr_t(s)), n); };
  if (st().capture) st().capture->push_back(run);
  else run();
  return kSuccess;
}
int cuMemsetD8Async(unsigned long long d, unsigned char v, size_t n, void*) {
  auto run = [d, v, n] { std::memset(reinterpret_cast<void*>(uintptr_t(d)), v, n); };
  if (st().capture) st().capture->push_back(run);
  else run();
  return kSuccess;
}
int cuMemHostAlloc(void** p, size_t n, unsigned) {
  *p = std::aligned_alloc(4096, (n + 4095) / 4096 * 4096);
  return *p ? kSuccess : kOutOfMemory;
}
int cuMemFreeHost(void* p) {
  std::free(p);
  return kSuccess;
}
int cuModuleLoadData(void** module, const void* image) {
  std::string log;
  std::string so = compile_module(static_cast<const char*>(image), &log);
  if (so.empty()) {
    std::fprintf(stderr, "kiln emulated driver: host compile failed:\n%s\n", log.c_str());
    return kInvalidImage;
  }
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return kInvalidImage;
  auto bind = reinterpret_cast<void (*)(const kiln_emu::Runtime*)>(dlsym(h, "kiln_emu_bind"));
  if (!bind) {
    dlclose(h);
    return kInvalidImage;
  }
  bind(&kRuntime);
  *module = h;
  return kSuccess;
}
int cuModuleGetFunction(void** f, void* module, const char* name) {
  *f = dlsym(module, (std::string(name) + "_emu").c_str());
  if (!*f) return kNotFound;
  auto* count = static_cast<const int*>(dlsym(module, (std::string(name) + "_emu_params").c_str()));
  std::lock_guard<std::mutex> lock(st().mu);
  st().param_counts[*f] = count ? *count : -1;
  return kSuccess;
}
int cuModuleUnload(void* module) { return dlclose(module) == 0 ? kSuccess : kInvalidValue; }
int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned,
                   void*, void** params, void**) {
  if (gy != 1 || gz != 1 || by != 1 || bz != 1 || bx == 0 || bx % 32 != 0 || gx == 0) return kInvalidValue;
  if (!st().capture) {
    reinterpret_cast<Entry>(f)(params, gx, bx);
    return kSuccess;
  }
  // Captured: the arguments' values now (every kiln parameter is 8 bytes), the launch later.
  int n = -1;
  {
    std::lock_guard<std::mutex> lock(st().mu);
    n = st().param_counts.count(f) ? st().param_counts[f] : -1;
  }
  if (n < 0) return kInvalidValue;
  std::vector<uint64_t> values(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) std::memcpy(&values[size_t(j)], params[j], 8);
  st().capture->push_back([f, gx, bx, values]() mutable {
    std::vector<void*> p;
    for (uint64_t& v : values) p.push_back(&v);
    reinterpret_cast<Entry>(f)(p.data(), gx, bx);
  });
  return kSuccess;
}

struct GraphMemory {
  std::vector<std::pair<void*, size_t>> blocks;
  ~GraphMemory() {
    for (auto [b, n] : blocks) free_device_block(b, n);
  }
};
struct Graph {
  std::vector<std::function<void()>> work;
  std::shared_ptr<GraphMemory> memory;  // its memory nodes' blocks (shared with its instances)
};
int cuStreamBeginCapture_v2(void*, int) {
  if (st().capture) return kInvalidValue;
  st().capture = new std::vector<std::function<void()>>();
  return kSuccess;
}
int cuStreamEndCapture(void*, void** graph) {
  if (!st().capture) return kInvalidValue;
  auto memory = std::make_shared<GraphMemory>();
  bool leaked = false;
  for (auto& [block, b] : st().captured_blocks) {
    memory->blocks.push_back({block, b.n});
    leaked |= !b.freed;
  }
  st().captured_blocks.clear();
  *graph = new Graph{std::move(*st().capture), memory};
  delete st().capture;
  st().capture = nullptr;
  // Stricter than CUDA (which would refuse the graph's next launch): memory allocated inside a
  // capture and still held after it is a bug in kiln, so the capture fails.
  if (leaked) {
    std::fprintf(stderr, "kiln emulated driver: memory allocated during a stream capture is still live at its end\n");
    delete static_cast<Graph*>(*graph);
    *graph = nullptr;
    return kInvalidValue;
  }
  return kSuccess;
}
int cuGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long) {
  *exec = new Graph(*static_cast<Graph*>(graph));
  return kSuccess;
}
int cuGraphLaunch(void* exec, void*) {
  if (st().capture) return kCaptureUnsupported;
  for (auto& w : static_cast<Graph*>(exec)->work) w();
  return kSuccess;
}
int cuGraphExecDestroy(void* exec) {
  delete static_cast<Graph*>(exec);
  return kSuccess;
}
int cuGraphDestroy(void* graph) {
  delete static_cast<Graph*>(graph);
  return kSuccess;
}

// ---- cuBLAS ----

namespace {

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits = 0;
  if (exp == 0x1f) bits = sign | 0x7f800000 | (man << 13);
  else if (exp != 0) bits = sign | ((exp + 112) << 23) | (man << 13);
  else if (man == 0) bits = sign;
  else {  // subnormal: normalise
    int e = -1;
    do {
      man <<= 1;
      ++e;
    } while (!(man & 0x400));
    bits = sign | (uint32_t(112 - e) << 23) | ((man & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t float_to_half(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xff, man = x & 0x7fffff;
  if (exp == 0xff) return uint16_t(sign | 0x7c00 | (man ? 0x200 : 0));
  int e = int(exp) - 112;
  if (e >= 0x1f) return uint16_t(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return uint16_t(sign);
    man |= 0x800000;
    int shift = 14 - e;
    uint32_t r = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = (uint32_t(e) << 10) | (man >> 13), rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return uint16_t(sign | r);
}
float bf16_to_float(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x40);
  return uint16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

double load(const void* p, int type, int64_t i) {
  switch (type) {
    case 0: return static_cast<const float*>(p)[i];
    case 1: return static_cast<const double*>(p)[i];
    case 2: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    default: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
  }
}
void store(void* p, int type, int64_t i, double v) {
  switch (type) {
    case 0: static_cast<float*>(p)[i] = float(v); break;
    case 1: static_cast<double*>(p)[i] = v; break;
    case 2: static_cast<uint16_t*>(p)[i] = float_to_half(float(v)); break;
    default: static_cast<uint16_t*>(p)[i] = float_to_bf16(float(v)); break;
  }
}

}  // namespace

int cublasCreate_v2(void** handle) {
  static int h;
  *handle = &h;
  return 0;
}
int cublasSetStream_v2(void*, void*) { return 0; }
const char* cublasGetStatusName(int s) { return s == 7 ? "CUBLAS_STATUS_INVALID_VALUE" : "CUBLAS_STATUS_NOT_SUPPORTED"; }
const char* cublasGetStatusString(int s) { return s == 7 ? "an invalid value was used as an argument" : "the functionality requested is not supported"; }
int cublasGemmStridedBatchedEx(void*, int ta, int tb, int m, int n, int k, const void* alpha, const void* A, int atype, int lda,
                               long long sa, const void* B, int btype, int ldb, long long sb, const void* beta, void* C,
                               int ctype, int ldc, long long sc, int batch, int compute, int) {
  const bool f64 = compute == 70;
  if (atype != btype || atype != ctype || (f64 != (atype == 1)) || (compute != 68 && compute != 70)) return 15;
  if (atype != 0 && atype != 1 && atype != 2 && atype != 14) return 15;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || lda < (ta ? k : m) || ldb < (tb ? n : k) || ldc < m) return 7;
  const double al = f64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double be = f64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  auto run = [=] {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < m; ++i) {
          double acc = 0;
          float acc32 = 0;
          for (int64_t p = 0; p < k; ++p) {
            double x = load(A, atype, b * sa + (ta ? p + i * lda : i + p * lda));
            double y = load(B, btype, b * sb + (tb ? j + p * ldb : p + j * ldb));
            if (f64) acc += x * y;
            else acc32 += float(x) * float(y);
          }
          double v = al * (f64 ? acc : double(acc32));
          int64_t at = b * sc + i + j * ldc;
          if (be != 0) v += be * load(C, ctype, at);
          store(C, ctype, at, v);
        }
  };
  if (st().capture) st().capture->push_back(run);
  else run();
  return 0;
}

}  // extern "C"
