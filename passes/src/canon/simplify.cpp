// simplify: algebraic identities, no-op views and casts, as a table of rules.
//
// Each rule looks at one node and proposes a replacement for its output: an existing value
// (x*1 -> x), or a cheaper node it builds (pow(x, 2) -> mul(x, x)). The walk goes forward once,
// trying the rules in table order, and walks again until no rule fires.
//
// Every rule is exact in IEEE arithmetic and in eager kernels' integer arithmetic, and fires only
// when the replacement's type equals the original's exactly (dtype, sizes, strides, wrapped),
// so consumers infer the same types. Replacing a value by another value is also a memory
// question, checked in Walk::can_forward: a no-op view's replacement is the same memory, but
// x*1 -> x makes readers of the fresh result read x's memory instead, which must then not be
// written while they read it, and the result must not itself be written.
#include <cmath>
#include <map>
#include <tuple>
#include <unordered_set>

#include "../schedule.h"
#include "kiln/ir/attrs.h"
#include "kiln/ir/infer.h"
#include "kiln/runtime/factories.h"
#include "rewrite.h"

namespace kiln::passes {

namespace {

using canon::MemoryInfo;

// A rule's proposal for a node's output.
struct Replacement {
  const ir::Value* value = nullptr;  // an existing value of the old graph...
  bool same_memory = false;          // ...that is the output's own memory (a no-op view)
  ir::Value* built = nullptr;        // or a node the rule appended to the new graph
};

class Walk {
 public:
  explicit Walk(const ir::Graph& g) : mem(g), rb(g) {}
  MemoryInfo mem;
  canon::Rebuilder rb;

  std::optional<double> num(const ir::Value* v) const { return canon::constant_number(v, mem); }
  // Appends op(inputs) when its inferred type is exactly `want`; else appends nothing.
  ir::Value* build(OpId op, std::vector<ir::Value*> inputs, std::vector<ir::Attr> attrs, const ir::Type& want) {
    auto t = canon::try_infer(op, canon::types_of(inputs), attrs);
    if (!t || *t != std::vector<ir::Type>{want}) return nullptr;
    return rb.emit(op, std::move(inputs), std::move(attrs))->outputs[0];
  }

  bool can_forward(const ir::Node& n, const Replacement& r);
  int run(const ir::Graph& g);  // the rules fired

  // select(v, dim, index) of a new-graph value, appended once per walk: a select pushed past an
  // elementwise op that reads one value twice (x * x) then stays one select, not two per level.
  ir::Value* select(ir::Value* v, int64_t dim, int64_t index) {
    auto [it, fresh] = selects_.try_emplace({v, dim, index}, nullptr);
    if (fresh) it->second = rb.emit(OpId::Select, {v}, {{"dim", dim}, {"index", index}})->outputs[0];
    return it->second;
  }

 private:
  std::unordered_set<const ir::Value*> forwarded_;  // replaced by another value in this walk
  std::unordered_set<int> touched_;                 // classes whose readers changed in this walk
  std::map<std::tuple<const ir::Value*, int64_t, int64_t>, ir::Value*> selects_;
};

bool Walk::can_forward(const ir::Node& n, const Replacement& r) {
  const ir::Value* v = n.outputs[0];
  const ir::Value* x = r.value;
  // x's own stand-in was checked against x's readers, not v's: leave it for the next walk.
  if (v->type != x->type || forwarded_.count(x)) return false;
  if (r.same_memory) return true;
  int cv = mem.cls(v), cx = mem.cls(x);
  // Readers of v (and of views of v) will read x's memory: nothing may write it while they do,
  // and v's memory must not be a write-back's destination (the write would land in x).
  if (mem.written(cv) || touched_.count(cv) || touched_.count(cx)) return false;
  int end = mem.last_read(cv);
  if (mem.written_between(cx, mem.def(v), end == INT_MAX ? INT_MAX : end + 1)) return false;
  // A returned fresh result must not become the caller's input, a constant shared by every
  // run, or a second copy of another returned buffer.
  if (mem.has_output(cv) && (mem.has_input(cx) || mem.has_constant(cx) || mem.has_output(cx))) return false;
  touched_.insert(cv);
  touched_.insert(cx);
  return true;
}

const ir::Node* made_by(const ir::Value* v, OpId op) {
  return v->producer && v->producer->op == op ? v->producer : nullptr;
}

// A rule that looks through `inner` (an op computing a fresh value) to inner's operands: the
// outer node must see what inner computed, so neither inner's result nor its operands may be
// written between the two (later readers of the operands are can_forward's business).
bool unwritten_between(const Walk& w, const ir::Node& inner, const ir::Node& outer) {
  int lo = w.mem.pos(&inner), hi = w.mem.pos(&outer);
  if (w.mem.written_between(w.mem.cls(inner.outputs[0]), lo, hi)) return false;
  for (const ir::Value* v : inner.inputs)
    if (w.mem.written_between(w.mem.cls(v), lo, hi + 1)) return false;
  return true;
}

// ---- the rules ----

// x*1, 1*x -> x
Replacement mul_one(Walk& w, const ir::Node& n) {
  if (n.op != OpId::Mul) return {};
  if (w.num(n.inputs[1]) == 1.0) return {n.inputs[0]};
  if (w.num(n.inputs[0]) == 1.0) return {n.inputs[1]};
  return {};
}

// x + alpha*c -> x when alpha*c is -0.0 (floats: x + -0.0 is x for every x, -0.0 included, but
// x + 0.0 turns -0.0 into +0.0), x - alpha*c -> x when alpha*c is +0.0; any zero for integers
// and bools. add(c, x) is c + x only with alpha 1.
Replacement add_zero(Walk& w, const ir::Node& n) {
  if (n.op != OpId::Add && n.op != OpId::Sub) return {};
  auto alpha = canon::attr_number(n, "alpha", 1.0);
  if (!alpha) return {};
  bool exact_zero_ok = !is_floating(n.outputs[0]->type.dtype);
  auto leaves_x = [&](double addend, bool subtract) {
    return addend == 0 && (exact_zero_ok || std::signbit(addend) != subtract);
  };
  if (auto c = w.num(n.inputs[1]); c && leaves_x(*alpha * *c, n.op == OpId::Sub)) return {n.inputs[0]};
  if (n.op == OpId::Add && *alpha == 1)
    if (auto c = w.num(n.inputs[0]); c && leaves_x(*c, false)) return {n.inputs[1]};
  return {};
}

// neg(neg(x)) -> x (for integers too: negation wraps both ways)
Replacement neg_neg(Walk& w, const ir::Node& n) {
  if (n.op != OpId::Neg) return {};
  if (const ir::Node* m = made_by(n.inputs[0], OpId::Neg); m && unwritten_between(w, *m, n)) return {m->inputs[0]};
  return {};
}

// logical_not(logical_not(b)) -> b for bool b
Replacement not_not(Walk& w, const ir::Node& n) {
  if (n.op != OpId::LogicalNot) return {};
  if (const ir::Node* m = made_by(n.inputs[0], OpId::LogicalNot); m && unwritten_between(w, *m, n))
    if (m->inputs[0]->type.dtype == DType::Bool) return {m->inputs[0]};
  return {};
}

// pow(x, 1) -> x
Replacement pow_one(Walk& w, const ir::Node& n) {
  if (n.op == OpId::Pow && w.num(n.inputs[1]) == 1.0) return {n.inputs[0]};
  return {};
}

// pow(x, 2) -> mul(x, x): the eager kernel squares a wrapped exponent of 2 this way already;
// a tensor exponent goes through the general pow, which the exact square can only improve.
Replacement pow_two(Walk& w, const ir::Node& n) {
  if (n.op != OpId::Pow || w.num(n.inputs[1]) != 2.0) return {};
  ir::Value* x = w.rb(n.inputs[0]);
  return {.built = w.build(OpId::Mul, {x, x}, {}, n.outputs[0]->type)};
}

// Whether 2^k and 2^-k are both normal numbers of dtype dt.
bool normal_pow2(int k, DType dt) {
  int lo = dt == DType::Float16 ? -14 : dt == DType::Float64 ? -1022 : -126;
  int hi = dt == DType::Float16 ? 15 : dt == DType::Float64 ? 1023 : 127;
  return k >= lo && k <= hi && -k >= lo && -k <= hi;
}

// div(x, c) -> mul(x, 1/c) for floats when c = ±2^k: x/c and x*(1/c) are the same real number,
// rounded the same way, as long as c and 1/c are exact normal numbers of the computing dtype.
Replacement div_pow2(Walk& w, const ir::Node& n) {
  if (n.op != OpId::Div) return {};
  if (ir::decode<OpId::Div>(n).rounding_mode) return {};
  const ir::Value* c = n.inputs[1];
  DType dt = n.outputs[0]->type.dtype;
  auto value = w.num(c);
  if (!value || !c->type.sizes.empty() || !is_floating(dt) || !is_floating(n.inputs[0]->type.dtype)) return {};
  int e = 0;
  double mant = std::frexp(*value, &e);
  if (std::abs(mant) != 0.5 || !normal_pow2(e - 1, dt)) return {};
  double recip = 1.0 / *value;
  ir::Type ct = c->type;  // the new constant keeps c's wrapped-ness, and its dtype where it can
  if (!is_floating(ct.dtype)) {
    if (!ct.wrapped) return {};
    ct.dtype = DType::Float64;
  }
  if (!normal_pow2(1 - e, ct.dtype)) return {};
  auto t = canon::try_infer(OpId::Mul, {n.inputs[0]->type, ct}, {});
  if (!t || *t != std::vector<ir::Type>{n.outputs[0]->type}) return {};
  ir::Value* rc = ct.wrapped ? w.rb.number(recip, ct) : w.rb.data(full({}, recip, TensorOptions(ct.dtype)), ct);
  return {.built = w.build(OpId::Mul, {w.rb(n.inputs[0]), rc}, {}, n.outputs[0]->type)};
}

// cast(x) to x's own dtype is x itself in eager mode.
Replacement cast_same(Walk&, const ir::Node& n) {
  if (n.op == OpId::Cast && n.inputs[0]->type.dtype == n.outputs[0]->type.dtype) return {n.inputs[0], true};
  return {};
}

// Whether dtype `to` holds every value of dtype `from` exactly.
bool holds_all(DType from, DType to) {
  auto significand = [](DType d) {  // bits, the implicit one included; integers: magnitude bits
    switch (d) {
      case DType::Bool: return 1;
      case DType::UInt8: return 8;
      case DType::Int8: return 7;
      case DType::Int16: return 15;
      case DType::Int32: return 31;
      case DType::Int64: return 63;
      case DType::Float16: return 11;
      case DType::BFloat16: return 8;
      case DType::Float32: return 24;
      case DType::Float64: return 53;
    }
    return 0;
  };
  if (from == to || from == DType::Bool) return true;
  if (to == DType::Bool) return false;
  if (is_floating(from)) {
    // f16 -> bf16 loses mantissa bits and bf16 -> f16 loses range: only widening to f32/f64.
    return is_floating(to) && significand(to) > significand(from) && to != DType::Float16 && to != DType::BFloat16;
  }
  if (is_floating(to)) return significand(from) <= significand(to);  // ranges are ample
  if (!is_signed(to)) return false;                                  // u8 from a signed or wider type
  return significand(from) < significand(to) || (from == DType::UInt8 && significand(to) >= 8);
}

// cast(cast(x, A), dtype(x)) -> x when A holds every value of x's dtype.
Replacement cast_roundtrip(Walk& w, const ir::Node& n) {
  if (n.op != OpId::Cast) return {};
  const ir::Node* m = made_by(n.inputs[0], OpId::Cast);
  if (!m || !unwritten_between(w, *m, n)) return {};
  DType x = m->inputs[0]->type.dtype, a = m->outputs[0]->type.dtype;
  if (n.outputs[0]->type.dtype == x && holds_all(x, a)) return {m->inputs[0]};
  return {};
}

// Views that keep the operand's storage offset: their result is fully described by its type.
bool keeps_offset(const ir::Node& n) {
  switch (n.op) {
    case OpId::View: case OpId::Transpose: case OpId::Permute: case OpId::Expand: case OpId::Squeeze:
    case OpId::Unsqueeze:
      return true;
    case OpId::Slice: return canon::attr_number(n, "start", 0) == 0.0;
    default: return false;
  }
}

// A chain of offset-keeping views (or contiguous of a contiguous tensor) whose result has the
// type of a value up the chain is that value: same memory, same sizes, strides and offset.
Replacement noop_view(Walk&, const ir::Node& n) {
  if (n.op == OpId::Contiguous && n.inputs[0]->type == n.outputs[0]->type) return {n.inputs[0], true};
  if (!keeps_offset(n)) return {};
  for (const ir::Value* x = n.inputs[0];; x = x->producer->inputs[0]) {
    if (x->type == n.outputs[0]->type) return {x, true};
    if (!x->producer || !keeps_offset(*x->producer)) return {};
  }
}

std::vector<int64_t> without_leading_ones(std::vector<int64_t> s) {
  size_t k = 0;
  while (k < s.size() && s[k] == 1) ++k;
  s.erase(s.begin(), s.begin() + long(k));
  return s;
}

// An elementwise operand unsqueeze/view/expand(u) that only does what broadcasting does anyway
// (adds leading 1s, or expands) reads u directly. u must keep at least one dim: a 0-d operand
// promotes differently from a dimensioned one, which the output type need not show (lt).
Replacement broadcast_view(Walk& w, const ir::Node& n) {
  if (ir::op_info(n.op).category != ir::Category::Elementwise || n.inputs.size() < 2) return {};
  std::vector<ir::Value*> ins = w.rb.operands(n);
  const std::vector<ir::Type> want = {n.outputs[0]->type};
  bool any = false;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const ir::Node* p = n.inputs[k]->producer;
    if (!p || (p->op != OpId::Unsqueeze && p->op != OpId::View && p->op != OpId::Expand)) continue;
    const ir::Value* u = p->inputs[0];
    if (u->type.is_scalar() || u->type.sizes.empty()) continue;
    if (p->op != OpId::Expand && without_leading_ones(u->type.sizes) != without_leading_ones(p->outputs[0]->type.sizes))
      continue;
    std::vector<ir::Value*> trial = ins;
    trial[k] = w.rb(u);
    if (canon::try_infer(n.op, canon::types_of(trial), n.attrs) == want) {
      ins = trial;
      any = true;
    }
  }
  if (!any) return {};
  return {.built = w.build(n.op, ins, n.attrs, n.outputs[0]->type)};
}

// ---- reductions that drop dims, and the elementwise work after them ----
//
// x.sum(1) of a matrix is [R], which broadcasting lines up with x's last dim, not its first: the
// elementwise work after it (sqrt of a sum of squares, + b, a logsumexp's log) cannot share the
// reduction's loop nest as it stands, and fusion leaves it to a kernel of its own. The two rules
// below rewrite it into the reduction's own shape, where it fuses: the reduction keeps its dims
// and is viewed without them (keep_reduced_dims), and an elementwise op reading such a view of a
// fresh value computes on the value itself, its other operands given the same 1s, with the view
// taken of its result instead (squeeze_past_elementwise). Views cost nothing; what runs is the
// same arithmetic on the same elements, in one kernel.

// Whether reduction n (one that takes keepdim, spelled out or left to its default, false)
// drops dims its result would not line up with by broadcasting: keepdim=false over dims that
// are not the leading ones.
bool drops_inner_dims(const ir::Node& n) {
  return ir::op_info(n.op).category == ir::Category::Reduction && n.outputs.size() == 1 &&
         (n.attr("keepdim") || ir::attr_default(n.op, "keepdim")) && !detail::aligned_result(n);
}

// reduce(x, dims, keepdim=false) -> view(reduce(x, dims, keepdim=true)) when an elementwise op
// reads it (and nothing writes its memory).
Replacement keep_reduced_dims(Walk& w, const ir::Node& n) {
  if (!drops_inner_dims(n) || w.mem.written(w.mem.cls(n.outputs[0]))) return {};
  bool elementwise_reader = false;
  for (const auto& u : w.mem.uses(n.outputs[0]))
    elementwise_reader |= u.node->op != OpId::Copy && ir::op_info(u.node->op).category == ir::Category::Elementwise;
  if (!elementwise_reader) return {};
  std::vector<ir::Attr> attrs = n.attrs;
  if (!n.attr("keepdim"))  // (left to its default: spelled out, in name order as the tracer records)
    attrs.insert(std::find_if(attrs.begin(), attrs.end(), [](const ir::Attr& a) { return a.name > "keepdim"; }),
                 ir::Attr{"keepdim", true});
  for (ir::Attr& a : attrs)
    if (a.name == "keepdim") a.value = true;
  auto kept = canon::try_infer(n.op, canon::types_of(w.rb.operands(n)), attrs);
  if (!kept) return {};
  ir::Value* r = w.rb.emit(n.op, w.rb.operands(n), attrs)->outputs[0];
  const std::vector<int64_t>& sizes = n.outputs[0]->type.sizes;
  return {.built = w.build(OpId::View, {r}, {{"sizes", IntList(sizes.begin(), sizes.end())}}, n.outputs[0]->type)};
}

// For a view v of u that only removes size-1 dims: per dim of v, the dim of u it is (matched
// from the right); empty when v is not such a view of u.
std::vector<int> squeezed_dims(const std::vector<int64_t>& u, const std::vector<int64_t>& v) {
  if (v.size() >= u.size()) return {};
  std::vector<int> at(v.size());
  int j = int(v.size()) - 1;
  for (int i = int(u.size()) - 1; i >= 0; --i) {
    if (j >= 0 && u[size_t(i)] == v[size_t(j)]) at[size_t(j--)] = i;
    else if (u[size_t(i)] != 1) return {};
  }
  if (j >= 0) return {};
  return at;
}

// op(view(u), t, ...) -> view(op(u, t', ...)) for an elementwise op whose result has the view's
// sizes, where the view (view or squeeze) only removes size-1 dims of u, a fresh value of a
// reduction or of elementwise work (so the result moves on to the next elementwise op). The
// operand is looked at as rewritten so far in this walk, so that a whole chain of elementwise
// ops after a reduction moves in one walk.
// Every other dimensioned operand t gets the removed 1s back (unsqueeze) where it lines up with
// u; 0-d operands and host numbers stay as they are (their type promotion differs).
Replacement squeeze_past_elementwise(Walk& w, const ir::Node& n) {
  if (ir::op_info(n.op).category != ir::Category::Elementwise || w.mem.written(w.mem.cls(n.outputs[0]))) return {};
  const std::vector<int64_t>& out = n.outputs[0]->type.sizes;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const ir::Node* p = w.rb(n.inputs[k])->producer;  // (a node of the new graph)
    if (!p || (p->op != OpId::View && p->op != OpId::Squeeze) || p->outputs[0]->type.sizes != out) continue;
    ir::Value* u = p->inputs[0];
    const ir::Node* q = u->producer;
    if (!q || q->op == OpId::Copy || q->op == OpId::Constant || !canon::is_fresh(u)) continue;
    ir::Category c = ir::op_info(q->op).category;
    if (c != ir::Category::Reduction && c != ir::Category::Elementwise) continue;
    std::vector<int> at = squeezed_dims(u->type.sizes, out);
    if (at.empty()) continue;
    const int U = int(u->type.sizes.size());
    std::vector<ir::Value*> ins = w.rb.operands(n);
    std::vector<ir::Type> types = canon::types_of(ins);
    std::vector<std::vector<int>> unsqueeze(ins.size());  // per operand: where its 1s go back
    bool ok = true;
    for (size_t i = 0; i < ins.size(); ++i) {
      const ir::Type& t = n.inputs[i]->type;
      if (i == k) {
        types[i] = u->type;
        continue;
      }
      const size_t r = t.sizes.size();
      if (t.is_scalar() || r == 0) continue;
      if (r > out.size()) {
        ok = false;
        break;
      }
      // t lines up with the view's last r dims: u's dims from at[m - r] on
      const int from = at[out.size() - r];
      for (int d = from; d < U; ++d)
        if (std::find(at.begin(), at.end(), d) == at.end()) unsqueeze[i].push_back(d - from);
      for (int d : unsqueeze[i]) {
        types[i].sizes.insert(types[i].sizes.begin() + d, 1);
        types[i].strides.insert(types[i].strides.begin() + d, 1);
      }
    }
    if (!ok) continue;
    // (the unsqueezed operands' strides do not matter to the op's type: a fresh result)
    auto t = canon::try_infer(n.op, types, n.attrs);
    if (!t || t->size() != 1 || (*t)[0].sizes != u->type.sizes || (*t)[0].dtype != n.outputs[0]->type.dtype) continue;
    for (size_t i = 0; i < ins.size(); ++i) {
      if (i == k) ins[i] = u;
      for (int d : unsqueeze[i]) ins[i] = w.rb.emit(OpId::Unsqueeze, {ins[i]}, {{"dim", int64_t(d)}})->outputs[0];
    }
    ir::Value* e = w.rb.emit(n.op, ins, n.attrs)->outputs[0];
    return {.built = w.build(OpId::View, {e}, {{"sizes", IntList(out.begin(), out.end())}}, n.outputs[0]->type)};
  }
  return {};
}

// ---- reductions over a few elements, as elementwise work ----
//
// n-body's distances, diff.norm(dim=0) of a [2, N, N] difference, reduce two elements per
// output. As a reduction over dim 0 the norm is a kernel of its own, and the difference it
// reads is materialized for it (a [2, N, N] buffer) because the sum over j that follows
// reduces another dim. As the elementwise sum of its two slices, select(diff, 0, 0) and
// select(diff, 0, 1), it fuses into that sum's kernel with everything before it: the selects
// move past the elementwise ops that make diff (select_past_elementwise), down to views of the
// inputs, and no [2, N, N] buffer is left.

// At most this many elements per output are unrolled.
constexpr int64_t kUnrollMax = 4;

// sum(x, dim) and norm(x, dim, p=2) of a fresh elementwise value x over one dim of at most
// kUnrollMax elements (and any size-1 dims) -> ((0 + f(x_0)) + f(x_1)) + ... over the selects
// x_k, projected (norm's sqrt) and cast to the result's dtype. Exact: the same steps as eager's
// kernel (runtime reduce.cpp) for so few elements: from the identity, in index order, in its
// accumulation dtype (float64 for float32 and float64, float32 for 16-bit floats), after sum's
// dtype= cast. A float64 norm is left alone: eager's `a + x * x` may be contracted into a fused
// multiply-add there.
Replacement unroll_small_reduction(Walk& w, const ir::Node& n) {
  if (n.op != OpId::Sum && n.op != OpId::Norm) return {};
  const ir::Type& xt = n.inputs[0]->type;
  const ir::Type& out = n.outputs[0]->type;
  const int64_t nd = int64_t(xt.sizes.size());
  if (xt.is_scalar() || nd == 0 || w.mem.written(w.mem.cls(n.outputs[0]))) return {};
  const DType d = out.dtype;  // (sum: its dtype= or its input's; norm: its input's)
  if (!is_floating(d) || (n.op == OpId::Norm && (d == kFloat64 || canon::attr_number(n, "p", 2.0) != 2.0))) return {};
  const DType acc = d == kFloat32 || d == kFloat64 ? kFloat64 : kFloat32;
  std::vector<bool> reduced(size_t(nd), true);
  if (const ir::Attr* a = n.attr("dims"); a && !std::get<IntList>(a->value).empty()) {
    reduced.assign(size_t(nd), false);
    for (int64_t e : std::get<IntList>(a->value)) reduced[size_t((e % nd + nd) % nd)] = true;
  }
  int64_t along = -1;
  for (int64_t k = 0; k < nd; ++k)
    if (reduced[size_t(k)] && xt.sizes[size_t(k)] != 1) {
      if (along >= 0) return {};  // (several dims: eager's order over them is its plan's)
      along = k;
    }
  if (along < 0 || xt.sizes[size_t(along)] > kUnrollMax) return {};
  // (only over elementwise work, which the slices then fuse with: a tensor in memory already,
  // an input or a view of one, is read as well by the reduction's own kernel)
  const ir::Node* p = n.inputs[0]->producer;
  if (!p || !canon::is_fresh(n.inputs[0]) || p->op == OpId::Constant || ir::op_info(p->op).category != ir::Category::Elementwise)
    return {};
  ir::Value* x = w.rb(n.inputs[0]);
  auto cast = [&](ir::Value* v, DType to) {
    return v->type.dtype == to ? v : w.rb.emit(OpId::Cast, {v}, {{"dtype", to}})->outputs[0];
  };
  ir::Type zero_type = out;
  zero_type.dtype = acc, zero_type.sizes.clear(), zero_type.strides.clear();
  ir::Value* sum = w.rb.number(0.0, zero_type);
  for (int64_t k = 0; k < xt.sizes[size_t(along)]; ++k) {
    ir::Value* t = cast(cast(w.select(x, along, k), d), acc);
    if (n.op == OpId::Norm) t = w.rb.emit(OpId::Mul, {t, t}, {})->outputs[0];
    sum = w.rb.emit(OpId::Add, {sum, t}, {{"alpha", int64_t(1)}})->outputs[0];
  }
  if (n.op == OpId::Norm) sum = w.rb.emit(OpId::Sqrt, {sum}, {})->outputs[0];
  ir::Value* r = cast(sum, d);
  // (the size-1 reduced dims dropped, or kept with keepdim, by a view of the fresh result)
  if (r->type.sizes == out.sizes) return {.built = r->type == out ? r : nullptr};
  return {.built = w.build(OpId::View, {r}, {{"sizes", IntList(out.sizes.begin(), out.sizes.end())}}, out)};
}

// select(op(a, b, ...), dim, i) -> op(a', b', ...) for a fresh elementwise value: an operand
// that varies along the dim is selected there, one of size 1 there has the dim dropped
// (select 0), one without it is read as it is. Fusion then computes the slice from the
// operands at its own coordinates instead of materializing the whole value for the view.
// Exact: the same arithmetic on the same elements. It fires only where the slice's type is
// the fresh result's (e.g. a leading dim of a contiguous value) and where no operand would
// become 0-d (a 0-d tensor promotes differently from a dimensioned one).
Replacement select_past_elementwise(Walk& w, const ir::Node& n) {
  if (n.op != OpId::Select || w.mem.written(w.mem.cls(n.outputs[0]))) return {};
  // (the op as the graph before this walk has it: its operands are then read at the select,
  // so nothing may write them in between, `x.mul_(0.5)` after `y = x * 2`)
  const ir::Value* u = n.inputs[0];
  const ir::Node* p = u->producer;
  if (!p || p->op == OpId::Copy || p->op == OpId::Constant || !p->regions.empty() || p->outputs.size() != 1 ||
      ir::op_info(p->op).category != ir::Category::Elementwise || !canon::is_fresh(u) || !unwritten_between(w, *p, n))
    return {};
  const int64_t U = int64_t(u->type.sizes.size());
  const auto dim_attr = canon::attr_number(n, "dim", 0), index_attr = canon::attr_number(n, "index", 0);
  if (U == 0 || !dim_attr || !index_attr) return {};
  const int64_t dim = (int64_t(*dim_attr) % U + U) % U, index = int64_t(*index_attr);
  std::vector<ir::Value*> ins = w.rb.operands(*p);
  for (ir::Value*& t : ins) {
    const int64_t r = int64_t(t->type.sizes.size()), at = dim - (U - r);
    if (t->type.is_scalar() || r == 0 || at < 0) continue;
    if (r == 1) return {};
    t = w.select(t, at, t->type.sizes[size_t(at)] == 1 ? 0 : index);
  }
  return {.built = w.build(p->op, ins, p->attrs, n.outputs[0]->type)};
}

struct Rule {
  const char* name;
  Replacement (*apply)(Walk&, const ir::Node&);
};
const Rule kRules[] = {
    {"mul-one", mul_one},
    {"add-zero", add_zero},
    {"neg-neg", neg_neg},
    {"not-not", not_not},
    {"pow-one", pow_one},
    {"pow-two", pow_two},
    {"div-pow2", div_pow2},
    {"cast-same", cast_same},
    {"cast-roundtrip", cast_roundtrip},
    {"noop-view", noop_view},
    {"broadcast-view", broadcast_view},
    {"unroll-small-reduction", unroll_small_reduction},
    {"select-past-elementwise", select_past_elementwise},
    {"keep-reduced-dims", keep_reduced_dims},
    {"squeeze-past-elementwise", squeeze_past_elementwise},
};

int Walk::run(const ir::Graph& g) {
  int fired = 0;
  // Rules rewrite only what is used: a dead node (one a rule replaced earlier, which dce drops
  // later) is kept as it is, so that no walk keeps rewriting the leftovers of the last.
  const std::vector<bool> live = canon::live_nodes(g, mem);
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const ir::Node& n = *g.nodes()[i];
    Replacement r;
    if (live[i] && n.outputs.size() == 1 && n.regions.empty() && n.op != OpId::Copy && n.op != OpId::Constant &&
        n.op != OpId::Cond) {
      for (const Rule& rule : kRules) {
        r = rule.apply(*this, n);
        if (r.built || (r.value && can_forward(n, r))) break;
        r = {};
      }
    }
    if (r.built) {
      rb.replace(n.outputs[0], r.built);
    } else if (r.value) {
      rb.replace(n.outputs[0], rb(r.value));
      forwarded_.insert(n.outputs[0]);
    } else {
      rb.keep(n);
      continue;
    }
    ++fired;
  }
  return fired;
}

}  // namespace

int simplify(ir::Graph& g) {
  int rewrites = 0;
  // Each walk fires at least one rule and no rule undoes another; the bound is a safety net.
  // Between walks, equal nodes are merged (cse): a select pushed past a value that several
  // others read reaches it once per reader, one walk each, and the copies it makes there would
  // otherwise each be pushed on in the next walk, doubling at every shared level (a 15-node
  // graph grew to 6800 nodes, tests/passes/golden/simplify_shared_selects.ir).
  for (int i = 0; i < 64; ++i) {
    Walk w(g);
    const int fired = w.run(g);
    if (!fired) break;
    g = w.rb.finish();
    rewrites += fired + common_subexpr(g);
  }
  return rewrites;
}

}  // namespace kiln::passes
