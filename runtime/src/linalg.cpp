// Matrix products: mm, bmm, matmul (every rank case PyTorch has), addmm. float32/float64 go
// through OpenBLAS; 16-bit floats through float32 OpenBLAS; integers through a blocked loop.
#include <cblas.h>

#include "ops_common.h"

namespace kiln {

using namespace detail;

namespace {

// A matrix view BLAS can read directly: row-major with a leading dim, or its transpose.
struct BlasMat {
  Tensor t;  // possibly a contiguous copy
  bool trans = false;
  int64_t ld = 1;
};
BlasMat blas_view(const Tensor& m) {
  int64_t r = m.sizes()[0], c = m.sizes()[1];
  int64_t s0 = m.strides()[0], s1 = m.strides()[1];
  if ((s1 == 1 || c == 1) && s0 >= std::max<int64_t>(1, c)) return {m, false, s0};
  if ((s0 == 1 || r == 1) && s1 >= std::max<int64_t>(1, r)) return {m, true, s1};
  Tensor cm = m.contiguous();
  return {cm, false, std::max<int64_t>(1, c)};
}

// out[n, m] = alpha * a[n, k] @ b[k, m] + beta * out (out row-major contiguous).
void gemm_into(const Tensor& a, const Tensor& b, Tensor& out, double alpha, double beta) {
  int64_t n = a.sizes()[0], k = a.sizes()[1], m = b.sizes()[1];
  if (n == 0 || m == 0) return;
  if (k == 0) {
    if (beta == 0) out.zero_();
    else out.mul_(beta);
    return;
  }
  DType dt = a.dtype();
  if (dt == kFloat32 || dt == kFloat64) {
    BlasMat A = blas_view(a), B = blas_view(b);
    auto ta = A.trans ? CblasTrans : CblasNoTrans, tb = B.trans ? CblasTrans : CblasNoTrans;
    if (dt == kFloat32)
      cblas_sgemm(CblasRowMajor, ta, tb, int(n), int(m), int(k), float(alpha), A.t.data_ptr<float>(),
                  int(A.ld), B.t.data_ptr<float>(), int(B.ld), float(beta), out.data_ptr<float>(), int(m));
    else
      cblas_dgemm(CblasRowMajor, ta, tb, int(n), int(m), int(k), alpha, A.t.data_ptr<double>(), int(A.ld),
                  B.t.data_ptr<double>(), int(B.ld), beta, out.data_ptr<double>(), int(m));
    return;
  }
  if (dt == kFloat16 || dt == kBFloat16) {
    Tensor o32 = beta == 0 ? empty(out.sizes(), kFloat32) : out.to(kFloat32);
    gemm_into(a.to(kFloat32), b.to(kFloat32), o32, alpha, beta);
    out.copy_(o32);
    return;
  }
  KILN_CHECK(dt != kBool, "mm", "\"addmm_impl_cpu_\" not implemented for 'bool'");
  // integers: i-k-j order so the inner loop runs along contiguous rows of b and out
  Tensor ac = a.contiguous(), bc = b.contiguous();
  KILN_DISPATCH_INTEGRAL(dt, "mm", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
    using T = scalar_t;
    if constexpr (!std::is_same_v<T, bool>) {
      const T* A = ac.data_ptr<T>();
      const T* B = bc.data_ptr<T>();
      T* O = out.data_ptr<T>();
      T al = T(int64_t(alpha)), be = T(int64_t(beta));
      cpu::parallel_for(n, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, k * m)), [&](int64_t r0, int64_t r1) {
        std::vector<T> row(static_cast<size_t>(m));
        for (int64_t i = r0; i < r1; ++i) {
          std::fill(row.begin(), row.end(), T(0));
          for (int64_t p = 0; p < k; ++p) {
            T av = A[i * k + p];
            const T* br = B + p * m;
            for (int64_t j = 0; j < m; ++j) row[j] = T(row[j] + av * br[j]);
          }
          for (int64_t j = 0; j < m; ++j) O[i * m + j] = T(al * row[j] + (beta == 0 ? T(0) : T(be * O[i * m + j])));
        }
      });
    }
  });
}

void check_mm(std::string_view op, const Tensor& a, const Tensor& b) {
  check_cpu(op, {a, b});
  KILN_CHECK(a.dim() == 2, op, "self must be a matrix, got a ", a.dim(), "-D tensor of shape ", a.sizes().vec());
  KILN_CHECK(b.dim() == 2, op, "mat2 must be a matrix, got a ", b.dim(), "-D tensor of shape ", b.sizes().vec());
  KILN_CHECK(a.sizes()[1] == b.sizes()[0], op, "mat1 and mat2 shapes cannot be multiplied (", a.sizes()[0], "x",
             a.sizes()[1], " and ", b.sizes()[0], "x", b.sizes()[1], ")");
  KILN_CHECK(a.dtype() == b.dtype(), op, "expected mat1 and mat2 to have the same dtype, but got: ",
             name(a.dtype()), " != ", name(b.dtype()));
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  KILN_TRACE(Mm, (a, b), (), mm(a, b))
  check_mm("mm", a, b);
  Tensor out = empty({a.sizes()[0], b.sizes()[1]}, a.dtype());
  gemm_into(a, b, out, 1.0, 0.0);
  return out;
}

Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& beta, const Scalar& alpha) {
  KILN_TRACE(Addmm, (self, a, b), ({"alpha", scalar_attr(alpha)}, {"beta", scalar_attr(beta)}), addmm(self, a, b, beta, alpha))
  check_mm("addmm", a, b);
  KILN_CHECK(self.dtype() == a.dtype(), "addmm", "expected self and mat1 to have the same dtype, but got: ",
             name(self.dtype()), " != ", name(a.dtype()));
  std::vector<int64_t> shape{a.sizes()[0], b.sizes()[1]};
  KILN_CHECK(broadcast_shapes(self.sizes(), shape, "addmm") == shape, "addmm", "self of shape ",
             self.sizes().vec(), " cannot be broadcast to the product's shape ", shape);
  Tensor out = empty(shape, a.dtype());
  double be = beta.to_double();
  if (be != 0) out.copy_(self);
  gemm_into(a, b, out, alpha.to_double(), be);
  return out;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  KILN_TRACE(Bmm, (a, b), (), bmm(a, b))
  check_cpu("bmm", {a, b});
  KILN_CHECK(a.dim() == 3, "bmm", "batch1 must be a 3D tensor, got shape ", a.sizes().vec());
  KILN_CHECK(b.dim() == 3, "bmm", "batch2 must be a 3D tensor, got shape ", b.sizes().vec());
  KILN_CHECK(a.sizes()[0] == b.sizes()[0], "bmm", "batch1 and batch2 must have same number of batches, got ",
             a.sizes()[0], " and ", b.sizes()[0]);
  KILN_CHECK(a.sizes()[2] == b.sizes()[1], "bmm", "Expected size for first two dimensions of batch2 tensor to be: [",
             a.sizes()[0], ", ", a.sizes()[2], "] but got: [", b.sizes()[0], ", ", b.sizes()[1], "].");
  KILN_CHECK(a.dtype() == b.dtype(), "bmm", "expected scalar type ", name(a.dtype()), " but found ", name(b.dtype()));
  int64_t nb = a.sizes()[0];
  Tensor out = empty({nb, a.sizes()[1], b.sizes()[2]}, a.dtype());
  for (int64_t i = 0; i < nb; ++i) {
    Tensor o = out.select(0, i);
    gemm_into(a.select(0, i), b.select(0, i), o, 1.0, 0.0);
  }
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  KILN_TRACE(Matmul, (a, b), (), matmul(a, b))
  check_cpu("matmul", {a, b});
  int64_t da = a.dim(), db = b.dim();
  KILN_CHECK(da > 0 && db > 0, "matmul", "both arguments to matmul need to be at least 1D, but they are ", da,
             "D and ", db, "D");
  KILN_CHECK(a.dtype() == b.dtype(), "matmul", "expected scalar type ", name(a.dtype()), " but found ",
             name(b.dtype()));
  if (da == 1 && db == 1) {
    KILN_CHECK(a.sizes()[0] == b.sizes()[0], "matmul", "inconsistent tensor size, expected tensor [",
               a.sizes()[0], "] and src [", b.sizes()[0], "] to have the same number of elements, but got ",
               a.sizes()[0], " and ", b.sizes()[0], " elements respectively");
    return mm(a.unsqueeze(0), b.unsqueeze(1)).view({});
  }
  if (da == 2 && db == 1) {
    KILN_CHECK(a.sizes()[1] == b.sizes()[0], "matmul", "size mismatch, got input (", a.sizes()[0], "), mat (",
               a.sizes()[0], "x", a.sizes()[1], "), vec (", b.sizes()[0], ")");
    return mm(a, b.unsqueeze(1)).squeeze(-1);
  }
  if (da == 1 && db == 2) return mm(a.unsqueeze(0), b).squeeze(0);
  if (da == 2 && db == 2) return mm(a, b);
  // Batched: a 1-d operand becomes a matrix and its extra dim is dropped from the result.
  Tensor A = da == 1 ? a.unsqueeze(0) : a;
  Tensor B = db == 1 ? b.unsqueeze(-1) : b;
  int64_t n = A.sizes()[A.dim() - 2], k = A.sizes()[A.dim() - 1];
  int64_t k2 = B.sizes()[B.dim() - 2], m = B.sizes()[B.dim() - 1];
  KILN_CHECK(k == k2, "matmul", "mat1 and mat2 shapes cannot be multiplied (", n, "x", k, " and ", k2, "x", m, ")");
  std::vector<int64_t> out_shape;
  if (db <= 2 && da >= 3) {
    // [..., n, k] @ [k, m]: fold the batch into the rows, one GEMM.
    Tensor r = mm(A.reshape({-1, k}), B);
    out_shape.assign(A.sizes().begin(), A.sizes().end() - 1);
    out_shape.push_back(m);
    r = r.view(out_shape);
    return db == 1 ? r.squeeze(-1) : r;
  }
  std::vector<int64_t> ba(A.sizes().begin(), A.sizes().end() - 2), bb(B.sizes().begin(), B.sizes().end() - 2);
  std::vector<int64_t> batch = broadcast_shapes(ba, bb, "matmul");
  int64_t nbatch = shape::numel(batch);
  std::vector<int64_t> ea = batch, eb = batch;
  ea.insert(ea.end(), {n, k});
  eb.insert(eb.end(), {k, m});
  Tensor r = bmm(A.expand(ea).reshape({nbatch, n, k}), B.expand(eb).reshape({nbatch, k, m}));
  out_shape = batch;
  out_shape.insert(out_shape.end(), {n, m});
  r = r.view(out_shape);
  if (da == 1) r = r.squeeze(-2);
  if (db == 1) r = r.squeeze(-1);
  return r;
}

Tensor Tensor::matmul(const Tensor& o) const { return kiln::matmul(*this, o); }
Tensor Tensor::mm(const Tensor& o) const { return kiln::mm(*this, o); }
Tensor Tensor::bmm(const Tensor& o) const { return kiln::bmm(*this, o); }

}  // namespace kiln
