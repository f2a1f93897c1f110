// The CPU backend: the optimizer's kernel program compiled to machine code by LLVM 19.
//
// Every elementwise, reduction and row-wise kernel becomes one function (LLVM IR from the
// kernel's loop nest and its scalar code, LLVM's O3 for the host CPU, SLEEF's vector math
// functions), JIT-linked into the process with ORC. Kernels are cached by a stable key (their
// text, the target CPU and features, the LLVM and kiln IR versions) in memory and on disk
// (kiln/codegen/cache.h), so a second process loads object code instead of compiling.
// Opaque kernels (matmul, einsum, cat, ...) call the eager library op; the elementwise epilogue
// fused after a matmul-family op is compiled as a kernel over the op's result. Control kernels
// run their regions through the kernel interpreter; a kernel with an op the backend cannot
// compile does too, with a one-line warning naming the op.
//
// Large kernels split their outermost loop across the threads of KILN_NUM_THREADS; small ones
// run on the calling thread.
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/exec/program.h"

namespace kiln::codegen {

struct CpuCompileOptions {
  // Size-generic kernels: loop extents and strides are run-time arguments, so that one compiled
  // kernel serves every size of the same structure (the key leaves the sizes out). What kiln
  // compiles once a function has seen several sizes of a dim (automatic dynamic shapes); the
  // program around the kernels (buffers, memory plan) is still built per size, which costs no
  // LLVM work. Specialised kernels (the default) fold sizes into constants: 32-bit indices,
  // a row stash for softmax-like kernels, exact loop trip counts.
  bool generic = false;
};

// Compiles a kernel program for this CPU. `input_types` are the graph's input types (the sizes
// and strides the program is specialised on). Throws kiln::Error only if LLVM itself fails.
std::shared_ptr<exec::CompiledProgram> compile_cpu(std::shared_ptr<const passes::KernelProgram> program,
                                             std::vector<ir::Type> input_types, CpuCompileOptions opts = {});

// What dump-ir --emit shows for every kernel of a program.
enum class CpuEmit {
  Code,      // the kernel code every backend renders (codegen/src/expr.h)
  LlvmRaw,   // LLVM IR as kiln writes it, before optimisation
  Llvm,      // LLVM IR after the O3 pipeline (vector loops, vector math calls)
  Asm,       // the host assembly
};
std::string emit_cpu(const passes::KernelProgram& p, CpuEmit what, bool generic = false);

// The compiled CPU kernels linked into the process: those the memory cache keeps (at most
// KILN_KERNEL_CACHE_MB of object code, least recently used out first) and how many it let go
// (their code unlinked once no compiled program used it).
struct CpuKernelMemory {
  size_t cached = 0;
  size_t cached_bytes = 0;
  uint64_t evicted = 0;
};
CpuKernelMemory cpu_kernel_memory();

// Whether this build has the LLVM code generator (KILN_WITH_LLVM). Without it compile_cpu()
// runs every kernel on the reference executor (stats().interpreted says so per kernel) and
// emit_cpu() offers CpuEmit::Code only.
bool has_cpu_codegen();

// The host CPU as LLVM names it, and the target string cache keys include.
std::string cpu_name();
std::string cpu_target_id();

}  // namespace kiln::codegen
