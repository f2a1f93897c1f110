// copy_, fill_, conversions, contiguous/clone, and the broadcasting helpers.
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/float16_blocks.h"
#include "ops_common.h"

namespace kiln {

using namespace detail;

std::vector<int64_t> broadcast_shapes(IntArrayRef a, IntArrayRef b, std::string_view op) {
  return rules::broadcast_shapes(a, b, shape::fail_as(op));
}

std::vector<Tensor> broadcast_tensors(const std::vector<Tensor>& ts) {
  trace::Internal internal_;  // the reads below are the op's, not the user's
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
  if constexpr ((std::is_same_v<Out, float> && is_reduced_float_v<In>) ||
                (std::is_same_v<In, float> && is_reduced_float_v<Out>)) {
    // (float32 to and from 16-bit floats by vectors: float16_blocks.h)
    it.for_each([&](char** p, const int64_t* s, int64_t n) {
      if (s[0] == sizeof(Out) && s[1] == sizeof(In)) {
        if constexpr (std::is_same_v<Out, float>) cpu::widen(reinterpret_cast<const In*>(p[1]), reinterpret_cast<float*>(p[0]), n);
        else cpu::narrow(reinterpret_cast<const float*>(p[1]), reinterpret_cast<Out*>(p[0]), n);
      } else {
        for (int64_t i = 0; i < n; ++i)
          *reinterpret_cast<Out*>(p[0] + i * s[0]) = convert<Out>(*reinterpret_cast<const In*>(p[1] + i * s[1]));
      }
    });
  } else {
    cpu::unary_loop<Out, In>(it, [](In v) { return convert<Out>(v); });
  }
}

// A copy whose source is contiguous along another dim than the destination (x.t().contiguous(),
// a permute's copy): the Iter's inner loop walks the destination, so every element read is a
// new cache line of the source (a [4096, 1024] float32 transpose took 12 ms, PyTorch 2.9).
// Tiles of kTile x kTile elements over the two dims are read and written within the L1 cache.
// Returns false where the layout is not such a transpose.
bool copy_by_tiles(const cpu::Iter& it, size_t w) {
  const int nd = it.ndim();
  if (nd < 2 || it.stride(0, 0) != int64_t(w) || it.stride(1, 0) == int64_t(w)) return false;
  int j = -1;
  for (int d = 1; d < nd; ++d)
    if (it.stride(1, d) == int64_t(w)) j = d;
  if (j < 0) return false;
  constexpr int64_t kTile = 32;
  const std::vector<int64_t>& S = it.shape();
  if (S[0] < kTile || S[size_t(j)] < kTile) return false;
  const int64_t t0 = (S[0] + kTile - 1) / kTile, tj = (S[size_t(j)] + kTile - 1) / kTile;
  int64_t outer = 1;
  for (int d = 1; d < nd; ++d)
    if (d != j) outer *= S[size_t(d)];
  auto tiles = [&](auto tag) {
    using U = decltype(tag);
    const int64_t o0 = it.stride(0, 0), oj = it.stride(0, j), i0 = it.stride(1, 0);
    cpu::parallel_for(t0 * tj * outer, std::max<int64_t>(1, cpu::parallel_grain() / (kTile * kTile)),
                      [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        int64_t rest = t / (t0 * tj);
        const int64_t a0 = (t % t0) * kTile, aj = (t / t0 % tj) * kTile;
        char* out = it.base(0) + a0 * o0 + aj * oj;
        const char* in = it.base(1) + a0 * i0 + aj * int64_t(w);
        for (int d = 1; d < nd; ++d) {  // the outer dims' offsets
          if (d == j) continue;
          const int64_t k = rest % S[size_t(d)];
          rest /= S[size_t(d)];
          out += k * it.stride(0, d);
          in += k * it.stride(1, d);
        }
        const int64_t n0 = std::min(kTile, S[0] - a0), nj = std::min(kTile, S[size_t(j)] - aj);
        // Through a padded local tile: each source row is read whole, each destination row
        // written whole. (Strides that are multiples of 4 KiB put every row of a tile in one
        // L1 set; going back and forth between 32 of them thrashed it.)
        U tile[kTile][kTile + 1];
        for (int64_t y = 0; y < n0; ++y) {
          const U* row = reinterpret_cast<const U*>(in + y * i0);
          for (int64_t x = 0; x < nj; ++x) tile[x][y] = row[x];
        }
        for (int64_t x = 0; x < nj; ++x) {
          U* row = reinterpret_cast<U*>(out + x * oj);
          for (int64_t y = 0; y < n0; ++y) row[y] = tile[x][y];
        }
      }
    });
  };
  by_storage_size(int64_t(w), tiles);
  return true;
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src_in) {
  if (autograd::detail::active() && autograd::detail::any_requires_grad({*this, src_in})) [[unlikely]] {
    Tensor old = autograd::detail::before_inplace(*this, OpId::Copy, "copy_");
    {
      AutoGradMode off(false);
      copy_(src_in);
    }
    trace::Operand in[] = {old, src_in};
    autograd::detail::attach_inplace(*this, OpId::Copy, in, [] { return std::vector<Attr>{}; });
    return *this;
  }
  // While tracing: the copy runs as eager runs it, and is recorded as a write-back of src.
  if (trace::Recorder* r = trace::active()) [[unlikely]] {
    {
      trace::Pause p;
      copy_(src_in);
    }
    r->write_back(*this, src_in);
    return *this;
  }
  storage()->bump_version();
  if (!is_cpu() || !src_in.is_cpu()) return copy_across_devices(*this, src_in);
  broadcast_shapes(sizes(), src_in.sizes(), "copy_");
  KILN_CHECK(src_in.dim() <= dim(), "copy_", "source of shape ", src_in.sizes().vec(),
             " cannot be broadcast to destination of shape ", sizes().vec());
  Tensor src = src_in.expand(sizes());
  check_no_internal_overlap("copy_", *this);
  if (numel() == 0) return *this;
  src = unalias(*this, src);
  if (src.dtype() == dtype() && src.is_contiguous() && is_contiguous()) {
    // (unalias left src either this very view or memory that does not overlap it)
    if (data_ptr() != src.data_ptr()) cpu::copy_bytes(data_ptr(), src.data_ptr(), size_t(nbytes()));
    return *this;
  }
  cpu::Iter it({*this, src}, sizes());
  if (src.dtype() == dtype() && copy_by_tiles(it, itemsize(dtype()))) return *this;
  KILN_DISPATCH_ALL(dtype(), "copy_", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
    using Out = scalar_t;
    KILN_DISPATCH_ALL(src.dtype(), "copy_", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_); convert_loop<Out, scalar_t>(it); });
  });
  return *this;
}

namespace {
// Converts a fill value to the tensor's element type, refusing values that do not fit, as
// PyTorch does (c10's checked_convert): an unsigned type accepts negative integers down to
// -max (they wrap) but no negative float; floats may be +-inf or NaN but no finite value
// beyond the type's range.
template <typename T>
T checked_fill_value(const Scalar& v, std::string_view op) {
  rules::check_fill_value(v, dtype_of<T>(), shape::fail_as(op));
  if constexpr (std::is_same_v<T, bool>) return v.to_bool();
  else if constexpr (std::is_integral_v<T>) return v.is_floating() ? T(v.to_double()) : T(v.to_int());
  else return convert<T>(v.to_double());
}
}  // namespace

Tensor& Tensor::fill_(const Scalar& v) {
  if (autograd::detail::active() && autograd::detail::any_requires_grad({*this})) [[unlikely]] {
    Tensor old = autograd::detail::before_inplace(*this, OpId::Fill, "fill_");
    {
      AutoGradMode off(false);
      fill_(v);
    }
    trace::Operand in[] = {old};
    autograd::detail::attach_inplace(*this, OpId::Fill, in, [&] { return std::vector<Attr>{{"value", scalar_attr(v)}}; });
    return *this;
  }
  // While tracing: a `fill` node (a filled tensor like this one) and its write-back.
  if (trace::Recorder* r = trace::active()) [[unlikely]] {
    Tensor filled;
    {
      trace::Pause p;
      fill_(v);  // eager's checks and the write itself
      filled = empty(sizes(), TensorOptions(dtype()).device(device())).fill_(v);
    }
    trace::Operand in[] = {*this};
    r->record(OpId::Fill, in, {{"value", scalar_attr(v)}}, {&filled, 1});
    r->write_back(*this, filled);
    return *this;
  }
  storage()->bump_version();
  if (!is_cpu()) {
    // The value is checked and converted by a host fill of one element, which goes over and is
    // broadcast into this tensor by a device copy. A stride-0 dim (an expanded view) names one
    // location along its whole length: the copy writes the view with such dims cut to one
    // element, which is every location the view reaches (a copy refuses the overlap, a fill
    // of one value is well defined through it).
    std::vector<int64_t> one_each = sizes().vec();
    for (int64_t d = 0; d < dim(); ++d)
      if (strides()[d] == 0) one_each[size_t(d)] = std::min<int64_t>(one_each[size_t(d)], 1);
    Tensor reached = as_strided(one_each, strides().vec(), storage_offset());
    copy_across_devices(reached, empty({}, TensorOptions(dtype())).fill_(v).to(device()));
    return *this;
  }
  // No overlap check: writing one value through a stride-0 view is well defined.
  KILN_DISPATCH_ALL(dtype(), "fill_", [&](auto scalar_tag_) {
    using scalar_t = decltype(scalar_tag_);
    scalar_t x = checked_fill_value<scalar_t>(v, "fill_");
    if (numel() == 0) return;
    cpu::Iter it({*this}, sizes());
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
  KILN_TRACE(Clone, (*this), (), clone())
  Tensor out = empty(sizes(), TensorOptions(dtype()).device(device()));
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype()) return *this;
  KILN_TRACE(Cast, (*this), ({"dtype", dt}), to(dt))
  Tensor out = empty(sizes(), TensorOptions(dt).device(device()));
  out.copy_(*this);
  return out;
}

}  // namespace kiln
