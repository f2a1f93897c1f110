// A kernel program compiled by a backend, ready to run: what every backend (kiln/exec/backend.h)
// returns, compile_cpu (kiln/codegen/cpu.h) and compile_cuda (kiln/codegen/cuda.h) among them.
//
// The program runs through the kernel program runner (kiln/exec/runner.h) on its device:
// the backend's compiled form of each kernel it could compile, the runner's eager path for the
// rest (library ops without a compiled form, conds; on a GPU through host copies).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/exec/runner.h"

namespace kiln::exec {

struct CompileStats {
  int kernels = 0;          // in the program
  int compiled = 0;         // running as machine code
  int epilogues = 0;        // of those, epilogues compiled after a library call (matmul, einsum)
  bool generic = false;     // size-generic kernels (CpuCompileOptions::generic)
  int memory_hits = 0;      // of those, found in this process's cache
  int disk_hits = 0;        // of those, loaded from the disk cache
  double compile_ms = 0;    // wall time of the compile call
  std::vector<std::string> interpreted;  // per kernel the runner runs: "k2: opaque kernel", ...
  std::vector<std::string> library;      // per kernel a vendor library runs on the device: "k1: matmul (cuBLAS)"
  // CUDA graphs (CudaCompileOptions::graphs): "" when not asked for, "replayed as a CUDA graph",
  // or "no CUDA graph: <why>" (a kernel that runs on the host, a check the host must read, ...).
  std::string graphs;
};

class CompiledProgram {
 public:
  // `impls`: per kernel the backend's compiled form, or empty for the runner to interpret.
  CompiledProgram(std::shared_ptr<const passes::KernelProgram> p, std::vector<ir::Type> input_types, Device device,
                  CompileStats stats, std::vector<KernelImpl> impls);
  ~CompiledProgram();

  // Runs the program: inputs in graph input order (host numbers as scalar slots). The inputs
  // must have the sizes and strides the program was compiled for and live on its device
  // (accepts()). On a GPU the work is enqueued on the device's stream: the outputs are ready
  // when the host next waits for them (to(cpu), cuda::synchronize()).
  std::vector<Tensor> run(std::span<const ir::Slot> inputs) const;
  std::vector<Tensor> run(std::span<const Tensor> inputs) const;
  // Whether `inputs` have the sizes, strides and device the kernels were specialised on.
  bool accepts(std::span<const ir::Slot> inputs) const;
  // run() when the inputs are accepted, else nullopt (one check, for callers with a fallback).
  std::optional<std::vector<Tensor>> try_run(std::span<const ir::Slot> inputs) const;
  const passes::KernelProgram& program() const { return *program_; }
  const CompileStats& stats() const { return stats_; }
  // The program's name in the kernel profile (kiln/runtime/profile.h); set before the first run.
  void set_label(const std::string& label) { runner_.set_label(label); }
  Device device() const { return device_; }

  // A backend that replays the program its own way (a CUDA graph over fixed buffers) installs
  // it here; run() then goes through it with the runner and the accepted inputs.
  using Replay = std::function<std::vector<Tensor>(const ProgramRunner&, std::span<const ir::Slot>)>;
  void set_replay(Replay r, std::string note);
  bool replays() const { return replay_ != nullptr; }  // (a CUDA graph was accepted)
  const ProgramRunner& runner() const { return runner_; }

 private:
  Replay replay_;
  std::shared_ptr<const passes::KernelProgram> program_;
  std::vector<ir::Type> input_types_;
  Device device_;
  CompileStats stats_;
  ProgramRunner runner_;
};

}  // namespace kiln::exec
