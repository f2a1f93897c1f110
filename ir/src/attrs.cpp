// The decoding of typed attribute structs (kiln/ir/attrs.h): the lookups and errors the generated
// decoders share.
#include "kiln/ir/attrs.h"

#include "kiln/ir/infer.h"
#include "kiln/runtime/error.h"

namespace kiln::ir::attr_detail {

const AttrValue* find(OpId op, std::span<const Attr> a, std::string_view name) {
  for (const Attr& x : a)
    if (x.name == name) return &x.value;
  return attr_default(op, name);
}

void missing(OpId op, std::string_view name) {
  KILN_FAIL("ir", op_info(op).name, ": missing attribute '", name, "'");
}

void wrong_kind(OpId op, std::string_view name, const AttrValue& v) {
  KILN_FAIL("ir", op_info(op).name, ": attribute '", name, "' has the wrong kind (", attr_str(v), ")");
}

}  // namespace kiln::ir::attr_detail
