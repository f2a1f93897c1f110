// The execution layer's entry (see kiln/codegen/backend.h): the backends behind one interface,
// and the one place a graph is optimized and compiled for its device.
#include "kiln/codegen/backend.h"

#include "kiln/codegen/cpu.h"
#include "kiln/codegen/cuda.h"
#include "kiln/passes/pass.h"

namespace kiln::codegen {

namespace {

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  std::shared_ptr<CompiledProgram> compile(std::shared_ptr<const passes::KernelProgram> program,
                                           std::vector<ir::Type> input_types, Device,
                                           const BackendOptions& opts) const override {
    return compile_cpu(std::move(program), std::move(input_types), {.generic = opts.generic});
  }
};

class CudaBackend final : public Backend {
 public:
  std::string_view name() const override { return "cuda"; }
  std::shared_ptr<CompiledProgram> compile(std::shared_ptr<const passes::KernelProgram> program,
                                           std::vector<ir::Type> input_types, Device device,
                                           const BackendOptions& opts) const override {
    return compile_cuda(std::move(program), std::move(input_types), device,
                        {.graphs = opts.graphs, .generic = opts.generic});
  }
};

}  // namespace

const Backend& backend_for(Device device) {
  static const CpuBackend cpu;
  static const CudaBackend cuda;
  if (device.is_cuda()) return cuda;
  return cpu;
}

Device graph_device(const ir::Graph& g) {
  for (const ir::Value* v : g.inputs())
    if (!v->type.is_scalar() && v->type.device.is_cuda()) return v->type.device;
  for (const auto& n : g.nodes())
    for (const ir::Value* v : n->outputs)
      if (!v->type.is_scalar() && v->type.device.is_cuda()) return v->type.device;
  return Device::cpu();
}

std::shared_ptr<CompiledProgram> compile_program(std::shared_ptr<const passes::KernelProgram> program,
                                                 std::vector<ir::Type> input_types, Device device,
                                                 const BackendOptions& opts) {
  return backend_for(device).compile(std::move(program), std::move(input_types), device, opts);
}

std::shared_ptr<CompiledProgram> compile_graph(const ir::Graph& g, const BackendOptions& opts) {
  passes::Module m = passes::optimize(g);
  std::vector<ir::Type> types;
  for (const ir::Value* v : g.inputs()) types.push_back(v->type);
  return compile_program(std::move(m.program), std::move(types), graph_device(g), opts);
}

}  // namespace kiln::codegen
