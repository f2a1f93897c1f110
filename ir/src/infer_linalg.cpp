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

void check_mm(const Ctx& c, const Type& a, const Type& b) {
  if (a.sizes.size() != 2) c.fail("self must be a matrix, got a ", a.sizes.size(), "-D tensor of shape ", a.sizes);
  if (b.sizes.size() != 2) c.fail("mat2 must be a matrix, got a ", b.sizes.size(), "-D tensor of shape ", b.sizes);
  if (a.sizes[1] != b.sizes[0])
    c.fail("mat1 and mat2 shapes cannot be multiplied (", a.sizes[0], "x", a.sizes[1], " and ", b.sizes[0], "x", b.sizes[1], ")");
  if (a.dtype != b.dtype)
    c.fail("expected mat1 and mat2 to have the same dtype, but got: ", name(a.dtype), " != ", name(b.dtype));
}

Type mm(const Ctx& c, const Type& a, const Type& b) {
  check_mm(c, a, b);
  check_gemm_dtype(c, a.dtype, 1, a.sizes[0], a.sizes[1], b.sizes[1]);
  return c.dense(a.dtype, {a.sizes[0], b.sizes[1]}, common_device(c, {a, b}));
}

Type bmm(const Ctx& c, const Type& a, const Type& b) {
  if (a.sizes.size() != 3) c.fail("batch1 must be a 3D tensor, got shape ", a.sizes);
  if (b.sizes.size() != 3) c.fail("batch2 must be a 3D tensor, got shape ", b.sizes);
  if (a.sizes[0] != b.sizes[0])
    c.fail("batch1 and batch2 must have same number of batches, got ", a.sizes[0], " and ", b.sizes[0]);
  if (a.sizes[2] != b.sizes[1])
    c.fail("Expected size for first two dimensions of batch2 tensor to be: [", a.sizes[0], ", ", a.sizes[2],
           "] but got: [", b.sizes[0], ", ", b.sizes[1], "].");
  if (a.dtype != b.dtype) c.fail("expected scalar type ", name(a.dtype), " but found ", name(b.dtype));
  check_gemm_dtype(c, a.dtype, a.sizes[0], a.sizes[1], a.sizes[2], b.sizes[2]);
  return c.dense(a.dtype, {a.sizes[0], a.sizes[1], b.sizes[2]}, common_device(c, {a, b}));
}

// matmul: every rank case; the result is always a row-major product (a view of mm's or bmm's
// fresh output with size-1 dims removed, which leaves the strides row-major).
Type matmul(const Ctx& c, const Type& a, const Type& b) {
  const int64_t da = int64_t(a.sizes.size()), db = int64_t(b.sizes.size());
  if (da == 0 || db == 0) c.fail("both arguments to matmul need to be at least 1D, but they are ", da, "D and ", db, "D");
  if (a.dtype != b.dtype) c.fail("expected scalar type ", name(a.dtype), " but found ", name(b.dtype));
  Device dev = common_device(c, {a, b});
  auto out = [&](DType dt, Sizes s) { return c.dense(dt, s, dev); };
  if (da == 1 && db == 1) {
    if (a.sizes[0] != b.sizes[0])
      c.fail("inconsistent tensor size, expected tensor [", a.sizes[0], "] and src [", b.sizes[0],
             "] to have the same number of elements, but got ", a.sizes[0], " and ", b.sizes[0], " elements respectively");
    check_gemm_dtype(c, a.dtype, 1, 1, a.sizes[0], 1);
    return out(a.dtype, {});
  }
  if (da == 2 && db == 1) {
    if (a.sizes[1] != b.sizes[0])
      c.fail("size mismatch, got input (", a.sizes[0], "), mat (", a.sizes[0], "x", a.sizes[1], "), vec (", b.sizes[0], ")");
    check_gemm_dtype(c, a.dtype, 1, a.sizes[0], a.sizes[1], 1);
    return out(a.dtype, {a.sizes[0]});
  }
  if (da == 1 && db == 2) {  // mm(a.unsqueeze(0), b).squeeze(0)
    Type row = view_of(a, {1, a.sizes[0]}, {c.mul(a.sizes[0], a.strides[0]), a.strides[0]});
    return out(a.dtype, {mm(c, row, b).sizes[1]});
  }
  if (da == 2 && db == 2) return mm(c, a, b);
  // batched: a 1-d operand becomes a matrix and its extra dim is dropped from the result
  Sizes A = a.sizes, B = b.sizes;
  if (da == 1) A.insert(A.begin(), 1);
  if (db == 1) B.push_back(1);
  int64_t n = A[A.size() - 2], k = A.back(), k2 = B[B.size() - 2], m = B.back();
  if (k != k2) c.fail("mat1 and mat2 shapes cannot be multiplied (", n, "x", k, " and ", k2, "x", m, ")");
  Sizes shape;
  if (db <= 2 && da >= 3) {
    // [..., n, k] @ [k, m] folds the batch into the rows: A.reshape({-1, k}) refuses k == 0
    Sizes rows = infer_size(c, {-1, k}, c.numel(A));
    check_gemm_dtype(c, a.dtype, 1, rows[0], k, m);
    shape.assign(A.begin(), A.end() - 1);
    shape.push_back(m);
    if (db == 1) shape.pop_back();
    return out(a.dtype, shape);
  }
  Sizes batch = broadcast(c, Sizes(A.begin(), A.end() - 2), Sizes(B.begin(), B.end() - 2));
  check_gemm_dtype(c, a.dtype, c.numel(batch), n, k, m);
  shape = batch;
  if (da != 1) shape.push_back(n);
  if (db != 1) shape.push_back(m);
  c.numel(shape);  // the product's size must fit
  return out(a.dtype, shape);
}

Type addmm(const Ctx& c) {
  const Type &self = c.tensor(0), &a = c.tensor(1), &b = c.tensor(2);
  check_mm(c, a, b);
  if (self.dtype != a.dtype)
    c.fail("expected self and mat1 to have the same dtype, but got: ", name(self.dtype), " != ", name(a.dtype));
  Sizes shape{a.sizes[0], b.sizes[1]};
  if (broadcast(c, self.sizes, shape) != shape)
    c.fail("self of shape ", self.sizes, " cannot be broadcast to the product's shape ", shape);
  // bool: gemm_into refuses a non-empty product, and scaling by a nonzero beta (mul_) an empty one
  Scalar beta = *c.number("beta");
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
    Sizes ns, nst;
    for (size_t k = 0; k < x.sizes.size(); ++k)
      if (k != i && k != j) ns.push_back(x.sizes[k]), nst.push_back(x.strides[k]);
    ns.push_back(x.sizes[i]);
    nst.push_back(c.add(x.strides[i], x.strides[j]));
    return view_of(x, ns, nst);
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
  return einsum_labels::run_einsum(c.req<std::string>("equation"), ops, steps);
}

}  // namespace kiln::ir::infer_detail
