// Ops whose output shape depends on the data: nonzero, masked_select, unique, unique_inverse.
//
// They read their inputs in row-major (logical) order through the strides, so non-contiguous
// views need no copy. None of them can be traced into a graph: while tracing each computes its
// real result with recording paused and then reports itself to the recorder as a
// data-dependent op (trace::Recorder::data_dependent), with a replay that recomputes it. On a
// GPU they read the data on the host (via_host).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kiln/runtime/trace.h"
#include "ops_common.h"

namespace kiln {

using namespace detail;

namespace {

// Visits every index of `sizes` in row-major order: visit(off_a, off_b, idx) with the element
// offsets (in elements) under the two stride sets `sa` and `sb` and the multi-index `idx`.
template <typename Visit>
void walk(IntArrayRef sizes, IntArrayRef sa, IntArrayRef sb, Visit&& visit) {
  const int64_t nd = int64_t(sizes.size());
  if (nd == 0) {
    static constexpr int64_t kNoIndex = 0;  // a 0-d tensor's (empty) multi-index
    visit(int64_t(0), int64_t(0), &kNoIndex);
    return;
  }
  for (int64_t s : sizes)
    if (s == 0) return;
  std::vector<int64_t> idx(size_t(nd), 0);
  const int64_t last = nd - 1, inner = sizes[size_t(last)];
  const int64_t ia = sa[size_t(last)], ib = sb[size_t(last)];
  int64_t oa = 0, ob = 0;  // offsets of the current row's first element
  while (true) {
    for (int64_t i = 0; i < inner; ++i) {
      idx[size_t(last)] = i;
      visit(oa + i * ia, ob + i * ib, idx.data());
    }
    // Advance the outer dims like an odometer.
    int64_t d = last - 1;
    for (; d >= 0; --d) {
      const size_t k = size_t(d);
      if (++idx[k] < sizes[k]) {
        oa += sa[k];
        ob += sb[k];
        break;
      }
      oa -= (sizes[k] - 1) * sa[k];
      ob -= (sizes[k] - 1) * sb[k];
      idx[k] = 0;
    }
    if (d < 0) return;
  }
}

// nonzero of a large contiguous tensor: blocks counted on the kernel threads (a loop gcc
// vectorises), then each block writes its own rows from its offset in the count. A row is
// written whether or not the element is nonzero and kept by advancing past it only when it is
// (no branch to mispredict on random data), through a local buffer with a row to spare, so that
// no block writes into its neighbour's rows. One thread walking every element with a branch
// took 20 ms for 4M floats, PyTorch 9.9.
template <typename T>
Tensor nonzero_blocks(const Tensor& x) {
  const int64_t nd = x.dim(), N = x.numel();
  const T* p = reinterpret_cast<const T*>(first_element(x));
  const int64_t blocks = int64_t(cpu::num_threads()) * 8, per = (N + blocks - 1) / blocks;
  std::vector<int64_t> start(size_t(blocks) + 1, 0);
  cpu::parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      int64_t n = 0;
      for (int64_t i = k * per, hi = std::min(N, (k + 1) * per); i < hi; ++i) n += convert<bool>(p[i]);
      start[size_t(k) + 1] = n;
    }
  });
  std::partial_sum(start.begin(), start.end(), start.begin());
  Tensor out = empty({start.back(), nd}, kInt64);
  int64_t* o = reinterpret_cast<int64_t*>(first_element(out));
  const std::vector<int64_t> sizes = x.sizes().vec();
  cpu::parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
    constexpr int64_t kRows = 256;
    std::vector<int64_t> buf(size_t((kRows + 1) * nd));
    std::vector<int64_t> idx(static_cast<size_t>(nd));
    for (int64_t k = b; k < e; ++k) {
      const int64_t lo = k * per, hi = std::min(N, (k + 1) * per);
      if (lo >= hi) continue;
      for (int64_t d = nd - 1, r = lo; d >= 0; --d) idx[size_t(d)] = r % sizes[size_t(d)], r /= sizes[size_t(d)];
      int64_t* dst = o + start[size_t(k)] * nd;
      int64_t rows = 0;
      for (int64_t i = lo; i < hi; ++i) {
        std::copy(idx.begin(), idx.end(), buf.begin() + rows * nd);
        rows += convert<bool>(p[i]);
        if (rows == kRows) dst = std::copy(buf.begin(), buf.begin() + kRows * nd, dst), rows = 0;
        for (int64_t d = nd - 1; d >= 0 && ++idx[size_t(d)] == sizes[size_t(d)]; --d) idx[size_t(d)] = 0;
      }
      std::copy(buf.begin(), buf.begin() + rows * nd, dst);
    }
  });
  return out;
}

Tensor nonzero_impl(const Tensor& x) {
  check_cpu("nonzero", {x});
  const int64_t nd = x.dim();
  return KILN_DISPATCH_ALL(x.dtype(), "nonzero", [&](auto scalar_tag_) -> Tensor {
    using T = decltype(scalar_tag_);
    if (nd > 0 && x.is_contiguous() && x.numel() >= cpu::parallel_grain()) return nonzero_blocks<T>(x);
    const T* p = reinterpret_cast<const T*>(first_element(x));
    int64_t n = 0;
    walk(x.sizes(), x.strides(), x.strides(), [&](int64_t off, int64_t, const int64_t*) {
      if (convert<bool>(p[off])) ++n;
    });
    Tensor out = empty({n, nd}, kInt64);
    if (n == 0 || nd == 0) return out;
    int64_t* o = reinterpret_cast<int64_t*>(first_element(out));
    walk(x.sizes(), x.strides(), x.strides(), [&](int64_t off, int64_t, const int64_t* idx) {
      if (convert<bool>(p[off])) o = std::copy(idx, idx + nd, o);
    });
    return out;
  });
}

Tensor masked_select_impl(const Tensor& x, const Tensor& mask) {
  check_cpu("masked_select", {x, mask});
  KILN_CHECK(mask.dtype() == kBool, "masked_select",
             "masked_select only supports boolean masks, but got mask with dtype ", name(mask.dtype()),
             " (input shape ", x.sizes().vec(), ", mask shape ", mask.sizes().vec(), ")");
  std::vector<int64_t> shape = broadcast_shapes(x.sizes(), mask.sizes(), "masked_select");
  Tensor xe = x.expand(shape), me = mask.expand(shape);
  const bool* m = reinterpret_cast<const bool*>(first_element(me));
  int64_t n = 0;
  walk(shape, me.strides(), me.strides(), [&](int64_t off, int64_t, const int64_t*) { n += m[off] ? 1 : 0; });
  Tensor out = empty({n}, x.dtype());
  if (n == 0) return out;
  KILN_DISPATCH_ALL(x.dtype(), "masked_select", [&](auto scalar_tag_) {
    using T = decltype(scalar_tag_);
    const T* p = reinterpret_cast<const T*>(first_element(xe));
    T* o = reinterpret_cast<T*>(first_element(out));
    walk(shape, xe.strides(), me.strides(), [&](int64_t xoff, int64_t moff, const int64_t*) {
      if (m[moff]) *o++ = p[xoff];
    });
  });
  return out;
}

// unique and unique_inverse. Values are ordered with NaN after everything else; every NaN is
// its own distinct value (as torch.unique on the CPU). Among equal values (0.0 and -0.0) the
// first in row-major order is the one kept. `sorted` false: the values in order of first
// occurrence. The inverse (int64, shaped like x) is filled when `inverse` is non-null.
Tensor unique_impl(const Tensor& x, bool sorted, Tensor* inverse) {
  check_cpu("unique", {x});
  const int64_t n = x.numel();
  return KILN_DISPATCH_ALL(x.dtype(), "unique", [&](auto scalar_tag_) -> Tensor {
    using T = decltype(scalar_tag_);
    using M = opmath_t<T>;
    const T* p = reinterpret_cast<const T*>(first_element(x));
    // (value, row-major position), sorted by value with NaN last, ties by position. The
    // stored value is kept (not its opmath form) so that the kept -0.0 or NaN keeps its bits.
    std::vector<std::pair<T, int64_t>> v;
    v.reserve(size_t(n));
    int64_t pos = 0;
    walk(x.sizes(), x.strides(), x.strides(), [&](int64_t off, int64_t, const int64_t*) {
      v.emplace_back(p[off], pos++);
    });
    auto less = [](M a, M b) {
      if constexpr (std::is_floating_point_v<M>) return a < b || (!std::isnan(a) && std::isnan(b));
      else return a < b;
    };
    std::sort(v.begin(), v.end(), [&](const auto& a, const auto& b) {
      const M av = M(a.first), bv = M(b.first);
      if (less(av, bv)) return true;
      if (less(bv, av)) return false;
      return a.second < b.second;
    });
    // Groups of equal values (NaN equals nothing): group g starts at v[start[g]].
    std::vector<int64_t> start;
    for (int64_t i = 0; i < n; ++i)
      if (i == 0 || !(M(v[size_t(i)].first) == M(v[size_t(i - 1)].first))) start.push_back(i);
    const int64_t groups = int64_t(start.size());
    // order[k]: the group that becomes output element k.
    std::vector<int64_t> order(static_cast<size_t>(groups));
    std::iota(order.begin(), order.end(), int64_t(0));
    if (!sorted)
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return v[size_t(start[size_t(a)])].second < v[size_t(start[size_t(b)])].second;
      });
    Tensor out = empty({groups}, x.dtype());
    if (groups > 0) {
      T* o = reinterpret_cast<T*>(first_element(out));
      for (int64_t k = 0; k < groups; ++k) o[k] = v[size_t(start[size_t(order[size_t(k)])])].first;
    }
    if (inverse) {
      *inverse = empty(x.sizes(), kInt64);
      if (n > 0) {
        std::vector<int64_t> rank(static_cast<size_t>(groups));
        for (int64_t k = 0; k < groups; ++k) rank[size_t(order[size_t(k)])] = k;
        int64_t* inv = reinterpret_cast<int64_t*>(first_element(*inverse));
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t end = g + 1 < groups ? start[size_t(g + 1)] : n;
          for (int64_t i = start[size_t(g)]; i < end; ++i) inv[v[size_t(i)].second] = rank[size_t(g)];
        }
      }
    }
    return out;
  });
}

// On a GPU: the size of the result is known only once the data has been read, so these ops
// read it on the host, as PyTorch's synchronise with the device: operands that all live on one
// GPU are copied over, the CPU kernel runs, and its results go back to that device. Operands
// on different devices reach the CPU kernel as they are, which raises eager's device error.
template <typename Kernel>
auto via_host(std::vector<Tensor> in, Kernel&& kernel) {
  const Device dev = in.empty() ? Device::cpu() : in[0].device();
  bool one_gpu = !dev.is_cpu();
  for (const Tensor& t : in) one_gpu &= t.device() == dev;
  if (!one_gpu) return kernel(in);
  for (Tensor& t : in) t = t.to(Device::cpu());
  auto out = kernel(in);
  if constexpr (std::is_same_v<decltype(out), Tensor>) {
    return out.to(dev);
  } else {
    return decltype(out){std::get<0>(out).to(dev), std::get<1>(out).to(dev)};
  }
}

// Runs `compute` and, while tracing, reports it as the data-dependent op `op` (with recording
// paused inside, so the public ops it uses do not record).
template <typename Compute, typename Replay>
Tensor data_dependent(std::string_view op, std::vector<Tensor> inputs, Compute&& compute, Replay&& replay,
                      const std::source_location& where) {
  trace::Recorder* r = trace::active();
  if (!r) [[likely]] return compute();
  Tensor out;
  {
    trace::Pause p;
    out = compute();
  }
  r->data_dependent(op, std::span<const Tensor>(inputs), out,
                    std::function<Tensor(std::span<const Tensor>)>(std::forward<Replay>(replay)), where);
  return out;
}

}  // namespace

Tensor nonzero(const Tensor& x, std::source_location where) {
  return data_dependent(
      "nonzero", {x}, [&] { return via_host({x}, [](const auto& h) { return nonzero_impl(h[0]); }); },
      [](std::span<const Tensor> in) { return nonzero(in[0]); }, where);
}

Tensor masked_select(const Tensor& x, const Tensor& mask, std::source_location where) {
  autograd::detail::refuse_while_recording("masked_select", {x, mask},
                                           "use where(mask, x, 0) and a sum, or select under NoGradGuard");
  return data_dependent(
      "masked_select", {x, mask},
      [&] { return via_host({x, mask}, [](const auto& h) { return masked_select_impl(h[0], h[1]); }); },
      [](std::span<const Tensor> in) { return masked_select(in[0], in[1]); }, where);
}

Tensor unique(const Tensor& x, bool sorted, std::source_location where) {
  return data_dependent(
      "unique", {x}, [&] { return via_host({x}, [&](const auto& h) { return unique_impl(h[0], sorted, nullptr); }); },
      [sorted](std::span<const Tensor> in) { return unique(in[0], sorted); }, where);
}

std::tuple<Tensor, Tensor> unique_inverse(const Tensor& x, bool sorted, std::source_location where) {
  auto compute = [&] {
    return via_host({x}, [&](const auto& h) {
      Tensor inv;
      Tensor vals = unique_impl(h[0], sorted, &inv);
      return std::tuple<Tensor, Tensor>{vals, inv};
    });
  };
  trace::Recorder* r = trace::active();
  if (!r) [[likely]]
    return compute();
  Tensor values, inverse;
  {
    trace::Pause p;
    std::tie(values, inverse) = compute();
  }
  // The recorder takes one output per data-dependent op: the values and the inverse (whose
  // shape is x's but whose contents depend on the data) are reported as two, each replayed
  // from the same input.
  std::vector<Tensor> in{x};
  r->data_dependent("unique_inverse", in, values,
                    [sorted](std::span<const Tensor> i) { return std::get<0>(unique_inverse(i[0], sorted)); },
                    where);
  r->data_dependent("unique_inverse", in, inverse,
                    [sorted](std::span<const Tensor> i) { return std::get<1>(unique_inverse(i[0], sorted)); },
                    where);
  return {values, inverse};
}

}  // namespace kiln
