// softmax and log_softmax along one dim, numerically stable (the row max is subtracted first).
#include <cmath>
#include <limits>

#include "cpu/vec.h"
#include "ops_common.h"

namespace kiln {

using namespace detail;

namespace {

// One row of n elements at stride s (elements); float32 rows with s == 1 use SIMD exp.
template <typename T>
void softmax_row(const T* x, T* o, int64_t n, int64_t s, int64_t so, bool log_form, float* scratch) {
  using M = opmath_t<T>;
  M mx = -std::numeric_limits<M>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    M v = M(x[i * s]);
    mx = (v > mx || v != v) ? v : mx;
  }
  // Shift by the max even when it is infinite: as in PyTorch, a row whose max is +inf or
  // -inf (inf - inf) comes out NaN.
  M shift = mx;
  M sum = 0;
#if KILN_HAVE_VEC
  if constexpr (std::is_same_v<T, float>) {
    if (s == 1 && so == 1) {
      // exp(x - shift) once into the output, then scale (or turn into the log form)
      float sh = shift;
      cpu::vec::map_f32(x, o, n, [sh](cpu::vec::VF v) { return KILN_SLEEF_F(exp)(v - sh); });
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += o[i];
      if (log_form) {
        float lse = float(std::log(acc));
        for (int64_t i = 0; i < n; ++i) o[i] = x[i] - sh - lse;
      } else {
        float inv = float(1.0 / acc);
        for (int64_t i = 0; i < n; ++i) o[i] *= inv;
      }
      return;
    }
  }
#endif
  (void)scratch;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(M(x[i * s]) - shift);
  if (log_form) {
    M lse = std::log(sum);
    for (int64_t i = 0; i < n; ++i) o[i * so] = T(M(x[i * s]) - shift - lse);
  } else {
    M inv = M(1) / sum;
    for (int64_t i = 0; i < n; ++i) o[i * so] = T(std::exp(M(x[i * s]) - shift) * inv);
  }
}

Tensor softmax_impl(std::string_view op, const Tensor& x_in, int64_t dim, bool log_form) {
  check_cpu(op, {x_in});
  KILN_CHECK(is_floating(x_in.dtype()), op, "\"", op, "\" not implemented for '", name(x_in.dtype()), "'");
  const Tensor& x = x_in;
  int64_t d = shape::wrap_dim(dim, x.dim(), op);
  Tensor out = empty(x.sizes(), x.dtype());
  if (x.numel() == 0) return out;
  if (x.dim() == 0) return log_form ? out.fill_(0) : out.fill_(1);
  int64_t n = x.sizes()[d], s = x.strides()[d], so = out.strides()[d];
  Tensor xf = x.narrow(d, 0, 1), of = out.narrow(d, 0, 1);
  KILN_DISPATCH_FLOAT(x.dtype(), op, [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
    using T = scalar_t;
    cpu::Iter it({of, xf}, of.sizes());
    it.for_each([&](char** p, const int64_t* st, int64_t cnt) {
      for (int64_t k = 0; k < cnt; ++k)
        softmax_row(reinterpret_cast<const T*>(p[1] + k * st[1]), reinterpret_cast<T*>(p[0] + k * st[0]),
                    n, s, so, log_form, nullptr);
    }, std::max<int64_t>(1, cpu::kParallelGrain / n));
  });
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl("softmax", x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl("log_softmax", x, dim, true); }
Tensor Tensor::softmax(int64_t d) const { return kiln::softmax(*this, d); }
Tensor Tensor::log_softmax(int64_t d) const { return kiln::log_softmax(*this, d); }

}  // namespace kiln
