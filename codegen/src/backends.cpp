// kiln's two backends behind the execution layer's interface (kiln/exec/backend.h), registered
// when kiln_codegen loads, with the handler of eager ops on GPU tensors.
#include "kiln/codegen/cpu.h"
#include "kiln/codegen/cuda.h"
#include "kiln/exec/backend.h"
#include "kiln/runtime/device_ops.h"
#include "cuda/eager.h"

namespace kiln::codegen {

namespace {

class CpuBackend final : public exec::Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  std::shared_ptr<exec::CompiledProgram> compile(std::shared_ptr<const passes::KernelProgram> program,
                                                 std::vector<ir::Type> input_types, Device,
                                                 const exec::BackendOptions& opts) const override {
    return compile_cpu(std::move(program), std::move(input_types), {.generic = opts.generic});
  }
};

class CudaBackend final : public exec::Backend {
 public:
  std::string_view name() const override { return "cuda"; }
  std::shared_ptr<exec::CompiledProgram> compile(std::shared_ptr<const passes::KernelProgram> program,
                                                 std::vector<ir::Type> input_types, Device device,
                                                 const exec::BackendOptions& opts) const override {
    return compile_cuda(std::move(program), std::move(input_types), device,
                        {.graphs = opts.graphs, .generic = opts.generic});
  }
};

}  // namespace

// Installed when the library loads, and again (idempotent) from every program that includes
// kiln/kiln.h.
void install_backends() {
  static const CpuBackend cpu;
  static const CudaBackend cuda;
  exec::register_backend(DeviceType::CPU, &cpu);
  exec::register_backend(DeviceType::CUDA, &cuda);
  device_ops::install(&run_eager_on_cuda);
}

namespace {
[[maybe_unused]] const bool installed = (install_backends(), true);
}  // namespace

}  // namespace kiln::codegen
