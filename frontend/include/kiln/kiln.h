// kiln: a tracing JIT compiler for tensor programs. Include this one header.
#pragma once
#include "kiln/runtime/device.h"
#include "kiln/runtime/dtype.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/factories.h"
#include "kiln/runtime/ops.h"
#include "kiln/runtime/scalar.h"
#include "kiln/runtime/storage.h"
#include "kiln/runtime/tensor.h"
#include "kiln/runtime/trace.h"
#include "kiln/compile.h"
