#include "ops_common.h"

namespace kiln::detail {

Arg::Arg(const Scalar& s) : wrapped(true) {
  if (s.is_bool()) t = scalar_tensor(s, kBool);
  else if (s.is_integral()) t = scalar_tensor(s, kInt64);
  else t = scalar_tensor(s, kFloat64);
}

DType result_type(std::span<const Arg> args) {
  std::vector<rules::Promotable> ops;
  ops.reserve(args.size());
  for (const Arg& a : args)
    ops.push_back({a.t.dtype(), a.wrapped ? rules::Rank::Wrapped : a.t.dim() == 0 ? rules::Rank::ZeroDim
                                                                                    : rules::Rank::Dimensioned});
  return rules::result_type(ops);
}

std::vector<int64_t> broadcast_all(std::initializer_list<Arg> args, std::string_view op) {
  std::vector<int64_t> shape;
  for (const Arg& a : args) shape = broadcast_shapes(shape, a.t.sizes(), op);
  shape::numel(shape, op);  // ([2^32, 1] and [1, 2^32] broadcast past int64 elements)
  return shape;
}

void check_cpu(std::string_view op, std::initializer_list<Arg> args) {
  for (const Arg& a : args)
    KILN_CHECK(a.t.device().is_cpu(), op,
               "Expected all tensors to be on the same device, but found at least one on ",
               a.t.device().str(), " (the CPU eager kernels run cpu tensors only)");
}

bool check_inplace(std::string_view op, const Tensor& self, DType compute, IntArrayRef shape) {
  KILN_CHECK(can_cast(compute, self.dtype()), op, "result type ", name(compute),
             " can't be cast to the desired output type ", name(self.dtype()));
  KILN_CHECK(IntArrayRef(self.sizes()) == shape, op, "output with shape ", self.sizes().vec(),
             " doesn't match the broadcast shape ", shape.vec());
  check_no_internal_overlap(op, self);
  return compute == self.dtype();
}

Tensor unalias(const Tensor& out, const Tensor& in) {
  if (!in.is_alias_of(out)) return in;
  if (in.storage_offset() == out.storage_offset() && in.sizes() == out.sizes() &&
      in.strides() == out.strides())
    return in;
  return in.clone();
}

void check_no_internal_overlap(std::string_view op, const Tensor& out) {
  for (int64_t d = 0; d < out.dim(); ++d)
    KILN_CHECK(!(out.strides()[d] == 0 && out.sizes()[d] > 1), op,
               "unsupported operation: more than one element of the written-to tensor refers to "
               "a single memory location (size ", out.sizes().vec(), ", stride ",
               out.strides().vec(), "). Please clone() the tensor before performing the operation.");
}

}  // namespace kiln::detail
