// A host number used as an operand (x + 2, x * 0.5, fill_(true)). Like a Python number in
// PyTorch it has a kind (bool, integer, floating) but no fixed width: an integer scalar does
// not widen an int8 tensor, a floating scalar turns an integer tensor into the default float.
#pragma once
#include <cstdint>
#include <type_traits>

#include "dtype.h"

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

}  // namespace kiln
