// SymFloat: a floating-point number that a compiled function reads at every call instead of
// baking it into its graph (libtorch's name). For a time step, a learning rate, a temperature:
// any number that changes between calls.
//
// A plain double argument of a compiled function is part of its signature: each new value is a
// new trace, until the recompile budget runs out. A SymFloat holds its value as a 0-d float64
// tensor, and passed as an argument that tensor is a graph input: one trace serves every value.
//
//   auto step = kiln::compile([](Tensor& u, const Tensor& f, const kiln::SymFloat& dt) {
//     u.add_(f * dt);
//   });
//   for (double t = 0; ...) step(u, f, dt_of(t));   // traced once
//
// Arithmetic with a tensor gives what the same arithmetic with a plain double gives: the number
// promotes like a Python number (a floating tensor keeps its dtype, an integer or bool tensor
// becomes float32) and is rounded to the result's dtype first, as kiln rounds a double.
// Arithmetic of SymFloats and doubles stays symbolic (0-d float64 ops in the graph).
// A comparison (<, <=, >, >=, ==, !=) returns the real outcome and, while tracing, records a
// guard on that outcome: the graph traced here serves every value for which the comparison
// comes out the same. guard_float() specialises on the exact value (a guard per value).
//
// A number passed where the compiled function declares a SymFloat parameter is made a SymFloat
// at the call (compile.h), so `step(u, f, 0.01)` is fine. A generic lambda's parameter types
// cannot be read: there, pass kiln::SymFloat(v) itself, or the number is baked into the trace
// (one trace per value, counted by the recompile budget).
#pragma once
#include <iosfwd>
#include <source_location>
#include <type_traits>

#include "ops.h"

namespace kiln {

class SymFloat {
 public:
  SymFloat(double v);  // NOLINT(google-explicit-constructor): a number is a SymFloat
  // A one-element tensor's value (converted to float64; kept in the graph when traced).
  explicit SymFloat(const Tensor& t);

  // The 0-d float64 tensor that holds the value.
  const Tensor& tensor() const { return t_; }
  // The value as a plain number. While tracing, the graph is specialised on it (a guard).
  double guard_float(std::source_location where = std::source_location::current()) const;
  // The value without a guard: for printing and messages only, never for a decision.
  double value_unchecked() const;
  // The value as the operand of an op with `x`: of the dtype a double would be rounded to
  // there (x's floating dtype, float32 for an integer or bool x), on x's device.
  Tensor operand_for(const Tensor& x) const;

  SymFloat operator-() const;
  friend SymFloat operator+(const SymFloat& a, const SymFloat& b);
  friend SymFloat operator-(const SymFloat& a, const SymFloat& b);
  friend SymFloat operator*(const SymFloat& a, const SymFloat& b);
  friend SymFloat operator/(const SymFloat& a, const SymFloat& b);

  friend bool operator<(const SymFloat& a, const SymFloat& b);
  friend bool operator<=(const SymFloat& a, const SymFloat& b);
  friend bool operator>(const SymFloat& a, const SymFloat& b);
  friend bool operator>=(const SymFloat& a, const SymFloat& b);
  friend bool operator==(const SymFloat& a, const SymFloat& b);
  friend bool operator!=(const SymFloat& a, const SymFloat& b);

 private:
  Tensor t_;
};

std::ostream& operator<<(std::ostream& os, const SymFloat& s);

// Tensor op SymFloat and SymFloat op Tensor. (Templates on the exact type, so that `x * 2.0`
// keeps meaning the double overload rather than becoming ambiguous.)
namespace detail {
template <typename S>
using if_symfloat = std::enable_if_t<std::is_same_v<S, SymFloat>, int>;
}
#define KILN_SYMFLOAT_OPERATOR(op, fn, rfn)                                                            \
  template <typename S, detail::if_symfloat<S> = 0>                                                    \
  Tensor operator op(const Tensor& a, const S& b) { return fn(a, b.operand_for(a)); }                 \
  template <typename S, detail::if_symfloat<S> = 0>                                                    \
  Tensor operator op(const S& a, const Tensor& b) { return rfn; }
KILN_SYMFLOAT_OPERATOR(+, add, add(a.operand_for(b), b))
KILN_SYMFLOAT_OPERATOR(-, sub, sub(a.operand_for(b), b))
KILN_SYMFLOAT_OPERATOR(*, mul, mul(a.operand_for(b), b))
KILN_SYMFLOAT_OPERATOR(/, div, div(a.operand_for(b), b))
KILN_SYMFLOAT_OPERATOR(<, lt, gt(b, a.operand_for(b)))
KILN_SYMFLOAT_OPERATOR(<=, le, ge(b, a.operand_for(b)))
KILN_SYMFLOAT_OPERATOR(>, gt, lt(b, a.operand_for(b)))
KILN_SYMFLOAT_OPERATOR(>=, ge, le(b, a.operand_for(b)))
KILN_SYMFLOAT_OPERATOR(==, eq, eq(b, a.operand_for(b)))
KILN_SYMFLOAT_OPERATOR(!=, ne, ne(b, a.operand_for(b)))
#undef KILN_SYMFLOAT_OPERATOR

}  // namespace kiln
