// Type inference for the matmul family and einsum (see infer_context.h and kiln/ir/infer.h).
#include <map>

#include "infer_context.h"
#include "kiln/runtime/einsum_labels.h"

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

// einsum diagonalises, sums and contracts step by step; its result is the final permute of
// the last step's tensor, so its strides (and, for a lone operand that is only permuted or
// diagonalised, the aliasing) follow from replaying those steps on metadata.
using einsum_labels::kEllipsis;
using einsum_labels::label_char;

struct Term {
  Type t;
  std::vector<int> labels;  // one per dim of t
};

// The equation is read by the runtime's own parser; its errors become inference errors.
std::vector<int> scan_term(const Ctx& c, std::string_view term) {
  try {
    return einsum_labels::scan_term(term);
  } catch (const Error& e) {
    c.fail(e.what());
  }
}
using einsum_labels::expand_ellipsis;

// take_diagonals: a label repeated within an operand becomes the diagonal of those two dims.
Term take_diagonals(const Ctx& c, Term x) {
  for (bool again = true; again;) {
    again = false;
    for (size_t i = 0; i < x.labels.size() && !again; ++i)
      for (size_t j = i + 1; j < x.labels.size() && !again; ++j) {
        if (x.labels[i] != x.labels[j]) continue;
        if (x.t.sizes[i] != x.t.sizes[j])
          c.fail("subscript ", label_char(x.labels[i]), " is repeated for an operand but the sizes don't match, ",
                 x.t.sizes[i], " != ", x.t.sizes[j]);
        Sizes ns, nst;
        for (size_t k = 0; k < x.labels.size(); ++k)
          if (k != i && k != j) ns.push_back(x.t.sizes[k]), nst.push_back(x.t.strides[k]);
        ns.push_back(x.t.sizes[i]);
        nst.push_back(c.add(x.t.strides[i], x.t.strides[j]));
        int l = x.labels[i];
        x.labels.erase(x.labels.begin() + int64_t(j));
        x.labels.erase(x.labels.begin() + int64_t(i));
        x.labels.push_back(l);
        x.t = view_of(x.t, ns, nst);
        again = true;
      }
  }
  return x;
}

bool has_label(const std::vector<int>& v, int l) { return std::find(v.begin(), v.end(), l) != v.end(); }

// sum_unneeded: sums the dims whose labels are not in `keep` (a fresh tensor, sum's dtype).
Term sum_unneeded(const Ctx& c, const Term& x, const std::vector<int>& keep) {
  Term r{x.t, {}};
  Sizes sizes;
  for (size_t d = 0; d < x.labels.size(); ++d)
    if (has_label(keep, x.labels[d])) r.labels.push_back(x.labels[d]), sizes.push_back(x.t.sizes[d]);
  if (r.labels.size() == x.labels.size()) return x;
  r.t = c.dense(sum_dtype(x.t.dtype), sizes, x.t.device);
  return r;
}

int64_t size_of(const Term& x, int label) {
  auto it = std::find(x.labels.begin(), x.labels.end(), label);
  return it == x.labels.end() ? 1 : x.t.sizes[size_t(it - x.labels.begin())];
}

// contract: one bmm over (batch, left, contracted) x (batch, contracted, right).
Term contract(const Ctx& c, const Term& a, const Term& b, const std::vector<int>& keep) {
  std::vector<int> batch, left, con, right;
  for (int l : a.labels) {
    if (has_label(b.labels, l)) (has_label(keep, l) ? batch : con).push_back(l);
    else left.push_back(l);
  }
  for (int l : b.labels)
    if (!has_label(a.labels, l)) right.push_back(l);
  auto full = [&](int l) { return std::max(size_of(a, l), size_of(b, l)); };
  // arrange: permute, expand size-1 dims to the other operand's size, flatten each group
  auto arrange = [&](const Term& x, std::initializer_list<const std::vector<int>*> groups) {
    for (int l : x.labels)
      if (size_of(x, l) != full(l) && size_of(x, l) != 1)
        c.fail("the expanded size of the tensor (", full(l), ") must match the existing size (", size_of(x, l),
               ") for subscript ", label_char(l));
    Sizes flat;
    for (auto* g : groups) {
      int64_t n = 1;
      for (int l : *g) n = c.mul(n, full(l));
      flat.push_back(n);
    }
    return view_of(x.t, flat, c.dense_strides(flat));
  };
  Type A = arrange(a, {&batch, &left, &con}), B = arrange(b, {&batch, &con, &right});
  Type r = bmm(c, A, B);
  Term out{r, {}};
  Sizes shape;
  for (auto* g : {&batch, &left, &right})
    for (int l : *g) shape.push_back(full(l)), out.labels.push_back(l);
  out.t = c.dense(r.dtype, shape, r.device);
  return out;
}

Type einsum(const Ctx& c) {
  if (c.in.empty()) c.fail("einsum(): must provide at least one operand");
  std::vector<Type> ops;
  for (size_t i = 0; i < c.in.size(); ++i) ops.push_back(c.tensor(i));
  for (const Type& t : ops)
    if (t.dtype != ops[0].dtype) c.fail("expected scalar type ", name(ops[0].dtype), " but found ", name(t.dtype));
  common_device(c, ops);
  std::string eq = c.req<std::string>("equation");
  size_t arrow = eq.find("->");
  std::string_view lhs = std::string_view(eq).substr(0, arrow);
  std::vector<std::vector<int>> scanned;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    scanned.push_back(scan_term(c, lhs.substr(start, comma == std::string_view::npos ? comma : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (scanned.size() != ops.size())
    c.fail("einsum(): more operands were provided than specified in the equation (equation has ", scanned.size(),
           " terms, got ", ops.size(), " operands)");
  int64_t max_ell = 0;
  std::vector<int64_t> ell(ops.size(), 0);
  for (size_t i = 0; i < ops.size(); ++i) {
    int64_t explicit_labels = std::count_if(scanned[i].begin(), scanned[i].end(), [](int l) { return l >= 0; });
    bool has_ell = has_label(scanned[i], -1);
    ell[i] = int64_t(ops[i].sizes.size()) - explicit_labels;
    if (has_ell ? ell[i] < 0 : ell[i] != 0)
      c.fail("the number of subscripts in the equation (", explicit_labels, ") does not match the number of dimensions (",
             ops[i].sizes.size(), ") for operand ", i, has_ell ? "" : " and no ellipsis was given");
    max_ell = std::max(max_ell, ell[i]);
  }
  std::vector<Term> terms;
  std::map<int, int> counts;
  for (size_t i = 0; i < ops.size(); ++i) {
    Term t{ops[i], expand_ellipsis(scanned[i], ell[i], max_ell)};
    t.t.wrapped = false;
    for (int l : t.labels) ++counts[l];
    terms.push_back(take_diagonals(c, t));
  }
  std::vector<int> out;
  if (arrow != std::string::npos) {
    out = expand_ellipsis(scan_term(c, std::string_view(eq).substr(arrow + 2)), max_ell, max_ell);
    for (int l : out) {
      if (!counts.count(l))
        c.fail("einsum(): output subscript ", label_char(l), " does not appear in the equation for any input operand");
      if (std::count(out.begin(), out.end(), l) != 1)
        c.fail("einsum(): output subscript ", label_char(l), " appears more than once in the output");
    }
  } else {
    // implicit output: ellipsis dims, then labels seen exactly once, in label order
    for (int64_t e = 0; e < max_ell; ++e) out.push_back(kEllipsis + int(e));
    for (auto& [l, n] : counts)
      if (n == 1 && l < kEllipsis) out.push_back(l);
  }
  // labels still needed after operand i: the output's and those of later operands
  auto needed_after = [&](size_t i) {
    std::vector<int> keep = out;
    for (size_t j = i + 1; j < terms.size(); ++j) keep.insert(keep.end(), terms[j].labels.begin(), terms[j].labels.end());
    return keep;
  };
  std::vector<int> keep0 = needed_after(0);
  if (terms.size() > 1) keep0.insert(keep0.end(), terms[1].labels.begin(), terms[1].labels.end());
  Term acc = sum_unneeded(c, terms[0], keep0);
  for (size_t i = 1; i < terms.size(); ++i) {
    std::vector<int> keep = needed_after(i);
    std::vector<int> keep_b = keep;
    keep_b.insert(keep_b.end(), acc.labels.begin(), acc.labels.end());
    acc = contract(c, acc, sum_unneeded(c, terms[i], keep_b), keep);
  }
  acc = sum_unneeded(c, acc, out);
  // the final permute into the output's label order
  if (out.size() != acc.labels.size())
    c.fail("number of dims don't match in permute: got ", out.size(), " dims for a tensor of shape ", acc.t.sizes);
  Sizes sizes, strides;
  for (int l : out) {
    auto it = std::find(acc.labels.begin(), acc.labels.end(), l);
    if (it == acc.labels.end()) c.fail("einsum(): output subscript ", label_char(l), " has no dimension in the result");
    sizes.push_back(acc.t.sizes[size_t(it - acc.labels.begin())]);
    strides.push_back(acc.t.strides[size_t(it - acc.labels.begin())]);
  }
  return view_of(acc.t, sizes, strides);
}

}  // namespace kiln::ir::infer_detail
