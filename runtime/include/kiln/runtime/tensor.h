// Tensor: a handle to a strided view of a reference-counted Storage.
//
// A tensor is (storage, sizes, strides, storage offset, dtype). Copying a Tensor copies the
// handle, not the data; views (view, transpose, slice, expand, ...) make a new handle on the
// same storage, so a write through a view is seen by its base. Strides and the offset are in
// elements. Semantics follow PyTorch: broadcasting, type promotion, in-place rules.
//
// Assignment follows libtorch: `a = b` on a named tensor rebinds the handle; assignment to a
// temporary view copies into it: `x.slice(0, 0, 2) = y;`, `x.index({1}) = 0.5;`.
#pragma once
#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "array_ref.h"
#include "device.h"
#include "dtype.h"
#include "error.h"
#include "scalar.h"
#include "storage.h"
#include "symint.h"

namespace kiln {

namespace shape {
// Row-major strides (in elements) of a dense tensor of these sizes.
std::vector<int64_t> contiguous_strides(IntArrayRef sizes);
}  // namespace shape

class Tensor;
namespace autograd {
struct Meta;
class Node;
}  // namespace autograd
namespace trace {
// The metadata of a tensor that host code can read (and so base a decision on).
enum class Metadata : uint8_t { Sizes, Size, Numel, Strides, Stride, Contiguity, Offset };
// Recorders installed on any thread (paused ones included): the metadata accessors below test
// this first, so that eager code pays one relaxed load when no thread is tracing.
extern std::atomic<int> installed_recorders;
// Reports a read of `t`'s metadata to the thread's recorder when it is the user's (trace.h);
// `pc` is the reader's code address (null: the caller of this function).
void metadata_read(const Tensor& t, Metadata what, int64_t dim, const void* pc = nullptr);
}  // namespace trace

// A process-wide creation counter: the tracer tells tensors that existed before a trace began
// (captured by the function's closure) from tensors the traced function made.
uint64_t next_tensor_serial();

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t offset = 0;  // in elements
  int64_t numel = 1;
  DType dtype = DType::Float32;
  bool contiguous = true;  // cached: row-major dense
  uint64_t serial = next_tensor_serial();
  std::shared_ptr<autograd::Meta> autograd;  // requires_grad, grad, grad_fn (autograd.h); null: none
  void refresh();          // recomputes numel and contiguous after sizes/strides change
};

// Options for factories: kiln::zeros({2, 3}, kInt32), kiln::ones({4}, TensorOptions(kFloat64)).
struct TensorOptions {
  std::optional<DType> dtype_;
  Device device_ = Device::cpu();
  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d) {}
  TensorOptions(Device d) : device_(d) {}
  TensorOptions dtype(DType d) const { auto o = *this; o.dtype_ = d; return o; }
  TensorOptions device(Device d) const { auto o = *this; o.device_ = d; return o; }
  DType dtype_or(DType fallback) const { return dtype_.value_or(fallback); }
};
inline TensorOptions dtype(DType d) { return TensorOptions(d); }
inline TensorOptions device(Device d) { return TensorOptions(d); }

namespace indexing {
struct NoneT {};
struct EllipsisT {};
inline constexpr NoneT None{};
inline constexpr EllipsisT Ellipsis{};
// Python's start:stop:step; an absent bound means the whole range.
struct Slice {
  std::optional<int64_t> start, stop;
  int64_t step = 1;
  Slice(std::optional<int64_t> start_ = std::nullopt, std::optional<int64_t> stop_ = std::nullopt,
        int64_t step_ = 1)
      : start(start_), stop(stop_), step(step_) {}
};
// One entry of x.index({...}): an integer (selects), a Slice, None (new axis) or Ellipsis.
struct TensorIndex {
  enum class Kind : uint8_t { Integer, Slice, None, Ellipsis } kind;
  int64_t integer = 0;
  Slice slice;
  TensorIndex(int64_t i) : kind(Kind::Integer), integer(i) {}
  TensorIndex(int i) : kind(Kind::Integer), integer(i) {}
  TensorIndex(Slice s) : kind(Kind::Slice), slice(s) {}
  TensorIndex(NoneT) : kind(Kind::None) {}
  TensorIndex(EllipsisT) : kind(Kind::Ellipsis) {}
};
}  // namespace indexing

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  Tensor(const Tensor&) = default;
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(const Tensor& o) & = default;
  Tensor& operator=(Tensor&& o) & noexcept = default;
  // Assigning into a temporary (a view) writes through it, as in libtorch.
  Tensor& operator=(const Tensor& src) &&;
  Tensor& operator=(const Scalar& v) &&;

  // ---- metadata ----
  // While a compiled function is traced, the sizes, strides and layout the user's code reads
  // become guards (docs/compile.md, "Sizes and host code"): size() specialises the graph on
  // the size; sym_size() keeps it symbolic, guarding only on the comparisons made with it.
  bool defined() const { return impl_ != nullptr; }
  int64_t dim() const { return int64_t(impl().sizes.size()); }
  int64_t ndimension() const { return dim(); }
  IntArrayRef sizes() const { note(trace::Metadata::Sizes); return impl().sizes; }
  IntArrayRef strides() const { note(trace::Metadata::Strides); return impl().strides; }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  SymInt sym_size(int64_t d) const;
  std::vector<SymInt> sym_sizes() const;
  int64_t numel() const { note(trace::Metadata::Numel); return impl().numel; }
  DType dtype() const { return impl().dtype; }
  DType scalar_type() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  int64_t storage_offset() const { note(trace::Metadata::Offset); return impl().offset; }
  int64_t element_size() const { return itemsize(dtype()); }
  int64_t nbytes() const {
    int64_t n;  // (an expanded view can count more elements than memory holds bytes)
    KILN_CHECK(!__builtin_mul_overflow(numel(), element_size(), &n), "nbytes", "a tensor of shape ", impl().sizes,
               " has more bytes than int64 can count");
    return n;
  }
  bool is_contiguous() const { note(trace::Metadata::Contiguity); return impl().contiguous; }
  bool is_floating_point() const { return is_floating(dtype()); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  // True when both views read the same storage.
  bool is_alias_of(const Tensor& o) const { return impl().storage == o.impl().storage; }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  TensorImpl& impl() const {
    KILN_CHECK(impl_, "tensor", "use of an undefined tensor (default-constructed kiln::Tensor)");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  // PyTorch's printed form. (Like every host access below, a graph break while tracing.)
  std::string str(std::source_location where = std::source_location::current()) const;

  // ---- host access (CPU tensors) ----
  // Inside a compiled function each of these turns a traced value into a host value: a graph
  // break (see docs/compile.md). `where` records the caller's source location for explain().
  void* data_ptr(std::source_location where = std::source_location::current()) const;
  template <typename T> T* data_ptr(std::source_location where = std::source_location::current()) const;
  template <typename T> T item(std::source_location where = std::source_location::current()) const;
  Scalar item(std::source_location where = std::source_location::current()) const;
  // The elements in row-major order, converted to T.
  template <typename T>
  std::vector<T> to_vector(std::source_location where = std::source_location::current()) const;
  // Python's `if t:`: true/false for a one-element tensor, an error otherwise. (A conversion
  // operator takes no arguments, so a break here records the caller's code address instead of
  // a source location; `t.item<bool>()` records file and line.)
  explicit operator bool() const;

  // ---- views (share storage, never copy) ----
  Tensor view(IntArrayRef shape) const;
  Tensor view_as(const Tensor& o) const { return view(o.impl().sizes); }
  Tensor reshape(IntArrayRef shape) const;  // a view when strides allow, else a copy
  Tensor reshape_as(const Tensor& o) const { return reshape(o.impl().sizes); }
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;
  Tensor permute(IntArrayRef dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor slice(int64_t dim = 0, std::optional<int64_t> start = std::nullopt,
               std::optional<int64_t> end = std::nullopt, int64_t step = 1) const;
  Tensor index(std::initializer_list<indexing::TensorIndex> idx) const;
  Tensor index(const std::vector<indexing::TensorIndex>& idx) const;
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> idx, const Tensor& v);
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> idx, const Scalar& v);
  Tensor operator[](int64_t i) const { return select(0, i); }
  Tensor expand(IntArrayRef sizes) const;
  Tensor expand_as(const Tensor& o) const { return expand(o.impl().sizes); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor diagonal(int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1) const;
  Tensor as_strided(IntArrayRef sizes, IntArrayRef strides,
                    std::optional<int64_t> storage_offset = std::nullopt) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(IntArrayRef split_sizes, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;

  // ---- copies and conversion ----
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dt) const;  // returns *this when already of that dtype
  // To another device. A copy to a GPU is enqueued on the device's stream; with non_blocking
  // the host does not wait (the source must then be pinned for the copy to overlap; kiln keeps
  // it alive until the copy has run). A copy to the cpu waits for the GPU, unless non_blocking:
  // then the result is pinned memory that holds the values after kiln::cuda::synchronize().
  Tensor to(Device d, bool non_blocking = false) const;
  Tensor pin_memory() const;  // a copy in page-locked host memory (CUDA's driver must load)
  bool is_pinned() const;
  Tensor& copy_(const Tensor& src);  // broadcasts src, converts dtype
  Tensor& fill_(const Scalar& v);
  Tensor& zero_();

  // ---- elementwise ----
#define KILN_UNARY_METHOD(name) Tensor name() const;
  KILN_UNARY_METHOD(neg) KILN_UNARY_METHOD(abs) KILN_UNARY_METHOD(sign) KILN_UNARY_METHOD(exp)
  KILN_UNARY_METHOD(exp2) KILN_UNARY_METHOD(expm1) KILN_UNARY_METHOD(log) KILN_UNARY_METHOD(log2)
  KILN_UNARY_METHOD(log1p) KILN_UNARY_METHOD(sqrt) KILN_UNARY_METHOD(rsqrt)
  KILN_UNARY_METHOD(reciprocal) KILN_UNARY_METHOD(sin) KILN_UNARY_METHOD(cos)
  KILN_UNARY_METHOD(tan) KILN_UNARY_METHOD(asin) KILN_UNARY_METHOD(acos) KILN_UNARY_METHOD(atan)
  KILN_UNARY_METHOD(sinh) KILN_UNARY_METHOD(cosh) KILN_UNARY_METHOD(tanh)
  KILN_UNARY_METHOD(sigmoid) KILN_UNARY_METHOD(relu) KILN_UNARY_METHOD(silu)
  KILN_UNARY_METHOD(erf) KILN_UNARY_METHOD(floor) KILN_UNARY_METHOD(ceil)
  KILN_UNARY_METHOD(round) KILN_UNARY_METHOD(trunc) KILN_UNARY_METHOD(isnan)
  KILN_UNARY_METHOD(isinf) KILN_UNARY_METHOD(isfinite) KILN_UNARY_METHOD(logical_not)
  KILN_UNARY_METHOD(bitwise_not)
#undef KILN_UNARY_METHOD
  Tensor gelu(std::string_view approximate = "none") const;
  Tensor nan_to_num(std::optional<double> nan = std::nullopt,
                    std::optional<double> posinf = std::nullopt,
                    std::optional<double> neginf = std::nullopt) const;
  Tensor add(const Tensor& o, const Scalar& alpha = 1) const;
  Tensor add(const Scalar& o, const Scalar& alpha = 1) const;
  Tensor sub(const Tensor& o, const Scalar& alpha = 1) const;
  Tensor sub(const Scalar& o, const Scalar& alpha = 1) const;
  Tensor mul(const Tensor& o) const;
  Tensor mul(const Scalar& o) const;
  Tensor div(const Tensor& o, std::optional<std::string_view> rounding_mode = std::nullopt) const;
  Tensor div(const Scalar& o, std::optional<std::string_view> rounding_mode = std::nullopt) const;
  Tensor pow(const Tensor& e) const;
  Tensor pow(const Scalar& e) const;
  Tensor remainder(const Tensor& o) const;
  Tensor remainder(const Scalar& o) const;
  Tensor fmod(const Tensor& o) const;
  Tensor fmod(const Scalar& o) const;
  Tensor floor_divide(const Tensor& o) const;
  Tensor floor_divide(const Scalar& o) const;
  Tensor maximum(const Tensor& o) const;
  Tensor minimum(const Tensor& o) const;
  Tensor atan2(const Tensor& o) const;
  Tensor eq(const Tensor& o) const; Tensor eq(const Scalar& o) const;
  Tensor ne(const Tensor& o) const; Tensor ne(const Scalar& o) const;
  Tensor lt(const Tensor& o) const; Tensor lt(const Scalar& o) const;
  Tensor le(const Tensor& o) const; Tensor le(const Scalar& o) const;
  Tensor gt(const Tensor& o) const; Tensor gt(const Scalar& o) const;
  Tensor ge(const Tensor& o) const; Tensor ge(const Scalar& o) const;
  Tensor logical_and(const Tensor& o) const;
  Tensor logical_or(const Tensor& o) const;
  Tensor logical_xor(const Tensor& o) const;
  Tensor bitwise_and(const Tensor& o) const; Tensor bitwise_and(const Scalar& o) const;
  Tensor bitwise_or(const Tensor& o) const; Tensor bitwise_or(const Scalar& o) const;
  Tensor bitwise_xor(const Tensor& o) const; Tensor bitwise_xor(const Scalar& o) const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
  Tensor masked_fill(const Tensor& mask, const Scalar& v) const;

  // ---- in place (the result keeps this tensor's dtype; writes reach the base of a view) ----
  Tensor& add_(const Tensor& o, const Scalar& alpha = 1);
  Tensor& add_(const Scalar& o, const Scalar& alpha = 1);
  Tensor& sub_(const Tensor& o, const Scalar& alpha = 1);
  Tensor& sub_(const Scalar& o, const Scalar& alpha = 1);
  Tensor& mul_(const Tensor& o);
  Tensor& mul_(const Scalar& o);
  Tensor& div_(const Tensor& o, std::optional<std::string_view> rounding_mode = std::nullopt);
  Tensor& div_(const Scalar& o, std::optional<std::string_view> rounding_mode = std::nullopt);
  Tensor& relu_();
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
  Tensor& masked_fill_(const Tensor& mask, const Scalar& v);

  // ---- reductions (an empty dim list means all dims) ----
  Tensor sum(std::optional<DType> dtype = std::nullopt) const;
  Tensor sum(IntArrayRef dims, bool keepdim = false, std::optional<DType> dtype = std::nullopt) const;
  Tensor nansum(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor mean(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor prod(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor amax(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor amin(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor norm(double p = 2, IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor var(IntArrayRef dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor std(IntArrayRef dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor any(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor all(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor logsumexp(IntArrayRef dims, bool keepdim = false) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor cumsum(int64_t dim) const;

  // ---- linear algebra and indexing ----
  Tensor matmul(const Tensor& o) const;
  Tensor mm(const Tensor& o) const;
  Tensor bmm(const Tensor& o) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;

  // ---- autograd (kiln/runtime/autograd.h) ----
  Tensor& requires_grad_(bool requires_grad = true);  // floating dtypes only; leaves only for false
  bool requires_grad() const;
  bool is_leaf() const;  // made by the user (or requiring no grad), not by a recorded op
  const Tensor& grad() const;  // undefined until a backward reaches it
  Tensor& mutable_grad();      // (to zero it or set it)
  std::shared_ptr<autograd::Node> grad_fn() const;  // null for a leaf
  int64_t output_nr() const;
  Tensor detach() const;  // the same memory, out of the graph
  Tensor& detach_();
  void retain_grad() const;  // keep a non-leaf's gradient in its .grad
  bool retains_grad() const;
  // Gradients of this tensor (a one-element one, or with `gradient`) into the leaves' .grad.
  void backward(const Tensor& gradient = {}, std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false, const std::vector<Tensor>& inputs = {}) const;
  int64_t _version() const;  // writes in place so far to this tensor's memory

  // ---- compound assignment (in place) ----
  Tensor& operator+=(const Tensor& o) { return add_(o); }
  Tensor& operator+=(const Scalar& o) { return add_(o); }
  Tensor& operator-=(const Tensor& o) { return sub_(o); }
  Tensor& operator-=(const Scalar& o) { return sub_(o); }
  Tensor& operator*=(const Tensor& o) { return mul_(o); }
  Tensor& operator*=(const Scalar& o) { return mul_(o); }
  Tensor& operator/=(const Tensor& o) { return div_(o); }
  Tensor& operator/=(const Scalar& o) { return div_(o); }

 private:
  void note(trace::Metadata what) const {
    if (trace::installed_recorders.load(std::memory_order_relaxed)) [[unlikely]]
      trace::metadata_read(*this, what, -1);
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);
// Prints t in PyTorch's format followed by a newline.
void print(const Tensor& t, std::source_location where = std::source_location::current());

}  // namespace kiln
