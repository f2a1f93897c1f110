// softmax and log_softmax along one dim, numerically stable (the row max is subtracted first).
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/vec.h"
#include "ops_common.h"

namespace kiln {

using namespace detail;

namespace {

// One row of n elements at stride s (elements); float32 rows with s == 1 use SIMD exp.
#if KILN_HAVE_VEC
// The max of a contiguous float32 or float64 row, NaN if it has one, by vectors: running_max
// keeps a NaN lane, and the lanes and the tail fold the same way. (gcc left the plain loop with
// a NaN flag per lane scalar: half of softmax's time.)
template <typename T>
inline T row_max(const T* x, int64_t n) {
  using namespace cpu::vec;
  constexpr bool f32 = std::is_same_v<T, float>;
  constexpr int W = f32 ? kWF : kWD;
  auto m = [] {
    if constexpr (f32) return setf(-std::numeric_limits<float>::infinity());
    else return setd(-std::numeric_limits<double>::infinity());
  }();
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    if constexpr (f32) m = running_max(m, loadf(x + i));
    else m = running_max(m, loadd(x + i));
  }
  alignas(64) T lanes[W];
  if constexpr (f32) storef(lanes, m);
  else stored(lanes, m);
  T r = lanes[0];
  for (int j = 1; j < W; ++j) r = lanes[j] > r || lanes[j] != lanes[j] ? lanes[j] : r;
  for (; i < n; ++i) r = x[i] > r || x[i] != x[i] ? x[i] : r;
  return r;
}
#endif

template <typename T>
inline T row_sum(const T* x, int64_t n) {
  constexpr int L = 16;
  T acc[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; ++j) acc[j] += x[i + j];
  for (; i < n; ++i) acc[0] += x[i];
  T r = 0;
  for (int j = 0; j < L; ++j) r += acc[j];
  return r;
}

// One row of n elements at stride s (elements). Shifting by the max keeps exp in range; as in
// PyTorch, a row whose max is +-inf comes out NaN (inf - inf).
template <typename T>
void softmax_row(const T* x, T* o, int64_t n, int64_t s, int64_t so, bool log_form) {
  using M = opmath_t<T>;
#if KILN_HAVE_VEC
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (s == 1 && so == 1) {
      // contiguous float32 and float64: exp(x - max) once into the output (kiln's own float32
      // exp, SLEEF's float64 one: the scalar loop below takes two of libm's per element, which
      // gcc does not vectorise), then scale or take logs
      const T mx = row_max(x, n);
      if constexpr (std::is_same_v<T, float>)
        cpu::vec::map_f32(x, o, n, [mx](cpu::vec::VF v) { return cpu::vec::expf(v - mx); });
      else
        cpu::vec::map_f64(x, o, n, [mx](cpu::vec::VD v) { return KILN_SLEEF_D(exp)(v - cpu::vec::setd(mx)); });
      const T sum = row_sum(o, n);
      if (log_form) {
        const T lse = std::log(sum);
        for (int64_t i = 0; i < n; ++i) o[i] = (x[i] - mx) - lse;
      } else {
        const T inv = T(1) / sum;
        for (int64_t i = 0; i < n; ++i) o[i] *= inv;
      }
      return;
    }
  }
  if constexpr (is_reduced_float_v<T>) {
    if (s == 1 && so == 1) {
      // 16-bit floats: the float32 row by vectors, widened into and rounded out of buffers of this
      // thread (one exp per element in float32, as the scalar loop below computes; a bfloat16
      // softmax over rows of 1024 took 16 times PyTorch's time there, two scalar exps each)
      thread_local std::vector<float> in, out;
      in.resize(size_t(n));
      out.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) in[size_t(i)] = float(x[i]);
      softmax_row<float>(in.data(), out.data(), n, 1, 1, log_form);
      for (int64_t i = 0; i < n; ++i) o[i] = T(out[size_t(i)]);
      return;
    }
  }
#endif
  M mx = -std::numeric_limits<M>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    M v = M(x[i * s]);
    mx = (v > mx || v != v) ? v : mx;
  }
  M sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(M(x[i * s]) - mx);
  if (log_form) {
    M lse = std::log(sum);
    for (int64_t i = 0; i < n; ++i) o[i * so] = T(M(x[i * s]) - mx - lse);
  } else {
    M inv = M(1) / sum;
    for (int64_t i = 0; i < n; ++i) o[i * so] = T(std::exp(M(x[i * s]) - mx) * inv);
  }
}

Tensor softmax_impl(std::string_view op, const Tensor& x_in, int64_t dim, bool log_form) {
  check_cpu(op, {x_in});
  KILN_CHECK(is_floating(x_in.dtype()), op, "\"", op, "\" not implemented for '", name(x_in.dtype()), "'");
  const Tensor& x = x_in;
  int64_t d = shape::wrap_dim(dim, x.dim(), op);
  if (x.dim() > 1 && x.strides()[d] != 1 && x.sizes()[d] > 1 && x.numel() >= cpu::parallel_grain()) {
    // Rows along a strided dim (softmax over dim 0 of a matrix) would each walk memory a line
    // per element, exps one at a time: the dim moves last through a tiled copy, the rows run
    // contiguous, and the result moves back (41 against 3.3 ms for [4096, 1024] over dim 0).
    Tensor rows = x.transpose(d, -1).contiguous();
    return softmax_impl(op, rows, -1, log_form).transpose(d, -1).contiguous();
  }
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
                    n, s, so, log_form);
    }, std::max<int64_t>(1, cpu::parallel_grain() / n));
  });
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  KILN_TRACE(Softmax, (x), ({"dim", dim}), softmax(x, dim))
  return softmax_impl("softmax", x, dim, false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  KILN_TRACE(LogSoftmax, (x), ({"dim", dim}), log_softmax(x, dim))
  return softmax_impl("log_softmax", x, dim, true);
}
Tensor Tensor::softmax(int64_t d) const { return kiln::softmax(*this, d); }
Tensor Tensor::log_softmax(int64_t d) const { return kiln::log_softmax(*this, d); }

}  // namespace kiln
