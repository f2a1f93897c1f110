// CUDA loaded at run time (kiln/runtime/cuda.h): availability with a reason, and NVRTC compiling
// CUDA C++ to a CUBIN for sm_90, which needs the toolkit but no GPU (CI has NVRTC and no GPU).
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/runtime/cuda.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "../common/nvrtc.h"

using namespace kiln;

namespace {

const char* kAddSource = R"(extern "C" __global__ void kiln_add(const float* a, const float* b, float* o, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    o[i] = a[i] + b[i];
}
)";

// A CUBIN is an ELF file for machine EM_CUDA (190).
bool is_cuda_elf(const std::string& bin) {
  if (bin.size() < 64 || bin.compare(0, 4, "\x7f" "ELF") != 0) return false;
  uint16_t machine = 0;
  std::memcpy(&machine, bin.data() + 18, 2);
  return machine == 190;
}

}  // namespace

TEST(Cuda, AvailabilityComesWithAReason) {
  if (cuda_is_available()) {
    EXPECT_TRUE(cuda_unavailable_reason().empty());
    EXPECT_GT(cuda::device_count(), 0);
    EXPECT_GT(cuda::driver_version(), 0);
  } else {
    // e.g. "libcuda.so.1 cannot be loaded (no NVIDIA driver on this machine): ..." or cuInit's error
    EXPECT_FALSE(cuda_unavailable_reason().empty());
    EXPECT_EQ(cuda::device_count(), 0);
  }
  // asking again gives the same answer (the driver is probed once)
  EXPECT_EQ(cuda_is_available(), cuda_is_available());
}

TEST(Cuda, NvrtcCompilesACubinForSm90WithoutAGpu) {
  KILN_NEEDS_NVRTC();
  EXPECT_FALSE(cuda::nvrtc_version().empty());
  std::string cubin = cuda::compile_cubin(kAddSource, "kiln_add.cu", 90);
  EXPECT_TRUE(is_cuda_elf(cubin)) << cubin.size() << " bytes";
  // the kernel's symbol is in the CUBIN under its unmangled name
  EXPECT_NE(cubin.find("kiln_add"), std::string::npos);
}

TEST(Cuda, NvrtcErrorsNameTheCallTheKernelAndTheOffendingLine) {
  KILN_NEEDS_NVRTC();
  std::string broken = kAddSource;
  broken.replace(broken.find("b[i];"), 5, "b[i] * not_declared;");
  try {
    cuda::compile_cubin(broken, "broken.cu", 90);
    FAIL() << "compiled a kernel that uses an undeclared name";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[nvrtc] nvrtcCompileProgram of broken.cu for sm_90"), std::string::npos) << m;
    EXPECT_NE(m.find("NVRTC_ERROR_COMPILATION"), std::string::npos) << m;
    EXPECT_NE(m.find("not_declared"), std::string::npos) << m;
    EXPECT_NE(m.find("3 |     o[i] = a[i] + b[i] * not_declared;"), std::string::npos) << m;  // the source line
  }
}

TEST(Cuda, NvrtcRejectsAnArchitectureItCannotTarget) {
  KILN_NEEDS_NVRTC();
  EXPECT_THROW(cuda::compile_cubin(kAddSource, "kiln_add.cu", 7), Error);
  // a plausible number NVRTC does not know: its own error, with its log
  try {
    cuda::compile_cubin(kAddSource, "kiln_add.cu", 91);
    ADD_FAILURE() << "NVRTC accepted sm_91";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("kiln_add.cu for sm_91: NVRTC_ERROR_INVALID_OPTION"), std::string::npos) << m;
    EXPECT_NE(m.find("--gpu-architecture"), std::string::npos) << m;
  }
}
