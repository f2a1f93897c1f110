// CUDA at run time: the driver (libcuda.so.1) and NVRTC are loaded with dlopen when first
// asked for, so one kiln binary runs on machines without a GPU, without a driver or without the
// toolkit, and says why CUDA is unavailable there. Every driver and NVRTC call is checked; a
// failure raises kiln::Error naming the call and CUDA's error name and text (for NVRTC, the
// compile log with the offending source lines).
#pragma once
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
