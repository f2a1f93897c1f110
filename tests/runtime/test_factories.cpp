#include <algorithm>

#include "test_util.h"

using namespace kiln;
using kiln::testing::expect_error;
using kiln::testing::expect_values;

TEST(Factories, Basic) {
  EXPECT_EQ(zeros({2, 3}).dtype(), kFloat32);
  EXPECT_EQ(zeros({2, 3}).sum().item<float>(), 0.0f);
  EXPECT_EQ(ones({4}, kInt32).sum().item<int64_t>(), 4);
  EXPECT_EQ(full({2}, 7).dtype(), kInt64);
  EXPECT_EQ(full({2}, 7.5).dtype(), kFloat32);
  EXPECT_EQ(full({2}, true).dtype(), kBool);
  EXPECT_EQ(empty({0, 3}).numel(), 0);
  EXPECT_EQ(scalar_tensor(3.5).dim(), 0);
  expect_error([] { zeros({2, -1}); }, "negative dimension -1");
}

TEST(Factories, RangesMatchPyTorch) {
  EXPECT_EQ(arange(5).dtype(), kInt64);
  EXPECT_EQ(arange(0.0, 1.0, 0.25).dtype(), kFloat32);
  expect_values(arange(1, 10, 3), {3}, {1, 4, 7}, 0);
  expect_values(arange(5, 0, -2), {3}, {5, 3, 1}, 0);
  expect_values(arange(0.0, 1.0, 0.3), {4}, {0, 0.3, 0.6, 0.9});
  expect_values(linspace(0, 1, 5), {5}, {0, 0.25, 0.5, 0.75, 1});
  expect_values(linspace(-1, 1, 1), {1}, {-1});
  expect_values(logspace(0, 2, 3), {3}, {1, 10, 100}, 1e-6);
  expect_values(logspace(0, 3, 4, 2.0), {4}, {1, 2, 4, 8}, 1e-6);
  expect_values(eye(2, 3), {2, 3}, {1, 0, 0, 0, 1, 0}, 0);
  expect_error([] { arange(0, 5, 0); }, "step must be nonzero");
  expect_error([] { arange(5, 0, 1); }, "inconsistent with step sign");
}

TEST(Factories, RandomIsReproducibleAndWellDistributed) {
  manual_seed(42);
  Tensor a = rand({100000});
  manual_seed(42);
  Tensor b = rand({100000});
  EXPECT_TRUE(eq(a, b).all().item<bool>());
  Tensor c = rand({100000});
  EXPECT_FALSE(eq(a, c).all().item<bool>());  // the stream advances
  EXPECT_GE(a.min().item<float>(), 0.0f);
  EXPECT_LT(a.max().item<float>(), 1.0f);
  EXPECT_NEAR(a.mean().item<float>(), 0.5, 0.01);
  Tensor n = randn({200000}, kFloat64);
  EXPECT_NEAR(n.mean().item<double>(), 0.0, 0.01);
  EXPECT_NEAR(n.std().item<double>(), 1.0, 0.01);
  Tensor r = randint(-3, 4, {10000});
  EXPECT_EQ(r.min().item<int64_t>(), -3);
  EXPECT_EQ(r.max().item<int64_t>(), 3);
  Tensor p = randperm(50);
  auto v = p.to_vector<int64_t>();
  std::sort(v.begin(), v.end());
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(v[size_t(i)], i);
  expect_error([] { randint(3, 3, {2}); }, "'from' to be less than 'to'");
  expect_error([] { rand({2}, kInt32); }, "not implemented for 'int32'");
}

TEST(Factories, LikeFactories) {
  Tensor x = ones({2, 3}, kFloat64).t();
  Tensor z = zeros_like(x);
  EXPECT_EQ(z.sizes().vec(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(z.dtype(), kFloat64);
  EXPECT_EQ(full_like(x, 2, kInt8).dtype(), kInt8);
  EXPECT_EQ(rand_like(x).dtype(), kFloat64);
}

TEST(Factories, FromVectorAndBlob) {
  Tensor t = from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.dtype(), kInt32);
  EXPECT_EQ(t.index({1, 2}).item<int32_t>(), 6);
  expect_error([] { from_vector<float>({1, 2, 3}, {2, 2}); }, "needs 4 values but 3 were given");
  std::vector<float> host{1, 2, 3, 4};
  bool freed = false;
  {
    Tensor w = from_blob(host.data(), {2, 2}, kFloat32, [&](void*) { freed = true; });
    w.mul_(10);  // zero-copy: writes reach the host buffer
    EXPECT_EQ(host[3], 40.0f);
    Tensor view = w.t();
    w = Tensor();
    EXPECT_FALSE(freed);  // the view still holds the storage
  }
  EXPECT_TRUE(freed);
  Tensor st = from_blob(host.data(), {2}, {2}, kFloat32);
  expect_values(st, {2}, {10, 30}, 0);
}

TEST(Factories, ItemAndHostAccess) {
  EXPECT_EQ(scalar_tensor(2.5).item<double>(), 2.5);
  EXPECT_EQ(ones({1, 1}, kInt16).item<int64_t>(), 1);
  expect_error([] { ones({2}).item(); }, "a Tensor with 2 elements cannot be converted to Scalar");
  expect_error([] { (void)bool(ones({2})); }, "ambiguous");
  EXPECT_TRUE(bool(ones({1})));
  EXPECT_THROW(ones({2}).data_ptr<double>(), Error);
  EXPECT_EQ(arange(4).view({2, 2}).t().to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 1, 3}));
}

TEST(Factories, AllocatorReusesLargeBlocks) {
  auto before = cpu_allocator::stats();
  { Tensor a = empty({1 << 20}); }
  { Tensor b = empty({1 << 20}); }
  auto after = cpu_allocator::stats();
  EXPECT_GE(after.hits, before.hits + 1);
}
