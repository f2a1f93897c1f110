// The elementwise ops' common launcher (internal), shared by elementwise.cpp and ternary.cpp.
#pragma once
#include <functional>
#include <initializer_list>
#include <string_view>

#include "ops_common.h"

namespace kiln::detail {

using Launch = std::function<void(const cpu::Iter&)>;

// out = f(inputs...) computed in dtype `ct`, into a new tensor of dtype `out_dt`, or into
// `self` for the in-place forms (through a temporary when self's dtype differs from out_dt).
Tensor run(std::string_view op, std::initializer_list<Arg> args, DType ct, DType out_dt, const Launch& launch,
           Tensor* self = nullptr);

}  // namespace kiln::detail
