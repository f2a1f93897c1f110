// The derivative table: for every op of the op table (ops.def), how its operands' gradients
// follow from its outputs' (derivatives.cpp). One record per op, as PyTorch keeps
// derivatives.yaml beside its op list; a table-wide test checks that no op is missing.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "kiln/runtime/tensor.h"
#include "kiln/runtime/trace.h"

namespace kiln::autograd {

// What a rule sees: the op's attributes, its operands and outputs as saved (each only where the
// record says it saves them), its outputs' gradients and which operands need one.
struct RuleCtx {
  const std::vector<Attr>* attrs = nullptr;
  std::vector<Tensor> in;                    // tensor operands (undefined: a number, or not saved)
  std::vector<std::optional<Scalar>> number;  // number operands
  std::vector<Tensor> out;
  std::vector<Tensor> grad;  // per output; undefined: no gradient reached it (zero)
  std::vector<bool> needs;   // per operand

  // Operand i as a tensor: a number becomes a 0-d tensor of the gradient's dtype (as a wrapped
  // number takes its tensor's).
  Tensor x(size_t i) const;
  const Attr* attr(std::string_view name) const;
  int64_t i64(std::string_view name) const;
  double f64(std::string_view name) const;
  bool flag(std::string_view name) const;
  IntList ints(std::string_view name) const;
  bool is_none(std::string_view name) const;
  std::string str(std::string_view name) const;
  Scalar number_attr(std::string_view name) const;
};

using Rule = std::vector<Tensor> (*)(const RuleCtx&);

struct Derivative {
  enum class Kind : uint8_t {
    Rule,              // `rule` gives the operands' gradients
    NotDifferentiable, // its outputs never require grad (comparisons, indices, bool results)
    Missing,           // differentiable in PyTorch, not yet in kiln: backward through it raises
  };
  Kind kind = Kind::Missing;
  Rule rule = nullptr;
  bool saves_inputs = false;   // the rule reads ctx.in
  bool saves_outputs = false;  // the rule reads ctx.out
  const char* note = "";       // for Missing: what it would take
};

const Derivative& derivative(OpId op);
// Whether the table lists the op at all (a table-wide test checks every op is listed).
bool has_derivative_record(OpId op);
// PyTorch's name of the op's backward node: "MulBackward0".
std::string backward_name(OpId op);
// The op table's name of the op ("mul").
std::string_view op_name(OpId op);

// A gradient of sizes `from` summed down to `to` (broadcasting's reverse).
Tensor sum_to(const Tensor& g, IntArrayRef to);

}  // namespace kiln::autograd
