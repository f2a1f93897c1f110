#include "kiln/runtime/dtype.h"

#include <array>

#include "kiln/runtime/error.h"

namespace kiln {

namespace {
constexpr std::array<std::string_view, kNumDTypes> kNames = {
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"};
}

std::string_view name(DType t) { return kNames[size_t(t)]; }

DType dtype_from_name(std::string_view s) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (kNames[i] == s) return DType(i);
  if (s == "float" || s == "float32") return DType::Float32;
  if (s == "double") return DType::Float64;
  if (s == "half") return DType::Float16;
  if (s == "long") return DType::Int64;
  if (s == "int") return DType::Int32;
  KILN_FAIL("dtype", "unknown dtype name '", s, "'");
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // rows/cols: b1 u1 i1 i2 i4 i8 f2 bf f4 f8 (PyTorch's table without complex/quantized)
  using D = DType;
  constexpr D b1 = D::Bool, u1 = D::UInt8, i1 = D::Int8, i2 = D::Int16, i4 = D::Int32,
              i8 = D::Int64, f2 = D::Float16, bf = D::BFloat16, f4 = D::Float32, f8 = D::Float64;
  static constexpr D table[kNumDTypes][kNumDTypes] = {
      /* b1 */ {b1, u1, i1, i2, i4, i8, f2, bf, f4, f8},
      /* u1 */ {u1, u1, i2, i2, i4, i8, f2, bf, f4, f8},
      /* i1 */ {i1, i2, i1, i2, i4, i8, f2, bf, f4, f8},
      /* i2 */ {i2, i2, i2, i2, i4, i8, f2, bf, f4, f8},
      /* i4 */ {i4, i4, i4, i4, i4, i8, f2, bf, f4, f8},
      /* i8 */ {i8, i8, i8, i8, i8, i8, f2, bf, f4, f8},
      /* f2 */ {f2, f2, f2, f2, f2, f2, f2, f4, f4, f8},
      /* bf */ {bf, bf, bf, bf, bf, bf, f4, bf, f4, f8},
      /* f4 */ {f4, f4, f4, f4, f4, f4, f4, f4, f4, f8},
      /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, f8, f8},
  };
  return table[size_t(a)][size_t(b)];
}

bool can_cast(DType from, DType to) {
  if (is_floating(from) && is_integral(to)) return false;
  if (from != DType::Bool && to == DType::Bool) return false;
  return true;
}

namespace detail {
void unsupported_dtype(std::string_view op, DType dt) {
  KILN_FAIL(op, "\"", op, "\" not implemented for '", name(dt), "'");
}
std::string shape_str(std::span<const int64_t> s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}
}  // namespace detail

}  // namespace kiln
