// The reference executor (see exec.h): one case per op of the op table, each calling the
// eager op with the node's decoded attributes.
#include "kiln/ir/exec.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_set>
#include <utility>

#include "kiln/ir/attrs.h"
#include "kiln/ir/infer.h"
#include "kiln/runtime/factories.h"
#include "kiln/runtime/ops.h"

namespace kiln::ir {

namespace {

using Frame = std::vector<Slot>;


}  // namespace

const Value* alias_root(const Value* v) {
  while (v->producer && (op_info(v->producer->op).category == Category::View || v->producer->op == OpId::Copy))
    v = v->producer->inputs[0];
  return v;
}

Tensor iota_value(const std::vector<int64_t>& sizes, Device device) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;  // (sizes a verified type holds: they fit)
  return arange(n, TensorOptions(kInt64)).view(sizes).to(device);
}

Tensor decode_constant(const Node& n, bool on_host) {
  KILN_CHECK(n.op == OpId::Constant && n.attr("data"), "exec", "decode_constant: not a tensor constant");
  const Type& t = n.outputs[0]->type;
  const auto* bytes = std::get_if<std::string>(&n.attr("data")->value);
  KILN_CHECK(bytes, "exec", "constant: data is not a string");
  // The data's length is checked before allocating: the type alone must not make the executor
  // allocate (or, past int64, miscount) what the data does not hold.
  int64_t need = itemsize(t.dtype);
  bool fits = true;
  for (int64_t s : t.sizes) fits &= !__builtin_mul_overflow(need, s, &need);
  if (std::find(t.sizes.begin(), t.sizes.end(), 0) != t.sizes.end()) {
    need = 0;
    fits = true;
  }
  KILN_CHECK(fits && bytes->size() == uint64_t(need), "exec", "constant: data has ", bytes->size(), " bytes but ",
             t.str(), " needs ", fits ? std::to_string(need) : std::string("more than int64 counts"));
  Tensor out = empty(t.sizes, TensorOptions(t.dtype));  // (decoded on the host, then moved to its device)
  if (!bytes->empty()) std::memcpy(out.data_ptr(), bytes->data(), bytes->size());
  return on_host ? out : out.to(t.device);
}

std::string encode_constant(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), size_t(c.nbytes()));
}

struct Executable::Step {
  std::vector<int> in, out;
  std::function<void(const Step&, Frame&)> run;
};

struct Plan {
  size_t frame_size = 0;
  std::vector<int> inputs, outputs;
  std::vector<Executable::Step> steps;
  std::vector<std::unique_ptr<Executable>> regions;  // owned by cond steps
};

namespace {

using Step = Executable::Step;
// A copy of `t` in memory of its own, with `t`'s strides where memory can have them (a view's
// type keeps its strides, and later views of the copy must read it as they would `t`); else
// row-major: memory that serves several positions (an expand) cannot be written position by
// position.
Tensor fresh_copy(const Tensor& t) {
  IntArrayRef sizes = t.sizes(), strides = t.strides();
  bool plain = true;
  for (size_t d = 0; d < strides.size(); ++d) plain = plain && strides[d] >= 0 && (strides[d] != 0 || sizes[d] <= 1);
  if (plain) {
    try {
      Tensor c = empty_strided(sizes, strides, TensorOptions(t.dtype()).device(t.device()));
      c.copy_(t);
      return c;
    } catch (const Error&) {  // strides whose positions overlap (an as_strided view)
    }
  }
  return t.clone();
}

const Tensor& T(const Step& s, Frame& f, size_t k) {
  const Slot& slot = f[size_t(s.in[k])];
  KILN_CHECK(!slot.is_scalar, "exec", "operand ", k, " is a number where a tensor is needed");
  return slot.tensor;
}
bool is_num(const Step& s, Frame& f, size_t k) { return f[size_t(s.in[k])].is_scalar; }
const Scalar& S(const Step& s, Frame& f, size_t k) { return f[size_t(s.in[k])].scalar; }
void put(const Step& s, Frame& f, Tensor t, size_t k = 0) {
  Slot& o = f[size_t(s.out[k])];
  o.tensor = std::move(t);
  o.is_scalar = false;
}

using Fn = std::function<void(const Step&, Frame&)>;

// A unary op with no attributes.
template <typename F>
Fn unary(F f) {
  return [f](const Step& s, Frame& fr) { put(s, fr, f(T(s, fr, 0))); };
}

// An op that its eager function runs from its N tensor operands alone.
template <int N, typename F>
Fn call(F f) {
  static_assert(N > 0, "a variadic op needs its own case");
  return [f](const Step& s, Frame& fr) {
    [&]<size_t... I>(std::index_sequence<I...>) { put(s, fr, f(T(s, fr, I)...)); }(std::make_index_sequence<N>{});
  };
}

// A binary op with tensor-tensor and tensor-number forms; `swap` handles a number first
// (for commutative ops, or comparisons with the mirrored op).
template <typename TT, typename TS, typename Swap>
Fn binary(TT tt, TS ts, Swap swap, std::string_view name) {
  return [=](const Step& s, Frame& fr) {
    bool n0 = is_num(s, fr, 0), n1 = is_num(s, fr, 1);
    if (!n0 && !n1) return put(s, fr, tt(T(s, fr, 0), T(s, fr, 1)));
    if (!n0) return put(s, fr, ts(T(s, fr, 0), S(s, fr, 1)));
    if (!n1) return put(s, fr, swap(S(s, fr, 0), T(s, fr, 1)));
    KILN_FAIL("exec", name, ": both operands are numbers");
  };
}
template <typename TT, typename TS>
Fn commutative(TT tt, TS ts, std::string_view name) {
  return binary(tt, ts, [ts](const Scalar& a, const Tensor& b) { return ts(b, a); }, name);
}
template <typename TT, typename TS>
Fn tensor_first(TT tt, TS ts, std::string_view name) {
  return binary(tt, ts, [name](const Scalar&, const Tensor&) -> Tensor {
    KILN_FAIL("exec", name, ": a number as the first operand is not supported");
  }, name);
}

// Ops of one kind name their attributes alike: `f` reads them from the struct of whichever of
// the two ops `n` is.
template <OpId A, OpId B, typename F>
auto either(const Node& n, F f) {
  return n.op == A ? f(decode<A>(n)) : f(decode<B>(n));
}

Fn make_step(const Node& n, Plan& plan) {
  // Attributes are decoded once here, as each op's typed struct (kiln/ir/attrs.h).
  switch (n.op) {
    // The ops whose eager function runs them from their operands alone (ops.def's call column).
#define KILN_OP(id, name, category, operands, traits, attributes, ...) \
  __VA_OPT__(case OpId::id: return call<operands>([](const auto&... x) { return __VA_ARGS__(x...); });)
#include "kiln/runtime/ops.def"
#undef KILN_OP
    case OpId::Gelu: {
      std::string approx = decode<OpId::Gelu>(n).approximate;
      return unary([approx](const Tensor& x) { return gelu(x, approx); });
    }
    case OpId::NanToNum: {
      attrs::NanToNum at = decode<OpId::NanToNum>(n);
      auto nan = at.nan, pos = at.posinf, neg_ = at.neginf;
      return unary([=](const Tensor& x) { return nan_to_num(x, nan, pos, neg_); });
    }
    case OpId::Cast: {
      DType dt = decode<OpId::Cast>(n).dtype;
      return unary([dt](const Tensor& x) { return x.to(dt); });
    }
    case OpId::Fill: {
      Scalar v = decode<OpId::Fill>(n).value;
      return unary([v](const Tensor& x) { return full(x.sizes(), v, TensorOptions(x.dtype()).device(x.device())); });
    }

    case OpId::Add:
    case OpId::Sub: {
      bool is_sub = n.op == OpId::Sub;
      Scalar alpha = either<OpId::Sub, OpId::Add>(n, [](const auto& at) { return at.alpha; });
      return [=](const Step& s, Frame& fr) {
        bool n0 = is_num(s, fr, 0), n1 = is_num(s, fr, 1);
        KILN_CHECK(!(n0 && n1), "exec", is_sub ? "sub" : "add", ": both operands are numbers");
        if (n0) {
          // number - tensor (rsub) or number + tensor
          KILN_CHECK(alpha.to_double() == 1, "exec", "sub: a number first operand needs alpha = 1");
          return put(s, fr, is_sub ? rsub(T(s, fr, 1), S(s, fr, 0)) : add(T(s, fr, 1), S(s, fr, 0)));
        }
        if (n1) return put(s, fr, is_sub ? sub(T(s, fr, 0), S(s, fr, 1), alpha) : add(T(s, fr, 0), S(s, fr, 1), alpha));
        put(s, fr, is_sub ? sub(T(s, fr, 0), T(s, fr, 1), alpha) : add(T(s, fr, 0), T(s, fr, 1), alpha));
      };
    }
    case OpId::Mul:
      return commutative([](const Tensor& x, const Tensor& y) { return mul(x, y); },
                         [](const Tensor& x, const Scalar& y) { return mul(x, y); }, "mul");
    case OpId::Div: {
      std::optional<std::string> mode = decode<OpId::Div>(n).rounding_mode;
      auto m = [mode]() -> std::optional<std::string_view> {
        if (mode) return std::string_view(*mode);
        return std::nullopt;
      };
      return binary([=](const Tensor& x, const Tensor& y) { return div(x, y, m()); },
                    [=](const Tensor& x, const Scalar& y) { return div(x, y, m()); },
                    [=](const Scalar& x, const Tensor& y) { return div(x, y, m()); }, "div");
    }
    case OpId::Remainder:
      return tensor_first([](const Tensor& x, const Tensor& y) { return remainder(x, y); },
                          [](const Tensor& x, const Scalar& y) { return remainder(x, y); }, "remainder");
    case OpId::Fmod:
      return tensor_first([](const Tensor& x, const Tensor& y) { return fmod(x, y); },
                          [](const Tensor& x, const Scalar& y) { return fmod(x, y); }, "fmod");
    case OpId::Pow:
      return binary([](const Tensor& x, const Tensor& y) { return pow(x, y); },
                    [](const Tensor& x, const Scalar& y) { return pow(x, y); },
                    [](const Scalar& x, const Tensor& y) { return pow(x, y); }, "pow");
#define KILN_CMP_CASE(id, fn, mirror)                                                              \
  case OpId::id:                                                                                   \
    return binary([](const Tensor& x, const Tensor& y) { return fn(x, y); },                       \
                  [](const Tensor& x, const Scalar& y) { return fn(x, y); },                       \
                  [](const Scalar& x, const Tensor& y) { return mirror(y, x); }, #fn);
    KILN_CMP_CASE(Eq, eq, eq) KILN_CMP_CASE(Ne, ne, ne) KILN_CMP_CASE(Lt, lt, gt)
    KILN_CMP_CASE(Le, le, ge) KILN_CMP_CASE(Gt, gt, lt) KILN_CMP_CASE(Ge, ge, le)
    KILN_CMP_CASE(BitwiseAnd, bitwise_and, bitwise_and) KILN_CMP_CASE(BitwiseOr, bitwise_or, bitwise_or)
    KILN_CMP_CASE(BitwiseXor, bitwise_xor, bitwise_xor)
#undef KILN_CMP_CASE

    case OpId::Where:
      return [](const Step& s, Frame& fr) {
        const Tensor& c = T(s, fr, 0);
        bool n1 = is_num(s, fr, 1), n2 = is_num(s, fr, 2);
        if (n1 && n2) return put(s, fr, where(c, S(s, fr, 1), S(s, fr, 2)));
        if (n1) return put(s, fr, where(c, S(s, fr, 1), T(s, fr, 2)));
        if (n2) return put(s, fr, where(c, T(s, fr, 1), S(s, fr, 2)));
        put(s, fr, where(c, T(s, fr, 1), T(s, fr, 2)));
      };
    case OpId::Clamp: {
      attrs::Clamp at = decode<OpId::Clamp>(n);
      bool has_min = at.has_min, has_max = at.has_max;
      KILN_CHECK(n.inputs.size() == size_t(1 + has_min + has_max), "exec", "clamp: has ", n.inputs.size(),
                 " operands but has_min=", has_min, " has_max=", has_max);
      return [=](const Step& s, Frame& fr) {
        size_t k = 1;
        int lo = has_min ? int(k++) : -1, hi = has_max ? int(k++) : -1;
        bool nums = (lo < 0 || is_num(s, fr, size_t(lo))) && (hi < 0 || is_num(s, fr, size_t(hi)));
        bool tens = (lo < 0 || !is_num(s, fr, size_t(lo))) && (hi < 0 || !is_num(s, fr, size_t(hi)));
        if (nums) {
          std::optional<Scalar> l, h;
          if (lo >= 0) l = S(s, fr, size_t(lo));
          if (hi >= 0) h = S(s, fr, size_t(hi));
          return put(s, fr, clamp(T(s, fr, 0), l, h));
        }
        KILN_CHECK(tens, "exec", "clamp: mixed number and tensor bounds are not supported");
        std::optional<Tensor> l, h;
        if (lo >= 0) l = T(s, fr, size_t(lo));
        if (hi >= 0) h = T(s, fr, size_t(hi));
        put(s, fr, clamp(T(s, fr, 0), l, h));
      };
    }
    case OpId::Lerp:
      return [](const Step& s, Frame& fr) {
        if (is_num(s, fr, 2)) return put(s, fr, lerp(T(s, fr, 0), T(s, fr, 1), S(s, fr, 2)));
        put(s, fr, lerp(T(s, fr, 0), T(s, fr, 1), T(s, fr, 2)));
      };
    case OpId::Addcmul: {
      Scalar v = decode<OpId::Addcmul>(n).value;
      return [v](const Step& s, Frame& fr) { put(s, fr, addcmul(T(s, fr, 0), T(s, fr, 1), T(s, fr, 2), v)); };
    }
    case OpId::MaskedFill: {
      Scalar v = decode<OpId::MaskedFill>(n).value;
      return [v](const Step& s, Frame& fr) { put(s, fr, masked_fill(T(s, fr, 0), T(s, fr, 1), v)); };
    }

    // ---- reductions ----
#define KILN_REDUCE_CASE(id, fn)                                                    \
  case OpId::id: {                                                                  \
    attrs::id at = decode<OpId::id>(n);                                             \
    IntList dims = at.dims;                                                         \
    bool keep = at.keepdim;                                                         \
    return unary([dims, keep](const Tensor& x) { return fn(x, dims, keep); });       \
  }
    KILN_REDUCE_CASE(NanSum, nansum) KILN_REDUCE_CASE(Mean, mean) KILN_REDUCE_CASE(Prod, prod)
    KILN_REDUCE_CASE(Amax, amax) KILN_REDUCE_CASE(Amin, amin) KILN_REDUCE_CASE(Any, any)
    KILN_REDUCE_CASE(All, all) KILN_REDUCE_CASE(LogSumExp, logsumexp)
#undef KILN_REDUCE_CASE
    case OpId::Sum: {
      attrs::Sum at = decode<OpId::Sum>(n);
      IntList dims = at.dims;
      bool keep = at.keepdim;
      std::optional<DType> dt = at.dtype;
      return unary([=](const Tensor& x) { return sum(x, dims, keep, dt); });
    }
    case OpId::Norm: {
      attrs::Norm at = decode<OpId::Norm>(n);
      IntList dims = at.dims;
      bool keep = at.keepdim;
      double p = at.p;
      return unary([=](const Tensor& x) { return norm(x, p, dims, keep); });
    }
    case OpId::Var:
    case OpId::Std: {
      bool is_std = n.op == OpId::Std;
      auto [dims, keep, c] = either<OpId::Std, OpId::Var>(n, [](const auto& at) {
        return std::tuple(at.dims, at.keepdim, at.correction);
      });
      return unary([=](const Tensor& x) { return is_std ? kiln::std(x, dims, c, keep) : var(x, dims, c, keep); });
    }
    case OpId::Aminmax: {
      attrs::Aminmax at = decode<OpId::Aminmax>(n);
      IntList dims = at.dims;
      bool keep = at.keepdim;
      return [=](const Step& s, Frame& fr) {
        const Tensor& x = T(s, fr, 0);
        // The API names one dim or none; a graph the passes rewrote may list several (what
        // aminmax computes: amin and amax over them).
        auto [lo, hi] = dims.size() <= 1 ? aminmax(x, dims.empty() ? std::nullopt : std::optional<int64_t>(dims[0]), keep)
                                         : std::tuple<Tensor, Tensor>{amin(x, dims, keep), amax(x, dims, keep)};
        put(s, fr, lo, 0);
        put(s, fr, hi, 1);
      };
    }
    case OpId::MaxDim:
    case OpId::MinDim: {
      bool is_max = n.op == OpId::MaxDim;
      auto [dim, keep] = either<OpId::MaxDim, OpId::MinDim>(n, [](const auto& at) { return std::tuple(at.dim, at.keepdim); });
      return [=](const Step& s, Frame& fr) {
        auto [v, i] = is_max ? max(T(s, fr, 0), dim, keep) : min(T(s, fr, 0), dim, keep);
        put(s, fr, v, 0);
        put(s, fr, i, 1);
      };
    }
    case OpId::Argmax:
    case OpId::Argmin: {
      bool is_max = n.op == OpId::Argmax;
      auto [dim, keep] = either<OpId::Argmax, OpId::Argmin>(n, [](const auto& at) { return std::tuple(at.dim, at.keepdim); });
      return unary([=](const Tensor& x) { return is_max ? argmax(x, dim, keep) : argmin(x, dim, keep); });
    }
    case OpId::Softmax: {
      int64_t dim = decode<OpId::Softmax>(n).dim;
      return unary([dim](const Tensor& x) { return softmax(x, dim); });
    }
    case OpId::LogSoftmax: {
      int64_t dim = decode<OpId::LogSoftmax>(n).dim;
      return unary([dim](const Tensor& x) { return log_softmax(x, dim); });
    }
    case OpId::Cumsum: {
      int64_t dim = decode<OpId::Cumsum>(n).dim;
      return unary([dim](const Tensor& x) { return cumsum(x, dim); });
    }

    // ---- views ----
    case OpId::View: {
      IntList sz = decode<OpId::View>(n).sizes;
      return unary([sz](const Tensor& x) { return x.view(sz); });
    }
    case OpId::Transpose: {
      attrs::Transpose at = decode<OpId::Transpose>(n);
      int64_t d0 = at.dim0, d1 = at.dim1;
      return unary([=](const Tensor& x) { return x.transpose(d0, d1); });
    }
    case OpId::Permute: {
      IntList dims = decode<OpId::Permute>(n).dims;
      return unary([dims](const Tensor& x) { return x.permute(dims); });
    }
    case OpId::Slice: {
      // (no end: to the end of the dim, as inference has it)
      attrs::Slice at = decode<OpId::Slice>(n);
      int64_t dim = at.dim, st = at.start, step = at.step;
      int64_t en = at.end.value_or(std::numeric_limits<int64_t>::max());
      return unary([=](const Tensor& x) { return x.slice(dim, st, en, step); });
    }
    case OpId::Select: {
      attrs::Select at = decode<OpId::Select>(n);
      int64_t dim = at.dim, index = at.index;
      return unary([=](const Tensor& x) { return x.select(dim, index); });
    }
    case OpId::Expand: {
      IntList sz = decode<OpId::Expand>(n).sizes;
      return unary([sz](const Tensor& x) { return x.expand(sz); });
    }
    case OpId::Squeeze: {
      IntList dims = decode<OpId::Squeeze>(n).dims;
      KILN_CHECK(dims.size() <= 1, "exec", "squeeze: at most one dim is supported, got ", dims.size());
      if (dims.empty()) return unary([](const Tensor& x) { return x.squeeze(); });
      int64_t d = dims[0];
      return unary([d](const Tensor& x) { return x.squeeze(d); });
    }
    case OpId::Unsqueeze: {
      int64_t d = decode<OpId::Unsqueeze>(n).dim;
      return unary([d](const Tensor& x) { return x.unsqueeze(d); });
    }
    case OpId::Diagonal: {
      attrs::Diagonal at = decode<OpId::Diagonal>(n);
      int64_t off = at.offset, d1 = at.dim1, d2 = at.dim2;
      return unary([=](const Tensor& x) { return x.diagonal(off, d1, d2); });
    }
    case OpId::AsStrided: {
      attrs::AsStrided at = decode<OpId::AsStrided>(n);
      IntList sz = at.sizes, st = at.strides;
      std::optional<int64_t> off = at.offset;  // none: the operand's own offset
      return unary([=](const Tensor& x) { return x.as_strided(sz, st, off); });
    }

    // ---- opaque ----
    case OpId::Contiguous: return unary([](const Tensor& x) { return x.contiguous(); });
    case OpId::Clone: return unary([](const Tensor& x) { return x.clone(); });
    case OpId::Iota: return unary([](const Tensor& x) { return iota_value(x.sizes().vec(), x.device()); });
    case OpId::Addmm: {
      attrs::Addmm at = decode<OpId::Addmm>(n);
      Scalar beta = at.beta, alpha = at.alpha;
      return [=](const Step& s, Frame& fr) { put(s, fr, addmm(T(s, fr, 0), T(s, fr, 1), T(s, fr, 2), beta, alpha)); };
    }
    case OpId::Einsum: {
      std::string eq = decode<OpId::Einsum>(n).equation;
      return [eq](const Step& s, Frame& fr) {
        std::vector<Tensor> ops;
        for (size_t k = 0; k < s.in.size(); ++k) ops.push_back(T(s, fr, k));
        put(s, fr, einsum(eq, ops));
      };
    }
    case OpId::Cat: {
      int64_t dim = decode<OpId::Cat>(n).dim;
      return [dim](const Step& s, Frame& fr) {
        std::vector<Tensor> ops;
        for (size_t k = 0; k < s.in.size(); ++k) ops.push_back(T(s, fr, k));
        put(s, fr, cat(ops, dim));
      };
    }
    case OpId::IndexSelect: {
      int64_t dim = decode<OpId::IndexSelect>(n).dim;
      return [dim](const Step& s, Frame& fr) { put(s, fr, index_select(T(s, fr, 0), dim, T(s, fr, 1))); };
    }
    case OpId::Gather: {
      int64_t dim = decode<OpId::Gather>(n).dim;
      return [dim](const Step& s, Frame& fr) { put(s, fr, gather(T(s, fr, 0), dim, T(s, fr, 1))); };
    }
    case OpId::Copy:
      // The write-back: the destination (a view of some buffer) receives the source; the
      // output is the same tensor, now holding the new values.
      return [](const Step& s, Frame& fr) {
        Tensor dst = T(s, fr, 0);
        dst.copy_(T(s, fr, 1));
        put(s, fr, dst);
      };

    // ---- control ----
    case OpId::Constant: {
      if (const Attr* value = n.attr("value")) {
        Scalar v = attr_scalar(value->value);
        return [v](const Step& s, Frame& fr) {
          Slot& o = fr[size_t(s.out[0])];
          o.scalar = v;
          o.is_scalar = true;
        };
      }
      Tensor c = decode_constant(n);
      return [c](const Step& s, Frame& fr) { put(s, fr, c); };
    }
    case OpId::Cond: {
      KILN_CHECK(n.regions.size() == 2, "exec", "cond: expected then and else regions, got ", n.regions.size());
      auto then_ = std::make_unique<Executable>(*n.regions[0]);
      auto else_ = std::make_unique<Executable>(*n.regions[1]);
      const Executable* t = then_.get();
      const Executable* e = else_.get();
      plan.regions.push_back(std::move(then_));
      plan.regions.push_back(std::move(else_));
      // Which results each branch returns straight from one of its constants (the constant
      // step's tensor, shared by every run).
      auto from_constant = [](const Graph& r) {
        std::vector<bool> v;
        for (const Value* o : r.outputs()) {
          const Value* root = alias_root(o);
          v.push_back(root->producer && root->producer->op == OpId::Constant);
        }
        return v;
      };
      return [t, e, then_constant = from_constant(*n.regions[0]), else_constant = from_constant(*n.regions[1])](
                 const Step& s, Frame& fr) {
        bool p = bool(T(s, fr, 0));
        std::vector<Slot> ins;
        for (size_t k = 1; k < s.in.size(); ++k) ins.push_back(fr[size_t(s.in[k])]);
        auto outs = (p ? t : e)->run_slots(ins);
        // A cond's results are new tensors, as the kernel program makes them (its passes see
        // no alias through a cond): a branch that returns an operand, a view of one, a
        // constant or one value twice gives a copy, so that a later write into a result
        // reaches nothing else, and a later write into an operand does not reach the result.
        const std::vector<bool>& constant = p ? then_constant : else_constant;
        auto shares = [](const Slot& a, const Slot& b) {
          return !a.is_scalar && !b.is_scalar && a.tensor.defined() && b.tensor.defined() && a.tensor.is_alias_of(b.tensor);
        };
        for (size_t k = 0; k < outs.size(); ++k) {
          bool alias = k < constant.size() && constant[k];
          for (const Slot& in : ins) alias = alias || shares(outs[k], in);
          for (size_t j = 0; j < k; ++j) alias = alias || shares(outs[k], outs[j]);
          if (alias && !outs[k].is_scalar && outs[k].tensor.defined()) outs[k].tensor = fresh_copy(outs[k].tensor);
        }
        for (size_t k = 0; k < outs.size(); ++k) fr[size_t(s.out[k])] = std::move(outs[k]);
      };
    }
  }
  KILN_FAIL("exec", "no executor for op ", op_info(n.op).name);
}

}  // namespace

Executable::Executable(const Graph& g) : plan_(std::make_unique<Plan>()) {
  plan_->frame_size = g.num_values();
  for (const Value* v : g.inputs()) plan_->inputs.push_back(v->id);
  for (const Value* v : g.outputs()) plan_->outputs.push_back(v->id);
  // Constants that a write-back targets are copied afresh on every run, so one run's writes
  // never leak into the next.
  std::unordered_set<const Node*> written_constants;
  for (const auto& n : g.nodes())
    if (n->op == OpId::Copy) {
      const Value* root = alias_root(n->inputs[0]);
      if (root->producer && root->producer->op == OpId::Constant) written_constants.insert(root->producer);
    }
  for (const auto& n : g.nodes()) {
    Step s;
    for (const Value* v : n->inputs) s.in.push_back(v->id);
    for (const Value* v : n->outputs) s.out.push_back(v->id);
    s.run = make_step(*n, *plan_);
    if (written_constants.count(n.get())) {
      s.run = [inner = std::move(s.run)](const Step& st, Frame& fr) {
        inner(st, fr);
        Slot& o = fr[size_t(st.out[0])];
        o.tensor = o.tensor.clone();
      };
    }
    plan_->steps.push_back(std::move(s));
  }
}

Executable::~Executable() = default;
Executable::Executable(Executable&&) noexcept = default;
Executable& Executable::operator=(Executable&&) noexcept = default;
size_t Executable::num_inputs() const { return plan_->inputs.size(); }
size_t Executable::num_steps() const { return plan_->steps.size(); }

std::vector<Slot> Executable::run_slots(std::span<const Slot> inputs) const {
  KILN_CHECK(inputs.size() == plan_->inputs.size(), "exec", "graph takes ", plan_->inputs.size(),
             " inputs, got ", inputs.size());
  Frame f(plan_->frame_size);
  for (size_t k = 0; k < inputs.size(); ++k) f[size_t(plan_->inputs[k])] = inputs[k];
  for (const Step& s : plan_->steps) s.run(s, f);
  std::vector<Slot> out;
  out.reserve(plan_->outputs.size());
  for (int id : plan_->outputs) out.push_back(f[size_t(id)]);
  return out;
}

std::vector<Tensor> Executable::run(std::span<const Tensor> inputs) const {
  KILN_CHECK(inputs.size() == plan_->inputs.size(), "exec", "graph takes ", plan_->inputs.size(),
             " inputs, got ", inputs.size());
  Frame f(plan_->frame_size);
  for (size_t k = 0; k < inputs.size(); ++k) f[size_t(plan_->inputs[k])].tensor = inputs[k];
  for (const Step& s : plan_->steps) s.run(s, f);
  std::vector<Tensor> out;
  out.reserve(plan_->outputs.size());
  for (int id : plan_->outputs) {
    KILN_CHECK(!f[size_t(id)].is_scalar, "exec", "graph output %", id, " is a number, not a tensor");
    out.push_back(f[size_t(id)].tensor);
  }
  return out;
}

std::vector<Tensor> execute(const Graph& g, std::span<const Tensor> inputs) { return Executable(g).run(inputs); }

}  // namespace kiln::ir
