// Shared plumbing of the eager ops (internal): operands that may be Python-style scalars,
// result-type computation, output allocation and the in-place protocol.
#pragma once
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cpu/loop.h"
#include "kiln/runtime/factories.h"
#include "kiln/runtime/ops.h"
#include "shape.h"
#include "trace_ops.h"

namespace kiln::detail {

// An operand: a tensor, or a host scalar wrapped as a 0-d tensor that keeps full precision
// (int64/float64/bool) but promotes like a Python number.
struct Arg {
  Tensor t;
  bool wrapped = false;
  bool keep_dtype = false;  // a mask or condition: not converted to the compute dtype
  Arg(const Tensor& x) : t(x) {}
  Arg(const Scalar& s);
};

// empty() for a factory or an op named `op` (runtime/src/factories.cpp): sizes whose element or
// byte count overflows int64 are refused under that name. Not traced.
Tensor empty_for(IntArrayRef sizes, TensorOptions opts, std::string_view op);

DType result_type(std::span<const Arg> args);
inline DType result_type(std::initializer_list<Arg> args) { return result_type(std::span<const Arg>(args.begin(), args.size())); }
std::vector<int64_t> broadcast_all(std::initializer_list<Arg> args, std::string_view op);

// Converts a stored value to another stored type with C++ semantics (bool: != 0).
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) return v;
  else if constexpr (std::is_same_v<To, bool>) return opmath_t<From>(v) != opmath_t<From>(0);
  else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) return To(float(opmath_t<From>(v)));
  else return static_cast<To>(opmath_t<From>(v));
}

// The tensor's data as dtype `dt` (a converted copy only when it differs).
inline Tensor as_dtype(const Tensor& t, DType dt) { return t.dtype() == dt ? t : t.to(dt); }

// An operand of an out-of-place op, converted to the compute dtype.
inline Tensor prepared(const Arg& a, DType dt) { return a.keep_dtype ? a.t : as_dtype(a.t, dt); }
inline Arg kept(const Tensor& t) {
  Arg a(t);
  a.keep_dtype = true;
  return a;
}

// go(U{}) with U the unsigned integer of an element of `w` bytes (1, 2, 4 or 8): for the ops
// that only move values (where, masked_fill, copies by tiles), dispatched on the storage size.
template <typename F>
void by_storage_size(int64_t w, F go) {
  switch (w) {
    case 1: go(uint8_t{}); break;
    case 2: go(uint16_t{}); break;
    case 4: go(uint32_t{}); break;
    default: go(uint64_t{}); break;
  }
}

// The first element of `t`'s view on its own device, without data_ptr()'s host-access hook
// (and without its refusal of GPU tensors).
inline char* first_element(const Tensor& t) {
  auto* base = static_cast<char*>(t.storage()->data());
  return base ? base + t.storage_offset() * t.element_size() : nullptr;
}

// Checks that the CPU eager path can run the op on these tensors.
void check_cpu(std::string_view op, std::initializer_list<Arg> args);

// einsum's contraction on the operands' own device (runtime/src/einsum.cpp). With `into`
// (contiguous, the result's dtype and element count, sharing no byte with an operand), the last
// contraction's product is written there when its labels come out in the result's order: the
// result is then a view of `into`.
Tensor einsum_impl(std::string_view eq, const std::vector<Tensor>& operands, const Tensor* into = nullptr);
// bmm's product written into `into` (as einsum_impl's), seen with the product's shape.
Tensor bmm_into(const Tensor& a, const Tensor& b, const Tensor& into);

// copy_ where either tensor is on a GPU (runtime/src/cuda/transfer.cpp): the values are
// converted and broadcast on the host and written through dst's strides.
Tensor& copy_across_devices(Tensor& dst, const Tensor& src);

// The in-place protocol: `self` receives a result computed in dtype `compute` with broadcast
// shape `shape`. Checks the cast and the shape; returns whether `self` can be written directly.
bool check_inplace(std::string_view op, const Tensor& self, DType compute, IntArrayRef shape);
// An input that shares memory with the output but is not the identical view is copied first,
// so an in-place kernel never reads an element it has already overwritten.
Tensor unalias(const Tensor& out, const Tensor& in);
// Refuses to write into a tensor where two indices reach one memory location (an expand()).
void check_no_internal_overlap(std::string_view op, const Tensor& out);

template <typename T> constexpr bool is_reduced_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

}  // namespace kiln::detail
