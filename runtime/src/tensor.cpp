// Tensor metadata, host access and views. Views build a new TensorImpl on the same storage.
#include "kiln/runtime/tensor.h"

#include <atomic>

#include "kiln/runtime/factories.h"
#include "kiln/runtime/ops.h"
#include "shape.h"
#include "trace_ops.h"

namespace kiln {

uint64_t next_tensor_serial() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

void TensorImpl::refresh() {
  numel = shape::numel(sizes);
  contiguous = shape::is_contiguous(sizes, strides);
}

namespace {
Tensor make_view(const Tensor& base, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                 int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->refresh();
  return Tensor(std::move(impl));
}
// A view of `base` with the geometry a view rule (kiln/runtime/rules.h) made of base's.
Tensor make_view(const Tensor& base, rules::Strided g) {
  return make_view(base, std::move(g.sizes), std::move(g.strides), g.offset);
}
rules::Strided geometry(const Tensor& t) { return {t.sizes().vec(), t.strides().vec(), t.storage_offset()}; }
}  // namespace

// (autograd.h: the same memory, out of the graph)
Tensor Tensor::detach() const {
  Tensor out = make_view(*this, impl().sizes, impl().strides, impl().offset);
  // While tracing, the view is an alias of the same value (autograd's business is not the
  // graph's: no node records it for autograd).
  if (trace::Recorder* r = trace::active()) {
    trace::Pause p;
    const trace::Operand in[] = {trace::Operand(*this)};
    r->record(OpId::AsStrided, in,
              {{"sizes", impl().sizes}, {"strides", impl().strides}, {"offset", AttrValue(NoneAttr{})}},
              std::span<const Tensor>(&out, 1));
  }
  return out;
}

namespace {
// A slice bound as slice() resolves it: negative counts from the end, then clamped to [0, n].
int64_t slice_bound(const Tensor& t, int64_t d, std::optional<int64_t> b, int64_t dflt) {
  if (!b) return dflt;
  int64_t n = t.size(d), i = *b < 0 ? *b + n : *b;
  return std::clamp<int64_t>(i, 0, n);
}
}  // namespace

int64_t Tensor::size(int64_t d) const {
  d = shape::wrap_dim(d, dim(), "size");
  if (trace::installed_recorders.load(std::memory_order_relaxed)) [[unlikely]]
    trace::metadata_read(*this, trace::Metadata::Size, d, __builtin_return_address(0));
  return impl().sizes[d];
}
int64_t Tensor::stride(int64_t d) const {
  d = shape::wrap_dim(d, dim(), "stride");
  if (trace::installed_recorders.load(std::memory_order_relaxed)) [[unlikely]]
    trace::metadata_read(*this, trace::Metadata::Stride, d, __builtin_return_address(0));
  return impl().strides[d];
}
SymInt Tensor::sym_size(int64_t d) const {
  d = shape::wrap_dim(d, dim(), "sym_size");
  if (trace::Recorder* r = trace::active()) [[unlikely]] return r->sym_size(*this, d);
  return impl().sizes[d];
}
std::vector<SymInt> Tensor::sym_sizes() const {
  std::vector<SymInt> out;
  for (int64_t d = 0; d < dim(); ++d) out.push_back(sym_size(d));
  return out;
}

// ---- host access ----

namespace {
// The element pointer, without the tracing hook (the typed and untyped accessors share it).
void* raw_data(const Tensor& t) {
  KILN_CHECK(t.is_cpu(), "data_ptr", "tensor is on ", t.device().str(), "; copy it with .to(kCPU) first");
  auto* base = static_cast<char*>(t.storage()->data());
  return base ? base + t.storage_offset() * t.element_size() : nullptr;
}
}  // namespace

void* Tensor::data_ptr(std::source_location where) const {
  trace::host_access(*this, trace::HostAccess::DataPtr, where);
  return raw_data(*this);
}

template <typename T>
T* Tensor::data_ptr(std::source_location where) const {
  KILN_CHECK(dtype_of<T>() == dtype(), "data_ptr", "expected scalar type ", name(dtype_of<T>()),
             " but found ", name(dtype()));
  trace::host_access(*this, trace::HostAccess::DataPtr, where);
  return static_cast<T*>(raw_data(*this));
}

Scalar Tensor::item(std::source_location where) const {
  trace::Internal internal_;  // the reads below are the op's, not the user's
  KILN_CHECK(numel() == 1, "item", "a Tensor with ", numel(),
             " elements cannot be converted to Scalar");
  trace::host_access(*this, trace::HostAccess::Item, where);
  trace::Pause p;
  Tensor c = to(kCPU);
  return KILN_DISPATCH_ALL(dtype(), "item", [&](auto scalar_tag_) -> Scalar { using scalar_t = decltype(scalar_tag_);
    scalar_t v = *static_cast<const scalar_t*>(raw_data(c));
    if constexpr (std::is_same_v<scalar_t, bool>) return Scalar(v);
    else if constexpr (std::is_integral_v<scalar_t>) return Scalar(int64_t(v));
    else return Scalar(double(opmath_t<scalar_t>(v)));
  });
}

template <typename T>
T Tensor::item(std::source_location where) const {
  return checked_convert<T>(item(where), "item");
}

template <typename T>
std::vector<T> Tensor::to_vector(std::source_location where) const {
  trace::host_access(*this, trace::HostAccess::ToVector, where);
  trace::Pause p;
  Tensor c = to(kCPU).to(dtype_of<T>()).contiguous();
  const T* ptr = static_cast<const T*>(raw_data(c));
  return std::vector<T>(ptr, ptr + c.numel());
}

Tensor::operator bool() const {
  trace::Internal internal_;  // the reads below are the op's, not the user's
  KILN_CHECK(numel() == 1, "bool", "Boolean value of Tensor with ", numel(),
             " elements is ambiguous; reduce it first (any(), all(), sum() > 0)");
  trace::host_access(*this, trace::HostAccess::Bool, std::source_location(), __builtin_return_address(0));
  trace::Pause p;
  return item().to_bool();
}

#define KILN_INSTANTIATE_HOST(T)                                           \
  template T* Tensor::data_ptr<T>(std::source_location) const;             \
  template T Tensor::item<T>(std::source_location) const;                  \
  template std::vector<T> Tensor::to_vector<T>(std::source_location) const;
KILN_INSTANTIATE_HOST(uint8_t) KILN_INSTANTIATE_HOST(int8_t) KILN_INSTANTIATE_HOST(int16_t)
KILN_INSTANTIATE_HOST(int32_t) KILN_INSTANTIATE_HOST(int64_t) KILN_INSTANTIATE_HOST(Half)
KILN_INSTANTIATE_HOST(BFloat16) KILN_INSTANTIATE_HOST(float) KILN_INSTANTIATE_HOST(double)
template bool* Tensor::data_ptr<bool>(std::source_location) const;
template bool Tensor::item<bool>(std::source_location) const;
#undef KILN_INSTANTIATE_HOST

// std::vector<bool> is packed, so bool goes through its own copy loop.
template <>
std::vector<bool> Tensor::to_vector<bool>(std::source_location where) const {
  trace::host_access(*this, trace::HostAccess::ToVector, where);
  trace::Pause p;
  Tensor c = to(kCPU).to(kBool).contiguous();
  const bool* ptr = static_cast<const bool*>(raw_data(c));
  return std::vector<bool>(ptr, ptr + c.numel());
}

// ---- views ----

Tensor Tensor::view(IntArrayRef shape_) const {
  KILN_TRACE(View, (*this), ({"sizes", kiln_out_.sizes().vec()}), view(shape_))
  return make_view(*this, rules::view(geometry(*this), shape_, shape::fail_as("view")));
}

Tensor Tensor::reshape(IntArrayRef shape_) const {
  trace::Internal internal_;  // the reads below are the op's, not the user's
  auto sizes = shape::infer_size(shape_, numel(), "reshape");
  // While tracing, reshape is recorded as what it does: a view, or a copy and a view.
  if (trace::active()) [[unlikely]]
    return shape::view_strides(impl().sizes, impl().strides, sizes) ? view(sizes) : contiguous().view(sizes);
  if (auto st = shape::view_strides(impl().sizes, impl().strides, sizes))
    return make_view(*this, std::move(sizes), std::move(*st), storage_offset());
  return contiguous().view(sizes);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  KILN_TRACE(Transpose, (*this), ({"dim0", shape::wrap_dim(d0, dim(), "transpose")}, {"dim1", shape::wrap_dim(d1, dim(), "transpose")}), transpose(d0, d1))
  return make_view(*this, rules::transpose(geometry(*this), d0, d1, shape::fail_as("transpose")));
}

Tensor Tensor::t() const {
  trace::Internal internal_;  // the reads below are the op's, not the user's
  KILN_CHECK(dim() <= 2, "t", "t() expects a tensor with <= 2 dimensions, but self is ", dim(), "D");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::permute(IntArrayRef dims) const {
  KILN_TRACE(Permute, (*this), ({"dims", [&] {
               IntList w;
               for (int64_t d : dims) w.push_back(shape::wrap_dim(d, dim(), "permute"));
               return w;
             }()}), permute(dims))
  return make_view(*this, rules::permute(geometry(*this), dims, shape::fail_as("permute")));
}

Tensor Tensor::slice(int64_t d, std::optional<int64_t> start, std::optional<int64_t> end,
                     int64_t step) const {
  // Recorded with the dim wrapped and the bounds clamped, as the view was taken.
  KILN_TRACE(Slice, (*this), ({"dim", shape::wrap_dim(d, dim(), "slice")},
                              {"start", slice_bound(*this, d, start, 0)},
                              {"end", slice_bound(*this, d, end, size(d))}, {"step", step}),
             slice(d, start, end, step))
  return make_view(*this, rules::slice(geometry(*this), d, start, end, step, shape::fail_as("slice")));
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  trace::Internal internal_;  // the reads below are the op's, not the user's
  KILN_CHECK(dim() > 0, "narrow", "narrow() cannot be applied to a 0-dim tensor");
  d = shape::wrap_dim(d, dim(), "narrow");
  int64_t n = impl().sizes[d];
  KILN_CHECK(start >= -n && start <= n, "narrow", "start (", start,
             ") is out of range for dimension ", d, " of size ", n);
  if (start < 0) start += n;
  KILN_CHECK(length >= 0 && length <= n - start, "narrow", "start (", start, ") + length (",
             length, ") exceeds dimension size (", n, ")");
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  KILN_TRACE(Select, (*this), ({"dim", shape::wrap_dim(d, dim(), "select")}, {"index", index < 0 ? index + size(d) : index}), select(d, index))
  return make_view(*this, rules::select(geometry(*this), d, index, shape::fail_as("select")));
}

namespace {
// x.index({...}) for the call `op` that indexes (index, index_put_): an error names that call,
// not the select or slice it takes, and counts dims as x's, as PyTorch's messages do.
Tensor apply_index(const Tensor& x, const std::vector<indexing::TensorIndex>& idx, std::string_view op) {
  using K = indexing::TensorIndex::Kind;
  int64_t consumed = 0, ellipses = 0;
  for (auto& i : idx) {
    if (i.kind == K::Integer || i.kind == K::Slice) ++consumed;
    if (i.kind == K::Ellipsis) ++ellipses;
  }
  KILN_CHECK(ellipses <= 1, op, "an index can only have a single ellipsis ('...')");
  KILN_CHECK(consumed <= x.dim(), op, "too many indices for tensor of dimension ", x.dim(),
             " (got ", consumed, ")");
  Tensor r = x;
  int64_t d = 0, xd = 0;  // the dim of r an entry applies to, and the dim of x it stands for
  for (auto& i : idx) {
    switch (i.kind) {
      case K::Integer: {
        const int64_t n = r.sizes()[size_t(d)];
        KILN_CHECK(i.integer >= -n && i.integer < n, op, "index ", i.integer,
                   " is out of bounds for dimension ", xd, " with size ", n);
        r = r.select(d, i.integer);
        ++xd;
        break;
      }
      case K::Slice: r = r.slice(d, i.slice.start, i.slice.stop, i.slice.step); ++d; ++xd; break;
      case K::None: r = r.unsqueeze(d); ++d; break;
      case K::Ellipsis: d += x.dim() - consumed; xd += x.dim() - consumed; break;
    }
  }
  return r;
}
}  // namespace

Tensor Tensor::index(std::initializer_list<indexing::TensorIndex> idx) const {
  return index(std::vector<indexing::TensorIndex>(idx));
}

Tensor Tensor::index(const std::vector<indexing::TensorIndex>& idx) const {
  trace::Internal internal_;  // the reads below are the op's, not the user's
  return apply_index(*this, idx, "index");
}

Tensor& Tensor::index_put_(std::initializer_list<indexing::TensorIndex> idx, const Tensor& v) {
  trace::Internal internal_;  // the reads below are the op's, not the user's
  apply_index(*this, std::vector<indexing::TensorIndex>(idx), "index_put_").copy_(v);
  return *this;
}
Tensor& Tensor::index_put_(std::initializer_list<indexing::TensorIndex> idx, const Scalar& v) {
  trace::Internal internal_;  // the reads below are the op's, not the user's
  apply_index(*this, std::vector<indexing::TensorIndex>(idx), "index_put_").fill_(v);
  return *this;
}

Tensor& Tensor::operator=(const Tensor& src) && {
  copy_(src);
  return *this;
}
Tensor& Tensor::operator=(const Scalar& v) && {
  fill_(v);
  return *this;
}

Tensor Tensor::expand(IntArrayRef target) const {
  KILN_TRACE(Expand, (*this), ({"sizes", kiln_out_.sizes().vec()}), expand(target))
  return make_view(*this, rules::expand(geometry(*this), target, shape::fail_as("expand")));
}

Tensor Tensor::squeeze() const {
  KILN_TRACE(Squeeze, (*this), ({"dims", IntList{}}), squeeze())
  return make_view(*this, rules::squeeze(geometry(*this), {}, shape::fail_as("squeeze")));
}

Tensor Tensor::squeeze(int64_t d) const {
  KILN_TRACE(Squeeze, (*this), ({"dims", IntList{shape::wrap_dim(d, dim(), "squeeze")}}), squeeze(d))
  return make_view(*this, rules::squeeze(geometry(*this), IntArrayRef(d), shape::fail_as("squeeze")));
}

Tensor Tensor::unsqueeze(int64_t d) const {
  KILN_TRACE(Unsqueeze, (*this), ({"dim", shape::wrap_dim(d, dim() + 1, "unsqueeze")}), unsqueeze(d))
  return make_view(*this, rules::unsqueeze(geometry(*this), d, shape::fail_as("unsqueeze")));
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  trace::Internal internal_;  // the reads below are the op's, not the user's
  if (dim() == 0) return reshape({1});
  start = shape::wrap_dim(start, dim(), "flatten");
  end = shape::wrap_dim(end, dim(), "flatten");
  KILN_CHECK(start <= end, "flatten", "start_dim (", start, ") cannot come after end_dim (", end, ")");
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < start; ++i) sizes.push_back(impl().sizes[i]);
  // (a size-0 dim elsewhere lets the flattened ones' product pass int64)
  int64_t m = shape::numel(IntArrayRef(impl().sizes.data() + start, size_t(end - start + 1)), "flatten");
  sizes.push_back(m);
  for (int64_t i = end + 1; i < dim(); ++i) sizes.push_back(impl().sizes[i]);
  return reshape(sizes);
}

Tensor Tensor::diagonal(int64_t offset, int64_t d1, int64_t d2) const {
  KILN_TRACE(Diagonal, (*this), ({"offset", offset}, {"dim1", shape::wrap_dim(d1, dim(), "diagonal")}, {"dim2", shape::wrap_dim(d2, dim(), "diagonal")}), diagonal(offset, d1, d2))
  return make_view(*this, rules::diagonal(geometry(*this), offset, d1, d2, shape::fail_as("diagonal")));
}

Tensor Tensor::as_strided(IntArrayRef sizes, IntArrayRef st, std::optional<int64_t> off) const {
  KILN_TRACE(AsStrided, (*this), ({"sizes", sizes.vec()}, {"strides", st.vec()}, {"offset", off ? AttrValue(*off) : AttrValue(NoneAttr{})}), as_strided(sizes, st, off))
  KILN_CHECK(sizes.size() == st.size(), "as_strided", "mismatch in length of strides (", st.size(),
             ") and shape (", sizes.size(), ")");
  int64_t offset = off.value_or(storage_offset());
  for (size_t i = 0; i < sizes.size(); ++i)
    KILN_CHECK(sizes[i] >= 0 && st[i] >= 0, "as_strided", "negative size or stride: sizes ",
               sizes.vec(), ", strides ", st.vec());
  KILN_CHECK(offset >= 0, "as_strided", "negative storage offset ", offset);
  shape::numel(sizes, "as_strided");
  // The view must stay inside its storage, its last byte included: a reach past int64 wraps
  // into a small count (2 elements 2^61 apart on a 16-byte storage) and would pass a plain check.
  std::optional<int64_t> need = shape::storage_bytes(sizes, st, offset, element_size());
  KILN_CHECK(need && uint64_t(*need) <= storage()->nbytes(), "as_strided", "setStorage: sizes ", sizes.vec(),
             ", strides ", st.vec(), ", storage offset ", offset, " and itemsize ", element_size(), " require ",
             need ? std::to_string(*need) + " bytes" : std::string("more bytes than int64 can count"),
             ", out of bounds for storage of size ", storage()->nbytes());
  return make_view(*this, sizes.vec(), st.vec(), offset);
}

std::vector<Tensor> Tensor::split(int64_t split_size, int64_t d) const {
  trace::Internal internal_;  // the reads below are the op's, not the user's
  KILN_CHECK(dim() > 0, "split", "split expects at least a 1-dimensional tensor");
  d = shape::wrap_dim(d, dim(), "split");
  int64_t n = impl().sizes[d];
  KILN_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split",
             "split_size can only be 0 if dimension size is 0, but got dimension size of ", n);
  std::vector<Tensor> out;
  if (n == 0) return {*this};
  for (int64_t s = 0; s < n; s += split_size) out.push_back(narrow(d, s, std::min(split_size, n - s)));
  return out;
}

std::vector<Tensor> Tensor::split(IntArrayRef sizes, int64_t d) const {
  trace::Internal internal_;  // the reads below are the op's, not the user's
  KILN_CHECK(dim() > 0, "split", "split expects at least a 1-dimensional tensor");
  d = shape::wrap_dim(d, dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, "split", "split sizes must be non-negative, got ", sizes.vec());
    KILN_CHECK(!__builtin_add_overflow(total, s, &total), "split", "split sizes ", sizes.vec(),
               " sum past int64");
  }
  KILN_CHECK(total == impl().sizes[d], "split", "split_with_sizes expects split_sizes to sum exactly to ",
             impl().sizes[d], " (input tensor's size at dimension ", d, "), but got split_sizes=",
             sizes.vec());
  std::vector<Tensor> out;
  int64_t s = 0;
  for (int64_t len : sizes) {
    out.push_back(narrow(d, s, len));
    s += len;
  }
  return out;
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t d) const {
  trace::Internal internal_;  // the reads below are the op's, not the user's
  KILN_CHECK(dim() > 0, "chunk", "chunk expects at least a 1-dimensional tensor");
  KILN_CHECK(chunks > 0, "chunk", "chunk expects `chunks` to be greater than 0, got: ", chunks);
  d = shape::wrap_dim(d, dim(), "chunk");
  int64_t n = impl().sizes[d];
  int64_t each = n / chunks + (n % chunks != 0);  // (n + chunks - 1) / chunks overflows for a large `chunks`
  if (each == 0) {
    std::vector<Tensor> out;
    for (int64_t i = 0; i < chunks; ++i) out.push_back(narrow(d, 0, 0));
    return out;
  }
  return split(each, d);
}

std::vector<Tensor> Tensor::unbind(int64_t d) const {
  trace::Internal internal_;  // the reads below are the op's, not the user's
  KILN_CHECK(dim() > 0, "unbind", "unbind expects at least a 1-dimensional tensor");
  d = shape::wrap_dim(d, dim(), "unbind");
  std::vector<Tensor> out;
  for (int64_t i = 0; i < impl().sizes[d]; ++i) out.push_back(select(d, i));
  return out;
}

}  // namespace kiln
