// How render.cpp spells kiln's types, literals and reducers in CUDA C++: the compute and
// storage types of each dtype, literals of a compute type (NaN and infinities through the
// prelude's helpers, floats in hex so that they round-trip), and a reducer's identity and
// combine step.
#pragma once
#include <cstdint>
#include <string>

#include "../expr.h"

namespace kiln::codegen::cuda_spelling {

// The compute type of dtype t (16-bit floats compute as float).
const char* ctype(DType t);
// How an operand of dtype t is stored: 16-bit floats as their bits, bool as a byte.
const char* storage_ctype(DType t);
inline bool is_unsigned(DType t) { return t == DType::UInt8 || t == DType::Bool; }
inline bool is_f32(DType t) { return t == DType::Float32; }
std::string hexfloat(double v);
// A literal of compute type t.
std::string literal(DType t, double f, int64_t i);
// The smallest and largest values of integer (or bool) type t.
std::string int_min(DType t);
std::string int_max(DType t);
// The reducer's identity, of the instruction's type.
std::string identity(const Instr& in);
// The reducer as an expression of a and b (the combine step, and the lambda a warp or block
// reduction takes).
std::string combine(const Instr& in, const std::string& a, const std::string& b);

}  // namespace kiln::codegen::cuda_spelling
