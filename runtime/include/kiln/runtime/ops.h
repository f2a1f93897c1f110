// The eager operations as free functions, named as in libtorch: kiln::sin(x), kiln::add(a, b),
// kiln::matmul(a, b). Tensor's methods forward here. Broadcasting and type promotion follow
// PyTorch exactly, with Scalars treated as Python numbers.
#pragma once
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "tensor.h"

namespace kiln {

// ---- type promotion and broadcasting ----
// torch.result_type over tensors and scalars: dimensioned tensors outrank 0-d tensors, which
// outrank scalars, unless a lower-ranked operand is of a higher category (bool < int < float).
DType result_type(std::initializer_list<Tensor> tensors, std::initializer_list<Scalar> scalars = {});
std::vector<int64_t> broadcast_shapes(IntArrayRef a, IntArrayRef b, std::string_view op = "broadcast");
std::vector<Tensor> broadcast_tensors(const std::vector<Tensor>& ts);

// ---- unary ----
#define KILN_UNARY_FN(name) Tensor name(const Tensor& x);
KILN_UNARY_FN(neg) KILN_UNARY_FN(abs) KILN_UNARY_FN(sign) KILN_UNARY_FN(exp) KILN_UNARY_FN(exp2)
KILN_UNARY_FN(expm1) KILN_UNARY_FN(log) KILN_UNARY_FN(log2) KILN_UNARY_FN(log1p)
KILN_UNARY_FN(sqrt) KILN_UNARY_FN(rsqrt) KILN_UNARY_FN(reciprocal) KILN_UNARY_FN(sin)
KILN_UNARY_FN(cos) KILN_UNARY_FN(tan) KILN_UNARY_FN(asin) KILN_UNARY_FN(acos) KILN_UNARY_FN(atan)
KILN_UNARY_FN(sinh) KILN_UNARY_FN(cosh) KILN_UNARY_FN(tanh) KILN_UNARY_FN(sigmoid)
KILN_UNARY_FN(relu) KILN_UNARY_FN(silu) KILN_UNARY_FN(erf) KILN_UNARY_FN(floor)
KILN_UNARY_FN(ceil) KILN_UNARY_FN(round) KILN_UNARY_FN(trunc) KILN_UNARY_FN(isnan)
KILN_UNARY_FN(isinf) KILN_UNARY_FN(isfinite) KILN_UNARY_FN(logical_not) KILN_UNARY_FN(bitwise_not)
#undef KILN_UNARY_FN
// approximate: "none" (erf form) or "tanh".
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
// Replaces NaN by `nan` (default 0) and +-inf by `posinf`/`neginf` (default: the dtype's extremes).
Tensor nan_to_num(const Tensor& x, std::optional<double> nan = std::nullopt,
                  std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);

// ---- binary (each takes tensor-tensor, tensor-scalar and scalar-tensor) ----
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha = 1);
Tensor rsub(const Tensor& a, const Scalar& b);  // b - a
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Scalar& b);
// rounding_mode: none (true division, integers become float), "trunc" or "floor".
Tensor div(const Tensor& a, const Tensor& b, std::optional<std::string_view> rounding_mode = std::nullopt);
Tensor div(const Tensor& a, const Scalar& b, std::optional<std::string_view> rounding_mode = std::nullopt);
Tensor div(const Scalar& a, const Tensor& b, std::optional<std::string_view> rounding_mode = std::nullopt);
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor floor_divide(const Tensor& a, const Scalar& b);
Tensor remainder(const Tensor& a, const Tensor& b);  // sign of the divisor (Python %)
Tensor remainder(const Tensor& a, const Scalar& b);
Tensor fmod(const Tensor& a, const Tensor& b);       // sign of the dividend (C fmod)
Tensor fmod(const Tensor& a, const Scalar& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Scalar& b);
Tensor pow(const Scalar& a, const Tensor& b);
Tensor atan2(const Tensor& a, const Tensor& b);
Tensor hypot(const Tensor& a, const Tensor& b);      // floating dtypes only
Tensor logaddexp(const Tensor& a, const Tensor& b);  // log(exp(a) + exp(b)), floating dtypes only
Tensor maximum(const Tensor& a, const Tensor& b);  // NaN propagates
Tensor minimum(const Tensor& a, const Tensor& b);
#define KILN_CMP_FN(name)                            \
  Tensor name(const Tensor& a, const Tensor& b);     \
  Tensor name(const Tensor& a, const Scalar& b);
KILN_CMP_FN(eq) KILN_CMP_FN(ne) KILN_CMP_FN(lt) KILN_CMP_FN(le) KILN_CMP_FN(gt) KILN_CMP_FN(ge)
KILN_CMP_FN(bitwise_and) KILN_CMP_FN(bitwise_or) KILN_CMP_FN(bitwise_xor)
#undef KILN_CMP_FN
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);

// ---- ternary ----
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b);
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b);
Tensor where(const Tensor& cond, const Scalar& a, const Scalar& b);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
Tensor clamp(const Tensor& x, const std::optional<Tensor>& min, const std::optional<Tensor>& max);
Tensor lerp(const Tensor& start, const Tensor& end, const Scalar& weight);
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value = 1);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& v);

// ---- reductions ----
Tensor sum(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false,
           std::optional<DType> dtype = std::nullopt);
Tensor nansum(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
// (amin, amax) along `dim`, or over every element where there is none (PyTorch's aminmax).
std::tuple<Tensor, Tensor> aminmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
// p = 1, 2 or +-infinity (any other p > 0 works too).
Tensor norm(const Tensor& x, double p = 2, IntArrayRef dims = {}, bool keepdim = false);
Tensor var(const Tensor& x, IntArrayRef dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, IntArrayRef dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor any(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor all(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor logsumexp(const Tensor& x, IntArrayRef dims, bool keepdim = false);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor cumsum(const Tensor& x, int64_t dim);

// ---- linear algebra (OpenBLAS for float32/float64) ----
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& beta = 1,
             const Scalar& alpha = 1);
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands);
// The BLAS the products run on, as loaded: e.g. "OpenBLAS 0.3.21 ... (OpenMP build)".
std::string blas_library();

// ---- joining and indexing ----
Tensor cat(const std::vector<Tensor>& ts, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& ts, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);

// ---- in place ----
Tensor& relu_(Tensor& x);
Tensor& clamp_(Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);

// ---- operators ----
Tensor operator-(const Tensor& x);
Tensor operator~(const Tensor& x);
Tensor operator!(const Tensor& x);
#define KILN_BINARY_OPERATOR(op, fn)                                            \
  inline Tensor operator op(const Tensor& a, const Tensor& b) { return fn(a, b); } \
  inline Tensor operator op(const Tensor& a, const Scalar& b) { return fn(a, b); }
KILN_BINARY_OPERATOR(+, add) KILN_BINARY_OPERATOR(-, sub) KILN_BINARY_OPERATOR(*, mul)
KILN_BINARY_OPERATOR(/, div) KILN_BINARY_OPERATOR(%, remainder)
KILN_BINARY_OPERATOR(==, eq) KILN_BINARY_OPERATOR(!=, ne) KILN_BINARY_OPERATOR(<, lt)
KILN_BINARY_OPERATOR(<=, le) KILN_BINARY_OPERATOR(>, gt) KILN_BINARY_OPERATOR(>=, ge)
KILN_BINARY_OPERATOR(&, bitwise_and) KILN_BINARY_OPERATOR(|, bitwise_or)
KILN_BINARY_OPERATOR(^, bitwise_xor)
#undef KILN_BINARY_OPERATOR
inline Tensor operator+(const Scalar& a, const Tensor& b) { return add(b, a); }
inline Tensor operator*(const Scalar& a, const Tensor& b) { return mul(b, a); }
inline Tensor operator-(const Scalar& a, const Tensor& b) { return rsub(b, a); }
inline Tensor operator/(const Scalar& a, const Tensor& b) { return div(a, b); }
inline Tensor operator==(const Scalar& a, const Tensor& b) { return eq(b, a); }
inline Tensor operator!=(const Scalar& a, const Tensor& b) { return ne(b, a); }
inline Tensor operator<(const Scalar& a, const Tensor& b) { return gt(b, a); }
inline Tensor operator<=(const Scalar& a, const Tensor& b) { return ge(b, a); }
inline Tensor operator>(const Scalar& a, const Tensor& b) { return lt(b, a); }
inline Tensor operator>=(const Scalar& a, const Tensor& b) { return le(b, a); }

// ---- data-dependent output shapes (runtime/src/select.cpp) ----
// The output's shape depends on the values, so these cannot be traced into a graph: while
// tracing they compute eagerly and report themselves to the tracer
// (trace::Recorder::data_dependent, with `where` as the call site).
// The int64 [n, x.dim()] indices of x's nonzero elements (NaN counts), in row-major order.
Tensor nonzero(const Tensor& x, std::source_location where = std::source_location::current());
// The 1-d tensor of x's elements where the bool `mask` is true; x and mask broadcast together.
Tensor masked_select(const Tensor& x, const Tensor& mask,
                     std::source_location where = std::source_location::current());
// x's distinct values, 1-d, x's dtype: ascending (NaNs last, each NaN distinct), or in order of
// first occurrence when `sorted` is false. unique_inverse also returns, shaped like x, the
// int64 index of each element's value in the values.
Tensor unique(const Tensor& x, bool sorted = true,
              std::source_location where = std::source_location::current());
std::tuple<Tensor, Tensor> unique_inverse(const Tensor& x, bool sorted = true,
                                          std::source_location where = std::source_location::current());

}  // namespace kiln
