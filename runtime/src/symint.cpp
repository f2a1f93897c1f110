// SymInt arithmetic and comparisons (see symint.h): linear forms while tracing, guards where
// the host decides on them.
#include "kiln/runtime/symint.h"

#include <limits>
#include <ostream>

#include "kiln/runtime/error.h"
#include "kiln/runtime/trace.h"

namespace kiln {

namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// The recorder that takes guards on `s`'s symbols: null for a plain number, outside a trace,
// or for a symbol of a trace that has ended (it is then just its value).
trace::Recorder* owner(const SymInt& s) {
  if (!s.is_symbolic()) return nullptr;
  trace::Recorder* r = trace::active();
  return r && r->owns(s.expr()->trace) ? r : nullptr;
}

// The form of a SymInt whose symbols `r` owns; a plain number is a constant form.
SymExpr form_of(const SymInt& s, trace::Recorder* r) {
  if (r && owner(s) == r) return *s.expr();
  SymExpr e;
  e.constant = s.value_unchecked();
  return e;
}

// a + k * b, or false when a coefficient or the constant overflows.
bool add_scaled(const SymExpr& a, const SymExpr& b, int64_t k, SymExpr& out) {
  out.trace = a.trace ? a.trace : b.trace;
  out.terms.clear();
  size_t i = 0, j = 0;
  while (i < a.terms.size() || j < b.terms.size()) {
    uint32_t sym;
    int64_t c = 0, kb = 0;
    if (j == b.terms.size() || (i < a.terms.size() && a.terms[i].first < b.terms[j].first)) {
      sym = a.terms[i].first;
      c = a.terms[i++].second;
    } else {
      sym = b.terms[j].first;
      if (__builtin_mul_overflow(b.terms[j].second, k, &kb)) return false;
      if (i < a.terms.size() && a.terms[i].first == sym) c = a.terms[i++].second;
      ++j;
      if (__builtin_add_overflow(c, kb, &c)) return false;
    }
    if (c != 0) out.terms.push_back({sym, c});
  }
  int64_t kc;
  if (__builtin_mul_overflow(b.constant, k, &kc)) return false;
  return !__builtin_add_overflow(a.constant, kc, &out.constant);
}

SymInt make(int64_t value, SymExpr&& e) {
  if (e.terms.empty()) return SymInt(value);
  return SymInt(value, std::make_shared<const SymExpr>(std::move(e)));
}

// Guards `s` on its exact value (the graph specialises on the sizes it depends on).
void specialise(const SymInt& s, const char* what, const std::source_location& where, const void* pc) {
  if (trace::Recorder* r = owner(s)) {
    trace::Pause p;
    r->constrain(*s.expr(), s.value_unchecked(), s.value_unchecked(), true, what, where, pc);
  }
}

int64_t checked(bool overflow, int64_t v, const char* op, const SymInt& a, const SymInt& b) {
  KILN_CHECK(!overflow, "SymInt", a.value_unchecked(), " ", op, " ", b.value_unchecked(), " overflows int64");
  return v;
}

// a ± b (sign 1 or -1).
SymInt add(const SymInt& a, const SymInt& b, int64_t sign, const void* pc) {
  int64_t v;
  bool ovf = sign > 0 ? __builtin_add_overflow(a.value_unchecked(), b.value_unchecked(), &v)
                      : __builtin_sub_overflow(a.value_unchecked(), b.value_unchecked(), &v);
  checked(ovf, v, sign > 0 ? "+" : "-", a, b);
  trace::Recorder* r = owner(a) ? owner(a) : owner(b);
  if (!r) return SymInt(v);
  SymExpr e;
  if (add_scaled(form_of(a, r), form_of(b, r), sign, e)) return make(v, std::move(e));
  specialise(a, "arithmetic", {}, pc);
  specialise(b, "arithmetic", {}, pc);
  return SymInt(v);
}

// The guard of a comparison: whether a - b lies in [lo, hi].
bool compare(const SymInt& a, const SymInt& b, int64_t lo, int64_t hi, const char* what, const void* pc) {
  const __int128 d = __int128(a.value_unchecked()) - b.value_unchecked();
  const bool inside = d >= lo && d <= hi;
  trace::Recorder* r = owner(a) ? owner(a) : owner(b);
  if (!r) return inside;
  SymExpr e;
  if (add_scaled(form_of(a, r), form_of(b, r), -1, e)) {
    trace::Pause p;
    r->constrain(e, lo, hi, inside, what, {}, pc);
  } else {
    specialise(a, what, {}, pc);
    specialise(b, what, {}, pc);
  }
  return inside;
}

}  // namespace

int64_t SymInt::guard_int(std::source_location where) const {
  specialise(*this, "guard_int", where, nullptr);
  return value_;
}

__attribute__((noinline)) SymInt operator+(const SymInt& a, const SymInt& b) {
  return add(a, b, 1, __builtin_return_address(0));
}
__attribute__((noinline)) SymInt operator-(const SymInt& a, const SymInt& b) {
  return add(a, b, -1, __builtin_return_address(0));
}
__attribute__((noinline)) SymInt SymInt::operator-() const { return add(SymInt(0), *this, -1, __builtin_return_address(0)); }

__attribute__((noinline)) SymInt operator*(const SymInt& a, const SymInt& b) {
  const void* pc = __builtin_return_address(0);
  int64_t v;
  checked(__builtin_mul_overflow(a.value_unchecked(), b.value_unchecked(), &v), v, "*", a, b);
  trace::Recorder* ra = owner(a);
  trace::Recorder* rb = owner(b);
  if (ra && rb) {  // a product of two sizes is not linear: both are specialised
    specialise(a, "a product of two symbolic sizes", {}, pc);
    specialise(b, "a product of two symbolic sizes", {}, pc);
    return SymInt(v);
  }
  if (!ra && !rb) return SymInt(v);
  const SymInt& sym = ra ? a : b;
  const int64_t k = ra ? b.value_unchecked() : a.value_unchecked();
  SymExpr e;
  if (add_scaled(SymExpr{}, *sym.expr(), k, e)) return make(v, std::move(e));
  specialise(sym, "arithmetic", {}, pc);
  return SymInt(v);
}

__attribute__((noinline)) SymInt operator/(const SymInt& a, const SymInt& b) {
  KILN_CHECK(b.value_unchecked() != 0, "SymInt", "division of ", a.value_unchecked(), " by zero");
  KILN_CHECK(!(a.value_unchecked() == kMin && b.value_unchecked() == -1), "SymInt", "division overflows int64");
  specialise(a, "division", {}, __builtin_return_address(0));
  specialise(b, "division", {}, __builtin_return_address(0));
  return SymInt(a.value_unchecked() / b.value_unchecked());
}

__attribute__((noinline)) SymInt operator%(const SymInt& a, const SymInt& b) {
  KILN_CHECK(b.value_unchecked() != 0, "SymInt", "remainder of ", a.value_unchecked(), " by zero");
  specialise(a, "remainder", {}, __builtin_return_address(0));
  specialise(b, "remainder", {}, __builtin_return_address(0));
  return SymInt(b.value_unchecked() == -1 ? 0 : a.value_unchecked() % b.value_unchecked());
}

// Each comparison as a range of a - b.
__attribute__((noinline)) bool operator<(const SymInt& a, const SymInt& b) {
  return compare(a, b, kMin, -1, "<", __builtin_return_address(0));
}
__attribute__((noinline)) bool operator<=(const SymInt& a, const SymInt& b) {
  return compare(a, b, kMin, 0, "<=", __builtin_return_address(0));
}
__attribute__((noinline)) bool operator>(const SymInt& a, const SymInt& b) {
  return compare(a, b, 1, kMax, ">", __builtin_return_address(0));
}
__attribute__((noinline)) bool operator>=(const SymInt& a, const SymInt& b) {
  return compare(a, b, 0, kMax, ">=", __builtin_return_address(0));
}
__attribute__((noinline)) bool operator==(const SymInt& a, const SymInt& b) {
  return compare(a, b, 0, 0, "==", __builtin_return_address(0));
}
__attribute__((noinline)) bool operator!=(const SymInt& a, const SymInt& b) {
  return !compare(a, b, 0, 0, "!=", __builtin_return_address(0));
}

// Printing hands the value to the host, which may decide on it: it specialises.
std::ostream& operator<<(std::ostream& os, const SymInt& s) { return os << s.guard_int({}); }

}  // namespace kiln
