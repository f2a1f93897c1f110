// Sizes, strides and byte counts past int64, values a type cannot hold, and errors that name the
// call the user made (issue 43, section 4). Each case crashed, returned garbage or named another
// op before: now each raises a kiln::Error naming the op and the sizes or value. None allocates
// more than a few bytes: every refusal comes before the allocation.
#include <cmath>
#include <limits>

#include "test_util.h"

using namespace kiln;
using kiln::testing::expect_error;

namespace {
constexpr int64_t k2_32 = int64_t(1) << 32;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
}  // namespace

TEST(Overflow, FactoriesRefuseCountsPastInt64) {
  // 4 * (2^62 + 1) bytes wrapped to 4: zero_() wrote 2^62 floats into them
  expect_error([] { zeros({(int64_t(1) << 62) + 1}); },
               "[zeros] sizes [4611686018427387905] hold 4611686018427387905 elements of 4 bytes: more bytes than "
               "int64 can count");
  expect_error([] { zeros({kMax}); }, "[zeros] sizes [9223372036854775807] hold");
  // 2^64 elements wrapped to 0: [1][1] read from an empty storage, sum() gave 0
  expect_error([] { zeros({k2_32, k2_32})[1][1].item<float>(); },
               "[zeros] sizes [4294967296, 4294967296] have more elements than int64 can count");
  expect_error([] { nonzero(zeros({k2_32, k2_32})); }, "[zeros] sizes [4294967296, 4294967296] have more elements");
  expect_error([] { ones({k2_32, k2_32}).sum(); }, "[ones] sizes [4294967296, 4294967296] have more elements");
  expect_error([] { empty({k2_32, k2_32}); }, "[empty] sizes [4294967296, 4294967296]");
  expect_error([] { full({k2_32, k2_32}, 1.5); }, "[full] sizes [4294967296, 4294967296]");
  expect_error([] { rand({k2_32, k2_32}); }, "[rand] sizes [4294967296, 4294967296]");
  expect_error([] { randn({k2_32, k2_32}); }, "[randn] sizes [4294967296, 4294967296]");
  expect_error([] { randint(0, 5, {k2_32, k2_32}); }, "[randint] sizes [4294967296, 4294967296]");
  expect_error([] { eye(k2_32, k2_32); }, "[eye] sizes [4294967296, 4294967296]");
  expect_error([] { linspace(0, 1, kMax); }, "[linspace] sizes [9223372036854775807] hold");
  // (a std::vector of 2^62 int64 threw std::length_error)
  expect_error([] { randperm(int64_t(1) << 62); }, "[randperm] sizes [4611686018427387904] hold");
  expect_error([] { from_vector(std::vector<float>{1, 2, 3, 4}, {(int64_t(1) << 62) + 1, 4}); },
               "[from_vector] sizes [4611686018427387905, 4] have more elements");
  // A size-0 tensor has no elements to count, but its row-major strides can still overflow.
  expect_error([] { empty({0, k2_32, k2_32}); },
               "[empty] the row-major strides of sizes [0, 4294967296, 4294967296] overflow int64");
  EXPECT_EQ(empty({k2_32, k2_32, 0}).numel(), 0);
  EXPECT_EQ(zeros({int64_t(1) << 62, 0}).numel(), 0);
}

TEST(Overflow, StridedStorageCoversItsLastElement) {
  // the storage for [2] with stride 2^62 was sized by a wrapped count and read past its end
  expect_error([] { empty_strided({2}, {int64_t(1) << 62}); },
               "[empty_strided] sizes [2] and strides [4611686018427387904] of float32 elements reach more bytes "
               "than int64 can count");
  expect_error([] { empty_strided({2}, {-1}); }, "[empty_strided] negative strides are not supported");
  expect_error([] { empty_strided({k2_32, k2_32}, {0, 0}); }, "[empty_strided] sizes [4294967296, 4294967296] have more");
  Tensor t = empty_strided({3, 2}, {1, 10});  // elements 0..12: 13 of them
  EXPECT_EQ(t.storage()->nbytes(), 13u * 4);
  EXPECT_EQ(empty_strided({2, 0}, {int64_t(1) << 62, 1}).storage()->nbytes(), 0u);
  // from_blob's storage is what its view reaches: a negative stride made it -4 bytes as a size_t
  float host[4] = {1, 2, 3, 4};
  expect_error([&] { from_blob(host, {3}, {-1}, kFloat32); }, "[from_blob] negative strides are not supported");
  expect_error([&] { from_blob(host, {2}, {int64_t(1) << 62}, kFloat32); },
               "[from_blob] sizes [2] and strides [4611686018427387904] of float32 elements reach more bytes");
  EXPECT_EQ(from_blob(host, {2}, {3}, kFloat32).storage()->nbytes(), 16u);
}

TEST(Overflow, ViewsStayInsideTheirStorage) {
  // two elements 2^61 apart on 16 bytes: the bytes needed wrapped below 16 and neg() read outside
  expect_error([] { zeros({4}).as_strided({2}, {int64_t(1) << 61}, 0).neg(); },
               "[as_strided] setStorage: sizes [2], strides [2305843009213693952], storage offset 0 and itemsize 4 "
               "require more bytes than int64 can count, out of bounds for storage of size 16");
  expect_error([] { zeros({4}).as_strided({2}, {4}, 0); }, "require 20 bytes, out of bounds for storage of size 16");
  expect_error([] { zeros({4}).as_strided({1}, {1}, kMax); },
               "[as_strided] setStorage: sizes [1], strides [1], storage offset 9223372036854775807");
  expect_error([] { zeros({1}).as_strided({k2_32, k2_32}, {0, 0}); },
               "[as_strided] sizes [4294967296, 4294967296] have more elements");
  // expand is the one view that grows the element count
  expect_error([] { zeros({1}).expand({k2_32, k2_32}); },
               "[expand] sizes [4294967296, 4294967296] have more elements than int64 can count");
  expect_error([] { zeros({1}).expand({-5}); }, "[expand] the expanded size of the tensor (-5) is negative at dimension 0");
  // and so does broadcasting: [2^32, 1] + [2^32] (both stride-0 views of one element)
  Tensor col = zeros({1}).expand({k2_32}).unsqueeze(1), row = zeros({1}).expand({k2_32});
  expect_error([&] { col + row; }, "[add] sizes [4294967296, 4294967296] have more elements than int64 can count");
  // (2^62 + 1) * 4 wrapped to 4, the element count of the tensor viewed
  expect_error([] { zeros({4}).view({(int64_t(1) << 62) + 1, 4}); },
               "[view] shape '[4611686018427387905, 4]' is invalid for input of size 4");
  expect_error([] { zeros({4}).reshape({k2_32, k2_32}); }, "[reshape] shape '[4294967296, 4294967296]' is invalid");
  EXPECT_EQ(zeros({0}).view({k2_32, k2_32, -1}).sizes().vec(), (std::vector<int64_t>{k2_32, k2_32, 0}));
  // a slice's step: ceil((end - start) / step) overflowed for a large step
  Tensor x = arange(10);
  Tensor s = x.slice(0, 2, 10, kMax);
  EXPECT_EQ(s.sizes().vec(), std::vector<int64_t>{1});
  EXPECT_EQ(s.item<int64_t>(), 2);
  expect_error([] { arange(10).view({5, 2}).slice(0, 0, 5, int64_t(1) << 62); },
               "[slice] the stride times the step overflows int64 (2 * 4611686018427387904)");
  // narrow's start + length wrapped below the size, so a huge length passed
  expect_error([] { zeros({3}).narrow(0, 1, kMax); },
               "[narrow] start (1) + length (9223372036854775807) exceeds dimension size (3)");
  // chunk's (n + chunks - 1) / chunks overflowed
  EXPECT_EQ(zeros({3}).chunk(kMax).size(), 3u);
  expect_error([] { zeros({3}).split({kMax, kMax, 5}); },
               "[split] split sizes [9223372036854775807, 9223372036854775807, 5] sum past int64");
  // flattening dims whose product passes int64 (the tensor is empty through its last dim)
  expect_error([] { empty({k2_32, k2_32, 0}).flatten(0, 1); }, "[flatten] sizes [4294967296, 4294967296] have more elements");
  // cat along a dim whose sizes sum past int64 (each a stride-0 view of one element)
  Tensor big = zeros({1}).expand({kMax});
  expect_error([&] { cat({big, big}); }, "[cat] the sizes along dimension 0 sum past int64 at tensor number 1");
}

TEST(Overflow, ItemRefusesValuesItsTypeCannotHold) {
  // PyTorch's rules (c10::checked_convert): to an integer type, no NaN, no infinity, nothing out
  // of range; to a floating type, no finite value beyond its largest.
  expect_error([] { checked_convert<int8_t>(Scalar(1000), "item"); },
               "[item] value 1000 cannot be converted to type int8 without overflow");
  expect_error([] { checked_convert<int32_t>(Scalar(std::nan("")), "item"); }, "[item] value nan cannot be converted to type int32");
  expect_error([] { checked_convert<int64_t>(Scalar(1e30), "item"); }, "[item] value 1e+30 cannot be converted to type int64");
  expect_error([] { checked_convert<int64_t>(Scalar(0x1p63), "item"); }, "type int64 without overflow");
  expect_error([] { checked_convert<int64_t>(Scalar(INFINITY), "item"); }, "value inf cannot be converted to type int64");
  expect_error([] { checked_convert<uint8_t>(Scalar(-0.5), "item"); }, "type uint8");
  expect_error([] { checked_convert<int8_t>(Scalar(127.5), "item"); }, "type int8");
  expect_error([] { checked_convert<Half>(Scalar(1e10), "item"); }, "value 1e+10 cannot be converted to type float16");
  expect_error([] { checked_convert<Half>(Scalar(70000), "item"); }, "value 70000 cannot be converted to type float16");
  expect_error([] { checked_convert<float>(Scalar(1e39), "item"); }, "type float32");
  EXPECT_EQ(checked_convert<int8_t>(Scalar(-128), "item"), -128);
  EXPECT_EQ(checked_convert<int8_t>(Scalar(-2.7), "item"), -2);  // toward zero
  EXPECT_EQ(checked_convert<uint8_t>(Scalar(-1), "item"), 255);  // negative integers wrap, as PyTorch's
  EXPECT_EQ(checked_convert<int64_t>(Scalar(-0x1p63), "item"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(checked_convert<int64_t>(Scalar(kMax), "item"), kMax);
  EXPECT_TRUE(std::isinf(checked_convert<float>(Scalar(INFINITY), "item")));
  EXPECT_TRUE(std::isnan(float(checked_convert<Half>(Scalar(std::nan("")), "item"))));
  EXPECT_EQ(float(checked_convert<Half>(Scalar(65504.0), "item")), 65504.0f);
  EXPECT_TRUE(checked_convert<bool>(Scalar(1e30), "item"));
  // through item<T>(): 1000 as int8 was -24, NaN as int 0, 1e30 as int64 INT64_MIN
  expect_error([] { full({}, 1000).item<int8_t>(); }, "[item] value 1000 cannot be converted to type int8 without overflow");
  expect_error([] { full({}, std::nan("")).item<int>(); }, "[item] value nan cannot be converted to type int32");
  expect_error([] { full({}, 1e30, kFloat64).item<int64_t>(); }, "[item] value 1e+30 cannot be converted to type int64");
  expect_error([] { full({}, 1e10).item<Half>(); }, "[item] value 1e+10 cannot be converted to type float16");
  EXPECT_EQ(full({}, 127).item<int8_t>(), 127);
  EXPECT_EQ(full({}, -1).item<uint8_t>(), 255);
  EXPECT_TRUE(std::isinf(full({}, INFINITY).item<float>()));
}

TEST(Overflow, ErrorsNameTheCallAndItsValues) {
  // einsum named the repeated subscript by its number (8)
  expect_error([] { einsum("ii->i", {ones({2, 3})}); },
               "[einsum] subscript i is repeated for an operand but the sizes don't match, 2 != 3");
  // arange's count wrapped into a negative size reported by empty
  expect_error([] { arange(0, 1e20); }, "[arange] start 0, end 1e+20 and step 1 give 1e+20 elements, more than int64 can count");
  expect_error([] { arange(std::numeric_limits<int64_t>::min(), kMax); },
               "[arange] start -9223372036854775808, end 9223372036854775807 and step 1 give");
  expect_error([] { arange(int64_t(0), int64_t(1) << 62); }, "[arange] sizes [4611686018427387904] hold");
  // the integer path: start + i * step is exact even where i * step alone passes int64
  EXPECT_EQ(arange(std::numeric_limits<int64_t>::min(), kMax, kMax).to_vector<int64_t>(),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1, kMax - 1}));
  // index_put_ reported the select it took
  Tensor x = zeros({3});
  expect_error([&] { x.index_put_({5}, 1.0); }, "[index_put_] index 5 is out of bounds for dimension 0 with size 3");
  expect_error([&] { x.index_put_({-4}, ones({})); }, "[index_put_] index -4 is out of bounds for dimension 0 with size 3");
  Tensor m = zeros({2, 3});
  expect_error([&] { m.index({0, 5}); }, "[index] index 5 is out of bounds for dimension 1 with size 3");
  expect_error([&] { m.index({indexing::None, 1, 3}); }, "[index] index 3 is out of bounds for dimension 1 with size 3");
  expect_error([&] { m.index({indexing::Ellipsis, 7}); }, "[index] index 7 is out of bounds for dimension 1 with size 3");
  m.index_put_({1, 2}, 5.0);
  EXPECT_EQ(m.index({1, 2}).item<float>(), 5.0f);
}
