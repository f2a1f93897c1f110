// kiln: a tracing JIT compiler for tensor programs. Include this one header.
#pragma once
#include "kiln/runtime/autograd.h"
#include "kiln/runtime/device.h"
#include "kiln/runtime/dtype.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/factories.h"
#include "kiln/runtime/ops.h"
#include "kiln/runtime/profile.h"
#include "kiln/runtime/scalar.h"
#include "kiln/runtime/storage.h"
#include "kiln/runtime/symfloat.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/trace.h"
#include "kiln/runtime/transforms.h"
#include "kiln/compile.h"

namespace kiln {
namespace codegen {
// Registers the CPU and CUDA backends with the execution layer (kiln/exec/backend.h) and the
// CUDA backend as the handler of eager ops on GPU tensors (kiln/runtime/device_ops.h). Loading
// libkiln_codegen does it too; calling it is idempotent.
void install_backends();
}  // namespace codegen
namespace detail {
// Every program that includes this header refers to the backends, so that a linker that drops
// unreferenced shared libraries (--as-needed, the default on Debian) keeps libkiln_codegen in a
// program whose only use of it is eager ops on GPU tensors (which are compiled as one-op
// programs): without it `a + b` on cuda:0 raised "no backend for it is loaded" although the
// program linked kiln::kiln.
inline const bool backends_installed = (codegen::install_backends(), true);
}  // namespace detail
}  // namespace kiln
