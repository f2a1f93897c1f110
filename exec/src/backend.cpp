// The execution layer's entry (see kiln/exec/backend.h): the backends registered by device type,
// and the one place a graph is optimized and compiled for its device.
#include "kiln/exec/backend.h"

#include <array>
#include <atomic>

#include "kiln/passes/pass.h"
#include "kiln/runtime/error.h"

namespace kiln::exec {

namespace {
// One slot per device type; a function-local static, so that a backend registering itself while
// its library loads finds the table made.
std::array<std::atomic<const Backend*>, 2>& backends() {
  static std::array<std::atomic<const Backend*>, 2> table{};
  return table;
}
}  // namespace

void register_backend(DeviceType type, const Backend* backend) { backends().at(size_t(type)).store(backend); }

const Backend& backend_for(Device device) {
  const Backend* b = backends().at(size_t(device.type)).load();
  KILN_CHECK(b != nullptr, "compile", "no backend for ", device.str(), " is loaded (kiln's CPU and CUDA backends "
             "are in the kiln_codegen library: link kiln::kiln)");
  return *b;
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

}  // namespace kiln::exec
