// softmax and log_softmax along one dim, numerically stable (the row max is subtracted first).
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/float16_blocks.h"
#include "cpu/vec.h"
#include "ops_common.h"

namespace kiln {

using namespace detail;

namespace {

#if KILN_HAVE_VEC
// One contiguous float32 or float64 row by vectors, W lanes at a time (the tail loaded with
// -inf, which adds exp(-inf) = 0 to the sum): the max (running_max keeps a NaN lane), exp(x -
// max) (kiln's float32 exp, SLEEF's float64 one) summed in the lanes, both folded by halves, then
// x - max - log(sum) or the stored exps times 1 / sum. A row of 16 floats is one vector a pass:
// folding the lanes one at a time made softmax over rows of 16 2-4x PyTorch's time.
template <typename T>
struct RowVec {
  static constexpr bool f32 = std::is_same_v<T, float>;
  static constexpr int64_t W = f32 ? cpu::vec::kWF : cpu::vec::kWD;
  static constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  using V = decltype(cpu::vec::load(static_cast<const T*>(nullptr)));  // (not conditional_t: it drops the vector attributes)
  static V exp(V v) {
    if constexpr (f32) return cpu::vec::expf(v);
    else return KILN_SLEEF_D(exp)(v);
  }
  static V log(V v) {
    if constexpr (f32) return KILN_SLEEF_F(log)(v);
    else return KILN_SLEEF_D(log)(v);
  }
  // The row's max (into max) and the sum of exp(x - max); the exps stored to o when given.
  __attribute__((always_inline)) static T max_and_sum(const T* x, T* o, int64_t n, T& max) {
    using namespace cpu::vec;
    const int64_t full = n - n % W, k = n - full;
    V m = splat(kNegInf);
    for (int64_t i = 0; i < full; i += W) m = running_max(m, load(x + i));
    if (k) m = running_max(m, load_part(x + full, k, kNegInf));
    max = fold_halves(m, [](V a, V b) { return running_max(a, b); });
    const V mx = splat(max);
    V s = splat(T(0));
    for (int64_t i = 0; i < full; i += W) {
      const V e = exp(load(x + i) - mx);
      if (o) store(o + i, e);
      s = s + e;
    }
    if (k) {
      const V e = exp(load_part(x + full, k, kNegInf) - mx);
      if (o) store_part(o + full, e, k);
      s = s + e;
    }
    return fold_halves(s, [](V a, V b) { return a + b; });
  }
  // log_softmax's outputs: (x - max) - lse.
  __attribute__((always_inline)) static void store_log(const T* x, T* o, int64_t n, V mx, V lse) {
    using namespace cpu::vec;
    const int64_t full = n - n % W, k = n - full;
    for (int64_t i = 0; i < full; i += W) store(o + i, (load(x + i) - mx) - lse);
    if (k) store_part(o + full, (load_part(x + full, k, 0) - mx) - lse, k);
  }
  static void row(const T* x, T* o, int64_t n, bool log_form) {
    using namespace cpu::vec;
    T max;
    const T sum = max_and_sum(x, log_form ? nullptr : o, n, max);
    if (log_form) return store_log(x, o, n, splat(max), splat(std::log(sum)));
    const int64_t full = n - n % W, k = n - full;
    const V inv = splat(T(1) / sum);
    for (int64_t i = 0; i < full; i += W) store(o + i, load(o + i) * inv);
    if (k) store_part(o + full, load_part(o + full, k, 0) * inv, k);
  }
  // log_softmax over short contiguous rows (at most kShortRow), W rows at a time: their sums'
  // logs in one vector call. A log per row was a third of log_softmax's time over rows of 16
  // (glibc's logf, called between the rows' vector passes); SLEEF's log is within an ulp of it.
  static constexpr int64_t kShortRow = 64;
  static void log_rows(char* const* p, const int64_t* st, int64_t cnt, int64_t n) {
    using namespace cpu::vec;
    for (int64_t k0 = 0; k0 < cnt; k0 += W) {
      const int64_t g = std::min(W, cnt - k0);
      alignas(64) T sums[W], maxes[W], logs[W];
      for (int64_t r = 0; r < W; ++r) sums[r] = T(1);  // (idle lanes: log(1))
      for (int64_t r = 0; r < g; ++r)
        sums[r] = max_and_sum(reinterpret_cast<const T*>(p[1] + (k0 + r) * st[1]), nullptr, n, maxes[r]);
      store(logs, log(load(sums)));
      for (int64_t r = 0; r < g; ++r)
        store_log(reinterpret_cast<const T*>(p[1] + (k0 + r) * st[1]), reinterpret_cast<T*>(p[0] + (k0 + r) * st[0]), n,
                  splat(maxes[r]), splat(logs[r]));
    }
  }
};
#endif

// One row of n elements at stride s (elements). Shifting by the max keeps exp in range; as in
// PyTorch, a row whose max is +-inf comes out NaN (inf - inf).
template <typename T>
void softmax_row(const T* x, T* o, int64_t n, int64_t s, int64_t so, bool log_form) {
  using M = opmath_t<T>;
#if KILN_HAVE_VEC
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (s == 1 && so == 1) return RowVec<T>::row(x, o, n, log_form);
  }
  if constexpr (is_reduced_float_v<T>) {
    if (s == 1 && so == 1) {
      // 16-bit floats: the float32 row by vectors, widened into and rounded out of buffers of this
      // thread (one exp per element in float32, as the scalar loop below computes; a bfloat16
      // softmax over rows of 1024 took 16 times PyTorch's time there, two scalar exps each)
      thread_local std::vector<float> in, out;
      in.resize(size_t(n));
      out.resize(size_t(n));
      cpu::widen(x, in.data(), n);
      RowVec<float>::row(in.data(), out.data(), n, log_form);
      cpu::narrow(out.data(), o, n);
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
#if KILN_HAVE_VEC
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        if (log_form && s == 1 && so == 1 && n <= RowVec<T>::kShortRow) return RowVec<T>::log_rows(p, st, cnt, n);
      }
#endif
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
