// The elementwise ops' common launcher (internal), shared by elementwise.cpp and ternary.cpp.
#pragma once
#include <algorithm>
#include <functional>
#include <initializer_list>
#include <string_view>

#include "cpu/float16_blocks.h"
#include "cpu/vec.h"
#include "ops_common.h"

namespace kiln::detail {

using Launch = std::function<void(const cpu::Iter&)>;

// out = f(inputs...) computed in dtype `ct`, into a new tensor of dtype `out_dt`, or into
// `self` for the in-place forms (through a temporary when self's dtype differs from out_dt).
Tensor run(std::string_view op, std::initializer_list<Arg> args, DType ct, DType out_dt, const Launch& launch,
           Tensor* self = nullptr);

// out = T(g(M(a))) with M = opmath_t<T>: 16-bit floats by widened blocks where input and output
// are contiguous (as opmath_binary_loop, below).
template <typename T, typename G>
void opmath_unary_loop(const cpu::Iter& it, G g) {
  using M = opmath_t<T>;
  if constexpr (is_reduced_float_v<T>) {
    it.for_each([&](char** p, const int64_t* s, int64_t n) {
      if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
        cpu::by_widened_blocks(reinterpret_cast<const T*>(p[1]), reinterpret_cast<T*>(p[0]), n, [&](float* buf, int64_t m) {
          for (int64_t i = 0; i < m; ++i) buf[i] = float(g(buf[i]));
        });
      } else {
        for (int64_t i = 0; i < n; ++i)
          *reinterpret_cast<T*>(p[0] + i * s[0]) = T(g(M(*reinterpret_cast<const T*>(p[1] + i * s[1]))));
      }
    });
  } else {
    cpu::unary_loop<T, T>(it, [&](T v) { return T(g(M(v))); });
  }
}

// out = T(g(M(a), M(b))) with M = opmath_t<T>, inputs and output of dtype T. 16-bit floats go
// by blocks widened to float32 (cpu/float16_blocks.h) where the output is contiguous and each
// operand contiguous or broadcast, so that the float32 loop vectorises: their element-wise
// conversions cost more than the op (a float16 add took 2.8x PyTorch's time). The values are
// the element-wise ones: the same conversions, the same g, one rounding.
// `vf` (optional): g's float32 vector form, which the widened blocks then run.
template <typename T, typename G, typename VF = std::nullptr_t>
void opmath_binary_loop(const cpu::Iter& it, G g, int64_t grain = cpu::parallel_grain(), VF vf = nullptr) {
  using M = opmath_t<T>;
  if constexpr (is_reduced_float_v<T>) {
    it.for_each([&](char** p, const int64_t* s, int64_t n) {
      constexpr int64_t e = sizeof(T);
      T* o = reinterpret_cast<T*>(p[0]);
      const T* a = reinterpret_cast<const T*>(p[1]);
      const T* b = reinterpret_cast<const T*>(p[2]);
      if (s[0] == e && (s[1] == e || s[1] == 0) && (s[2] == e || s[2] == 0)) {
        alignas(64) float wa[cpu::kWidenBlock], wb[cpu::kWidenBlock];
        if (s[1] == 0) std::fill_n(wa, cpu::kWidenBlock, float(*a));
        if (s[2] == 0) std::fill_n(wb, cpu::kWidenBlock, float(*b));
        for (int64_t i0 = 0; i0 < n; i0 += cpu::kWidenBlock) {
          const int64_t m = std::min(cpu::kWidenBlock, n - i0);
          if (s[1]) cpu::widen(a + i0, wa, m);
          if (s[2]) cpu::widen(b + i0, wb, m);
          // (into wa only where it is refilled next block: a broadcast a stays)
          float* out = s[1] ? wa : wb;
          if (s[1] == 0 && s[2] == 0) out = nullptr;
          if (out) {
#if KILN_HAVE_VEC
            if constexpr (!std::is_same_v<VF, std::nullptr_t>) cpu::vec::map2(wa, 1, wb, 1, out, m, vf);
            else
#endif
              for (int64_t i = 0; i < m; ++i) out[i] = float(g(wa[i], wb[i]));
            cpu::narrow(out, o + i0, m);
          } else {
            const T v = T(g(wa[0], wb[0]));
            std::fill_n(o + i0, m, v);
          }
        }
        return;
      }
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<T*>(p[0] + i * s[0]) =
            T(g(M(*reinterpret_cast<const T*>(p[1] + i * s[1])), M(*reinterpret_cast<const T*>(p[2] + i * s[2]))));
    }, grain);
  } else {
    cpu::binary_loop<T, T, T>(it, [&](T x, T y) { return T(g(M(x), M(y))); }, grain);
  }
}

}  // namespace kiln::detail
