// SymInt: a size that stays symbolic while a compiled function is traced (libtorch's name).
//
// `x.sym_size(0)` returns the size as a SymInt. Outside a trace it is a plain number. While a
// function is traced for compile() it is also a linear form over the traced tensors' sizes, so
// that kiln can tell which host decisions depended on which sizes:
//   - + and - of SymInts and integers, and * by an integer, stay symbolic;
//   - a comparison (<, <=, >, >=, ==, !=) returns the real outcome and records a guard on it, so
//     the graph traced here serves every size for which the comparison comes out the same;
//   - anything else (guard_int(), a product or quotient of two symbolic sizes, / and %)
//     specialises: the sizes involved are guarded on their exact values.
// A SymInt has no implicit conversion to int64_t (that would specialise silently); call
// guard_int() where a plain number is needed (a view's sizes, a loop bound). docs/compile.md,
// "Sizes and host code", says which uses of sizes keep a graph size-generic.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <source_location>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln {

// A linear form over the symbols of one trace: sum of coef * symbol, plus a constant.
struct SymExpr {
  uint64_t trace = 0;                                // the trace whose symbols these are
  std::vector<std::pair<uint32_t, int64_t>> terms;   // (symbol, coefficient), by symbol, no zeros
  int64_t constant = 0;
};

class SymInt {
 public:
  SymInt() = default;
  // A plain integer is a SymInt (so `x.sym_size(0) > 100` compares with a number).
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  SymInt(T v) : value_(int64_t(v)) {}  // NOLINT(google-explicit-constructor)
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  SymInt(T) = delete;  // a size is an integer; convert explicitly
  // A symbolic value (made by the tracer): `value` is its value in this trace.
  SymInt(int64_t value, std::shared_ptr<const SymExpr> expr) : value_(value), expr_(std::move(expr)) {}

  bool is_symbolic() const { return expr_ != nullptr; }
  const std::shared_ptr<const SymExpr>& expr() const { return expr_; }
  // The value as a plain number. While tracing, the sizes it depends on are guarded on their
  // exact values (the graph is specialised on them).
  int64_t guard_int(std::source_location where = std::source_location::current()) const;
  explicit operator int64_t() const { return guard_int(); }
  // The value without a guard: for printing and messages only, never for a decision.
  int64_t value_unchecked() const { return value_; }

  friend SymInt operator+(const SymInt& a, const SymInt& b);
  friend SymInt operator-(const SymInt& a, const SymInt& b);
  friend SymInt operator*(const SymInt& a, const SymInt& b);
  friend SymInt operator/(const SymInt& a, const SymInt& b);  // C++'s truncating division
  friend SymInt operator%(const SymInt& a, const SymInt& b);
  SymInt operator-() const;
  SymInt& operator+=(const SymInt& o) { return *this = *this + o; }
  SymInt& operator-=(const SymInt& o) { return *this = *this - o; }
  SymInt& operator*=(const SymInt& o) { return *this = *this * o; }

  friend bool operator<(const SymInt& a, const SymInt& b);
  friend bool operator<=(const SymInt& a, const SymInt& b);
  friend bool operator>(const SymInt& a, const SymInt& b);
  friend bool operator>=(const SymInt& a, const SymInt& b);
  friend bool operator==(const SymInt& a, const SymInt& b);
  friend bool operator!=(const SymInt& a, const SymInt& b);

 private:
  int64_t value_ = 0;
  std::shared_ptr<const SymExpr> expr_;  // null: a plain number
};

std::ostream& operator<<(std::ostream& os, const SymInt& s);

}  // namespace kiln
