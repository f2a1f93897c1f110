// The CPU backend's differential harness, shared by test_cpu_ops.cpp and
// test_cpu_reductions.cpp: deterministic inputs with special values in every layout, a
// function compiled for the CPU backend, and each of its calls checked against the same
// function called eagerly.
//
// A check calls the compiled function several times with fresh inputs of one signature: the
// first call traces (it runs eagerly), the later ones run the compiled kernels. Every call is
// compared with an eager call on an identical copy of its inputs (outputs, and the inputs
// themselves, which a function may write into). Then explain() must say that the CPU backend
// compiled every kernel ("cpu: N of N kernels compiled"), or, for the ops it deliberately
// leaves to the reference executor, that it did not.
#pragma once
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "../common/close.h"

namespace kiln::cputest {

// The dtypes the backend's tests cover (every dtype but int16).
inline const std::vector<DType>& dtypes() {
  static const std::vector<DType> d = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32,
                                       kInt64,   kUInt8,   kInt8,    kBool};
  return d;
}

inline CompileOptions cpu_options() {
  CompileOptions o;
  o.backend = CompileOptions::Backend::Cpu;
  return o;
}

// How an operand's values are drawn.
enum class Values {
  Any,       // floats: normal(0, 3); integers: int8/uint8 their whole range, wider ones +-1000
  Positive,  // floats: |normal(0, 3)|; integers as Any
  Unit,      // floats: uniform [-1.1, 1.1] (asin, acos, lerp weights); integers as Any
  NearOne,   // +-[0.8, 1.25] (products over long rows stay finite); integers: +-1, rarely 0 or 2
  InRange,   // floats: uniform [-120, 120], never special: within every integer dtype's range (a
             // float -> integer conversion outside it is undefined behaviour in C++, so eager
             // has no defined result to compare with)
  NonZero,   // as Any, but integers are never 0 (integer division by zero is an eager error)
  Bounded,   // as Any, but the special values leave out the large finite ones (|x| > 1e4), so
             // no product of two overflows float16. For ops whose eager kernel is a multiply-add
             // (add/sub with alpha, addcmul, lerp): GCC contracts those into FMAs (and PyTorch
             // calls fmadd), LLVM rounds the product first, so a product that overflows only in
             // the compiled kernel turns inf into NaN (CpuOpsEdgeCases pins those cases down on
             // their own); and for chains of ops, whose float16 intermediates eager rounds (and
             // may overflow) while a kernel keeps them in float32.
};

// Special values mixed into floating-point operands: NaN, infinities, signed zeros, huge and
// tiny (float32- and float64-subnormal) values, and halves that rounding must break to even.
inline const std::vector<double>& special_values() {
  static const std::vector<double> s = {
      std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
      -std::numeric_limits<double>::infinity(), -0.0, 0.0, 1e30, -1e30, 3e38, -3e38, 1e300, 1e-30, -1e-30,
      1e-40, -1e-40, 1e-310, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 65504.0, 70000.0, 1e-7, 88.5, -104.0};
  return s;
}

// Where special values go: nowhere, about one element in five, or a few elements (one in 61,
// one in 4099 past 4096 elements) so that most rows of a reduction stay finite.
enum class Specials { None, Dense, Sparse };

// `n` values for an operand of dtype `dt`, from `seed`, special values mixed in as `specials`
// says (integers: Dense specials are the dtype's extremes for int8/uint8, 0 and +-1 for wider
// ones; Sparse specials are for floats only: NaN, infinities, -0.0 and a subnormal).
inline std::vector<double> draw(DType dt, int64_t n, uint64_t seed, Values v, Specials sp_kind) {
  bool specials = sp_kind == Specials::Dense;
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 12345);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const auto& sp = special_values();
  std::vector<double> out(size_t(std::max<int64_t>(n, 0)));
  for (double& x : out) {
    bool special = specials && v != Values::InRange && rng() % 5 == 0;
    if (dt == kBool) {
      x = double(rng() % 2);
    } else if (is_floating(dt)) {
      if (special) {
        do x = sp[rng() % sp.size()];
        while (v == Values::Bounded && std::isfinite(x) && std::abs(x) > 1e4);
        continue;
      }
      switch (v) {
        case Values::Any:
        case Values::Bounded:
        case Values::NonZero: x = normal(rng); break;
        case Values::Positive: x = std::abs(normal(rng)); break;
        case Values::Unit: x = -1.1 + 2.2 * unit(rng); break;
        case Values::NearOne: x = (rng() % 2 ? 1 : -1) * (0.8 + 0.45 * unit(rng)); break;
        case Values::InRange: x = -120.0 + 240.0 * unit(rng); break;
      }
    } else {
      int64_t lo = dt == kUInt8 ? 0 : dt == kInt8 ? -128 : -1000;
      int64_t hi = dt == kUInt8 ? 255 : dt == kInt8 ? 127 : 1000;
      if (v == Values::NearOne) {
        uint64_t r = rng() % 64;
        x = r == 0 ? 0.0 : r == 1 ? 2.0 : (r % 2 ? 1.0 : -1.0);
        if (dt == kUInt8 && x < 0) x = 1;
      } else if (v == Values::InRange) {
        x = double(lo + int64_t(rng() % uint64_t(hi - lo + 1)));
      } else if (special && dt != kUInt8 && dt != kInt8) {
        const double ints[] = {0, 1, -1, 127, -128, 255};
        x = ints[rng() % 6];
      } else {
        x = double(lo + int64_t(rng() % uint64_t(hi - lo + 1)));
      }
      if (v == Values::NonZero && x == 0) x = 1;
    }
  }
  if (sp_kind == Specials::Sparse && is_floating(dt)) {
    const double sparse[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(), -0.0, 1e-40};
    int64_t stride = n > 4096 ? 4099 : 61;
    for (int64_t i = int64_t(seed % uint64_t(stride)), k = 0; i < n; i += stride, ++k) out[size_t(i)] = sparse[k % 5];
  }
  return out;
}

// A contiguous tensor of `sizes` holding draw()'s values.
inline Tensor values_tensor(DType dt, const std::vector<int64_t>& sizes, uint64_t seed, Values v, Specials specials) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<double> d = draw(dt, n, seed, v, specials);
  if (is_floating(dt)) return from_vector(d, sizes).to(dt);
  if (dt == kBool) {
    std::vector<bool> b(d.size());
    for (size_t i = 0; i < d.size(); ++i) b[i] = d[i] != 0;
    return from_vector(b, sizes);
  }
  std::vector<int64_t> i(d.begin(), d.end());
  return from_vector(i, sizes).to(dt);
}

// How an operand is laid out in memory (its logical sizes are the same in every layout).
enum class Layout {
  Contiguous,
  Transposed,  // x.t() of a contiguous tensor of the transposed sizes (rank 2)
  Sliced,      // every second element of the last dim: x.slice(-1, 0, 2n, 2)
  Narrowed,    // x.narrow(d, 1, n) in every dim of a larger tensor: a storage offset, padded rows
  Selected,    // x.select(0, 1) of a [2, sizes...] tensor: contiguous at a storage offset
  Expanded,    // a [last dim] tensor expand()ed to the sizes (stride 0 in the leading dims)
};
inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Transposed: return "transposed";
    case Layout::Sliced: return "sliced";
    case Layout::Narrowed: return "narrowed";
    case Layout::Selected: return "selected";
    case Layout::Expanded: return "expanded";
  }
  return "?";
}

inline Tensor make(DType dt, std::vector<int64_t> sizes, Layout l, uint64_t seed, Values v = Values::Any,
                   Specials specials = Specials::Dense) {
  switch (l) {
    case Layout::Contiguous: return values_tensor(dt, sizes, seed, v, specials);
    case Layout::Transposed: {
      std::vector<int64_t> s = sizes;
      std::swap(s[s.size() - 1], s[s.size() - 2]);
      return values_tensor(dt, s, seed, v, specials).transpose(-1, -2);
    }
    case Layout::Sliced: {
      std::vector<int64_t> s = sizes;
      s.back() *= 2;
      return values_tensor(dt, s, seed, v, specials).slice(-1, 0, s.back(), 2);
    }
    case Layout::Narrowed: {
      std::vector<int64_t> s = sizes;
      for (int64_t& e : s) e += 3;
      Tensor t = values_tensor(dt, s, seed, v, specials);
      for (size_t d = 0; d < sizes.size(); ++d) t = t.narrow(int64_t(d), 1, sizes[d]);
      return t;
    }
    case Layout::Selected: {
      std::vector<int64_t> s = sizes;
      s.insert(s.begin(), 2);
      return values_tensor(dt, s, seed, v, specials).select(0, 1);
    }
    case Layout::Expanded: return values_tensor(dt, {sizes.back()}, seed, v, specials).expand(sizes);
  }
  return {};
}

// close() (tests/common/close.h), and infinities where eager has them: close() alone lets any
// value meet an eager infinity (its tolerance |want| * rtol is infinite there).
inline ::testing::AssertionResult close_to(const Tensor& got, const Tensor& want, kiln::testing::Tolerance floor) {
  ::testing::AssertionResult r = kiln::testing::close(got, want, floor);
  if (!r || !got.is_floating_point() || got.numel() == 0) return r;
  Tensor a = got.to(kFloat64), b = want.to(kFloat64);
  Tensor bad = logical_and(b.isinf(), a.ne(b));
  if (bad.any().item<bool>())
    return ::testing::AssertionFailure() << "an infinity of eager's is not met (" << bad.sum().item<int64_t>()
                                         << " elements)";
  return r;
}

// Values equal exactly (NaN meets NaN); with `signed_zero`, zeros of the same sign too.
inline ::testing::AssertionResult same_values(const Tensor& got, const Tensor& want, bool signed_zero) {
  if (got.dtype() != want.dtype())
    return ::testing::AssertionFailure() << "dtype " << name(got.dtype()) << " vs " << name(want.dtype());
  if (got.sizes().vec() != want.sizes().vec()) return ::testing::AssertionFailure() << "sizes differ";
  if (!got.is_floating_point()) return kiln::testing::close(got, want);
  std::vector<double> a = got.to(kFloat64).contiguous().to_vector<double>();
  std::vector<double> b = want.to(kFloat64).contiguous().to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i];
    if (ok && signed_zero && a[i] == 0 && std::signbit(a[i]) != std::signbit(b[i])) ok = false;
    if (!ok)
      return ::testing::AssertionFailure() << "element " << i << ": compiled " << a[i] << " eager " << b[i]
                                           << (signed_zero ? " (zeros must keep their sign)" : "");
  }
  return ::testing::AssertionSuccess();
}

// The first element where `got` and `want` disagree (within `t`, or exactly), with the inputs'
// elements at that index where they have the output's sizes, for failure messages.
inline std::string first_mismatch(const Tensor& got, const Tensor& want, const std::vector<Tensor>& inputs,
                                  kiln::testing::Tolerance t, bool exact, bool signed_zero = false) {
  if (got.sizes().vec() != want.sizes().vec()) return "";
  std::vector<double> a = got.to(kFloat64).contiguous().to_vector<double>();
  std::vector<double> b = want.to(kFloat64).contiguous().to_vector<double>();
  kiln::testing::Tolerance d = kiln::testing::tolerance(got.dtype());
  t.rtol = std::max(t.rtol, d.rtol);
  t.atol = std::max(t.atol, d.atol);
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i] ||
              (!exact && !std::isinf(b[i]) && std::abs(a[i] - b[i]) <= std::abs(b[i]) * t.rtol + t.atol);
    if (ok && signed_zero && a[i] == 0 && std::signbit(a[i]) != std::signbit(b[i])) ok = false;
    if (ok) continue;
    std::ostringstream o;
    o.precision(17);
    o << "first mismatch at flat index " << i << ": compiled " << a[i] << ", eager " << b[i] << "; inputs there:";
    for (const Tensor& x : inputs) {
      if (x.sizes().vec() != got.sizes().vec()) continue;
      o << " " << x.to(kFloat64).contiguous().to_vector<double>()[i];
    }
    return o.str();
  }
  return "";
}

// The first elements of a tensor, for failure messages.
inline std::string head(const Tensor& t, size_t n = 12) {
  std::ostringstream o;
  o.precision(9);
  std::vector<double> v = t.to(kFloat64).contiguous().to_vector<double>();
  o << "[";
  for (size_t i = 0; i < v.size() && i < n; ++i) o << (i ? ", " : "") << v[i];
  o << (v.size() > n ? ", ...]" : "]");
  return o.str();
}

// "cpu: 3 of 4 kernels compiled (...)": the two numbers, or nullopt for another backend note.
struct KernelCount {
  int compiled = 0, kernels = 0, memory = 0, disk = 0;
  int library = 0;  // "library k0: einsum": a library op alone
};
inline std::optional<KernelCount> parse_backend(const std::string& note) {
  static const std::regex re(R"(^cpu: (\d+) of (\d+) kernels compiled \((\d+) from memory, (\d+) from disk\))");
  std::smatch m;
  if (!std::regex_search(note, m, re)) return std::nullopt;
  KernelCount k{std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3]), std::stoi(m[4])};
  for (size_t pos = note.find("; library k"); pos != std::string::npos; pos = note.find("; library k", pos + 1))
    ++k.library;
  return k;
}

// What a check expects of the backend and of the values.
struct Expect {
  bool compiled = true;  // explain(): every kernel of every graph compiled (else: some interpreted)
  bool exact = false;    // values equal exactly (NaN meets NaN) instead of within a tolerance
  bool signed_zero = false;  // with exact: zeros keep their sign
  kiln::testing::Tolerance floor{};  // a looser tolerance than close()'s per-dtype one
};

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
// The inputs of call `call`: the same signature (dtypes, sizes, layouts) for every call, fresh
// values for each. It must be deterministic: it is called twice per call, once for the eager
// reference and once for the compiled call (which may write into its inputs).
using Inputs = std::function<std::vector<Tensor>(int call)>;

enum class Outcome { Checked, EagerRefused };

inline std::string describe(const Explanation& ex) {
  std::string s;
  for (const auto& g : ex.graphs) s += g.text + "  runs on: " + g.backend + "\n";
  return s;
}

// Calls `fn` compiled for the CPU `calls` times (the first traces, the others run compiled
// code) and eagerly on the same inputs, and compares them. When eager refuses the first call
// with a kiln::Error, the compiled call must refuse it too, and the combination is reported as
// EagerRefused (the caller skips it).
inline Outcome check(const Fn& fn, const Inputs& inputs, const Expect& e, int calls = 3) {
  auto f = compile([fn](const std::vector<Tensor>& in) { return fn(in); }, cpu_options());
  for (int c = 0; c < calls; ++c) {
    SCOPED_TRACE("call " + std::to_string(c) + (c == 0 ? " (the trace)" : " (a replay: compiled code)"));
    std::vector<Tensor> ref_in = inputs(c);
    std::vector<Tensor> want;
    try {
      want = fn(ref_in);
    } catch (const Error& err) {
      std::vector<Tensor> in = inputs(c);
      EXPECT_THROW(f(in), Error) << "eager refuses (" << err.what() << ") but the compiled call does not";
      if (c > 0) ADD_FAILURE() << "eager refused call " << c << " but not call 0: " << err.what();
      return Outcome::EagerRefused;
    }
    std::vector<Tensor> in = inputs(c);
    std::vector<Tensor> got;
    try {
      got = f(in);
    } catch (const Error& err) {
      ADD_FAILURE() << "the compiled call threw: " << err.what();
      return Outcome::Checked;
    }
    auto graphs = [&] { return describe(f.explain(inputs(c))); };
    EXPECT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
      ::testing::AssertionResult r = e.exact ? same_values(got[i], want[i], e.signed_zero)
                                             : close_to(got[i], want[i], e.floor);
      if (!r) {
        ADD_FAILURE() << "output " << i << ": " << r.message() << "\n  "
                      << first_mismatch(got[i], want[i], inputs(c), e.floor, e.exact, e.exact && e.signed_zero) << "\n  compiled "
                      << head(got[i]) << "\n  eager    " << head(want[i]) << "\n" << graphs();
        return Outcome::Checked;
      }
    }
    for (size_t i = 0; i < in.size(); ++i) {
      ::testing::AssertionResult r = e.exact ? same_values(in[i], ref_in[i], e.signed_zero)
                                             : close_to(in[i], ref_in[i], e.floor);
      if (!r) {
        ADD_FAILURE() << "input " << i << " after the call: " << r.message() << "\n" << graphs();
        return Outcome::Checked;
      }
    }
  }
  CompileStats st = f.stats();
  EXPECT_EQ(st.compiles, 1u) << "one signature, one trace";
  EXPECT_GE(st.hits, uint64_t(calls - 1)) << "the calls after the first replay";
  Explanation ex = f.explain(inputs(calls));
  for (const auto& g : ex.graphs) {
    std::optional<KernelCount> k = parse_backend(g.backend);
    if (!k) {
      ADD_FAILURE() << "not run by the CPU backend: " << g.backend << "\n" << describe(ex);
      continue;
    }
    // (a library op alone, matmul or einsum, runs its eager kernel by design)
    if (e.compiled)
      EXPECT_EQ(k->compiled + k->library, k->kernels) << "a kernel fell back to the reference executor:\n" << describe(ex);
    else
      EXPECT_LT(k->compiled + k->library, k->kernels) << "expected a kernel left to the reference executor:\n" << describe(ex);
  }
  return Outcome::Checked;
}

// The child's side of in_child_process(): runs `body` with its gtest failures intercepted,
// prints them on stderr, and exits 0 (passed), 1 (failed) or 3 (eager refused the inputs).
[[noreturn]] inline void run_as_child(const std::function<Outcome()>& body) {
  ::testing::TestPartResultArray results;
  Outcome o;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ALL_THREADS, &results);
    o = body();
  }
  int failed = 0;
  for (int i = 0; i < results.size(); ++i) {
    const ::testing::TestPartResult& r = results.GetTestPartResult(i);
    if (!r.failed()) continue;
    ++failed;
    std::fprintf(stderr, "%s:%d: %s\n", r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
  }
  std::fflush(stderr);
  std::_Exit(failed ? 1 : o == Outcome::EagerRefused ? 3 : 0);
}

// Runs `body` (a check) in a child process (a gtest death test, re-executing this binary), so
// that a kernel that crashes fails its own test instead of ending the whole binary. The
// child's failures come back on its stderr; eager refusing the inputs counts as a pass.
inline void in_child_process(const std::function<Outcome()>& body) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(run_as_child(body),
              [](int status) { return WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 3); },
              "")
      << "the check failed, or crashed (a signal: the compiled kernel crashed), in a process of its own";
}

// Runs `one(dt)` for each dtype under a trace naming `what` and the dtype (so a failure says
// which), records the dtypes eager refuses as the test property "eager_refuses", and skips the
// test when eager refuses them all.
inline void for_each_dtype(const std::string& what, const std::vector<DType>& dts,
                           const std::function<Outcome(DType)>& one) {
  std::string refused;
  int checked = 0;
  for (DType dt : dts) {
    SCOPED_TRACE(what + " on " + std::string(name(dt)));
    if (one(dt) == Outcome::EagerRefused)
      refused += (refused.empty() ? "" : ", ") + std::string(name(dt));
    else
      ++checked;
  }
  if (!refused.empty()) ::testing::Test::RecordProperty("eager_refuses", refused);
  if (checked == 0) GTEST_SKIP() << "eager refuses " << what << " in every dtype";
}

// A readable test-name part: letters, digits and '_' only.
inline std::string ident(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

}  // namespace kiln::cputest
