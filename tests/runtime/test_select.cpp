// The data-dependent-shape ops: nonzero, masked_select, unique, unique_inverse. Expected values
// were computed with PyTorch 1.13 (torch.nonzero, torch.masked_select, torch.unique), except
// where a test says it checks one of kiln's documented divergences (docs/tensor_api.md).
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <tuple>

#include <kiln/runtime/trace.h>

#include "test_util.h"

using namespace kiln;
using kiln::testing::expect_error;
using kiln::testing::expect_values;

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<int64_t> ints(const Tensor& t) {
  EXPECT_EQ(t.dtype(), kInt64);
  return t.to_vector<int64_t>();
}

const std::vector<DType> kAllDTypes = {kBool,    kUInt8,    kInt8,    kInt16,   kInt32,
                                       kInt64,   kFloat16,  kBFloat16, kFloat32, kFloat64};
}  // namespace

// ---------------------------------------------------------------- nonzero

TEST(Nonzero, TwoDimsRowMajor) {
  Tensor x = from_vector<int64_t>({0, 3, 0, 1, 2, 0, 0, 5, 0, 0, 7, 0}, {3, 4});
  Tensor nz = nonzero(x);
  EXPECT_EQ(nz.dtype(), kInt64);
  EXPECT_EQ(nz.sizes().vec(), (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(ints(nz), (std::vector<int64_t>{0, 1, 0, 3, 1, 0, 1, 3, 2, 2}));
}

TEST(Nonzero, EveryDType) {
  Tensor base = from_vector<int64_t>({0, 3, 0, 1, 2, 0, 0, 5, 0, 0, 7, 0}, {3, 4});
  for (DType dt : kAllDTypes) {
    SCOPED_TRACE(std::string(name(dt)));
    Tensor nz = nonzero(base.to(dt));
    EXPECT_EQ(nz.sizes().vec(), (std::vector<int64_t>{5, 2}));
    EXPECT_EQ(ints(nz), (std::vector<int64_t>{0, 1, 0, 3, 1, 0, 1, 3, 2, 2}));
  }
}

TEST(Nonzero, NonContiguousInputs) {
  Tensor x = from_vector<int64_t>({0, 3, 0, 1, 2, 0, 0, 5, 0, 0, 7, 0}, {3, 4});
  // torch.nonzero(x.t())
  EXPECT_EQ(ints(nonzero(x.t())), (std::vector<int64_t>{0, 1, 1, 0, 2, 2, 3, 0, 3, 1}));
  // torch.nonzero(x[:, ::2])
  Tensor s = x.slice(1, std::nullopt, std::nullopt, 2);
  EXPECT_EQ(nonzero(s).sizes().vec(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ints(nonzero(s)), (std::vector<int64_t>{1, 0, 2, 1}));
  // torch.arange(24).reshape(2,3,4) % 5 == 0, contiguous and permuted (2, 0, 1)
  Tensor y = eq(remainder(arange(24).view({2, 3, 4}), 5), 0);
  EXPECT_EQ(nonzero(y).sizes().vec(), (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(ints(nonzero(y)), (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 0, 2, 2, 1, 0, 3, 1, 2, 0}));
  EXPECT_EQ(ints(nonzero(y.permute({2, 0, 1}))),
            (std::vector<int64_t>{0, 0, 0, 0, 1, 2, 1, 0, 1, 2, 0, 2, 3, 1, 0}));
  // A broadcast (stride 0) view.
  Tensor e = from_vector<float>({0, 1}).view({2, 1}).expand({2, 3});
  EXPECT_EQ(ints(nonzero(e)), (std::vector<int64_t>{1, 0, 1, 1, 1, 2}));
}

// A large contiguous input is counted and written in blocks on the kernel threads, each block's
// rows through a buffer that flushes every 256: in 1, 2 and 3 dims, each dtype, densities from
// none to all (NaN and -0.0 among the values), the same rows as the one-element walk that a
// strided view of the same values takes.
TEST(Nonzero, LargeContiguousInputsByBlocks) {
  manual_seed(9);
  for (DType d : kAllDTypes) {
    for (double density : {0.0, 0.003, 0.5, 1.0}) {
      Tensor v = rand({70000});
      Tensor x = where(v < density, randn({70000}) * 5 + 10, zeros({70000})).to(d);
      if (is_floating(d) && density > 0) {
        x.index({123}) = kNaN;
        x.index({456}) = -0.0;
      }
      for (std::vector<int64_t> shape : {std::vector<int64_t>{70000}, {350, 200}, {7, 50, 200}}) {
        Tensor c = x.view(shape);
        Tensor strided = stack({c, c}, -1).select(-1, 0);  // the same values, the walk's path
        ASSERT_FALSE(strided.is_contiguous());
        Tensor got = nonzero(c), want = nonzero(strided);
        ASSERT_EQ(got.sizes().vec(), want.sizes().vec()) << name(d) << " density " << density;
        EXPECT_EQ(ints(got), ints(want)) << name(d) << " density " << density << " dims " << shape.size();
      }
    }
  }
}

TEST(Nonzero, FloatSpecialValues) {
  // NaN and inf are nonzero; -0.0 is zero.
  Tensor f = from_vector<double>({kNaN, 0.0, -0.0, 1.0, kInf});
  EXPECT_EQ(ints(nonzero(f)), (std::vector<int64_t>{0, 3, 4}));
  EXPECT_EQ(ints(nonzero(f.to(kFloat32))), (std::vector<int64_t>{0, 3, 4}));
  Tensor h = from_vector<float>({0.5f, 0.0f, -0.0f, -2.0f}).to(kFloat16);
  EXPECT_EQ(ints(nonzero(h)), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(ints(nonzero(h.to(kBFloat16))), (std::vector<int64_t>{0, 3}));
}

TEST(Nonzero, ZeroDimAndEmpty) {
  Tensor a = nonzero(scalar_tensor(5.0));
  EXPECT_EQ(a.sizes().vec(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(a.dtype(), kInt64);
  EXPECT_EQ(nonzero(scalar_tensor(0.0)).sizes().vec(), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(nonzero(zeros({2, 0, 3})).sizes().vec(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(nonzero(zeros({4, 5}, kInt32)).sizes().vec(), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(nonzero(ones({0})).sizes().vec(), (std::vector<int64_t>{0, 1}));
}

TEST(Nonzero, ResultIsAFreshTensor) {
  Tensor x = from_vector<int32_t>({1, 0, 1});
  Tensor nz = nonzero(x);
  EXPECT_FALSE(nz.is_alias_of(x));
  EXPECT_TRUE(nz.is_contiguous());
  x.zero_();
  EXPECT_EQ(ints(nz), (std::vector<int64_t>{0, 2}));
}

// ---------------------------------------------------------------- masked_select

TEST(MaskedSelect, SameShape) {
  Tensor a = arange(6).view({2, 3});
  Tensor m = from_vector(std::vector<bool>{true, false, false, true, true, false}, {2, 3});
  Tensor r = masked_select(a, m);
  EXPECT_EQ(r.dtype(), kInt64);
  expect_values(r, {3}, {0, 3, 4}, 0);
}

TEST(MaskedSelect, BroadcastMaskAndInput) {
  Tensor a = arange(6).view({2, 3});
  // torch.masked_select(a, tensor([True, False, True]))
  expect_values(masked_select(a, from_vector(std::vector<bool>{true, false, true})), {4}, {0, 2, 3, 5}, 0);
  // a column mask: torch.masked_select(a.to(int8), tensor([[True], [False]]))
  Tensor r8 = masked_select(a.to(kInt8), from_vector(std::vector<bool>{true, false}, {2, 1}));
  EXPECT_EQ(r8.dtype(), kInt8);
  expect_values(r8, {3}, {0, 1, 2}, 0);
  // both broadcast: [2, 1] input against a [1, 3] mask
  Tensor c = masked_select(from_vector<double>({10, 20}, {2, 1}),
                           from_vector(std::vector<bool>{true, false, true}, {1, 3}));
  EXPECT_EQ(c.dtype(), kFloat64);
  expect_values(c, {4}, {10, 10, 20, 20}, 0);
  // a 0-d input against a [2, 2] mask
  expect_values(masked_select(scalar_tensor(4.0, kFloat32),
                              from_vector(std::vector<bool>{true, false, true, true}, {2, 2})),
                {3}, {4, 4, 4}, 0);
  // a 0-d mask
  expect_values(masked_select(a, scalar_tensor(true, kBool)), {6}, {0, 1, 2, 3, 4, 5}, 0);
  expect_values(masked_select(scalar_tensor(4.0), scalar_tensor(true, kBool)), {1}, {4}, 0);
}

TEST(MaskedSelect, NonContiguousInput) {
  Tensor a = arange(6).view({2, 3});
  // torch.masked_select(a.t(), [[T, F], [F, T], [T, T]])
  Tensor m = from_vector(std::vector<bool>{true, false, false, true, true, true}, {3, 2});
  expect_values(masked_select(a.t(), m), {4}, {0, 4, 2, 5}, 0);
  // a transposed mask too
  expect_values(masked_select(a.t(), m.t().contiguous().t()), {4}, {0, 4, 2, 5}, 0);
}

TEST(MaskedSelect, EveryDType) {
  Tensor m = from_vector(std::vector<bool>{false, true, true});
  for (DType dt : kAllDTypes) {
    SCOPED_TRACE(std::string(name(dt)));
    Tensor x = from_vector<int64_t>({1, 0, 3}).to(dt);
    Tensor r = masked_select(x, m);
    EXPECT_EQ(r.dtype(), dt);
    expect_values(r, {2}, {0, dt == kBool ? 1.0 : 3.0}, 0);
  }
  // torch.masked_select(tensor([1.5, -2.25, 3.]).bfloat16(), [False, True, True])
  expect_values(masked_select(from_vector<float>({1.5f, -2.25f, 3.0f}).to(kBFloat16), m), {2}, {-2.25, 3}, 0);
  // bool input: [True, False, True] under [True, True, False]
  Tensor b = masked_select(from_vector(std::vector<bool>{true, false, true}),
                           from_vector(std::vector<bool>{true, true, false}));
  EXPECT_EQ(b.dtype(), kBool);
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{true, false}));
}

TEST(MaskedSelect, Empty) {
  Tensor a = arange(6).view({2, 3});
  EXPECT_EQ(masked_select(a, zeros({2, 3}, kBool)).sizes().vec(), (std::vector<int64_t>{0}));
  Tensor e = masked_select(zeros({0, 3}), from_vector(std::vector<bool>{true, false, true}));
  EXPECT_EQ(e.sizes().vec(), (std::vector<int64_t>{0}));
  EXPECT_EQ(e.dtype(), kFloat32);
}

TEST(MaskedSelect, Errors) {
  Tensor a = arange(6).view({2, 3});
  expect_error([&] { masked_select(a, from_vector<float>({1, 0, 1})); },
               "[masked_select] masked_select only supports boolean masks, but got mask with dtype float32");
  expect_error([&] { masked_select(a, from_vector<uint8_t>({1, 0, 1})); }, "dtype uint8");
  expect_error([&] { masked_select(a, from_vector(std::vector<bool>{true, false})); },
               "[masked_select] The size of tensor a (3) must match the size of tensor b (2) at "
               "non-singleton dimension 1");
  expect_error([&] { masked_select(Tensor(), from_vector(std::vector<bool>{true})); }, "undefined tensor");
}

// ---------------------------------------------------------------- unique

TEST(Unique, SortedIntegers) {
  Tensor u = from_vector<int64_t>({3, 1, 2, 1, 3, -4}, {2, 3});
  Tensor v = unique(u);
  EXPECT_EQ(v.dtype(), kInt64);
  expect_values(v, {4}, {-4, 1, 2, 3}, 0);
  auto [values, inverse] = unique_inverse(u);
  expect_values(values, {4}, {-4, 1, 2, 3}, 0);
  EXPECT_EQ(inverse.sizes().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ints(inverse), (std::vector<int64_t>{3, 1, 2, 1, 3, 0}));
}

TEST(Unique, EveryDType) {
  Tensor base = from_vector<int64_t>({5, 0, 2, 5, 2, 1, 0});
  for (DType dt : kAllDTypes) {
    SCOPED_TRACE(std::string(name(dt)));
    auto [values, inverse] = unique_inverse(base.to(dt));
    EXPECT_EQ(values.dtype(), dt);
    if (dt == kBool) {
      // torch.unique(tensor([True, False, True, True, True, True, False]))
      expect_values(values, {2}, {0, 1}, 0);
      EXPECT_EQ(ints(inverse), (std::vector<int64_t>{1, 0, 1, 1, 1, 1, 0}));
    } else {
      expect_values(values, {4}, {0, 1, 2, 5}, 0);
      EXPECT_EQ(ints(inverse), (std::vector<int64_t>{3, 0, 2, 3, 2, 1, 0}));
    }
    expect_values(unique(base.to(dt)), dt == kBool ? std::vector<int64_t>{2} : std::vector<int64_t>{4},
                  dt == kBool ? std::vector<double>{0, 1} : std::vector<double>{0, 1, 2, 5}, 0);
  }
  expect_values(unique(from_vector<float>({2.5f, -1.0f, 2.5f, 0.25f})), {3}, {-1, 0.25, 2.5}, 0);
  expect_values(unique(from_vector(std::vector<bool>{true, true})), {1}, {1}, 0);
  // int64 extremes sort as integers (not through a double).
  Tensor big = from_vector<int64_t>({std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max() - 1,
                                     std::numeric_limits<int64_t>::min()});
  EXPECT_EQ(unique(big).to_vector<int64_t>(),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max() - 1,
                                  std::numeric_limits<int64_t>::max()}));
}

TEST(Unique, NonContiguousInput) {
  Tensor u = from_vector<int64_t>({3, 1, 2, 1, 3, -4}, {2, 3});
  auto [values, inverse] = unique_inverse(u.t());
  expect_values(values, {4}, {-4, 1, 2, 3}, 0);
  EXPECT_EQ(inverse.sizes().vec(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(ints(inverse), (std::vector<int64_t>{3, 1, 1, 3, 2, 0}));
  // torch.unique(u[:, 0:3:2])
  expect_values(unique(u.slice(1, 0, 3, 2)), {4}, {-4, 1, 2, 3}, 0);
  expect_values(unique(u.slice(0, 0, 1).slice(1, 1, 3)), {2}, {1, 2}, 0);
}

TEST(Unique, Unsorted) {
  // kiln: first-occurrence order (torch 1.13 gives the same set in hash order: [-4, 2, 1, 3]).
  Tensor u = from_vector<int64_t>({3, 1, 2, 1, 3, -4}, {2, 3});
  expect_values(unique(u.t(), /*sorted=*/false), {4}, {3, 1, 2, -4}, 0);
  auto [values, inverse] = unique_inverse(u.t(), /*sorted=*/false);
  expect_values(values, {4}, {3, 1, 2, -4}, 0);
  EXPECT_EQ(ints(inverse), (std::vector<int64_t>{0, 1, 1, 0, 2, 3}));
  // values[inverse] rebuilds the input
  expect_values(index_select(values, 0, inverse.flatten()).view({3, 2}), {3, 2}, {3, 1, 1, 3, 2, -4}, 0);
}

TEST(Unique, SignedZeroKeepsFirst) {
  // torch.unique([-0., 0., 1.]) is [-0., 1.]; torch.unique([0., -0., 1.]) is [0., 1.]
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(name(dt)));
    std::vector<double> a = unique(from_vector<double>({-0.0, 0.0, 1.0}).to(dt)).to_vector<double>();
    ASSERT_EQ(a.size(), 2u);
    EXPECT_TRUE(a[0] == 0.0 && std::signbit(a[0]));
    std::vector<double> b = unique(from_vector<double>({0.0, -0.0, 1.0}).to(dt)).to_vector<double>();
    ASSERT_EQ(b.size(), 2u);
    EXPECT_TRUE(b[0] == 0.0 && !std::signbit(b[0]));
  }
}

TEST(Unique, NaNsAreDistinctAndLast) {
  // torch.unique(tensor([nan, 3., 1., nan, -1., 3.])) is [-1., 1., 3., nan, nan].
  Tensor x = from_vector<double>({kNaN, 3.0, 1.0, kNaN, -1.0, 3.0});
  for (DType dt : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
    SCOPED_TRACE(std::string(name(dt)));
    auto [values, inverse] = unique_inverse(x.to(dt));
    expect_values(values, {5}, {-1, 1, 3, kNaN, kNaN}, 0);
    // Divergence: torch 1.13 maps every NaN to index 0; kiln gives each NaN its own entry.
    EXPECT_EQ(ints(inverse), (std::vector<int64_t>{3, 2, 1, 4, 0, 2}));
  }
  // With infinities: NaN sorts after +inf (torch 1.13's order here is unspecified).
  expect_values(unique(from_vector<float>({5.0f, NAN, -INFINITY, INFINITY, NAN, -2.0f})), {6},
                {-kInf, -2, 5, kInf, kNaN, kNaN}, 0);
  expect_values(unique(from_vector<double>({kNaN, 1.0, kNaN}), /*sorted=*/false), {3}, {kNaN, 1, kNaN}, 0);
}

TEST(Unique, ZeroDimAndEmpty) {
  auto [v0, i0] = unique_inverse(scalar_tensor(int64_t(5)));
  expect_values(v0, {1}, {5}, 0);
  EXPECT_EQ(i0.dim(), 0);
  EXPECT_EQ(i0.item<int64_t>(), 0);
  auto [ve, ie] = unique_inverse(zeros({0, 3}, kInt32));
  EXPECT_EQ(ve.sizes().vec(), (std::vector<int64_t>{0}));
  EXPECT_EQ(ve.dtype(), kInt32);
  EXPECT_EQ(ie.sizes().vec(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(ie.dtype(), kInt64);
  EXPECT_EQ(unique(zeros({0}), false).sizes().vec(), (std::vector<int64_t>{0}));
}

TEST(Unique, LargeMatchesSortedCounting) {
  // Many duplicates: the values are exactly the distinct residues, the inverse maps back.
  Tensor x = remainder(arange(100000) * 7919, 1000).view({250, 400}).t();
  auto [values, inverse] = unique_inverse(x);
  expect_values(values, {1000}, [] {
    std::vector<double> w(1000);
    for (int i = 0; i < 1000; ++i) w[size_t(i)] = i;
    return w;
  }(), 0);
  EXPECT_TRUE(eq(index_select(values, 0, inverse.flatten()).view({400, 250}), x).all().item<bool>());
}

// ---------------------------------------------------------------- tracing hook

using kiln::testing::FakeRecorder;
using kiln::testing::DataDependentCall;

TEST(SelectTracing, NonzeroReportsItselfOnlyWithAReplay) {
  Tensor x = from_vector<float>({0, 2, 0, 3}, {2, 2});
  FakeRecorder rec;
  Tensor out;
  uint_least32_t line = 0;
  {
    trace::Install install(&rec);
    line = std::source_location::current().line() + 1;
    out = nonzero(x);
  }
  ASSERT_EQ(rec.calls.size(), 1u);
  EXPECT_EQ(rec.other_reports(), 0);  // the inner ops ran paused
  const DataDependentCall& c = rec.calls[0];
  EXPECT_EQ(c.op, "nonzero");
  ASSERT_EQ(c.inputs.size(), 1u);
  EXPECT_TRUE(c.inputs[0].is_same(x));
  EXPECT_TRUE(c.output.is_same(out));
  EXPECT_EQ(c.line, line);
  EXPECT_EQ(ints(out), (std::vector<int64_t>{0, 1, 1, 1}));
  // The replay recomputes from new inputs (and, with no recorder, reports nothing).
  std::vector<Tensor> again{from_vector<int32_t>({1, 1, 0})};
  EXPECT_EQ(ints(c.replay(again)), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(rec.calls.size(), 1u);
}

TEST(SelectTracing, MaskedSelectAndUniqueReplayWithTheirArguments) {
  Tensor x = from_vector<int64_t>({4, 1, 4, 2});
  Tensor m = from_vector(std::vector<bool>{true, false, true, true});
  FakeRecorder rec;
  Tensor selected, uniq, v, inv;
  {
    trace::Install install(&rec);
    selected = masked_select(x, m);
    uniq = unique(x, /*sorted=*/false);
    std::tie(v, inv) = unique_inverse(x);
  }
  expect_values(selected, {3}, {4, 4, 2}, 0);
  expect_values(uniq, {3}, {4, 1, 2}, 0);
  expect_values(v, {3}, {1, 2, 4}, 0);
  EXPECT_EQ(ints(inv), (std::vector<int64_t>{2, 0, 2, 1}));
  EXPECT_EQ(rec.other_reports(), 0);
  ASSERT_EQ(rec.calls.size(), 4u);
  EXPECT_EQ(rec.calls[0].op, "masked_select");
  ASSERT_EQ(rec.calls[0].inputs.size(), 2u);
  EXPECT_TRUE(rec.calls[0].inputs[1].is_same(m));
  EXPECT_EQ(rec.calls[1].op, "unique");
  EXPECT_EQ(rec.calls[2].op, "unique_inverse");
  EXPECT_TRUE(rec.calls[2].output.is_same(v));
  EXPECT_EQ(rec.calls[3].op, "unique_inverse");
  EXPECT_TRUE(rec.calls[3].output.is_same(inv));

  std::vector<Tensor> ms{from_vector<int64_t>({7, 8, 9}), from_vector(std::vector<bool>{false, true, true})};
  expect_values(rec.calls[0].replay(ms), {2}, {8, 9}, 0);
  std::vector<Tensor> u{from_vector<int64_t>({9, 3, 9, 1})};
  expect_values(rec.calls[1].replay(u), {3}, {9, 3, 1}, 0);  // sorted=false was kept
  expect_values(rec.calls[2].replay(u), {3}, {1, 3, 9}, 0);
  EXPECT_EQ(ints(rec.calls[3].replay(u)), (std::vector<int64_t>{2, 1, 2, 0}));
}

TEST(SelectTracing, ErrorsPropagateWithoutAReport) {
  FakeRecorder rec;
  trace::Install install(&rec);
  expect_error([&] { masked_select(arange(3), from_vector<int32_t>({1, 0, 1})); }, "[masked_select]");
  EXPECT_TRUE(rec.calls.empty());
  EXPECT_EQ(trace::active(), &rec);  // the pause was released
}
