// Speculation past graph breaks (CompileOptions::speculate, frontend/src/speculate.cpp): when
// the predictor expects a guard's outcome, the graph after it runs merged with the graph before
// it. Results must be eager's whichever way the guard goes: speculated on a one-way guard and on
// an alternating one, dropped when the guess is wrong, off for children that write, after errors
// only the dropped child would raise, at other sizes of a dynamic dim, and with the option off
// (test_compile.cpp's PrintIsReplayed speculates past a print). The predictor (two-level,
// kConfident = 2) speculates from the third call of a one-way guard: the trace and the first
// replay are its two observations.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <string>

#include "../common/close.h"

using namespace kiln;

namespace {

void expect_same(const Tensor& a, const Tensor& b) { EXPECT_TRUE(kiln::testing::close(a, b)) << a << "\nvs\n" << b; }

bool mentions(const Explanation& ex, const std::string& what) { return ex.str().find(what) != std::string::npos; }

// Large enough that the merged sum and product run as one kernel split across threads.
constexpr int64_t kN = (1 << 16) + 3;

Tensor positive(int64_t n = kN) { return rand({n}) + 0.1; }
Tensor negative(int64_t n = kN) { return -rand({n}) - 0.1; }

}  // namespace

TEST(Speculate, OneWayGuardRunsTheNextGraphFused) {
  auto fn = [](const Tensor& x) { return (x.sum() > 0) ? x * 2 : x * -2; };
  auto f = compile(fn);
  for (int i = 0; i < 6; ++i) {
    Tensor x = positive();
    expect_same(f(x), fn(x));
  }
  CompileStats st = f.stats();
  EXPECT_EQ(st.compiles, 1u);
  EXPECT_EQ(st.speculated, 4u);  // every call from the third
  EXPECT_EQ(st.misspeculated, 0u);
  Explanation ex = f.explain(positive());
  ASSERT_EQ(ex.guards.size(), 1u);
  EXPECT_NE(ex.guards[0].find("speculated when predicted: {true: 1 kernel (2 kernels apart)}"), std::string::npos)
      << ex;
}

TEST(Speculate, WrongGuessesAreDroppedAndAlternationIsLearned) {
  auto fn = [](const Tensor& x) { return (x.sum() > 0) ? x * 2 : x * -2; };
  auto f = compile(fn);
  Tensor p = positive(), n = negative();
  for (int i = 0; i < 3; ++i) expect_same(f(p), fn(p));
  EXPECT_EQ(f.stats().speculated, 1u);
  expect_same(f(n), fn(n));  // speculated the wrong way: dropped, the other path traced
  CompileStats st = f.stats();
  EXPECT_EQ(st.misspeculated, 1u);
  EXPECT_EQ(st.guard_failures, 1u);
  // Alternating calls: after a few, each outcome is predicted from the two before it.
  for (int i = 0; i < 8; ++i) {
    expect_same(f(p), fn(p));
    expect_same(f(n), fn(n));
  }
  st = f.stats();
  EXPECT_GE(st.speculated, 1u + 10u);
  EXPECT_LE(st.misspeculated, 3u);
  Explanation ex = f.explain(p);
  EXPECT_TRUE(mentions(ex, "speculated when predicted: {true: 1 kernel (2 kernels apart), false: 1 kernel (2 kernels apart)}"))
      << ex;
  // Outcomes in no pattern: every result still eager's.
  uint32_t r = 12345;
  for (int i = 0; i < 40; ++i) {
    r = r * 1103515245u + 12345u;
    const Tensor& x = (r >> 16) & 1 ? p : n;
    expect_same(f(x), fn(x));
  }
  EXPECT_EQ(f.stats().compiles, 2u);
}

TEST(Speculate, ItemValuesBakedIntoTheNextGraphAreGuarded) {
  auto fn = [](const Tensor& x) {
    double m = x.amax().item<double>();
    return x / m + 1;
  };
  auto f = compile(fn);
  Tensor x = positive();
  for (int i = 0; i < 3; ++i) expect_same(f(x), fn(x));
  EXPECT_EQ(f.stats().speculated, 1u);
  Tensor y = positive() * 3;  // another maximum: the merged graph's constant is wrong, dropped
  expect_same(f(y), fn(y));
  EXPECT_EQ(f.stats().misspeculated, 1u);
}

TEST(Speculate, AGraphThatWritesIsNotSpeculated) {
  auto fn = [](Tensor x) {
    if (x.sum().item<double>() > 0) {
      x.mul_(2);  // would be visible even when the guard goes the other way
      return x + 1;
    }
    return x - 1;
  };
  auto f = compile(fn);
  Tensor a = positive(), ar = a.clone();
  expect_same(f(a), fn(ar));
  expect_same(a, ar);
  Tensor b = negative(), br = b.clone();
  expect_same(f(b), fn(br));
  expect_same(b, br);  // the product was never applied to b
  EXPECT_EQ(f.stats().speculated, 0u);
  EXPECT_EQ(f.stats().misspeculated, 0u);
  Tensor c = positive();
  EXPECT_TRUE(mentions(f.explain(c), "not speculated: a graph writes")) << f.explain(c);
}

TEST(Speculate, AnErrorOnlyTheDroppedGraphRaisesIsNotRaised) {
  // Integer division by zero raises in eager and in compiled kernels. The speculated graph
  // divides; when the guard would have kept it from running, its error must not surface.
  auto fn = [](const Tensor& a, const Tensor& d) {
    if ((d == 0).any().item<bool>()) return a * 0;
    return a.floor_divide(d);
  };
  auto f = compile(fn);
  Tensor a = arange(kN).to(kInt64), d = ones({kN}, kInt64) * 3;
  for (int i = 0; i < 3; ++i) expect_same(f(a, d), fn(a, d));
  EXPECT_EQ(f.stats().speculated, 1u);
  Tensor z = d.clone();
  z.index_put_({5}, 0);
  Tensor got;
  EXPECT_NO_THROW(got = f(a, z));
  expect_same(got, fn(a, z));
}

TEST(Speculate, OtherSizesOfADynamicDimStayCorrect) {
  CompileOptions o;
  o.recompile_limit = 2;
  auto fn = [](const Tensor& x) { return (x.sum() > 0) ? x.exp() : x * -2; };
  auto f = compile(fn, o);
  ::testing::internal::CaptureStderr();
  for (int64_t n = 100; n <= 106; ++n) {
    Tensor x = positive(n);
    expect_same(f(x), fn(x));
    expect_same(f(x), fn(x));
  }
  ::testing::internal::GetCapturedStderr();
}

TEST(Speculate, ValuesAndViewsFromTheGraphBefore) {
  // The next graph returns a value of the graph before and a view of the argument: the merged
  // program hands back the same values, the view still a view.
  auto fn = [](const Tensor& x) {
    Tensor s = x.sum(1);
    if (s.amax().item<double>() > -1e30) return std::vector<Tensor>{s, x.t(), s * x.t()};
    return std::vector<Tensor>{s};
  };
  auto f = compile(fn);
  Tensor x = randn({33, 17});
  f(x);
  f(x);
  std::vector<Tensor> got = f(x), want = fn(x);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(f.stats().speculated, 1u);
  for (size_t i = 0; i < got.size(); ++i) expect_same(got[i], want[i]);
  EXPECT_TRUE(got[1].is_alias_of(x));
}

TEST(Speculate, OffByOption) {
  CompileOptions o;
  o.speculate = false;
  auto fn = [](const Tensor& x) { return (x.sum() > 0) ? x * 2 : x * -2; };
  auto f = compile(fn, o);
  Tensor x = positive();
  for (int i = 0; i < 4; ++i) expect_same(f(x), fn(x));
  EXPECT_EQ(f.stats().speculated, 0u);
  EXPECT_FALSE(mentions(f.explain(x), "speculated: ")) << f.explain(x);
}
