// LLVM IR for one kernel (internal to codegen/cpu).
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "../expr.h"

namespace llvm {
class Module;
}

namespace kiln::codegen::cpu {

// The signature every compiled kernel has:
//   void name(char* const* operands, const int64_t* args, int64_t begin, int64_t end,
//             uint64_t* status)
// `operands` holds the address of each load's and then each store's element 0 (the access's
// offset already applied); `args` holds host numbers (doubles as their bits) for the loads that
// read one, by load index; [begin, end) is the part of the outermost loop this call runs (the
// whole loop for a kernel that is not split), or with thread_loops(k) > 1 of the leading loops
// flattened into one range. A full reduction (no outer loop) ignores them.
// `status` is the caller's word for errors a kernel cannot raise itself (it is machine code: it
// cannot throw): bit k set means check k of its kernel code failed (KernelCode::checks, e.g. an
// integer division by zero). A kernel ors its bits in atomically (the threads of a split kernel
// share the word) and only when one is set; a kernel without checks never touches it.
using KernelFn = void (*)(char* const*, const int64_t*, int64_t, int64_t, uint64_t*);

// A full reduction (no outer loop: sum of a whole tensor) split across threads. Next to `name`
// the module then has `name.partial`, which runs the part [begin, end) of loop 0 and writes
// each reduction's accumulator into 8-byte slots at operands[n] (n = loads + stores), and
// `name.finish`, which combines the slots of parts [begin, end) at operands[n] in order and
// computes and stores the results. Each part is one thread's; the finish runs once.
//
// A full reduction of several depths (x.var(): a mean, then the squares about it; logsumexp: a
// maximum, then a sum of exponentials) splits per depth: depth d's pass is `name.partial` (d =
// 1) or `name.partial.d`, each part's accumulators into its slots as above, and its finishing
// step `name.finish` or `name.finish.d` combines them; before the last depth that step writes
// the combined values into carry slots at operands[n + 1], where the next depths' steps read
// them (kDeepSplitDepths at most).
//
// A reduction by columns into few outputs (splits_columns: x.sum(0) of [65536, 16]) splits the
// same way along its rows: `name.partial` runs the part [begin, end) of loop 1 for every index
// of loop 0 and writes loop 0's index i's accumulators at slots i * reductions on; `name.finish`
// combines, for each index of loop 0, the slots of parts [begin, end) (each part's slots
// loops[0] * reductions apart) and stores. The host calls these even on one thread: the partial
// runs its outputs as one block of a constant count, which its whole kernel, split along loop
// 0 by the threads, cannot.
enum class ReductionPart { Whole, Partial, Finish };
inline constexpr const char* kPartialSuffix = ".partial";
inline constexpr const char* kFinishSuffix = ".finish";
inline constexpr int kDeepSplitDepths = 4;
// The symbol of depth d's partial or finishing step (`suffix`: kPartialSuffix or kFinishSuffix).
inline std::string part_symbol(const std::string& name, const char* suffix, int depth) {
  return name + suffix + (depth > 1 ? "." + std::to_string(depth) : "");
}
// emit_kernel adds the partial and finish functions to kernels that has_parts(). A load that
// in_place_store() pairs with a store reads through the store's pointer.

// A kernel with one outer loop of kSplitColumnsMinOutputs to 256 outputs (Emitter::kColumns)
// reduced by columns (emit_rows.cpp) over at least kSplitColumnsMinRows rows; not size-generic.
// Fewer outputs stay output by output (vectorised along the rows, by gathers): over 3 outputs
// of float32 the split summed as fast ([699050, 3]: 0.19 ms either way) and ran a sum of
// squared differences slower (0.30 -> 0.39 ms); over 4 it was 0.20 -> 0.07 (docs/perf-journal.md,
// "Compiled column reductions split along their rows").
inline constexpr int64_t kSplitColumnsMinOutputs = 4, kSplitColumnsMinRows = 256;
bool splits_columns(const passes::Kernel& k, const KernelCode& code, bool generic);
// splits_reduction (expr.h; of up to kDeepSplitDepths depths) or splits_columns.
inline bool has_parts(const passes::Kernel& k, const KernelCode& code, bool generic) {
  return splits_reduction(k, code, true, kDeepSplitDepths) || splits_columns(k, code, generic);
}
// How many partial and finishing steps a kernel that has_parts() has: one per depth.
inline int part_depths(const KernelCode& code) { return std::max(code.depth, 1); }
// The 8-byte slots one part's partial steps write, how far apart the host lays the parts: one
// per reduction of any depth (a depth's step uses the first of them), by columns
// (splits_columns) one per reduction and output of loop 0.
inline int64_t part_slots(const passes::Kernel& k, const KernelCode& code, bool columns) {
  int64_t n = 0;
  for (const Instr& in : code.code) n += in.op == EOp::Reduce;
  return columns ? n * k.loops[0] : n;
}

// A size-generic kernel reads its loop extents and every operand stride other than 0 and +-1
// from `args`, after the host numbers (slot loads.size() on): the values generic_args(k)
// returns, in that order (extents, then per operand and dim the strides that are arguments).
// It computes with 64-bit indices, keeps no row stash, and runs for any kernel of the same
// structure (generic_text in program.cpp says what that is), whatever its sizes and strides.
std::vector<int64_t> generic_args(const passes::Kernel& k);

// How many leading loops [begin, end) runs over, flattened row-major (0: none, a full
// reduction). The threads split the outermost loop, so a short one (n-body's 2 components, an
// image's 3 channels) left them idle or unbalanced: 3 rows on 2 threads is one thread's work
// twice over. The loops after it join the range while their product is under
// kThreadRowsMin, up to the reduction loops, and in an elementwise kernel short of its last two
// loops (which tiles and chunks take). Size-generic kernels keep loop 0 alone: their sizes
// change, their code does not.
inline constexpr int64_t kThreadRowsMin = 64;
int thread_loops(const passes::Kernel& k, bool generic);

// Instructions that become a call of the vector math library (jit.cpp): many cycles each. Every
// float instruction with a math function in eops.def.
inline bool calls_math(const Instr& in) { return eop_math(in.op) && is_floating(in.type); }

// Adds `name` (external, with the signature above) computing kernel `k` from its lowered code,
// and for a kernel that has_parts(), `name.partial` and `name.finish`; size-generic
// when `generic`.
void emit_kernel(llvm::Module& m, const std::string& name, const passes::Kernel& k, const KernelCode& code,
                 bool generic = false);

}  // namespace kiln::codegen::cpu
