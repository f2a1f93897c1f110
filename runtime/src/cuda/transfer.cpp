// Tensors between the host and a GPU (Tensor::to(Device), pin_memory): copies of the bytes a
// tensor spans, on the device's stream (kiln/runtime/cuda.h).
#include <algorithm>
#include <array>
#include <vector>

#include "kiln/runtime/cuda.h"
#include "kiln/runtime/device_ops.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/factories.h"
#include "kiln/runtime/tensor.h"
#include "../autograd/graph.h"
#include "../ops_common.h"
#include "driver.h"

namespace kiln {

namespace {

// The elements [lo, hi] (offsets in the storage) the view reaches.
std::pair<int64_t, int64_t> span(const Tensor& t) {
  int64_t lo = t.storage_offset(), hi = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 0) return {lo, lo - 1};
    int64_t reach = (t.size(d) - 1) * t.stride(d);
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo, hi};
}

char* at(const Tensor& t, int64_t element) {
  return static_cast<char*>(t.storage()->data()) + element * t.element_size();
}

}  // namespace

Tensor Tensor::to(Device d, bool non_blocking) const {
  if (d == device()) return *this;
  autograd::detail::refuse_while_recording("to", {*this}, "make the tensor on its device and call requires_grad_() "
                                           "there, or move it under NoGradGuard");
  KILN_CHECK(!(is_cuda() && d.is_cuda()), "to", "copies between two GPUs (", device().str(), " to ", d.str(),
             ") are not supported; go through the cpu");
  if (d.is_cuda()) {
    // host -> device: the dense bytes of a contiguous copy
    Tensor src = contiguous();
    if (non_blocking && !src.is_pinned()) non_blocking = false;  // pageable memory is staged by the driver anyway
    Tensor out = empty(sizes(), TensorOptions(dtype()).device(d));
    if (numel() == 0) return out;
    cuda::copy_to_device(at(out, out.storage_offset()), at(src, src.storage_offset()), size_t(nbytes()), d.index);
    if (non_blocking) {
      cuda::detail::hold_until_synchronized(src.storage(), d.index);  // (read until the copy has run)
    } else {
      cuda::synchronize(d.index);
    }
    return out;
  }
  // device -> host: the span the view reaches, then the view of it on the host
  auto [lo, hi] = span(*this);
  int64_t n = std::max<int64_t>(hi - lo + 1, 0);
  TensorOptions o = TensorOptions(dtype());
  Tensor flat = non_blocking ? empty({n}, o).pin_memory() : empty({n}, o);
  if (n > 0) cuda::copy_to_host(at(flat, flat.storage_offset()), at(*this, lo), size_t(n * element_size()), device().index);
  if (!non_blocking) cuda::synchronize(device().index);
  Tensor view = flat.as_strided(sizes(), strides(), storage_offset() - lo + flat.storage_offset());
  return is_contiguous() && lo == storage_offset() ? view : view.contiguous();
}

Tensor Tensor::pin_memory() const {
  autograd::detail::refuse_while_recording("pin_memory", {*this}, "pin it under NoGradGuard");
  KILN_CHECK(is_cpu(), "pin_memory", "only cpu tensors can be pinned, not ", device().str());
  if (is_pinned()) return *this;
  Tensor src = contiguous();
  auto impl = std::make_shared<TensorImpl>();
  impl->dtype = dtype();
  impl->sizes = sizes().vec();
  impl->strides = shape::contiguous_strides(sizes());
  impl->refresh();
  impl->storage = Storage::allocate_pinned(size_t(nbytes()));
  Tensor out(std::move(impl));
  if (numel() > 0) std::copy_n(at(src, src.storage_offset()), nbytes(), at(out, 0));
  return out;
}

namespace detail {

Tensor& copy_across_devices(Tensor& dst, const Tensor& src) {
  KILN_CHECK(!(dst.is_cuda() && src.is_cuda() && dst.device() != src.device()), "copy_",
             "copies between two GPUs (", src.device().str(), " to ", dst.device().str(), ") are not supported");
  broadcast_shapes(dst.sizes(), src.sizes(), "copy_");
  KILN_CHECK(src.dim() <= dst.dim(), "copy_", "source of shape ", src.sizes().vec(),
             " cannot be broadcast to destination of shape ", dst.sizes().vec());
  check_no_internal_overlap("copy_", dst);
  if (dst.numel() == 0) return dst;
  if (dst.is_cuda() && src.is_cuda() && src.dtype() == dst.dtype() && src.sizes() == dst.sizes() &&
      src.is_contiguous() && dst.is_contiguous() && (!src.is_alias_of(dst) || src.storage_offset() == dst.storage_offset())) {
    if (!src.is_alias_of(dst))  // (overlapping device copies are undefined: those go through the host)
      cuda::copy_on_device(at(dst, dst.storage_offset()), at(src, src.storage_offset()), size_t(dst.nbytes()),
                           dst.device().index);
    return dst;
  }
  if (dst.is_cuda() && src.is_cuda() && !src.is_alias_of(dst) && device_ops::installed()) {
    // Another layout or dtype on one GPU: a kernel of the device's backend (the write-back op
    // `copy`, as a traced in-place op records it), storing through dst's strides. (Overlapping
    // copies go through the host: two operands of one kernel are assumed not to alias.)
    std::array<trace::Operand, 2> in{trace::Operand(dst), trace::Operand(src)};
    device_ops::run(OpId::Copy, in, {});
    return dst;
  }
  Tensor host = src.is_cuda() ? src.to(Device::cpu()) : src;
  if (dst.is_cpu()) return dst.copy_(host);
  // The values as dst stores them, dense in dst's logical order.
  Tensor vals = empty(dst.sizes(), TensorOptions(dst.dtype()));
  vals.copy_(host);
  const int dev = dst.device().index;
  if (dst.is_contiguous()) {
    cuda::copy_to_device(at(dst, dst.storage_offset()), at(vals, vals.storage_offset()), size_t(vals.nbytes()), dev);
  } else {
    // A strided destination: the span it reaches comes to the host, takes the values through
    // dst's strides and goes back whole (the elements between keep what they held).
    auto [lo, hi] = span(dst);
    Tensor flat = empty({hi - lo + 1}, TensorOptions(dst.dtype()));
    cuda::copy_to_host(at(flat, 0), at(dst, lo), size_t(flat.nbytes()), dev);
    cuda::synchronize(dev);
    flat.as_strided(dst.sizes(), dst.strides(), dst.storage_offset() - lo).copy_(vals);
    cuda::copy_to_device(at(dst, lo), at(flat, 0), size_t(flat.nbytes()), dev);
  }
  cuda::synchronize(dev);  // the host values go away with this frame
  return dst;
}

}  // namespace detail

bool Tensor::is_pinned() const { return storage() && storage()->is_pinned(); }

}  // namespace kiln
