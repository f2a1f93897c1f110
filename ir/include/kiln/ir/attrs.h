// Each op's attributes as a typed struct, generated from the op table's schema column
// (kiln/runtime/ops.def) and decoded once: `ir::decode<OpId::Sum>(node)` is an attrs::Sum with
// `dims`, `dtype` and `keepdim` fields, so a reader names a field the compiler checks instead of
// looking an attribute up by its spelling. The structs and decoders are generated into
// kiln/ir/op_attrs.h by ir/tools/gen_op_attrs.cpp when the table changes.
//
// A field holds the attribute as the node gives it, else the schema's default (ir::attr_default,
// PyTorch's). Types follow the kinds: int int64_t, float double (an int accepted), bool, str
// std::string, ints IntList, dtype DType; int|float|bool a Scalar; "kind|none" a std::optional.
// Decoding a node that lacks a required attribute, or has one of the wrong kind, throws
// kiln::Error naming the op and attribute (a verified graph never does).
#pragma once
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "kiln/ir/graph.h"
#include "kiln/runtime/scalar.h"

namespace kiln::ir {

namespace attr_detail {
// The attribute as given, else the schema's default, else null.
const AttrValue* find(OpId op, std::span<const Attr> a, std::string_view name);
[[noreturn]] void missing(OpId op, std::string_view name);
[[noreturn]] void wrong_kind(OpId op, std::string_view name, const AttrValue& v);

template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<std::optional<T>> : std::true_type {};

template <typename T>
T value_as(OpId op, std::string_view name, const AttrValue& v) {
  if constexpr (std::is_same_v<T, Scalar>) {
    if (auto* b = std::get_if<bool>(&v)) return Scalar(*b);
    if (auto* i = std::get_if<int64_t>(&v)) return Scalar(*i);
    if (auto* d = std::get_if<double>(&v)) return Scalar(*d);
  } else {
    if (auto* p = std::get_if<T>(&v)) return *p;
    if constexpr (std::is_same_v<T, double>)
      if (auto* i = std::get_if<int64_t>(&v)) return double(*i);
  }
  wrong_kind(op, name, v);
}
}  // namespace attr_detail

// Attribute `name` of an `op` node with attributes `a`, as a T (a field type above).
template <typename T>
T attr_as(OpId op, std::span<const Attr> a, std::string_view name) {
  const AttrValue* v = attr_detail::find(op, a, name);
  if constexpr (attr_detail::is_optional<T>::value) {
    if (!v || std::holds_alternative<NoneAttr>(*v)) return std::nullopt;
    return attr_detail::value_as<typename T::value_type>(op, name, *v);
  } else {
    if (!v) attr_detail::missing(op, name);
    return attr_detail::value_as<T>(op, name, *v);
  }
}

// AttrsOf<op>::type is op's struct and AttrsOf<op>::decode its decoder (generated, for the ops
// that take attributes).
template <OpId op>
struct AttrsOf;

template <OpId op>
typename AttrsOf<op>::type decode(std::span<const Attr> a) {
  return AttrsOf<op>::decode(a);
}
template <OpId op>
typename AttrsOf<op>::type decode(const Node& n) {
  return AttrsOf<op>::decode(n.attrs);
}

}  // namespace kiln::ir

#include "kiln/ir/op_attrs.h"
