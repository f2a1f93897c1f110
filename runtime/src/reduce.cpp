// Reductions: sum, nansum, mean, prod, amax/amin, max/min (with indices), argmax/argmin,
// norm, var/std, any/all, logsumexp, cumsum.
#include "reduce.h"
#include "trace_ops.h"

#include <cmath>
#include <limits>
#include <numeric>

namespace kiln {

using namespace detail;

namespace detail {

std::vector<int64_t> reduced_shape(IntArrayRef sizes, const std::vector<bool>& mask, bool keepdim) {
  std::vector<int64_t> out;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (!mask[d]) out.push_back(sizes[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

ReducePlan plan_reduce(const Tensor& x, const std::vector<bool>& mask, const Tensor& out) {
  ReducePlan plan;
  const int64_t nd = x.dim();
  std::vector<int64_t> order(nd);
  std::iota(order.begin(), order.end(), 0);
  // innermost first by input stride; ties keep row-major order (later dims inner)
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    int64_t sa = x.strides()[a], sb = x.strides()[b];
    if (sa != sb) return sa < sb;
    return a > b;
  });
  auto out_strides = out.strides();
  for (int64_t d : order) {
    int64_t n = x.sizes()[d];
    if (mask[d]) plan.reduce_numel *= n;
    else plan.out_numel *= n;
    if (n == 1) continue;
    ReducePlan::Dim dim{n, x.strides()[d], mask[d] ? 0 : out_strides[d]};
    if (mask[d]) plan.reduced.push_back(dim);
    else plan.kept.push_back(dim);
    if (plan.reduced.size() + plan.kept.size() == 1) plan.inner_reduced = mask[d];
  }
  // Merge neighbours (in iteration order) laid out one after the other, e.g. a full reduction
  // of a contiguous matrix becomes one run.
  auto coalesce = [](std::vector<ReducePlan::Dim>& dims) {
    std::vector<ReducePlan::Dim> out;
    for (const auto& d : dims) {
      if (!out.empty() && d.in_stride == out.back().in_stride * out.back().size &&
          d.out_stride == out.back().out_stride * out.back().size) {
        out.back().size *= d.size;
        continue;
      }
      out.push_back(d);
    }
    dims.swap(out);
  };
  coalesce(plan.reduced);
  coalesce(plan.kept);
  if (plan.reduced.empty()) plan.reduced.push_back({1, 0, 0});
  return plan;
}

}  // namespace detail

namespace {

// Runs OpT over x converted to dtype `dt`; the output has dtype `dt` too.
template <template <typename> class OpT>
Tensor reduce(std::string_view opname, const Tensor& x_in, IntArrayRef dims, bool keepdim, DType dt) {
  check_cpu(opname, {x_in});
  Tensor x = as_dtype(x_in, dt);
  auto mask = shape::reduce_mask(dims, x.dim(), opname);
  Tensor out = empty(reduced_shape(x.sizes(), mask, true), dt);
  KILN_DISPATCH_ALL(dt, opname, [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
    using T = scalar_t;
    if constexpr (OpT<T>::valid) reduce_kernel<T, T>(x, mask, out, OpT<T>{});
    else KILN_FAIL(opname, "\"", opname, "\" not implemented for '", name(dt), "'");
  });
  return keepdim ? out : out.view(reduced_shape(x.sizes(), mask, false));
}

// Accumulation type: double for float32/float64 sums, float for 16-bit floats, int64 for ints.
template <typename In>
using sum_acc_t = std::conditional_t<std::is_floating_point_v<In>, double,
                                     std::conditional_t<std::is_integral_v<In>, int64_t, float>>;

template <typename In> struct SumOp {
  using acc_t = sum_acc_t<In>;
  static constexpr bool valid = !std::is_same_v<In, bool>;
  static constexpr Fold kFold = Fold::Add;
  acc_t identity() const { return 0; }
  acc_t reduce(acc_t a, acc_t x) const { return a + x; }
  acc_t combine(acc_t a, acc_t b) const { return a + b; }
  acc_t project(acc_t a, int64_t) const { return a; }
};
template <typename In> struct NanSumOp : SumOp<In> {
  using acc_t = sum_acc_t<In>;
  static constexpr VectorLanes kVectorLanes = VectorLanes::NanSum;
  acc_t reduce(acc_t a, acc_t x) const { return x != x ? a : a + x; }
};
template <typename In> struct MeanOp : SumOp<In> {
  using acc_t = sum_acc_t<In>;
  static constexpr bool valid = !std::is_integral_v<In>;
  acc_t project(acc_t a, int64_t n) const { return a / acc_t(n); }
};
template <typename In> struct ProdOp {
  using acc_t = sum_acc_t<In>;
  static constexpr bool valid = !std::is_same_v<In, bool>;
  static constexpr Fold kFold = Fold::Mul;
  acc_t identity() const { return 1; }
  acc_t reduce(acc_t a, acc_t x) const { return a * x; }
  acc_t combine(acc_t a, acc_t b) const { return a * b; }
  acc_t project(acc_t a, int64_t) const { return a; }
};
// max/min keep NaN: once an accumulator is NaN it stays NaN.
template <typename In, bool IsMax> struct ExtremumOp {
  using acc_t = opmath_t<In>;
  static constexpr bool valid = true;
  static constexpr VectorLanes kVectorLanes = IsMax ? VectorLanes::Max : VectorLanes::Min;
  static constexpr Fold kFold = IsMax ? Fold::Max : Fold::Min;
  acc_t identity() const {
    if constexpr (std::is_floating_point_v<acc_t>)
      return IsMax ? -std::numeric_limits<acc_t>::infinity() : std::numeric_limits<acc_t>::infinity();
    else return IsMax ? std::numeric_limits<acc_t>::lowest() : std::numeric_limits<acc_t>::max();
  }
  acc_t reduce(acc_t a, acc_t x) const {
    if constexpr (std::is_same_v<acc_t, bool>) return IsMax ? (a || x) : (a && x);
    // a select, not a branch, so the lane loops vectorise; a NaN accumulator stays NaN because
    // every comparison with it is false
    else if constexpr (std::is_floating_point_v<acc_t>) return (IsMax ? x > a : x < a) || x != x ? x : a;
    else return IsMax ? (x > a ? x : a) : (x < a ? x : a);
  }
  acc_t combine(acc_t a, acc_t b) const { return reduce(a, b); }
  acc_t project(acc_t a, int64_t) const { return a; }
};
template <typename In> using MaxOp = ExtremumOp<In, true>;
template <typename In> using MinOp = ExtremumOp<In, false>;
template <typename In> struct AnyOp {
  using acc_t = bool;
  static constexpr bool valid = std::is_same_v<In, bool>;
  bool identity() const { return false; }
  bool reduce(bool a, bool x) const { return a || x; }
  bool combine(bool a, bool b) const { return a || b; }
  bool project(bool a, int64_t) const { return a; }
};
template <typename In> struct AllOp {
  using acc_t = bool;
  static constexpr bool valid = std::is_same_v<In, bool>;
  bool identity() const { return true; }
  bool reduce(bool a, bool x) const { return a && x; }
  bool combine(bool a, bool b) const { return a && b; }
  bool project(bool a, int64_t) const { return a; }
};
template <typename In> struct Norm1Op : SumOp<In> {
  using acc_t = sum_acc_t<In>;
  static constexpr bool valid = !std::is_integral_v<In>;
  acc_t reduce(acc_t a, acc_t x) const { return a + std::abs(x); }
};
template <typename In> struct Norm2Op : SumOp<In> {
  using acc_t = sum_acc_t<In>;
  static constexpr bool valid = !std::is_integral_v<In>;
  acc_t reduce(acc_t a, acc_t x) const { return a + x * x; }
  acc_t project(acc_t a, int64_t) const { return std::sqrt(a); }
};
template <typename In> struct NormInfOp {
  using acc_t = sum_acc_t<In>;
  static constexpr bool valid = !std::is_integral_v<In>;
  acc_t identity() const { return 0; }
  acc_t reduce(acc_t a, acc_t x) const { x = std::abs(x); return (a != a || x != x) ? a + x : (x > a ? x : a); }
  acc_t combine(acc_t a, acc_t b) const { return reduce(a, b); }
  acc_t project(acc_t a, int64_t) const { return a; }
};
template <typename In> struct NormNegInfOp : NormInfOp<In> {
  using acc_t = sum_acc_t<In>;
  acc_t identity() const { return std::numeric_limits<acc_t>::infinity(); }
  acc_t reduce(acc_t a, acc_t x) const { x = std::abs(x); return (a != a || x != x) ? a + x : (x < a ? x : a); }
  acc_t combine(acc_t a, acc_t b) const { return reduce(a, b); }
};

using rules::sum_dtype;

void check_nonempty(std::string_view op, const Tensor& x, IntArrayRef dims) {
  if (x.numel() != 0) return;
  KILN_CHECK(!dims.empty(), op, op, "(): Expected reduction dim to be specified for input.numel() == 0. "
             "Specify the reduction dim with the 'dim' argument.");
  auto mask = shape::reduce_mask(dims, x.dim(), op);
  for (int64_t d = 0; d < x.dim(); ++d)
    KILN_CHECK(!(mask[d] && x.sizes()[d] == 0), op, op, "(): Expected reduction dim ", d,
               " to have non-zero size.");
}

void check_float(std::string_view op, DType d) {
  KILN_CHECK(is_floating(d), op, op, "(): input dtype should be floating point, but got ", name(d));
}

}  // namespace

Tensor sum(const Tensor& x, IntArrayRef dims, bool keepdim, std::optional<DType> dtype) {
  KILN_TRACE(Sum, (x), ({"dims", dims.vec()}, {"keepdim", keepdim}, {"dtype", dtype ? AttrValue(*dtype) : AttrValue(NoneAttr{})}), sum(x, dims, keepdim, dtype))
  return reduce<SumOp>("sum", x, dims, keepdim, dtype.value_or(sum_dtype(x.dtype())));
}
Tensor nansum(const Tensor& x, IntArrayRef dims, bool keepdim) {
  KILN_TRACE(NanSum, (x), ({"dims", dims.vec()}, {"keepdim", keepdim}), nansum(x, dims, keepdim))
  return reduce<NanSumOp>("nansum", x, dims, keepdim, sum_dtype(x.dtype()));
}
Tensor mean(const Tensor& x, IntArrayRef dims, bool keepdim) {
  KILN_TRACE(Mean, (x), ({"dims", dims.vec()}, {"keepdim", keepdim}), mean(x, dims, keepdim))
  KILN_CHECK(is_floating(x.dtype()), "mean", "mean(): could not infer output dtype. Input dtype must be "
             "either a floating point or complex dtype. Got: ", name(x.dtype()));
  return reduce<MeanOp>("mean", x, dims, keepdim, x.dtype());
}
Tensor prod(const Tensor& x, IntArrayRef dims, bool keepdim) {
  KILN_TRACE(Prod, (x), ({"dims", dims.vec()}, {"keepdim", keepdim}), prod(x, dims, keepdim))
  return reduce<ProdOp>("prod", x, dims, keepdim, sum_dtype(x.dtype()));
}
Tensor amax(const Tensor& x, IntArrayRef dims, bool keepdim) {
  KILN_TRACE(Amax, (x), ({"dims", dims.vec()}, {"keepdim", keepdim}), amax(x, dims, keepdim))
  check_nonempty("amax", x, dims);
  return reduce<MaxOp>("amax", x, dims, keepdim, x.dtype());
}
Tensor amin(const Tensor& x, IntArrayRef dims, bool keepdim) {
  KILN_TRACE(Amin, (x), ({"dims", dims.vec()}, {"keepdim", keepdim}), amin(x, dims, keepdim))
  check_nonempty("amin", x, dims);
  return reduce<MinOp>("amin", x, dims, keepdim, x.dtype());
}
namespace {
// An op of one operand with two outputs (max and min with a dim, aminmax) reports itself to
// autograd (when an operand requires grad) or to the tracer, computing with each off inside;
// nullopt when neither records.
template <typename Attrs, typename Compute>
std::optional<std::tuple<Tensor, Tensor>> report_two(OpId op, const Tensor& x, Attrs&& attrs, Compute&& compute) {
  trace::Operand in[] = {x};
  Tensor out[2];
  if (autograd::detail::active() && autograd::detail::any_requires_grad(in)) {
    {
      AutoGradMode off(false);
      std::tie(out[0], out[1]) = compute();
    }
    autograd::detail::attach(op, in, attrs, out);
  } else if (trace::Recorder* r = trace::active()) {
    {
      trace::Pause p;
      std::tie(out[0], out[1]) = compute();
    }
    r->record(op, in, attrs(), out);
  } else {
    return std::nullopt;
  }
  return std::tuple<Tensor, Tensor>{out[0], out[1]};
}
}  // namespace

std::tuple<Tensor, Tensor> aminmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (auto out = report_two(OpId::Aminmax, x,
                            [&] { return std::vector<Attr>{{"dims", dim ? IntList{*dim} : IntList{}}, {"keepdim", keepdim}}; },
                            [&] { return aminmax(x, dim, keepdim); })) [[unlikely]]
    return *out;
  KILN_CHECK(x.numel() > 0 || dim, "aminmax", "aminmax(): cannot compute aminmax over an empty dimension as the "
             "operation has no identity.");
  // amin's pass and amax's (each on the tensor's device); a compiled aminmax is one kernel
  // reading x once.
  std::vector<int64_t> dims = dim ? std::vector<int64_t>{*dim} : std::vector<int64_t>{};
  return {amin(x, dims, keepdim), amax(x, dims, keepdim)};
}
Tensor max(const Tensor& x) {
  KILN_TRACE(Amax, (x), ({"dims", IntList{}}, {"keepdim", false}), max(x))
  check_nonempty("max", x, {});
  return reduce<MaxOp>("max", x, {}, false, x.dtype());
}
Tensor min(const Tensor& x) {
  KILN_TRACE(Amin, (x), ({"dims", IntList{}}, {"keepdim", false}), min(x))
  check_nonempty("min", x, {});
  return reduce<MinOp>("min", x, {}, false, x.dtype());
}
Tensor any(const Tensor& x, IntArrayRef dims, bool keepdim) {
  KILN_TRACE(Any, (x), ({"dims", dims.vec()}, {"keepdim", keepdim}), any(x, dims, keepdim))
  Tensor r = reduce<AnyOp>("any", x, dims, keepdim, kBool);
  return x.dtype() == kUInt8 ? r.to(kUInt8) : r;
}
Tensor all(const Tensor& x, IntArrayRef dims, bool keepdim) {
  KILN_TRACE(All, (x), ({"dims", dims.vec()}, {"keepdim", keepdim}), all(x, dims, keepdim))
  Tensor r = reduce<AllOp>("all", x, dims, keepdim, kBool);
  return x.dtype() == kUInt8 ? r.to(kUInt8) : r;
}

Tensor norm(const Tensor& x, double p, IntArrayRef dims, bool keepdim) {
  KILN_TRACE(Norm, (x), ({"dims", dims.vec()}, {"keepdim", keepdim}, {"p", p}), norm(x, p, dims, keepdim))
  check_float("norm", x.dtype());
  DType d = x.dtype();
  if (p == 2) return reduce<Norm2Op>("norm", x, dims, keepdim, d);
  if (p == 1) return reduce<Norm1Op>("norm", x, dims, keepdim, d);
  if (std::isinf(p)) {
    // max/min of |x| have no identity: an empty reduction is an error, as in PyTorch
    check_nonempty("norm", x, dims);
    if (p > 0) return reduce<NormInfOp>("norm", x, dims, keepdim, d);
    return reduce<NormNegInfOp>("norm", x, dims, keepdim, d);
  }
  if (p == 0) return sum(ne(x, 0), dims, keepdim).to(d);
  // general p: (sum |x|^p)^(1/p)
  return pow(sum(pow(abs(x), p), dims, keepdim), 1.0 / p).to(d);
}

namespace {
// The sum of squared deviations from a known mean, in float64: var's second pass over a whole
// tensor (its first is MeanOp's, in float64 too).
template <typename In> struct SqDevOp {
  using acc_t = double;
  static constexpr bool valid = true;
  static constexpr Fold kFold = Fold::Add;
  double mean = 0;
  double identity() const { return 0; }
  double reduce(double a, double x) const { return a + (x - mean) * (x - mean); }
  double combine(double a, double b) const { return a + b; }
  double project(double a, int64_t) const { return a; }
};
}  // namespace

Tensor var(const Tensor& x, IntArrayRef dims, int64_t correction, bool keepdim) {
  KILN_TRACE(Var, (x), ({"dims", dims.vec()}, {"keepdim", keepdim}, {"correction", correction}), var(x, dims, correction, keepdim))
  check_float("var", x.dtype());
  auto mask = shape::reduce_mask(dims, x.dim(), "var");
  int64_t n = 1, kept = 1;
  for (int64_t d = 0; d < x.dim(); ++d) (mask[d] ? n : kept) *= x.sizes()[d];
  if (x.is_cpu() && kept == 1 && n > 0 && (x.dtype() == kFloat32 || x.dtype() == kFloat64)) {
    // One result (x.var() of a whole tensor): the same two float64 passes straight over x, each
    // split across the threads, instead of ops over float64 copies of it (four 8-byte temporaries
    // of x's size: 28 ms for 2^24 floats against PyTorch's 9; docs/perf-journal.md, "Full
    // reductions of several depths split per pass").
    Tensor mean = empty(reduced_shape(x.sizes(), mask, true), kFloat64), ss = empty_like(mean);
    auto passes = [&](auto tag) {
      using T = decltype(tag);
      reduce_kernel<T, double>(x, mask, mean, MeanOp<T>{});
      reduce_kernel<T, double>(x, mask, ss, SqDevOp<T>{*static_cast<const double*>(mean.data_ptr())});
    };
    x.dtype() == kFloat32 ? passes(float{}) : passes(double{});
    Tensor r = div(ss, double(std::max<int64_t>(n - correction, 0))).to(x.dtype());
    return keepdim ? r : r.view(reduced_shape(x.sizes(), mask, false));
  }
  // two passes (mean, then squared deviations) in float64 for accuracy, as PyTorch does on CPU
  Tensor xd = x.to(kFloat64);
  Tensor dev = sub(xd, mean(xd, dims, true));
  Tensor ss = sum(mul(dev, dev), dims, keepdim);
  return div(ss, double(std::max<int64_t>(n - correction, 0))).to(x.dtype());
}
Tensor std(const Tensor& x, IntArrayRef dims, int64_t correction, bool keepdim) {
  KILN_TRACE(Std, (x), ({"dims", dims.vec()}, {"keepdim", keepdim}, {"correction", correction}), std(x, dims, correction, keepdim))
  check_float("std", x.dtype());
  return sqrt(var(x, dims, correction, keepdim));
}

Tensor logsumexp(const Tensor& x_in, IntArrayRef dims, bool keepdim) {
  KILN_TRACE(LogSumExp, (x_in), ({"dims", dims.vec()}, {"keepdim", keepdim}), logsumexp(x_in, dims, keepdim))
  Tensor x = is_floating(x_in.dtype()) ? x_in : x_in.to(kDefaultFloat);
  if (x.numel() == 0) return log(sum(exp(x), dims, keepdim));
  Tensor m = amax(x, dims, true);
  // an infinite max would give inf - inf = nan; shift by 0 there instead
  Tensor shift = masked_fill(m, isinf(m), 0);
  Tensor r = add(log(sum(exp(sub(x, shift)), dims, true)), shift);
  if (!keepdim) {
    auto mask = shape::reduce_mask(dims, x.dim(), "logsumexp");
    r = r.view(reduced_shape(x.sizes(), mask, false));
  }
  return r;
}

// ---- max/min/argmax/argmin along one dim, with indices ----

namespace {
// Returns (values, indices) of the first extremum along `dim`; NaN counts as the extremum.
std::tuple<Tensor, Tensor> arg_extremum(std::string_view op, const Tensor& x, int64_t dim, bool keepdim,
                                        bool is_max) {
  check_cpu(op, {x});
  int64_t d = shape::wrap_dim(dim, x.dim(), op);
  if (x.dim() > 0)
    KILN_CHECK(x.sizes()[d] != 0, op, op, "(): Expected reduction dim ", d, " to have non-zero size.");
  std::vector<bool> mask(size_t(x.dim()), false);
  if (x.dim() > 0) mask[d] = true;
  auto kd = reduced_shape(x.sizes(), mask, true);
  Tensor values = empty(kd, x.dtype()), indices = empty(kd, kInt64);
  int64_t n = x.dim() > 0 ? x.sizes()[d] : 1, s = x.dim() > 0 ? x.strides()[d] : 0;
  // iterate the kept positions through a view of x with the reduced dim narrowed to one
  Tensor first = x.dim() > 0 ? x.narrow(d, 0, 1) : x;
  KILN_DISPATCH_ALL(x.dtype(), op, [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
    using T = scalar_t;
    using M = opmath_t<T>;
    cpu::Iter it({values, indices, first}, kd);
    it.for_each([&](char** p, const int64_t* st, int64_t cnt) {
      for (int64_t k = 0; k < cnt; ++k) {
        const T* row = reinterpret_cast<const T*>(p[2] + k * st[2]);
        if constexpr (std::is_floating_point_v<M>) {
          if (s == 1 && n >= 64) {
            // Contiguous float rows in two passes: the extremum by vectors (reduce_run, NaN if
            // any), then the first element equal to it (the first NaN if it is NaN); that is the
            // element the walk below keeps, a zero's sign included (-0.0 == 0.0 stops at the
            // first zero, as a strict comparison keeps the first). 16-bit rows are widened to
            // float32 first (exact, and in the same order: the walk compares the same values).
            const M* r = nullptr;
            thread_local std::vector<float> wide;
            if constexpr (std::is_same_v<T, M>) {
              r = row;
            } else {
              wide.resize(size_t(n));
              cpu::widen(row, wide.data(), n);
              r = wide.data();
            }
            const M m = is_max ? reduce_run(r, n, 1, MaxOp<M>{}) : reduce_run(r, n, 1, MinOp<M>{});
            int64_t bi = 0;
            if (m != m) {
              while (r[bi] == r[bi]) ++bi;
            } else {
              while (r[bi] != m) ++bi;
            }
            *reinterpret_cast<T*>(p[0] + k * st[0]) = row[bi];
            *reinterpret_cast<int64_t*>(p[1] + k * st[1]) = bi;
            continue;
          }
        }
        M best = M(row[0]);
        int64_t bi = 0;
        for (int64_t i = 1; i < n; ++i) {
          M v = M(row[i * s]);
          if constexpr (std::is_floating_point_v<M>)
            if (best != best) break;
          bool better;
          if constexpr (std::is_floating_point_v<M>) better = (v != v) || (is_max ? v > best : v < best);
          else better = is_max ? v > best : v < best;
          if (better) {
            best = v;
            bi = i;
          }
        }
        *reinterpret_cast<T*>(p[0] + k * st[0]) = T(best);
        *reinterpret_cast<int64_t*>(p[1] + k * st[1]) = bi;
      }
    }, std::max<int64_t>(1, cpu::parallel_grain() / n));
  });
  if (!keepdim) {
    auto sh = reduced_shape(x.sizes(), mask, false);
    return {values.view(sh), indices.view(sh)};
  }
  return {values, indices};
}
}  // namespace

std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  if (auto out = report_two(OpId::MaxDim, x, [&] { return std::vector<Attr>{{"dim", dim}, {"keepdim", keepdim}}; },
                            [&] { return max(x, dim, keepdim); })) [[unlikely]]
    return *out;
  if (!x.device().is_cpu()) [[unlikely]]  // on a GPU: the values and their first index, as two kernels
    // (argmax refuses bool, which max with a dim takes: its index is that of the uint8 copy)
    return {amax(x, {dim}, keepdim), argmax(x.dtype() == kBool ? x.to(kUInt8) : x, dim, keepdim)};
  return arg_extremum("max", x, dim, keepdim, true);
}
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  if (auto out = report_two(OpId::MinDim, x, [&] { return std::vector<Attr>{{"dim", dim}, {"keepdim", keepdim}}; },
                            [&] { return min(x, dim, keepdim); })) [[unlikely]]
    return *out;
  if (!x.device().is_cpu()) [[unlikely]]  // on a GPU: the values and their first index, as two kernels
    // (argmin refuses bool, which min with a dim takes: its index is that of the uint8 copy)
    return {amin(x, {dim}, keepdim), argmin(x.dtype() == kBool ? x.to(kUInt8) : x, dim, keepdim)};
  return arg_extremum("min", x, dim, keepdim, false);
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  KILN_TRACE(Argmax, (x), ({"dim", dim ? AttrValue(*dim) : AttrValue(NoneAttr{})}, {"keepdim", keepdim}), argmax(x, dim, keepdim))
  KILN_CHECK(x.dtype() != kBool, "argmax", "\"argmax_cpu\" not implemented for 'bool'");
  if (!dim) {
    KILN_CHECK(x.numel() > 0, "argmax", "argmax(): Expected reduction dim to be specified for input.numel() == 0.");
    Tensor r = std::get<1>(arg_extremum("argmax", x.reshape({-1}), 0, false, true));
    return keepdim ? r.reshape(std::vector<int64_t>(size_t(x.dim()), 1)) : r;
  }
  return std::get<1>(arg_extremum("argmax", x, *dim, keepdim, true));
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  KILN_TRACE(Argmin, (x), ({"dim", dim ? AttrValue(*dim) : AttrValue(NoneAttr{})}, {"keepdim", keepdim}), argmin(x, dim, keepdim))
  KILN_CHECK(x.dtype() != kBool, "argmin", "\"argmin_cpu\" not implemented for 'bool'");
  if (!dim) {
    KILN_CHECK(x.numel() > 0, "argmin", "argmin(): Expected reduction dim to be specified for input.numel() == 0.");
    Tensor r = std::get<1>(arg_extremum("argmin", x.reshape({-1}), 0, false, false));
    return keepdim ? r.reshape(std::vector<int64_t>(size_t(x.dim()), 1)) : r;
  }
  return std::get<1>(arg_extremum("argmin", x, *dim, keepdim, false));
}

// ---- cumsum ----

Tensor cumsum(const Tensor& x_in, int64_t dim) {
  KILN_TRACE(Cumsum, (x_in), ({"dim", dim}), cumsum(x_in, dim))
  check_cpu("cumsum", {x_in});
  DType out_dt = sum_dtype(x_in.dtype());
  Tensor x = as_dtype(x_in, out_dt);
  int64_t d = shape::wrap_dim(dim, x.dim(), "cumsum");
  Tensor out = empty(x.sizes(), out_dt);
  if (x.numel() == 0) return out;
  if (x.dim() == 0) return out.copy_(x);
  int64_t n = x.sizes()[d], sx = x.strides()[d], so = out.strides()[d];
  Tensor xf = x.narrow(d, 0, 1), of = out.narrow(d, 0, 1);
  // A contiguous input scanned along an outer dim: every scan steps a whole row of the inner
  // dims at once, so each of a block of inner positions keeps its running sum in a local array
  // and the rows are read and written in order (the same sums in the same order as a walk down
  // each column, which on [4096, 1024] over dim 0 took 22 ms: a new page every element).
  int64_t inner = 1, outer = 1;
  for (int64_t k = d + 1; k < x.dim(); ++k) inner *= x.sizes()[k];
  for (int64_t k = 0; k < d; ++k) outer *= x.sizes()[k];
  const bool by_rows = x.is_contiguous() && inner >= 16;
  KILN_DISPATCH_ALL(out_dt, "cumsum", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
    using T = scalar_t;
    using A = sum_acc_t<T>;
    if constexpr (!std::is_same_v<T, bool>) {
      if (by_rows) {
        constexpr int64_t kBlock = 512;
        const int64_t blocks = (inner + kBlock - 1) / kBlock;
        const T* in = static_cast<const T*>(x.data_ptr());
        T* o = static_cast<T*>(out.data_ptr());
        cpu::parallel_for(outer * blocks, std::max<int64_t>(1, cpu::parallel_grain() / (n * kBlock)), [&](int64_t b, int64_t e) {
          A acc[kBlock];
          for (int64_t t = b; t < e; ++t) {
            const int64_t j0 = (t % blocks) * kBlock, m = std::min(kBlock, inner - j0);
            const int64_t base = (t / blocks) * n * inner + j0;
            for (int64_t j = 0; j < m; ++j) acc[j] = 0;
            for (int64_t i = 0; i < n; ++i) {
              const T* row = in + base + i * inner;
              T* orow = o + base + i * inner;
              for (int64_t j = 0; j < m; ++j) {
                acc[j] += A(opmath_t<T>(row[j]));
                orow[j] = T(acc[j]);
              }
            }
          }
        });
        return;
      }
      cpu::Iter it({of, xf}, of.sizes());
      it.for_each([&](char** p, const int64_t* st, int64_t cnt) {
        for (int64_t k = 0; k < cnt; ++k) {
          T* o = reinterpret_cast<T*>(p[0] + k * st[0]);
          const T* a = reinterpret_cast<const T*>(p[1] + k * st[1]);
          A acc = 0;
          if constexpr (is_reduced_float_v<T>) {
            if (sx == 1 && so == 1) {
              // (16-bit rows scan float32 blocks widened from them: the conversions one at a time
              // cost 4x PyTorch's time; the same sums, rounded the same way)
              cpu::by_widened_blocks(a, o, n, [&](float* buf, int64_t m) {
                for (int64_t i = 0; i < m; ++i) buf[i] = float(acc += A(buf[i]));
              });
              continue;
            }
          }
          for (int64_t i = 0; i < n; ++i) {
            acc += A(opmath_t<T>(a[i * sx]));
            o[i * so] = T(acc);
          }
        }
      }, std::max<int64_t>(1, cpu::parallel_grain() / n));
    }
  });
  return out;
}

// ---- Tensor methods ----
Tensor Tensor::sum(std::optional<DType> dt) const { return kiln::sum(*this, {}, false, dt); }
Tensor Tensor::sum(IntArrayRef d, bool k, std::optional<DType> dt) const { return kiln::sum(*this, d, k, dt); }
Tensor Tensor::nansum(IntArrayRef d, bool k) const { return kiln::nansum(*this, d, k); }
Tensor Tensor::mean(IntArrayRef d, bool k) const { return kiln::mean(*this, d, k); }
Tensor Tensor::prod(IntArrayRef d, bool k) const { return kiln::prod(*this, d, k); }
Tensor Tensor::amax(IntArrayRef d, bool k) const { return kiln::amax(*this, d, k); }
Tensor Tensor::amin(IntArrayRef d, bool k) const { return kiln::amin(*this, d, k); }
Tensor Tensor::max() const { return kiln::max(*this); }
Tensor Tensor::min() const { return kiln::min(*this); }
std::tuple<Tensor, Tensor> Tensor::max(int64_t d, bool k) const { return kiln::max(*this, d, k); }
std::tuple<Tensor, Tensor> Tensor::min(int64_t d, bool k) const { return kiln::min(*this, d, k); }
Tensor Tensor::argmax(std::optional<int64_t> d, bool k) const { return kiln::argmax(*this, d, k); }
Tensor Tensor::argmin(std::optional<int64_t> d, bool k) const { return kiln::argmin(*this, d, k); }
Tensor Tensor::norm(double p, IntArrayRef d, bool k) const { return kiln::norm(*this, p, d, k); }
Tensor Tensor::var(IntArrayRef d, int64_t c, bool k) const { return kiln::var(*this, d, c, k); }
Tensor Tensor::std(IntArrayRef d, int64_t c, bool k) const { return kiln::std(*this, d, c, k); }
Tensor Tensor::any(IntArrayRef d, bool k) const { return kiln::any(*this, d, k); }
Tensor Tensor::all(IntArrayRef d, bool k) const { return kiln::all(*this, d, k); }
Tensor Tensor::logsumexp(IntArrayRef d, bool k) const { return kiln::logsumexp(*this, d, k); }
Tensor Tensor::cumsum(int64_t d) const { return kiln::cumsum(*this, d); }

}  // namespace kiln
