// The compiled program every backend returns (kiln/exec/program.h): the input check and the
// run through the kernel program runner on the program's device.
#include <algorithm>

#include "kiln/exec/program.h"
#include "kiln/runtime/error.h"

namespace kiln::exec {

CompiledProgram::CompiledProgram(std::shared_ptr<const passes::KernelProgram> p, std::vector<ir::Type> input_types,
                                 Device device, CompileStats stats, std::vector<KernelImpl> impls)
    : program_(std::move(p)),
      input_types_(std::move(input_types)),
      device_(device),
      stats_(std::move(stats)),
      runner_(*program_, std::move(impls), device) {}
CompiledProgram::~CompiledProgram() = default;

bool CompiledProgram::accepts(std::span<const ir::Slot> inputs) const {
  if (inputs.size() != input_types_.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Type& t = input_types_[i];
    if (t.is_scalar() != inputs[i].is_scalar) return false;
    if (t.is_scalar()) continue;
    const Tensor& x = inputs[i].tensor;
    if (x.dtype() != t.dtype || x.device() != device_) return false;
    auto sz = x.sizes(), st = x.strides();
    if (!std::equal(sz.begin(), sz.end(), t.sizes.begin(), t.sizes.end())) return false;
    for (size_t d = 0; d < t.sizes.size(); ++d)
      if (t.sizes[d] > 1 && st[d] != t.strides[d]) return false;
  }
  return true;
}

std::vector<Tensor> CompiledProgram::run(std::span<const ir::Slot> inputs) const {
  KILN_CHECK(accepts(inputs), "codegen", "run: the inputs' sizes, strides or device differ from those the program was "
             "compiled for (", device_.str(), ")");
  return replay_ ? replay_(runner_, inputs) : runner_.run(inputs);
}

std::optional<std::vector<Tensor>> CompiledProgram::try_run(std::span<const ir::Slot> inputs) const {
  if (!accepts(inputs)) return std::nullopt;
  return replay_ ? replay_(runner_, inputs) : runner_.run(inputs);
}

void CompiledProgram::set_replay(Replay r, std::string note) {
  replay_ = std::move(r);
  stats_.graphs = std::move(note);
}

std::vector<Tensor> CompiledProgram::run(std::span<const Tensor> inputs) const {
  std::vector<ir::Slot> slots(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) slots[i].tensor = inputs[i];
  return run(slots);
}

}  // namespace kiln::exec
