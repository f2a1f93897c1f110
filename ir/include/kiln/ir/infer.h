// Type inference: the output types of every op in the op table (kiln/runtime/ops.def) from its
// operand types and attributes.
//
// The rules are the eager kernels' (runtime/src), so that a traced graph's declared types are
// exactly what running it eagerly produces: PyTorch's type promotion (dimensioned tensors
// outrank 0-d tensors, which outrank wrapped numbers, unless the lower group is of a higher
// category), broadcasting, reductions over `dims` with `keepdim`, and view ops that compute the
// view's sizes and strides as Tensor's view methods do. Every non-view output is a fresh
// row-major tensor (the eager kernels allocate with empty()); the exceptions are the ops that
// return their operand itself in eager mode: `cast` to the operand's own dtype, `contiguous` of
// an already-contiguous operand, and `einsum`, whose result is a permuted (and, for a single
// operand with no summation, aliasing) view. Outputs are never `wrapped`.
//
// Attributes follow the op table's schema column (ops.def). An attribute the op does not name, or one of the
// wrong kind (dims=1.5), is an error; an attribute with an eager default may be left out
// (alpha=1, keepdim=false, dims=[] meaning every dim, ...).
//
// Errors throw kiln::Error "[infer] OP: what", naming the offending shapes and dtypes.
#pragma once
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::ir {

// The output types of `op` on operands of types `inputs` with attributes `attrs` (sorted by
// name or not). Host-scalar operands (Type::scalar) of elementwise ops promote like wrapped
// numbers. `constant` and `cond` return no types here: a constant's type is given with its
// value and a cond's types are its then-region's outputs (use the Node overload); their
// operands and attributes are still checked.
std::vector<Type> infer_types(OpId op, const std::vector<Type>& inputs, const std::vector<Attr>& attrs);

// The value attribute `name` of `op` has when a graph leaves it out: PyTorch's default, as the
// op table's schema gives it (add's alpha 1, a reduction's keepdim false and dims [] for all,
// norm's p 2, ...). Null where it has none: a required attribute, or slice's `end`, which
// defaults to the dim's size. Inference and the reference executor both read it here; the
// tracer records every attribute, so only hand-written graphs rely on it.
const AttrValue* attr_default(OpId op, std::string_view name);

// The output types of a node: as above, except that a constant's are its declared types (after
// checking its value attribute against them) and a cond's are its then-region's output types.
std::vector<Type> infer_types(const Node& node);

}  // namespace kiln::ir
