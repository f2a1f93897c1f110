// The handler of eager ops on GPU tensors (eager.cpp), installed in the runtime's device_ops
// table when the CUDA backend loads (launch.cpp, which every user of the backend links).
#pragma once
#include <span>
#include <vector>

#include "kiln/runtime/trace.h"

namespace kiln::codegen {
Tensor run_eager_on_cuda(OpId op, std::span<const trace::Operand> in, std::vector<Attr> attrs);
}  // namespace kiln::codegen
