// Elementwise ops: unary math, binary arithmetic, comparisons, logical/bitwise ops, and their
// in-place forms (where, clamp, lerp, addcmul and masked_fill: ternary.cpp).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>

#include "cpu/float16_blocks.h"
#include "cpu/vec.h"
#include "elementwise.h"
#include "ops_common.h"
#include "trace_ops.h"

namespace kiln {

using namespace detail;

namespace {
// The walk follows the output's memory order (the Iter puts its smallest stride innermost). An
// operand contiguous along another dim than that innermost one (x.t() + y; x.t().add_(y), whose
// output is the transposed one) is read a new cache line per element: a [4096, 4096] float32
// x.t() + y took 46 ms, x.t().add_(y) 55 (PyTorch's: 61 and 56). Large ones are first copied
// into the output's layout by the tiled transpose (copy.cpp, 1 ms per 16 MiB), which the op then
// reads in order: the same values. Only for an output whose elements fill its memory in some
// order of its dims (a permutation of a contiguous tensor), where that layout is defined.
Tensor in_walk_order(const Tensor& t, const Tensor& out) {
  const int64_t nd = t.dim(), od = out.dim();
  if (nd < 2 || t.numel() < (int64_t(1) << 16) || nd > od) return t;
  // out's dims, outermost in memory first (a stable sort: size-1 dims keep their place)
  std::vector<int64_t> perm(static_cast<size_t>(od));
  for (int64_t d = 0; d < od; ++d) perm[size_t(d)] = d;
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
    return out.sizes()[a] > 1 && out.sizes()[b] > 1 && out.strides()[a] > out.strides()[b];
  });
  const bool identity = std::is_sorted(perm.begin(), perm.end());
  if (!out.permute(perm).is_contiguous() || (!identity && nd != od)) return t;
  const int64_t inner = perm.back() - (od - nd);  // (t's dims align with out's last ones)
  if (inner < 0 || t.strides()[size_t(inner)] == 1 || t.sizes()[size_t(inner)] == 1) return t;
  bool other = false;
  for (int64_t d = 0; d < nd; ++d) other |= d != inner && t.strides()[size_t(d)] == 1 && t.sizes()[size_t(d)] > 1;
  if (!other) return t;
  if (identity) return t.contiguous();
  std::vector<int64_t> back(static_cast<size_t>(od));
  for (int64_t d = 0; d < od; ++d) back[size_t(perm[size_t(d)])] = d;
  return t.permute(perm).contiguous().permute(back);
}
}  // namespace

Tensor detail::run(std::string_view op, std::initializer_list<Arg> args, DType ct, DType out_dt,
                   const Launch& launch, Tensor* self) {
  check_cpu(op, args);
  std::vector<int64_t> shape = broadcast_all(args, op);
  std::vector<Tensor> ops;
  ops.reserve(args.size() + 1);
  if (self) {
    if (!check_inplace(op, *self, out_dt, shape)) {
      Tensor tmp = run(op, args, ct, out_dt, launch);
      self->copy_(tmp);
      return *self;
    }
    ops.push_back(*self);
    for (const Arg& a : args) ops.push_back(in_walk_order(unalias(*self, prepared(a, ct)), *self));
  } else {
    ops.push_back(empty(shape, out_dt));
    for (const Arg& a : args) ops.push_back(in_walk_order(prepared(a, ct), ops[0]));
  }
  if (shape::numel(shape) > 0) launch(cpu::Iter(ops, shape));
  return ops[0];
}

namespace {

// ---------------------------------------------------------------- unary

using rules::float_compute;

// A float-valued unary op: integers and bool are computed in the default float dtype.
// `sf` is a generic scalar lambda; `vf`/`vd` are SIMD forms for contiguous float32/float64.
// `cost`: an element's work against an exp's (Cost, below), which divides the elements a
// thread must have before a second one joins in.
template <typename SF, typename VF, typename VD>
Tensor float_unary(std::string_view op, const Tensor& x, SF sf, VF vf, VD vd, int cost = 1) {
  DType ct = float_compute(x.dtype());
  return run(op, {x}, ct, ct, [&](const cpu::Iter& it) {
    KILN_DISPATCH_FLOAT(ct, op, [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
      using T = scalar_t;
      it.for_each([&](char** p, const int64_t* s, int64_t n) {
#if KILN_HAVE_VEC
        if constexpr (std::is_same_v<T, float> && !std::is_same_v<VF, std::nullptr_t>) {
          if (s[0] == 4 && s[1] == 4) {
            cpu::vec::map_f32(reinterpret_cast<const float*>(p[1]), reinterpret_cast<float*>(p[0]), n, vf);
            return;
          }
        }
        if constexpr (is_reduced_float_v<T>) {
          // 16-bit floats: widen a block to float32, run the vector form (or the scalar one,
          // which gcc vectorises where it can), round back
          if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
            cpu::by_widened_blocks(reinterpret_cast<const T*>(p[1]), reinterpret_cast<T*>(p[0]), n,
                                   [&](float* buf, int64_t m) {
                                     if constexpr (!std::is_same_v<VF, std::nullptr_t>) cpu::vec::map_f32(buf, buf, m, vf);
                                     else for (int64_t i = 0; i < m; ++i) buf[i] = float(sf(buf[i]));
                                   });
            return;
          }
        }
        if constexpr (std::is_same_v<T, double> && !std::is_same_v<VD, std::nullptr_t>) {
          if (s[0] == 8 && s[1] == 8) {
            cpu::vec::map_f64(reinterpret_cast<const double*>(p[1]), reinterpret_cast<double*>(p[0]), n, vd);
            return;
          }
        }
#endif
        if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
          T* o = reinterpret_cast<T*>(p[0]);
          const T* a = reinterpret_cast<const T*>(p[1]);
          for (int64_t i = 0; i < n; ++i) o[i] = T(sf(opmath_t<T>(a[i])));
        } else {
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<T*>(p[0] + i * s[0]) =
                T(sf(opmath_t<T>(*reinterpret_cast<const T*>(p[1] + i * s[1]))));
        }
      }, cpu::parallel_grain() / cost);
    });
  });
}

// A unary op that keeps the dtype (ints stay ints). `allow_bool` says whether bool is valid.
template <typename F>
Tensor same_unary(std::string_view op, const Tensor& x, bool allow_bool, F f, Tensor* self = nullptr) {
  DType ct = x.dtype();
  KILN_CHECK(allow_bool || ct != kBool, op, "\"", op, "\" not implemented for 'bool'");
  return run(op, {x}, ct, ct, [&](const cpu::Iter& it) {
    KILN_DISPATCH_ALL(ct, op, [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
      opmath_unary_loop<scalar_t>(it, f);
    });
  }, self);
}

// neg and abs of 16-bit floats on their bits: the sign flipped or cleared ((bits & and_mask) ^
// xor_mask). That is what widening, the float32 op and rounding give for every value but a NaN's
// payload, and what PyTorch does (abs clears a NaN's sign too); widened, float16 abs took 3x
// PyTorch's time.
Tensor sign_bit_unary(std::string_view op, const Tensor& x, uint16_t and_mask, uint16_t xor_mask) {
  return run(op, {x}, x.dtype(), x.dtype(), [&](const cpu::Iter& it) {
    cpu::unary_loop<uint16_t, uint16_t>(it, [=](uint16_t b) { return uint16_t((b & and_mask) ^ xor_mask); });
  });
}

// A unary predicate producing bool.
template <typename F>
Tensor pred_unary(std::string_view op, const Tensor& x, F f) {
  DType ct = x.dtype();
  return run(op, {x}, ct, kBool, [&](const cpu::Iter& it) {
    KILN_DISPATCH_ALL(ct, op, [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
      using T = scalar_t;
      cpu::unary_loop<bool, T>(it, [&](T v) { return bool(f(opmath_t<T>(v))); });
    });
  });
}

template <typename T> constexpr bool is_fp = std::is_floating_point_v<T>;

// exp of one element: float32 through the function of the vector loops (cpu/vec.h), so a
// strided operand gets the same values as a contiguous one.
template <typename T> T exp_s(T x) {
  if constexpr (std::is_same_v<T, float>) return cpu::vec::kiln_expf(x);
  else return std::exp(x);
}
template <typename T> T sigmoid_s(T x) { return T(1) / (T(1) + exp_s(-x)); }
template <typename T> T erf_s(T x) {  // (the same for erf)
  if constexpr (std::is_same_v<T, float>) return cpu::vec::kiln_erff(x);
  else return std::erf(x);
}
template <typename T> T tanh_s(T x) {  // (the same for tanh)
  if constexpr (std::is_same_v<T, float>) return cpu::vec::kiln_tanhf(x);
  else return std::tanh(x);
}
constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;

}  // namespace

// The op-table ids of the unary ops defined by the macros below.
#define KILN_OP_ID_exp2 Exp2
#define KILN_OP_ID_expm1 Expm1
#define KILN_OP_ID_log Log
#define KILN_OP_ID_log2 Log2
#define KILN_OP_ID_log1p Log1p
#define KILN_OP_ID_sin Sin
#define KILN_OP_ID_cos Cos
#define KILN_OP_ID_tan Tan
#define KILN_OP_ID_asin Asin
#define KILN_OP_ID_acos Acos
#define KILN_OP_ID_atan Atan
#define KILN_OP_ID_sinh Sinh
#define KILN_OP_ID_cosh Cosh
#define KILN_OP_ID_floor Floor
#define KILN_OP_ID_ceil Ceil
#define KILN_OP_ID_trunc Trunc
#define KILN_OP_ID_round Round

#if KILN_HAVE_VEC
#define KILN_VF(expr) [](cpu::vec::VF x) { return expr; }
#define KILN_VD(expr) [](cpu::vec::VD x) { return expr; }
#define KILN_VF2(expr) [](cpu::vec::VF x, cpu::vec::VF y) { return expr; }
#define KILN_VD2(expr) [](cpu::vec::VD x, cpu::vec::VD y) { return expr; }
#else
#define KILN_VF(expr) nullptr
#define KILN_VD(expr) nullptr
#define KILN_VF2(expr) nullptr
#define KILN_VD2(expr) nullptr
#endif

// What an element of each costly op takes against an exp's (0.18 ns per float32 element on a
// Zen 5 core, SLEEF's vector forms in cache), to the nearest power of two: a thread then waits
// for 2^15 / cost elements (cpu::parallel_grain) before a second joins in. Two threads win once
// one would take about 6 us (the fork and join cost about 3): at 2^14 elements atan2 took 14.9
// us on one thread and 8.7 on two, at 2^15 exp 5.4 on one (docs/perf-journal.md, "costly eager
// ops on two threads sooner"). Ops not named here cost 1.
struct Cost {
  static constexpr int kLog = 2, kTrig = 2, kErf = 2, kTanh = 2, kInverseTrig = 4, kTan = 4, kHyperbolic = 4,
                       kExpm1 = 4, kAtan2 = 4, kGeluTanh = 2, kPow = 8, kHypot = 2, kLogAddExp = 4;
};

// out = f(a, b) over float32 or float64 with a vector form of f (vf: float lanes, vd: double
// lanes, either may be nullptr): where the output is contiguous and each operand contiguous or
// broadcast, the inner loop runs vf or vd (cpu::vec::map2); elsewhere, and for other dtypes, f
// one element at a time. `cost`: as float_unary's.
template <typename T, typename F, typename VF, typename VD>
void binary_loop_vec(const cpu::Iter& it, F f, VF vf, VD vd, int cost = 1) {
  const int64_t grain = cpu::parallel_grain() / cost;
#if KILN_HAVE_VEC
  if constexpr ((std::is_same_v<T, float> && !std::is_same_v<VF, std::nullptr_t>) ||
                (std::is_same_v<T, double> && !std::is_same_v<VD, std::nullptr_t>)) {
    it.for_each([&](char** p, const int64_t* s, int64_t n) {
      constexpr int64_t e = sizeof(T);
      if (s[0] == e && (s[1] == e || s[1] == 0) && (s[2] == e || s[2] == 0)) {
        const T* a = reinterpret_cast<const T*>(p[1]);
        const T* b = reinterpret_cast<const T*>(p[2]);
        if constexpr (std::is_same_v<T, float>) cpu::vec::map2(a, s[1] / e, b, s[2] / e, reinterpret_cast<T*>(p[0]), n, vf);
        else cpu::vec::map2(a, s[1] / e, b, s[2] / e, reinterpret_cast<T*>(p[0]), n, vd);
        return;
      }
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<T*>(p[0] + i * s[0]) =
            T(f(*reinterpret_cast<const T*>(p[1] + i * s[1]), *reinterpret_cast<const T*>(p[2] + i * s[2])));
    }, grain);
    return;
  }
  if constexpr (is_reduced_float_v<T> && !std::is_same_v<VF, std::nullptr_t>) {
    // (16-bit floats: widened blocks through the float32 vector form)
    opmath_binary_loop<T>(it, f, grain, vf);
    return;
  }
#endif
  opmath_binary_loop<T>(it, f, grain);
}

// Transcendental ops with a SLEEF vector form.
#define KILN_FLOAT_UNARY_SLEEF(fn, sleef, scalar_expr, cost)                                     \
  Tensor fn(const Tensor& x) {                                                                   \
    KILN_TRACE(KILN_OP_ID_##fn, (x), (), fn(x))                                                  \
    return float_unary(#fn, x, [](auto v) { return scalar_expr; },                               \
                       KILN_VF(KILN_SLEEF_F(sleef)(x)), KILN_VD(KILN_SLEEF_D(sleef)(x)), cost); \
  }
KILN_FLOAT_UNARY_SLEEF(exp2, exp2, std::exp2(v), 1)
KILN_FLOAT_UNARY_SLEEF(expm1, expm1, std::expm1(v), Cost::kExpm1)
KILN_FLOAT_UNARY_SLEEF(log, log, std::log(v), Cost::kLog)
KILN_FLOAT_UNARY_SLEEF(log2, log2, std::log2(v), Cost::kLog)
KILN_FLOAT_UNARY_SLEEF(log1p, log1p, std::log1p(v), Cost::kLog)
KILN_FLOAT_UNARY_SLEEF(sin, sin, std::sin(v), Cost::kTrig)
KILN_FLOAT_UNARY_SLEEF(cos, cos, std::cos(v), Cost::kTrig)
KILN_FLOAT_UNARY_SLEEF(tan, tan, std::tan(v), Cost::kTan)
KILN_FLOAT_UNARY_SLEEF(asin, asin, std::asin(v), Cost::kInverseTrig)
KILN_FLOAT_UNARY_SLEEF(acos, acos, std::acos(v), Cost::kInverseTrig)
KILN_FLOAT_UNARY_SLEEF(atan, atan, std::atan(v), Cost::kInverseTrig)
KILN_FLOAT_UNARY_SLEEF(sinh, sinh, std::sinh(v), Cost::kHyperbolic)
KILN_FLOAT_UNARY_SLEEF(cosh, cosh, std::cosh(v), Cost::kHyperbolic)
#undef KILN_FLOAT_UNARY_SLEEF
Tensor exp(const Tensor& x) {  // (float32 through kiln's own vector exp, cpu/vec.h)
  KILN_TRACE(Exp, (x), (), exp(x))
  return float_unary("exp", x, [](auto v) { return exp_s(v); }, KILN_VF(cpu::vec::expf(x)), KILN_VD(KILN_SLEEF_D(exp)(x)), 1);
}
Tensor tanh(const Tensor& x) {  // (float32 through kiln's own vector tanh, cpu/vec.h)
  KILN_TRACE(Tanh, (x), (), tanh(x))
  return float_unary("tanh", x, [](auto v) { return tanh_s(v); }, KILN_VF(cpu::vec::tanhf(x)),
                     KILN_VD(KILN_SLEEF_D(tanh)(x)), Cost::kTanh);
}
Tensor erf(const Tensor& x) {  // (float32 through kiln's own vector erf, cpu/vec.h)
  KILN_TRACE(Erf, (x), (), erf(x))
  return float_unary("erf", x, [](auto v) { return erf_s(v); }, KILN_VF(cpu::vec::erff(x)), KILN_VD(KILN_SLEEF_D(erf)(x)),
                     Cost::kErf);
}

// Plain arithmetic: the compiler vectorises the scalar loop (sqrt needs -fno-math-errno).
Tensor sqrt(const Tensor& x) {
  KILN_TRACE(Sqrt, (x), (), sqrt(x)) return float_unary("sqrt", x, [](auto v) { return std::sqrt(v); }, nullptr, nullptr); }
Tensor rsqrt(const Tensor& x) {
  KILN_TRACE(Rsqrt, (x), (), rsqrt(x))
  return float_unary("rsqrt", x, [](auto v) { return decltype(v)(1) / std::sqrt(v); }, nullptr, nullptr);
}
Tensor reciprocal(const Tensor& x) {
  KILN_TRACE(Reciprocal, (x), (), reciprocal(x))
  return float_unary("reciprocal", x, [](auto v) { return decltype(v)(1) / v; }, nullptr, nullptr);
}
Tensor sigmoid(const Tensor& x) {
  KILN_TRACE(Sigmoid, (x), (), sigmoid(x))
  return float_unary("sigmoid", x, [](auto v) { return sigmoid_s(v); },
                     KILN_VF(1.0f / (1.0f + cpu::vec::expf(-x))),
                     KILN_VD(1.0 / (1.0 + KILN_SLEEF_D(exp)(-x))));
}
Tensor silu(const Tensor& x) {
  KILN_TRACE(Silu, (x), (), silu(x))
  KILN_CHECK(is_floating(x.dtype()), "silu", "\"silu\" not implemented for '", name(x.dtype()), "'");
  return float_unary("silu", x, [](auto v) { return v / (decltype(v)(1) + exp_s(-v)); },
                     KILN_VF(x / (1.0f + cpu::vec::expf(-x))),
                     KILN_VD(x / (1.0 + KILN_SLEEF_D(exp)(-x))));
}
Tensor gelu(const Tensor& x, std::string_view approximate) {
  KILN_TRACE(Gelu, (x), ({"approximate", std::string(approximate)}), gelu(x, approximate))
  KILN_CHECK(approximate == "none" || approximate == "tanh", "gelu",
             "approximate argument must be either none or tanh, got '", approximate, "'");
  KILN_CHECK(is_floating(x.dtype()), "gelu", "\"GeluKernelImpl\" not implemented for '", name(x.dtype()), "'");
  if (approximate == "tanh") {
    return float_unary("gelu", x, [](auto v) {
          using T = decltype(v);
          return T(0.5) * v * (T(1) + tanh_s(T(kSqrt2OverPi) * (v + T(0.044715) * v * v * v)));
        },
        KILN_VF(0.5f * x * (1.0f + cpu::vec::tanhf(float(kSqrt2OverPi) * (x + 0.044715f * x * x * x)))),
        KILN_VD(0.5 * x * (1.0 + KILN_SLEEF_D(tanh)(kSqrt2OverPi * (x + 0.044715 * x * x * x)))), Cost::kGeluTanh);
  }
  return float_unary("gelu", x, [](auto v) {
        using T = decltype(v);
        return T(0.5) * v * (T(1) + erf_s(v * T(kSqrt1_2)));
      },
      KILN_VF(0.5f * x * (1.0f + cpu::vec::erff(x * float(kSqrt1_2)))),
      KILN_VD(0.5 * x * (1.0 + KILN_SLEEF_D(erf)(x * kSqrt1_2))), Cost::kErf);
}

Tensor neg(const Tensor& x) {
  KILN_TRACE(Neg, (x), (), neg(x))
  KILN_CHECK(x.dtype() != kBool, "neg",
             "Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
             "to invert a mask, use the `~` or `logical_not()` operator instead.");
  if (x.dtype() == kFloat16 || x.dtype() == kBFloat16) return sign_bit_unary("neg", x, 0xffff, 0x8000);
  return same_unary("neg", x, false, [](auto v) { return -v; });
}
Tensor abs(const Tensor& x) {
  KILN_TRACE(Abs, (x), (), abs(x))
  if (x.dtype() == kFloat16 || x.dtype() == kBFloat16) return sign_bit_unary("abs", x, 0x7fff, 0);
  return same_unary("abs", x, false, [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_unsigned_v<T>) return v;
    else if constexpr (std::is_floating_point_v<T>) return std::fabs(v);  // (NaN's sign cleared, as PyTorch's)
    else return v < 0 ? T(-v) : v;
  });
}
Tensor sign(const Tensor& x) {
  KILN_TRACE(Sign, (x), (), sign(x))
  return same_unary("sign", x, true, [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_same_v<T, bool>) return v;
    else return T((T(0) < v) - (v < T(0)));
  });
}
// max(v, 0); a bool is never below 0 (and `v < 0` on one is a warning).
constexpr auto relu_value = [](auto v) {
  if constexpr (std::is_same_v<decltype(v), bool>) return v;
  else return v < 0 ? decltype(v)(0) : v;
};
Tensor relu(const Tensor& x) {
  KILN_TRACE(Relu, (x), (), relu(x))
  return same_unary("relu", x, false, relu_value);
}
Tensor& relu_(Tensor& x) {
  KILN_TRACE_INPLACE(x, Relu, (x), (), relu_(x))
  same_unary("relu_", x, false, relu_value, &x);
  return x;
}

#define KILN_ROUNDING_UNARY(fn, expr)                                                        \
  Tensor fn(const Tensor& x) {                                                               \
    KILN_TRACE(KILN_OP_ID_##fn, (x), (), fn(x))                                              \
    KILN_CHECK(x.dtype() != kBool, #fn, "\"" #fn "\" not implemented for 'bool'");            \
    if (!is_floating(x.dtype())) return x.clone();                                           \
    return same_unary(#fn, x, false, [](auto v) { return expr; });                          \
  }
KILN_ROUNDING_UNARY(round, std::nearbyint(v))  // half to even, as PyTorch
#undef KILN_ROUNDING_UNARY
// floor, ceil and trunc through the vector rounding instructions: gcc does not vectorise
// std::floor without -fno-trapping-math (0.26 against round's 0.06 ns per float in cache).
#define KILN_ROUNDING_UNARY_VEC(fn, vfn)                                                              \
  Tensor fn(const Tensor& x) {                                                                        \
    KILN_TRACE(KILN_OP_ID_##fn, (x), (), fn(x))                                                       \
    KILN_CHECK(x.dtype() != kBool, #fn, "\"" #fn "\" not implemented for 'bool'");                     \
    if (!is_floating(x.dtype())) return x.clone();                                                    \
    return float_unary(#fn, x, [](auto v) { return std::fn(v); }, KILN_VF(cpu::vec::vfn(x)), KILN_VD(cpu::vec::vfn(x))); \
  }
KILN_ROUNDING_UNARY_VEC(floor, floorv)
KILN_ROUNDING_UNARY_VEC(ceil, ceilv)
KILN_ROUNDING_UNARY_VEC(trunc, truncv)
#undef KILN_ROUNDING_UNARY_VEC

Tensor isnan(const Tensor& x) {
  KILN_TRACE(IsNan, (x), (), isnan(x))
  return pred_unary("isnan", x, [](auto v) {
    if constexpr (is_fp<decltype(v)>) return std::isnan(v); else return false;
  });
}
Tensor isinf(const Tensor& x) {
  KILN_TRACE(IsInf, (x), (), isinf(x))
  return pred_unary("isinf", x, [](auto v) {
    if constexpr (is_fp<decltype(v)>) return std::isinf(v); else return false;
  });
}
Tensor isfinite(const Tensor& x) {
  KILN_TRACE(IsFinite, (x), (), isfinite(x))
  return pred_unary("isfinite", x, [](auto v) {
    if constexpr (is_fp<decltype(v)>) return std::isfinite(v); else return true;
  });
}
Tensor logical_not(const Tensor& x) {
  KILN_TRACE(LogicalNot, (x), (), logical_not(x))
  return pred_unary("logical_not", x, [](auto v) { return !(v != decltype(v)(0)); });
}
Tensor bitwise_not(const Tensor& x) {
  KILN_TRACE(BitwiseNot, (x), (), bitwise_not(x))
  KILN_CHECK(!is_floating(x.dtype()), "bitwise_not", "\"bitwise_not_cpu\" not implemented for '",
             name(x.dtype()), "'");
  return same_unary("bitwise_not", x, true, [](auto v) {
    using V = decltype(v);
    if constexpr (std::is_same_v<V, bool>) return !v;
    else if constexpr (std::is_floating_point_v<V>) return v;  // rejected above
    else return V(~v);
  });
}

Tensor nan_to_num(const Tensor& x, std::optional<double> nan, std::optional<double> posinf,
                  std::optional<double> neginf) {
  KILN_TRACE(NanToNum, (x), ({"nan", optional_attr(nan)}, {"posinf", optional_attr(posinf)}, {"neginf", optional_attr(neginf)}),
             nan_to_num(x, nan, posinf, neginf))
  if (!is_floating(x.dtype())) return x.clone();
  // The replacements as the dtype holds them, converted as a cast converts (out of range: inf).
  auto value = [&](std::optional<double> v, double dflt) {
    const float f = float(v.value_or(dflt));
    switch (x.dtype()) {
      case kFloat16: return double(float(Half(f)));
      case kBFloat16: return double(float(BFloat16(f)));
      case kFloat32: return double(f);
      default: return v.value_or(dflt);
    }
  };
  const double hi = x.dtype() == kFloat16 ? 65504.0
                    : x.dtype() == kBFloat16 ? 3.3895313892515355e38
                    : x.dtype() == kFloat32 ? double(std::numeric_limits<float>::max())
                                            : std::numeric_limits<double>::max();
  const double vn = value(nan, 0.0), vp = value(posinf, hi), vm = value(neginf, -hi);
  constexpr double inf = std::numeric_limits<double>::infinity();
  // (three selects, by explicit vectors for float32 and float64: gcc left every form of the
  // scalar loop a branch per element, 1.2 ms for 4M floats against PyTorch's 0.2)
  return float_unary("nan_to_num", x,
      [=](auto v) {
        using M = decltype(v);
        M r = v != v ? M(vn) : v;
        r = v == M(inf) ? M(vp) : r;
        return v == M(-inf) ? M(vm) : r;
      },
#if KILN_HAVE_VEC
      [=](cpu::vec::VF v) {
        using namespace cpu::vec;
        const VF r = where(nan_lanes(v), setf(float(vn)), v);
        return where(eq(v, setf(-INFINITY)), setf(float(vm)), where(eq(v, setf(INFINITY)), setf(float(vp)), r));
      },
      [=](cpu::vec::VD v) {
        using namespace cpu::vec;
        const VD r = where(nan_lanes(v), setd(vn), v);
        return where(eq(v, setd(-inf)), setd(vm), where(eq(v, setd(inf)), setd(vp), r));
      });
#else
      nullptr, nullptr);
#endif
}

// ---------------------------------------------------------------- binary

namespace {

// out = f(a, b) with inputs and output of the compute dtype (computed in its opmath type).
template <typename F>
void same_binary_launch(const cpu::Iter& it, DType ct, std::string_view op, F f) {
  KILN_DISPATCH_ALL(ct, op, [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
    opmath_binary_loop<scalar_t>(it, f);
  });
}

void check_alpha(std::string_view op, DType ct, const Scalar& alpha) {
  KILN_CHECK(!alpha.is_bool() || ct == kBool, op, "Boolean alpha only supported for Boolean results.");
  KILN_CHECK(is_floating(ct) || !alpha.is_floating(), op,
             "For integral input tensors, argument alpha must not be a floating point number.");
}

Tensor add_impl(std::string_view op, const Arg& a, const Arg& b, const Scalar& alpha, Tensor* self) {
  DType ct = result_type({a, b});
  check_alpha(op, ct, alpha);
  bool unit = alpha.to_double() == 1.0;
  return run(op, {a, b}, ct, ct, [&](const cpu::Iter& it) {
    KILN_DISPATCH_ALL(ct, op, [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
      using T = scalar_t;
      using M = opmath_t<T>;
      if constexpr (std::is_same_v<T, bool>) {
        bool al = alpha.to_bool();
        cpu::binary_loop<T, T, T>(it, [=](T x, T y) { return bool(x || (al && y)); });
      } else if constexpr (std::is_integral_v<T>) {
        // Integers wrap (as PyTorch's do): computed in uint64_t, where overflow is defined.
        uint64_t al = uint64_t(alpha.to<int64_t>());
        cpu::binary_loop<T, T, T>(it, [=](T x, T y) { return T(uint64_t(x) + al * uint64_t(y)); });
      } else if (unit) {
        opmath_binary_loop<T>(it, [](M x, M y) { return x + y; });
      } else {
        // One fused multiply-add, as PyTorch's vec::fmadd and kiln's compiled kernels (EOp::Fma):
        // alpha * y is not rounded on its own. Written out, not left to the compiler's
        // contraction, which GCC does at -O2 and up only.
        M al = alpha.to<M>();
        opmath_binary_loop<T>(it, [=](M x, M y) { return std::fma(al, y, x); });
      }
    });
  }, self);
}

void check_sub(const Arg& a, const Arg& b) {
  KILN_CHECK(a.t.dtype() != kBool && b.t.dtype() != kBool, "sub",
             "Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
             "trying to invert a mask, use the `~` or `logical_not()` operator instead.");
}

Tensor mul_impl(const Arg& a, const Arg& b, Tensor* self) {
  DType ct = result_type({a, b});
  return run(self ? "mul_" : "mul", {a, b}, ct, ct, [&](const cpu::Iter& it) {
    if (ct == kBool) return cpu::binary_loop<bool, bool, bool>(it, [](bool x, bool y) { return x && y; });
    same_binary_launch(it, ct, "mul", [](auto x, auto y) {
      using T = decltype(x);
      // integers wrap, computed in uint64_t where overflow is defined (int8 * int8 would promote)
      if constexpr (std::is_integral_v<T>) return T(uint64_t(x) * uint64_t(y));
      else return x * y;
    });
  }, self);
}

// Python-style floor division of floats, exact at the edges (as CPython's float // does).
template <typename M>
M floor_div_float(M a, M b) {
  if (b == 0) return a / b;
  M mod = std::fmod(a, b);
  M div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= M(1);
  M fl;
  if (div != 0) {
    fl = std::floor(div);
    if (div - fl > M(0.5)) fl += M(1);
  } else {
    fl = std::copysign(M(0), a / b);
  }
  return fl;
}

// -x with two's-complement wrapping (-INT_MIN is INT_MIN), without signed overflow.
template <typename T>
T wrapping_neg(T x) {
  using U = std::make_unsigned_t<T>;
  return T(U(0) - U(x));
}

template <typename T>
T int_floor_div(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return wrapping_neg(a);  // avoids the INT_MIN / -1 trap; wraps like PyTorch
    T q = T(a / b);
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
  } else {
    return T(a / b);
  }
}

// An integer kernel with a zero divisor sets the flag instead of trapping; the op then fails.
struct ZeroDivision {
  std::atomic<bool> seen{false};
  void check(std::string_view op) const {
    KILN_CHECK(!seen.load(), op, "ZeroDivisionError: integer division or modulo by zero");
  }
};

enum class DivMode { True, Trunc, Floor };
DivMode parse_mode(std::optional<std::string_view> m) {
  if (!m) return DivMode::True;
  if (*m == "trunc") return DivMode::Trunc;
  if (*m == "floor") return DivMode::Floor;
  KILN_FAIL("div", "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", *m, "'");
}

Tensor div_impl(std::string_view op, const Arg& a, const Arg& b, DivMode mode, Tensor* self) {
  DType common = result_type({a, b});
  DType ct = mode == DivMode::True ? float_compute(common) : common;
  if (mode != DivMode::True)
    KILN_CHECK(ct != kBool, op, "\"div_floor/trunc\" not implemented for 'bool'");
  ZeroDivision zd;
  Tensor r = run(op, {a, b}, ct, ct, [&](const cpu::Iter& it) {
    KILN_DISPATCH_ALL(ct, op, [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
      using T = scalar_t;
      using M = opmath_t<T>;
      if constexpr (std::is_same_v<T, bool>) {
        return;
      } else if constexpr (std::is_integral_v<T>) {
        cpu::binary_loop<T, T, T>(it, [&](T x, T y) -> T {
          if (y == 0) { zd.seen.store(true, std::memory_order_relaxed); return 0; }
          if (mode == DivMode::Floor) return int_floor_div(x, y);
          if constexpr (std::is_signed_v<T>) if (y == -1) return wrapping_neg(x);
          return T(x / y);
        });
      } else if (mode == DivMode::True) {
        opmath_binary_loop<T>(it, [](M x, M y) { return x / y; });
      } else if (mode == DivMode::Trunc) {
        opmath_binary_loop<T>(it, [](M x, M y) { return std::trunc(x / y); });
      } else {
        binary_loop_vec<T>(it, [](M x, M y) { return floor_div_float(x, y); }, KILN_VF2(cpu::vec::floor_divf(x, y)), nullptr);
      }
    });
  }, self);
  zd.check(op);
  return r;
}

Tensor remainder_like(std::string_view op, const Arg& a, const Arg& b, bool python_sign) {
  DType ct = result_type({a, b});
  KILN_CHECK(ct != kBool, op, "\"", op, "\" not implemented for 'bool'");
  ZeroDivision zd;
  Tensor r = run(op, {a, b}, ct, ct, [&](const cpu::Iter& it) {
    KILN_DISPATCH_ALL(ct, op, [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
      using T = scalar_t;
      using M = opmath_t<T>;
      if constexpr (std::is_same_v<T, bool>) {
        return;
      } else if constexpr (std::is_integral_v<T>) {
        cpu::binary_loop<T, T, T>(it, [&](T x, T y) -> T {
          if (y == 0) { zd.seen.store(true, std::memory_order_relaxed); return 0; }
          if constexpr (std::is_signed_v<T>) if (y == -1) return 0;
          T m = T(x % y);
          if (python_sign && m != 0 && ((m < 0) != (y < 0))) m = T(m + y);
          return m;
        });
      } else if (python_sign) {
        binary_loop_vec<T>(it, [](M x, M y) {
              M m = std::fmod(x, y);
              if (m != 0 && ((y < 0) != (m < 0))) m += y;
              return m;
            },
            KILN_VF2(cpu::vec::to_divisor_sign(cpu::vec::fmodf(x, y), y)), nullptr);
      } else {
        binary_loop_vec<T>(it, [](M x, M y) { return std::fmod(x, y); }, KILN_VF2(cpu::vec::fmodf(x, y)), nullptr);
      }
    });
  });
  zd.check(op);
  return r;
}

template <typename T>
T int_pow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp & 1) ? T(-1) : T(1);
      return 0;
    }
  }
  // unsigned arithmetic wraps like PyTorch's and avoids signed-overflow UB
  using U = std::make_unsigned_t<T>;
  U r = 1, b = U(base);
  auto e = std::make_unsigned_t<T>(exp);
  while (e) {
    if (e & 1) r = U(r * b);
    b = U(b * b);
    e >>= 1;
  }
  return T(r);
}

Tensor pow_impl(const Arg& a, const Arg& b) {
  DType ct = result_type({a, b});
  KILN_CHECK(ct != kBool, "pow", "\"pow\" not implemented for 'bool'");
  if (b.wrapped && !is_floating(ct) && b.t.item().to_int() < 0 && !b.t.is_floating_point())
    KILN_FAIL("pow", "Integers to negative integer powers are not allowed.");
  if (b.wrapped && is_floating(ct)) {
    // A scalar exponent: the common powers as PyTorch special-cases them (exact, vectorised),
    // any other through SLEEF's vector pow.
    double e = b.t.item().to_double();
    Tensor x = as_dtype(a.t, ct);
    if (e == 1.0) return x.clone();
    if (e == 2.0) return mul(x, x);
    if (e == 0.5) return sqrt(x);
    if (e == -0.5) return rsqrt(x);
    if (e == -1.0) return reciprocal(x);
    if (e == 3.0)
      return float_unary("pow", x, [](auto v) { return v * v * v; }, nullptr, nullptr);
    if (e == -2.0)
      return float_unary("pow", x, [](auto v) { return decltype(v)(1) / (v * v); }, nullptr, nullptr);
#if KILN_HAVE_VEC
    float ef = float(e);
    return float_unary("pow", x, [e](auto v) { return std::pow(v, decltype(v)(e)); },
                       [ef](cpu::vec::VF v) { return KILN_SLEEF_F(pow)(v, cpu::vec::setf(ef)); },
                       [e](cpu::vec::VD v) { return KILN_SLEEF_D(pow)(v, cpu::vec::setd(e)); }, Cost::kPow);
#else
    return float_unary("pow", x, [e](auto v) { return std::pow(v, decltype(v)(e)); }, nullptr, nullptr, Cost::kPow);
#endif
  }
  return run("pow", {a, b}, ct, ct, [&](const cpu::Iter& it) {
    KILN_DISPATCH_ALL(ct, "pow", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
      using T = scalar_t;
      using M = opmath_t<T>;
      if constexpr (std::is_same_v<T, bool>) {
        cpu::binary_loop<T, T, T>(it, [](T x, T y) { return bool(x || !y); });
      } else if constexpr (std::is_integral_v<T>) {
        cpu::binary_loop<T, T, T>(it, [](T x, T y) { return int_pow(x, y); });
      } else {
        binary_loop_vec<T>(it, [](M x, M y) { return std::pow(x, y); }, KILN_VF2(KILN_SLEEF_F(pow)(x, y)),
                           KILN_VD2(KILN_SLEEF_D(pow)(x, y)), Cost::kPow);
      }
    });
  });
}

// Comparisons compute in the promoted dtype and produce bool.
template <typename F>
Tensor compare(std::string_view op, const Arg& a, const Arg& b, F f) {
  DType ct = result_type({a, b});
  return run(op, {a, b}, ct, kBool, [&](const cpu::Iter& it) {
    KILN_DISPATCH_ALL(ct, op, [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
      using T = scalar_t;
      using M = opmath_t<T>;
      cpu::binary_loop<bool, T, T>(it, [&](T x, T y) { return bool(f(M(x), M(y))); });
    });
  });
}

template <typename F>
Tensor logical(std::string_view op, const Tensor& a, const Tensor& b, F f) {
  return run(op, {a, b}, kBool, kBool, [&](const cpu::Iter& it) {
    cpu::binary_loop<bool, bool, bool>(it, [&](bool x, bool y) { return bool(f(x, y)); });
  });
}

template <typename F>
Tensor bitwise(std::string_view op, const Arg& a, const Arg& b, F f) {
  DType ct = result_type({a, b});
  KILN_CHECK(!is_floating(ct), op, "\"", op, "_cpu\" not implemented for '", name(ct), "'");
  return run(op, {a, b}, ct, ct, [&](const cpu::Iter& it) {
    KILN_DISPATCH_INTEGRAL(ct, op, [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
      using T = scalar_t;
      cpu::binary_loop<T, T, T>(it, [&](T x, T y) { return T(f(x, y)); });
    });
  });
}

template <typename F, typename VF, typename VD>
Tensor float_binary(std::string_view op, const Arg& a, const Arg& b, F f, VF vf, VD vd, int cost = 1) {
  DType ct = float_compute(result_type({a, b}));
  return run(op, {a, b}, ct, ct, [&](const cpu::Iter& it) {
    KILN_DISPATCH_FLOAT(ct, op, [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
      binary_loop_vec<scalar_t>(it, f, vf, vd, cost);
    });
  });
}

template <typename F>
Tensor minmax(std::string_view op, const Tensor& a, const Tensor& b, F pick) {
  DType ct = result_type({a, b});
  return run(op, {a, b}, ct, ct, [&](const cpu::Iter& it) {
    KILN_DISPATCH_ALL(ct, op, [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
      using M = opmath_t<scalar_t>;
      opmath_binary_loop<scalar_t>(it, [&](M u, M v) {
        if constexpr (std::is_floating_point_v<M>)
          if (std::isnan(u) || std::isnan(v)) return std::numeric_limits<M>::quiet_NaN();
        return M(pick(u, v));
      });
    });
  });
}

}  // namespace

#define KILN_ALPHA(a) ({"alpha", scalar_attr(a)})
#define KILN_MODE(m) ({"rounding_mode", m ? AttrValue(std::string(*m)) : AttrValue(NoneAttr{})})
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  KILN_TRACE(Add, (a, b), KILN_ALPHA(alpha), add(a, b, alpha))
  return add_impl("add", a, b, alpha, nullptr);
}
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha) {
  KILN_TRACE(Add, (a, b), KILN_ALPHA(alpha), add(a, b, alpha))
  return add_impl("add", a, b, alpha, nullptr);
}
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  KILN_TRACE(Sub, (a, b), KILN_ALPHA(alpha), sub(a, b, alpha))
  check_sub(a, b);
  return add_impl("sub", a, b, -alpha, nullptr);
}
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha) {
  KILN_TRACE(Sub, (a, b), KILN_ALPHA(alpha), sub(a, b, alpha))
  check_sub(a, b);
  return add_impl("sub", a, b, -alpha, nullptr);
}
Tensor rsub(const Tensor& a, const Scalar& b) {
  KILN_TRACE(Sub, (b, a), KILN_ALPHA(1), rsub(a, b))
  check_sub(a, b);
  return add_impl("rsub", Arg(b), a, -1, nullptr);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  KILN_TRACE(Mul, (a, b), (), mul(a, b))
  return mul_impl(a, b, nullptr);
}
Tensor mul(const Tensor& a, const Scalar& b) {
  KILN_TRACE(Mul, (a, b), (), mul(a, b))
  return mul_impl(a, b, nullptr);
}
Tensor div(const Tensor& a, const Tensor& b, std::optional<std::string_view> m) {
  KILN_TRACE(Div, (a, b), KILN_MODE(m), div(a, b, m))
  return div_impl("div", a, b, parse_mode(m), nullptr);
}
Tensor div(const Tensor& a, const Scalar& b, std::optional<std::string_view> m) {
  KILN_TRACE(Div, (a, b), KILN_MODE(m), div(a, b, m))
  return div_impl("div", a, b, parse_mode(m), nullptr);
}
Tensor div(const Scalar& a, const Tensor& b, std::optional<std::string_view> m) {
  KILN_TRACE(Div, (a, b), KILN_MODE(m), div(a, b, m))
  return div_impl("div", Arg(a), b, parse_mode(m), nullptr);
}
Tensor floor_divide(const Tensor& a, const Tensor& b) {
  KILN_TRACE(Div, (a, b), ({"rounding_mode", std::string("floor")}), floor_divide(a, b))
  return div_impl("floor_divide", a, b, DivMode::Floor, nullptr);
}
Tensor floor_divide(const Tensor& a, const Scalar& b) {
  KILN_TRACE(Div, (a, b), ({"rounding_mode", std::string("floor")}), floor_divide(a, b))
  return div_impl("floor_divide", a, b, DivMode::Floor, nullptr);
}
Tensor remainder(const Tensor& a, const Tensor& b) {
  KILN_TRACE(Remainder, (a, b), (), remainder(a, b))
  return remainder_like("remainder", a, b, true);
}
Tensor remainder(const Tensor& a, const Scalar& b) {
  KILN_TRACE(Remainder, (a, b), (), remainder(a, b))
  return remainder_like("remainder", a, b, true);
}
Tensor fmod(const Tensor& a, const Tensor& b) {
  KILN_TRACE(Fmod, (a, b), (), fmod(a, b))
  return remainder_like("fmod", a, b, false);
}
Tensor fmod(const Tensor& a, const Scalar& b) {
  KILN_TRACE(Fmod, (a, b), (), fmod(a, b))
  return remainder_like("fmod", a, b, false);
}
Tensor pow(const Tensor& a, const Tensor& b) {
  KILN_TRACE(Pow, (a, b), (), pow(a, b))
  return pow_impl(a, b);
}
Tensor pow(const Tensor& a, const Scalar& b) {
  KILN_TRACE(Pow, (a, b), (), pow(a, b))
  return pow_impl(a, b);
}
Tensor pow(const Scalar& a, const Tensor& b) {
  KILN_TRACE(Pow, (a, b), (), pow(a, b))
  return pow_impl(Arg(a), b);
}
Tensor atan2(const Tensor& a, const Tensor& b) {
  KILN_TRACE(Atan2, (a, b), (), atan2(a, b))
  return float_binary("atan2", a, b, [](auto x, auto y) { return std::atan2(x, y); },
                      KILN_VF2(KILN_SLEEF_F(atan2)(x, y)), KILN_VD2(KILN_SLEEF_D(atan2)(x, y)), Cost::kAtan2);
}
// Binary ops PyTorch defines on floating dtypes only (no integer kernel): the promoted dtype
// must be floating, and is the result's.
static void float_only(std::string_view op, const Tensor& a, const Tensor& b) {
  DType ct = result_type({Arg(a), Arg(b)});
  KILN_CHECK(is_floating(ct), op, "\"", op, "\" not implemented for '", name(ct), "'");
}
Tensor hypot(const Tensor& a, const Tensor& b) {
  KILN_TRACE(Hypot, (a, b), (), hypot(a, b))
  float_only("hypot", a, b);
  return float_binary("hypot", a, b, [](auto x, auto y) { return std::hypot(x, y); },
                      KILN_VF2(KILN_SLEEF_F05(hypot)(x, y)), KILN_VD2(KILN_SLEEF_D05(hypot)(x, y)), Cost::kHypot);
}
// log(exp(a) + exp(b)) without overflow: max(a, b) + log1p(exp(-|a - b|)), and a itself where
// a == b is infinite (the formula's a - b would be NaN there), as PyTorch computes it.
template <typename M>
M logaddexp_s(M x, M y) {
  if (std::isinf(x) && x == y) return x;
  M m = std::isnan(x) || std::isnan(y) ? std::numeric_limits<M>::quiet_NaN() : std::max(x, y);
  return m + std::log1p(std::exp(-std::abs(x - y)));
}
Tensor logaddexp(const Tensor& a, const Tensor& b) {
  KILN_TRACE(LogAddExp, (a, b), (), logaddexp(a, b))
  float_only("logaddexp", a, b);
#if KILN_HAVE_VEC
  auto vf = [](cpu::vec::VF x, cpu::vec::VF y) {
    using namespace cpu::vec;
    VF r = maxf(x, y) + KILN_SLEEF_F(log1p)(expf(-absf(x - y)));
    return where(mand(eq(x, y), eq(absf(x), setf(std::numeric_limits<float>::infinity()))), x, r);
  };
#else
  auto vf = nullptr;
#endif
  return float_binary("logaddexp", a, b, [](auto x, auto y) { return logaddexp_s(x, y); }, vf, nullptr,
                      Cost::kLogAddExp);
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  KILN_TRACE(Maximum, (a, b), (), maximum(a, b))
  return minmax("maximum", a, b, [](auto x, auto y) { return x > y ? x : y; });
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  KILN_TRACE(Minimum, (a, b), (), minimum(a, b))
  return minmax("minimum", a, b, [](auto x, auto y) { return x < y ? x : y; });
}

#define KILN_COMPARE(fn, id, expr)                                                              \
  Tensor fn(const Tensor& a, const Tensor& b) {                                                 \
    KILN_TRACE(id, (a, b), (), fn(a, b))                                                        \
    return compare(#fn, a, b, [](auto x, auto y) { return expr; });                            \
  }                                                                                             \
  Tensor fn(const Tensor& a, const Scalar& b) {                                                 \
    KILN_TRACE(id, (a, b), (), fn(a, b))                                                        \
    return compare(#fn, a, b, [](auto x, auto y) { return expr; });                            \
  }
KILN_COMPARE(eq, Eq, x == y) KILN_COMPARE(ne, Ne, x != y) KILN_COMPARE(lt, Lt, x < y)
KILN_COMPARE(le, Le, x <= y) KILN_COMPARE(gt, Gt, x > y) KILN_COMPARE(ge, Ge, x >= y)
#undef KILN_COMPARE

#define KILN_BITWISE(fn, id, expr)                                                              \
  Tensor fn(const Tensor& a, const Tensor& b) {                                                 \
    KILN_TRACE(id, (a, b), (), fn(a, b))                                                        \
    return bitwise(#fn, a, b, [](auto x, auto y) { return expr; });                            \
  }                                                                                             \
  Tensor fn(const Tensor& a, const Scalar& b) {                                                 \
    KILN_TRACE(id, (a, b), (), fn(a, b))                                                        \
    return bitwise(#fn, a, b, [](auto x, auto y) { return expr; });                            \
  }
KILN_BITWISE(bitwise_and, BitwiseAnd, x & y) KILN_BITWISE(bitwise_or, BitwiseOr, x | y)
KILN_BITWISE(bitwise_xor, BitwiseXor, x ^ y)
#undef KILN_BITWISE

Tensor logical_and(const Tensor& a, const Tensor& b) {
  KILN_TRACE(LogicalAnd, (a, b), (), logical_and(a, b))
  return logical("logical_and", a, b, [](bool x, bool y) { return x && y; });
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  KILN_TRACE(LogicalOr, (a, b), (), logical_or(a, b))
  return logical("logical_or", a, b, [](bool x, bool y) { return x || y; });
}
Tensor logical_xor(const Tensor& a, const Tensor& b) {
  KILN_TRACE(LogicalXor, (a, b), (), logical_xor(a, b))
  return logical("logical_xor", a, b, [](bool x, bool y) { return x != y; });
}

Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator~(const Tensor& x) { return bitwise_not(x); }
Tensor operator!(const Tensor& x) { return logical_not(x); }

// ---------------------------------------------------------------- Tensor methods (elementwise)

#define KILN_UNARY_METHOD_DEF(fn) Tensor Tensor::fn() const { return kiln::fn(*this); }
KILN_UNARY_METHOD_DEF(neg) KILN_UNARY_METHOD_DEF(abs) KILN_UNARY_METHOD_DEF(sign)
KILN_UNARY_METHOD_DEF(exp) KILN_UNARY_METHOD_DEF(exp2) KILN_UNARY_METHOD_DEF(expm1)
KILN_UNARY_METHOD_DEF(log) KILN_UNARY_METHOD_DEF(log2) KILN_UNARY_METHOD_DEF(log1p)
KILN_UNARY_METHOD_DEF(sqrt) KILN_UNARY_METHOD_DEF(rsqrt) KILN_UNARY_METHOD_DEF(reciprocal)
KILN_UNARY_METHOD_DEF(sin) KILN_UNARY_METHOD_DEF(cos) KILN_UNARY_METHOD_DEF(tan)
KILN_UNARY_METHOD_DEF(asin) KILN_UNARY_METHOD_DEF(acos) KILN_UNARY_METHOD_DEF(atan)
KILN_UNARY_METHOD_DEF(sinh) KILN_UNARY_METHOD_DEF(cosh) KILN_UNARY_METHOD_DEF(tanh)
KILN_UNARY_METHOD_DEF(sigmoid) KILN_UNARY_METHOD_DEF(relu) KILN_UNARY_METHOD_DEF(silu)
KILN_UNARY_METHOD_DEF(erf) KILN_UNARY_METHOD_DEF(floor) KILN_UNARY_METHOD_DEF(ceil)
KILN_UNARY_METHOD_DEF(round) KILN_UNARY_METHOD_DEF(trunc) KILN_UNARY_METHOD_DEF(isnan)
KILN_UNARY_METHOD_DEF(isinf) KILN_UNARY_METHOD_DEF(isfinite) KILN_UNARY_METHOD_DEF(logical_not)
KILN_UNARY_METHOD_DEF(bitwise_not)
#undef KILN_UNARY_METHOD_DEF

Tensor Tensor::gelu(std::string_view a) const { return kiln::gelu(*this, a); }
Tensor Tensor::nan_to_num(std::optional<double> n, std::optional<double> p, std::optional<double> m) const {
  return kiln::nan_to_num(*this, n, p, m);
}
Tensor Tensor::add(const Tensor& o, const Scalar& al) const { return kiln::add(*this, o, al); }
Tensor Tensor::add(const Scalar& o, const Scalar& al) const { return kiln::add(*this, o, al); }
Tensor Tensor::sub(const Tensor& o, const Scalar& al) const { return kiln::sub(*this, o, al); }
Tensor Tensor::sub(const Scalar& o, const Scalar& al) const { return kiln::sub(*this, o, al); }
Tensor Tensor::mul(const Tensor& o) const { return kiln::mul(*this, o); }
Tensor Tensor::mul(const Scalar& o) const { return kiln::mul(*this, o); }
Tensor Tensor::div(const Tensor& o, std::optional<std::string_view> m) const { return kiln::div(*this, o, m); }
Tensor Tensor::div(const Scalar& o, std::optional<std::string_view> m) const { return kiln::div(*this, o, m); }
Tensor Tensor::pow(const Tensor& e) const { return kiln::pow(*this, e); }
Tensor Tensor::pow(const Scalar& e) const { return kiln::pow(*this, e); }
Tensor Tensor::remainder(const Tensor& o) const { return kiln::remainder(*this, o); }
Tensor Tensor::remainder(const Scalar& o) const { return kiln::remainder(*this, o); }
Tensor Tensor::fmod(const Tensor& o) const { return kiln::fmod(*this, o); }
Tensor Tensor::fmod(const Scalar& o) const { return kiln::fmod(*this, o); }
Tensor Tensor::floor_divide(const Tensor& o) const { return kiln::floor_divide(*this, o); }
Tensor Tensor::floor_divide(const Scalar& o) const { return kiln::floor_divide(*this, o); }
Tensor Tensor::maximum(const Tensor& o) const { return kiln::maximum(*this, o); }
Tensor Tensor::minimum(const Tensor& o) const { return kiln::minimum(*this, o); }
Tensor Tensor::atan2(const Tensor& o) const { return kiln::atan2(*this, o); }
#define KILN_BINARY_METHOD_DEF(fn)                                                \
  Tensor Tensor::fn(const Tensor& o) const { return kiln::fn(*this, o); }         \
  Tensor Tensor::fn(const Scalar& o) const { return kiln::fn(*this, o); }
KILN_BINARY_METHOD_DEF(eq) KILN_BINARY_METHOD_DEF(ne) KILN_BINARY_METHOD_DEF(lt)
KILN_BINARY_METHOD_DEF(le) KILN_BINARY_METHOD_DEF(gt) KILN_BINARY_METHOD_DEF(ge)
KILN_BINARY_METHOD_DEF(bitwise_and) KILN_BINARY_METHOD_DEF(bitwise_or) KILN_BINARY_METHOD_DEF(bitwise_xor)
#undef KILN_BINARY_METHOD_DEF
Tensor Tensor::logical_and(const Tensor& o) const { return kiln::logical_and(*this, o); }
Tensor Tensor::logical_or(const Tensor& o) const { return kiln::logical_or(*this, o); }
Tensor Tensor::logical_xor(const Tensor& o) const { return kiln::logical_xor(*this, o); }

Tensor& Tensor::add_(const Tensor& o, const Scalar& al) {
  KILN_TRACE_INPLACE(*this, Add, (*this, o), KILN_ALPHA(al), add_(o, al))
  add_impl("add_", *this, o, al, this);
  return *this;
}
Tensor& Tensor::add_(const Scalar& o, const Scalar& al) {
  KILN_TRACE_INPLACE(*this, Add, (*this, o), KILN_ALPHA(al), add_(o, al))
  add_impl("add_", *this, o, al, this);
  return *this;
}
Tensor& Tensor::sub_(const Tensor& o, const Scalar& al) {
  KILN_TRACE_INPLACE(*this, Sub, (*this, o), KILN_ALPHA(al), sub_(o, al))
  check_sub(*this, o);
  add_impl("sub_", *this, o, -al, this);
  return *this;
}
Tensor& Tensor::sub_(const Scalar& o, const Scalar& al) {
  KILN_TRACE_INPLACE(*this, Sub, (*this, o), KILN_ALPHA(al), sub_(o, al))
  check_sub(*this, o);
  add_impl("sub_", *this, o, -al, this);
  return *this;
}
Tensor& Tensor::mul_(const Tensor& o) {
  KILN_TRACE_INPLACE(*this, Mul, (*this, o), (), mul_(o))
  mul_impl(*this, o, this);
  return *this;
}
Tensor& Tensor::mul_(const Scalar& o) {
  KILN_TRACE_INPLACE(*this, Mul, (*this, o), (), mul_(o))
  mul_impl(*this, o, this);
  return *this;
}
Tensor& Tensor::div_(const Tensor& o, std::optional<std::string_view> m) {
  KILN_TRACE_INPLACE(*this, Div, (*this, o), KILN_MODE(m), div_(o, m))
  div_impl("div_", *this, o, parse_mode(m), this);
  return *this;
}
Tensor& Tensor::div_(const Scalar& o, std::optional<std::string_view> m) {
  KILN_TRACE_INPLACE(*this, Div, (*this, o), KILN_MODE(m), div_(o, m))
  div_impl("div_", *this, o, parse_mode(m), this);
  return *this;
}
Tensor& Tensor::relu_() { return kiln::relu_(*this); }
#undef KILN_ALPHA
#undef KILN_MODE

}  // namespace kiln
