// copy_, fill_, conversions, contiguous/clone, and the broadcasting helpers.
#include <cstring>

#include "ops_common.h"

namespace kiln {

using namespace detail;

std::vector<int64_t> broadcast_shapes(IntArrayRef a, IntArrayRef b, std::string_view op) {
  size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, op, "The size of tensor a (", da,
               ") must match the size of tensor b (", db, ") at non-singleton dimension ", i);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<Tensor> broadcast_tensors(const std::vector<Tensor>& ts) {
  std::vector<int64_t> shape;
  for (auto& t : ts) shape = broadcast_shapes(shape, t.sizes(), "broadcast_tensors");
  std::vector<Tensor> out;
  for (auto& t : ts) out.push_back(t.expand(shape));
  return out;
}

DType result_type(std::initializer_list<Tensor> tensors, std::initializer_list<Scalar> scalars) {
  std::vector<Arg> args;
  for (auto& t : tensors) args.emplace_back(t);
  for (auto& s : scalars) args.emplace_back(s);
  KILN_CHECK(!args.empty(), "result_type", "needs at least one operand");
  return detail::result_type(std::span<const Arg>(args));
}

namespace {
template <typename Out, typename In>
void convert_loop(const cpu::Iter& it) {
  cpu::unary_loop<Out, In>(it, [](In v) { return convert<Out>(v); });
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src_in) {
  check_cpu("copy_", {*this, src_in});
  broadcast_shapes(sizes(), src_in.sizes(), "copy_");
  KILN_CHECK(src_in.dim() <= dim(), "copy_", "source of shape ", src_in.sizes().vec(),
             " cannot be broadcast to destination of shape ", sizes().vec());
  Tensor src = src_in.expand(sizes());
  check_no_internal_overlap("copy_", *this);
  if (numel() == 0) return *this;
  src = unalias(*this, src);
  if (src.dtype() == dtype() && src.is_contiguous() && is_contiguous()) {
    if (data_ptr() != src.data_ptr()) std::memmove(data_ptr(), src.data_ptr(), size_t(nbytes()));
    return *this;
  }
  cpu::Iter it({*this, src}, sizes());
  KILN_DISPATCH_ALL(dtype(), "copy_", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
    using Out = scalar_t;
    KILN_DISPATCH_ALL(src.dtype(), "copy_", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_); convert_loop<Out, scalar_t>(it); });
  });
  return *this;
}

Tensor& Tensor::fill_(const Scalar& v) {
  check_cpu("fill_", {*this});
  check_no_internal_overlap("fill_", *this);
  if (numel() == 0) return *this;
  cpu::Iter it({*this}, sizes());
  KILN_DISPATCH_ALL(dtype(), "fill_", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
    scalar_t x = v.is_floating() ? convert<scalar_t>(v.to_double())
                 : v.is_bool()   ? convert<scalar_t>(v.to_bool())
                                 : convert<scalar_t>(v.to_int());
    it.for_each([&](char** p, const int64_t* s, int64_t n) {
      if (s[0] == sizeof(scalar_t)) {
        scalar_t* o = reinterpret_cast<scalar_t*>(p[0]);
        for (int64_t i = 0; i < n; ++i) o[i] = x;
      } else {
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<scalar_t*>(p[0] + i * s[0]) = x;
      }
    });
  });
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0); }

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = empty(sizes(), TensorOptions(dtype()).device(device()));
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype()) return *this;
  Tensor out = empty(sizes(), TensorOptions(dt).device(device()));
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  KILN_FAIL("to", "cannot move a tensor from ", device().str(), " to ", d.str(),
            ": this build has no ", d.str(), " support");
}

}  // namespace kiln
