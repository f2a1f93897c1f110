// SymFloat (see symfloat.h): a number held as a 0-d float64 tensor, so that a compiled
// function's graph reads it at every call.
#include "kiln/runtime/symfloat.h"

#include <ostream>

#include "kiln/runtime/error.h"
#include "kiln/runtime/factories.h"
#include "kiln/runtime/trace.h"

namespace kiln {

SymFloat::SymFloat(double v) : t_(scalar_tensor(v, TensorOptions(kFloat64))) {}

SymFloat::SymFloat(const Tensor& t) {
  KILN_CHECK(t.defined(), "SymFloat", "an undefined tensor holds no number");
  KILN_CHECK(t.numel() == 1, "SymFloat", "a tensor of ", t.numel(), " elements (shape ", t.sizes().vec(),
             ") is not one number");
  t_ = t.to(kFloat64).reshape({});
}

double SymFloat::guard_float(std::source_location where) const { return t_.item<double>(where); }

double SymFloat::value_unchecked() const {
  trace::Pause p;  // a read for printing: not a decision the graph depends on
  return t_.item<double>();
}

Tensor SymFloat::operand_for(const Tensor& x) const {
  Tensor v = t_.to(is_floating(x.dtype()) ? x.dtype() : kDefaultFloat);
  return v.device() == x.device() ? v : v.to(x.device());
}

SymFloat SymFloat::operator-() const { return SymFloat(neg(t_)); }
SymFloat operator+(const SymFloat& a, const SymFloat& b) { return SymFloat(add(a.t_, b.t_)); }
SymFloat operator-(const SymFloat& a, const SymFloat& b) { return SymFloat(sub(a.t_, b.t_)); }
SymFloat operator*(const SymFloat& a, const SymFloat& b) { return SymFloat(mul(a.t_, b.t_)); }
SymFloat operator/(const SymFloat& a, const SymFloat& b) { return SymFloat(div(a.t_, b.t_)); }

// A comparison's outcome is read by the host: a guard on the one-element bool, as `if (t < v)`
// on tensors takes, so the graph stays valid for every value on the same side. `pc` is the
// caller's code address, which the guard names (as Tensor::operator bool's does).
namespace {
bool decide(const Tensor& outcome, const void* pc) {
  trace::host_access(outcome, trace::HostAccess::Bool, std::source_location(), pc);
  trace::Pause p;
  return outcome.item().to_bool();
}
}  // namespace

__attribute__((noinline)) bool operator<(const SymFloat& a, const SymFloat& b) {
  return decide(lt(a.t_, b.t_), __builtin_return_address(0));
}
__attribute__((noinline)) bool operator<=(const SymFloat& a, const SymFloat& b) {
  return decide(le(a.t_, b.t_), __builtin_return_address(0));
}
__attribute__((noinline)) bool operator>(const SymFloat& a, const SymFloat& b) {
  return decide(gt(a.t_, b.t_), __builtin_return_address(0));
}
__attribute__((noinline)) bool operator>=(const SymFloat& a, const SymFloat& b) {
  return decide(ge(a.t_, b.t_), __builtin_return_address(0));
}
__attribute__((noinline)) bool operator==(const SymFloat& a, const SymFloat& b) {
  return decide(eq(a.t_, b.t_), __builtin_return_address(0));
}
__attribute__((noinline)) bool operator!=(const SymFloat& a, const SymFloat& b) {
  return decide(ne(a.t_, b.t_), __builtin_return_address(0));
}

std::ostream& operator<<(std::ostream& os, const SymFloat& s) { return os << s.value_unchecked(); }

}  // namespace kiln
