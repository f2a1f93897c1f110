// Type inference for the op table (see kiln/ir/infer.h for the rules).
//
// Each case mirrors an eager function of runtime/src, named in its comment, including the
// errors that function raises from shapes and dtypes alone (errors that depend on the data,
// such as an index out of range, cannot be seen here). PyTorch's rules that both sides apply
// (type promotion, broadcasting, dims, view strides, sizes: kiln/runtime/rules.h) are called,
// not restated, with inference's errors; each is overflow-checked: a type from text can claim
// any sizes, and inference must reject them, never wrap around.
#include "infer_context.h"
#include "schema.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <span>
#include <stdexcept>
#include <vector>

namespace kiln::ir {

namespace infer_detail {

namespace {

[[noreturn]] void bad_schema(OpId op, std::string_view why) {
  throw std::logic_error(detail::cat("ops.def: the attribute schema of ", op_info(op).name, " ", why));
}

// One op's schema text ("dims: ints = [], keepdim: bool = false") as its specs. The text is the
// op table's, so a mistake in it is kiln's: it fails every use of the op, loudly.
std::vector<AttrSpec> parse_schema(OpId op) {
  std::string why;
  std::vector<schema::Item> items = schema::parse(op_info(op).attributes, why);
  if (!why.empty()) bad_schema(op, why);
  std::vector<AttrSpec> specs;
  for (const schema::Item& item : items) {
    AttrSpec spec{item.name, 0, item.dflt};
    for (std::string_view one : item.kinds) {
      auto it = std::find(std::begin(kKindNames), std::end(kKindNames), one);
      if (it == std::end(kKindNames)) bad_schema(op, "names an unknown kind");
      spec.kinds |= 1u << size_t(it - std::begin(kKindNames));
    }
    specs.push_back(spec);
  }
  return specs;
}

}  // namespace

// The attributes each op takes: the op table's schemas, parsed once.
std::span<const AttrSpec> attr_specs(OpId op) {
  static const std::vector<std::vector<AttrSpec>> table = [] {
    std::vector<std::vector<AttrSpec>> t;
    for (int o = 0; o < num_ops(); ++o) t.push_back(parse_schema(OpId(o)));
    return t;
  }();
  return table.at(size_t(op));
}

}  // namespace infer_detail

using namespace infer_detail;

namespace {
// A schema default's text (AttrSpec::dflt) as its value.
AttrValue default_value(std::string_view t) {
  if (t == "none") return NoneAttr{};
  if (t == "true" || t == "false") return t == "true";
  if (t == "[]") return IntList{};
  if (t.size() >= 2 && t.front() == '"') return std::string(t.substr(1, t.size() - 2));
  if (t.find('.') != std::string_view::npos) return std::stod(std::string(t));
  return int64_t(std::stoll(std::string(t)));
}
}  // namespace

const AttrValue* attr_default(OpId op, std::string_view name) {
  // Every op's defaults, decoded once.
  static const std::vector<std::vector<std::pair<std::string_view, AttrValue>>> table = [] {
    std::vector<std::vector<std::pair<std::string_view, AttrValue>>> t(static_cast<size_t>(num_ops()));
    for (size_t o = 0; o < t.size(); ++o)
      for (const AttrSpec& s : attr_specs(OpId(o)))
        if (!s.dflt.empty()) t[o].emplace_back(s.name, default_value(s.dflt));
    return t;
  }();
  if (size_t(op) >= table.size()) return nullptr;
  for (const auto& [n, v] : table[size_t(op)])
    if (n == name) return &v;
  return nullptr;
}

namespace {

// ---------------------------------------------------------------- elementwise

std::vector<Type> numbers_or_tensors(const Ctx& c) {
  std::vector<Type> ts;
  for (size_t i = 0; i < c.in.size(); ++i) ts.push_back(c.number_or_tensor(i));
  return ts;
}

// run() (elementwise.cpp): the broadcast shape, row-major, in dtype `dt`.
Type elementwise_out(const Ctx& c, DType dt, const std::vector<Type>& ts) {
  return c.dense(dt, broadcast_all(c, ts), common_device(c, ts));
}

Type unary(const Ctx& c) {
  const Type& x = c.tensor(0);
  DType d = x.dtype;
  auto same = [&](DType dt) { return elementwise_out(c, dt, {x}); };
  auto no_bool = [&] {
    if (d == kBool) c.fail("\"", c.name, "\" not implemented for 'bool'");
  };
  if (c.op == OpId::Gelu) {
    std::string approx = c.decoded<OpId::Gelu>().approximate;
    if (approx != "none" && approx != "tanh")
      c.fail("approximate argument must be either none or tanh, got '", approx, "'");
  }
  // float_unary: integers and bool compute in the default float dtype
  if (has_trait(c.op, kFloatCompute)) return same(float_compute(d));
  if (has_trait(c.op, kFloatOnly)) {
    if (!is_floating(d)) c.fail("\"", c.name, "\" not implemented for '", name(d), "' (", x.str(), ")");
    return same(d);
  }
  switch (c.op) {
    // same_unary: the dtype is kept
    case OpId::Neg:
      if (d == kBool) c.fail("Negation, the `-` operator, on a bool tensor is not supported (use logical_not)");
      return same(d);
    case OpId::Abs: case OpId::Relu: case OpId::Floor: case OpId::Ceil: case OpId::Round: case OpId::Trunc:
      no_bool();
      return same(d);
    case OpId::Sign: case OpId::NanToNum:
      return same(d);
    case OpId::BitwiseNot:
      if (is_floating(d)) c.fail("\"bitwise_not_cpu\" not implemented for '", name(d), "'");
      return same(d);
    // pred_unary: bool results
    case OpId::IsNan: case OpId::IsInf: case OpId::IsFinite: case OpId::LogicalNot:
      return same(kBool);
    case OpId::Cast: {
      // Tensor::to returns the tensor itself when the dtype already matches: an alias
      DType to = c.decoded<OpId::Cast>().dtype;
      if (to == d) {
        Type t = x;
        t.wrapped = false;
        return t;
      }
      return same(to);
    }
    case OpId::Fill: {
      // a tensor like the operand (empty(sizes, dtype)), filled through fill_'s value check
      check_fill_value(c, c.decoded<OpId::Fill>().value, d);
      return same(d);
    }
    default: break;
  }
  c.fail("internal: not a unary op");
}

Type binary(const Ctx& c) {
  std::vector<Type> ts = numbers_or_tensors(c);
  const Type &a = ts[0], &b = ts[1];
  DType ct = result_type(ts);
  if (has_trait(c.op, kFloatCompute)) return elementwise_out(c, float_compute(ct), ts);
  if (has_trait(c.op, kFloatOnly)) {
    if (!is_floating(ct))
      c.fail("\"", c.name, "\" not implemented for '", name(ct), "' (", a.str(), ", ", b.str(), ")");
    return elementwise_out(c, ct, ts);
  }
  switch (c.op) {
    case OpId::Add: case OpId::Sub: {
      if (c.op == OpId::Sub && (a.dtype == kBool || b.dtype == kBool))
        c.fail("Subtraction, the `-` operator, with a bool tensor is not supported (", a.str(), ", ", b.str(), ")");
      // check_alpha
      Scalar alpha = c.op == OpId::Add ? c.decoded<OpId::Add>().alpha : c.decoded<OpId::Sub>().alpha;
      if (alpha.is_bool() && ct != kBool) c.fail("Boolean alpha only supported for Boolean results (result type ", name(ct), ")");
      if (!is_floating(ct) && alpha.is_floating())
        c.fail("For integral input tensors, argument alpha must not be a floating point number (result type ", name(ct), ")");
      return elementwise_out(c, ct, ts);
    }
    case OpId::Mul: case OpId::Maximum: case OpId::Minimum:
      return elementwise_out(c, ct, ts);
    case OpId::Div: {
      std::optional<std::string> mode = c.decoded<OpId::Div>().rounding_mode;
      if (!mode) return elementwise_out(c, float_compute(ct), ts);  // true division
      if (*mode != "trunc" && *mode != "floor")
        c.fail("div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", *mode, "'");
      if (ct == kBool) c.fail("\"div_floor/trunc\" not implemented for 'bool'");
      return elementwise_out(c, ct, ts);
    }
    case OpId::Remainder: case OpId::Fmod: case OpId::Pow:
      if (ct == kBool) c.fail("\"", c.name, "\" not implemented for 'bool'");
      return elementwise_out(c, ct, ts);
    case OpId::Eq: case OpId::Ne: case OpId::Lt: case OpId::Le: case OpId::Gt: case OpId::Ge:
    case OpId::LogicalAnd: case OpId::LogicalOr: case OpId::LogicalXor:
      return elementwise_out(c, kBool, ts);
    case OpId::BitwiseAnd: case OpId::BitwiseOr: case OpId::BitwiseXor:
      if (is_floating(ct)) c.fail("\"", c.name, "_cpu\" not implemented for '", name(ct), "'");
      return elementwise_out(c, ct, ts);
    default: break;
  }
  c.fail("internal: not a binary op");
}

// where_impl, clamp_impl, lerp_impl, addcmul, masked_fill_impl (elementwise.cpp).
Type ternary(const Ctx& c) {
  switch (c.op) {
    case OpId::Where: {
      const Type& cond = c.tensor(0);
      if (cond.dtype != kBool)
        c.fail("where expected condition to be a boolean tensor, but got a tensor with dtype ", name(cond.dtype));
      Type a = c.number_or_tensor(1), b = c.number_or_tensor(2);
      return elementwise_out(c, result_type({a, b}), {cond, a, b});
    }
    case OpId::Clamp: {
      attrs::Clamp at = c.decoded<OpId::Clamp>();
      bool has_min = at.has_min, has_max = at.has_max;
      if (!has_min && !has_max) c.fail("At least one of 'min' or 'max' must not be None (has_min and has_max are false)");
      c.arity(1 + size_t(has_min) + size_t(has_max));
      // clamp(Tensor, Scalar?, Scalar?) and clamp(Tensor, Tensor?, Tensor?): no overload mixes them
      auto number = [&](size_t i) { return c.in[i].is_scalar() || c.in[i].wrapped; };
      if (c.in.size() == 3 && number(1) != number(2))
        c.fail("min and max must both be numbers or both be tensors, got ", c.in[1].str(), " and ", c.in[2].str());
      std::vector<Type> ts = {c.tensor(0)};
      for (size_t i = 1; i < c.in.size(); ++i) ts.push_back(c.number_or_tensor(i));
      DType ct = result_type(ts);
      if (ct == kBool) c.fail("\"clamp\" not implemented for 'bool'");
      return elementwise_out(c, ct, ts);
    }
    case OpId::Lerp: {
      const Type &s = c.tensor(0), &e = c.tensor(1);
      Type w = c.number_or_tensor(2);
      if (s.dtype != e.dtype) c.fail("expected dtype ", name(s.dtype), " for `end` but got dtype ", name(e.dtype));
      if (!w.wrapped && w.dtype != s.dtype) c.fail("expected dtype ", name(s.dtype), " for `weight` but got dtype ", name(w.dtype));
      if (!is_floating(s.dtype)) c.fail("\"lerp_kernel_scalar\" not implemented for '", name(s.dtype), "'");
      return elementwise_out(c, s.dtype, {s, e, w});
    }
    case OpId::Addcmul: {
      std::vector<Type> ts = {c.tensor(0), c.tensor(1), c.tensor(2)};
      DType ct = result_type(ts);
      if (ct == kBool) c.fail("\"addcmul_cpu_out\" not implemented for 'bool'");
      return elementwise_out(c, ct, ts);
    }
    case OpId::MaskedFill: {
      const Type &x = c.tensor(0), &mask = c.tensor(1);
      if (mask.dtype != kBool) c.fail("masked_fill only supports boolean masks, but got mask with dtype ", name(mask.dtype));
      check_fill_value(c, c.decoded<OpId::MaskedFill>().value, x.dtype);
      // the output takes the broadcast shape of x and the mask, in x's dtype
      return elementwise_out(c, x.dtype, {x, mask});
    }
    default: break;
  }
  c.fail("internal: not a ternary op");
}

// ---------------------------------------------------------------- reductions (reduce.cpp)

std::vector<bool> reduce_mask(const Ctx& c, const IntList& dims, int64_t ndim) {
  return rules::reduce_mask(dims, ndim, c.failer());
}

Sizes reduced_shape(const Sizes& sizes, const std::vector<bool>& mask, bool keepdim) {
  Sizes out;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (!mask[d]) out.push_back(sizes[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// check_nonempty: max-like reductions have no identity, so an empty reduction is an error.
void check_nonempty(const Ctx& c, const Type& x, const IntList& dims) {
  if (std::find(x.sizes.begin(), x.sizes.end(), 0) == x.sizes.end()) return;
  if (dims.empty())
    c.fail("Expected reduction dim to be specified for input.numel() == 0 (", x.str(), "). Specify the reduction dim with the 'dim' argument.");
  auto mask = reduce_mask(c, dims, int64_t(x.sizes.size()));
  for (size_t d = 0; d < x.sizes.size(); ++d)
    if (mask[d] && x.sizes[d] == 0) c.fail("Expected reduction dim ", d, " to have non-zero size (", x.str(), ")");
}

// reduce(): the reduced shape over `dims` with `keepdim`, row-major (an empty() keepdim result,
// viewed without the reduced dims), in dtype `dt`.
Type reduced(const Ctx& c, const Type& x, DType dt) {
  IntList dims = c.req<IntList>("dims");
  auto mask = reduce_mask(c, dims, int64_t(x.sizes.size()));
  return c.dense(dt, reduced_shape(x.sizes, mask, c.req<bool>("keepdim")), x.device);
}

void check_float(const Ctx& c, const Type& x) {
  if (!is_floating(x.dtype)) c.fail("input dtype should be floating point, but got ", name(x.dtype));
}

// arg_extremum: values and int64 indices along one dim.
std::vector<Type> along_dim(const Ctx& c, const Type& x, int64_t dim, bool keepdim) {
  int64_t nd = int64_t(x.sizes.size());
  int64_t d = c.wrap(dim, nd);
  if (nd > 0 && x.sizes[size_t(d)] == 0) c.fail("Expected reduction dim ", d, " to have non-zero size (", x.str(), ")");
  std::vector<bool> mask(size_t(nd), false);
  if (nd > 0) mask[size_t(d)] = true;
  Sizes shape = reduced_shape(x.sizes, mask, keepdim);
  return {c.dense(x.dtype, shape, x.device), c.dense(kInt64, shape, x.device)};
}

std::vector<Type> reduction(const Ctx& c) {
  const Type& x = c.tensor(0);
  // Every reduction names its dims as `dims`, or one as `dim` (the row ops, max/min, argmax):
  // read here by name, as one convention of the family, rather than per op's struct.
  IntList dims = c.get<IntList>("dims", {});
  switch (c.op) {
    case OpId::Sum: {
      DType dt = c.decoded<OpId::Sum>().dtype.value_or(sum_dtype(x.dtype));
      Type out = reduced(c, x, dt);
      if (dt == kBool) c.fail("\"sum\" not implemented for 'bool'");
      return {out};
    }
    case OpId::NanSum: case OpId::Prod:
      return {reduced(c, x, sum_dtype(x.dtype))};
    case OpId::Mean:
      if (!is_floating(x.dtype))
        c.fail("mean(): could not infer output dtype. Input dtype must be either a floating point or complex dtype. Got: ", name(x.dtype));
      return {reduced(c, x, x.dtype)};
    case OpId::Amax: case OpId::Amin:
      check_nonempty(c, x, dims);
      return {reduced(c, x, x.dtype)};
    case OpId::Aminmax: {  // (the API names one dim or none; the passes may list every dim)
      check_nonempty(c, x, dims);
      Type out = reduced(c, x, x.dtype);
      return {out, out};
    }
    case OpId::Any: case OpId::All:
      return {reduced(c, x, x.dtype == kUInt8 ? kUInt8 : kBool)};  // uint8 in, uint8 out, as PyTorch
    case OpId::Norm: {
      check_float(c, x);
      if (std::isinf(c.decoded<OpId::Norm>().p)) check_nonempty(c, x, dims);
      return {reduced(c, x, x.dtype)};
    }
    case OpId::Var: case OpId::Std:
      check_float(c, x);
      return {reduced(c, x, x.dtype)};
    case OpId::LogSumExp:
      return {reduced(c, x, float_compute(x.dtype))};
    case OpId::MaxDim: case OpId::MinDim:
      return along_dim(c, x, c.req<int64_t>("dim"), c.req<bool>("keepdim"));
    case OpId::Argmax: case OpId::Argmin: {
      if (x.dtype == kBool) c.fail("\"", c.name, "_cpu\" not implemented for 'bool'");
      bool keepdim = c.req<bool>("keepdim");
      if (auto dim = c.opt<int64_t>("dim")) return {along_dim(c, x, *dim, keepdim)[1]};
      // over the flattened tensor: a 0-d index, or all-ones dims with keepdim
      if (c.numel(x.sizes) == 0) c.fail("Expected reduction dim to be specified for input.numel() == 0 (", x.str(), ")");
      return {c.dense(kInt64, keepdim ? Sizes(x.sizes.size(), 1) : Sizes{}, x.device)};
    }
    case OpId::Softmax: case OpId::LogSoftmax: {  // softmax.cpp
      if (!is_floating(x.dtype)) c.fail("\"", c.name, "\" not implemented for '", name(x.dtype), "'");
      c.wrap(c.req<int64_t>("dim"), int64_t(x.sizes.size()));
      return {c.dense(x.dtype, x.sizes, x.device)};
    }
    case OpId::Cumsum:
      c.wrap(c.decoded<OpId::Cumsum>().dim, int64_t(x.sizes.size()));
      return {c.dense(sum_dtype(x.dtype), x.sizes, x.device)};
    default: break;
  }
  c.fail("internal: not a reduction");
}

// ---------------------------------------------------------------- views (tensor.cpp)



Type view_op(const Ctx& c) {
  const Type& x = c.tensor(0);
  const rules::Strided g{x.sizes, x.strides, 0};
  // (the view's geometry is the rule the eager view applies, kiln/runtime/rules.h; a type has no
  // storage offset, so the geometry's is dropped)
  auto typed = [&](const rules::Strided& r) { return view_of(x, r.sizes, r.strides); };
  const auto fail = c.failer();
  switch (c.op) {
    case OpId::View: return typed(rules::view(g, c.decoded<OpId::View>().sizes, fail));
    case OpId::Transpose: {
      attrs::Transpose at = c.decoded<OpId::Transpose>();
      return typed(rules::transpose(g, at.dim0, at.dim1, fail));
    }
    case OpId::Permute: return typed(rules::permute(g, c.decoded<OpId::Permute>().dims, fail));
    case OpId::Slice: {
      attrs::Slice at = c.decoded<OpId::Slice>();
      return typed(rules::slice(g, at.dim, at.start, at.end, at.step, fail));
    }
    case OpId::Select: {
      attrs::Select at = c.decoded<OpId::Select>();
      return typed(rules::select(g, at.dim, at.index, fail));
    }
    case OpId::Expand: return typed(rules::expand(g, c.decoded<OpId::Expand>().sizes, fail));
    case OpId::Squeeze: return typed(rules::squeeze(g, c.decoded<OpId::Squeeze>().dims, fail));
    case OpId::Unsqueeze: return typed(rules::unsqueeze(g, c.decoded<OpId::Unsqueeze>().dim, fail));
    case OpId::Diagonal: {
      attrs::Diagonal at = c.decoded<OpId::Diagonal>();
      return typed(rules::diagonal(g, at.offset, at.dim1, at.dim2, fail));
    }
    case OpId::AsStrided: {
      // (the storage-size check needs the storage, which a type does not describe)
      attrs::AsStrided at = c.decoded<OpId::AsStrided>();
      const IntList &ns = at.sizes, &nst = at.strides;
      if (ns.size() != nst.size())
        c.fail("mismatch in length of strides (", nst.size(), ") and shape (", ns.size(), ")");
      for (size_t i = 0; i < ns.size(); ++i)
        if (ns[i] < 0 || nst[i] < 0) c.fail("negative size or stride: sizes ", ns, ", strides ", nst);
      if (at.offset && *at.offset < 0) c.fail("negative storage offset ", *at.offset);
      return view_of(x, ns, nst);
    }
    default: break;
  }
  c.fail("internal: not a view op");
}

// ---------------------------------------------------------------- joining, indexing, copies

Type cat(const Ctx& c) {  // join.cpp
  if (c.in.empty()) c.fail("torch.cat(): expected a non-empty list of Tensors");
  std::vector<Type> ts;
  for (size_t i = 0; i < c.in.size(); ++i) {
    ts.push_back(c.tensor(i));
    ts.back().wrapped = false;  // cat takes tensors: a wrapped value promotes as a 0-d tensor
  }
  // PyTorch skips legacy 1-d empty tensors ([0]) when the others have more dims.
  auto legacy_empty = [](const Type& t) { return t.sizes.size() == 1 && t.sizes[0] == 0; };
  const Type* ref = &ts[0];
  for (const Type& t : ts)
    if (!legacy_empty(t)) {
      ref = &t;
      break;
    }
  const size_t nd = ref->sizes.size();
  if (nd == 0) c.fail("zero-dimensional tensor cannot be concatenated");
  size_t d = size_t(c.wrap(c.decoded<OpId::Cat>().dim, int64_t(nd)));
  DType dt = result_type(ts);
  Sizes shape = ref->sizes;
  shape[d] = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Type& t = ts[i];
    if (legacy_empty(t) && nd != 1) continue;
    if (t.sizes.size() != nd) c.fail("Tensors must have same number of dimensions: got ", nd, " and ", t.sizes.size());
    for (size_t k = 0; k < nd; ++k)
      if (k != d && t.sizes[k] != ref->sizes[k])
        c.fail("Sizes of tensors must match except in dimension ", d, ". Expected size ", ref->sizes[k], " but got size ",
               t.sizes[k], " for tensor number ", i, " in the list.");
    if (__builtin_add_overflow(shape[d], t.sizes[d], &shape[d]))
      c.fail("the sizes along dimension ", d, " sum past int64 at tensor number ", i);
  }
  return c.dense(dt, shape, common_device(c, ts));
}

Type index_select(const Ctx& c) {  // join.cpp
  const Type &x = c.tensor(0), &index = c.tensor(1);
  if (index.dtype != kInt64 && index.dtype != kInt32)
    c.fail("index_select(): Expected dtype int32/int64 for index, got ", name(index.dtype));
  if (index.sizes.size() > 1) c.fail("index_select(): Index is supposed to be a vector, got shape ", index.sizes);
  size_t d = size_t(c.wrap(c.decoded<OpId::IndexSelect>().dim, int64_t(x.sizes.size())));
  int64_t n = index.sizes.empty() ? 1 : index.sizes[0];
  Device dev = common_device(c, {x, index});
  if (x.sizes.empty()) {
    if (n != 1) c.fail("index_select(): a 0-dim input takes exactly one index, got ", n);
    return c.dense(x.dtype, {}, dev);
  }
  Sizes shape = x.sizes;
  shape[d] = n;
  return c.dense(x.dtype, shape, dev);
}

Type gather(const Ctx& c) {  // join.cpp
  const Type &x = c.tensor(0), &index = c.tensor(1);
  if (index.dtype != kInt64) c.fail("gather(): Expected dtype int64 for index, got ", name(index.dtype));
  size_t nd = std::max<size_t>(x.sizes.size(), 1);
  size_t d = size_t(c.wrap(c.decoded<OpId::Gather>().dim, int64_t(x.sizes.size())));
  if (std::max<size_t>(index.sizes.size(), 1) != nd)
    c.fail("Index tensor must have the same number of dimensions as input tensor (input ", x.sizes, ", index ", index.sizes, ")");
  Sizes xs = x.sizes.empty() ? Sizes{1} : x.sizes, is = index.sizes.empty() ? Sizes{1} : index.sizes;
  for (size_t k = 0; k < nd; ++k)
    if (k != d && is[k] > xs[k])
      c.fail("Size does not match at dimension ", k, " expected index ", index.sizes, " to be smaller than self ", x.sizes,
             " apart from dimension ", d);
  Device dev = common_device(c, {x, index});
  if (x.sizes.empty()) {  // the [1] result is viewed back as 0-d
    if (is[0] != 1) c.fail("shape '[]' is invalid for input of size ", is[0]);
    return c.dense(x.dtype, {}, dev);
  }
  return c.dense(x.dtype, is, dev);
}

// Tensor::copy_ (copy.cpp): src broadcasts to dst's shape; dst is the result, after the write.
Type copy(const Ctx& c) {
  const Type &dst = c.tensor(0), &src = c.tensor(1);
  if (dst.wrapped) c.fail("the destination (operand 0) is a wrapped number, not a tensor");
  broadcast(c, dst.sizes, src.sizes);
  if (src.sizes.size() > dst.sizes.size())
    c.fail("source of shape ", src.sizes, " cannot be broadcast to destination of shape ", dst.sizes);
  for (size_t i = 0; i < src.sizes.size(); ++i) {
    int64_t have = src.sizes[i], want = dst.sizes[i + dst.sizes.size() - src.sizes.size()];
    if (have != want && have != 1)
      c.fail("source of shape ", src.sizes, " cannot be broadcast to destination of shape ", dst.sizes);
  }
  for (size_t d = 0; d < dst.sizes.size(); ++d)
    if (dst.strides[d] == 0 && dst.sizes[d] > 1)
      c.fail("unsupported operation: more than one element of the written-to tensor refers to a single memory "
             "location (size ", dst.sizes, ", stride ", dst.strides, "). Please clone() the tensor before performing the operation.");
  return dst;
}

// The cond predicate becomes a host bool (Tensor::operator bool): one element of any dtype.
void check_predicate(const Ctx& c) {
  c.at_least(1);
  const Type& p = c.in[0];
  if (!p.is_scalar() && c.numel(p.sizes) != 1)
    c.fail("the predicate must have one element (Boolean value of a tensor with more is ambiguous), got ", p.str());
}

}  // namespace

std::vector<Type> infer_types(OpId op, const std::vector<Type>& inputs, const std::vector<Attr>& attrs) {
  if (size_t(op) >= size_t(num_ops())) throw Error("[infer] unknown op id " + std::to_string(size_t(op)));
  Ctx c(op, inputs, attrs);
  if (op_info(op).operands >= 0) c.arity(size_t(op_info(op).operands));
  switch (op_info(op).category) {
    case Category::Control:
      if (op == OpId::Cond) check_predicate(c);
      if (op == OpId::Constant && c.find("value") && c.find("data")) c.fail("takes value= or data=, not both");
      return {};
    case Category::Elementwise:
      switch (op) {
        case OpId::Where: case OpId::Clamp: case OpId::Lerp: case OpId::Addcmul: case OpId::MaskedFill:
          return {ternary(c)};
        default:
          return {op_info(op).operands == 1 ? unary(c) : binary(c)};
      }
    case Category::Reduction: return reduction(c);
    case Category::View: return {view_op(c)};
    case Category::Opaque: break;
  }
  switch (op) {
    case OpId::Contiguous: {
      // Tensor::contiguous returns the tensor itself when it already is
      Type x = c.tensor(0);
      x.wrapped = false;
      return {is_contiguous(x.sizes, x.strides) ? x : c.dense(x.dtype, x.sizes, x.device)};
    }
    case OpId::Clone: return {c.dense(c.tensor(0).dtype, c.tensor(0).sizes, c.tensor(0).device)};
    case OpId::Iota: return {c.dense(kInt64, c.tensor(0).sizes, c.tensor(0).device)};
    case OpId::Matmul: return {matmul(c, c.tensor(0), c.tensor(1))};
    case OpId::Mm: return {mm(c, c.tensor(0), c.tensor(1))};
    case OpId::Bmm: return {bmm(c, c.tensor(0), c.tensor(1))};
    case OpId::Addmm: return {addmm(c)};
    case OpId::Einsum: return {einsum(c)};
    case OpId::Cat: return {cat(c)};
    case OpId::IndexSelect: return {index_select(c)};
    case OpId::Gather: return {gather(c)};
    case OpId::Copy: return {copy(c)};
    default: break;
  }
  c.fail("internal: no inference rule");
}

namespace {
// A constant's declared type against its value: value= is a number of a matching category in
// a 0-d tensor; data= holds exactly the bytes of a contiguous tensor of the declared type.
void check_constant(const Node& n) {
  auto fail = [](const std::string& what) { throw Error("[infer] constant: " + what); };
  if (n.outputs.size() != 1) fail("defines one value, not " + std::to_string(n.outputs.size()));
  const Type& t = n.outputs[0]->type;
  if (t.is_scalar()) fail("its type must be a tensor type, not " + t.str());
  const Attr* value = n.attr("value");
  const Attr* data = n.attr("data");
  if (!value && !data) fail("needs value= (a number) or data= (its bytes, hex in the text form)");
  if (value) {
    if (!t.sizes.empty()) fail("value= makes a 0-d tensor, but the type is " + t.str());
    const AttrValue& v = value->value;
    bool ok = std::holds_alternative<bool>(v) ? t.dtype == kBool
              : std::holds_alternative<int64_t>(v) ? is_integral(t.dtype)
                                                   : is_floating(t.dtype);
    if (!ok) fail("value=" + attr_str(v) + " does not fit its type's category (" + t.str() + ")");
    return;
  }
  const std::string& bytes_held = std::get<std::string>(data->value);
  if (!is_contiguous(t.sizes, t.strides)) fail("data= describes a contiguous tensor, but the type is " + t.str());
  __int128 bytes = itemsize(t.dtype);
  for (int64_t s : t.sizes) {
    bytes *= s;
    if (bytes > std::numeric_limits<int64_t>::max()) fail("the type " + t.str() + " is too large");
  }
  if (__int128(bytes_held.size()) != bytes)
    fail("data= has " + std::to_string(bytes_held.size()) + " bytes, but " + t.str() + " needs " +
         std::to_string(int64_t(bytes)));
}
}  // namespace

std::vector<Type> infer_types(const Node& node) {
  std::vector<Type> in;
  for (const Value* v : node.inputs) in.push_back(v->type);
  if (node.op != OpId::Constant && node.op != OpId::Cond) return infer_types(node.op, in, node.attrs);
  infer_types(node.op, in, node.attrs);  // checks the operands and attributes
  if (node.op == OpId::Constant) {
    check_constant(node);
    return {node.outputs[0]->type};
  }
  if (node.regions.empty() || !node.regions[0]) throw Error("[infer] cond: has no then-region");
  std::vector<Type> out;
  for (const Value* v : node.regions[0]->outputs()) out.push_back(v->type);
  return out;
}

}  // namespace kiln::ir
