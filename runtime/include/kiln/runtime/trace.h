// The tracing hook of the eager ops.
//
// kiln traces by running: while a compiled function is traced, every eager op still computes
// its real result, and then reports itself to the thread's Recorder (the frontend's tracer),
// which appends a node to the graph being built. An op that is implemented with other public
// ops reports only itself: the inner ops run under a Pause. Turning a traced tensor into a host
// value (operator bool, item, to_vector, data_ptr, printing) and ops whose output shape
// depends on the data report a graph break instead.
//
// With no Recorder installed (the normal eager case) the cost is one thread-local load per op.
#pragma once
#include <cstdint>
#include <functional>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "dtype.h"
#include "scalar.h"
#include "symint.h"
#include "tensor.h"

namespace kiln {

// The op ids of the op table (ops.def).
enum class OpId : uint16_t {
#define KILN_OP(id, name, category, operands, ...) id,
#include "ops.def"
#undef KILN_OP
};

// The bits of the op table's traits column (ops.def says what each means). The IR reads them as
// ir::kCostly, ... through ir::has_trait; the runtime reads the column itself where it needs one.
namespace op_traits {
enum OpTrait : uint32_t {
  kCostly = 1u << 0,
  kRowOp = 1u << 1,
  kTakesEpilogue = 1u << 2,
  kFloatCompute = 1u << 3,
  kFloatOnly = 1u << 4,
  kExact = 1u << 5,
  kExactValue = 1u << 6,
  kApprox = 1u << 7,
};
}  // namespace op_traits

// Node attributes: named, typed values (dims, keepdim, alpha, rounding_mode, dtype, ...).
using IntList = std::vector<int64_t>;
struct NoneAttr {
  bool operator==(const NoneAttr&) const = default;
};
using AttrValue = std::variant<NoneAttr, bool, int64_t, double, std::string, IntList, DType>;
struct Attr {
  std::string name;
  AttrValue value;
  bool operator==(const Attr&) const = default;
};
// A Scalar as an attribute value: bool, int64 or double by its kind.
AttrValue scalar_attr(const Scalar& s);
AttrValue optional_attr(const std::optional<double>& v);
// The Scalar an attribute value holds (bool, int64 or double).
Scalar attr_scalar(const AttrValue& v);

namespace trace {

// An operand as an op received it: a tensor, or a host number (a Python-style scalar).
struct Operand {
  const Tensor* tensor = nullptr;
  Scalar scalar;
  Operand(const Tensor& t) : tensor(&t) {}
  Operand(const Scalar& s) : scalar(s) {}
};

// The metadata of a traced tensor the user's code read (Metadata in tensor.h) is reported to
// the recorder, which guards on it: a graph traced after reading x.size(0) is replayed only
// for inputs that give x.size(0) the same value (or, read as x.sym_size(0), the same outcome of
// every comparison made on it). Reads made inside kiln's ops are not the user's: ops run their
// body with recording paused, and the ops that are made of other ops (reshape, split, ...)
// open an Internal scope.

// Why a traced tensor had to become a host value.
enum class HostAccess : uint8_t { Bool, Item, ToVector, DataPtr, Print, Str };
std::string_view host_access_name(HostAccess a);

class Recorder {
 public:
  virtual ~Recorder() = default;
  // A functional op ran: `outputs` are its real results.
  virtual void record(OpId op, std::span<const Operand> inputs, std::vector<Attr> attrs,
                      std::span<const Tensor> outputs) = 0;
  // An in-place op ran: `dst` now holds `src` (converted to dst's dtype); `src` was recorded.
  virtual void write_back(const Tensor& dst, const Tensor& src) = 0;
  // An in-place op ran on `self` (unrecorded, so its checks, casts and values are eager's):
  // record its functional form, `op` on `inputs` with `attrs`, and the write-back of that
  // result into `self`. Nothing computes the functional result: the recorder infers its type.
  // `inputs` are read for their identity and type only (`self` already holds the new values).
  virtual void record_inplace(const Tensor& self, OpId op, std::span<const Operand> inputs,
                              std::vector<Attr> attrs) = 0;
  // A factory made `t` (zeros, ones, arange, from_vector, ...): it becomes ops that make it
  // again or a constant. `args` are the numbers those ops need that `t` does not tell:
  // arange's start, end and step (as the caller passed them: their kinds choose the
  // arithmetic), linspace's start and end; empty for the others.
  virtual void created(const Tensor& t, std::string_view factory, std::span<const Scalar> args) = 0;
  // `t` is about to become a host value. `pc` is the caller's return address where no
  // source_location can be had (operator bool). May throw (fullgraph mode).
  virtual void host_access(const Tensor& t, HostAccess what, const std::source_location& where,
                           const void* pc) = 0;
  // An op whose output shape depends on the data ran (nonzero, masked_select, unique).
  // `replay` recomputes it from the same inputs when the recorded program runs again.
  virtual void data_dependent(std::string_view op, std::span<const Tensor> inputs, const Tensor& output,
                              std::function<Tensor(std::span<const Tensor>)> replay,
                              const std::source_location& where) = 0;
  // The .grad of `t` is about to be read or replaced (Tensor::grad, mutable_grad, the autograd
  // engine accumulating into it): a replay must read the .grad the call finds and leave the one
  // the eager run would. `overwrite`: replaced without being read (zero_grad's set to none), so
  // the .grad the call finds does not matter. The default ignores it.
  virtual void grad_access(const Tensor& t, bool overwrite) {}
  // Host state a library keeps beside its tensors (kiln::optim's step counts and learning
  // rates), which a replay must update and read as the eager run would. In the order recorded,
  // before the graph that follows runs: `effect` is run again at each replay; `live_number`
  // returns a 0-d float64 tensor holding read() now, which replays refill with read() (a graph
  // input, never a constant); `host_guard` is checked at each replay, before any effect, and a
  // false result traces again. `what` names the state for explain() and tells states apart.
  // The defaults (no replay): nothing to record.
  virtual void host_effect(std::function<void()> effect, std::string what) {}
  virtual Tensor live_number(double now, std::function<double()> read, std::string what);
  virtual void host_guard(std::function<bool()> holds, std::string what) {}
  // The user's code read `what` of `t` (dim: the dim for Size and Stride, else -1) at the code
  // address `pc`. The default ignores it (a recorder that does not replay needs no guards).
  virtual void metadata_read(const Tensor& t, Metadata what, int64_t dim, const void* pc) {}
  // t.sym_size(dim) while tracing: the size as a symbol of this trace. The default: a plain number.
  virtual SymInt sym_size(const Tensor& t, int64_t dim);
  // Does this recorder take guards on symbols of trace `trace` (SymExpr::trace)?
  virtual bool owns(uint64_t trace) const { return false; }
  // The host's control flow depended on a symbolic form: `form` is in [lo, hi] when `inside`,
  // outside it when not. `what` says how ("<", "==", "guard_int", ...), where the caller is.
  virtual void constrain(const SymExpr& form, int64_t lo, int64_t hi, bool inside, const char* what,
                         const std::source_location& where, const void* pc) {}
};

// Marks kiln's own code while the user's function is traced: metadata read inside it is not the
// user's (an op made of other ops, which are recorded, reads sizes to choose them).
class Internal {
 public:
  Internal();
  ~Internal();
  Internal(const Internal&) = delete;
  Internal& operator=(const Internal&) = delete;

 private:
  bool on_;
};

// The thread's recorder, or null when the thread is not tracing.
Recorder* active();
// Installs `r` for this thread until destroyed (restores the previous one).
class Install {
 public:
  explicit Install(Recorder* r);
  ~Install();
  Install(const Install&) = delete;
  Install& operator=(const Install&) = delete;

 private:
  Recorder* saved_;
  int saved_internal_;
};
// Suspends recording on this thread (ops implemented with other ops report only themselves).
class Pause {
 public:
  Pause();
  ~Pause();
  Pause(const Pause&) = delete;
  Pause& operator=(const Pause&) = delete;

 private:
  Recorder* saved_;
};

// Runs `compute` and, when tracing, records it as one `op` node with the attributes `attrs()`
// makes (called only when tracing). Used by the eager ops' public entry points.
template <typename Compute, typename Attrs>
Tensor traced(OpId op, std::initializer_list<Operand> inputs, Attrs&& attrs, Compute&& compute) {
  Recorder* r = active();
  if (!r) [[likely]] return compute();
  Tensor out;
  {
    Pause p;
    out = compute();
  }
  r->record(op, std::span<const Operand>(inputs.begin(), inputs.size()), attrs(), std::span<const Tensor>(&out, 1));
  return out;
}
inline std::vector<Attr> no_attrs() { return {}; }

// The recorder hooks above, when tracing (no-ops otherwise; live_number then returns read()'s
// value as a 0-d float64 tensor). A library calls host_guard first, then runs its effect and
// calls host_effect with it, then reads numbers that depend on it with live_number.
void grad_access(const Tensor& t, bool overwrite = false);
void host_effect(std::function<void()> effect, std::string what);
Tensor live_number(std::function<double()> read, std::string what);
void host_guard(std::function<bool()> holds, std::string what);

// `t`, made while a function is traced, is host state kept beside the traced tensors (an
// optimizer's moment, made zero on its first step): to the trace it is a tensor made before
// the call (read and written as a captured tensor), not a value of the graph. Make it with
// recording paused.
void outside_state(const Tensor& t);

// Reports a host access of `t` to the recorder, when tracing.
void host_access(const Tensor& t, HostAccess what, const std::source_location& where,
                 const void* pc = nullptr);

}  // namespace trace
}  // namespace kiln
