// The CUDA driver and NVRTC, loaded with dlopen (kiln/runtime/cuda.h). kiln declares the few
// entry points it calls itself, with the C types of the driver and NVRTC ABIs (handles are
// pointers, results are ints), so that building kiln needs neither cuda.h nor nvrtc.h.
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <sstream>

#include "blas.h"
#include "driver.h"
#include "kiln/runtime/cuda.h"
#include "kiln/runtime/error.h"

namespace kiln {

namespace {

// Opens the first library of `names` that loads; `why` collects each failure.
void* open_first(const std::vector<std::string>& names, std::string* why) {
  for (const std::string& n : names) {
    if (void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = dlerror();
    *why += (why->empty() ? "" : "; ") + std::string(e ? e : n + ": cannot be loaded");
  }
  return nullptr;
}

// A toolkit library's candidates: the loader's path first, then the toolkit's usual homes
// (CUDA_HOME / CUDA_PATH, then /usr/local/cuda), newest soname first.
std::vector<std::string> toolkit_library(const std::string& stem) {
  std::vector<std::string> names, dirs = {""};
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(env); v && *v) dirs.push_back(std::string(v) + "/lib64/");
  dirs.push_back("/usr/local/cuda/lib64/");
  for (const std::string& d : dirs)
    for (const char* version : {".13", ".12", ""}) names.push_back(d + stem + version);
  return names;
}

template <typename F>
F symbol(void* lib, const char* name, std::string* why) {
  void* p = dlsym(lib, name);
  if (!p && why->empty()) *why = std::string("missing symbol ") + name;
  return reinterpret_cast<F>(p);
}

}  // namespace

// ---------------------------------------------------------------- driver

namespace cuda::detail {

std::string Driver::describe(const char* call, CUresult r) const {
  const char *name = nullptr, *text = nullptr;
  if (cuGetErrorName) cuGetErrorName(r, &name);
  if (cuGetErrorString) cuGetErrorString(r, &text);
  return std::string(call) + ": " + (name ? name : "CUDA error " + std::to_string(r)) + " (" +
         (text ? text : "no description") + ")";
}

void Driver::check(const char* call, CUresult r) const {
  if (r != 0) [[unlikely]]
    KILN_FAIL("cuda", describe(call, r));
}

const Driver& driver() {
  static const Driver d = [] {
    Driver d;
    // KILN_CUDA_DRIVER names another driver library (kiln's host emulation in the tests).
    const char* env = std::getenv("KILN_CUDA_DRIVER");
    d.library = env && *env ? env : "libcuda.so.1";
    void* lib = open_first({d.library}, &d.why);
    if (!lib) {
      d.why = d.library + " cannot be loaded" + (env && *env ? "" : " (no NVIDIA driver on this machine)") + ": " + d.why;
      return d;
    }
#define KILN_CU_SYM(f) d.f = symbol<decltype(d.f)>(lib, #f, &d.why)
    KILN_CU_SYM(cuInit);
    KILN_CU_SYM(cuDeviceGetCount);
    KILN_CU_SYM(cuDriverGetVersion);
    KILN_CU_SYM(cuGetErrorName);
    KILN_CU_SYM(cuGetErrorString);
    KILN_CU_SYM(cuDeviceGet);
    KILN_CU_SYM(cuDeviceGetAttribute);
    KILN_CU_SYM(cuDeviceGetName);
    KILN_CU_SYM(cuDeviceTotalMem_v2);
    KILN_CU_SYM(cuDevicePrimaryCtxRetain);
    KILN_CU_SYM(cuCtxSetCurrent);
    KILN_CU_SYM(cuCtxSynchronize);
    KILN_CU_SYM(cuStreamCreate);
    KILN_CU_SYM(cuStreamSynchronize);
    KILN_CU_SYM(cuEventCreate);
    KILN_CU_SYM(cuEventRecord);
    KILN_CU_SYM(cuEventSynchronize);
    KILN_CU_SYM(cuEventElapsedTime);
    KILN_CU_SYM(cuEventDestroy_v2);
    KILN_CU_SYM(cuDeviceGetDefaultMemPool);
    KILN_CU_SYM(cuMemPoolSetAttribute);
    KILN_CU_SYM(cuMemPoolGetAttribute);
    KILN_CU_SYM(cuMemPoolTrimTo);
    KILN_CU_SYM(cuMemAllocAsync);
    KILN_CU_SYM(cuMemFreeAsync);
    KILN_CU_SYM(cuMemcpyHtoDAsync_v2);
    KILN_CU_SYM(cuMemcpyDtoHAsync_v2);
    KILN_CU_SYM(cuMemcpyDtoDAsync_v2);
    KILN_CU_SYM(cuMemsetD8Async);
    KILN_CU_SYM(cuMemHostAlloc);
    KILN_CU_SYM(cuMemFreeHost);
    KILN_CU_SYM(cuModuleLoadData);
    KILN_CU_SYM(cuModuleGetFunction);
    KILN_CU_SYM(cuModuleUnload);
    KILN_CU_SYM(cuLaunchKernel);
    KILN_CU_SYM(cuStreamBeginCapture_v2);
    KILN_CU_SYM(cuStreamEndCapture);
    KILN_CU_SYM(cuGraphInstantiateWithFlags);
    KILN_CU_SYM(cuGraphLaunch);
    KILN_CU_SYM(cuGraphExecDestroy);
    KILN_CU_SYM(cuGraphDestroy);
#undef KILN_CU_SYM
    if (!d.why.empty()) {
      d.why = d.library + " is not a usable CUDA driver (11.4 or newer): " + d.why;
      return d;
    }
    d.emulated = dlsym(lib, "kilnEmulatedDriver") != nullptr;
    if (CUresult r = d.cuInit(0); r != 0) {
      d.why = d.describe("cuInit", r);
      return d;
    }
    if (CUresult r = d.cuDriverGetVersion(&d.version); r != 0) d.version = 0;
    if (CUresult r = d.cuDeviceGetCount(&d.devices); r != 0) {
      d.why = d.describe("cuDeviceGetCount", r);
      return d;
    }
    if (d.devices == 0) d.why = "the CUDA driver reports no device";
    return d;
  }();
  return d;
}

const Driver& require(const char* op) {
  const Driver& d = driver();
  KILN_CHECK(d.why.empty(), op, "CUDA is not available: ", d.why);
  return d;
}

// ---------------------------------------------------------------- cuBLAS

const Blas& blas() {
  static const Blas b = [] {
    Blas b;
    const Driver& d = driver();
    if (!d.why.empty()) {
      b.why = "CUDA is not available: " + d.why;
      return b;
    }
    // The emulated driver brings its own (host) cuBLAS; KILN_CUBLAS names another library.
    const char* env = std::getenv("KILN_CUBLAS");
    std::vector<std::string> names = d.emulated ? std::vector<std::string>{d.library}
                                     : env && *env ? std::vector<std::string>{env}
                                                   : toolkit_library("libcublas.so");
    std::string tried;
    void* lib = open_first(names, &tried);
    if (!lib) {
      b.why = "cuBLAS (libcublas.so) cannot be loaded (no CUDA toolkit found): " + tried;
      return b;
    }
#define KILN_BLAS_SYM(f) b.f = symbol<decltype(b.f)>(lib, #f, &b.why)
    KILN_BLAS_SYM(cublasCreate_v2);
    KILN_BLAS_SYM(cublasSetStream_v2);
    KILN_BLAS_SYM(cublasGemmStridedBatchedEx);
#undef KILN_BLAS_SYM
    if (!b.why.empty()) {
      b.why = "libcublas.so is not a usable cuBLAS (11 or newer): " + b.why;
      return b;
    }
    b.cublasSetWorkspace_v2 = reinterpret_cast<decltype(b.cublasSetWorkspace_v2)>(dlsym(lib, "cublasSetWorkspace_v2"));
    b.cublasGetStatusName = reinterpret_cast<decltype(b.cublasGetStatusName)>(dlsym(lib, "cublasGetStatusName"));
    b.cublasGetStatusString = reinterpret_cast<decltype(b.cublasGetStatusString)>(dlsym(lib, "cublasGetStatusString"));
    return b;
  }();
  return b;
}

}  // namespace cuda::detail

namespace {
using cuda::detail::driver;

// ---------------------------------------------------------------- NVRTC

using nvrtcResult = int;
using nvrtcProgram = void*;
struct Nvrtc {
  nvrtcResult (*nvrtcVersion)(int*, int*) = nullptr;
  const char* (*nvrtcGetErrorString)(nvrtcResult) = nullptr;
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                    const char* const*) = nullptr;
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*nvrtcGetPTX)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram*) = nullptr;
  int major = 0, minor = 0;
  std::string why;

  void check(const char* call, nvrtcResult r) const {
    KILN_CHECK(r == 0, "nvrtc", call, ": ", nvrtcGetErrorString ? nvrtcGetErrorString(r) : "error", " (", r, ")");
  }
};

const Nvrtc& nvrtc() {
  static const Nvrtc n = [] {
    Nvrtc n;
    std::string tried;
    void* lib = open_first(toolkit_library("libnvrtc.so"), &tried);
    if (!lib) {
      n.why = "NVRTC (libnvrtc.so) cannot be loaded (no CUDA toolkit found): " + tried;
      return n;
    }
#define KILN_NVRTC_SYM(f) n.f = symbol<decltype(n.f)>(lib, #f, &n.why)
    KILN_NVRTC_SYM(nvrtcVersion);
    KILN_NVRTC_SYM(nvrtcGetErrorString);
    KILN_NVRTC_SYM(nvrtcCreateProgram);
    KILN_NVRTC_SYM(nvrtcCompileProgram);
    KILN_NVRTC_SYM(nvrtcGetProgramLogSize);
    KILN_NVRTC_SYM(nvrtcGetProgramLog);
    KILN_NVRTC_SYM(nvrtcGetCUBINSize);
    KILN_NVRTC_SYM(nvrtcGetCUBIN);
    KILN_NVRTC_SYM(nvrtcGetPTXSize);
    KILN_NVRTC_SYM(nvrtcGetPTX);
    KILN_NVRTC_SYM(nvrtcDestroyProgram);
#undef KILN_NVRTC_SYM
    if (!n.why.empty()) {
      n.why = "libnvrtc.so is not a usable NVRTC (before CUDA 11.1 there is no CUBIN output): " + n.why;
      return n;
    }
    if (n.nvrtcVersion(&n.major, &n.minor) != 0) n.why = "nvrtcVersion failed";
    return n;
  }();
  return n;
}

// NVRTC's log with each line it blames ("name(3): error: ...") followed by that source line.
std::string annotate_log(const std::string& log, const std::string& source, const std::string& name) {
  std::vector<std::string> lines;
  std::istringstream src(source);
  for (std::string l; std::getline(src, l);) lines.push_back(l);
  std::ostringstream out;
  std::istringstream in(log);
  const std::string prefix = name + "(";
  for (std::string l; std::getline(in, l);) {
    out << l << "\n";
    if (l.rfind(prefix, 0) != 0) continue;
    size_t close = l.find(')', prefix.size());
    if (close == std::string::npos) continue;
    int line = std::atoi(l.substr(prefix.size(), close - prefix.size()).c_str());
    if (line >= 1 && size_t(line) <= lines.size()) out << "    " << line << " | " << lines[size_t(line) - 1] << "\n";
  }
  return out.str();
}

}  // namespace

bool cuda_is_available() { return driver().why.empty(); }
std::string cuda_unavailable_reason() { return driver().why; }

namespace cuda {

int device_count() { return cuda_is_available() ? driver().devices : 0; }
int driver_version() { return driver().version; }

bool nvrtc_is_available() { return nvrtc().why.empty(); }
std::string nvrtc_unavailable_reason() { return nvrtc().why; }
bool blas_is_available() { return detail::blas().why.empty(); }
std::string blas_unavailable_reason() { return detail::blas().why; }
std::string nvrtc_version() {
  const Nvrtc& n = nvrtc();
  return n.why.empty() ? std::to_string(n.major) + "." + std::to_string(n.minor) : "";
}

namespace {

// One NVRTC compile for sm_<arch> (a CUBIN) or compute_<arch> (PTX), with the log annotated.
std::string compile(const std::string& source, const std::string& name, int arch, const std::vector<std::string>& options,
                    bool ptx) {
  const Nvrtc& n = nvrtc();
  KILN_CHECK(n.why.empty(), "nvrtc", "cannot compile ", name, ": ", n.why);
  KILN_CHECK(arch >= 50 && arch < 1000, "nvrtc", "compile of ", name, ": architecture sm_", arch, " is not one NVRTC knows");
  nvrtcProgram prog = nullptr;
  n.check("nvrtcCreateProgram", n.nvrtcCreateProgram(&prog, source.c_str(), name.c_str(), 0, nullptr, nullptr));
  // Destroys the program however this function leaves.
  struct Guard {
    const Nvrtc& n;
    nvrtcProgram* p;
    ~Guard() { n.nvrtcDestroyProgram(p); }
  } guard{n, &prog};
  std::vector<std::string> opts = {std::string(ptx ? "-arch=compute_" : "-arch=sm_") + std::to_string(arch), "-std=c++17",
                                   "-default-device"};
  opts.insert(opts.end(), options.begin(), options.end());
  std::vector<const char*> argv;
  for (const std::string& o : opts) argv.push_back(o.c_str());
  nvrtcResult compiled = n.nvrtcCompileProgram(prog, int(argv.size()), argv.data());
  size_t log_size = 0;
  std::string log;
  if (n.nvrtcGetProgramLogSize(prog, &log_size) == 0 && log_size > 1) {
    log.resize(log_size);
    n.nvrtcGetProgramLog(prog, log.data());
    log.resize(log_size - 1);  // NVRTC counts the terminating NUL
  }
  KILN_CHECK(compiled == 0, "nvrtc", "nvrtcCompileProgram of ", name, " for sm_", arch, ": ", n.nvrtcGetErrorString(compiled),
             "\n", annotate_log(log, source, name));
  size_t size = 0;
  std::string out;
  if (ptx) {
    n.check("nvrtcGetPTXSize", n.nvrtcGetPTXSize(prog, &size));
    out.assign(size, '\0');
    n.check("nvrtcGetPTX", n.nvrtcGetPTX(prog, out.data()));
    if (!out.empty() && out.back() == '\0') out.pop_back();
  } else {
    n.check("nvrtcGetCUBINSize", n.nvrtcGetCUBINSize(prog, &size));
    out.assign(size, '\0');
    n.check("nvrtcGetCUBIN", n.nvrtcGetCUBIN(prog, out.data()));
  }
  return out;
}

}  // namespace

std::string compile_cubin(const std::string& source, const std::string& name, int arch,
                          const std::vector<std::string>& options) {
  return compile(source, name, arch, options, false);
}

std::string compile_ptx(const std::string& source, const std::string& name, int arch, const std::vector<std::string>& options) {
  return compile(source, name, arch, options, true);
}

}  // namespace cuda
}  // namespace kiln
