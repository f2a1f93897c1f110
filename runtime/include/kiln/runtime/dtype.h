// Element types and PyTorch's type-promotion lattice.
#pragma once
#include <cstdint>
#include <string_view>

#include "half.h"

namespace kiln {

// Order matters: it indexes the promotion table in dtype.cpp.
enum class DType : uint8_t { Bool, UInt8, Int8, Int16, Int32, Int64, Float16, BFloat16, Float32, Float64 };
inline constexpr int kNumDTypes = 10;

// libtorch-style spellings: kiln::kFloat32, kiln::kFloat, kiln::kLong ...
inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8, kByte = DType::UInt8;
inline constexpr DType kInt8 = DType::Int8, kChar = DType::Int8;
inline constexpr DType kInt16 = DType::Int16, kShort = DType::Int16;
inline constexpr DType kInt32 = DType::Int32, kInt = DType::Int32;
inline constexpr DType kInt64 = DType::Int64, kLong = DType::Int64;
inline constexpr DType kFloat16 = DType::Float16, kHalf = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat32 = DType::Float32, kFloat = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64, kDouble = DType::Float64;

// The dtype a floating-point Python-style scalar or an integer->float op produces.
inline constexpr DType kDefaultFloat = DType::Float32;

constexpr int64_t itemsize(DType t) {
  switch (t) {
    case DType::Bool: case DType::UInt8: case DType::Int8: return 1;
    case DType::Int16: case DType::Float16: case DType::BFloat16: return 2;
    case DType::Int32: case DType::Float32: return 4;
    case DType::Int64: case DType::Float64: return 8;
  }
  return 0;
}
constexpr bool is_floating(DType t) { return t >= DType::Float16; }
constexpr bool is_integral(DType t, bool include_bool = false) {
  return (t >= DType::UInt8 && t <= DType::Int64) || (include_bool && t == DType::Bool);
}
constexpr bool is_signed(DType t) { return t != DType::Bool && t != DType::UInt8; }

// "float32", "int64", ... (PyTorch's names without the "torch." prefix).
std::string_view name(DType t);
// Parses a name() back; throws kiln::Error on an unknown name.
DType dtype_from_name(std::string_view s);

// torch.promote_types: the smallest dtype both can be converted to without leaving their category.
DType promote_types(DType a, DType b);
// torch.can_cast: may an op computing in `from` write its result into a tensor of `to`?
// (no float -> integral, no non-bool -> bool)
bool can_cast(DType from, DType to);

// The C++ type stored for each dtype.
template <DType D> struct CppTypeOf;
template <> struct CppTypeOf<DType::Bool> { using type = bool; };
template <> struct CppTypeOf<DType::UInt8> { using type = uint8_t; };
template <> struct CppTypeOf<DType::Int8> { using type = int8_t; };
template <> struct CppTypeOf<DType::Int16> { using type = int16_t; };
template <> struct CppTypeOf<DType::Int32> { using type = int32_t; };
template <> struct CppTypeOf<DType::Int64> { using type = int64_t; };
template <> struct CppTypeOf<DType::Float16> { using type = Half; };
template <> struct CppTypeOf<DType::BFloat16> { using type = BFloat16; };
template <> struct CppTypeOf<DType::Float32> { using type = float; };
template <> struct CppTypeOf<DType::Float64> { using type = double; };
template <DType D> using cpp_type = typename CppTypeOf<D>::type;

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::UInt8; }
template <> constexpr DType dtype_of<int8_t>() { return DType::Int8; }
template <> constexpr DType dtype_of<int16_t>() { return DType::Int16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::Int32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<Half>() { return DType::Float16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::BFloat16; }
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }

// The type arithmetic is done in: float for the 16-bit floats, the type itself otherwise.
template <typename T> struct OpMath { using type = T; };
template <> struct OpMath<Half> { using type = float; };
template <> struct OpMath<BFloat16> { using type = float; };
template <typename T> using opmath_t = typename OpMath<T>::type;

}  // namespace kiln

// Calls the generic lambda with a value of the C++ type of `dt`; the lambda takes the type
// from its argument (`[&](auto tag) { using T = decltype(tag); ... }`), which keeps it a
// template so that `if constexpr` branches invalid for some dtypes are discarded.
#define KILN_DTYPE_CASE(D, ...) \
  case D: return __VA_ARGS__(::kiln::cpp_type<D>{});
#define KILN_DISPATCH_ALL(dt, opname, ...)                                   \
  [&] {                                                                      \
    switch (dt) {                                                            \
      KILN_DTYPE_CASE(::kiln::DType::Bool, __VA_ARGS__)                      \
      KILN_DTYPE_CASE(::kiln::DType::UInt8, __VA_ARGS__)                     \
      KILN_DTYPE_CASE(::kiln::DType::Int8, __VA_ARGS__)                      \
      KILN_DTYPE_CASE(::kiln::DType::Int16, __VA_ARGS__)                     \
      KILN_DTYPE_CASE(::kiln::DType::Int32, __VA_ARGS__)                     \
      KILN_DTYPE_CASE(::kiln::DType::Int64, __VA_ARGS__)                     \
      KILN_DTYPE_CASE(::kiln::DType::Float16, __VA_ARGS__)                   \
      KILN_DTYPE_CASE(::kiln::DType::BFloat16, __VA_ARGS__)                  \
      KILN_DTYPE_CASE(::kiln::DType::Float32, __VA_ARGS__)                   \
      KILN_DTYPE_CASE(::kiln::DType::Float64, __VA_ARGS__)                   \
    }                                                                        \
    ::kiln::detail::unsupported_dtype(opname, dt);                           \
  }()
#define KILN_DISPATCH_FLOAT(dt, opname, ...)                                 \
  [&] {                                                                      \
    switch (dt) {                                                            \
      KILN_DTYPE_CASE(::kiln::DType::Float16, __VA_ARGS__)                   \
      KILN_DTYPE_CASE(::kiln::DType::BFloat16, __VA_ARGS__)                  \
      KILN_DTYPE_CASE(::kiln::DType::Float32, __VA_ARGS__)                   \
      KILN_DTYPE_CASE(::kiln::DType::Float64, __VA_ARGS__)                   \
      default: break;                                                        \
    }                                                                        \
    ::kiln::detail::unsupported_dtype(opname, dt);                           \
  }()
#define KILN_DISPATCH_INTEGRAL(dt, opname, ...)                              \
  [&] {                                                                      \
    switch (dt) {                                                            \
      KILN_DTYPE_CASE(::kiln::DType::Bool, __VA_ARGS__)                      \
      KILN_DTYPE_CASE(::kiln::DType::UInt8, __VA_ARGS__)                     \
      KILN_DTYPE_CASE(::kiln::DType::Int8, __VA_ARGS__)                      \
      KILN_DTYPE_CASE(::kiln::DType::Int16, __VA_ARGS__)                     \
      KILN_DTYPE_CASE(::kiln::DType::Int32, __VA_ARGS__)                     \
      KILN_DTYPE_CASE(::kiln::DType::Int64, __VA_ARGS__)                     \
      default: break;                                                        \
    }                                                                        \
    ::kiln::detail::unsupported_dtype(opname, dt);                           \
  }()

namespace kiln::detail {
[[noreturn]] void unsupported_dtype(std::string_view op, DType dt);
}
