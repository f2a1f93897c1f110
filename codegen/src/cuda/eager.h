// The handler of eager ops on GPU tensors (eager.cpp), installed in the runtime's device_ops
// table when kiln_codegen loads (backends.cpp: install_backends).
#pragma once
#include <span>
#include <vector>

#include "kiln/runtime/trace.h"

namespace kiln::codegen {
Tensor run_eager_on_cuda(OpId op, std::span<const trace::Operand> in, std::vector<Attr> attrs);
}  // namespace kiln::codegen
