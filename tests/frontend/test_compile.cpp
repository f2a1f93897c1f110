// compile(): tracing, the signature cache, in-place ops and views, closures, graph breaks with
// guards and trace trees, fullgraph, cond, explain/stats, threads.
#include <gtest/gtest.h>
#include <kiln/ir/graph.h>
#include <kiln/kiln.h>

#include <cmath>
#include <atomic>
#include <cstring>
#include <thread>

#include "../common/close.h"

using namespace kiln;

namespace {

// Compiled results match eager within the dtype's tolerance (the CPU backend's fused kernels
// round differently, tests/common/close.h); writes into inputs are checked the same way.
void expect_same(const Tensor& a, const Tensor& b) { EXPECT_TRUE(kiln::testing::close(a, b)) << a << "\nvs\n" << b; }

// Every graph of an explanation parses back and verifies (types agree with inference).
void expect_graphs_verify(const Explanation& ex) {
  for (const auto& g : ex.graphs) {
    ir::Graph parsed = ir::parse(g.text);
    auto err = ir::verify(parsed);
    EXPECT_FALSE(err.has_value()) << (err ? err->message : "") << "\n" << g.text;
    EXPECT_EQ(ir::print(parsed), g.text);
  }
}

}  // namespace

TEST(Compile, ElementwiseMatchesEagerAndReplays) {
  auto fn = [](const Tensor& a, const Tensor& b) { return (a + b) + sin(a) * cos(b); };
  auto f = compile(fn);
  Tensor a = randn({100}), b = randn({100});
  expect_same(f(a, b), fn(a, b));
  Tensor c = randn({100}), d = randn({100});
  expect_same(f(c, d), fn(c, d));
  auto st = f.stats();
  EXPECT_EQ(st.compiles, 1u);
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.misses, 1u);
  auto ex = f.explain(a, b);
  ASSERT_EQ(ex.graphs.size(), 1u);
  EXPECT_EQ(ex.graphs[0].ops, 5u);
  expect_graphs_verify(ex);
}

// as_strided without a storage offset keeps its operand's own (the tracer records offset=none,
// which the op table's schema accepts); with one, the offset counts from the storage's start.
TEST(Compile, AsStridedWithAndWithoutAnOffsetMatchesEager) {
  auto fn = [](const Tensor& a) {
    Tensor v = a.slice(0, 1, 4);
    return v.as_strided({2, 3}, {1, 2}) * 2 + v.as_strided({2, 3}, {4, 1}, 5);
  };
  auto f = compile(fn);
  Tensor a = randn({6, 4});
  expect_same(f(a), fn(a));
  expect_same(f(a + 1), fn(a + 1));
  EXPECT_EQ(f.stats().compiles, 1u);
  expect_graphs_verify(f.explain(a));
}

TEST(Compile, RetracesOnNewDtypeShapeOrStrideClass) {
  auto f = compile([](const Tensor& x) { return x * 2 + 1; });
  Tensor x = randn({4, 3});
  f(x);
  f(randn({4, 3}));
  EXPECT_EQ(f.stats().compiles, 1u);
  expect_same(f(x.to(kFloat64)), x.to(kFloat64) * 2 + 1);  // dtype
  EXPECT_EQ(f.stats().compiles, 2u);
  Tensor y = randn({5, 3});
  expect_same(f(y), y * 2 + 1);  // shape
  EXPECT_EQ(f.stats().compiles, 3u);
  Tensor t = randn({3, 4}).t();
  expect_same(f(t), t * 2 + 1);  // permuted
  EXPECT_EQ(f.stats().compiles, 4u);
  Tensor e = randn({1, 3}).expand({4, 3});
  expect_same(f(e), e * 2 + 1);  // broadcast
  EXPECT_EQ(f.stats().compiles, 5u);
  f(randn({3, 4}).t());
  EXPECT_EQ(f.stats().compiles, 5u);
}

TEST(Compile, ScalarArgumentsAreSpecialisedByValue) {
  auto f = compile([](const Tensor& x, double s, int64_t k) { return x * s + k; });
  Tensor x = randn({8});
  expect_same(f(x, 2.5, int64_t(3)), x * 2.5 + 3);
  expect_same(f(x, -1.0, int64_t(3)), x * -1.0 + 3);
  expect_same(f(x, 2.5, int64_t(3)), x * 2.5 + 3);
  EXPECT_EQ(f.stats().compiles, 2u);
  EXPECT_EQ(f.stats().hits, 1u);
}

TEST(Compile, IntegerScalarsPromoteLikeNumbers) {
  auto f = compile([](const Tensor& x) { return x + 1000; });
  Tensor x = randint(0, 100, {6}, kInt8);
  Tensor r = f(x);
  EXPECT_EQ(r.dtype(), kInt8);
  expect_same(f(x), x + 1000);
}

TEST(Compile, ClosureTensorsAreReadAtCallTime) {
  Tensor w = randn({5});
  auto by_value = compile([w](const Tensor& x) { return x * w; });
  Tensor x = randn({5});
  expect_same(by_value(x), x * w);
  w.add_(1.0);  // in place: the same tensor, new values
  expect_same(by_value(x), x * w);
  EXPECT_EQ(by_value.stats().compiles, 1u);

  Tensor v = randn({5});
  auto by_ref = compile([&v](const Tensor& x) { return x + v; });
  expect_same(by_ref(x), x + v);
  v = randn({5});  // rebinding: the old tensor is released, so kiln traces again
  expect_same(by_ref(x), x + v);
  EXPECT_EQ(by_ref.stats().compiles, 2u);
}

TEST(Compile, InplaceOpsOnInputsMatchEager) {
  auto chain = [](Tensor x) {
    x.add_(1);
    x.relu_();
    x.clamp_(0, 6);
    x.mul_(0.5);
    return x;
  };
  auto f = compile(chain);
  for (int i = 0; i < 3; ++i) {
    Tensor x = randn({50}) * 4;
    Tensor ref = x.clone();
    chain(ref);
    Tensor out = f(x);
    expect_same(x, ref);
    EXPECT_TRUE(out.is_same(x));  // returns the input itself, as eager does
  }
  EXPECT_EQ(f.stats().compiles, 1u);
}

TEST(Compile, WritesThroughViewsOfInputsReachTheBase) {
  auto fn = [](Tensor x, const Tensor& y) {
    x.slice(0, 0, 2).mul_(2);
    x.index_put_({1}, 7.0);
    x.select(0, 3).copy_(y);
    Tensor t = x.t();
    t.slice(1, 2, 3).fill_(-1);
    return x.sum({0});
  };
  auto f = compile(fn);
  for (int i = 0; i < 2; ++i) {
    Tensor x = randn({5, 3}), y = randn({3});
    Tensor xr = x.clone();
    Tensor ref = fn(xr, y);
    Tensor out = f(x, y);
    expect_same(x, xr);
    expect_same(out, ref);
  }
  EXPECT_EQ(f.stats().compiles, 1u);
}

// Calls fn compiled and eagerly, three times, on equal copies of fresh inputs of these sizes
// (fn writes into them): the results and the inputs afterwards agree, from one compile.
static void expect_writes_like_eager(Tensor (*fn)(Tensor, Tensor), std::vector<int64_t> a_sizes,
                                     std::vector<int64_t> b_sizes) {
  auto f = compile(fn);
  for (int i = 0; i < 3; ++i) {
    Tensor a = randn(a_sizes), b = randn(b_sizes);
    Tensor ar = a.clone(), br = b.clone();
    Tensor m = f(a, b), rm = fn(ar, br);
    expect_same(a, ar);
    expect_same(b, br);
    expect_same(m, rm);
  }
  EXPECT_EQ(f.stats().compiles, 1u);
}

// An in-place op on an input that the next op broadcasts (x of [1, 3, 5] against a of
// [5, 1, 1]): fused into the [5, 3, 5] kernel, the write into x would repeat at every outer
// iteration, each reading what the one before wrote. The write keeps a kernel of its own.
TEST(Compile, WritesThatTheNextOpBroadcastsHappenOnce) {
  expect_writes_like_eager([](Tensor a, Tensor x) {
    x.mul_(0.5);
    return maximum(a, x) + 1;
  }, {5, 1, 1}, {1, 3, 5});
}

// One kernel overwrites memory it also reads: x's new value is stored, and |2x| of the old x
// is read at the same element. The backends emit code where it is first used; the old x must
// still be read before the store, whichever of the kernel's stores comes first.
TEST(Compile, AKernelReadsWhatItOverwritesBeforeStoring) {
  expect_writes_like_eager([](Tensor x, Tensor c) {
    x.mul_(2);
    Tensor y = x.abs();
    x.copy_(c);
    return where(y > x, y, c * 0.5);
  }, {6, 5}, {6, 5});
}

// A value computed in a kernel and overwritten there through another view of it (its
// transpose): element by element, the value's own store at a later element would overwrite
// what the copy wrote at an earlier one, so the copy gets a kernel of its own.
TEST(Compile, AValueOverwrittenThroughItsTranspose) {
  auto fn = [](const Tensor& x) {
    Tensor a = x + 1;
    Tensor t = a.tanh();
    t.t().copy_(a * 2);
    return t;
  };
  auto f = compile(fn);
  for (int i = 0; i < 3; ++i) {
    Tensor x = randn({5, 5});
    expect_same(f(x), fn(x));
  }
  EXPECT_EQ(f.stats().compiles, 1u);
}

TEST(Compile, InplaceOnIntermediatesAndConstants) {
  auto fn = [](const Tensor& x) {
    Tensor acc = zeros({4});
    for (int i = 0; i < 3; ++i) acc += x * double(i);
    Tensor y = x.clone();
    y.masked_fill_(x > 0, 0.0);
    return std::make_tuple(acc, y);
  };
  auto f = compile(fn);
  for (int i = 0; i < 3; ++i) {
    Tensor x = randn({4});
    auto [a, b] = f(x);
    auto [ra, rb] = fn(x);
    expect_same(a, ra);
    expect_same(b, rb);
  }
  EXPECT_EQ(f.stats().compiles, 1u);
  // The factory's tensor is a fill of one graph (its value broadcast, never its bytes): reading
  // it is no graph break.
  Explanation ex = f.explain(randn({4}));
  EXPECT_TRUE(ex.eager_reason.empty()) << ex.eager_reason;
  ASSERT_EQ(ex.graphs.size(), 1u);
  EXPECT_TRUE(ex.breaks.empty());
  EXPECT_NE(ex.graphs[0].text.find("fill("), std::string::npos) << ex.graphs[0].text;
  EXPECT_NE(ex.graphs[0].text.find(": f32[4]{0}"), std::string::npos) << ex.graphs[0].text;
}

TEST(Compile, ViewsAreViewsAndReturnedViewsAliasInputs) {
  auto fn = [](const Tensor& x) {
    return std::vector<Tensor>{x.t(), x.unsqueeze(0).expand({3, 4, 5}), x.permute({1, 0}).slice(0, 1, 4, 2),
                               x.view({20}), x.reshape({5, 4}), x.diagonal(), x.flatten(), x.index({indexing::Slice(), 2})};
  };
  auto f = compile(fn);
  Tensor x = randn({4, 5});
  f(x);
  auto out = f(x);
  auto ref = fn(x);
  ASSERT_EQ(out.size(), ref.size());
  for (size_t i = 0; i < out.size(); ++i) {
    expect_same(out[i], ref[i]);
    EXPECT_EQ(out[i].strides().vec(), ref[i].strides().vec()) << i;
    EXPECT_TRUE(out[i].is_alias_of(x)) << i;
  }
  expect_graphs_verify(f.explain(x));
}

TEST(Compile, DataDependentBranchTracesEachPathOnce) {
  auto fn = [](const Tensor& x) { return (x.sum() > 0) ? x * 2 : x * -2; };
  auto f = compile(fn);
  Tensor pos = rand({10}) + 0.1, neg = -rand({10}) - 0.1;
  expect_same(f(pos), fn(pos));
  expect_same(f(neg), fn(neg));  // guard fails: traced along the other path
  expect_same(f(pos), fn(pos));
  expect_same(f(neg), fn(neg));
  auto st = f.stats();
  EXPECT_EQ(st.compiles, 2u);
  EXPECT_EQ(st.guard_failures, 1u);
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.breaks, 2u);
  auto ex = f.explain(pos);
  EXPECT_EQ(ex.graphs.size(), 3u);  // the prefix, then one graph per branch outcome
  ASSERT_EQ(ex.breaks.size(), 1u);
  EXPECT_NE(ex.breaks[0].reason.find("operator bool"), std::string::npos);
  ASSERT_EQ(ex.guards.size(), 1u);
  EXPECT_NE(ex.guards[0].find("true"), std::string::npos);
  EXPECT_NE(ex.guards[0].find("false"), std::string::npos);
  expect_graphs_verify(ex);
}

TEST(Compile, ItemBreakRecordsTheSourceLine) {
  auto fn = [](const Tensor& x) {
    double m = x.max().item<double>();  // this line is named by explain()
    return x / m;
  };
  auto f = compile(fn);
  Tensor x = rand({6}) + 1;
  expect_same(f(x), fn(x));
  expect_same(f(x), fn(x));
  EXPECT_EQ(f.stats().hits, 1u);
  Tensor y = rand({6}) + 1;  // another maximum: the guard on the value fails, a new path
  expect_same(f(y), fn(y));
  EXPECT_EQ(f.stats().compiles, 2u);
  auto ex = f.explain(x);
  ASSERT_EQ(ex.breaks.size(), 1u);
  EXPECT_NE(ex.breaks[0].where.find("test_compile.cpp:"), std::string::npos) << ex.breaks[0].where;
}

TEST(Compile, GuardFailureUndoesWritesBeforeTracingAgain) {
  auto fn = [](Tensor x) {
    x.add_(1);
    if (x.sum().item<double>() > 0) return x * 2;
    return x * 3;
  };
  auto f = compile(fn);
  Tensor a = rand({8});
  Tensor ar = a.clone();
  expect_same(f(a), fn(ar));
  expect_same(a, ar);
  Tensor b = -rand({8}) - 2;  // the guard fails after x.add_(1) ran in the first graph
  Tensor br = b.clone();
  expect_same(f(b), fn(br));
  expect_same(b, br);  // add_ applied exactly once
}

TEST(Compile, FullgraphTurnsABreakIntoAnError) {
  CompileOptions o;
  o.fullgraph = true;
  auto f = compile([](const Tensor& x) { return x.sum().item<float>() > 0 ? x : -x; }, o);
  try {
    f(randn({4}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("fullgraph"), std::string::npos) << m;
    EXPECT_NE(m.find("item()"), std::string::npos) << m;
    EXPECT_NE(m.find("test_compile.cpp"), std::string::npos) << m;
  }
}

TEST(Compile, CondTracesBothBranchesWithoutABreak) {
  auto fn = [](const Tensor& x, const Tensor& y) {
    return cond(x.sum() > 0, [](const Tensor& a, const Tensor& b) { return a * b + 1; },
                [](const Tensor& a, const Tensor& b) { return a - b.exp(); }, x, y);
  };
  auto f = compile(fn);
  Tensor y = randn({7});
  Tensor pos = rand({7}) + 0.1, neg = -rand({7}) - 0.1;
  expect_same(f(pos, y), pos * y + 1);
  expect_same(f(neg, y), neg - y.exp());
  expect_same(f(pos, y), pos * y + 1);
  auto st = f.stats();
  EXPECT_EQ(st.compiles, 1u);
  EXPECT_EQ(st.breaks, 0u);
  auto ex = f.explain(pos, y);
  ASSERT_EQ(ex.graphs.size(), 1u);
  EXPECT_NE(ex.graphs[0].text.find("cond("), std::string::npos) << ex.graphs[0].text;
  expect_graphs_verify(ex);
  // eager use (no compile) runs one branch
  expect_same(fn(neg, y), neg - y.exp());
}

TEST(Compile, CondRejectsMismatchedBranches) {
  auto f = compile([](const Tensor& x) {
    return cond(x.sum() > 0, [](const Tensor& a) { return a; }, [](const Tensor& a) { return a.sum(); }, x);
  });
  EXPECT_THROW(f(randn({3})), Error);
}

TEST(Compile, DataDependentShapeOpsBreakAndGuardTheShape) {
  auto fn = [](const Tensor& x) {
    Tensor idx = nonzero(x > 0);
    return idx.to(kFloat32).sum() + x.sum();
  };
  auto f = compile(fn);
  Tensor a = from_vector<float>({1, -1, 2, -2});
  expect_same(f(a), fn(a));
  Tensor b = from_vector<float>({3, -1, 5, -2});  // same count of positives: replays
  expect_same(f(b), fn(b));
  EXPECT_EQ(f.stats().hits, 1u);
  Tensor c = from_vector<float>({3, 1, 5, -2});  // three: a new shape, traced again
  expect_same(f(c), fn(c));
  EXPECT_EQ(f.stats().compiles, 2u);
}

TEST(Compile, PrintIsReplayed) {
  auto f = compile([](const Tensor& x) {
    Tensor y = x + 1;
    print(y);
    return y * 2;
  });
  Tensor x = from_vector<float>({1, 2});
  ::testing::internal::CaptureStdout();
  f(x);
  f(x);
  Tensor r = f(x);  // the third call runs y * 2 ahead of the print (speculation), printing the same
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(out, "tensor([2., 3.])\ntensor([2., 3.])\ntensor([2., 3.])\n");
  EXPECT_EQ(f.stats().hits, 2u);
  EXPECT_EQ(f.stats().speculated, 1u);
  expect_same(r, from_vector<float>({4, 6}));
}

TEST(Compile, RandomFactoriesAreRefused) {
  auto f = compile([](const Tensor& x) { return x + randn({3}); });
  EXPECT_THROW(f(randn({3})), Error);
}

TEST(Compile, DataPtrMakesTheSignatureRunEagerly) {
  auto fn = [](const Tensor& x) {
    Tensor y = x * 2;
    float* p = y.data_ptr<float>();
    p[0] = 100;
    return y + 1;
  };
  auto f = compile(fn);
  Tensor x = randn({3});
  expect_same(f(x), fn(x));
  expect_same(f(x), fn(x));
  EXPECT_EQ(f.stats().eager_calls, 1u);
  EXPECT_FALSE(f.explain(x).eager_reason.empty());
}

TEST(Compile, RecompileBudgetMarksVaryingDimsDynamic) {
  CompileOptions o;
  o.recompile_limit = 3;
  auto fn = [](const Tensor& x) { return x.exp() * 2; };
  auto f = compile(fn, o);
  ::testing::internal::CaptureStderr();
  for (int64_t n = 1; n <= 10; ++n) {
    Tensor x = randn({n, 3});
    expect_same(f(x), fn(x));
  }
  ::testing::internal::GetCapturedStderr();
  EXPECT_NE(f.explain().str().find("dynamic: arg 0 dim 0"), std::string::npos) << f.explain();
  EXPECT_LE(f.stats().compiles, 4u);  // 3 exact, then one dynamic graph
  EXPECT_GE(f.stats().hits, 5u);
  // The dynamic graph's replays at other sizes run programs of size-generic kernels.
  Explanation ex = f.explain(randn({10, 3}));
  ASSERT_FALSE(ex.graphs.empty());
  EXPECT_NE(ex.graphs[0].backend.find("other sizes: "), std::string::npos) << ex;
  EXPECT_EQ(ex.graphs[0].backend.find(" 0 kept"), std::string::npos) << ex;
}

TEST(Compile, SizeDependentGraphsStayCorrectPastTheBudget) {
  CompileOptions o;
  o.recompile_limit = 2;
  auto fn = [](const Tensor& x) { return x.view({x.size(0) * 3}) + zeros({x.size(0) * 3}); };
  auto f = compile(fn, o);
  ::testing::internal::CaptureStderr();
  for (int64_t n = 1; n <= 6; ++n) {
    Tensor x = randn({n, 3});
    expect_same(f(x), fn(x));
  }
  ::testing::internal::GetCapturedStderr();
}

TEST(Compile, ConcurrentCallsAreSafe) {
  auto fn = [](const Tensor& x) { return (x.sum() > 0) ? (x * 2).softmax(0) : x.exp().sum({0}, true); };
  auto f = compile(fn);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        Tensor x = (t % 2 ? rand({16}) : -rand({16})) + (i % 3 == 0 ? 0.5 : -0.5);
        Tensor got = f(x), want = fn(x);
        if (!kiln::testing::close(got, want)) bad++;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(f.stats().compiles, 8u);
}

TEST(Compile, NestedCompiledFunctionsInline) {
  auto inner = compile([](const Tensor& x) { return x.tanh(); });
  auto outer = compile([&inner](const Tensor& x) { return inner(x) + 1; });
  Tensor x = randn({5});
  inner(x);  // traced on its own
  expect_same(outer(x), x.tanh() + 1);
  expect_same(outer(x), x.tanh() + 1);
  EXPECT_EQ(outer.stats().compiles, 1u);
  EXPECT_EQ(outer.explain(x).graphs[0].ops, 2u);
}

TEST(Compile, ReturnsTuplesVectorsAndVoid) {
  auto t = compile([](const Tensor& x) { return std::make_tuple(x + 1, std::get<1>(x.max(0, false))); });
  auto v = compile([](const Tensor& x) { return x.chunk(3, 0); });
  Tensor x = randn({6});
  auto [a, idx] = t(x);
  expect_same(a, x + 1);
  EXPECT_EQ(idx.item<int64_t>(), std::get<1>(x.max(0, false)).item<int64_t>());
  auto parts = v(x);
  ASSERT_EQ(parts.size(), 3u);
  expect_same(parts[2], x.slice(0, 4, 6));
  auto side = compile([](Tensor x) { x.zero_(); });
  side(x);
  expect_same(x, zeros({6}));
}
