// Tracing entry points of the eager ops (internal). Each public op starts with one of these:
// when the thread is tracing, the op calls itself again with recording paused (so it computes
// exactly what eager computes), reports the result as one node, and returns it. Then, traced or
// not, an op with an operand on a GPU goes to that device's handler (device_ops.h).
#pragma once
#include "autograd/graph.h"
#include "kiln/runtime/device_ops.h"
#include "kiln/runtime/trace.h"

#define KILN_UNPACK(...) __VA_ARGS__

// Declares kiln_out_ = call, computed with recording paused (the op reports only itself).
#define KILN_PAUSED_RESULT(...)                                                               \
  ::kiln::Tensor kiln_out_;                                                                  \
  {                                                                                          \
    ::kiln::trace::Pause kiln_pause_;                                                        \
    kiln_out_ = __VA_ARGS__;                                                                 \
  }

// An op with an operand on a GPU runs through the device's handler. (View ops never do: their
// attributes may name kiln_out_, declared here only so that they compile.)
#define KILN_ON_DEVICE(id, in, attrs)                                                         \
  if (::kiln::device_ops::dispatched(::kiln::OpId::id) && ::kiln::device_ops::any_on_device(in)) [[unlikely]] { \
    [[maybe_unused]] ::kiln::Tensor kiln_out_;                                               \
    return ::kiln::device_ops::run(::kiln::OpId::id, {in.begin(), in.size()},                \
                                   std::vector<::kiln::Attr>{KILN_UNPACK attrs});            \
  }

// KILN_AUTOGRAD_OVER(OpId, (declaration of kiln_ag_in_), (attrs...), call): while autograd
// records and an operand in kiln_ag_in_ requires grad, the op computes with autograd off (traced
// as usual), then records its node. KILN_AUTOGRAD takes the operands as a list.
#define KILN_AUTOGRAD_OVER(id, declare_in, attrs, ...)                                        \
  if (::kiln::autograd::detail::active()) [[unlikely]] {                                     \
    KILN_UNPACK declare_in;                                                                  \
    const std::span<const ::kiln::trace::Operand> kiln_ag_span_(kiln_ag_in_.begin(), kiln_ag_in_.size()); \
    if (::kiln::autograd::detail::any_requires_grad(kiln_ag_span_)) {                        \
      ::kiln::Tensor kiln_out_;                                                              \
      {                                                                                      \
        ::kiln::AutoGradMode kiln_off_(false);                                               \
        kiln_out_ = __VA_ARGS__;                                                             \
      }                                                                                      \
      ::kiln::autograd::detail::attach(::kiln::OpId::id, kiln_ag_span_,                      \
          [&] { return std::vector<::kiln::Attr>{KILN_UNPACK attrs}; }, {&kiln_out_, 1});    \
      return kiln_out_;                                                                      \
    }                                                                                        \
  }
#define KILN_AUTOGRAD(id, operands, attrs, ...)                                               \
  KILN_AUTOGRAD_OVER(id, (std::initializer_list<::kiln::trace::Operand> kiln_ag_in_{KILN_UNPACK operands}), \
                     attrs, __VA_ARGS__)

// KILN_TRACE(OpId, (operands...), (attrs...), call): a functional op with one output.
#define KILN_TRACE(id, operands, attrs, ...)                                                  \
  KILN_AUTOGRAD(id, operands, attrs, __VA_ARGS__)                                            \
  if (::kiln::trace::Recorder* kiln_rec_ = ::kiln::trace::active()) [[unlikely]] {           \
    KILN_PAUSED_RESULT(__VA_ARGS__)                                                          \
    std::vector<::kiln::Attr> kiln_attrs_;                                                   \
    {                                                                                        \
      ::kiln::trace::Pause kiln_pause_; /* the op's own reads of sizes are not the user's */ \
      kiln_attrs_ = std::vector<::kiln::Attr>{KILN_UNPACK attrs};                            \
    }                                                                                        \
    std::initializer_list<::kiln::trace::Operand> kiln_in_{KILN_UNPACK operands};            \
    kiln_rec_->record(::kiln::OpId::id, {kiln_in_.begin(), kiln_in_.size()},                 \
                      std::move(kiln_attrs_), {&kiln_out_, 1});                              \
    return kiln_out_;                                                                        \
  }                                                                                          \
  {                                                                                          \
    std::initializer_list<::kiln::trace::Operand> kiln_dev_in_{KILN_UNPACK operands};        \
    KILN_ON_DEVICE(id, kiln_dev_in_, attrs)                                                  \
  }

// KILN_TRACE_INPLACE(self, OpId, (operands...), (attrs...), call): an in-place op on `self`
// whose functional form is the op OpId on the operands (self first) with the attributes. While
// tracing, the eager in-place op `call` runs unrecorded (its checks, casts, errors and values
// are eager's), then the recorder adds the functional node and the write-back into `self`: the
// functional form is recorded, never computed (a trace used to run both, the functional one into
// a fresh tensor, which made the first call of an in-place chain over 64 MiB cost four times its
// eager run). On a GPU the functional form runs on the device and is copied into `self`.
// (Used where ops_common.h is included: a GPU `self` takes eager's checks from it.)
#define KILN_TRACE_INPLACE(self, id, operands, attrs, ...)                                    \
  KILN_TRACE_INPLACE_WITH(self, id, (std::vector<::kiln::trace::Operand>{KILN_UNPACK operands}), \
                          (std::vector<::kiln::Attr>{KILN_UNPACK attrs}), __VA_ARGS__)

// Under autograd (an operand requires grad) the write is recorded as the op on a snapshot of
// self (autograd::detail::before_inplace), and self takes the op's node as its history.
// The same with the operands and attributes as expressions (a std::vector<trace::Operand> and a
// std::vector<Attr>), evaluated only when tracing or on a GPU.
#define KILN_TRACE_INPLACE_WITH(self, id, operands, attrs, ...)                               \
  if (::kiln::autograd::detail::active()) [[unlikely]] {                                     \
    std::vector<::kiln::trace::Operand> kiln_ag_in_ = operands;                              \
    if (::kiln::autograd::detail::any_requires_grad(kiln_ag_in_)) {                          \
      ::kiln::Tensor kiln_old_ = ::kiln::autograd::detail::before_inplace(self, ::kiln::OpId::id, __func__); \
      {                                                                                      \
        ::kiln::AutoGradMode kiln_off_(false);                                               \
        __VA_ARGS__;                                                                         \
      }                                                                                      \
      kiln_ag_in_[0] = ::kiln::trace::Operand(kiln_old_);                                    \
      ::kiln::autograd::detail::attach_inplace(self, ::kiln::OpId::id, kiln_ag_in_,          \
                                              [&] { return attrs; });                        \
      return self;                                                                           \
    }                                                                                        \
  }                                                                                          \
  if (::kiln::trace::Recorder* kiln_rec_ = ::kiln::trace::active()) [[unlikely]] {           \
    std::vector<::kiln::trace::Operand> kiln_in_;                                            \
    std::vector<::kiln::Attr> kiln_attrs_;                                                   \
    {                                                                                        \
      ::kiln::trace::Pause kiln_pause_;                                                      \
      __VA_ARGS__;                                                                           \
      kiln_in_ = operands;                                                                   \
      kiln_attrs_ = attrs;                                                                   \
    }                                                                                        \
    kiln_rec_->record_inplace(self, ::kiln::OpId::id, kiln_in_, std::move(kiln_attrs_));     \
    return self;                                                                             \
  }                                                                                          \
  if (!(self).device().is_cpu()) [[unlikely]] {                                              \
    /* on a GPU: the functional form on the device, eager's in-place checks, the write */    \
    const std::vector<::kiln::trace::Operand> kiln_in_ = operands;                           \
    ::kiln::Tensor kiln_res_ = ::kiln::device_ops::run(::kiln::OpId::id, kiln_in_, attrs);   \
    ::kiln::detail::check_inplace(__func__, self, kiln_res_.dtype(), kiln_res_.sizes());     \
    (self).copy_(kiln_res_);                                                                 \
    return self;                                                                             \
  }                                                                                          \
  /* (every other path above ends in this one, or in copy_: one write, one version) */      \
  (self).storage()->bump_version();

// KILN_TRACE_LIST(OpId, tensors, (attrs...), call): a functional op over a list of tensors.
#define KILN_TRACE_LIST(id, tensors, attrs, ...)                                              \
  KILN_AUTOGRAD_OVER(id, (std::vector<::kiln::trace::Operand> kiln_ag_in_(tensors.begin(), tensors.end())), \
                     attrs, __VA_ARGS__)                                                     \
  if (::kiln::trace::Recorder* kiln_rec_ = ::kiln::trace::active()) [[unlikely]] {           \
    KILN_PAUSED_RESULT(__VA_ARGS__)                                                          \
    std::vector<::kiln::Attr> kiln_attrs_;                                                   \
    {                                                                                        \
      ::kiln::trace::Pause kiln_pause_;                                                      \
      kiln_attrs_ = std::vector<::kiln::Attr>{KILN_UNPACK attrs};                            \
    }                                                                                        \
    std::vector<::kiln::trace::Operand> kiln_in_(tensors.begin(), tensors.end());            \
    kiln_rec_->record(::kiln::OpId::id, kiln_in_, std::move(kiln_attrs_), {&kiln_out_, 1});  \
    return kiln_out_;                                                                        \
  }                                                                                          \
  {                                                                                          \
    std::vector<::kiln::trace::Operand> kiln_dev_in_(tensors.begin(), tensors.end());        \
    bool kiln_dev_any_ = false;                                                              \
    for (const auto& o : kiln_dev_in_) kiln_dev_any_ |= !o.tensor->device().is_cpu();        \
    if (kiln_dev_any_) [[unlikely]]                                                          \
      return ::kiln::device_ops::run(::kiln::OpId::id, kiln_dev_in_, std::vector<::kiln::Attr>{KILN_UNPACK attrs}); \
  }

// KILN_TRACE_FACTORY("name", call): a factory made a tensor while tracing; the recorder turns
// it into ops or a constant (or refuses it: random and from_blob tensors cannot be baked in).
// KILN_TRACE_FACTORY_ARGS("name", (numbers...), call) also hands over the numbers the
// recorder needs to make the tensor again (Recorder::created).
#define KILN_TRACE_FACTORY(name, ...) KILN_TRACE_FACTORY_ARGS(name, (), __VA_ARGS__)
#define KILN_TRACE_FACTORY_ARGS(name, args, ...)                                              \
  if (::kiln::trace::Recorder* kiln_rec_ = ::kiln::trace::active()) [[unlikely]] {           \
    KILN_PAUSED_RESULT(__VA_ARGS__)                                                          \
    const std::initializer_list<::kiln::Scalar> kiln_args_{KILN_UNPACK args};                \
    kiln_rec_->created(kiln_out_, name, {kiln_args_.begin(), kiln_args_.size()});            \
    return kiln_out_;                                                                        \
  }
