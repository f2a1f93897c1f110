// The handler of eager ops on GPU tensors (kiln/runtime/device_ops.h).
#include "kiln/runtime/device_ops.h"

#include <atomic>
#include <string_view>

#include "kiln/runtime/error.h"

namespace kiln::device_ops {

namespace {
enum class Cat : uint8_t { Elementwise, Reduction, View, Opaque, Control };
struct Row {
  std::string_view name;
  Cat cat;
};
constexpr Row kOps[] = {
#define KILN_OP(id, name, category, operands, ...) {name, Cat::category},
#include "kiln/runtime/ops.def"
#undef KILN_OP
};
std::atomic<Handler> handler{nullptr};
}  // namespace

void install(Handler h) { handler.store(h); }
bool installed() { return handler.load() != nullptr; }

bool dispatched(OpId op) {
  Cat c = kOps[size_t(op)].cat;
  return c != Cat::View && c != Cat::Control;
}

Tensor run(OpId op, std::span<const trace::Operand> inputs, std::vector<Attr> attrs) {
  if (has_library(op) && !inputs.empty() && inputs[0].tensor) {
    // A library op (a product, einsum) on tensors of one device is its own call there
    // (run_library): no backend program around it, and no trip through the handler.
    std::vector<Tensor> operands;
    for (const trace::Operand& o : inputs)
      if (o.tensor && o.tensor->device() == inputs[0].tensor->device()) operands.push_back(*o.tensor);
    if (operands.size() == inputs.size()) {
      trace::Pause pause;  // (einsum's steps are public ops: a running trace records none of them)
      return run_library(op, operands, attrs);
    }
  }
  Handler h = handler.load();
  if (!h) {
    Device d = Device::cpu();
    for (const trace::Operand& o : inputs)
      if (o.tensor && !o.tensor->device().is_cpu()) d = o.tensor->device();
    KILN_FAIL(kOps[size_t(op)].name, "an operand is on ", d.str(), " and no backend for it is loaded (ops on GPU "
              "tensors run through kiln's CUDA backend, in the kiln_codegen library: link kiln::kiln)");
  }
  return h(op, inputs, std::move(attrs));
}

}  // namespace kiln::device_ops
