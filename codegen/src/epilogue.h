// An opaque kernel split into its library call and a compiled epilogue.
//
// The passes fuse the elementwise consumers of a matmul-family op into the op's kernel
// (`relu(x @ W + b)` is one opaque kernel). A backend cannot compile the library op, but it can
// compile what follows it: split_epilogue() cuts such a kernel into the library op alone (a
// one-node graph run by the eager op, which calls the BLAS) and an elementwise kernel over the
// op's output space whose first load is the op's result. The epilogue then runs as one compiled
// pass over the result instead of one eager op after another. Backend-neutral: the CPU backend
// runs the op eagerly; a GPU backend would do the same with its own library.
#pragma once
#include <optional>
#include <vector>

#include "kiln/ir/graph.h"
#include "kiln/passes/kernel.h"

namespace kiln::codegen {

struct EpilogueSplit {
  ir::Graph op{"library_op"};  // inputs: the kernel loads it reads (lead_loads); one output
  std::vector<int> op_loads;   // per input of `op`: the index of the kernel load it reads
  // An elementwise kernel over the op's output space. loads[0] is the op's result (contiguous,
  // its buffer id one past the program's buffers: a buffer no other operand shares); loads[j]
  // for j >= 1 is the kernel's load epilogue_loads[j - 1]. Its stores are the kernel's stores.
  passes::Kernel epilogue;
  std::vector<int> epilogue_loads;
};

// The split of an opaque kernel whose body is one library op followed by elementwise work on
// its result over the result's full space; nullopt when the kernel is anything else (no
// epilogue, an operand read both by the op and by the epilogue, a store of another shape).
// `result_buffer` is the id the epilogue's first load names.
std::optional<EpilogueSplit> split_epilogue(const passes::Kernel& k, int result_buffer);

}  // namespace kiln::codegen
