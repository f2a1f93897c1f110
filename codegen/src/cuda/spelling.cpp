// CUDA C++ spellings of types, literals and reducers (spelling.h).
#include "spelling.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace kiln::codegen::cuda_spelling {

const char* ctype(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "unsigned char";
    case DType::Int8: return "signed char";
    case DType::Int16: return "short";
    case DType::Int32: return "int";
    case DType::Int64: return "long long";
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::Float16:
    case DType::BFloat16: return "float";
  }
  return "float";
}
const char* storage_ctype(DType t) {
  switch (t) {
    case DType::Float16:
    case DType::BFloat16: return "unsigned short";
    case DType::Bool: return "unsigned char";
    default: return ctype(t);
  }
}

std::string hexfloat(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

std::string literal(DType t, double f, int64_t i) {
  if (t == DType::Bool) return i ? "true" : "false";
  if (is_floating(t)) {
    const char* T = ctype(t);
    if (std::isnan(f)) return std::string("kiln_nan<") + T + ">()";
    if (std::isinf(f)) return std::string(f < 0 ? "-" : "") + "kiln_inf<" + T + ">()";
    if (is_f32(t)) return hexfloat(double(float(f))) + "f";
    return hexfloat(f);
  }
  if (i == std::numeric_limits<int64_t>::min()) return std::string("(") + ctype(t) + ")(-9223372036854775807LL - 1)";
  return std::string("(") + ctype(t) + ")" + std::to_string(i) + "LL";
}

std::string int_min(DType t) {
  switch (t) {
    case DType::Int8: return "(signed char)-128";
    case DType::Int16: return "(short)-32768";
    case DType::Int32: return "(-2147483647 - 1)";
    case DType::Int64: return "(-9223372036854775807LL - 1)";
    case DType::Bool: return "false";
    default: return std::string("(") + ctype(t) + ")0";
  }
}
std::string int_max(DType t) {
  switch (t) {
    case DType::Int8: return "(signed char)127";
    case DType::Int16: return "(short)32767";
    case DType::Int32: return "2147483647";
    case DType::Int64: return "9223372036854775807LL";
    case DType::UInt8: return "(unsigned char)255";
    case DType::Bool: return "true";
    default: return "0";
  }
}

std::string identity(const Instr& in) {
  const bool fl = is_floating(in.type);
  const std::string T = ctype(in.type);
  switch (in.reducer) {
    case Reducer::Sum: return "(" + T + ")0";
    case Reducer::Prod: return "(" + T + ")1";
    case Reducer::Max: return fl ? "-kiln_inf<" + T + ">()" : int_min(in.type);
    case Reducer::Min: return fl ? "kiln_inf<" + T + ">()" : int_max(in.type);
    case Reducer::Any: return "false";
    case Reducer::All: return "true";
  }
  return "0";
}

std::string combine(const Instr& in, const std::string& a, const std::string& b) {
  const bool fl = is_floating(in.type);
  const std::string T = ctype(in.type);
  switch (in.reducer) {
    case Reducer::Sum: return fl ? a + " + " + b : "kiln_add<" + T + ">(" + a + ", " + b + ")";
    case Reducer::Prod: return fl ? a + " * " + b : "kiln_mul<" + T + ">(" + a + ", " + b + ")";
    case Reducer::Max: return "kiln_max<" + T + ">(" + a + ", " + b + ")";
    case Reducer::Min: return "kiln_min<" + T + ">(" + a + ", " + b + ")";
    case Reducer::Any: return a + " || " + b;
    case Reducer::All: return a + " && " + b;
  }
  return a;
}

}  // namespace kiln::codegen::cuda_spelling
