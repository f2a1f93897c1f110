#include "test_util.h"

using namespace kiln;
using kiln::testing::expect_error;
using kiln::testing::expect_values;

TEST(Views, ShareStorageAndSeeWrites) {
  Tensor x = arange(12, kFloat32).view({3, 4});
  Tensor t = x.t();
  EXPECT_TRUE(t.is_alias_of(x));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.strides().vec(), (std::vector<int64_t>{1, 4}));
  t.select(0, 1).fill_(-1);  // column 1 of x
  expect_values(x.select(1, 1), {3}, {-1, -1, -1});
  Tensor row = x[2];
  row.add_(100);
  EXPECT_EQ(x.index({2, 3}).item<float>(), 111.0f);
}

TEST(Views, ReshapeIsViewWhenPossibleElseCopy) {
  Tensor x = arange(24).view({2, 3, 4});
  Tensor v = x.reshape({6, 4});
  EXPECT_TRUE(v.is_alias_of(x));
  Tensor p = x.permute({2, 0, 1});
  Tensor c = p.reshape({-1});
  EXPECT_FALSE(c.is_alias_of(x));
  EXPECT_EQ(c.to_vector<int64_t>()[1], 4);
  // merging dims that are still adjacent in memory stays a view
  Tensor s = x.transpose(0, 1);  // [3, 2, 4]
  EXPECT_TRUE(s.reshape({3, 8}).is_alias_of(x) == false);
  EXPECT_TRUE(x.slice(2, 0, 2).reshape({6, 2}).is_alias_of(x));
  expect_error([&] { p.view({-1}); }, "view size is not compatible");
  expect_error([&] { x.view({5, 5}); }, "invalid for input of size 24");
  expect_error([&] { x.view({-1, -1}); }, "only one dimension can be inferred");
}

TEST(Views, SliceNarrowSelectIndex) {
  Tensor x = arange(10);
  expect_values(x.slice(0, 1, 8, 3), {3}, {1, 4, 7}, 0);
  expect_values(x.slice(0, -3), {3}, {7, 8, 9}, 0);
  expect_values(x.slice(0, 5, 2), {0}, {}, 0);
  expect_values(x.narrow(0, 2, 3), {3}, {2, 3, 4}, 0);
  using namespace kiln::indexing;
  Tensor m = arange(12).view({3, 4});
  expect_values(m.index({Slice(), 1}), {3}, {1, 5, 9}, 0);
  expect_values(m.index({Ellipsis, Slice(1, std::nullopt, 2)}), {3, 2},
                {1, 3, 5, 7, 9, 11}, 0);
  EXPECT_EQ(m.index({None, 0}).sizes().vec(), (std::vector<int64_t>{1, 4}));
  expect_error([&] { m.select(1, 4); }, "index 4 is out of bounds for dimension 1 with size 4");
  expect_error([&] { m.index({0, 0, 0}); }, "too many indices");
}

TEST(Views, AssignIntoSliceWritesBase) {
  Tensor x = zeros({3, 3});
  x.slice(0, 0, 2) = ones({3});  // broadcast into rows 0 and 1
  x.index({2, indexing::Slice(1)}) = 5;
  expect_values(x, {3, 3}, {1, 1, 1, 1, 1, 1, 0, 5, 5}, 0);
  Tensor y = x;  // rebinding a named tensor does not copy
  y = zeros({1});
  EXPECT_EQ(x.numel(), 9);
}

TEST(Views, ExpandSqueezeUnsqueezeFlattenDiagonal) {
  Tensor b = from_vector<float>({1, 2, 3});
  Tensor e = b.expand({2, 3});
  EXPECT_EQ(e.strides().vec(), (std::vector<int64_t>{0, 1}));
  expect_values(e, {2, 3}, {1, 2, 3, 1, 2, 3}, 0);
  expect_error([&] { b.expand({2, 4}); }, "must match the existing size (3)");
  expect_error([&] { e.add_(1); }, "more than one element of the written-to tensor");
  Tensor u = b.unsqueeze(0).unsqueeze(2);
  EXPECT_EQ(u.sizes().vec(), (std::vector<int64_t>{1, 3, 1}));
  EXPECT_EQ(u.squeeze().sizes().vec(), (std::vector<int64_t>{3}));
  EXPECT_EQ(u.squeeze(0).sizes().vec(), (std::vector<int64_t>{3, 1}));
  Tensor m = arange(16, kFloat32).view({2, 2, 4});
  EXPECT_EQ(m.flatten(1).sizes().vec(), (std::vector<int64_t>{2, 8}));
  Tensor sq = arange(9).view({3, 3});
  expect_values(sq.diagonal(), {3}, {0, 4, 8}, 0);
  expect_values(sq.diagonal(1), {2}, {1, 5}, 0);
  expect_values(sq.diagonal(-1), {2}, {3, 7}, 0);
  sq.diagonal().zero_();
  EXPECT_EQ(sq.sum().item<int64_t>(), 36 - 12);
}

TEST(Views, SplitChunkUnbindAreViews) {
  Tensor x = arange(10);
  auto parts = x.split(4);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].numel(), 2);
  EXPECT_TRUE(parts[1].is_alias_of(x));
  auto ch = chunk(x, 3);
  ASSERT_EQ(ch.size(), 3u);
  EXPECT_EQ(ch[0].numel(), 4);
  auto ws = x.split({3, 7});
  EXPECT_EQ(ws[1].numel(), 7);
  expect_error([&] { x.split({3, 3}); }, "sum exactly to 10");
}

TEST(Views, ContiguousCloneAndStridedCopy) {
  Tensor x = arange(6, kFloat64).view({2, 3}).t();
  Tensor c = x.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.is_alias_of(x));
  expect_values(c, {3, 2}, {0, 3, 1, 4, 2, 5}, 0);
  Tensor k = arange(6, kFloat64).view({2, 3});
  EXPECT_TRUE(k.contiguous().is_same(k));
  Tensor cl = k.clone();
  cl.fill_(0);
  EXPECT_EQ(k.sum().item<double>(), 15.0);
}

TEST(Views, LargeContiguousCopyIsExactAtEveryByte) {
  // Large contiguous copies split across threads at cache-line boundaries: a byte count that is
  // not a multiple of the line, and views that start mid-line on both sides, must copy every
  // byte once and touch nothing outside the destination.
  const int64_t n = (int64_t(1) << 20) + 37;
  Tensor src = arange(n + 5, kInt32).narrow(0, 3, n);                 // starts 12 bytes in
  Tensor big = full({n + 9}, -1, TensorOptions(kInt32));
  Tensor dst = big.narrow(0, 5, n);                                    // starts 20 bytes in
  dst.copy_(src);
  const int32_t* d = big.data_ptr<int32_t>();
  int64_t wrong = 0;
  for (int64_t i = 0; i < n + 9; ++i) {
    const int32_t want = i < 5 || i >= n + 5 ? -1 : int32_t(i - 5 + 3);
    wrong += d[i] != want;
  }
  EXPECT_EQ(wrong, 0);
  // uint8: an odd byte count
  Tensor b = arange(n, kInt64).remainder(251).to(kUInt8);
  Tensor bc = b.clone();
  ASSERT_NE(bc.data_ptr(), b.data_ptr());
  const uint8_t* x = b.data_ptr<uint8_t>();
  const uint8_t* y = bc.data_ptr<uint8_t>();
  wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += x[i] != y[i] || y[i] != uint8_t(i % 251);
  EXPECT_EQ(wrong, 0);
}

// A copy from a source contiguous along another dim than the destination goes through tiles
// of 32 x 32 (runtime/src/copy.cpp): transposes and permutes of 1, 2, 4 and 8-byte elements,
// sizes that are not multiples of the tile, views with offsets, extra outer dims, and a copy_
// into a strided destination. Each element must land where the indices say.
TEST(Views, TransposedCopiesByTilesAreExact) {
  // the element of view v at row-major linear index i, read through its strides
  auto element = [](const Tensor& v, int64_t i) {
    int64_t off = v.storage_offset();
    for (int64_t d = v.dim() - 1; d >= 0; --d) {
      off += (i % v.sizes()[d]) * v.strides()[d];
      i /= v.sizes()[d];
    }
    return off;
  };
  auto expect_copy = [&](const Tensor& base, const Tensor& v, const Tensor& got, const std::string& what) {
    ASSERT_TRUE(got.is_contiguous()) << what;
    const size_t w = v.element_size();
    const auto* src = static_cast<const uint8_t*>(base.data_ptr());
    const auto* dst = static_cast<const uint8_t*>(got.data_ptr());
    int64_t wrong = 0;
    for (int64_t i = 0; i < v.numel(); ++i) wrong += std::memcmp(dst + size_t(i) * w, src + size_t(element(v, i)) * w, w) != 0;
    EXPECT_EQ(wrong, 0) << what << " " << name(v.dtype());
  };
  for (DType d : {kUInt8, kBool, kFloat16, kFloat32, kInt64, kFloat64}) {
    Tensor base = d == kBool ? arange(200 * 67) .remainder(3).eq(0) : arange(200 * 67).remainder(251).to(d);
    Tensor m = base.view({200, 67});
    expect_copy(base, m.t(), m.t().contiguous(), "t");
    expect_copy(base, m.narrow(0, 5, 190).narrow(1, 3, 60).t(), m.narrow(0, 5, 190).narrow(1, 3, 60).t().contiguous(), "t of a window");
    Tensor c3 = base.narrow(0, 0, 5 * 40 * 66).view({5, 40, 66});
    expect_copy(base, c3.permute({2, 0, 1}), c3.permute({2, 0, 1}).contiguous(), "permute");
    expect_copy(base, c3.transpose(1, 2), c3.transpose(1, 2).contiguous(), "batched transpose");
  }
  // into a destination that is itself a transpose (the tiles then run the other way round)
  Tensor src = arange(100 * 70, kFloat32).view({100, 70});
  Tensor dst = zeros({70, 100}, kFloat32).t();
  dst.copy_(src);
  EXPECT_TRUE(eq(dst, src).all().item<bool>());
}

TEST(Views, InPlaceThroughOverlappingViewIsSafe) {
  // x += x.t() must read the original values, not ones already overwritten
  Tensor x = arange(4, kFloat32).view({2, 2});
  x.add_(x.t());
  expect_values(x, {2, 2}, {0, 3, 3, 6}, 0);
}
