// The op table, types, graph construction, the verifier and the stable hash.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <unordered_set>

#include "kiln/ir/graph.h"
#include "kiln/runtime/tensor.h"

namespace kiln::ir {

namespace {
constexpr OpInfo kOps[] = {
#define KILN_OP(id, name, category, operands) {name, Category::category, operands},
#include "kiln/runtime/ops.def"
#undef KILN_OP
};
constexpr std::array<std::string_view, kNumDTypes> kShort = {"b8",  "u8",   "i8",  "i16", "i32",
                                                             "i64", "f16", "bf16", "f32", "f64"};
}  // namespace

const OpInfo& op_info(OpId op) { return kOps[size_t(op)]; }
int num_ops() { return int(std::size(kOps)); }

std::optional<OpId> op_from_name(std::string_view name) {
  for (size_t i = 0; i < std::size(kOps); ++i)
    if (kOps[i].name == name) return OpId(i);
  return std::nullopt;
}

std::string_view category_name(Category c) {
  switch (c) {
    case Category::Elementwise: return "elementwise";
    case Category::Reduction: return "reduction";
    case Category::View: return "view";
    case Category::Opaque: return "opaque";
    case Category::Control: return "control";
  }
  return "?";
}

std::string_view short_name(DType dt) { return kShort[size_t(dt)]; }
std::optional<DType> dtype_from_short_name(std::string_view s) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (kShort[size_t(i)] == s) return DType(i);
  return std::nullopt;
}

// ---- types ----

Type Type::tensor(DType dt, std::vector<int64_t> sizes, std::vector<int64_t> strides, Device dev) {
  KILN_CHECK(sizes.size() == strides.size(), "ir", "type with ", sizes.size(), " sizes but ", strides.size(),
             " strides");
  Type t;
  t.dtype = dt;
  t.device = dev;
  t.sizes = std::move(sizes);
  t.strides = std::move(strides);
  return t;
}

Type Type::contiguous(DType dt, std::vector<int64_t> sizes, Device dev) {
  std::vector<int64_t> st = shape::contiguous_strides(sizes);
  return tensor(dt, std::move(sizes), std::move(st), dev);
}

Type Type::scalar(DType dt) {
  Type t;
  t.kind = Kind::Scalar;
  t.dtype = dt;
  return t;
}

namespace {
std::string join_ints(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}
}  // namespace

std::string Type::str() const {
  if (is_scalar()) return "scalar<" + std::string(short_name(dtype)) + ">";
  std::string s = std::string(short_name(dtype)) + "[" + join_ints(sizes) + "]{" + join_ints(strides) + "}";
  if (!device.is_cpu()) s += "@" + device.str();
  if (wrapped) s += " wrapped";
  return s;
}

// ---- attributes ----

namespace {
// Shortest text that reads back to the same double, always with a '.', an exponent or a name,
// so that the parser can tell it from an integer.
std::string double_str(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}
std::string quote(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\', r += c;
    else if (c == '\n') r += "\\n";
    else r += c;
  }
  return r + "\"";
}
}  // namespace

std::string attr_str(const AttrValue& v) {
  struct Visitor {
    std::string operator()(NoneAttr) const { return "none"; }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return double_str(d); }
    std::string operator()(const std::string& s) const { return quote(s); }
    std::string operator()(const IntList& l) const { return "[" + join_ints(l) + "]"; }
    std::string operator()(DType dt) const { return std::string(short_name(dt)); }
  };
  return std::visit(Visitor{}, v);
}

const Attr* Node::attr(std::string_view name) const {
  for (const Attr& a : attrs)
    if (a.name == name) return &a;
  return nullptr;
}

// ---- graph ----

Value* Graph::add_input(std::string name, Type type) {
  auto v = std::make_unique<Value>();
  v->id = int(values_.size());
  v->type = std::move(type);
  v->name = std::move(name);
  inputs_.push_back(v.get());
  values_.push_back(std::move(v));
  return inputs_.back();
}

Node* Graph::add_node(OpId op, std::vector<Value*> inputs, std::vector<Attr> attrs, std::vector<Type> types,
                      SourceLoc loc) {
  auto n = std::make_unique<Node>();
  n->op = op;
  n->inputs = std::move(inputs);
  std::stable_sort(attrs.begin(), attrs.end(), [](const Attr& a, const Attr& b) { return a.name < b.name; });
  n->attrs = std::move(attrs);
  n->loc = loc;
  for (Type& t : types) {
    auto v = std::make_unique<Value>();
    v->id = int(values_.size());
    v->type = std::move(t);
    v->producer = n.get();
    n->outputs.push_back(v.get());
    values_.push_back(std::move(v));
  }
  nodes_.push_back(std::move(n));
  return nodes_.back().get();
}

// ---- verifier ----

std::optional<VerifyError> verify(const Graph& g) {
  std::unordered_set<const Value*> defined;
  std::unordered_set<std::string> names;
  for (const Value* v : g.inputs()) {
    if (v->name.empty()) return VerifyError{"graph input without a name", {}};
    if (!names.insert(v->name).second) return VerifyError{"duplicate graph input name %" + v->name, {}};
    defined.insert(v);
  }
  for (const auto& n : g.nodes()) {
    const OpInfo& info = op_info(n->op);
    std::string where = std::string(info.name);
    if (info.operands >= 0 && int(n->inputs.size()) != info.operands)
      return VerifyError{where + " takes " + std::to_string(info.operands) + " operands, got " +
                             std::to_string(n->inputs.size()),
                         n->loc};
    for (size_t i = 0; i < n->inputs.size(); ++i)
      if (!n->inputs[i] || !defined.count(n->inputs[i]))
        return VerifyError{where + ": operand " + std::to_string(i) + " is used before it is defined", n->loc};
    if (n->outputs.empty()) return VerifyError{where + " defines no value", n->loc};
    for (size_t i = 1; i < n->attrs.size(); ++i)
      if (!(n->attrs[i - 1].name < n->attrs[i].name))
        return VerifyError{where + ": attribute '" + n->attrs[i].name + "' is repeated or out of order", n->loc};
    for (const Value* o : n->outputs) {
      if (o->producer != n.get()) return VerifyError{where + ": output value does not belong to it", n->loc};
      if (!o->type.is_scalar() && o->type.sizes.size() != o->type.strides.size())
        return VerifyError{where + ": output type has mismatched sizes and strides", n->loc};
      defined.insert(o);
    }
  }
  if (g.outputs().empty()) return VerifyError{"graph returns nothing", {}};
  for (const Value* v : g.outputs())
    if (!defined.count(v)) return VerifyError{"graph output is not defined in the graph", {}};
  return std::nullopt;
}

// ---- hash: FNV-1a 64 over the canonical text ----

uint64_t hash(const Graph& g) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : print(g)) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

ParseError::ParseError(int l, int c, const std::string& what)
    : Error("[parse] " + std::to_string(l) + ":" + std::to_string(c) + ": " + what), line(l), col(c) {}

}  // namespace kiln::ir
