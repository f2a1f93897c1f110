// Type inference for the matmul family and einsum (see infer_context.h and kiln/ir/infer.h).
#include <map>

#include "infer_context.h"
#include "kiln/runtime/einsum_plan.h"

namespace kiln::ir::infer_detail {

// ---------------------------------------------------------------- linear algebra (linalg.cpp)

// gemm_into refuses bool, but only once it has a non-empty product to compute (beta = 0).
void check_gemm_dtype(const Ctx& c, DType dt, int64_t batch, int64_t n, int64_t k, int64_t m) {
  if (dt == kBool && batch > 0 && n > 0 && m > 0 && k > 0) c.fail("\"addmm_impl_cpu_\" not implemented for 'bool'");
}

Type mm(const Ctx& c, const Type& a, const Type& b) {
  rules::check_mm(a.sizes, b.sizes, a.dtype, b.dtype, c.failer());
  check_gemm_dtype(c, a.dtype, 1, a.sizes[0], a.sizes[1], b.sizes[1]);
  return c.dense(a.dtype, {a.sizes[0], b.sizes[1]}, common_device(c, {a, b}));
}

Type bmm(const Ctx& c, const Type& a, const Type& b) {
  Sizes shape = rules::bmm_shape(a.sizes, b.sizes, a.dtype, b.dtype, c.failer());
  check_gemm_dtype(c, a.dtype, a.sizes[0], a.sizes[1], a.sizes[2], b.sizes[2]);
  return c.dense(a.dtype, shape, common_device(c, {a, b}));
}

// matmul: every rank case; the result is always a row-major product (a view of mm's or bmm's
// fresh output with size-1 dims removed, which leaves the strides row-major). Its product is
// empty, and bool accepted, exactly when the result has no element or the inner size is 0.
Type matmul(const Ctx& c, const Type& a, const Type& b) {
  Sizes shape = rules::matmul_shape(a.sizes, b.sizes, a.dtype, b.dtype, c.failer());
  Device dev = common_device(c, {a, b});
  if (c.numel(shape) > 0) check_gemm_dtype(c, a.dtype, 1, 1, a.sizes.back(), 1);
  return c.dense(a.dtype, shape, dev);
}

Type addmm(const Ctx& c) {
  const Type &self = c.tensor(0), &a = c.tensor(1), &b = c.tensor(2);
  Sizes shape = rules::addmm_shape(self.sizes, a.sizes, b.sizes, self.dtype, a.dtype, b.dtype, c.failer());
  // bool: gemm_into refuses a non-empty product, and scaling by a nonzero beta (mul_) an empty one
  Scalar beta = c.decoded<OpId::Addmm>().beta;
  if (a.dtype == kBool && shape[0] > 0 && shape[1] > 0 && (a.sizes[1] > 0 || beta.to_double() != 0))
    c.fail("\"addmm_impl_cpu_\" not implemented for 'bool'");
  return c.dense(a.dtype, shape, common_device(c, {self, a, b}));
}

// ---------------------------------------------------------------- einsum (einsum.cpp)

// einsum's steps (kiln/runtime/einsum_plan.h) replayed on types: its result is the final
// permute of the last step's tensor, so its strides (and, for a lone operand that is only
// permuted or diagonalised, the aliasing) follow from the steps' metadata.
struct TypeOps {
  const Ctx& c;
  // The equation is read by the runtime's own parser; its errors become inference errors.
  std::vector<int> scan_term(std::string_view term) {
    try {
      return einsum_labels::scan_term(term);
    } catch (const Error& e) {
      c.fail(e.what());
    }
  }
  int64_t rank(const Type& x) { return int64_t(x.sizes.size()); }
  int64_t size(const Type& x, size_t d) { return x.sizes[d]; }
  // diagonal(0, i, j): dims i and j dropped, their diagonal appended, its stride their sum
  Type diagonal(const Type& x, size_t i, size_t j) {
    rules::Strided d = rules::diagonal({x.sizes, x.strides, 0}, 0, int64_t(i), int64_t(j), c.failer());
    return view_of(x, d.sizes, d.strides);
  }
  // sum: a fresh tensor in sum's dtype
  Type sum(const Type& x, const std::vector<int64_t>& dims) {
    Sizes sizes;
    for (size_t d = 0; d < x.sizes.size(); ++d)
      if (std::find(dims.begin(), dims.end(), int64_t(d)) == dims.end()) sizes.push_back(x.sizes[d]);
    return c.dense(sum_dtype(x.dtype), sizes, x.device);
  }
  // (the product reads its operands whole: their layout after reshape does not matter here)
  Type arrange(const Type& x, const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>& flat) {
    return view_of(x, flat, c.dense_strides(flat));
  }
  Type bmm(const Type& a, const Type& b, bool) { return infer_detail::bmm(c, a, b); }
  Type view(const Type& x, const std::vector<int64_t>& sizes) { return c.dense(x.dtype, sizes, x.device); }
  Type permute(const Type& x, const std::vector<int64_t>& perm) {
    Sizes sizes, strides;
    for (int64_t d : perm) sizes.push_back(x.sizes[size_t(d)]), strides.push_back(x.strides[size_t(d)]);
    return view_of(x, sizes, strides);
  }
  template <typename... P>
  [[noreturn]] void fail(const P&... parts) {
    c.fail(parts...);
  }
};

Type einsum(const Ctx& c) {
  if (c.in.empty()) c.fail("einsum(): must provide at least one operand");
  std::vector<Type> ops;
  for (size_t i = 0; i < c.in.size(); ++i) {
    ops.push_back(c.tensor(i));
    ops.back().wrapped = false;
  }
  for (const Type& t : ops)
    if (t.dtype != ops[0].dtype) c.fail("expected scalar type ", name(ops[0].dtype), " but found ", name(t.dtype));
  common_device(c, ops);
  TypeOps steps{c};
  return einsum_labels::run_einsum(c.decoded<OpId::Einsum>().equation, ops, steps);
}

}  // namespace kiln::ir::infer_detail
