// Where a tensor's storage lives. CUDA tensors arrive with the CUDA backend; the type is
// complete now so that signatures, cache keys and errors can already name devices.
#pragma once
#include <cstdint>
#include <string>

namespace kiln {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int16_t index = 0;

  static constexpr Device cpu() { return Device{DeviceType::CPU, 0}; }
  static constexpr Device cuda(int i = 0) { return Device{DeviceType::CUDA, int16_t(i)}; }
  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  constexpr bool operator==(const Device&) const = default;
  // "cpu", "cuda:0"
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

inline constexpr Device kCPU = Device::cpu();

}  // namespace kiln
