// A host number used as an operand (x + 2, x * 0.5, fill_(true)). Like a Python number in
// PyTorch it has a kind (bool, integer, floating) but no fixed width: an integer scalar does
// not widen an int8 tensor, a floating scalar turns an integer tensor into the default float.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

#include "dtype.h"
#include "error.h"

namespace kiln {

class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };
  Scalar() : Scalar(int64_t(0)) {}
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Int), i_(int64_t(v)) {}
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::Float), d_(double(v)) {}
  Scalar(bool v) : kind_(Kind::Bool), i_(v) {}
  Scalar(Half v) : kind_(Kind::Float), d_(float(v)) {}
  Scalar(BFloat16 v) : kind_(Kind::Float), d_(float(v)) {}

  Kind kind() const { return kind_; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_floating() const { return kind_ == Kind::Float; }
  double to_double() const { return kind_ == Kind::Float ? d_ : double(i_); }
  int64_t to_int() const { return kind_ == Kind::Float ? int64_t(d_) : i_; }
  bool to_bool() const { return kind_ == Kind::Float ? d_ != 0 : i_ != 0; }
  template <typename T> T to() const {
    if constexpr (std::is_same_v<T, bool>) return to_bool();
    else if constexpr (std::is_integral_v<T>) return T(to_int());
    else return T(to_double());
  }
  // The dtype a tensor made from this scalar has: bool, int64 or the default float.
  DType dtype() const {
    return kind_ == Kind::Bool ? DType::Bool : kind_ == Kind::Int ? DType::Int64 : kDefaultFloat;
  }
  Scalar operator-() const { return kind_ == Kind::Float ? Scalar(-d_) : Scalar(-i_); }

 private:
  Kind kind_;
  union {
    int64_t i_;
    double d_;
  };
};

namespace detail {
[[noreturn]] inline void conversion_overflow(const Scalar& v, DType to, std::string_view op) {
  if (v.is_floating())
    KILN_FAIL(op, "value ", v.to_double(), " cannot be converted to type ", kiln::name(to), " without overflow");
  KILN_FAIL(op, "value ", v.to_int(), " cannot be converted to type ", kiln::name(to), " without overflow");
}
}  // namespace detail

// `v` as a T, or "[op] value V cannot be converted to type T without overflow", by PyTorch's
// rules for item<T>() (c10::checked_convert): an integer type refuses NaN, infinities and
// values outside its range (a float within it is truncated toward zero), except that an
// unsigned type takes negative integers down to -max, which wrap; a floating type refuses
// finite values beyond its largest, while inf and NaN convert; bool takes anything (nonzero is
// true). Where `to<T>()` would wrap 1000 into an int8 as -24 or turn NaN into 0.
template <typename T>
T checked_convert(const Scalar& v, std::string_view op) {
  if constexpr (std::is_same_v<T, bool>) {
    return v.to_bool();
  } else if constexpr (std::is_integral_v<T>) {
    using L = std::numeric_limits<T>;
    if (v.is_floating()) {
      const double d = v.to_double();
      // (int64's max is 2^63 - 1, which a double rounds up to 2^63: that bound is exclusive)
      const double lo = double(L::lowest()), hi = double(L::max());
      const bool fits = d >= lo && (L::digits > std::numeric_limits<double>::digits ? d < hi : d <= hi);
      if (!fits) detail::conversion_overflow(v, dtype_of<T>(), op);
      return T(d);
    }
    const int64_t i = v.to_int();
    if constexpr (!std::is_same_v<T, int64_t>) {
      const int64_t lo = L::is_signed ? int64_t(L::lowest()) : -int64_t(L::max());
      if (i < lo || i > int64_t(L::max())) detail::conversion_overflow(v, dtype_of<T>(), op);
    }
    return T(i);
  } else {
    const double d = v.to_double();
    const double hi = std::is_same_v<T, Half>       ? 65504.0
                      : std::is_same_v<T, BFloat16> ? 3.3895313892515355e38
                                                    : double(std::numeric_limits<T>::max());
    if (std::isfinite(d) && std::abs(d) > hi) detail::conversion_overflow(v, dtype_of<T>(), op);
    return T(d);
  }
}

}  // namespace kiln
