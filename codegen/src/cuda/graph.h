// CUDA graphs for compiled programs (graph.cpp), internal to the CUDA backend.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kiln/exec/program.h"

namespace kiln::codegen {

// Why the program cannot be replayed as a CUDA graph, or "" when it can: every kernel must run
// on the device without the host reading anything back (`library_refusal`: a cuBLAS call's
// reason, "" when they all can), and no input may be a host number.
std::string cuda_graph_refusal(const passes::KernelProgram& p, const std::vector<ir::Type>& input_types,
                               const exec::CompileStats& stats, bool any_checks, const std::string& library_refusal);
// The replay exec::CompiledProgram::set_replay takes: captured after the first call, which runs
// without a graph (and so compiles whatever a library call's steps need before the capture).
exec::CompiledProgram::Replay cuda_graph_replay(std::shared_ptr<const passes::KernelProgram> program,
                                          std::vector<ir::Type> input_types, Device device);

}  // namespace kiln::codegen
