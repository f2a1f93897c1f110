// Kernel code: a kernel's body as straight-line scalar code, what every backend renders.
//
// The passes hand each kernel over as a small graph of the op table's ops in loop space
// (kiln/passes/kernel.h). A backend wants less: one scalar instruction per primitive operation
// at one point of the loop space, with the reductions spelled out. lower_kernel() does that
// once for all backends: composite ops expand (softmax into a max, a sum and a division;
// var into a mean and a sum of squares; gelu into its formula), every operand is converted to
// the type its op computes in, 16-bit floats compute as float32 (their loads widen, their
// stores round), float sums accumulate in float64, and identical instructions are shared.
//
// Each instruction knows whether it varies along the reduction loops ("row" values: they are
// computed inside a loop over the row) and its depth: how many reductions deep it sits.
// A kernel with reductions runs, per outer index, one loop over the row per depth (all the
// reductions of that depth accumulate in it), then the stores: per-row values once, row values
// in a last loop over the row. An elementwise kernel has depth 0 and no row values.
//
// Integer division is total in kernel code (no backend may trap): a zero divisor gives 0 and
// sets the kernel's check flag the instruction names, which the caller turns into eager's error
// after the kernel returns (KernelCode::checks).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/passes/kernel.h"

namespace kiln::codegen {

// The type an operation of `storage` dtype computes in: float16 and bfloat16 compute as float32.
DType compute_dtype(DType storage);

// The kernel instruction set (eops.def: each instruction's name, arity and math function).
enum class EOp : uint8_t {
#define KILN_EOP(id, name, arity, math, ...) id,
#include "eops.def"
#undef KILN_EOP
};
std::string_view eop_name(EOp op);
// The number of argument instructions of `op` (-1: none fixed), and the C library function
// computing it on floats, or null (eops.def).
int eop_arity(EOp op);
const char* eop_math(EOp op);
// Every instruction with a math function, with its arity: the calls a backend links.
struct MathFn {
  const char* name;
  int arity;
};
std::span<const MathFn> math_fns();
// The instruction that computes op `op` of the op table by itself (eops.def's op column), if one
// does: lower_kernel() lowers the op to it with no case of its own.
std::optional<EOp> lowers_to(OpId op);

// Max and Min propagate NaN, as the eager amax/amin do.
enum class Reducer : uint8_t { Sum, Prod, Max, Min, Any, All };

struct Instr {
  EOp op = EOp::Const;
  DType type = DType::Float32;  // what the result is computed in (never a 16-bit float)
  std::vector<int> args;        // earlier instructions
  double f = 0;
  int64_t i = 0;
  int index = -1;  // Load, Arg: the operand; RoundTo16: the DType; integer Div, Fmod: the check
                   // flag a zero divisor sets (-1: the divisor is a nonzero constant)
  Reducer reducer = Reducer::Sum;
  bool row = false;  // varies along the reduction loops
  int depth = 0;     // Reduce: 1 + the depth of its input; others: the deepest reduction used
};

// An error the kernel reports instead of raising (it cannot unwind): check flag k set by any
// point of a call means checks[k] is raised, by the caller, after the call. Flags are numbered
// in the body's node order, which is eager's order of execution, so when several are set the
// lowest is the error eager meets first.
struct Check {
  std::string op;       // the op eager names in the error ("div", "remainder", "fmod")
  std::string message;  // "ZeroDivisionError: integer division or modulo by zero"
};
constexpr int kMaxChecks = 64;  // one bit each in the kernel's status word

struct KernelCode {
  std::vector<Instr> code;  // in dependency order
  std::vector<int> stores;  // the instruction each store writes (converted to the store's dtype)
  std::vector<Check> checks;  // by flag number (integer Div/Fmod's `index`)
  int depth = 0;            // the deepest reduction (0: none)
  std::string str() const;  // one instruction per line, for dump-ir and tests
};

struct Lowered {
  std::optional<KernelCode> code;
  std::string why;  // when not lowered: the op and dtype no backend path handles yet
};

// The kernel's body as scalar code. Opaque and control kernels are not lowered (they run their
// library op or regions); an op or dtype without a scalar form is reported in `why`.
Lowered lower_kernel(const passes::Kernel& k);

// Facts about a kernel's loop space that both backends use.
// Whether every index the kernel computes fits in 32 bits (its loops and operand offsets).
bool fits_index32(const passes::Kernel& k);
// The store whose elements load `load` reads exactly (an in-place update), or -1.
int in_place_store(const passes::Kernel& k, size_t load);
// Whether a full reduction splits into partial results per part of loop 0 and a finishing
// step: every loop a reduction loop (two or more along loop 0), one reduction depth (up to
// `depths`: a step of each per depth, the CPU backend's deep splits), and single-element
// stores; with `early_stores`, also stores along the row that the first pass writes
// (RowPlan::early), each part writing its own elements.
bool splits_reduction(const passes::Kernel& k, const KernelCode& code, bool early_stores = false, int depths = 1);

// How a kernel with reductions runs per outer index, the same in every backend: one pass over
// the row per reduction depth (all reductions of that depth accumulate in it), then the stores:
// per-row values once, row values (and values broadcast along the row) in a last pass.
// With `early_stores` (the CPU backend), the row stores that need no reduction and no scan
// (x * 2 beside x.sum(): horizontal fusion's siblings) are written in the first pass instead:
// the row is then read once for them, and a kernel whose row stores are all early has no last
// pass.
struct RowPlan {
  std::vector<size_t> in_row, per_row;    // the stores written in the last pass / once per row
  std::vector<size_t> early;              // the row stores written in the first pass
  std::vector<std::vector<int>> reduces;  // the Reduce instructions by depth (0: none)
  std::vector<std::vector<int>> needs;    // per depth from 1, what its pass computes (the first:
                                          // with the early stores); last: what the in-row
                                          // stores need
};
RowPlan row_plan(const passes::Kernel& k, const KernelCode& code, bool early_stores = false);
// The instructions `roots` need, in order; Reduce instructions are leaves (computed earlier).
std::vector<int> needed(const KernelCode& code, const std::vector<int>& roots);

}  // namespace kiln::codegen
