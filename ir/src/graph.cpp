// The op table, types, graph construction, the verifier and the stable hash.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "kiln/ir/exec.h"
#include "kiln/ir/graph.h"
#include "kiln/ir/infer.h"
#include "kiln/runtime/tensor.h"

namespace kiln::ir {

namespace {
constexpr OpInfo kOps[] = {
#define KILN_OP(id, name, category, operands, traits, attributes, ...) \
  {name, Category::category, operands, 0u | (traits), attributes},
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

std::string size_problem(const Type& t) {
  if (t.is_scalar() || t.sizes.size() != t.strides.size()) return "";
  for (int64_t s : t.sizes)
    if (s <= 0) return "";  // (no element: nothing to count; a negative size is another problem)
  // In 128 bits, checked against int64 after each dim: a size is below 2^63, so neither the
  // count nor the reach can pass 2^127 before the check stops it.
  constexpr __int128 kMax = std::numeric_limits<int64_t>::max();
  __int128 count = 1, reach = 0;
  bool too_far = false;
  for (size_t i = 0; i < t.sizes.size(); ++i) {
    count *= t.sizes[i];
    if (count > kMax)
      return "sizes [" + join_ints(t.sizes) + "] have more elements than int64 can count";
    const __int128 r = __int128(t.sizes[i] - 1) * t.strides[i];
    if (!too_far) reach += r < 0 ? -r : r;
    too_far |= reach > kMax;
  }
  if (too_far || (reach + 1) * int64_t(itemsize(t.dtype)) > kMax)
    return "sizes [" + join_ints(t.sizes) + "] and strides {" + join_ints(t.strides) + "} of " +
           std::string(short_name(t.dtype)) + " reach more bytes than int64 can count";
  return "";
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

Node::~Node() = default;

Node* Graph::add_node(OpId op, std::vector<Value*> inputs, std::vector<Attr> attrs, std::vector<Type> types,
                      SourceLoc loc) {
  auto n = std::make_unique<Node>();
  n->op = op;
  n->index = int(nodes_.size());
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

// ---- names ----

bool is_valid_name(NameKind kind, std::string_view name) {
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (name.empty()) return false;
  if (kind != NameKind::Graph && !letter(name[0])) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return letter(c) || digit(c); });
}

// ---- verifier ----

int num_regions(OpId op) { return op == OpId::Cond ? 2 : 0; }

std::string VerifyError::str() const {
  if (loc.line <= 0) return message;
  return std::to_string(loc.line) + ":" + std::to_string(loc.col) + ": " + message;
}

namespace {

// What is wrong with a type on its own, or "".
std::string type_problem(const Type& t) {
  if (t.is_scalar()) return t.sizes.empty() && t.strides.empty() && !t.wrapped ? "" : "a scalar type with sizes or wrapped";
  if (t.sizes.size() != t.strides.size()) return "mismatched sizes and strides";
  for (int64_t s : t.sizes)
    if (s < 0) return "a negative size";
  if (t.wrapped && !t.sizes.empty()) return "wrapped on a tensor that is not 0-d";
  return size_problem(t);
}

// A name as an error message can show it: quoted, bytes outside printable ASCII escaped, and
// cut short when long (a JSON file may hold anything there).
std::string shown(std::string_view name) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s = "'";
  for (size_t i = 0; i < name.size() && i < 40; ++i) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      s += char(c);
    } else {
      s += "\\x";
      s += kHex[c >> 4];
      s += kHex[c & 15];
    }
  }
  if (name.size() > 40) s += "...";
  return s + "'";
}

// "node 3 (%3, %4 = max)": the node's index in its graph and its results as print() names them.
std::string node_label(const Node& n, size_t index, int first_result) {
  std::string s = "node " + std::to_string(index) + " (";
  for (size_t i = 0; i < n.outputs.size(); ++i) s += (i ? ", %" : "%") + std::to_string(first_result + int(i));
  return s + " = " + std::string(op_info(n.op).name) + ")";
}

// "region 1 (@else)"
std::string region_name(const Node& n, size_t r) {
  return "region " + std::to_string(r) + " (@" + n.regions[r]->name() + ")";
}

// A region's error, said from its node's point of view (the location stays the inner node's).
VerifyError in_region(VerifyError e, const std::string& region) {
  e.message = "in " + region + ": " + e.message;
  return e;
}

// "[infer] add: what" -> "what": the node label already names the op.
std::string infer_message(const Error& e, const Node& n) {
  std::string m = e.what(), prefix = "[infer] " + std::string(op_info(n.op).name) + ": ";
  return m.rfind(prefix, 0) == 0 ? m.substr(prefix.size()) : m;
}

// The types half of verify(); the graph is structurally sound.
std::optional<VerifyError> verify_types(const Graph& g) {
  int next = 0;  // print()'s number of the node's first result
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = *g.nodes()[i];
    std::string label = node_label(n, i, next);
    next += int(n.outputs.size());
    // A region's inputs are bound to the branch operands and its outputs are the node's
    // results, so both must agree in type exactly, strides included.
    for (size_t r = 0; r < n.regions.size(); ++r) {
      const Graph& region = *n.regions[r];
      std::string rn = region_name(n, r);
      for (size_t j = 0; j < region.inputs().size(); ++j) {
        const Type &want = n.inputs[j + 1]->type, &got = region.inputs()[j]->type;
        if (got != want)
          return VerifyError{label + ": input %" + region.inputs()[j]->name + " of " + rn + " has type " + got.str() + " but operand " + std::to_string(j + 1) + " has type " + want.str(),
                             n.loc};
      }
      if (auto e = verify_types(region)) return in_region(*e, rn + " of " + label);
      for (size_t j = 0; j < region.outputs().size(); ++j) {
        const Type &want = n.outputs[j]->type, &got = region.outputs()[j]->type;
        if (got != want)
          return VerifyError{label + ": " + rn + " returns " + got.str() + " for result " +
                                 std::to_string(j) + " but the node declares " + want.str(),
                             n.loc};
      }
    }
    std::vector<Type> inferred;
    try {
      inferred = infer_types(n);
    } catch (const Error& e) {
      return VerifyError{label + ": " + infer_message(e, n), n.loc};
    }
    if (inferred.size() != n.outputs.size())
      return VerifyError{label + ": declares " + std::to_string(n.outputs.size()) + " results but " +
                             std::string(op_info(n.op).name) + " has " + std::to_string(inferred.size()),
                         n.loc};
    for (size_t j = 0; j < inferred.size(); ++j)
      if (n.outputs[j]->type != inferred[j])
        return VerifyError{label + ": " + (inferred.size() > 1 ? "result " + std::to_string(j) + " " : std::string()) +
                               "declared " + n.outputs[j]->type.str() + " but inferred " + inferred[j].str(),
                           n.loc};
  }
  return std::nullopt;
}

}  // namespace

namespace {

// verify_structure of `g`, a region of a cond when `is_region` is set.
std::optional<VerifyError> structure(const Graph& g, bool is_region) {
  if (!is_valid_name(NameKind::Graph, g.name()))
    return VerifyError{"graph name " + shown(g.name()) + " cannot be written in the text form (a graph's name is "
                       "letters, digits and '_')",
                       {}};
  std::unordered_set<const Value*> defined;
  std::unordered_set<std::string> names;
  for (const Value* v : g.inputs()) {
    if (v->name.empty()) return VerifyError{"graph input without a name", {}};
    if (!is_valid_name(NameKind::Input, v->name))
      return VerifyError{"graph input name " + shown(v->name) + " cannot be written in the text form (an input's "
                         "name is letters, digits and '_', not starting with a digit: numbers name node results)",
                         {}};
    if (!names.insert(v->name).second) return VerifyError{"duplicate graph input name %" + v->name, {}};
    if (std::string p = type_problem(v->type); !p.empty())
      return VerifyError{"graph input %" + v->name + " has a malformed type: " + p, {}};
    defined.insert(v);
  }
  int next = 0;
  for (size_t index = 0; index < g.nodes().size(); ++index) {
    const Node* n = g.nodes()[index].get();
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
    for (const Attr& a : n->attrs)
      if (!is_valid_name(NameKind::Attribute, a.name))
        return VerifyError{where + ": attribute name " + shown(a.name) + " cannot be written in the text form (a "
                           "letter or '_', then letters, digits and '_')",
                           n->loc};
    for (const Value* o : n->outputs) {
      if (o->producer != n) return VerifyError{where + ": output value does not belong to it", n->loc};
      if (std::string p = type_problem(o->type); !p.empty())
        return VerifyError{where + ": output type " + o->type.str() + " is malformed: " + p, n->loc};
    }
    // Regions: as many as the op takes, each a closed graph whose inputs are the operands after
    // the predicate and whose outputs are the node's results.
    std::string label = node_label(*n, index, next);
    next += int(n->outputs.size());
    // A region's inputs are its cond's operands: memory of the enclosing graph, where the passes
    // see the cond as a node that reads them and makes new values. A write into one would be
    // seen by the reference executor's later reads and by no pass, so branches are functional
    // (the tracer refuses a branch that writes its operands for the same reason).
    if (is_region && n->op == OpId::Copy) {
      const Value* root = alias_root(n->inputs[0]);
      if (!root->producer)
        return VerifyError{label + ": writes into %" + root->name + ", an input of the region: a cond's branches "
                                   "must not write their operands (return the new value instead)",
                           n->loc};
    }
    int want = num_regions(n->op);
    if (int(n->regions.size()) != want)
      return VerifyError{want == 0 ? where + " takes no regions, got " + std::to_string(n->regions.size())
                                   : where + " takes " + std::to_string(want) + " regions (then, else), got " +
                                         std::to_string(n->regions.size()),
                         n->loc};
    if (want > 0 && n->inputs.empty()) return VerifyError{where + " needs a predicate operand", n->loc};
    for (size_t r = 0; r < n->regions.size(); ++r) {
      const Graph* region = n->regions[r].get();
      if (!region) return VerifyError{where + ": region " + std::to_string(r) + " is missing", n->loc};
      std::string rn = region_name(*n, r);
      if (region->inputs().size() != n->inputs.size() - 1)
        return VerifyError{label + ": " + rn + " takes " + std::to_string(region->inputs().size()) +
                               " inputs but the node passes " + std::to_string(n->inputs.size() - 1) +
                               " branch operands",
                           n->loc};
      if (auto e = structure(*region, true)) return in_region(*e, rn + " of " + label);
      if (region->outputs().size() != n->outputs.size())
        return VerifyError{label + ": " + rn + " returns " + std::to_string(region->outputs().size()) +
                               " values but the node has " + std::to_string(n->outputs.size()) + " results",
                           n->loc};
    }
    for (const Value* o : n->outputs) defined.insert(o);
  }
  if (g.outputs().empty()) return VerifyError{"graph returns nothing", {}};
  for (const Value* v : g.outputs())
    if (!defined.count(v)) return VerifyError{"graph output is not defined in the graph", {}};
  return std::nullopt;
}

}  // namespace

std::optional<VerifyError> verify_structure(const Graph& g) { return structure(g, false); }

std::optional<VerifyError> verify(const Graph& g) {
  if (auto e = verify_structure(g)) return e;
  if (auto e = verify_types(g)) return e;
  // A caller passes a tensor for a tensor input, and a 0-d tensor promotes as a tensor: an input
  // typed as a wrapped number would promote one way in the graph's types and another when run.
  for (const Value* v : g.inputs())
    if (v->type.wrapped)
      return VerifyError{"graph input %" + v->name + " has type " + v->type.str() +
                             ": a number enters a graph as scalar<" + std::string(short_name(v->type.dtype)) +
                             ">, passed at each call; `wrapped` is the type of a number constant",
                         {}};
  return std::nullopt;
}

// ---- hash: FNV-1a 64 over the canonical text ----

std::string bytes_to_hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s(bytes.size() * 2, '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    s[2 * i] = digits[b >> 4];
    s[2 * i + 1] = digits[b & 15];
  }
  return s;
}

std::optional<std::string> hex_to_bytes(std::string_view hex) {
  if (hex.size() % 2) return std::nullopt;
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out(hex.size() / 2, '\0');
  for (size_t k = 0; k < out.size(); ++k) {
    const int hi = nib(hex[2 * k]), lo = nib(hex[2 * k + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[k] = char(hi * 16 + lo);
  }
  return out;
}


Graph copy(const Graph& g) {
  Graph out(g.name());
  // Values in id order, so the copy's ids are the original's (inputs may come after nodes).
  std::vector<Value*> map(g.num_values(), nullptr);
  size_t next_input = 0;
  auto add_inputs_up_to = [&](int id) {
    while (next_input < g.inputs().size() && g.inputs()[next_input]->id <= id) {
      const Value* v = g.inputs()[next_input++];
      map[size_t(v->id)] = out.add_input(v->name, v->type);
    }
  };
  for (const auto& n : g.nodes()) {
    if (!n->outputs.empty()) add_inputs_up_to(n->outputs[0]->id);
    std::vector<Value*> ins;
    ins.reserve(n->inputs.size());
    for (const Value* v : n->inputs) ins.push_back(map[size_t(v->id)]);
    std::vector<Type> types;
    types.reserve(n->outputs.size());
    for (const Value* v : n->outputs) types.push_back(v->type);
    Node* m = out.add_node(n->op, std::move(ins), n->attrs, std::move(types), n->loc);
    for (const auto& r : n->regions) m->regions.push_back(std::make_unique<Graph>(copy(*r)));
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      map[size_t(n->outputs[k]->id)] = m->outputs[k];
      m->outputs[k]->name = n->outputs[k]->name;
    }
  }
  add_inputs_up_to(std::numeric_limits<int>::max());
  std::vector<Value*> outs;
  for (const Value* v : g.outputs()) outs.push_back(map[size_t(v->id)]);
  out.set_outputs(std::move(outs));
  return out;
}

ParseError::ParseError(int l, int c, const std::string& what)
    : Error("[parse] " + std::to_string(l) + ":" + std::to_string(c) + ": " + what), line(l), col(c) {}

}  // namespace kiln::ir
