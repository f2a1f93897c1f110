// The execution layer's entry: a graph optimized (kiln/passes/pass.h), handed to the backend of
// its device, compiled into a CompiledProgram (kiln/exec/program.h) that runs it.
//
// A backend implements Backend and registers itself for a device type: the LLVM CPU backend
// (kiln/codegen/cpu.h) and the CUDA backend (kiln/codegen/cuda.h) do when kiln_codegen loads
// (codegen::install_backends). kiln::compile's graphs, their size variants and eager ops on GPU
// tensors all come through compile_graph(); a tool that holds a kernel program already (dump-ir's
// checks, kiln-bench) hands it to compile_program(). A third backend is one more register_backend().
#pragma once
#include <memory>
#include <string_view>
#include <vector>

#include "kiln/exec/program.h"

namespace kiln::exec {

struct BackendOptions {
  // Size-generic kernels: extents and strides as arguments, one kernel for every size of a
  // structure (CpuCompileOptions::generic, CudaCompileOptions::generic).
  bool generic = false;
  // Replay the program as a CUDA graph (CudaCompileOptions::graphs); a CPU program ignores it.
  bool graphs = false;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Compiles `program` for `device`; `input_types` are the graph's (the sizes and strides it is
  // specialised on). Throws kiln::Error where the backend cannot.
  virtual std::shared_ptr<CompiledProgram> compile(std::shared_ptr<const passes::KernelProgram> program,
                                                   std::vector<ir::Type> input_types, Device device,
                                                   const BackendOptions& opts) const = 0;
};

// Makes `backend` (which must live as long as the process) the one that compiles for devices of
// `type`, replacing any before it.
void register_backend(DeviceType type, const Backend* backend);

// The backend that compiles for `device`; a kiln::Error naming the device where none is loaded.
const Backend& backend_for(Device device);

// The device a graph's work runs on: a GPU when any input or constant is there (one op never
// mixes devices; a graph that does is refused by the CUDA backend's runner and runs on the
// reference executor), else the CPU.
Device graph_device(const ir::Graph& g);

// A kernel program compiled by the backend of `device`.
std::shared_ptr<CompiledProgram> compile_program(std::shared_ptr<const passes::KernelProgram> program,
                                                 std::vector<ir::Type> input_types, Device device,
                                                 const BackendOptions& opts = {});

// Optimizes `g` with the default pipeline and compiles its kernel program for its device.
std::shared_ptr<CompiledProgram> compile_graph(const ir::Graph& g, const BackendOptions& opts = {});

}  // namespace kiln::exec
