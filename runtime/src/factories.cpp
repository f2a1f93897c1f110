#include "kiln/runtime/factories.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <numeric>
#include <sstream>

#include "cpu/loop.h"
#include "ops_common.h"
#include "philox.h"

namespace kiln {

using namespace detail;

namespace {
void check_sizes(IntArrayRef sizes, std::string_view op) {
  for (int64_t s : sizes)
    KILN_CHECK(s >= 0, op, "Trying to create tensor with negative dimension ", s, ": ", sizes.vec());
}

// Refuses strides the storage-size arithmetic does not cover (a view reaching below its first
// element), and sizes and strides whose storage takes more bytes than int64 counts.
int64_t strided_bytes(IntArrayRef sizes, IntArrayRef strides, DType dt, std::string_view op) {
  check_sizes(sizes, op);
  KILN_CHECK(sizes.size() == strides.size(), op, "mismatch in length of strides (", strides.size(),
             ") and shape (", sizes.size(), ")");
  for (int64_t st : strides)
    KILN_CHECK(st >= 0, op, "negative strides are not supported: sizes ", sizes.vec(), ", strides ",
               strides.vec());
  shape::numel(sizes, op);
  std::optional<int64_t> bytes = shape::storage_bytes(sizes, strides, 0, int64_t(itemsize(dt)));
  KILN_CHECK(bytes, op, "sizes ", sizes.vec(), " and strides ", strides.vec(), " of ", name(dt),
             " elements reach more bytes than int64 can count");
  return *bytes;
}
// A bound of arange as the user wrote it: an integer in full, a float as printed.
std::string number_str(const Scalar& v) {
  if (!v.is_floating()) return std::to_string(v.to_int());
  std::ostringstream os;
  os << v.to_double();
  return os.str();
}
}  // namespace

// empty() as the factory `op` calls it: a size error names the call the user made. (Not
// traced: each factory reports itself.)
Tensor detail::empty_for(IntArrayRef sizes, TensorOptions opts, std::string_view op) {
  check_sizes(sizes, op);
  auto impl = std::make_shared<TensorImpl>();
  impl->dtype = opts.dtype_or(kDefaultFloat);
  const int64_t bytes = shape::dense_bytes(sizes, int64_t(itemsize(impl->dtype)), op);
  impl->sizes = sizes.vec();
  impl->strides = shape::contiguous_strides(sizes, op);
  impl->refresh();
  impl->storage = Storage::allocate(size_t(bytes), opts.device_);
  return Tensor(std::move(impl));
}

Tensor empty(IntArrayRef sizes, TensorOptions opts) {
  KILN_TRACE_FACTORY("empty", empty(sizes, opts))
  return empty_for(sizes, opts, "empty");
}

Tensor empty_strided(IntArrayRef sizes, IntArrayRef strides, TensorOptions opts) {
  KILN_TRACE_FACTORY("empty_strided", empty_strided(sizes, strides, opts))
  DType dt = opts.dtype_or(kDefaultFloat);
  // The storage covers the last element the sizes and strides reach, as PyTorch's does.
  int64_t bytes = strided_bytes(sizes, strides, dt, "empty_strided");
  Tensor base = empty_for({bytes / int64_t(itemsize(dt))}, opts.dtype(dt), "empty_strided");
  return base.as_strided(sizes, strides, 0);
}

Tensor zeros(IntArrayRef sizes, TensorOptions opts) {
  KILN_TRACE_FACTORY("zeros", zeros(sizes, opts))
  return empty_for(sizes, opts, "zeros").zero_();
}
Tensor ones(IntArrayRef sizes, TensorOptions opts) {
  KILN_TRACE_FACTORY("ones", ones(sizes, opts))
  return empty_for(sizes, opts, "ones").fill_(1);
}

Tensor full(IntArrayRef sizes, const Scalar& v, TensorOptions opts) {
  KILN_TRACE_FACTORY("full", full(sizes, v, opts))
  if (!opts.dtype_) opts.dtype_ = v.dtype();
  return empty_for(sizes, opts, "full").fill_(v);
}

Tensor scalar_tensor(const Scalar& v, TensorOptions opts) {
  KILN_TRACE_FACTORY("scalar_tensor", scalar_tensor(v, opts))
  if (!opts.dtype_) opts.dtype_ = v.is_floating() ? kDefaultFloat : v.dtype();
  return empty({}, opts).fill_(v);
}

Tensor arange(const Scalar& end, TensorOptions opts) { return arange(0, end, 1, opts); }

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions opts) {
  KILN_TRACE_FACTORY_ARGS("arange", (start, end, step), arange(start, end, step, opts))
  bool all_int = !start.is_floating() && !end.is_floating() && !step.is_floating();
  DType dt = opts.dtype_or(all_int ? kInt64 : kDefaultFloat);
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  KILN_CHECK(st != 0, "arange", "step must be nonzero");
  KILN_CHECK(std::isfinite(s) && std::isfinite(e), "arange", "unsupported range: ", s, " -> ", e);
  KILN_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), "arange",
             "upper bound and larger bound inconsistent with step sign (start ", s, ", end ", e,
             ", step ", st, ")");
  // The count in 128 bits, or as a double: end - start can pass int64 (or be 1e20), and a count
  // past int64 would wrap into a negative size.
  const __int128 count = all_int ? (__int128(end.to_int()) - start.to_int() + step.to_int() -
                                    (step.to_int() > 0 ? 1 : -1)) / step.to_int()
                                 : 0;
  const double count_d = all_int ? double(count) : std::ceil((e - s) / st);
  KILN_CHECK(all_int ? count <= std::numeric_limits<int64_t>::max() : count_d < 0x1p63, "arange",
             "start ", number_str(start), ", end ", number_str(end), " and step ", number_str(step), " give ",
             count_d, " elements, more than int64 can count");
  const int64_t n = all_int ? int64_t(count) : int64_t(count_d);
  Tensor out = empty_for({n}, opts.dtype(dt), "arange");
  KILN_DISPATCH_ALL(dt, "arange", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
    scalar_t* p = out.data_ptr<scalar_t>();
    if constexpr (std::is_same_v<scalar_t, bool>) {
      KILN_FAIL("arange", "\"arange\" not implemented for 'bool'");
    } else if (all_int && is_integral(dt)) {
      // (start + i * step lies in [start, end), but i * step alone may not fit: in wrapping
      // unsigned arithmetic the sum is exact)
      const uint64_t a = uint64_t(start.to_int()), k = uint64_t(step.to_int());
      cpu::parallel_for(n, cpu::parallel_grain(), [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) p[i] = scalar_t(int64_t(a + uint64_t(i) * k));
      });
    } else {
      // (one rounding, as the traced form's add with alpha: written out, not left to the
      // compiler's contraction)
      cpu::parallel_for(n, cpu::parallel_grain(), [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) p[i] = convert<scalar_t>(std::fma(double(i), st, s));
      });
    }
  });
  return out;
}

Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps, TensorOptions opts) {
  KILN_TRACE_FACTORY_ARGS("linspace", (start, end), linspace(start, end, steps, opts))
  KILN_CHECK(steps >= 0, "linspace", "number of steps must be non-negative, got ", steps);
  DType dt = opts.dtype_or(kDefaultFloat);
  Tensor out = empty_for({steps}, opts.dtype(dt), "linspace");
  double s = start.to_double(), e = end.to_double();
  double step = steps > 1 ? (e - s) / double(steps - 1) : 0.0;
  int64_t half = steps / 2;
  KILN_DISPATCH_ALL(dt, "linspace", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
    scalar_t* p = out.data_ptr<scalar_t>();
    // Like PyTorch: the first half counts up from start, the second half down from end, so
    // both endpoints are exact. (Each with one rounding, as the traced form computes it.)
    cpu::parallel_for(steps, cpu::parallel_grain(), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        double v = (i < half || steps == 1) ? std::fma(step, double(i), s) : std::fma(-step, double(steps - i - 1), e);
        p[i] = convert<scalar_t>(v);
      }
    });
  });
  return out;
}

Tensor logspace(const Scalar& start, const Scalar& end, int64_t steps, double base, TensorOptions opts) {
  KILN_TRACE_FACTORY("logspace", logspace(start, end, steps, base, opts))
  DType dt = opts.dtype_or(kDefaultFloat);
  Tensor exps = linspace(start, end, steps, opts.dtype(kFloat64));
  Tensor out = empty_for({steps}, opts.dtype(dt), "logspace");
  const double* e = exps.data_ptr<double>();
  KILN_DISPATCH_ALL(dt, "logspace", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
    scalar_t* p = out.data_ptr<scalar_t>();
    for (int64_t i = 0; i < steps; ++i) p[i] = convert<scalar_t>(std::pow(base, e[i]));
  });
  return out;
}

Tensor eye(int64_t n, TensorOptions opts) { return eye(n, n, opts); }
Tensor eye(int64_t n, int64_t m, TensorOptions opts) {
  KILN_TRACE_FACTORY("eye", eye(n, m, opts))
  KILN_CHECK(n >= 0 && m >= 0, "eye", "n and m must be non-negative, got n = ", n, ", m = ", m);
  Tensor out = empty_for({n, m}, opts, "eye").zero_();
  if (n && m) out.diagonal().fill_(1);
  return out;
}

// ---- random ----

namespace {
struct GeneratorState {
  std::mutex mu;
  uint64_t seed = 67280421310721ull;
  uint64_t offset = 0;  // Philox blocks consumed so far
};
GeneratorState& gen() {
  static GeneratorState g;
  return g;
}
// Reserves `blocks` Philox blocks for one call and returns (key, first counter).
std::pair<uint64_t, uint64_t> reserve(uint64_t blocks) {
  GeneratorState& g = gen();
  std::lock_guard<std::mutex> lock(g.mu);
  uint64_t first = g.offset;
  g.offset += blocks;
  return {g.seed, first};
}

// Fills a contiguous tensor; element i takes lane i % 4 of block counter + i / 4 (uniform) or
// two lanes of block counter + i / 2 (normal, double).
template <typename F>
void fill_blocks(int64_t n, int64_t per_block, F f) {
  uint64_t nb = uint64_t((n + per_block - 1) / per_block);
  auto [key, first] = reserve(nb);
  cpu::parallel_for(int64_t(nb), 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i, philox::block(key, first + uint64_t(i)));
  });
}
}  // namespace

void manual_seed(uint64_t seed) {
  GeneratorState& g = gen();
  std::lock_guard<std::mutex> lock(g.mu);
  g.seed = seed;
  g.offset = 0;
}

Tensor rand(IntArrayRef sizes, TensorOptions opts) {
  KILN_TRACE_FACTORY("rand", rand(sizes, opts))
  DType dt = opts.dtype_or(kDefaultFloat);
  KILN_CHECK(is_floating(dt), "rand", "\"check_uniform_bounds\" not implemented for '", name(dt), "'");
  Tensor out = empty_for(sizes, opts.dtype(dt), "rand");
  int64_t n = out.numel();
  KILN_DISPATCH_FLOAT(dt, "rand", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
    scalar_t* p = out.data_ptr<scalar_t>();
    if constexpr (std::is_same_v<scalar_t, double>) {
      fill_blocks(n, 2, [&](int64_t b, const philox::Block& r) {
        for (int k = 0; k < 2 && 2 * b + k < n; ++k) p[2 * b + k] = philox::uniform_f64(r[2 * k], r[2 * k + 1]);
      });
    } else {
      fill_blocks(n, 4, [&](int64_t b, const philox::Block& r) {
        for (int k = 0; k < 4 && 4 * b + k < n; ++k) {
          float u = philox::uniform_f32(r[k]);
          scalar_t v = scalar_t(u);
          // rounding to 16 bits can reach 1.0; keep the interval half-open
          if (float(v) >= 1.0f) v = scalar_t(std::nextafter(1.0f, 0.0f));
          p[4 * b + k] = v;
        }
      });
    }
  });
  return out;
}

Tensor randn(IntArrayRef sizes, TensorOptions opts) {
  KILN_TRACE_FACTORY("randn", randn(sizes, opts))
  DType dt = opts.dtype_or(kDefaultFloat);
  KILN_CHECK(is_floating(dt), "randn", "\"normal\" not implemented for '", name(dt), "'");
  Tensor out = empty_for(sizes, opts.dtype(dt), "randn");
  int64_t n = out.numel();
  // Box-Muller: each block of four 32-bit draws gives two normals from two 53-bit uniforms.
  KILN_DISPATCH_FLOAT(dt, "randn", [&](auto scalar_tag_) { using scalar_t = decltype(scalar_tag_);
    scalar_t* p = out.data_ptr<scalar_t>();
    fill_blocks(n, 2, [&](int64_t b, const philox::Block& r) {
      double u1 = philox::uniform_f64(r[0], r[1]), u2 = philox::uniform_f64(r[2], r[3]);
      double radius = std::sqrt(-2.0 * std::log1p(-u1));  // 1 - u1 in (0, 1]: log is finite
      double theta = 2.0 * M_PI * u2;
      if (2 * b < n) p[2 * b] = convert<scalar_t>(radius * std::cos(theta));
      if (2 * b + 1 < n) p[2 * b + 1] = convert<scalar_t>(radius * std::sin(theta));
    });
  });
  return out;
}

Tensor randint(int64_t low, int64_t high, IntArrayRef sizes, TensorOptions opts) {
  KILN_TRACE_FACTORY("randint", randint(low, high, sizes, opts))
  KILN_CHECK(low < high, "randint", "random_ expects 'from' to be less than 'to', but got from=",
             low, " >= to=", high);
  DType dt = opts.dtype_or(kInt64);
  Tensor out = empty_for(sizes, opts.dtype(kInt64), "randint");
  int64_t n = out.numel();
  uint64_t range = uint64_t(high) - uint64_t(low);
  int64_t* p = out.data_ptr<int64_t>();
  // 64 random bits per element: the modulo bias is below 2^-32 for any range under 2^32.
  fill_blocks(n, 2, [&](int64_t b, const philox::Block& r) {
    for (int k = 0; k < 2 && 2 * b + k < n; ++k) {
      uint64_t x = (uint64_t(r[2 * k]) << 32) | r[2 * k + 1];
      p[2 * b + k] = low + int64_t(x % range);
    }
  });
  return as_dtype(out, dt);
}

Tensor randint(int64_t high, IntArrayRef sizes, TensorOptions opts) { return randint(0, high, sizes, opts); }

Tensor randperm(int64_t n, TensorOptions opts) {
  KILN_TRACE_FACTORY("randperm", randperm(n, opts))
  KILN_CHECK(n >= 0, "randperm", "n must be non-negative, got ", n);
  // (shuffled in the tensor itself: a std::vector of a size no tensor can have would throw
  // std::length_error)
  Tensor out = empty_for({n}, TensorOptions(kInt64), "randperm");
  int64_t* v = out.data_ptr<int64_t>();
  std::iota(v, v + n, int64_t(0));
  // Fisher-Yates with one Philox block per swap.
  auto [key, first] = reserve(uint64_t(n));
  for (int64_t i = n - 1; i > 0; --i) {
    auto r = philox::block(key, first + uint64_t(i));
    uint64_t x = (uint64_t(r[0]) << 32) | r[1];
    std::swap(v[i], v[int64_t(x % uint64_t(i + 1))]);
  }
  return as_dtype(out, opts.dtype_or(kInt64));
}

// ---- *_like ----

namespace {
TensorOptions like(const Tensor& t, TensorOptions o) {
  if (!o.dtype_) o.dtype_ = t.dtype();
  return o;
}
}  // namespace
// (t's sizes are read by the op, not by the user's code: no size guard)
Tensor empty_like(const Tensor& t, TensorOptions o) { return empty(t.impl().sizes, like(t, o)); }
Tensor zeros_like(const Tensor& t, TensorOptions o) { return zeros(t.impl().sizes, like(t, o)); }
Tensor ones_like(const Tensor& t, TensorOptions o) { return ones(t.impl().sizes, like(t, o)); }
Tensor full_like(const Tensor& t, const Scalar& v, TensorOptions o) { return full(t.impl().sizes, v, like(t, o)); }
Tensor rand_like(const Tensor& t, TensorOptions o) { return rand(t.sizes(), like(t, o)); }
Tensor randn_like(const Tensor& t, TensorOptions o) { return randn(t.sizes(), like(t, o)); }

// ---- from host data ----

template <typename T>
Tensor from_vector(const std::vector<T>& values, IntArrayRef sizes) {
  KILN_TRACE_FACTORY("from_vector", from_vector(values, sizes))
  std::vector<int64_t> sz = sizes.empty() ? std::vector<int64_t>{int64_t(values.size())} : sizes.vec();
  check_sizes(sz, "from_vector");
  const int64_t n = shape::numel(sz, "from_vector");
  KILN_CHECK(n == int64_t(values.size()), "from_vector", "shape ", sz, " needs ", n, " values but ",
             values.size(), " were given");
  Tensor out = empty_for(sz, dtype_of<T>(), "from_vector");
  std::copy(values.begin(), values.end(), out.data_ptr<T>());
  return out;
}
template Tensor from_vector<uint8_t>(const std::vector<uint8_t>&, IntArrayRef);
template Tensor from_vector<int8_t>(const std::vector<int8_t>&, IntArrayRef);
template Tensor from_vector<int16_t>(const std::vector<int16_t>&, IntArrayRef);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, IntArrayRef);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, IntArrayRef);
template Tensor from_vector<Half>(const std::vector<Half>&, IntArrayRef);
template Tensor from_vector<BFloat16>(const std::vector<BFloat16>&, IntArrayRef);
template Tensor from_vector<float>(const std::vector<float>&, IntArrayRef);
template Tensor from_vector<double>(const std::vector<double>&, IntArrayRef);

Tensor from_vector(const std::vector<bool>& values, IntArrayRef sizes) {
  KILN_TRACE_FACTORY("from_vector", from_vector(values, sizes))
  std::vector<uint8_t> bytes(values.begin(), values.end());
  return from_vector(bytes, sizes).to(kBool);
}

Tensor from_blob(void* data, IntArrayRef sizes, TensorOptions opts, Storage::Deleter deleter) {
  return from_blob(data, sizes, shape::contiguous_strides(sizes, "from_blob"), opts, std::move(deleter));
}

Tensor from_blob(void* data, IntArrayRef sizes, IntArrayRef strides, TensorOptions opts,
                 Storage::Deleter deleter) {
  KILN_TRACE_FACTORY("from_blob", from_blob(data, sizes, strides, opts, deleter))
  DType dt = opts.dtype_or(kDefaultFloat);
  // (the storage spans the bytes the view reaches, which later views are checked against)
  const int64_t bytes = strided_bytes(sizes, strides, dt, "from_blob");
  KILN_CHECK(data || bytes == 0, "from_blob", "null data pointer for a tensor of shape ", sizes.vec());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::wrap(data, size_t(bytes), opts.device_, std::move(deleter));
  impl->sizes = sizes.vec();
  impl->strides = strides.vec();
  impl->dtype = dt;
  impl->refresh();
  return Tensor(std::move(impl));
}

}  // namespace kiln
