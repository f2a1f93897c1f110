// Internal to ir/: the context and shared rules of type inference, used by infer.cpp (most
// ops) and infer_linalg.cpp (matmul family and einsum).
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/ir/attrs.h"
#include "kiln/ir/infer.h"
#include "kiln/runtime/rules.h"

namespace kiln::ir::infer_detail {

using Sizes = std::vector<int64_t>;

// ---------------------------------------------------------------- attribute schema

// Attribute kinds as bits, one per AttrValue alternative, in the variant's order.
namespace kind {
constexpr unsigned none = 1u << 0, boolean = 1u << 1, integer = 1u << 2, real = 1u << 3, string = 1u << 4,
                   ints = 1u << 5, dtype = 1u << 6, number = boolean | integer | real;
}  // namespace kind
static_assert(std::variant_size_v<AttrValue> == 7, "keep the kind bits in step with AttrValue");
inline constexpr std::string_view kKindNames[] = {"none", "bool", "int", "float", "str", "ints", "dtype"};

// "int|float|bool", "float|none": in the order ops.def writes them.
inline std::string kinds_str(unsigned kinds) {
  std::string s;
  for (size_t i : {2, 3, 1, 4, 5, 6, 0})
    if (kinds & (1u << i)) s += (s.empty() ? "" : "|") + std::string(kKindNames[i]);
  return s;
}

// An attribute an op takes: its name, the kinds of value it may have, and its value when a graph
// leaves it out, in the text form's spelling (PyTorch's default: "1", "false", "[]", "none",
// "\"none\"" for a string); empty where it has none (it is required, or, as slice's `end`, it
// follows from the sizes). ir::attr_default() hands these out to inference and the executor.
struct AttrSpec {
  std::string_view name;
  unsigned kinds;
  std::string_view dflt = {};
};

// The attributes each op takes: ops.def's schema column, parsed once (infer.cpp).
std::span<const AttrSpec> attr_specs(OpId op);

// ---------------------------------------------------------------- the inference context

// One op application being inferred: its operands, attributes, and the error helpers.
class Ctx {
 public:
  Ctx(OpId op_, const std::vector<Type>& in_, const std::vector<Attr>& attrs_)
      : op(op_), name(op_info(op_).name), in(in_), attrs(attrs_) {
    check_attrs();
    for (size_t i = 0; i < in.size(); ++i) check_operand(i);
  }

  OpId op;
  std::string_view name;
  const std::vector<Type>& in;
  const std::vector<Attr>& attrs;

  template <typename... A>
  [[noreturn]] void fail(const A&... parts) const {
    throw Error(detail::cat("[infer] ", name, ": ", parts...));
  }

  // ---- operands ----
  void arity(size_t n) const {
    if (in.size() != n) fail("takes ", n, " operands, got ", in.size());
  }
  void at_least(size_t n) const {
    if (in.size() < n) fail("takes at least ", n, " operand", n == 1 ? "" : "s", ", got ", in.size());
  }
  // Operand i where the eager op takes a Tensor.
  const Type& tensor(size_t i) const {
    if (in[i].is_scalar()) fail("operand ", i, " is a host scalar (", in[i].str(), "), but ", name, " takes a tensor there");
    return in[i];
  }
  // Operand i where a Python-style number may stand: a host scalar becomes a wrapped 0-d tensor.
  Type number_or_tensor(size_t i) const {
    if (!in[i].is_scalar()) return in[i];
    Type t = Type::tensor(in[i].dtype, {}, {});
    t.wrapped = true;
    return t;
  }

  // ---- attributes (kinds were checked against the schema on construction) ----
  // The attribute's value as given, else its default (attr_default), else null.
  const AttrValue* find(std::string_view n) const {
    for (const Attr& a : attrs)
      if (a.name == n) return &a.value;
    return attr_default(op, n);
  }
  // The attribute's value; nullopt when absent or `none`.
  template <typename T>
  std::optional<T> opt(std::string_view n) const {
    const AttrValue* v = find(n);
    if (const T* p = v ? std::get_if<T>(v) : nullptr) return *p;
    return std::nullopt;
  }
  template <typename T>
  T get(std::string_view n, T dflt) const {
    return opt<T>(n).value_or(std::move(dflt));
  }
  template <typename T>
  T req(std::string_view n) const {
    auto v = opt<T>(n);
    if (!v) fail("missing attribute '", n, "' (", kinds_str(spec(n).kinds), ")");
    return *v;
  }
  // The op's typed attribute struct (kiln/ir/attrs.h) for `o`, the op being inferred: a required
  // attribute the node lacks is this op's error.
  template <OpId o>
  typename AttrsOf<o>::type decoded() const {
    for (const AttrSpec& s : attr_specs(op))
      if (s.dflt.empty() && !find(s.name)) fail("missing attribute '", s.name, "' (", kinds_str(s.kinds), ")");
    return decode<o>(std::span<const Attr>(attrs));
  }
  // A bool|int|float attribute as the Scalar the eager op received.
  std::optional<Scalar> number(std::string_view n) const {
    const AttrValue* v = find(n);
    if (!v) return std::nullopt;
    if (auto* b = std::get_if<bool>(v)) return Scalar(*b);
    if (auto* i = std::get_if<int64_t>(v)) return Scalar(*i);
    if (auto* d = std::get_if<double>(v)) return Scalar(*d);
    return std::nullopt;
  }

  // The `fail` of a shared rule (kiln/runtime/rules.h): "[infer] op: message".
  auto failer() const {
    return [this](const auto&... parts) { fail(parts...); };
  }

  // ---- dims ----
  int64_t wrap(int64_t d, int64_t ndim) const { return rules::wrap_dim(d, ndim, failer()); }

  // ---- sizes: a claimed size may be anything up to INT64_MAX, so each count is checked ----
  int64_t numel(const Sizes& sizes) const { return rules::numel(sizes, failer()); }
  Sizes dense_strides(const Sizes& sizes) const { return rules::contiguous_strides(sizes, failer()); }
  // A fresh row-major tensor, as every eager kernel allocates its output with empty(), which
  // refuses an element or byte count past int64.
  Type dense(DType dt, const Sizes& sizes, Device dev) const {
    rules::dense_bytes(sizes, int64_t(itemsize(dt)), failer());
    return Type::tensor(dt, sizes, dense_strides(sizes), dev);
  }

 private:
  const AttrSpec& spec(std::string_view n) const {
    for (const AttrSpec& s : attr_specs(op))
      if (s.name == n) return s;
    throw Error("[infer] internal: no attribute spec for '" + std::string(n) + "'");
  }
  void check_attrs() const {
    auto specs = attr_specs(op);
    for (size_t i = 0; i < attrs.size(); ++i) {
      const Attr& a = attrs[i];
      for (size_t j = 0; j < i; ++j)
        if (attrs[j].name == a.name) fail("attribute '", a.name, "' is given twice");
      auto it = std::find_if(specs.begin(), specs.end(), [&](const AttrSpec& s) { return s.name == a.name; });
      if (it == specs.end()) {
        std::string known;
        for (const AttrSpec& s : specs) known += (known.empty() ? "" : ", ") + std::string(s.name);
        fail("unknown attribute '", a.name, "' (", name, " takes ", known.empty() ? "no attributes" : known, ")");
      }
      if (!(it->kinds & (1u << a.value.index())))
        fail("attribute ", a.name, "=", attr_str(a.value), " must be ", kinds_str(it->kinds), ", not ",
             kKindNames[a.value.index()]);
    }
  }
  void check_operand(size_t i) const {
    const Type& t = in[i];
    if (t.is_scalar()) return;
    if (t.sizes.size() != t.strides.size()) fail("operand ", i, " has ", t.sizes.size(), " sizes but ", t.strides.size(), " strides");
    for (int64_t s : t.sizes)
      if (s < 0) fail("operand ", i, " has a negative size (", t.str(), ")");
    if (t.wrapped && !t.sizes.empty()) fail("operand ", i, " is marked wrapped but is not 0-d (", t.str(), ")");
  }
};

// ---------------------------------------------------------------- shared rules
// (PyTorch's rules live in kiln/runtime/rules.h, which the eager ops call too; these adapt them
// to types and to inference's errors.)

using rules::float_compute;
using rules::sum_dtype;

inline DType result_type(const std::vector<Type>& ts) {
  std::vector<rules::Promotable> ops;
  ops.reserve(ts.size());
  for (const Type& t : ts)
    ops.push_back({t.dtype, t.wrapped ? rules::Rank::Wrapped : t.sizes.empty() ? rules::Rank::ZeroDim
                                                                                : rules::Rank::Dimensioned});
  return rules::result_type(ops);
}

inline Sizes broadcast(const Ctx& c, const Sizes& a, const Sizes& b) {
  return rules::broadcast_shapes(a, b, c.failer());
}
inline Sizes broadcast_all(const Ctx& c, const std::vector<Type>& ts) {
  Sizes shape;
  for (const Type& t : ts) shape = broadcast(c, shape, t.sizes);
  return shape;
}

// Operands of one op must share a device; wrapped numbers live on the host and go anywhere.
inline Device common_device(const Ctx& c, const std::vector<Type>& ts) {
  std::optional<Device> dev;
  for (const Type& t : ts) {
    if (t.wrapped || t.is_scalar()) continue;
    if (dev && *dev != t.device)
      c.fail("Expected all tensors to be on the same device, but found ", dev->str(), " and ", t.device.str());
    dev = t.device;
  }
  return dev.value_or(Device::cpu());
}

inline bool is_contiguous(const Sizes& sizes, const Sizes& strides) { return rules::is_contiguous(sizes, strides); }

// checked_fill_value (copy.cpp): fill_ refuses a value its dtype cannot hold.
inline void check_fill_value(const Ctx& c, const Scalar& v, DType dt) { rules::check_fill_value(v, dt, c.failer()); }

// A view of x: same dtype and device, new sizes and strides.
inline Type view_of(const Type& x, Sizes sizes, Sizes strides) {
  Type t = Type::tensor(x.dtype, std::move(sizes), std::move(strides), x.device);
  return t;
}

inline Sizes infer_size(const Ctx& c, const Sizes& shape, int64_t n) { return rules::infer_size(shape, n, c.failer()); }

// Linear algebra and einsum (infer_linalg.cpp).
Type mm(const Ctx& c, const Type& a, const Type& b);
Type bmm(const Ctx& c, const Type& a, const Type& b);
Type matmul(const Ctx& c, const Type& a, const Type& b);
Type addmm(const Ctx& c);
Type einsum(const Ctx& c);

}  // namespace kiln::ir::infer_detail
