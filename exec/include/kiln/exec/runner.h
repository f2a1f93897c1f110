// The kernel program runner: runs a kernel program (kiln/passes/kernel.h) over its buffers,
// kernel by kernel. It owns the program's memory on its device: the arena, the outputs and the
// constants' copies there.
//
// On its own it is the kernel interpreter: loads are strided views into the buffers (the arena
// is one allocation), bodies run on the reference executor, stores write through their index.
// The reference the backends are tested against. The runner refers to `p`, which must outlive it.
//
// A backend runs a program through the same runner, handing it a compiled form (KernelImpl) for
// the kernels it compiled: the runner sets up the buffers and calls those instead of
// interpreting their bodies. The buffers are every buffer of the program by id (inputs,
// constants, outputs and the arena's temporaries as flat views); `inputs` gives host numbers.
//
// On a GPU (`device` cuda:N) the buffers live in device memory: the arena and the outputs are
// allocated there, constants are copied there once, the inputs must be there. The backend's
// kernels take device buffers; a kernel it left to the runner (a library op it has no device
// form of, a cond) runs on the eager CPU ops, its operands copied to the host and its results
// copied back.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/passes/kernel.h"

namespace kiln::exec {

using KernelImpl = std::function<void(std::span<const Tensor> buffers, std::span<const ir::Slot> inputs)>;

class ProgramRunner {
 public:
  explicit ProgramRunner(const passes::KernelProgram& p, std::vector<KernelImpl> impls = {},
                         Device device = Device::cpu());
  ~ProgramRunner();
  ProgramRunner(ProgramRunner&&) noexcept;
  std::vector<Tensor> run(std::span<const ir::Slot> inputs) const;
  std::vector<Tensor> run(std::span<const Tensor> inputs) const;

  // run() in two halves, for a caller that keeps the buffers from run to run (a CUDA graph
  // replays kernels over fixed addresses): every buffer of the program by id for these inputs
  // (fresh arena, outputs and written constants), then the kernels over given buffers, returning
  // the outputs as views of them.
  std::vector<Tensor> buffers(std::span<const ir::Slot> inputs) const;
  std::vector<Tensor> run_on(std::span<const Tensor> buffers, std::span<const ir::Slot> inputs) const;
  bool written(int buffer) const;  // some kernel stores into it

  // The program's name in the kernel profile (kiln/runtime/profile.h), where each kernel the
  // runner runs is "<label>: k<i> <kernel_summary>". Set it before the first run.
  void set_label(const std::string& label);
  const std::string& label() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::exec
