// The CPU backend against eager, reductions: sum, nansum, mean, prod, amax, amin, aminmax, any, all,
// norm (p = 1, 2, inf), var and std (correction 0 and 1), logsumexp, the index reductions
// argmax, argmin and max/min with a dim (values and indices), and the row-wise softmax,
// log_softmax and cumsum, over the last dim, over dim 0 and over all dims, keepdim true and
// false, in every dtype eager accepts; then reductions over the layouts a kernel must address
// (transposed, sliced, at an offset, broadcast dims, empty and single-element rows), and the
// index reductions' ties, NaNs and signed zeros. The harness is cpu_diff.h.
//
// Inputs: the first two calls (the trace and the first replay) read finite values; the third
// has NaN, infinities, -0.0 and a subnormal at sparse positions (one element in 61, one in 4099
// on the large shapes), so NaN propagation shows in some rows while the others stay comparable.
//
// Tolerance: close()'s per-dtype one, float32 included. A looser one for float32 sums would
// be needed if eager accumulated them in float32 (its error, up to ceil(log2 n) * 2^-24 *
// sum|x|, exceeds rtol 1e-4 where a sum cancels), but eager accumulates float sums in float64
// (runtime/src/reduce.h, sum_acc_t) as the compiled kernels do, so the two differ only in the
// order of float64 additions, far inside the tolerance (checked: every float32 case here
// passes with it, the [64, 1023] all-dims sums included).
#include <gtest/gtest.h>
#include <kiln/kiln.h>
#include <kiln/codegen/cpu.h>
#include <kiln/passes/kernel.h>
#include <kiln/passes/pass.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "../common/scoped_env.h"
#include "cpu_diff.h"

using namespace kiln;
using namespace kiln::cputest;

namespace {

using V = std::vector<Tensor>;

// How a reduction case reduces.
struct Dims {
  std::string name;
  std::vector<int64_t> dims;  // empty: all (logsumexp: every dim listed)
  bool keepdim;
};

struct ReduceCase {
  std::string name;
  Values values = Values::Any;
  // The reduction of x over `d` (row-wise ops: over d.dims[0], keepdim ignored).
  std::function<Tensor(const Tensor&, const Dims&)> fn;
  bool row_wise = false;  // softmax, log_softmax, cumsum: one dim, no keepdim, no "all dims"
  bool one_dim = false;   // max/min with a dim: one dim, keepdim both ways, no "all dims"
  // Results compared exactly, zeros with their sign: indices; the values max/min pick; cumsum,
  // whose running sums add in eager's order and accumulation type.
  bool exact = false;
  // For ops with two results (max/min with a dim): used instead of fn.
  std::function<V(const Tensor&, const Dims&)> fn2 = nullptr;
};

std::optional<int64_t> dim_or_all(const Dims& d) {
  return d.dims.empty() ? std::nullopt : std::optional<int64_t>(d.dims.at(0));
}

std::vector<int64_t> all_dims(const Tensor& x) {
  std::vector<int64_t> d;
  for (int64_t i = 0; i < x.dim(); ++i) d.push_back(i);
  return d;
}

const std::vector<ReduceCase>& reduce_cases() {
  using D = const Dims&;
  static const std::vector<ReduceCase> c = {
      {"sum", Values::Any, [](const Tensor& x, D d) { return x.sum(d.dims, d.keepdim); }},
      {"sum_to_float64", Values::Any, [](const Tensor& x, D d) { return x.sum(d.dims, d.keepdim, kFloat64); }},
      {"nansum", Values::Any, [](const Tensor& x, D d) { return x.nansum(d.dims, d.keepdim); }},
      {"mean", Values::Any, [](const Tensor& x, D d) { return x.mean(d.dims, d.keepdim); }},
      {"prod", Values::NearOne, [](const Tensor& x, D d) { return x.prod(d.dims, d.keepdim); }},
      {"amax", Values::Any, [](const Tensor& x, D d) { return x.amax(d.dims, d.keepdim); }},
      {"amin", Values::Any, [](const Tensor& x, D d) { return x.amin(d.dims, d.keepdim); }},
      {"any", Values::Any, [](const Tensor& x, D d) { return x.any(d.dims, d.keepdim); }},
      {"all", Values::Any, [](const Tensor& x, D d) { return x.all(d.dims, d.keepdim); }},
      {"norm_p1", Values::Any, [](const Tensor& x, D d) { return x.norm(1, d.dims, d.keepdim); }},
      {"norm_p2", Values::Any, [](const Tensor& x, D d) { return x.norm(2, d.dims, d.keepdim); }},
      {"norm_pinf", Values::Any,
       [](const Tensor& x, D d) { return x.norm(std::numeric_limits<double>::infinity(), d.dims, d.keepdim); }},
      {"var_c0", Values::Any, [](const Tensor& x, D d) { return x.var(d.dims, 0, d.keepdim); }},
      {"var_c1", Values::Any, [](const Tensor& x, D d) { return x.var(d.dims, 1, d.keepdim); }},
      {"std_c0", Values::Any, [](const Tensor& x, D d) { return x.std(d.dims, 0, d.keepdim); }},
      {"std_c1", Values::Any, [](const Tensor& x, D d) { return x.std(d.dims, 1, d.keepdim); }},
      {"logsumexp", Values::Any,
       [](const Tensor& x, D d) { return x.logsumexp(d.dims.empty() ? all_dims(x) : d.dims, d.keepdim); }},
      {"softmax", Values::Any, [](const Tensor& x, D d) { return x.softmax(d.dims.at(0)); }, true},
      {"log_softmax", Values::Any, [](const Tensor& x, D d) { return x.log_softmax(d.dims.at(0)); }, true},
      {"cumsum", Values::Any, [](const Tensor& x, D d) { return x.cumsum(d.dims.at(0)); }, true, false, true},
      {"argmax", Values::Any, [](const Tensor& x, D d) { return x.argmax(dim_or_all(d), d.keepdim); }, false, false, true},
      {"argmin", Values::Any, [](const Tensor& x, D d) { return x.argmin(dim_or_all(d), d.keepdim); }, false, false, true},
      {"max_dim", Values::Any, nullptr, false, true, true, [](const Tensor& x, D d) {
         auto [v, i] = x.max(d.dims.at(0), d.keepdim);
         return V{v, i};
       }},
      {"min_dim", Values::Any, nullptr, false, true, true, [](const Tensor& x, D d) {
         auto [v, i] = x.min(d.dims.at(0), d.keepdim);
         return V{v, i};
       }},
      {"aminmax", Values::Any, nullptr, false, false, false, [](const Tensor& x, D d) {
         auto [lo, hi] = aminmax(x, dim_or_all(d), d.keepdim);  // (a dims list: its first)
         return V{lo, hi};
       }},
  };
  return c;
}

uint64_t seed_of(const std::string& s, uint64_t salt) {
  uint64_t h = 1469598103934665603ull ^ (salt * 0x100000001b3ull);
  for (char ch : s) h = (h ^ uint8_t(ch)) * 1099511628211ull;
  return h;
}

// Checks one reduction of `x`'s dtype, sizes and layout; false when eager refuses it.
bool check_reduction(const ReduceCase& rc, DType dt, const std::vector<int64_t>& sizes, Layout layout, const Dims& d,
                     const std::string& salt) {
  SCOPED_TRACE(rc.name + " on " + std::string(name(dt)) + ", sizes [" + [&] {
    std::string s;
    for (int64_t e : sizes) s += (s.empty() ? "" : ",") + std::to_string(e);
    return s;
  }() + "] " + layout_name(layout) + ", dims " + d.name + (d.keepdim ? ", keepdim" : ""));
  Inputs inputs = [&](int call) {
    return V{make(dt, sizes, layout, seed_of(rc.name + salt, uint64_t(dt) * 7 + uint64_t(call)), rc.values,
                  call >= 2 ? Specials::Sparse : Specials::None)};
  };
  Fn fn = rc.fn2 ? Fn([f = rc.fn2, d](const V& in) { return f(in[0], d); })
                 : Fn([f = rc.fn, d](const V& in) { return V{f(in[0], d)}; });
  Expect e;
  e.exact = e.signed_zero = rc.exact;
  return check(fn, inputs, e) == Outcome::Checked;
}

// ---- every reduction in every dtype: [7, 33] (each dims/keepdim) and [64, 1023] (last dim,
// first dim with keepdim, all dims) ----

// One test per reduction (a process each under ctest), its dtypes in turn: a failure names
// the dtype, sizes, layout, dims and keepdim.
class CpuOpsReductions : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuOpsReductions, MatchesEager) {
  const ReduceCase& rc = reduce_cases()[GetParam()];
  std::vector<Dims> small, large;
  if (rc.row_wise) {
    small = {{"last", {-1}, false}, {"first", {0}, false}};
    large = small;
  } else if (rc.one_dim) {
    small = {{"last", {-1}, false}, {"last", {-1}, true}, {"first", {0}, false}, {"first", {0}, true}};
    large = {{"last", {-1}, false}, {"first", {0}, true}};
  } else {
    small = {{"last", {-1}, false}, {"last", {-1}, true},  {"first", {0}, false},
             {"first", {0}, true},  {"all", {}, false},    {"all", {}, true}};
    large = {{"last", {-1}, false}, {"first", {0}, true}, {"all", {}, false}};
  }
  for_each_dtype(rc.name, dtypes(), [&](DType dt) {
    // eager refusing one refuses all (the dtype is what it refuses)
    if (!check_reduction(rc, dt, {7, 33}, Layout::Contiguous, small[0], "small")) return Outcome::EagerRefused;
    for (size_t i = 1; i < small.size(); ++i) check_reduction(rc, dt, {7, 33}, Layout::Contiguous, small[i], "small");
    // The large shape (full vector loops, and the outer loop split across threads: 65472
    // elements) in one dtype of each kind; the small one covers every dtype.
    bool large_too = dt == kFloat32 || dt == kFloat64 || dt == kBFloat16 || dt == kInt64 || dt == kBool;
    if (large_too)
      for (const Dims& d : large) check_reduction(rc, dt, {64, 1023}, Layout::Contiguous, d, "large");
    return Outcome::Checked;
  });
}

INSTANTIATE_TEST_SUITE_P(Reductions, CpuOpsReductions, ::testing::Range<size_t>(0, reduce_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return reduce_cases()[info.param].name; });

// ---- reductions over layouts ----
// A probe of a few reductions per layout: a strided row (transposed), a step, an offset,
// broadcast dims (an expanded operand: every element counts, stride 0 or not), and the
// smallest shapes (single-element and empty rows, a 0-d tensor).

struct ReduceLayout {
  std::string name;
  std::vector<int64_t> sizes;
  Layout layout;
};

const std::vector<ReduceLayout>& reduce_layouts() {
  using L = Layout;
  static const std::vector<ReduceLayout> c = {
      {"transposed_7x33", {7, 33}, L::Transposed},
      {"transposed_64x1023", {64, 1023}, L::Transposed},
      {"sliced_7x33", {7, 33}, L::Sliced},
      {"narrowed_7x33", {7, 33}, L::Narrowed},
      {"selected_7x33", {7, 33}, L::Selected},
      {"expanded_7x33", {7, 33}, L::Expanded},
      {"expanded_3x5x33", {3, 5, 33}, L::Expanded},
      {"rows_of_one_33x1", {33, 1}, L::Contiguous},
      {"one_row_1x33", {1, 33}, L::Contiguous},
      {"one_element_1x1", {1, 1}, L::Contiguous},
      {"empty_rows_7x0", {7, 0}, L::Contiguous},
      {"no_rows_0x33", {0, 33}, L::Contiguous},
      {"size7", {7}, L::Contiguous},
      {"size4097", {4097}, L::Contiguous},
      {"sliced_1023", {1023}, L::Sliced},
      {"scalar_0d", {}, L::Contiguous},
      // Past 2^16 elements the row-wise kernels that call exp (softmax, logsumexp) run their
      // second row loop in chunks of 256 that prefetch two rows ahead (emit.cpp row_ahead()):
      // rows that end in a partial chunk, rows that start at an offset, last rows with nothing
      // ahead, and rows of less than a chunk that are left alone.
      {"row_prefetch_300x301", {300, 301}, L::Contiguous},
      {"row_prefetch_narrowed_260x300", {260, 300}, L::Narrowed},
      {"row_prefetch_short_rows_1100x65", {1100, 65}, L::Contiguous},
  };
  return c;
}

// The probe: reductions over the last dim, the first dim and all dims, their dtype's kind.
Fn reduce_probe(DType dt, int64_t numel) {
  return [dt, numel](const V& in) {
    const Tensor& x = in[0];
    int64_t first = 0;
    V out = {x.sum({-1}), x.sum({first}, true), x.sum()};
    out.push_back(x.cumsum(-1));
    out.push_back(x.cumsum(first));
    if (dt == kBool) {
      out.push_back(x.any({-1}));
      out.push_back(x.all({first}));
    } else if (numel > 0) {  // (amax, argmax and max of no elements are errors)
      out.push_back(x.amax({-1}, true));
      out.push_back(x.amin({first}));
      // the index into the flattened tensor (every dim reduced: the loops' row-major index
      // must be the logical one, whatever the layout), along the last dim and along the first
      out.push_back(x.argmax());
      out.push_back(x.argmin(-1, true));
      auto [v, i] = x.max(first);
      auto [v2, i2] = x.min(-1, true);
      out.insert(out.end(), {v, i, v2, i2});
    }
    if (is_floating(dt)) {
      out.push_back(x.mean({-1}));
      out.push_back(x.var({first}, 1));
      out.push_back(x.logsumexp({-1}));
      out.push_back(x.softmax(-1));
      out.push_back(x.log_softmax(0));
    }
    return out;
  };
}

// Layouts address elements by their size: one dtype of each size and kind (every dtype goes
// through the reductions above).
const std::vector<DType> kLayoutDTypes = {kFloat32, kFloat64, kBFloat16, kInt32, kInt8, kBool};

class CpuOpsReductionLayouts : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuOpsReductionLayouts, MatchesEager) {
  const ReduceLayout& rl = reduce_layouts()[GetParam()];
  int64_t numel = 1;
  for (int64_t e : rl.sizes) numel *= e;
  for_each_dtype(rl.name, kLayoutDTypes, [&](DType dt) {
    Inputs inputs = [&](int call) {
      return V{make(dt, rl.sizes, rl.layout, seed_of(rl.name, uint64_t(dt) * 7 + uint64_t(call)), Values::Any,
                    call >= 2 ? Specials::Sparse : Specials::None)};
    };
    if (numel == 0) {  // (empty rows crash the compiled kernel: each dtype in a process of its own)
      in_child_process([&] { return check(reduce_probe(dt, numel), inputs, Expect{}); });
      return Outcome::Checked;
    }
    return check(reduce_probe(dt, numel), inputs, Expect{});
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, CpuOpsReductionLayouts, ::testing::Range<size_t>(0, reduce_layouts().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return reduce_layouts()[info.param].name; });

// ---- edge cases ----

// argmax, argmin and max/min with a dim pick eager's element: the first of equal extremes, the
// first NaN (a NaN wins over everything), and of +0.0 and -0.0 the first (max/min's value
// keeps its sign). Rows of 5 (scalar code), then rows of 1000 (vector lanes: the least index
// must win across lanes), along the last dim, along dim 0 (a transposed view) and over all
// dims (the flat index), in every float dtype.
TEST(CpuOpsReductionEdgeCases, IndexReductionsTiesNaNsAndSignedZeros) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<std::vector<double>> rows = {
      {1, 3, 3, 2, 3},           {2, nan, 5, nan, 1},      {-0.0, 0.0, -0.0, 0.0, -1},
      {0.0, -0.0, 0.0, -0.0, 1}, {-0.0, 0.0, 0.0, 0.0, -0.0}, {-inf, -inf, -inf, -inf, -inf},
      {inf, nan, -inf, 1, 2},    {5, 5, 5, 5, 5},          {nan, nan, 1, 2, 3},
      {1, 2, 3, 4, nan},         {inf, inf, -inf, -inf, 0}, {0.0, 0.0, -0.0, 7, -7}};
  std::vector<double> small;
  for (const auto& r : rows) small.insert(small.end(), r.begin(), r.end());
  // long rows: the extreme at 17, 500 and 999; NaNs at 600 and 700; zeros of both signs
  std::vector<double> large(3000);
  for (size_t i = 0; i < 1000; ++i) {
    large[i] = std::sin(double(i));
    large[1000 + i] = std::cos(double(i));
    large[2000 + i] = (i % 3 == 1) ? -0.0 : (i % 3 == 2 ? 0.0 : -1.0);
  }
  large[17] = large[500] = large[999] = 2;
  large[1600] = large[1700] = nan;
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (auto [values, sizes] : {std::pair{small, std::vector<int64_t>{int64_t(rows.size()), 5}},
                                 std::pair{large, std::vector<int64_t>{3, 1000}}}) {
      SCOPED_TRACE(std::string(name(dt)) + ", rows of " + std::to_string(sizes[1]));
      Inputs inputs = [&](int) { return V{from_vector(values, sizes).to(dt)}; };
      Fn fn = [](const V& in) {
        const Tensor& x = in[0];
        Tensor t = x.t();  // rows along dim 0
        auto [mv, mi] = x.max(-1);
        auto [nv, ni] = x.min(-1, true);
        auto [tv, ti] = t.max(0);
        auto [uv, ui] = t.min(0, true);
        return V{x.argmax(-1), x.argmin(-1), mv, mi, nv, ni, tv, ti, uv, ui, t.argmax(0), t.argmin(0, true),
                 x.argmax(), x.argmin(), t.argmax(std::nullopt, true)};
      };
      check(fn, inputs, Expect{true, true, true});
    }
  }
}

// An index reduction of a 16-bit float value computed in the same kernel: the kernel keeps fused
// values in float32 but compares them as eager stores them, rounded to 16 bits, where 1 and
// 1 + 2^-12 (float16; 1 + 2^-9 for bfloat16) are one value and the first wins the tie.
TEST(CpuOpsReductionEdgeCases, IndexReductionsOfFused16BitValuesCompareRoundedValues) {
  for (DType dt : {kFloat16, kBFloat16}) {
    SCOPED_TRACE(name(dt));
    double tiny = dt == kFloat16 ? std::ldexp(1.0, -12) : std::ldexp(1.0, -9);
    Inputs inputs = [&](int call) {
      std::vector<double> b(4 * 40, 0.0);
      for (size_t r = 0; r < 4; ++r) b[r * 40 + 3 + r * 7 + size_t(call)] = tiny;  // after the first 1
      return V{ones({4, 40}, dt), from_vector(b, {4, 40}).to(dt)};
    };
    Fn fn = [](const V& in) {
      Tensor s = in[0] + in[1];
      auto [v, i] = s.max(-1);
      return V{s.argmax(-1), s.t().argmax(0, true), v, i, (in[0] - in[1]).argmin(-1)};
    };
    check(fn, inputs, Expect{true, true, true});
  }
}

// Ties everywhere (a handful of distinct values per row) in every dtype, bool and int16 too.
TEST(CpuOpsReductionEdgeCases, IndexReductionsFirstOfManyTies) {
  std::vector<DType> dts = dtypes();
  dts.push_back(kInt16);
  for_each_dtype("index reductions with ties", dts, [&](DType dt) {
    Inputs inputs = [dt](int call) {
      Tensor x = make(dt, {7, 33}, Layout::Contiguous, 77 + uint64_t(call) + 10 * uint64_t(dt), Values::NearOne,
                      Specials::None);
      return V{is_floating(dt) ? x.round() : x};
    };
    Fn fn = [](const V& in) {
      auto [v, i] = in[0].max(-1);
      auto [v2, i2] = in[0].min(0);
      return V{v, i, v2, i2};
    };
    Outcome o = check(fn, inputs, Expect{true, true, true});
    if (dt != kBool)  // (argmax and argmin refuse bool)
      check([](const V& in) { return V{in[0].argmax(-1), in[0].argmin(0, true), in[0].argmax()}; }, inputs,
            Expect{true, true, true});
    return o;
  });
}

// cumsum: eager adds 0 + x first (a row of one -0.0 sums to +0.0), accumulates float16 and
// bfloat16 in float32 and rounds each partial sum; a cumsum fused after elementwise ops, and of
// a fill (the scan of a value that does not vary along the row).
TEST(CpuOpsReductionEdgeCases, CumsumOrderAndFusion) {
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kUInt8, kBool}) {
    SCOPED_TRACE(name(dt));
    Inputs inputs = [dt](int call) {
      return V{make(dt, {33, 1}, Layout::Contiguous, 5 + uint64_t(call)), make(dt, {9, 1001}, Layout::Contiguous, 6 + uint64_t(call))};
    };
    Fn fn = [dt](const V& in) {
      V out = {in[0].cumsum(1), in[0].cumsum(0), in[1].cumsum(-1), in[1].cumsum(0), in[1].clone().fill_(3).cumsum(1)};
      // (16-bit floats: the kernel rounds the fused x * 2 + 1 to 16 bits before summing, as eager
      // stores it; x * 2 is exact, so that one rounding is eager's two)
      if (dt != kBool) out.push_back((in[1] * 2 + 1).cumsum(-1));
      return out;
    };
    check(fn, inputs, Expect{true, true, true});
  }
  check([](const V& in) { return V{in[0].cumsum(1), in[0].cumsum(0)}; },
        [](int) { return V{from_vector(std::vector<double>{-0.0, 1, -0.0, -0.0}, {4, 1})}; }, Expect{true, true, true});
}

// softmax and log_softmax over a dim of size 0: rows of no elements, an empty result. (When
// this was written the kernel treated the empty row dim like a broadcast one and read and
// wrote one element per row of the empty buffers: a crash. Each runs in a process of its own,
// so a crash fails this test only.)
TEST(CpuOpsReductionEdgeCases, SoftmaxOverAnEmptyDim) {
  for (auto [sizes, dim] : {std::pair<std::vector<int64_t>, int64_t>{{7, 0}, -1}, {{0, 7}, 0}}) {
    SCOPED_TRACE("sizes [" + std::to_string(sizes[0]) + "," + std::to_string(sizes[1]) + "] dim " + std::to_string(dim));
    Inputs inputs = [sizes](int) { return V{zeros(sizes)}; };
    in_child_process([&] {
      return check([dim](const V& in) { return V{in[0].softmax(dim), in[0].log_softmax(dim)}; }, inputs, Expect{});
    });
  }
}

// A 0-d tensor's dim 0 (or -1) is its one element: PyTorch reduces over it, and so must a
// compiled graph (the lowering used to index the reduced dim 0 of an empty loop space and crash).
TEST(CpuOpsReductionEdgeCases, ReductionsOverDimZeroOfAZeroDimTensor) {
  Inputs inputs = [](int call) { return V{full({}, 0.75 + call)}; };
  in_child_process([&] {
    return check(
        [](const V& in) {
          const Tensor& x = in[0];
          return V{x.sum({0}), x.amax({-1}, true), x.mean({0}), x.var({0}, 0), logsumexp(x, {0}), x.prod({0}) * 2};
        },
        inputs, Expect{});
  });
}

// Full reductions (every dim) of large tensors split loop 0 across threads: each thread
// reduces its part into its own accumulators, then one call combines them in order. With 2
// and 3 threads (a part count that divides nothing here), contiguous and transposed, sizes
// that are no multiple of anything.
TEST(CpuOpsReductionEdgeCases, FullReductionsSplitAcrossThreads) {
  for (const char* threads : {"2", "3"}) {
    kiln::testing::ScopedEnv env("KILN_NUM_THREADS", threads);
    for (DType dt : {kFloat32, kFloat64, kBFloat16, kInt64, kInt8, kBool}) {
      for (auto [sizes, layout] : {std::pair<std::vector<int64_t>, Layout>{{300007}, Layout::Contiguous},
                                   {{517, 131}, Layout::Transposed}}) {
        SCOPED_TRACE(std::string(threads) + " threads, " + std::string(name(dt)) + ", " + layout_name(layout));
        Inputs inputs = [&, sizes = sizes, layout = layout](int call) {
          return V{make(dt, sizes, layout, 977 + uint64_t(dt) * 7 + uint64_t(call), Values::Any,
                        call >= 2 ? Specials::Sparse : Specials::None)};
        };
        Fn fn = [dt](const V& in) {
          const Tensor& x = in[0];
          if (dt == kBool) return V{x.any(), x.all(), x.sum()};
          V out = {x.sum(), x.amax(), x.amin()};
          if (is_floating(dt)) {
            out.push_back(x.mean());
            out.push_back(x.norm(2));
            out.push_back(x.nansum());
          }
          return out;
        };
        check(fn, inputs, Expect{});
      }
    }
  }
}

// Full reductions of two or more depths (var and std: a mean, then the squares about it;
// logsumexp: a maximum, then the sum of exponentials about it; the largest deviation from the
// mean) split per pass: each depth's pass runs on the threads, each thread into its own slots,
// and its finishing step hands the combined values to the next depth. On 1, 2 and 3 threads,
// contiguous and transposed, with NaN and infinities on later calls; the plan says so.
TEST(CpuOpsReductionEdgeCases, FullReductionsOfSeveralDepthsSplitPerPass) {
  const Fn deep = [](const V& in) {
    const Tensor& x = in[0];
    Tensor dev = x - x.mean();
    return V{x.var(), x.std({}, 0), logsumexp(x, {0, 1}), dev.abs().amax(), (dev * dev - x.var({}, 0)).abs().sum()};
  };
  for (const char* threads : {"1", "2", "3"}) {
    kiln::testing::ScopedEnv env("KILN_NUM_THREADS", threads);
    for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
      for (auto [sizes, layout] : {std::pair<std::vector<int64_t>, Layout>{{1013, 307}, Layout::Contiguous},
                                   {{517, 131}, Layout::Transposed}}) {
        SCOPED_TRACE(std::string(threads) + " threads, " + std::string(name(dt)) + ", " + layout_name(layout));
        Inputs inputs = [&, sizes = sizes, layout = layout](int call) {
          return V{make(dt, sizes, layout, 1601 + uint64_t(dt) * 7 + uint64_t(call), Values::Any,
                        call >= 2 ? Specials::Sparse : Specials::None)};
        };
        check(deep, inputs, Expect{});
      }
    }
  }
  // argmax and argmin of a whole tensor are two depths too (the extremum, then its first
  // index): ties across the parts in int64 (values within +-1000), NaN in float32
  for (const char* threads : {"2", "3"}) {
    kiln::testing::ScopedEnv env("KILN_NUM_THREADS", threads);
    for (DType dt : {kInt64, kFloat32}) {
      SCOPED_TRACE(std::string(threads) + " threads, argmax, " + std::string(name(dt)));
      Inputs inputs = [dt](int call) {
        return V{make(dt, {300007}, Layout::Contiguous, 1801 + uint64_t(call), Values::Any,
                      call >= 1 && is_floating(dt) ? Specials::Sparse : Specials::None)};
      };
      check([](const V& in) { return V{in[0].argmax(), in[0].argmin()}; }, inputs, Expect{});
    }
  }
  kiln::testing::ScopedEnv t("KILN_NUM_THREADS", "2");
  const V in{make(kFloat32, {1013, 307}, Layout::Contiguous, 3, Values::Any, Specials::None)};
  auto f = compile([](const V& v) { return V{v[0].var()}; }, cpu_options());
  (void)f(in);
  passes::Module m = passes::optimize(ir::parse(f.explain(in).graphs.at(0).text));
  const std::string code = codegen::emit_cpu(*m.program, codegen::CpuEmit::Code);
  EXPECT_NE(code.find("a split reduction: each thread a part of loop 0 (310991), then one combines them, for each of its 2 passes"),
            std::string::npos)
      << code;
}

// A running sum inside a full reduction (x.cumsum(0).sum()) adds in order from the row's start,
// which the parts of a split row cannot: such a kernel runs whole. (Split, the second thread's
// part started its running sum from zero: 1.45e8 off over 10^6 elements on 2 threads.)
TEST(CpuOpsReductionEdgeCases, ScansInAFullReductionAreNotSplit) {
  kiln::testing::ScopedEnv env("KILN_NUM_THREADS", "2");
  for (DType dt : {kFloat64, kInt64}) {
    SCOPED_TRACE(name(dt));
    Inputs inputs = [dt](int call) {
      return V{make(dt, {300007}, Layout::Contiguous, 1701 + uint64_t(call), Values::Any, Specials::None)};
    };
    check([](const V& in) { return V{in[0].cumsum(0).sum(), in[0].cumsum(0).amax()}; }, inputs, Expect{});
  }
}

// Kernels whose outermost loop is short (a leading dim of 2 or 3 that broadcasting keeps from
// merging with the next) run the leading loops flattened as one range, which the threads split
// (emit.h's thread_loops): 3 rows of [3, R, C] on 2 threads were one thread's work twice over.
// Row reductions over [3, 67, 509] and [2, 3, 37, 331] with broadcast operands, with 2, 3 and
// 4 threads, sizes that divide into nothing, against eager.
TEST(CpuOpsReductionEdgeCases, ShortLeadingLoopsSplitAcrossThreadsFlattened) {
  for (const char* threads : {"2", "3", "4"}) {
    kiln::testing::ScopedEnv env("KILN_NUM_THREADS", threads);
    for (DType dt : {kFloat32, kInt64}) {
      SCOPED_TRACE(std::string(threads) + " threads, " + std::string(name(dt)));
      Inputs inputs = [dt](int call) {
        return V{make(dt, {3, 67, 509}, Layout::Contiguous, 1201 + uint64_t(call), Values::Any, Specials::None),
                 make(dt, {67, 509}, Layout::Contiguous, 1301 + uint64_t(call), Values::Any, Specials::None),
                 make(dt, {2, 3, 37, 331}, Layout::Contiguous, 1401 + uint64_t(call), Values::Any, Specials::None),
                 make(dt, {3, 37, 331}, Layout::Contiguous, 1501 + uint64_t(call), Values::Any, Specials::None)};
      };
      Fn fn = [](const V& in) {
        const Tensor &x = in[0], &w = in[1], &y = in[2], &b = in[3];
        return V{(x * w + w).sum({2}), (x - w).amax({2}), (y * b).sum({3})};
      };
      check(fn, inputs, Expect{});
    }
  }
}

// The workload's n-body forces (tools/workloads): pos [c, N], mass [N].
V nbody_forces(const V& in) {
  const Tensor &pos = in[0], &mass = in[1];
  Tensor diff = pos.unsqueeze(1) - pos.unsqueeze(2);
  Tensor dist = diff.norm(2, {0});
  Tensor forces = 6.67e-11 * mass.unsqueeze(1) * mass.unsqueeze(0) / pow(dist, 2);
  return V{(diff / dist * forces.unsqueeze(0)).nansum({2})};
}

// Row groups (passes::unroll_outer_loop): a reduction whose outermost loop is 2 to 4 long and
// whose copies share work runs that loop unrolled into its body, the shared work once for all.
// n-body in 2-d (300 bodies: the grouped kernel's [300, 300] is split across threads) and 3-d
// (the distance, its square root and the masses shared by the components), shared arithmetic
// beside each copy's own operand (transposed and sliced: loop 0's copies start at other offsets
// and alignments), NaN and infinities in a shared operand and a per-copy one under amax; mean,
// var (two passes over the row) and argmax per copy; integers; on 1, 2 and 3
// threads, with row groups on and off (each matching eager), and each case checked to be
// compiled grouped (`emit_cpu` says so).
TEST(CpuOpsReductionEdgeCases, RowGroupsShareWorkAcrossAShortOuterLoop) {
  const Fn nbody = nbody_forces;
  struct Case {
    std::string name;
    Fn fn;
    std::function<V(DType, int)> inputs;
    std::vector<DType> dtypes = {kFloat32, kFloat64, kBFloat16};
  };
  const std::vector<Case> cases = {
      {"n-body 2-d", nbody,
       [](DType dt, int call) {
         return V{make(dt, {2, 300}, Layout::Contiguous, 11 + uint64_t(call), Values::Any, Specials::None),
                  make(dt, {300}, Layout::Contiguous, 21 + uint64_t(call), Values::Positive, Specials::None)};
       }},
      {"n-body 3-d", nbody,
       [](DType dt, int call) {
         return V{make(dt, {3, 97}, Layout::Contiguous, 31 + uint64_t(call), Values::Any, Specials::None),
                  make(dt, {97}, Layout::Contiguous, 41 + uint64_t(call), Values::Positive, Specials::None)};
       }},
      {"shared arithmetic, transposed copies",
       [](const V& in) {
         Tensor w = in[1] * in[1] - in[1] * 0.5;  // (cheap: fused into the reduction, not stored apart)
         return V{(in[0] * w).sum({2}), (in[0] + w).amax({2})};
       },
       [](DType dt, int call) {
         return V{make(dt, {4, 37, 301}, Layout::Transposed, 51 + uint64_t(call), Values::Any,
                       call >= 2 ? Specials::Sparse : Specials::None),
                  make(dt, {37, 301}, Layout::Sliced, 61 + uint64_t(call), Values::Any,
                       call >= 2 ? Specials::Sparse : Specials::None)};
       },
       // (not bfloat16: eager rounds w to it before the product, the kernel does not, and sums of
       // 301 such products near zero then differ beyond its tolerance, grouped or not)
       {kFloat32, kFloat64}},
      {"mean, var and argmax",
       [](const V& in) {
         Tensor w = in[1] * in[1] + 1;
         Tensor y = in[0] * w;
         return V{y.mean({2}), y.var({2}), (in[0] - w).argmax(2)};
       },
       [](DType dt, int call) {
         return V{make(dt, {2, 41, 257}, Layout::Contiguous, 91 + uint64_t(call), Values::NearOne, Specials::None),
                  make(dt, {41, 257}, Layout::Contiguous, 93 + uint64_t(call), Values::NearOne, Specials::None)};
       },
       // (not float16: eager rounds w and x - w to it, the kernel does not, and argmax then picks
       // between near-ties differently, grouped or not)
       {kFloat32, kFloat64}},
      {"integers",
       [](const V& in) { return V{(in[0] * (in[1] * in[1] + 1)).sum({2}), (in[0] - in[1].abs()).amax({2})}; },
       [](DType dt, int call) {
         return V{make(dt, {3, 29, 517}, Layout::Contiguous, 71 + uint64_t(call), Values::Any, Specials::None),
                  make(dt, {29, 517}, Layout::Contiguous, 81 + uint64_t(call), Values::Any, Specials::None)};
       },
       {kInt64, kInt32}},
  };
  for (const Case& c : cases) {
    for (DType dt : c.dtypes) {
      // Grouped, in its first dtype: the traced graph's reduction kernel unrolls (the backend runs
      // what this returns). (In float64 n-body's norm stays a reduction of its own: no group.)
      if (dt == c.dtypes[0]) {
      auto f = compile([&c](const V& in) { return c.fn(in); }, cpu_options());
      V in = c.inputs(dt, 0);
      (void)f(in);
      passes::Module m = passes::optimize(ir::parse(f.explain(in).graphs.at(0).text));
      const std::string code = codegen::emit_cpu(*m.program, codegen::CpuEmit::Code);
      EXPECT_NE(code.find("row groups: loop 0 ("), std::string::npos)
          << c.name << ", " << name(dt) << ":\n" << passes::print(*m.program) << code;
      }
      for (const char* threads : {"1", "2", "3"}) {
        for (const char* groups : {"1", "0"}) {
          kiln::testing::ScopedEnv t("KILN_NUM_THREADS", threads), g("KILN_CPU_ROW_GROUPS", groups);
          SCOPED_TRACE(c.name + ", " + std::string(name(dt)) + ", " + threads + " threads, row groups " + groups);
          check(c.fn, [&](int call) { return c.inputs(dt, call); }, Expect{});
        }
      }
    }
  }
}

// A grouped kernel does each element's work once per copy of the unrolled loop, so its launch
// counts the copies when deciding on threads (plan_threads in cpu/program.cpp, with the copies
// row_groups gives both the launch and emit_cpu, which prints the decision), at a threshold of
// 2^15 units of work (the default, with threads that spin between kernels; the default under
// OMP_WAIT_POLICY=PASSIVE is tests/tools' DumpIr.ThreadPlanFollowsTheWaitPolicy): n-body in 2-d
// over 128 bodies is [128, 128] per copy, 16384 elements, under it, but 32768 with both copies
// (no vector math call per element); 90 bodies stay on one thread. Then the cost per element:
// poly (x^2 + 3x, cost 1) stays on one thread at 2^14 elements and goes threaded at 2^15,
// sin(a) * cos(b) (cost 9) already at 4096 elements, not at 2048; a full sum's log, made once,
// costs nothing per element (a sum of 8192 stays whole). KILN_CPU_THREAD_MIN_WORK is the threshold.
TEST(CpuOpsReductionEdgeCases, ThreadsFollowTheWorkWithItsCopiesAndCosts) {
  kiln::testing::ScopedEnv t("KILN_NUM_THREADS", "2"), w("KILN_CPU_THREAD_MIN_WORK", "32768");
  auto plan = [](const Fn& fn, const V& in) {
    auto f = compile(fn, cpu_options());
    (void)f(in);
    passes::Module m = passes::optimize(ir::parse(f.explain(in).graphs.at(0).text));
    return codegen::emit_cpu(*m.program, codegen::CpuEmit::Code);
  };
  for (auto [bodies, want] : {std::pair<int64_t, std::string>{128, "threads: 2 over loop"},
                              {90, "threads: 1 (8100 elements at cost 2: under 32768 of work)"}}) {
    V in{make(kFloat32, {2, bodies}, Layout::Contiguous, 5, Values::Any, Specials::None),
         make(kFloat32, {bodies}, Layout::Contiguous, 6, Values::Positive, Specials::None)};
    const std::string code = plan(nbody_forces, in);
    EXPECT_NE(code.find("row groups: loop 0 (2)"), std::string::npos) << bodies << " bodies:\n" << code;
    EXPECT_NE(code.find(want), std::string::npos) << bodies << " bodies:\n" << code;
    check(nbody_forces, [&](int call) {
      return V{make(kFloat32, {2, bodies}, Layout::Contiguous, 7 + uint64_t(call), Values::Any, Specials::None),
               make(kFloat32, {bodies}, Layout::Contiguous, 9 + uint64_t(call), Values::Positive, Specials::None)};
    }, Expect{});
  }
  const Fn poly = [](const V& in) { return V{in[0] * in[0] + in[0] * 3}; };
  const Fn sincos = [](const V& in) { return V{sin(in[0]) * cos(in[1])}; };
  const Fn log_sum = [](const V& in) { return V{in[0].sum().log()}; };
  auto vec = [](int64_t n, uint64_t seed) { return make(kFloat32, {n}, Layout::Contiguous, seed, Values::Any, Specials::None); };
  auto has = [](const std::string& code, const std::string& want) {
    EXPECT_NE(code.find(want), std::string::npos) << code;
  };
  has(plan(poly, {vec(16384, 1)}), "threads: 1 (16384 elements at cost 1: under 32768 of work)");
  has(plan(poly, {vec(32768, 2)}), "threads: 2 over loop");
  has(plan(sincos, {vec(4096, 3), vec(4096, 4)}), "threads: 2 over loop");
  has(plan(sincos, {vec(2048, 5), vec(2048, 6)}), "threads: 1 (2048 elements at cost 9: under 32768 of work)");
  has(plan(log_sum, {vec(8192, 7)}), "threads: 1 (8192 elements at cost 1: under 32768 of work)");
  kiln::testing::ScopedEnv higher("KILN_CPU_THREAD_MIN_WORK", "1048576");
  has(plan(poly, {vec(32768, 8)}), "threads: 1 (32768 elements at cost 1: under 1048576 of work)");
}

// Horizontal fusion puts elementwise siblings (x * 2 beside x.sum()) in the reduction's kernel;
// the stores that need no reduction are written by the first pass over the row (expr.h,
// RowPlan::early), so a full reduction with such stores still splits across threads, each
// part writing its own elements. Checked with 2 and 3 threads, contiguous and transposed, a
// length that is no multiple of the vector width; rows that mix early stores with stores that
// need the row's reduction (x - mean); and a write into the reduced input itself, which must not
// be early (the reduction's later passes read x: they must see the old values).
TEST(CpuOpsReductionEdgeCases, SiblingStoresOfFullAndRowReductions) {
  for (const char* threads : {"2", "3"}) {
    kiln::testing::ScopedEnv env("KILN_NUM_THREADS", threads);
    for (DType dt : {kFloat32, kFloat64, kBFloat16, kInt64}) {
      for (auto [sizes, layout] : {std::pair<std::vector<int64_t>, Layout>{{300007}, Layout::Contiguous},
                                   {{517, 131}, Layout::Transposed},
                                   {{300, 301}, Layout::Contiguous},
                                   {{7, 33}, Layout::Narrowed}}) {
        SCOPED_TRACE(std::string(threads) + " threads, " + std::string(name(dt)) + ", " + layout_name(layout));
        Inputs inputs = [&, sizes = sizes, layout = layout](int call) {
          return V{make(dt, sizes, layout, 131 + uint64_t(dt) * 7 + uint64_t(call), Values::Any,
                        call >= 2 ? Specials::Sparse : Specials::None)};
        };
        Fn full = [](const V& in) {
          const Tensor& x = in[0];
          return V{x.sum(), x * 2, x.amax(), x.abs() + 1};
        };
        check(full, inputs, Expect{});
        if (!is_floating(dt)) continue;
        Fn rows = [](const V& in) {
          const Tensor& x = in[0];
          return V{x.sum({-1}), sin(x), x - x.mean({-1}, true), x * 3};
        };
        check(rows, inputs, Expect{});
        Fn in_place = [](const V& in) {
          Tensor x = in[0].contiguous();
          Tensor s = x.sum({-1}, true);
          Tensor m = x.amax();
          x.mul_(2);
          return V{s, m, x, x / s};
        };
        check(in_place, inputs, Expect{});
      }
    }
  }
}

// Work after a reduction that reads another operand at the row (x.sum(0) + b, a mean scaled by
// a per-row weight, integers too; c both inside a reduction and after it; c2 = c * 2 both
// reduced with x and stored): the operand is a per-row load (for c a second one beside the
// reduction's, from which c2 is computed again for its store), so the kernel is a reduction
// that compiles. Such loads used to span the reduced loop like the reduction's own operand,
// and the kernel ran interpreted ("a row value stored once per row"); Expect's `compiled`
// checks it no longer does. Over dim 0 and the last dim, contiguous and transposed.
TEST(CpuOpsReductionEdgeCases, PerRowWorkReadingOtherOperandsCompiles) {
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kInt64}) {
    for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
      SCOPED_TRACE(std::string(name(dt)) + ", " + layout_name(layout));
      Inputs inputs = [&](int call) {
        uint64_t seed = 71 + uint64_t(dt) * 5 + uint64_t(call);
        // (no special values: a sum of products of huge ones cancels differently in every order)
        return V{make(dt, {300, 40}, layout, seed, Values::Any, Specials::None),
                 make(dt, {40}, Layout::Contiguous, seed + 1, Values::Any, Specials::None),
                 make(dt, {300, 1}, Layout::Contiguous, seed + 2, Values::Any, Specials::None)};
      };
      Fn fn = [dt](const V& in) {
        const Tensor &x = in[0], &b = in[1], &c = in[2];
        V out{x.sum({0}) + b, x.amax({1}, true) * c};
        // (eager rounds a bfloat16 product before summing it, a kernel keeps it in float32)
        if (dt != kBFloat16) {
          out.push_back((x * c).sum({1}, true) - c);
          Tensor c2 = c * 2;  // stored once per row and reduced with x
          out.push_back((x * c2).sum({1}));
          out.push_back(c2);
        }
        if (is_floating(dt)) out.push_back(x.mean({0}) * b - 1);
        return out;
      };
      check(fn, inputs, Expect{});
    }
  }
}

// Math calls whose values a pass reduces (sum(exp(x - max)): the kernel computes them into
// the row's stash in a loop of their own and reduces them in the next, emit.cpp plan_stash),
// beside the other uses of such values in the same pass (stored as they are, stored early
// beside the reduction, fed by a scan), per-row math that calls libm instead of SLEEF (the log
// of log_softmax's sum, pow, exp2, log2 of a reduced value; rows of 5 keep SLEEF's), and rows
// longer than the stash (no split). Float dtypes, contiguous and transposed, rows shorter and
// longer than a vector.
TEST(CpuOpsReductionEdgeCases, MathCallsReducedInTheirPass) {
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    for (auto [sizes, layout] : {std::pair<std::vector<int64_t>, Layout>{{7, 33}, Layout::Contiguous},
                                 {{300, 5}, Layout::Contiguous},
                                 {{64, 1023}, Layout::Contiguous},
                                 {{131, 517}, Layout::Transposed},
                                 {{5, 8200}, Layout::Contiguous}}) {
      SCOPED_TRACE(std::string(name(dt)) + " [" + std::to_string(sizes[0]) + "," + std::to_string(sizes[1]) + "] " +
                   layout_name(layout));
      Inputs inputs = [&, sizes = sizes, layout = layout](int call) {
        return V{make(dt, sizes, layout, 71 + uint64_t(dt) * 5 + uint64_t(call), Values::Any,
                      call >= 2 ? Specials::Sparse : Specials::None)};
      };
      Fn fn = [](const V& in) {
        const Tensor& x = in[0];
        Tensor m = x.amax({-1}, true);
        Tensor e = exp(x - m);
        return V{e.sum({-1}),                     // the reduced calls alone
                 log(e.sum({-1}, true)) + m,      // logsumexp by hand: the per-row log
                 x.log_softmax(-1), x.softmax(-1),
                 exp(x * 0.25).sum(),             // a full reduction of calls
                 // a call reduced (positive terms: a 16-bit kernel sums the unrounded values,
                 // eager the rounded ones, which a cancelling sum would magnify), another
                 // stored beside it
                 (sin(x * 0.5) + 1.5).sum({-1}), cos(x),
                 exp2(x.abs().sum({-1}) * -0.01), log2(x.abs().sum({-1}) + 1),
                 pow(x.abs().sum({-1}) + 1, 0.37)};
      };
      check(fn, inputs, Expect{});
      Fn scan = [](const V& in) {  // a cumsum feeding the reduced calls, reduced itself and stored
        Tensor c = in[0].cumsum(-1) * 0.01;
        return V{exp(c).sum({-1}), c.sum({-1}), c * 2};
      };
      check(scan, inputs, Expect{});
    }
  }
}

}  // namespace

// A reduction by columns into 4 to 256 outputs over at least 256 rows (x.sum(0) of a narrow
// matrix: a bias gradient, a centre of mass) splits along its rows (emit.h's splits_columns):
// each thread reduces its part of the rows for every output into its own slots, then one call
// combines them per output, in order; on one thread too (one part), since the partial runs
// its outputs as one block of a constant count. Outputs 4 to 256 wide, rows from the minimum
// to sizes no part count divides, narrowed rows (padded, at an offset), every reducer, an
// epilogue, NaN and infinities in the later calls, on 1, 2 and 3 threads; and the split is
// checked to be taken (emit_cpu says so), and not taken under 4 or past 256 outputs, or under
// 256 rows.
TEST(CpuOpsReductionEdgeCases, NarrowColumnReductionsSplitAlongTheRows) {
  auto plan = [](const Fn& fn, const V& in) {
    auto f = compile(fn, cpu_options());
    (void)f(in);
    passes::Module m = passes::optimize(ir::parse(f.explain(in).graphs.at(0).text));
    return codegen::emit_cpu(*m.program, codegen::CpuEmit::Code);
  };
  const std::string split = "by columns split along the rows";
  struct Shape {
    std::vector<int64_t> sizes;
    Layout layout;
    bool splits;
  };
  const std::vector<Shape> shapes = {{{256, 4}, Layout::Contiguous, true},     {{4099, 5}, Layout::Contiguous, true},
                                     {{4099, 3}, Layout::Contiguous, false},
                                     {{1001, 16}, Layout::Narrowed, true},     {{3001, 100}, Layout::Contiguous, true},
                                     {{300, 256}, Layout::Contiguous, true},   {{300, 257}, Layout::Contiguous, false},
                                     {{255, 16}, Layout::Contiguous, false}};
  for (DType dt : {kFloat32, kFloat64, kFloat16, kInt64, kInt8, kBool}) {
    const Fn fn = [dt](const V& in) {
      const Tensor& x = in[0];
      if (dt == kBool) return V{x.any({0}), x.all({0}), x.sum({0})};
      V out = {x.sum({0}), x.amax({0}), x.amin({0})};
      if (is_floating(dt)) {
        out.push_back(x.mean({0}));
        out.push_back(relu(x.sum({0}) * 0.5 + 1));
        out.push_back((x * x).sum({0}));
      }
      return out;
    };
    for (const Shape& s : shapes) {
      SCOPED_TRACE(std::string(name(dt)) + " [" + std::to_string(s.sizes[0]) + ", " + std::to_string(s.sizes[1]) +
                   "] " + layout_name(s.layout));
      Inputs inputs = [&, dt](int call) {
        return V{make(dt, s.sizes, s.layout, 31 + uint64_t(dt) * 5 + uint64_t(call), Values::NearOne,
                      call >= 2 ? Specials::Sparse : Specials::None)};
      };
      {
        kiln::testing::ScopedEnv t("KILN_NUM_THREADS", "2");
        const std::string code = plan(fn, inputs(0));
        EXPECT_EQ(code.find(split) != std::string::npos, s.splits) << code;
      }
      for (const char* threads : {"1", "2", "3"}) {
        kiln::testing::ScopedEnv t("KILN_NUM_THREADS", threads);
        SCOPED_TRACE(std::string(threads) + " threads");
        check(fn, inputs, Expect{});
      }
    }
  }
}

// A reduction by columns with a value of every element stored beside it (a gradient and its bias
// gradient: g = x * 2 + 1 stored, g.sum(0) reduced, as backward graphs fuse them): layout lays the
// stored value out as x is, and the by-columns code writes it element by element in its pass over
// the rows. Wide and narrow (split along the rows) outputs, narrowed and transposed inputs, on 1,
// 2 and 3 threads, against eager; and the by-columns code is checked to be taken.
TEST(CpuOpsReductionEdgeCases, ColumnReductionsStoreTheirRowValuesAlongTheColumns) {
  const Fn fn = [](const V& in) {
    const Tensor& x = in[0];
    Tensor g = x * 2 + 1;
    return V{g.sum({0}), g, (g * x).sum({0})};
  };
  struct Shape {
    std::vector<int64_t> sizes;
    Layout layout;
  };
  const std::vector<Shape> shapes = {{{1024, 512}, Layout::Contiguous}, {{333, 1000}, Layout::Contiguous},
                                     {{300, 64}, Layout::Contiguous},    {{1001, 130}, Layout::Narrowed},
                                     {{257, 33}, Layout::Contiguous}};
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(std::string(name(dt)) + " [" + std::to_string(s.sizes[0]) + ", " + std::to_string(s.sizes[1]) +
                   "] " + layout_name(s.layout));
      Inputs inputs = [&, dt](int call) {
        return V{make(dt, s.sizes, s.layout, 77 + uint64_t(dt) + uint64_t(call), Values::NearOne, Specials::None)};
      };
      {
        kiln::testing::ScopedEnv t("KILN_NUM_THREADS", "2");
        auto f = compile(fn, cpu_options());
        (void)f(inputs(0));
        passes::Module m = passes::optimize(ir::parse(f.explain(inputs(0)).graphs.at(0).text));
        // (the by-columns code's accumulator block, in the IR kiln writes)
        const std::string ir = codegen::emit_cpu(*m.program, codegen::CpuEmit::LlvmRaw);
        EXPECT_NE(ir.find("acc.cols"), std::string::npos) << codegen::emit_cpu(*m.program, codegen::CpuEmit::Code);
      }
      for (const char* threads : {"1", "2", "3"}) {
        kiln::testing::ScopedEnv t("KILN_NUM_THREADS", threads);
        SCOPED_TRACE(std::string(threads) + " threads");
        check(fn, inputs, Expect{});
      }
    }
  }
}
