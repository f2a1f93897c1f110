// Helpers of the tests of GPU tensors (cuda_backend_tests): the device, copies back, errors.
#pragma once
#include <kiln/ir/exec.h>
#include <kiln/kiln.h>

#include <functional>
#include <string>
#include <vector>

namespace kiln::testing {

inline const Device kGpu = Device::cuda();
inline Tensor cpu(const Tensor& t) { return t.to(Device::cpu()); }

// The message of the kiln::Error f raises ("" when it raises none).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A program's inputs copied to the GPU, each tensor with the strides the program was
// specialised on (host numbers stay as they are).
inline std::vector<ir::Slot> to_device(const std::vector<ir::Slot>& in) {
  std::vector<ir::Slot> out = in;
  for (ir::Slot& s : out)
    if (!s.is_scalar) {
      Tensor d = empty_strided(s.tensor.sizes(), s.tensor.strides(), TensorOptions(s.tensor.dtype()).device(kGpu));
      d.copy_(s.tensor);
      s.tensor = d;
    }
  return out;
}

// An op or program on some inputs, run on the CPU and on the GPU and compared.
struct DeviceCase {
  std::string name;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  std::vector<Tensor> inputs;
};

}  // namespace kiln::testing
