// Tracing entry points of the eager ops (internal). Each public op starts with one of these:
// when the thread is tracing, the op calls itself again with recording paused (so it computes
// exactly what eager computes), reports the result as one node, and returns it.
#pragma once
#include "kiln/runtime/trace.h"

#define KILN_UNPACK(...) __VA_ARGS__

// Declares kiln_out_ = call, computed with recording paused (the op reports only itself).
#define KILN_PAUSED_RESULT(...)                                                               \
  ::kiln::Tensor kiln_out_;                                                                  \
  {                                                                                          \
    ::kiln::trace::Pause kiln_pause_;                                                        \
    kiln_out_ = __VA_ARGS__;                                                                 \
  }

// KILN_TRACE(OpId, (operands...), (attrs...), call): a functional op with one output.
#define KILN_TRACE(id, operands, attrs, ...)                                                  \
  if (::kiln::trace::Recorder* kiln_rec_ = ::kiln::trace::active()) [[unlikely]] {           \
    KILN_PAUSED_RESULT(__VA_ARGS__)                                                          \
    std::initializer_list<::kiln::trace::Operand> kiln_in_{KILN_UNPACK operands};            \
    kiln_rec_->record(::kiln::OpId::id, {kiln_in_.begin(), kiln_in_.size()},                 \
                      std::vector<::kiln::Attr>{KILN_UNPACK attrs}, {&kiln_out_, 1});        \
    return kiln_out_;                                                                        \
  }

// KILN_TRACE_INPLACE(self, functional, call): an in-place op on `self`. Records the functional
// form, then runs the eager in-place op unrecorded (its checks, casts and errors are eager's)
// and records the write-back. On a failing functional form the eager op's own error wins.
#define KILN_TRACE_INPLACE(self, functional, ...)                                             \
  if (::kiln::trace::Recorder* kiln_rec_ = ::kiln::trace::active()) [[unlikely]] {           \
    ::kiln::Tensor kiln_res_;                                                                \
    try {                                                                                    \
      kiln_res_ = functional;                                                                \
    } catch (const ::kiln::Error&) {                                                         \
      ::kiln::trace::Pause kiln_pause_;                                                      \
      __VA_ARGS__;                                                                           \
      throw;                                                                                 \
    }                                                                                        \
    {                                                                                        \
      ::kiln::trace::Pause kiln_pause_;                                                      \
      __VA_ARGS__;                                                                           \
    }                                                                                        \
    kiln_rec_->write_back(self, kiln_res_);                                                  \
    return self;                                                                             \
  }

// KILN_TRACE_LIST(OpId, tensors, (attrs...), call): a functional op over a list of tensors.
#define KILN_TRACE_LIST(id, tensors, attrs, ...)                                              \
  if (::kiln::trace::Recorder* kiln_rec_ = ::kiln::trace::active()) [[unlikely]] {           \
    KILN_PAUSED_RESULT(__VA_ARGS__)                                                          \
    std::vector<::kiln::trace::Operand> kiln_in_(tensors.begin(), tensors.end());            \
    kiln_rec_->record(::kiln::OpId::id, kiln_in_, std::vector<::kiln::Attr>{KILN_UNPACK attrs}, \
                      {&kiln_out_, 1});                                                      \
    return kiln_out_;                                                                        \
  }

// KILN_TRACE_FACTORY("name", call): a factory made a tensor while tracing; the recorder turns
// it into a constant (or refuses it: random and from_blob tensors cannot be baked in).
#define KILN_TRACE_FACTORY(name, ...)                                                         \
  if (::kiln::trace::Recorder* kiln_rec_ = ::kiln::trace::active()) [[unlikely]] {           \
    KILN_PAUSED_RESULT(__VA_ARGS__)                                                          \
    kiln_rec_->created(kiln_out_, name);                                                     \
    return kiln_out_;                                                                        \
  }
