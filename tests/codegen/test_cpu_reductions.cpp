// The CPU backend against eager, reductions: sum, nansum, mean, prod, amax, amin, any, all,
// norm (p = 1, 2, inf), var and std (correction 0 and 1), logsumexp, and the row-wise
// softmax and log_softmax, over the last dim, over dim 0 and over all dims, keepdim true and
// false, in every dtype eager accepts; then reductions over the layouts a kernel must address
// (transposed, sliced, at an offset, broadcast dims, empty and single-element rows).
// The harness is cpu_diff.h.
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

#include <string>
#include <vector>

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
  bool row_wise = false;  // softmax, log_softmax: one dim, no keepdim, no "all dims"
};

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
  Fn fn = [f = rc.fn, d](const V& in) { return V{f(in[0], d)}; };
  return check(fn, inputs, Expect{}) == Outcome::Checked;
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
  };
  return c;
}

// The probe: reductions over the last dim, the first dim and all dims, their dtype's kind.
Fn reduce_probe(DType dt, int64_t numel) {
  return [dt, numel](const V& in) {
    const Tensor& x = in[0];
    int64_t first = 0;
    V out = {x.sum({-1}), x.sum({first}, true), x.sum()};
    if (dt == kBool) {
      out.push_back(x.any({-1}));
      out.push_back(x.all({first}));
    } else if (numel > 0) {  // (amax of no elements is an error)
      out.push_back(x.amax({-1}, true));
      out.push_back(x.amin({first}));
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

// Full reductions (every dim) of large tensors split loop 0 across threads: each thread
// reduces its part into its own accumulators, then one call combines them in order. With 2
// and 3 threads (a part count that divides nothing here), contiguous and transposed, sizes
// that are no multiple of anything.
TEST(CpuOpsReductionEdgeCases, FullReductionsSplitAcrossThreads) {
  const char* saved = std::getenv("KILN_NUM_THREADS");
  std::string restore = saved ? saved : "";
  for (const char* threads : {"2", "3"}) {
    setenv("KILN_NUM_THREADS", threads, 1);
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
  if (saved) setenv("KILN_NUM_THREADS", restore.c_str(), 1);
  else unsetenv("KILN_NUM_THREADS");
}

}  // namespace
