// compile() is never silently wrong and never unbounded: the host's reads of sizes guard the
// graphs (size() specialises, sym_size() guards comparisons), one recompile budget counts every
// retrace past which calls run eagerly, functions that return nothing compile, explain() without
// a call, KILN_LOGS, and a differential test of host code branching on sizes and numbers.
#include <gtest/gtest.h>
#include <kiln/codegen/cpu.h>
#include <kiln/ir/exec.h>
#include <kiln/ir/graph.h>
#include <kiln/kiln.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>

#include "../common/close.h"
#include "../common/scoped_env.h"
#include "../common/seeds.h"

using namespace kiln;

namespace {

void expect_same(const Tensor& a, const Tensor& b) { EXPECT_TRUE(kiln::testing::close(a, b)) << a << "\nvs\n" << b; }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The program: a host branch on a size, called at more sizes than the budget.
Tensor size_branch(const Tensor& x) {
  if (x.size(0) > 100) return x * 2;
  return x * 3;
}

}  // namespace

TEST(Soundness, HostBranchOnSizeIsNeverFrozen) {
  auto f = compile(size_branch);
  ::testing::internal::CaptureStderr();
  for (int64_t n = 10; n <= 100; n += 5) expect_same(f(ones({n})), ones({n}) * 3);
  expect_same(f(ones({200})), ones({200}) * 2);  // x * 3 here was the silent error
  expect_same(f(ones({150})), ones({150}) * 2);
  std::string err = ::testing::internal::GetCapturedStderr();
  // size() hands the host the exact value: each size is a guard of its own, so the budget ends
  // the tracing (1 + recompile_limit traces) and the calls after it run eagerly, correctly.
  EXPECT_EQ(f.stats().compiles, 9u);
  EXPECT_GT(f.stats().budget_eager_calls, 0u);
  EXPECT_TRUE(contains(err, "recompile budget")) << err;
  EXPECT_TRUE(contains(err, "sym_size")) << err;  // the fix it names
}

TEST(Soundness, SymSizeComparisonsKeepOneGraphPerOutcome) {
  CompileOptions o;
  o.recompile_limit = 4;
  auto fn = [](const Tensor& x) {
    if (x.sym_size(0) > 100) return x * 2;
    return x * 3;
  };
  auto f = compile(fn, o);
  ::testing::internal::CaptureStderr();
  for (int64_t n = 10; n <= 100; n += 5) {
    Tensor x = randn({n});
    expect_same(f(x), fn(x));
  }
  for (int64_t n = 101; n <= 300; n += 7) {
    Tensor x = randn({n});
    expect_same(f(x), fn(x));
  }
  for (int64_t n : {11, 99, 100, 101, 5000}) {
    Tensor x = randn({n});
    expect_same(f(x), fn(x));
  }
  ::testing::internal::GetCapturedStderr();
  // 3 sizes traced exactly, then the dynamic graph for outcome false, then one for true.
  EXPECT_EQ(f.stats().compiles, 5u) << f.explain();
  EXPECT_EQ(f.stats().budget_eager_calls, 0u);
  Explanation ex = f.explain();
  std::string text = ex.str();
  EXPECT_TRUE(contains(text, "argument 0 size(0) <= 100")) << text;
  EXPECT_TRUE(contains(text, "argument 0 size(0) >= 101")) << text;
}

TEST(Soundness, SymIntArithmeticAndLoopsFoldIntoRanges) {
  CompileOptions o;
  o.recompile_limit = 2;
  // An affine form compared, and a loop whose every test is a guard: the loop's guards fold into
  // one range (an exact size), the form into a half-line.
  auto fn = [](const Tensor& x, const Tensor& y) {
    Tensor out = x * 1;
    if (x.sym_size(0) * 2 - 3 <= y.sym_size(0) + 10) out = out + 1;
    int64_t steps = 0;
    for (SymInt i = 0; i < x.sym_size(1); i += 1) ++steps;
    return out * double(steps);
  };
  auto f = compile(fn, o);
  ::testing::internal::CaptureStderr();
  std::mt19937 rng(7);
  for (int call = 0; call < 30; ++call) {
    Tensor x = randn({int64_t(rng() % 20 + 1), int64_t(rng() % 3 + 2)}), y = randn({int64_t(rng() % 20 + 1)});
    expect_same(f(x, y), fn(x, y));
  }
  ::testing::internal::GetCapturedStderr();
  std::string text = f.explain().str();
  EXPECT_FALSE(contains(text, "size guard 40")) << text;  // no guard per loop step
}

TEST(Soundness, KilnOpsReadingSizesDoNotSpecialise) {
  CompileOptions o;
  o.recompile_limit = 2;
  // Every op here reads its operands' sizes inside kiln (reshape, split, flatten, narrow, t,
  // index, chunk, stack, broadcasting): none of it is the user's host code, so the leading dim
  // becomes dynamic and one graph serves every size.
  auto fn = [](const Tensor& x) {
    Tensor a = x.reshape({-1}).reshape_as(x);
    Tensor b = a.t().t() + x.narrow(1, 0, 2).sum(1, true);
    Tensor c = stack({b, b}, 0).sum(0);
    Tensor d = c.flatten().view_as(c) + x.index({indexing::Slice(), 0}).unsqueeze(1);
    return d.chunk(2, 1)[0] + d.split(2, 1)[0];
  };
  auto f = compile(fn, o);
  ::testing::internal::CaptureStderr();
  for (int64_t n = 2; n <= 20; ++n) {
    Tensor x = randn({n, 4});
    expect_same(f(x), fn(x));
  }
  ::testing::internal::GetCapturedStderr();
  EXPECT_LE(f.stats().compiles, 4u) << f.explain();
  EXPECT_TRUE(f.explain().size_guards.empty()) << f.explain();
}

TEST(Soundness, ReadsOfNumelStridesAndLayoutAreGuarded) {
  CompileOptions o;
  o.recompile_limit = 2;
  auto fn = [](const Tensor& x) {
    Tensor y = x * 1;
    if (x.numel() % 2 == 0) y = y + 1;
    if (x.stride(0) > 8) y = y * 2;
    if (!x.is_contiguous()) y = y - 5;
    return y;
  };
  auto f = compile(fn, o);
  ::testing::internal::CaptureStderr();
  for (int64_t n = 1; n <= 16; ++n) {
    Tensor x = randn({n, 5}).slice(1, 0, 5 - n % 2);
    expect_same(f(x), fn(x));
  }
  ::testing::internal::GetCapturedStderr();
}

TEST(Soundness, NumberArgumentsShareOneBudget) {
  CompileOptions o;
  o.recompile_limit = 4;
  o.name = "step";
  auto fn = [](const Tensor& x, double lr) { return x - x * lr; };
  auto f = compile(fn, o);
  ::testing::internal::CaptureStderr();
  Tensor x = randn({64});
  for (int i = 0; i < 50; ++i) expect_same(f(x, 0.001 * i), fn(x, 0.001 * i));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(f.stats().compiles, 5u);
  EXPECT_EQ(f.stats().budget_eager_calls, 45u);
  EXPECT_TRUE(contains(err, "argument 1 (double) took 4 new values")) << err;
  EXPECT_TRUE(contains(err, "kiln::SymFloat(v)")) << err;
  EXPECT_EQ(err.find("recompile budget"), err.rfind("recompile budget")) << "warned once: " << err;
  // the fix: a 0-d tensor is a graph input, one trace for every value
  auto g = compile([](const Tensor& x, const Tensor& lr) { return x - x * lr; });
  for (int i = 0; i < 50; ++i) expect_same(g(x, scalar_tensor(0.001 * i, kFloat64)), fn(x, 0.001 * i));
  EXPECT_EQ(g.stats().compiles, 1u);
}

// A SymFloat is a number the graph reads at every call: one trace for every value, and the
// same results as the double it stands for.
TEST(SymFloat, ArgumentsTraceOnceForEveryValue) {
  auto fn = [](const Tensor& x, double lr) { return x - x * lr; };
  auto f = compile([](const Tensor& x, const SymFloat& lr) { return x - x * lr; });
  Tensor x = randn({64});
  for (int i = 0; i < 50; ++i) {
    Tensor got = f(x, SymFloat(0.001 * i)), want = fn(x, 0.001 * i);
    EXPECT_TRUE(kiln::testing::close(got, want)) << "lr " << 0.001 * i;
  }
  EXPECT_EQ(f.stats().compiles, 1u);
  EXPECT_EQ(f.stats().hits, 49u);
  // Arithmetic of SymFloats and numbers stays in the graph.
  auto g = compile([](const Tensor& x, const SymFloat& dt) { return x * (dt * 2.0 + 1.0) - (1.0 - dt) / x; });
  for (int i = 1; i < 20; ++i) {
    const double dt = 0.37 * i;
    expect_same(g(x, SymFloat(dt)), x * (dt * 2.0 + 1.0) - (1.0 - dt) / x);
  }
  EXPECT_EQ(g.stats().compiles, 1u);
}

// A plain number passed where the function declares a SymFloat becomes one at the call, so it
// is a graph input too (lambdas with declared parameters, functions, function pointers).
Tensor scaled_step(const Tensor& x, SymFloat dt) { return x + x * dt; }

TEST(SymFloat, NumbersPassedForASymFloatParameterAreConvertedAtTheCall) {
  auto f = compile([](const Tensor& x, const SymFloat& lr) { return x - x * lr; });
  auto g = compile(scaled_step);
  Tensor x = randn({32});
  for (int i = 0; i < 12; ++i) {
    expect_same(f(x, 0.01 * i), x - x * (0.01 * i));
    expect_same(g(x, i), x + x * double(i));  // an int too
  }
  EXPECT_EQ(f.stats().compiles, 1u);
  EXPECT_EQ(g.stats().compiles, 1u);
  EXPECT_EQ(f.explain(x, 0.5).stats.compiles, 1u);
  // A generic lambda's parameter types cannot be read: the double stays a double, each value a
  // trace of its own (counted by the budget, so still never wrong).
  auto h = compile([](const Tensor& x, auto lr) { return x * SymFloat(lr); });
  for (int i = 0; i < 3; ++i) expect_same(h(x, 0.5 * i), x * (0.5 * i));
  EXPECT_EQ(h.stats().compiles, 3u);
}

TEST(SymFloat, PromotesAndRoundsAsADouble) {
  const double v = 0.1;
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kBool}) {
    Tensor x = dt == kBool ? randn({33}) > 0 : (randn({33}) * 10).to(dt);
    for (const Tensor& t : {x, x[3]}) {  // a 0-d tensor too: the number never promotes it
      const SymFloat s(v);
      // exactly: both run the same eager kernels on the same rounded number
      auto check = [&](const Tensor& got, const Tensor& want) {
        ASSERT_EQ(got.dtype(), want.dtype()) << name(dt);
        EXPECT_TRUE(got.sizes().vec() == want.sizes().vec() && got.eq(want).all().item<bool>())
            << name(dt) << "\n" << got << want;
      };
      check(t * s, t * v);
      check(s * t, v * t);
      check(t + s, t + v);
      check(t / s, t / v);
      check(s / t, v / t);
      check(t < s, t < v);
      check(s >= t, v >= t);
      check(t == s, t == v);
      if (dt == kBool) {
        EXPECT_THROW(s - t, Error);  // as `v - t` and PyTorch: no subtraction with a bool tensor
      } else {
        check(s - t, v - t);
      }
    }
  }
  EXPECT_THROW(SymFloat(randn({2})), Error);
  EXPECT_EQ(SymFloat(ones({1, 1}) * 3).value_unchecked(), 3.0);
}

// Comparisons guard their outcome: one graph per side; guard_float() a graph per value.
TEST(SymFloat, ComparisonsGuardTheOutcomeAndGuardFloatSpecialises) {
  auto fn = [](const Tensor& x, double t) { return t > 0.5 ? x * 2 : x * 3; };
  auto f = compile([](const Tensor& x, const SymFloat& t) {
    if (t > 0.5) return x * 2;
    return x * 3;
  });
  Tensor x = randn({16});
  for (int i = 0; i < 20; ++i) expect_same(f(x, SymFloat(0.05 * i)), fn(x, 0.05 * i));
  EXPECT_EQ(f.stats().compiles, 2u);
  CompileOptions o;
  o.recompile_limit = 100;
  auto g = compile([](const Tensor& x, const SymFloat& t) { return x * t.guard_float(); }, o);
  for (int i = 0; i < 5; ++i) expect_same(g(x, SymFloat(1.0 + i)), x * (1.0 + i));
  for (int i = 0; i < 5; ++i) expect_same(g(x, SymFloat(1.0 + i)), x * (1.0 + i));
  EXPECT_EQ(g.stats().compiles, 5u);
}

TEST(Soundness, ItemGuardsShareTheBudgetAndNameTheirLine) {
  CompileOptions o;
  o.recompile_limit = 3;
  auto fn = [](const Tensor& x) { return x * x.max().item<double>(); };
  auto f = compile(fn, o);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 40; ++i) {
    Tensor x = randn({16});
    expect_same(f(x), fn(x));
  }
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(f.stats().compiles, 4u);
  EXPECT_TRUE(contains(err, "item() on a traced tensor at")) << err;
  EXPECT_TRUE(contains(err, "test_soundness.cpp")) << err;
  EXPECT_TRUE(contains(err, ".item<bool>()")) << err;
  // the log and the guard's value list stay bounded
  Explanation ex = f.explain();
  EXPECT_LE(ex.recompiles.size(), 70u);
  for (const std::string& g : ex.guards) EXPECT_LT(g.size(), 2000u) << g;
}

TEST(Soundness, ReboundCaptureRetracesOnceThenReplays) {
  Tensor w = full({8}, 2.0);
  auto f = compile([&w](const Tensor& x) { return x * w; });
  Tensor x = randn({8});
  expect_same(f(x), x * 2);
  w = full({8}, 3.0);  // the captured tensor is released: a new one in its place
  for (int i = 0; i < 100; ++i) expect_same(f(x), x * 3);
  EXPECT_EQ(f.stats().compiles, 2u);
  EXPECT_EQ(f.stats().hits, 99u);
}

TEST(Soundness, FunctionsReturningNothingCompile) {
  auto step = compile([](Tensor p, const Tensor& g) { p.sub_(g * 0.1); });
  Tensor p = randn({1000}), g = randn({1000});
  Tensor want = p.clone();
  for (int i = 0; i < 3; ++i) {
    step(p, g);
    want.sub_(g * 0.1);
    expect_same(p, want);
  }
  Explanation ex = step.explain();
  ASSERT_EQ(ex.graphs.size(), 1u);
  EXPECT_TRUE(contains(ex.graphs[0].backend, codegen::has_cpu_codegen() ? "cpu: 1 of 1 kernels" : "cpu: 0 of 1 kernels"))
      << ex;
  EXPECT_FALSE(contains(ex.graphs[0].backend, "reference executor")) << ex;
  EXPECT_EQ(step.stats().calls, 3u);  // explain() without arguments ran nothing
  expect_same(p, want);
  // through a view, and a function with no effect at all
  auto rows = compile([](Tensor p) { p.slice(0, 0, 10).mul_(2); });
  Tensor q = randn({20}), q0 = q.clone();
  rows(q);
  rows(q);
  expect_same(q.slice(0, 0, 10), q0.slice(0, 0, 10) * 4);
  expect_same(q.slice(0, 10), q0.slice(0, 10));
  auto nothing = compile([](const Tensor& x) { Tensor y = x * 2; });
  nothing(q);
  nothing(q);
  EXPECT_TRUE(contains(nothing.explain().graphs.at(0).backend, "nothing to run")) << nothing.explain();
}

TEST(Soundness, SizesReadInACondBranchPinTheGraph) {
  CompileOptions o;
  o.recompile_limit = 2;
  auto fn = [](const Tensor& x) {
    return cond(
        x.sum() > 0, [](const Tensor& a) { return a.size(0) > 6 ? a * 2 : a * 3; },
        [](const Tensor& a) { return a - 1; }, x);
  };
  auto f = compile(fn, o);
  ::testing::internal::CaptureStderr();
  for (int64_t n = 2; n <= 12; ++n) {
    Tensor x = rand({n}) + 0.1;
    expect_same(f(x), fn(x));
  }
  ::testing::internal::GetCapturedStderr();
}

TEST(Soundness, KilnLogsSaysWhatAndWhere) {
  kiln::testing::ScopedEnv logs("KILN_LOGS", "recompiles,guards,graph_breaks,perf_hints");
  CompileOptions o;
  o.recompile_limit = 1;
  o.name = "logged";
  auto f = compile(
      [](const Tensor& x) {
        if (x.sum().item<float>() > 0) return x * 2;
        return x * -2;
      },
      o);
  ::testing::internal::CaptureStderr();
  f(ones({4}));
  f(-ones({4}));
  f(ones({5}));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(err, "[kiln:recompiles] logged (compiled at")) << err;
  EXPECT_TRUE(contains(err, "[kiln:graph_breaks]")) << err;
  EXPECT_TRUE(contains(err, "[kiln:guards]")) << err;
  EXPECT_TRUE(contains(err, "[kiln:perf_hints]")) << err;  // the third call is past the budget
  EXPECT_TRUE(contains(err, "test_soundness.cpp")) << err;
  // the kernel cache's channel: each disk lookup a compile makes
  if (!codegen::has_cpu_codegen()) return;  // (no kernels compiled, no lookups)
  kiln::testing::ScopedEnv cache_logs("KILN_LOGS", "cache");
  auto g = compile([](const Tensor& x) { return (x * 1.25).atan(); });
  ::testing::internal::CaptureStderr();
  g(ones({7}));
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(err, "[kiln:cache] hit ") || contains(err, "[kiln:cache] miss ")) << err;
}

TEST(SymInt, PlainOutsideATrace) {
  Tensor x = zeros({6, 4});
  SymInt n = x.sym_size(0);
  EXPECT_FALSE(n.is_symbolic());
  EXPECT_TRUE(n * 2 - 1 == 11);
  EXPECT_TRUE(n / 4 == 1 && n % 4 == 2 && -n < 0);
  EXPECT_EQ(n.guard_int(), 6);
  EXPECT_EQ(int64_t(x.sym_sizes().at(1)), 4);
  EXPECT_THROW(n / 0, Error);
  EXPECT_THROW(SymInt(INT64_MAX) + 1, Error);
}

// Random host code deciding on sizes and numbers, called at more sizes and values than the
// budget: compiled against eager, every call.
TEST(Soundness, RandomHostBranchesOnSizesAndNumbers) {
  const auto [first, last] = kiln::testing::seed_range(40, "KILN_SOUNDNESS_PROGRAMS");
  int mismatches = 0, calls = 0;
  ::testing::internal::CaptureStderr();
  for (uint32_t seed = first; seed <= last; ++seed) {
    std::mt19937 rng(seed);
    const int64_t k1 = rng() % 12 + 1, k2 = rng() % 12 + 1, k3 = rng() % 30;
    const int shape = int(rng() % 4);
    auto fn = [=](const Tensor& x, const Tensor& y, double s) {
      Tensor out = x + y.sum();
      switch (shape) {
        case 0:
          if (x.sym_size(0) > k1) out = out * 2;
          if (x.sym_size(0) + y.sym_size(0) == k2 + 3) out = out - 1;
          break;
        case 1:
          if (x.size(0) * 3 < k3) out = out.exp();
          if (s > 0.5) out = out + s;
          break;
        case 2:
          for (SymInt i = 0; i < x.sym_size(0) && i < k1; i += 1) out = out + 1;
          if (x.numel() > k3) out = out.neg();
          break;
        default:
          if (x.sym_size(0) * 2 >= y.sym_size(0) * 3) out = out.sin();
          if (x.sizes()[0] == k2) out = out * s;
          break;
      }
      return out;
    };
    CompileOptions o;
    o.recompile_limit = int(rng() % 5);
    auto f = compile(fn, o);
    for (int call = 0; call < 25; ++call) {
      Tensor x = randn({int64_t(rng() % 16 + 1), 3}), y = randn({int64_t(rng() % 16 + 1)});
      const double s = double(rng() % 4) / 4;
      Tensor got = f(x, y, s), want = fn(x, y, s);
      ++calls;
      if (!kiln::testing::close(got, want)) {
        ++mismatches;
        ADD_FAILURE() << "seed " << seed << " call " << call << " x " << x.size(0) << " y " << y.size(0) << " s " << s
                      << "\n" << f.explain();
      }
    }
    EXPECT_LE(f.stats().compiles, uint64_t(o.recompile_limit) + 1);
  }
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(mismatches, 0) << "of " << calls << " calls";
}

namespace {
// The resident set of this process, in bytes (Linux).
int64_t rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long pages = 0, resident = 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return int64_t(resident) * 4096;
}
}  // namespace

// Many threads calling one function with new signatures, guard values and number arguments far
// past the budget: results stay eager's, traces stop at the budget, and memory stops growing.
// KILN_STRESS_CALLS sets the calls per thread (default 1000; the long run in docs/compile.md
// takes 5000).
TEST(Soundness, ThreadsPastTheBudgetStayBounded) {
  const char* env = std::getenv("KILN_STRESS_CALLS");
  const int calls = env ? std::max(8, std::atoi(env)) : 1000;
  auto fn = [](const Tensor& x, double s) {
    Tensor y = x * s;
    if (y.sum().item<float>() > 0) return y + x.max().item<double>();
    return y - 1;
  };
  auto f = compile(fn);
  std::atomic<int> bad{0};
  std::atomic<int64_t> rss_mid{0};
  std::atomic<int> halfway{0};
  ::testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(uint32_t(t) * 7919u + 1);
      for (int i = 0; i < calls; ++i) {
        if (i == calls / 2 && ++halfway == 8) rss_mid = rss_bytes();
        Tensor x = randn({int64_t(rng() % 64 + 1)});
        const double s = double(rng() % 1000) / 100;
        if (!kiln::testing::close(f(x, s), fn(x, s))) bad++;
      }
    });
  for (auto& th : threads) th.join();
  ::testing::internal::GetCapturedStderr();
  const int64_t rss_end = rss_bytes();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(f.stats().compiles, 9u);
  EXPECT_GT(f.stats().budget_eager_calls, 0u);
  EXPECT_LE(f.explain().recompiles.size(), 70u);
  // The second half of the calls (all past the budget) adds no traces, kernels or log lines.
  // Under AddressSanitizer freed memory sits in its quarantine (256 MB by default) before it is
  // reused, so the resident set there says nothing about kiln; the count bounds above still hold.
#if defined(__SANITIZE_ADDRESS__)
  rss_mid = 0;
#endif
  if (rss_mid > 0) {
    EXPECT_LT(rss_end - rss_mid, int64_t(64) << 20) << "RSS grew from " << rss_mid << " to " << rss_end;
  }
}

// A host loop unrolled into a long trace: the graph is cut every max_graph_ops ops (no guard),
// results stay eager's, and KILN_LOGS=perf_hints says so once.
TEST(Soundness, LongTracesAreCutAndSaySo) {
  kiln::testing::ScopedEnv logs("KILN_LOGS", "perf_hints");
  CompileOptions o;
  o.max_graph_ops = 100;
  auto fn = [](const Tensor& x0, const Tensor& y) {
    Tensor x = x0;
    for (int i = 0; i < 300; ++i) x = x * 0.5 + y;
    return x;
  };
  auto f = compile(fn, o);
  Tensor x = randn({50}), y = randn({50});
  ::testing::internal::CaptureStderr();
  expect_same(f(x, y), fn(x, y));
  Tensor x2 = randn({50});
  expect_same(f(x2, y), fn(x2, y));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(f.stats().compiles, 1u);
  EXPECT_EQ(f.stats().hits, 1u);
  Explanation ex = f.explain();
  EXPECT_GE(ex.graphs.size(), 6u) << ex;
  for (const auto& g : ex.graphs) EXPECT_LE(g.ops, 101u);
  EXPECT_TRUE(contains(err, "[kiln:perf_hints]")) << err;
  EXPECT_TRUE(contains(err, "is long: it was cut into")) << err;
  // fullgraph keeps one graph
  CompileOptions whole = o;
  whole.fullgraph = true;
  auto g = compile(fn, whole);
  expect_same(g(x, y), fn(x, y));
  EXPECT_EQ(g.explain().graphs.size(), 1u);
}

// The memory cache of compiled kernels is bounded (KILN_KERNEL_CACHE_MB): functions created and
// dropped leave at most the bound linked; a kernel a live function still uses stays callable
// after the cache let it go, and a dropped one is linked again when needed.
TEST(Soundness, ReleasedFunctionsReleaseTheirKernels) {
  if (!codegen::has_cpu_codegen()) GTEST_SKIP() << "built without LLVM";
  kiln::testing::ScopedEnv cap("KILN_KERNEL_CACHE_MB", "0");  // the cache keeps the newest kernel only
  Tensor x = randn({64});
  auto kept = compile([](const Tensor& a) { return (a * 3.5).sin() + 0.25; });
  expect_same(kept(x), (x * 3.5).sin() + 0.25);
  const uint64_t evicted_before = codegen::cpu_kernel_memory().evicted;
  for (int i = 0; i < 40; ++i) {
    const double c = 1.0 + i / 64.0;  // a kernel of its own each (the number is in the kernel)
    auto f = compile([c](const Tensor& a) { return (a * c).cos() - c; });
    expect_same(f(x), (x * c).cos() - c);
  }
  codegen::CpuKernelMemory m = codegen::cpu_kernel_memory();
  EXPECT_LE(m.cached, 1u);
  EXPECT_GE(m.evicted - evicted_before, 39u);
  expect_same(kept(x), (x * 3.5).sin() + 0.25);  // its kernel left the cache, not the process
  auto again = compile([](const Tensor& a) { return (a * 1.0).cos() - 1.0; });  // the first loop's kernel
  expect_same(again(x), (x * 1.0).cos() - 1.0);
}

// Tensors of one value made inside the function are fill ops, not their bytes: an empty() buffer
// traces the same every time (its bytes were garbage, different per trace, so the graphs before a
// guard never matched), and a large zeros() costs the graph a few lines.
TEST(Soundness, FactoriesOfOneValueAreFills) {
  auto fn = [](const Tensor& x) {
    Tensor b = empty({8});
    b.copy_(x * 2);
    if ((b.sum() > 0).item<bool>()) return b + 1;
    return b - 1;
  };
  auto f = compile(fn);
  for (int i = 0; i < 6; ++i) {
    Tensor x = (i % 2 ? -1.0 : 1.0) * (rand({8}) + 0.5);
    expect_same(f(x), fn(x));
  }
  EXPECT_EQ(f.stats().compiles, 2u);
  EXPECT_EQ(f.stats().hits, 4u);
  auto big = compile([](const Tensor& x) { return zeros({1 << 20}) + ones({1 << 20}) * x + full({1 << 20}, 2.5); });
  Tensor x = randn({1 << 20});
  expect_same(big(x), x + 2.5);
  size_t text = 0;
  for (const auto& g : big.explain().graphs) text += g.text.size();
  EXPECT_LT(text, 4096u);
  // A tensor of many values made from host data is a constant of its bytes: explain() shows its
  // size, the text form (dump-ir, the caches) every byte.
  std::vector<float> host(1 << 16);
  for (size_t i = 0; i < host.size(); ++i) host[i] = float(i) * 0.5f;
  auto ramp = compile([&host](const Tensor& x) { return x * from_vector(host); });
  Tensor y = randn({1 << 16});
  expect_same(ramp(y), y * from_vector(host));
  Explanation ex = ramp.explain();
  ASSERT_EQ(ex.graphs.size(), 1u);
  EXPECT_TRUE(contains(ex.graphs[0].text, ir::bytes_to_hex(ir::encode_constant(from_vector(host)))));
  EXPECT_NO_THROW(ir::parse(ex.graphs[0].text));
  const std::string shown = ex.str();
  EXPECT_LT(shown.size(), 8192u) << shown.substr(0, 2048);
  EXPECT_TRUE(contains(shown, "data=<262144 bytes>")) << shown.substr(0, 2048);
  const std::string small = "graph @g(%x: f32[2]{1}) {\n  %0 = constant() {data=\"0000803f00000040\"} : f32[2]{1}\n"
                            "  %1 = mul(%x, %0) : f32[2]{1}\n  return %1\n}\n";
  EXPECT_TRUE(contains(ir::shorten_constants(small, 4), "{data=<8 bytes>}"));
  EXPECT_EQ(ir::shorten_constants(small, 8), small);
  EXPECT_EQ(ir::shorten_constants(small), small);
}

namespace {
// Whether two tensors hold the same values bit for bit (as float64, which holds every value of
// the other dtypes exactly), dtype and sizes too.
::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype()) return ::testing::AssertionFailure() << name(got.dtype()) << " vs " << name(want.dtype());
  if (got.sizes().vec() != want.sizes().vec()) return ::testing::AssertionFailure() << "sizes differ";
  if (got.numel() == 0 || got.to(kFloat64).eq(want.to(kFloat64)).all().item<bool>()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << got << "\nvs eager's\n" << want;
}

// The largest tensor constant in a function's graphs, in bytes, and whether they use iota.
std::pair<size_t, bool> constants_and_iota(const Explanation& ex) {
  size_t most = 0;
  bool iota = false;
  for (const auto& g : ex.graphs) {
    ir::Graph parsed = ir::parse(g.text);
    for (const auto& n : parsed.nodes()) {
      iota = iota || n->op == OpId::Iota;
      if (const ir::Attr* d = n->attr("data")) most = std::max(most, std::get<std::string>(d->value).size());
    }
  }
  return {most, iota};
}
}  // namespace

// arange, linspace and eye inside a compiled function are ops over iota (each element's index),
// never their values' bytes, and give eager's values bit for bit: integer ranges that wrap,
// float ranges with one rounding per element, every dtype, both halves of a linspace, empty
// and one-element results, on the reference executor and the compiled kernels.
TEST(Soundness, RangeFactoriesAreOpsWithEagersBits) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  std::vector<std::function<Tensor()>> made = {
      [] { return arange(17); },
      [] { return arange(-5, 40, 3, TensorOptions(kInt32)); },
      [] { return arange(7, -9, -2, TensorOptions(kInt8)); },
      [] { return arange(0, 300, 1, TensorOptions(kUInt8)); },  // wraps past 255, as eager
      [=] { return arange(big - 20, big, 3); },                  // start + i * step near int64's end
      [] { return arange(0, 17, 1, TensorOptions(kFloat32)); },
      [] { return arange(0.5, 10.5, 0.3); },
      [] { return arange(-1.25, 3.0, 0.1, TensorOptions(kFloat64)); },
      [] { return arange(0.1, 2.0, 0.07, TensorOptions(kFloat16)); },
      [] { return arange(0.1, 2.0, 0.07, TensorOptions(kBFloat16)); },
      [] { return arange(1e6, 1e6 + 100, 0.37); },
      [] { return arange(0.5, 20.5, 1.5, TensorOptions(kInt32)); },  // float bounds, integer dtype
      [] { return arange(3, 3); },
      [] { return arange(0.25, 1.0, 1.0 / (1 << 18)); },  // (eager fills it on both threads)
      [] { return arange(int64_t(1) << 18, TensorOptions(kInt32)); },
      [] { return linspace(-1, 3, 34); },
      [] { return linspace(0, 1, 2, TensorOptions(kFloat64)); },
      [] { return linspace(0, 1, 7, TensorOptions(kFloat16)); },
      [] { return linspace(2.5, -7.25, 101, TensorOptions(kFloat64)); },
      [] { return linspace(-10, 10, 9, TensorOptions(kInt32)); },
      [] { return linspace(1e-3, 1e3, 1000); },
      [] { return linspace(0, 1, 1); },
      [] { return linspace(0, 1, 0); },
      [] { return linspace(-3, 5, (1 << 18) + 1); },
      [] { return eye(5); },
      [] { return eye(3, 7, TensorOptions(kInt64)); },
      [] { return eye(6, 2, TensorOptions(kBool)); },
      [] { return eye(0, 4); },
      [] { return eye(1, 1, TensorOptions(kFloat16)); },
  };
  for (auto backend : {CompileOptions::Backend::Reference, CompileOptions::Backend::Compiled}) {
    if (backend == CompileOptions::Backend::Compiled && !codegen::has_cpu_codegen()) continue;
    CompileOptions opts;
    opts.backend = backend;
    for (size_t k = 0; k < made.size(); ++k) {
      SCOPED_TRACE("factory " + std::to_string(k) + (backend == CompileOptions::Backend::Reference ? ", reference" : ", compiled"));
      const Tensor want = made[k]();
      // (returned as it is, and read by a fused kernel: x is a one, so the product is exact)
      auto f = compile([&](const Tensor& x) {
        Tensor t = made[k]();
        return std::vector<Tensor>{t, t.to(kFloat64) * x};
      }, opts);
      Tensor one = ones({}, TensorOptions(kFloat64));
      for (int call = 0; call < 2; ++call) {
        std::vector<Tensor> got = f(one);
        EXPECT_TRUE(same_bits(got[0], want));
        EXPECT_TRUE(same_bits(got[1], want.to(kFloat64)));
      }
      auto [most, iota] = constants_and_iota(f.explain());
      if (want.numel() > 1) {
        EXPECT_TRUE(iota) << f.explain().str();
        EXPECT_LE(most, 8u) << "a constant of " << most << " bytes: " << f.explain().str();
      }
    }
  }
  // The graph stays small whatever the size.
  auto wide = compile([](const Tensor& x) { return x * arange(0.0, 1.0, 1.0 / (1 << 20)) + linspace(0, 1, 1 << 20); });
  Tensor x = randn({1 << 20});
  expect_same(wide(x), x * arange(0.0, 1.0, 1.0 / (1 << 20)) + linspace(0, 1, 1 << 20));
  size_t text = 0;
  for (const auto& g : wide.explain().graphs) text += g.text.size();
  EXPECT_LT(text, 4096u);
}

// Kernels that differ only in where their operands start are one kernel: a sweep over the rows
// of a grid (each row read and written through a view) compiles a handful, not one per row.
TEST(Soundness, RowKernelsDifferingInOffsetsAreOneKernel) {
  if (!codegen::has_cpu_codegen()) GTEST_SKIP() << "built without LLVM";
  const int64_t rows = 40;
  auto body = [rows](Tensor g) {
    for (int64_t i = 1; i + 1 < rows; ++i) g.select(0, i).copy_((g.select(0, i - 1) + g.select(0, i + 1)) * 0.4375);
  };
  auto sweep = compile(body);
  Tensor g = randn({rows, 48}), ref = g.clone();
  sweep(g);
  body(ref);
  expect_same(g, ref);
  const std::string note = sweep.explain().graphs.at(0).backend;
  // "cpu: K of K kernels compiled (M from memory, D from disk)": all but a few reuse one
  int kernels = 0, memory = 0, disk = 0;
  ASSERT_EQ(std::sscanf(note.c_str(), "cpu: %*d of %d kernels compiled (%d from memory, %d from disk)", &kernels, &memory,
                        &disk),
            3)
      << note;
  EXPECT_GE(kernels, int(rows - 2)) << note;  // (a kernel or two per row)
  EXPECT_GE(memory + disk, kernels - 4) << note;
}

// Writes into an argument made before a guard that fails are undone before the fresh trace, also
// across graphs cut for length; after the last guard of a path nothing is saved for undoing.
TEST(Soundness, WritesBeforeAFailingGuardAreUndoneAcrossCuts) {
  CompileOptions o;
  o.max_graph_ops = 8;
  auto fn = [](Tensor x) {
    for (int i = 0; i < 10; ++i) x.mul_(1.5).add_(0.25);
    if ((x.sum() > 0).item<bool>()) x.add_(1);
    else x.sub_(1);
    for (int i = 0; i < 10; ++i) x.mul_(0.5);
  };
  auto f = compile(fn, o);
  for (int call = 0; call < 6; ++call) {
    Tensor x = (call % 3 == 2 ? -1.0 : 1.0) * (rand({16}) + 1.0), want = x.clone();
    f(x);
    fn(want);
    expect_same(x, want);
  }
  EXPECT_EQ(f.stats().compiles, 2u);
  // writes after a break go through the value handed over, which is the argument itself: a
  // later guard that fails undoes them too
  auto fn2 = [](Tensor x) {
    Tensor y = x * 2;
    if ((y.sum() > 0).item<bool>()) x.add_(1);  // (the first write: after the break)
    else x.sub_(1);
    x.mul_(1.5);
    if ((x.max() > 6).item<bool>()) x.mul_(0.5);
    else x.add_(10);
  };
  auto g = compile(fn2);
  for (int call = 0; call < 6; ++call) {
    Tensor x = rand({8}) + (call % 2 ? 0.1 : 3.5), want = x.clone();
    g(x);
    fn2(want);
    expect_same(x, want);
  }
}

// Autograd and compile(): a function that returns a tensor whose gradient history is still live
// (backward() runs after the call) gives its results that history when replayed (a compiled
// backward as their grad_fn), for captures and arguments that require grad alike.
TEST(Soundness, CallsReadingTensorsThatRequireGradKeepTheirGradients) {
  Tensor w = randn({4, 3}, kFloat64).requires_grad_();
  auto f = compile([&](const Tensor& x) { return (x.matmul(w).tanh() * x.sum(1, true)).sum(); });
  Tensor x = randn({2, 4}, kFloat64);
  Tensor eager_grad;
  {
    Tensor loss = (x.matmul(w).tanh() * x.sum(1, true)).sum();
    eager_grad = autograd::grad({loss}, {w})[0];
  }
  for (int i = 0; i < 3; ++i) {
    w.mutable_grad() = Tensor();
    Tensor loss = f(x);
    ASSERT_TRUE(loss.requires_grad()) << f.explain();
    loss.backward();
    expect_same(w.grad(), eager_grad);
  }
  // An argument that requires grad: its gradient too.
  Tensor xr = x.clone().requires_grad_();
  f(xr).backward();
  EXPECT_TRUE(xr.grad().defined());
  // (replayed: the forward compiled, its backward compiled too and attached to the result)
  EXPECT_GT(f.stats().hits, 0u) << f.explain();
}

TEST(Soundness, AGraphCompiledWithoutGradIsNotReplayedWhenItsCaptureNowRequiresGrad) {
  Tensor w = randn({3}, kFloat64);
  auto f = compile([&](const Tensor& x) { return (x * w).exp().sum(); });
  Tensor x = randn({3}, kFloat64);
  {
    NoGradGuard no_grad;
    f(x);
    f(x);
  }
  EXPECT_GE(f.stats().hits, 1u);
  w.requires_grad_();
  Tensor loss = f(x);
  ASSERT_TRUE(loss.requires_grad());
  loss.backward();
  expect_same(w.grad(), x * (x * w.detach()).exp());
  {
    NoGradGuard no_grad;
    const uint64_t hits = f.stats().hits;
    f(x);
    EXPECT_EQ(f.stats().hits, hits + 1);  // without grad mode the compiled graph serves again
  }
}
