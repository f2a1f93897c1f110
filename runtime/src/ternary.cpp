// The ternary elementwise ops: where, clamp, lerp, addcmul, masked_fill, and their in-place forms.
#include <cmath>
#include <limits>

#include "elementwise.h"
#include "ops_common.h"
#include "trace_ops.h"

namespace kiln {

using namespace detail;

namespace {
// c ? x : y on storage bits, as a mask: gcc vectorises it, where `c ? x : y` over a bool array
// became a branch per element (3.4 ns an element on random conditions).
template <typename U>
inline U select_bits(bool c, U x, U y) {
  const U m = U(U(0) - U(c));
  return U((x & m) | (y & U(~m)));
}

Tensor where_impl(const Tensor& cond, const Arg& a, const Arg& b) {
  KILN_CHECK(cond.dtype() == kBool, "where", "where expected condition to be a boolean tensor, but got a tensor with dtype ",
             name(cond.dtype()));
  DType ct = result_type({a, b});
  return run("where", {kept(cond), a, b}, ct, ct, [&](const cpu::Iter& it) {
    // where() only moves values, so it dispatches on the storage size, not the dtype.
    by_storage_size(itemsize(ct), [&](auto tag) {
      using T = decltype(tag);
      cpu::ternary_loop<T, bool, T, T>(it, [](bool c, T x, T y) { return select_bits(c, x, y); });
    });
  });
}
}  // namespace

Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) {
  KILN_TRACE(Where, (c, a, b), (), where(c, a, b))
  return where_impl(c, a, b);
}
Tensor where(const Tensor& c, const Tensor& a, const Scalar& b) {
  KILN_TRACE(Where, (c, a, b), (), where(c, a, b))
  return where_impl(c, a, b);
}
Tensor where(const Tensor& c, const Scalar& a, const Tensor& b) {
  KILN_TRACE(Where, (c, a, b), (), where(c, a, b))
  return where_impl(c, a, b);
}
Tensor where(const Tensor& c, const Scalar& a, const Scalar& b) {
  KILN_TRACE(Where, (c, a, b), (), where(c, a, b))
  return where_impl(c, Arg(a), Arg(b));
}

namespace {
// clamp with optional lower/upper bounds (tensors or wrapped scalars). NaN in x or a bound wins.
Tensor clamp_impl(std::string_view op, const Tensor& x, const std::optional<Arg>& lo,
                  const std::optional<Arg>& hi, Tensor* self) {
  KILN_CHECK(lo || hi, op, "At least one of 'min' or 'max' must not be None");
  Arg L = lo ? *lo : Arg(x), H = hi ? *hi : Arg(x);
  DType ct = lo && hi ? result_type({x, L, H}) : lo ? result_type({x, L}) : result_type({x, H});
  KILN_CHECK(ct != kBool, op, "\"clamp\" not implemented for 'bool'");
  bool has_lo = bool(lo), has_hi = bool(hi);
  if ((!lo || lo->wrapped) && (!hi || hi->wrapped)) {
    // Scalar bounds: one pass over x with the bounds held in registers.
    return run(op, {x}, ct, ct, [&](const cpu::Iter& it) {
      KILN_DISPATCH_ALL(ct, op, [&](auto scalar_tag_) {
        using T = decltype(scalar_tag_);
        using M = opmath_t<T>;
        if constexpr (!std::is_same_v<T, bool>) {
          // bounds rounded to the compute dtype, as PyTorch converts its scalar
          M l = has_lo ? M(T(L.t.item().template to<M>())) : M(0);
          M h = has_hi ? M(T(H.t.item().template to<M>())) : M(0);
          bool lnan = false, hnan = false;
          if constexpr (std::is_floating_point_v<M>) {
            lnan = has_lo && std::isnan(l);
            hnan = has_hi && std::isnan(h);
          }
          if (lnan || hnan) {
            M n = lnan ? l : h;
            cpu::unary_loop<T, T>(it, [=](T) { return T(n); });
          } else if (has_lo && has_hi) {
            opmath_unary_loop<T>(it, [=](M v) {
              v = v < l ? l : v;  // a NaN x stays NaN: both compares are false
              return v > h ? h : v;  // min > max gives max, as min(max(x, lo), hi)
            });
          } else if (has_lo) {
            opmath_unary_loop<T>(it, [=](M v) { return v < l ? l : v; });
          } else {
            opmath_unary_loop<T>(it, [=](M v) { return v > h ? h : v; });
          }
        }
      });
    }, self);
  }
  return run(op, {x, L, H}, ct, ct, [&](const cpu::Iter& it) {
    KILN_DISPATCH_ALL(ct, op, [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
      using T = scalar_t;
      using M = opmath_t<T>;
      cpu::ternary_loop<T, T, T, T>(it, [=](T tv, T tl, T th) {
        M v = M(tv);
        if constexpr (std::is_floating_point_v<M>) {
          if (std::isnan(v)) return tv;
          if (has_lo && std::isnan(M(tl))) return tl;
          if (has_hi && std::isnan(M(th))) return th;
        }
        if (has_lo && v < M(tl)) v = M(tl);
        if (has_hi && v > M(th)) v = M(th);
        return T(v);
      });
    });
  }, self);
}
std::optional<Arg> opt_arg(const std::optional<Scalar>& s) {
  return s ? std::optional<Arg>(Arg(*s)) : std::nullopt;
}
std::optional<Arg> opt_arg(const std::optional<Tensor>& t) {
  return t ? std::optional<Arg>(Arg(*t)) : std::nullopt;
}
}  // namespace

namespace {
// clamp's operands are x and the bounds that are present (attributes has_min, has_max). Traced,
// or on a GPU, clamp reports itself (or runs on the device) with those operands; nullopt else.
template <typename B>
std::vector<trace::Operand> clamp_operands(const Tensor& x, const std::optional<B>& lo, const std::optional<B>& hi) {
  std::vector<trace::Operand> in{x};
  if (lo) in.emplace_back(*lo);
  if (hi) in.emplace_back(*hi);
  return in;
}
template <typename B>
std::vector<Attr> clamp_attrs(const std::optional<B>& lo, const std::optional<B>& hi) {
  return {{"has_max", bool(hi)}, {"has_min", bool(lo)}};
}
template <typename B>
std::optional<Tensor> clamp_hooks(const Tensor& x, const std::optional<B>& lo, const std::optional<B>& hi) {
  std::vector<trace::Operand> in = clamp_operands(x, lo, hi);
  if (autograd::detail::active() && autograd::detail::any_requires_grad(in)) [[unlikely]] {
    Tensor out;
    {
      AutoGradMode off(false);
      out = clamp(x, lo, hi);
    }
    autograd::detail::attach(OpId::Clamp, in, [&] { return clamp_attrs(lo, hi); }, {&out, 1});
    return out;
  }
  trace::Recorder* r = trace::active();
  bool on_device = false;
  for (const trace::Operand& o : in) on_device |= o.tensor && !o.tensor->device().is_cpu();
  if (!r && !on_device) [[likely]]
    return std::nullopt;
  std::vector<Attr> attrs = clamp_attrs(lo, hi);
  if (!r) return device_ops::run(OpId::Clamp, in, std::move(attrs));
  Tensor out;
  {
    trace::Pause p;
    out = clamp(x, lo, hi);
  }
  r->record(OpId::Clamp, in, std::move(attrs), {&out, 1});
  return out;
}
}  // namespace

Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  if (auto out = clamp_hooks(x, lo, hi)) [[unlikely]]
    return *out;
  return clamp_impl("clamp", x, opt_arg(lo), opt_arg(hi), nullptr);
}
Tensor clamp(const Tensor& x, const std::optional<Tensor>& lo, const std::optional<Tensor>& hi) {
  if (auto out = clamp_hooks(x, lo, hi)) [[unlikely]]
    return *out;
  return clamp_impl("clamp", x, opt_arg(lo), opt_arg(hi), nullptr);
}
Tensor& clamp_(Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  KILN_TRACE_INPLACE_WITH(x, Clamp, clamp_operands(x, lo, hi), clamp_attrs(lo, hi), clamp_(x, lo, hi))
  clamp_impl("clamp_", x, opt_arg(lo), opt_arg(hi), &x);
  return x;
}

namespace {
Tensor lerp_impl(const Tensor& s, const Tensor& e, const Arg& w) {
  KILN_CHECK(s.dtype() == e.dtype(), "lerp", "expected dtype ", name(s.dtype()),
             " for `end` but got dtype ", name(e.dtype()));
  KILN_CHECK(w.wrapped || w.t.dtype() == s.dtype(), "lerp", "expected dtype ", name(s.dtype()),
             " for `weight` but got dtype ", name(w.t.dtype()));
  DType ct = s.dtype();
  KILN_CHECK(is_floating(ct), "lerp", "\"lerp_kernel_scalar\" not implemented for '", name(ct), "'");
  return run("lerp", {s, e, w}, ct, ct, [&](const cpu::Iter& it) {
    KILN_DISPATCH_FLOAT(ct, "lerp", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
      using T = scalar_t;
      using M = opmath_t<T>;
      cpu::ternary_loop<T, T, T, T>(it, [](T a, T b, T wt) {
        M x = M(a), y = M(b), t = M(wt);
        // PyTorch's two-sided form: exact at both ends
        return T(std::abs(t) < M(0.5) ? x + t * (y - x) : y - (y - x) * (M(1) - t));
      });
    });
  });
}
}  // namespace

Tensor lerp(const Tensor& s, const Tensor& e, const Scalar& w) {
  KILN_TRACE(Lerp, (s, e, w), (), lerp(s, e, w))
  return lerp_impl(s, e, w);
}
Tensor lerp(const Tensor& s, const Tensor& e, const Tensor& w) {
  KILN_TRACE(Lerp, (s, e, w), (), lerp(s, e, w))
  return lerp_impl(s, e, w);
}

Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value) {
  KILN_TRACE(Addcmul, (self, t1, t2), ({"value", scalar_attr(value)}), addcmul(self, t1, t2, value))
  DType ct = result_type({self, t1, t2});
  KILN_CHECK(ct != kBool, "addcmul", "\"addcmul_cpu_out\" not implemented for 'bool'");
  return run("addcmul", {self, t1, t2}, ct, ct, [&](const cpu::Iter& it) {
    KILN_DISPATCH_ALL(ct, "addcmul", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
      using T = scalar_t;
      using M = opmath_t<T>;
      if constexpr (std::is_same_v<T, bool>) {
        cpu::ternary_loop<T, T, T, T>(it, [](T a, T b, T c) { return bool(a || (b && c)); });
      } else {
        M v = value.to<M>();
        cpu::ternary_loop<T, T, T, T>(it, [=](T a, T b, T c) { return T(M(a) + v * M(b) * M(c)); });
      }
    });
  });
}

namespace {
Tensor masked_fill_impl(std::string_view op, const Tensor& x, const Tensor& mask, const Scalar& v, Tensor* self) {
  KILN_CHECK(mask.dtype() == kBool, op, "masked_fill only supports boolean masks, but got mask with dtype ",
             name(mask.dtype()));
  DType ct = x.dtype();
  Tensor fillv = scalar_tensor(v, ct);
  return run(op, {x, kept(mask), fillv}, ct, ct, [&](const cpu::Iter& it) {
    // (moves values: dispatched on the storage size, as where)
    by_storage_size(itemsize(ct), [&](auto tag) {
      using T = decltype(tag);
      cpu::ternary_loop<T, T, bool, T>(it, [](T a, bool m, T f) { return select_bits(m, f, a); });
    });
  }, self);
}
}  // namespace

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& v) {
  KILN_TRACE(MaskedFill, (x, mask), ({"value", scalar_attr(v)}), masked_fill(x, mask, v))
  return masked_fill_impl("masked_fill", x, mask, v, nullptr);
}

Tensor Tensor::clamp(std::optional<Scalar> lo, std::optional<Scalar> hi) const { return kiln::clamp(*this, lo, hi); }
Tensor Tensor::masked_fill(const Tensor& m, const Scalar& v) const { return kiln::masked_fill(*this, m, v); }
Tensor& Tensor::clamp_(std::optional<Scalar> lo, std::optional<Scalar> hi) { return kiln::clamp_(*this, lo, hi); }
Tensor& Tensor::masked_fill_(const Tensor& m, const Scalar& v) {
  KILN_TRACE_INPLACE(*this, MaskedFill, (*this, m), ({"value", scalar_attr(v)}), masked_fill_(m, v))
  masked_fill_impl("masked_fill_", *this, m, v, this);
  return *this;
}

}  // namespace kiln
