// Lowering a kernel body (a graph in loop space) to scalar kernel code (expr.h).
#include "expr.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "kiln/ir/attrs.h"
#include "kiln/ir/infer.h"

namespace kiln::codegen {

DType compute_dtype(DType storage) {
  return storage == DType::Float16 || storage == DType::BFloat16 ? DType::Float32 : storage;
}

namespace {
struct EOpInfo {
  const char* name;
  int arity;
  const char* math;
};
constexpr EOpInfo kEOps[] = {
#define KILN_EOP(id, name, arity, math, ...) {name, arity, math},
#include "eops.def"
#undef KILN_EOP
};
}  // namespace

// The instruction that computes an op of the op table by itself, if one does.
std::optional<EOp> lowers_to(OpId op) {
  switch (op) {
#define KILN_EOP(id, name, arity, math, ...) __VA_OPT__(case OpId::__VA_ARGS__: return EOp::id;)
#include "eops.def"
#undef KILN_EOP
    default: return std::nullopt;
  }
}

std::string_view eop_name(EOp op) { return kEOps[size_t(op)].name; }
int eop_arity(EOp op) { return kEOps[size_t(op)].arity; }
const char* eop_math(EOp op) { return kEOps[size_t(op)].math; }

std::span<const MathFn> math_fns() {
  static const std::vector<MathFn> fns = [] {
    std::vector<MathFn> v;
    for (const EOpInfo& e : kEOps)
      if (e.math) v.push_back({e.math, e.arity});
    return v;
  }();
  return fns;
}

namespace {

// Not lowered: carries the reason up to lower_kernel.
struct Unsupported {
  std::string why;
};

class Builder {
 public:
  explicit Builder(const passes::Kernel& k) : k_(k), rank_(int(k.loops.size())) {}

  KernelCode run() {
    const ir::Graph& body = k_.body;
    for (size_t j = 0; j < body.inputs().size(); ++j) value_[body.inputs()[j]] = load(int(j));
    for (const auto& n : body.nodes()) lower(*n);
    KernelCode out;
    for (const ir::Value* v : body.outputs()) {
      auto it = value_.find(v);
      if (it == value_.end()) throw Unsupported{"a kernel output that no node defines"};
      out.stores.push_back(it->second);
    }
    for (const Instr& in : code_) out.depth = std::max(out.depth, in.depth);
    out.code = std::move(code_);
    out.checks = std::move(checks_);
    return out;
  }

 private:
  const passes::Kernel& k_;
  int rank_;
  std::vector<Instr> code_;
  std::vector<Check> checks_;
  std::map<std::tuple<int, int, std::vector<int>, uint64_t, int64_t, int, int>, int> cse_;
  std::unordered_map<const ir::Value*, int> value_;

  const Instr& at(int id) const { return code_[size_t(id)]; }

  // Appends an instruction (or finds its twin), deriving its row flag and depth.
  int add(Instr in) {
    for (int a : in.args) {
      const Instr& x = at(a);
      if (in.op == EOp::Reduce) {
        in.depth = std::max(in.depth, x.depth + 1);
      } else {
        in.row |= x.row;
        in.depth = std::max(in.depth, x.depth);
      }
    }
    uint64_t fbits;
    std::memcpy(&fbits, &in.f, sizeof fbits);
    auto key = std::make_tuple(int(in.op), int(in.type), in.args, fbits, in.i, in.index, int(in.reducer));
    auto [it, fresh] = cse_.try_emplace(key, int(code_.size()));
    if (fresh) code_.push_back(std::move(in));
    return it->second;
  }
  int op(EOp o, DType t, std::vector<int> args) {
    Instr in;
    in.op = o;
    in.type = t;
    in.args = std::move(args);
    return add(std::move(in));
  }
  int constant(DType t, double v) {
    Instr in;
    in.op = EOp::Const;
    in.type = t;
    if (is_floating(t)) in.f = v;
    else if (t == DType::Bool) in.i = v != 0;
    else in.i = int64_t(v);
    return add(std::move(in));
  }
  int constant_int(DType t, int64_t v) {
    if (is_floating(t)) return constant(t, double(v));
    Instr in;
    in.op = EOp::Const;
    in.type = t;
    in.i = t == DType::Bool ? v != 0 : v;
    return add(std::move(in));
  }
  int load(int j) {
    const passes::Access& a = k_.loads[size_t(j)];
    Instr in;
    in.type = compute_dtype(a.dtype);
    in.index = j;
    if (a.buffer < 0) {
      in.op = EOp::Arg;
    } else {
      in.op = EOp::Load;
      // size 1 or stride 0: the same element along that loop; any other size (0 too) walks it
      for (int d = k_.reduce_from; d < rank_ && d < int(a.sizes.size()); ++d)
        in.row |= a.sizes[size_t(d)] != 1 && (d >= int(a.strides.size()) || a.strides[size_t(d)] != 0);
    }
    return add(std::move(in));
  }
  int cvt(int id, DType t) {
    if (at(id).type == t) return id;
    if (at(id).op == EOp::Const) {
      const Instr& c = at(id);
      if (is_floating(c.type)) return constant(t, c.f);
      return constant_int(t, c.i);
    }
    return op(EOp::Convert, t, {id});
  }
  int in(const ir::Node& n, size_t i, DType t) { return cvt(value_.at(n.inputs[i]), t); }

  static double num(const AttrValue& v) {
    if (auto* d = std::get_if<double>(&v)) return *d;
    if (auto* i = std::get_if<int64_t>(&v)) return double(*i);
    if (auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
    throw Unsupported{"a non-numeric attribute"};
  }
  static bool is_int_const(const Instr& c, double v) {
    return c.op == EOp::Const && (is_floating(c.type) ? c.f == v : double(c.i) == v);
  }

  [[noreturn]] void unsupported(const ir::Node& n, std::string_view what = {}) const {
    std::string s = std::string(ir::op_info(n.op).name);
    if (!n.outputs.empty()) s += " on " + std::string(name(n.outputs[0]->type.dtype));
    if (!what.empty()) s += " (" + std::string(what) + ")";
    throw Unsupported{s};
  }

  // The compute type of a comparison or other op whose operands promote among themselves.
  DType promoted(const ir::Node& n) const {
    std::vector<ir::Type> ts;
    for (const ir::Value* v : n.inputs) ts.push_back(v->type);
    return compute_dtype(ir::infer_types(OpId::Add, ts, {})[0].dtype);
  }

  void lower(const ir::Node& n) {
    DType r = n.outputs.empty() ? DType::Float32 : n.outputs[0]->type.dtype;
    DType t = compute_dtype(r);
    bool fl = is_floating(t);
    auto u = [&](EOp o) { return op(o, t, {in(n, 0, t)}); };
    auto b = [&](EOp o) { return op(o, t, {in(n, 0, t), in(n, 1, t)}); };
    auto cmp = [&](EOp o) {
      DType ct = promoted(n);
      return op(o, DType::Bool, {in(n, 0, ct), in(n, 1, ct)});
    };
    auto logical = [&](EOp o) {
      return op(o, DType::Bool, {in(n, 0, DType::Bool), in(n, 1, DType::Bool)});
    };
    auto float_only = [&] {
      if (!fl) unsupported(n);
    };
    int v = -1;
    if (std::optional<EOp> e = lowers_to(n.op)) {
      // an op one instruction computes (eops.def's op column)
      if (ir::has_trait(n.op, ir::kFloatCompute) || ir::has_trait(n.op, ir::kFloatOnly)) float_only();
      std::vector<int> args;
      for (size_t i = 0; i < n.inputs.size(); ++i) args.push_back(in(n, i, t));
      v = op(*e, t, std::move(args));
    } else switch (n.op) {
      case OpId::Constant: {
        const Attr* a = n.attr("value");
        if (!a || !n.outputs[0]->type.sizes.empty()) unsupported(n, "tensor constant in a body");
        if (auto* i = std::get_if<int64_t>(&a->value); i && !fl) v = constant_int(t, *i);
        else v = constant(t, num(a->value));
        break;
      }
      case OpId::Neg: v = r == DType::Bool ? (unsupported(n), -1) : u(EOp::Neg); break;
      case OpId::Abs: v = r == DType::Bool ? in(n, 0, t) : u(EOp::Abs); break;
      case OpId::Sign: v = r == DType::Bool ? in(n, 0, t) : u(EOp::Sign); break;
      case OpId::Rsqrt: float_only(); v = op(EOp::Recip, t, {u(EOp::Sqrt)}); break;
      case OpId::Sigmoid: {
        float_only();
        int x = in(n, 0, t);
        int e = op(EOp::Exp, t, {op(EOp::Neg, t, {x})});
        v = op(EOp::Recip, t, {op(EOp::Add, t, {constant(t, 1), e})});
        break;
      }
      case OpId::Silu: {
        float_only();
        int x = in(n, 0, t);
        int e = op(EOp::Exp, t, {op(EOp::Neg, t, {x})});
        v = op(EOp::Div, t, {x, op(EOp::Add, t, {constant(t, 1), e})});  // (one rounding, as eager's)
        break;
      }
      case OpId::Relu: {
        int x = in(n, 0, t);
        v = op(EOp::Select, t, {op(EOp::Lt, DType::Bool, {x, constant(t, 0)}), constant(t, 0), x});
        break;
      }
      case OpId::Gelu: {
        float_only();
        bool tanh_form = ir::decode<OpId::Gelu>(n).approximate == "tanh";
        int x = in(n, 0, t);
        int inner;
        if (tanh_form) {
          int x3 = op(EOp::Mul, t, {op(EOp::Mul, t, {x, x}), x});
          int s = op(EOp::Add, t, {x, op(EOp::Mul, t, {constant(t, 0.044715), x3})});
          inner = op(EOp::Tanh, t, {op(EOp::Mul, t, {constant(t, 0.7978845608028654), s})});
        } else {
          inner = op(EOp::Erf, t, {op(EOp::Mul, t, {x, constant(t, 0.7071067811865476)})});
        }
        int half_x = op(EOp::Mul, t, {constant(t, 0.5), x});
        v = op(EOp::Mul, t, {half_x, op(EOp::Add, t, {constant(t, 1), inner})});
        break;
      }
      case OpId::Floor: v = fl ? u(EOp::Floor) : in(n, 0, t); break;
      case OpId::Ceil: v = fl ? u(EOp::Ceil) : in(n, 0, t); break;
      case OpId::Round: v = fl ? u(EOp::Round) : in(n, 0, t); break;
      case OpId::Trunc: v = fl ? u(EOp::Trunc) : in(n, 0, t); break;
      case OpId::IsNan:
      case OpId::IsInf:
      case OpId::IsFinite: {
        DType xt = compute_dtype(n.inputs[0]->type.dtype);
        if (!is_floating(xt)) {
          v = constant_int(DType::Bool, n.op == OpId::IsFinite);
        } else {
          EOp o = n.op == OpId::IsNan ? EOp::IsNan : n.op == OpId::IsInf ? EOp::IsInf : EOp::IsFinite;
          v = op(o, DType::Bool, {in(n, 0, xt)});
        }
        break;
      }
      case OpId::NanToNum: {
        if (!fl) {
          v = in(n, 0, t);
          break;
        }
        double big = r == DType::Float16    ? 65504.0
                     : r == DType::BFloat16 ? 3.3895313892515355e38
                     : r == DType::Float32  ? double(std::numeric_limits<float>::max())
                                            : std::numeric_limits<double>::max();
        int x = in(n, 0, t);
        ir::attrs::NanToNum at = ir::decode<OpId::NanToNum>(n);
        int nan_v = constant(t, at.nan.value_or(0));
        int pos_v = constant(t, at.posinf.value_or(big));
        int neg_v = constant(t, at.neginf.value_or(-big));
        int is_inf = op(EOp::IsInf, DType::Bool, {x});
        int pos = op(EOp::Gt, DType::Bool, {x, constant(t, 0)});
        int inf_v = op(EOp::Select, t, {pos, pos_v, neg_v});
        v = op(EOp::Select, t, {op(EOp::IsNan, DType::Bool, {x}), nan_v, op(EOp::Select, t, {is_inf, inf_v, x})});
        break;
      }
      case OpId::LogicalNot: v = op(EOp::Not, DType::Bool, {in(n, 0, DType::Bool)}); break;
      case OpId::BitwiseNot:
        if (fl) unsupported(n);
        v = r == DType::Bool ? op(EOp::Not, t, {in(n, 0, t)}) : u(EOp::BitNot);
        break;
      case OpId::Cast: {
        v = in(n, 0, t);
        if (r == DType::Float16 || r == DType::BFloat16) v = round_to_16(v, r);
        break;
      }
      case OpId::Fill: v = constant(t, ir::decode<OpId::Fill>(n).value.to_double()); break;
      case OpId::Add:
      case OpId::Sub: {
        double alpha = (n.op == OpId::Add ? ir::decode<OpId::Add>(n).alpha : ir::decode<OpId::Sub>(n).alpha).to_double();
        if (r == DType::Bool) {
          if (n.op == OpId::Sub) unsupported(n);
          v = logical(EOp::Or);
          break;
        }
        int x = in(n, 0, t), y = in(n, 1, t);
        if (alpha == 1) {
          v = op(n.op == OpId::Add ? EOp::Add : EOp::Sub, t, {x, y});
        } else if (fl) {
          // x + alpha * y as one fused multiply-add, as the eager kernel computes it
          v = op(EOp::Fma, t, {constant(t, n.op == OpId::Add ? alpha : -alpha), y, x});
        } else {
          v = op(n.op == OpId::Add ? EOp::Add : EOp::Sub, t, {x, op(EOp::Mul, t, {constant(t, alpha), y})});
        }
        break;
      }
      case OpId::Mul: v = r == DType::Bool ? logical(EOp::And) : b(EOp::Mul); break;
      case OpId::Div: {
        std::string mode = ir::decode<OpId::Div>(n).rounding_mode.value_or("");
        if (!fl) {
          // (true division of integers computes in a float type: only rounding modes get here)
          if (r == DType::Bool || (mode != "trunc" && mode != "floor")) unsupported(n);
          v = int_div(n, t, mode == "floor");
          break;
        }
        int x = in(n, 0, t), y = in(n, 1, t);
        int q = op(EOp::Div, t, {x, y});
        if (mode.empty() || mode == "none") {
          v = q;
        } else if (mode == "trunc") {
          v = op(EOp::Trunc, t, {q});
        } else {
          v = floor_div(t, x, y, q);
        }
        break;
      }
      case OpId::Remainder: {
        if (r == DType::Bool) unsupported(n);
        int x = in(n, 0, t), y = in(n, 1, t);
        int m = fl ? op(EOp::Fmod, t, {x, y}) : int_op(EOp::Fmod, t, x, y, zero_division_check(n, y));
        if (!fl && is_unsigned(t)) {  // (no signs to reconcile)
          v = m;
          break;
        }
        int zero = constant(t, 0);
        int fix = op(EOp::And, DType::Bool,
                     {op(EOp::Ne, DType::Bool, {m, zero}),
                      op(EOp::Ne, DType::Bool, {op(EOp::Lt, DType::Bool, {m, zero}), op(EOp::Lt, DType::Bool, {y, zero})})});
        v = op(EOp::Select, t, {fix, op(EOp::Add, t, {m, y}), m});
        break;
      }
      case OpId::Fmod: {
        if (fl) {
          v = b(EOp::Fmod);
          break;
        }
        if (r == DType::Bool) unsupported(n);
        int x = in(n, 0, t), y = in(n, 1, t);
        v = int_op(EOp::Fmod, t, x, y, zero_division_check(n, y));
        break;
      }
      case OpId::Pow: v = pow(n, t); break;
      case OpId::LogAddExp: {
        // max(a, b) + log1p(exp(-|a - b|)), and a where a == b is infinite (eager's logaddexp_s)
        float_only();
        int x = in(n, 0, t), y = in(n, 1, t);
        int gap = op(EOp::Abs, t, {op(EOp::Sub, t, {x, y})});
        int tail = op(EOp::Log1p, t, {op(EOp::Exp, t, {op(EOp::Neg, t, {gap})})});
        int sum = op(EOp::Add, t, {op(EOp::Max, t, {x, y}), tail});
        int same_inf = op(EOp::And, DType::Bool, {op(EOp::Eq, DType::Bool, {x, y}), op(EOp::IsInf, DType::Bool, {x})});
        v = op(EOp::Select, t, {same_inf, x, sum});
        break;
      }
      case OpId::Maximum: v = r == DType::Bool ? logical(EOp::Or) : b(EOp::Max); break;
      case OpId::Minimum: v = r == DType::Bool ? logical(EOp::And) : b(EOp::Min); break;
      case OpId::Eq: v = cmp(EOp::Eq); break;
      case OpId::Ne: v = cmp(EOp::Ne); break;
      case OpId::Lt: v = cmp(EOp::Lt); break;
      case OpId::Le: v = cmp(EOp::Le); break;
      case OpId::Gt: v = cmp(EOp::Gt); break;
      case OpId::Ge: v = cmp(EOp::Ge); break;
      case OpId::LogicalAnd: v = logical(EOp::And); break;
      case OpId::LogicalOr: v = logical(EOp::Or); break;
      case OpId::LogicalXor: v = logical(EOp::Xor); break;
      case OpId::BitwiseAnd: if (fl) unsupported(n); v = b(EOp::And); break;
      case OpId::BitwiseOr: if (fl) unsupported(n); v = b(EOp::Or); break;
      case OpId::BitwiseXor: if (fl) unsupported(n); v = b(EOp::Xor); break;
      case OpId::Where: v = op(EOp::Select, t, {in(n, 0, DType::Bool), in(n, 1, t), in(n, 2, t)}); break;
      case OpId::Clamp: {
        ir::attrs::Clamp at = ir::decode<OpId::Clamp>(n);
        bool lo = at.has_min, hi = at.has_max;
        size_t next = 1;
        v = in(n, 0, t);
        if (lo) v = op(EOp::Max, t, {v, in(n, next++, t)});
        if (hi) v = op(EOp::Min, t, {v, in(n, next++, t)});
        break;
      }
      case OpId::Lerp: {
        float_only();
        int a = in(n, 0, t), bb = in(n, 1, t), w = in(n, 2, t);
        int diff = op(EOp::Sub, t, {bb, a});
        int low = op(EOp::Add, t, {a, op(EOp::Mul, t, {w, diff})});
        int high = op(EOp::Sub, t, {bb, op(EOp::Mul, t, {diff, op(EOp::Sub, t, {constant(t, 1), w})})});
        v = op(EOp::Select, t, {op(EOp::Lt, DType::Bool, {op(EOp::Abs, t, {w}), constant(t, 0.5)}), low, high});
        break;
      }
      case OpId::Addcmul: {
        double value = ir::decode<OpId::Addcmul>(n).value.to_double();
        int t1 = in(n, 1, t);
        if (value != 1) t1 = op(EOp::Mul, t, {constant(t, value), t1});  // (value * t1) * t2, as eager
        v = op(EOp::Add, t, {in(n, 0, t), op(EOp::Mul, t, {t1, in(n, 2, t)})});
        break;
      }
      case OpId::MaskedFill:
        v = op(EOp::Select, t, {in(n, 1, DType::Bool), constant(t, ir::decode<OpId::MaskedFill>(n).value.to_double()), in(n, 0, t)});
        break;
      default:
        if (ir::op_info(n.op).category == ir::Category::Reduction) {
          v = reduction(n, r, t);
          break;
        }
        unsupported(n);
    }
    value_[n.outputs[0]] = v;
  }

  static bool is_unsigned(DType t) { return t == DType::UInt8 || t == DType::Bool; }

  int round_to_16(int x, DType to) {
    Instr rt;
    rt.op = EOp::RoundTo16;
    rt.type = DType::Float32;
    rt.args = {x};
    rt.index = int(to);
    return add(std::move(rt));
  }
  // Input i of node n as eager holds it: a 16-bit float value computed in this kernel (kept in
  // float32 between fused ops) rounded to its dtype. Ops that pick or accumulate elements one
  // by one (argmax's ties, cumsum's running sums) otherwise see values eager never had; the
  // others' results round once at their store.
  int as_stored(const ir::Node& n, size_t i) {
    int x = value_.at(n.inputs[i]);
    DType dt = n.inputs[i]->type.dtype;
    EOp o = at(x).op;
    if ((dt != DType::Float16 && dt != DType::BFloat16) || o == EOp::Load || o == EOp::Const || o == EOp::RoundTo16)
      return x;
    return round_to_16(cvt(x, DType::Float32), dt);
  }

  // A check flag for node n's integer division (eager's ZeroDivisionError, named after the op
  // as the reference executor's call names it), or -1 when the divisor is a nonzero constant.
  int zero_division_check(const ir::Node& n, int divisor) {
    const Instr& c = at(divisor);
    if (c.op == EOp::Const && c.i != 0) return -1;
    if (checks_.size() >= size_t(kMaxChecks)) unsupported(n, "more than 64 integer divisions in one kernel");
    checks_.push_back({std::string(ir::op_info(n.op).name), "ZeroDivisionError: integer division or modulo by zero"});
    return int(checks_.size()) - 1;
  }
  // Integer Div or Fmod (total: see expr.h) reporting a zero divisor through check `check`.
  int int_op(EOp o, DType t, int x, int y, int check) {
    Instr in;
    in.op = o;
    in.type = t;
    in.args = {x, y};
    in.index = check;
    return add(std::move(in));
  }
  // Integer division rounding toward zero or down, as eager's kernels (elementwise.cpp): the
  // truncated quotient, one less where the remainder is nonzero and the signs differ. x / -1
  // is -x, wrapping, so INT_MIN / -1 = INT_MIN in both modes; a zero divisor gives 0 and raises.
  int int_div(const ir::Node& n, DType t, bool floor) {
    int x = in(n, 0, t), y = in(n, 1, t);
    int check = zero_division_check(n, y);
    int q = int_op(EOp::Div, t, x, y, check);
    if (!floor || is_unsigned(t)) return q;
    int zero = constant_int(t, 0);
    int rem = int_op(EOp::Fmod, t, x, y, check);
    int fix = op(EOp::And, DType::Bool,
                 {op(EOp::Ne, DType::Bool, {rem, zero}),
                  op(EOp::Ne, DType::Bool, {op(EOp::Lt, DType::Bool, {x, zero}), op(EOp::Lt, DType::Bool, {y, zero})})});
    return op(EOp::Select, t, {fix, op(EOp::Sub, t, {q, constant_int(t, 1)}), q});
  }

  // Python-style floor division of floats, exact at the edges (the eager kernel's formula).
  int floor_div(DType t, int x, int y, int q) {
    int zero = constant(t, 0);
    int mod = op(EOp::Fmod, t, {x, y});
    int div = op(EOp::Div, t, {op(EOp::Sub, t, {x, mod}), y});
    int adjust = op(EOp::And, DType::Bool,
                    {op(EOp::Ne, DType::Bool, {mod, zero}),
                     op(EOp::Ne, DType::Bool, {op(EOp::Lt, DType::Bool, {y, zero}), op(EOp::Lt, DType::Bool, {mod, zero})})});
    div = op(EOp::Select, t, {adjust, op(EOp::Sub, t, {div, constant(t, 1)}), div});
    int fl = op(EOp::Floor, t, {div});
    int up = op(EOp::Gt, DType::Bool, {op(EOp::Sub, t, {div, fl}), constant(t, 0.5)});
    fl = op(EOp::Select, t, {up, op(EOp::Add, t, {fl, constant(t, 1)}), fl});
    // a zero quotient keeps the sign of the true quotient: copysign(0, x / y) = 0 * sign bit
    int signed_zero = op(EOp::Mul, t, {q, zero});  // the sign bit of q (q is finite here)
    int result = op(EOp::Select, t, {op(EOp::Ne, DType::Bool, {div, zero}), fl, signed_zero});
    return op(EOp::Select, t, {op(EOp::Eq, DType::Bool, {y, zero}), q, result});
  }

  int pow(const ir::Node& n, DType t) {
    int x = in(n, 0, t);
    int e = value_.at(n.inputs[1]);
    const Instr& c = at(e);
    if (c.op == EOp::Const) {
      if (is_int_const(c, 1)) return x;
      if (is_int_const(c, 2)) return op(EOp::Mul, t, {x, x});
      if (is_int_const(c, 3)) return op(EOp::Mul, t, {op(EOp::Mul, t, {x, x}), x});
      if (is_floating(t) && is_int_const(c, 0.5)) return op(EOp::Sqrt, t, {x});
      if (is_floating(t) && is_int_const(c, -1)) return op(EOp::Recip, t, {x});
    }
    if (!is_floating(t) && c.op == EOp::Const) {
      int64_t e_int = is_floating(c.type) ? int64_t(c.f) : c.i;
      bool integral = !is_floating(c.type) || double(e_int) == c.f;
      if (integral && e_int >= 0 && e_int <= 64) {
        // x^e by squaring (wrapping like the eager integer kernel)
        int result = constant_int(t, 1), base = x;
        for (int64_t k = e_int; k > 0; k >>= 1) {
          if (k & 1) result = op(EOp::Mul, t, {result, base});
          if (k > 1) base = op(EOp::Mul, t, {base, base});
        }
        return result;
      }
      unsupported(n, "integer pow with a negative or large exponent");
    }
    if (!is_floating(t)) unsupported(n, "integer pow with a non-constant exponent");
    return op(EOp::Pow, t, {x, cvt(e, t)});
  }

  // The loop-space dims a reduction node reduces, checked against the kernel's reduction loops.
  void check_dims(const ir::Node& n, const std::vector<int64_t>& dims) {
    int in_rank = int(n.inputs[0]->type.sizes.size());
    std::set<int64_t> got;
    if (dims.empty()) {
      for (int d = 0; d < in_rank; ++d) got.insert(d);
    }
    // (a 0-d input takes dim 0 or -1, which name its one element: as "every dim")
    if (in_rank > 0)
      for (int64_t d : dims) got.insert(d < 0 ? d + in_rank : d);
    std::set<int64_t> want;
    for (int d = k_.reduce_from; d < rank_; ++d) want.insert(d);
    // a 0-d input reduced over "every dim" of a scalar kernel, or the kernel's reduction loops
    bool ok = in_rank == rank_ ? got == want : (in_rank == 0 && want.empty());
    if (!ok) unsupported(n, "reduced dims are not the kernel's reduction loops");
  }

  int reduce(Reducer rd, DType acc, int x) {
    Instr in;
    in.op = EOp::Reduce;
    in.type = acc;
    in.reducer = rd;
    in.args = {cvt(x, acc)};
    return add(std::move(in));
  }

  // The row-major index of the current point over the reduction loops (int64). The lowering
  // pass (passes/src/lower.cpp) puts the reduced dims in the innermost loops in ascending dim
  // order and merges neighbours only where the merged index is row-major too, so this is the
  // index eager counts: along the dim for one dim, into the flattened tensor for every dim.
  int64_t row_length() const {
    int64_t count = 1;
    for (int d = k_.reduce_from; d < rank_; ++d) count *= k_.loops[size_t(d)];
    return count;
  }
  int row_index() {
    if (row_length() == 1) return constant_int(DType::Int64, 0);  // (no loop walks the row)
    Instr in;
    in.op = EOp::RowIndex;
    in.type = DType::Int64;
    in.row = true;
    return add(std::move(in));
  }

  // argmax/argmin and max/min with a dim: the eager kernel (reduce.cpp, arg_extremum) walks the
  // row keeping the first strictly greater (smaller) element, and a NaN, once met, wins: the
  // index of the first NaN, else of the first extremum. Two passes give the same: the
  // NaN-propagating max (min) m, then the least index where x == m or x is NaN (a NaN x means
  // m is NaN). max/min's value is eager's element at that index: m, except for the sign of a
  // zero (m is +0.0 for a row holding -0.0 and +0.0, eager keeps the first zero's sign), so for
  // floats the second pass minimises 2 * index + signbit(x), which carries the first match's
  // sign in its lowest bit.
  int arg_extremum(const ir::Node& n, DType xt, int x) {
    bool is_max = n.op == OpId::Argmax || n.op == OpId::MaxDim;
    bool with_value = n.op == OpId::MaxDim || n.op == OpId::MinDim;
    bool fl = is_floating(xt);
    Reducer rd = xt == DType::Bool ? (is_max ? Reducer::Any : Reducer::All) : is_max ? Reducer::Max : Reducer::Min;
    x = cvt(x, xt);
    int m = reduce(rd, xt, x);
    int match = op(EOp::Eq, DType::Bool, {x, m});
    if (fl) match = op(EOp::Or, DType::Bool, {match, op(EOp::IsNan, DType::Bool, {x})});
    int pos = row_index();
    const DType i64 = DType::Int64;
    bool sign_bit = with_value && fl;
    if (sign_bit)
      pos = op(EOp::Add, i64, {op(EOp::Mul, i64, {pos, constant_int(i64, 2)}),
                               cvt(op(EOp::SignBit, DType::Bool, {x}), i64)});
    int key = op(EOp::Select, i64, {match, pos, constant_int(i64, std::numeric_limits<int64_t>::max())});
    int first = reduce(Reducer::Min, i64, key);
    int index = sign_bit ? int_op(EOp::Div, i64, first, constant_int(i64, 2), -1) : first;
    if (!with_value) return index;
    int value = m;
    if (sign_bit) {
      int negative = op(EOp::Ne, DType::Bool, {int_op(EOp::Fmod, i64, first, constant_int(i64, 2), -1), constant_int(i64, 0)});
      int zero = op(EOp::Select, xt, {negative, constant(xt, -0.0), constant(xt, 0.0)});
      value = op(EOp::Select, xt, {op(EOp::Eq, DType::Bool, {m, constant(xt, 0.0)}), zero, m});
    }
    value_[n.outputs[1]] = index;
    return value;
  }

  int reduction(const ir::Node& n, DType r, DType t) {
    auto dims_attr = [&](std::string_view name) {
      const Attr* a = n.attr(name);
      std::vector<int64_t> dims;
      if (a && std::holds_alternative<IntList>(a->value)) dims = std::get<IntList>(a->value);
      else if (a && std::holds_alternative<int64_t>(a->value)) dims = {std::get<int64_t>(a->value)};
      return dims;
    };
    // argmax/argmin's dim may be none (every dim); the others name one dim or a list
    bool single_dim = ir::has_trait(n.op, ir::kRowOp) || n.op == OpId::Argmax || n.op == OpId::Argmin ||
                      n.op == OpId::MaxDim || n.op == OpId::MinDim;
    check_dims(n, dims_attr(single_dim ? "dim" : "dims"));
    // The row's length as an instruction: a constant in a kernel specialised on its sizes, an
    // argument in a size-generic one.
    auto count = [&] {
      Instr c;
      c.op = EOp::RowCount;
      c.type = DType::Float64;
      return add(std::move(c));
    };
    DType xt = compute_dtype(n.inputs[0]->type.dtype);
    int x = value_.at(n.inputs[0]);
    // Float sums accumulate in float64, integer and bool sums in int64; a 16-bit float sum of
    // 16-bit floats in float32, as eager's does (reduce.cpp) and PyTorch's: widening each element
    // to float64 made a float16 row sum compute-bound, 2.2x torch.compile's time.
    // (The same for products, and for mean's, softmax's and logsumexp's sums.)
    const bool sixteen = is_floating(t) && itemsize(n.outputs[0]->type.dtype) == 2 && itemsize(n.inputs[0]->type.dtype) == 2;
    const DType fsum = sixteen ? DType::Float32 : DType::Float64;
    DType acc = is_floating(t) ? fsum : DType::Int64;
    switch (n.op) {
      case OpId::Sum:
      case OpId::NanSum: {
        if (n.op == OpId::NanSum && is_floating(xt))
          x = op(EOp::Select, xt, {op(EOp::IsNan, DType::Bool, {x}), constant(xt, 0), x});
        return cvt(reduce(Reducer::Sum, acc, x), t);
      }
      case OpId::Prod: return cvt(reduce(Reducer::Prod, acc, x), t);
      case OpId::Mean: {
        if (!is_floating(t)) unsupported(n);
        int s = reduce(Reducer::Sum, fsum, x);
        return cvt(op(EOp::Div, fsum, {s, cvt(count(), fsum)}), t);
      }
      case OpId::Amax: return r == DType::Bool ? reduce(Reducer::Any, DType::Bool, x) : reduce(Reducer::Max, t, x);
      case OpId::Amin: return r == DType::Bool ? reduce(Reducer::All, DType::Bool, x) : reduce(Reducer::Min, t, x);
      case OpId::Aminmax:  // both in one pass over the row
        value_[n.outputs[1]] = r == DType::Bool ? reduce(Reducer::Any, DType::Bool, x) : reduce(Reducer::Max, t, x);
        return r == DType::Bool ? reduce(Reducer::All, DType::Bool, x) : reduce(Reducer::Min, t, x);
      case OpId::Any: return reduce(Reducer::Any, DType::Bool, x);
      case OpId::All: return reduce(Reducer::All, DType::Bool, x);
      case OpId::Norm: {
        if (!is_floating(t)) unsupported(n);
        double p = ir::decode<OpId::Norm>(n).p;
        int a = op(EOp::Abs, DType::Float64, {cvt(x, DType::Float64)});
        if (p == 2) return cvt(op(EOp::Sqrt, DType::Float64, {reduce(Reducer::Sum, DType::Float64, op(EOp::Mul, DType::Float64, {a, a}))}), t);
        if (p == 1) return cvt(reduce(Reducer::Sum, DType::Float64, a), t);
        if (std::isinf(p) && p > 0) return cvt(reduce(Reducer::Max, t, cvt(a, t)), t);
        unsupported(n, "norm with p other than 1, 2, inf");
      }
      case OpId::Var:
      case OpId::Std: {
        if (!is_floating(t)) unsupported(n);
        double corr = double(n.op == OpId::Var ? ir::decode<OpId::Var>(n).correction : ir::decode<OpId::Std>(n).correction);
        int x64 = cvt(x, DType::Float64);
        int n64 = count();
        int mean = op(EOp::Div, DType::Float64, {reduce(Reducer::Sum, DType::Float64, x64), n64});
        int d = op(EOp::Sub, DType::Float64, {x64, mean});
        int ss = reduce(Reducer::Sum, DType::Float64, op(EOp::Mul, DType::Float64, {d, d}));
        int dof = op(EOp::Max, DType::Float64, {op(EOp::Sub, DType::Float64, {n64, constant(DType::Float64, corr)}),
                                                constant(DType::Float64, 0)});
        int var = op(EOp::Div, DType::Float64, {ss, dof});
        if (n.op == OpId::Std) var = op(EOp::Sqrt, DType::Float64, {var});
        return cvt(var, t);
      }
      case OpId::LogSumExp: {
        if (!is_floating(t)) unsupported(n);
        int xv = cvt(x, t);
        int m = reduce(Reducer::Max, t, xv);
        int safe = op(EOp::Select, t, {op(EOp::IsInf, DType::Bool, {m}), constant(t, 0), m});
        int e = op(EOp::Exp, t, {op(EOp::Sub, t, {xv, safe})});
        int s = cvt(reduce(Reducer::Sum, fsum, e), t);
        return op(EOp::Add, t, {op(EOp::Log, t, {s}), safe});
      }
      case OpId::Argmax:
      case OpId::Argmin:
      case OpId::MaxDim:
      case OpId::MinDim: return arg_extremum(n, xt, as_stored(n, 0));
      case OpId::Cumsum: {
        // eager (reduce.cpp, cumsum): a running sum in sum_acc_t, added in order and rounded to
        // the result's dtype at each point: float and double add in float64, float16 and
        // bfloat16 in float32 (sum_acc_t of a non-standard float), integers and bool in int64.
        DType in_dt = n.inputs[0]->type.dtype;
        DType sacc = in_dt == DType::Float16 || in_dt == DType::BFloat16 ? DType::Float32 : acc;
        x = cvt(as_stored(n, 0), sacc);
        // a row of one element: eager's 0 + x (which turns -0.0 into +0.0)
        if (row_length() == 1) return cvt(op(EOp::Add, sacc, {constant(sacc, 0), x}), t);
        Instr sc;
        sc.op = EOp::Scan;
        sc.type = sacc;
        sc.reducer = Reducer::Sum;
        sc.args = {x};
        sc.row = true;  // (x may be the same along the row: a constant)
        return cvt(add(std::move(sc)), t);
      }
      case OpId::Softmax:
      case OpId::LogSoftmax: {
        if (!is_floating(t)) unsupported(n);
        int xv = cvt(x, t);
        int m = reduce(Reducer::Max, t, xv);
        int shifted = op(EOp::Sub, t, {xv, m});
        int e = op(EOp::Exp, t, {shifted});
        int s = cvt(reduce(Reducer::Sum, fsum, e), t);
        // one reciprocal per row, a multiply per element (as the eager kernel does)
        if (n.op == OpId::Softmax) return op(EOp::Mul, t, {e, op(EOp::Recip, t, {s})});
        return op(EOp::Sub, t, {shifted, op(EOp::Log, t, {s})});
      }
      default: unsupported(n);
    }
  }
};

}  // namespace

Lowered lower_kernel(const passes::Kernel& k) {
  Lowered out;
  if (k.kind == passes::KernelKind::Opaque || k.kind == passes::KernelKind::Control) {
    out.why = std::string(passes::kernel_kind_name(k.kind)) + " kernel";
    return out;
  }
  try {
    Builder b(k);
    out.code = b.run();
    // A row value stored where the store does not vary along the row has no single value.
    for (size_t j = 0; j < k.stores.size(); ++j) {
      if (!out.code->code[size_t(out.code->stores[j])].row) continue;
      bool varies = false;
      for (size_t d = size_t(k.reduce_from); d < k.loops.size() && d < k.stores[j].sizes.size(); ++d)
        varies |= k.stores[j].sizes[d] != 1;
      if (!varies) {
        out.code.reset();
        out.why = "a row value stored once per row";
        return out;
      }
    }
  } catch (const Unsupported& u) {
    out.code.reset();
    out.why = u.why;
  }
  return out;
}

std::string KernelCode::str() const {
  std::ostringstream o;
  o.precision(17);
  for (size_t i = 0; i < code.size(); ++i) {
    const Instr& in = code[i];
    o << "  %" << i << " = " << eop_name(in.op);
    if (in.op == EOp::Reduce || in.op == EOp::Scan) {
      static const char* rn[] = {"sum", "prod", "max", "min", "any", "all"};
      o << "." << rn[size_t(in.reducer)];
    }
    o << " " << name(in.type);
    for (int a : in.args) o << " %" << a;
    if (in.op == EOp::Const) {
      if (is_floating(in.type)) o << " " << in.f;
      else o << " " << in.i;
    }
    if (in.op == EOp::Load || in.op == EOp::Arg) o << " in" << in.index;
    if ((in.op == EOp::Div || in.op == EOp::Fmod) && in.index >= 0) o << " check" << in.index;
    if (in.row) o << " row";
    if (in.depth) o << " depth " << in.depth;
    o << "\n";
  }
  for (size_t j = 0; j < stores.size(); ++j) o << "  store out" << j << " = %" << stores[j] << "\n";
  for (size_t j = 0; j < checks.size(); ++j)
    o << "  check" << j << " raises [" << checks[j].op << "] " << checks[j].message << "\n";
  return o.str();
}

// ---- facts about a kernel both backends use ----

bool fits_index32(const passes::Kernel& k) {
  const int64_t lim = int64_t(1) << 31;
  for (int64_t e : k.loops)
    if (e >= lim) return false;
  auto fits = [&](const passes::Access& a) {
    if (a.buffer < 0) return true;
    int64_t hi = 0;  // from the access's first element, which the caller's address points at
    for (size_t d = 0; d < a.sizes.size(); ++d) hi += (a.sizes[d] - 1) * std::abs(a.strides[d]);
    return hi < lim;
  };
  for (const auto& a : k.loads)
    if (!fits(a)) return false;
  for (const auto& a : k.stores)
    if (!fits(a)) return false;
  return true;
}

int in_place_store(const passes::Kernel& k, size_t load) {
  const passes::Access& a = k.loads[load];
  if (a.buffer < 0) return -1;
  for (size_t s = 0; s < k.stores.size(); ++s)
    if (a.dtype == k.stores[s].dtype && a.same_index(k.stores[s])) return int(s);
  return -1;
}

bool splits_reduction(const passes::Kernel& k, const KernelCode& code, bool early_stores, int depths) {
  if (k.reduce_from != 0 || k.loops.empty() || k.loops[0] < 2 || code.depth < 1 || code.depth > depths) return false;
  // (a scan restarts at the row's start: the parts of a split row cannot carry it)
  for (const Instr& in : code.code)
    if (in.op == EOp::Scan) return false;
  // Every store is a per-row value (one element: the reduction's result, or what follows it),
  // or with early_stores written by the first pass, which each part runs over its own elements.
  RowPlan p = row_plan(k, code, early_stores);
  if (!p.in_row.empty()) return false;
  for (size_t j : p.per_row)
    for (int64_t e : k.stores[j].sizes)
      if (e != 1) return false;
  return true;
}

std::vector<int> needed(const KernelCode& code, const std::vector<int>& roots) {
  std::vector<bool> seen(code.code.size(), false);
  std::vector<int> stack = roots;
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    if (seen[size_t(id)]) continue;
    seen[size_t(id)] = true;
    if (code.code[size_t(id)].op == EOp::Reduce) continue;
    for (int a : code.code[size_t(id)].args) stack.push_back(a);
  }
  std::vector<int> out;
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i]) out.push_back(int(i));
  return out;
}

RowPlan row_plan(const passes::Kernel& k, const KernelCode& code, bool early_stores) {
  RowPlan p;
  const int rank = int(k.loops.size()), from = std::min(k.reduce_from, rank);
  for (size_t j = 0; j < k.stores.size(); ++j) {
    int id = code.stores[j];
    bool varies = code.code[size_t(id)].row;
    for (int d = from; d < rank && d < int(k.stores[j].sizes.size()); ++d) varies |= k.stores[j].sizes[size_t(d)] != 1;
    if (!varies) {
      p.per_row.push_back(j);
      continue;
    }
    // (not a store into a buffer the kernel reads: a later pass would read the new values)
    bool early = early_stores && code.depth >= 1;
    for (const passes::Access& l : k.loads) early = early && (l.buffer < 0 || l.buffer != k.stores[j].buffer);
    for (int i : needed(code, {id}))
      early = early && code.code[size_t(i)].op != EOp::Reduce && code.code[size_t(i)].op != EOp::Scan;
    (early ? p.early : p.in_row).push_back(j);
  }
  p.reduces.resize(size_t(code.depth) + 1);
  for (size_t i = 0; i < code.code.size(); ++i)
    if (code.code[i].op == EOp::Reduce) p.reduces[size_t(code.code[i].depth)].push_back(int(i));
  for (int depth = 1; depth <= code.depth; ++depth) {
    std::vector<int> roots;
    for (int r : p.reduces[size_t(depth)]) roots.push_back(code.code[size_t(r)].args[0]);
    if (depth == 1)
      for (size_t j : p.early) roots.push_back(code.stores[j]);
    p.needs.push_back(needed(code, roots));
  }
  std::vector<int> store_roots;
  for (size_t j : p.in_row) store_roots.push_back(code.stores[j]);
  p.needs.push_back(needed(code, store_roots));
  return p;
}

}  // namespace kiln::codegen
