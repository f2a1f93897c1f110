#include "test_util.h"

using namespace kiln;
using kiln::testing::expect_values;

TEST(DType, NamesAndSizes) {
  EXPECT_EQ(name(kFloat32), "float32");
  EXPECT_EQ(name(kBFloat16), "bfloat16");
  EXPECT_EQ(dtype_from_name("int16"), kInt16);
  EXPECT_EQ(itemsize(kInt64), 8);
  EXPECT_EQ(itemsize(kFloat16), 2);
  EXPECT_THROW(dtype_from_name("complex64"), Error);
}

TEST(DType, PromoteTypes) {
  EXPECT_EQ(promote_types(kUInt8, kInt8), kInt16);
  EXPECT_EQ(promote_types(kBool, kInt32), kInt32);
  EXPECT_EQ(promote_types(kInt64, kFloat16), kFloat16);
  EXPECT_EQ(promote_types(kFloat16, kBFloat16), kFloat32);
  EXPECT_EQ(promote_types(kFloat32, kFloat64), kFloat64);
  EXPECT_TRUE(can_cast(kInt64, kInt8));
  EXPECT_FALSE(can_cast(kFloat32, kInt32));
  EXPECT_FALSE(can_cast(kInt32, kBool));
}

TEST(DType, ResultTypeWithScalarsAndZeroDim) {
  Tensor i8 = ones({3}, kInt8), f16 = ones({3}, kFloat16), i32 = ones({3}, kInt32);
  // A Python-style integer does not widen an int8 tensor; a float one turns ints to float32.
  EXPECT_EQ(result_type({i8}, {1000}), kInt8);
  EXPECT_EQ(result_type({i32}, {2.5}), kFloat32);
  EXPECT_EQ(result_type({f16}, {2.5}), kFloat16);
  EXPECT_EQ(result_type({ones({3}, kBool)}, {1}), kInt64);
  // A 0-d tensor counts only when it is of a higher category.
  EXPECT_EQ(result_type({i8, ones({}, kInt64)}), kInt8);
  EXPECT_EQ(result_type({i8, ones({}, kFloat64)}), kFloat64);
  EXPECT_EQ(result_type({f16, ones({}, kFloat64)}), kFloat16);
  EXPECT_EQ((i8 + 1000).dtype(), kInt8);
  EXPECT_EQ((i32 * 0.5).dtype(), kFloat32);
  EXPECT_EQ((ones({2}, kFloat64) * 0.1).dtype(), kFloat64);
}

TEST(DType, ScalarOperandKeepsDoublePrecision) {
  Tensor x = ones({1}, kFloat64);
  EXPECT_EQ((x * 0.1).item<double>(), 0.1);
}

TEST(DType, HalfConversionsRoundToNearestEven) {
  EXPECT_EQ(float(Half(1.0f)), 1.0f);
  EXPECT_EQ(float(Half(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(float(Half(70000.0f))));
  EXPECT_EQ(float(Half(1.0f + 1.0f / 2048)), 1.0f);  // tie rounds to even
  EXPECT_EQ(float(BFloat16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_TRUE(std::isnan(float(BFloat16(NAN))));
  Tensor h = from_vector<float>({0.1f, 1.5f, -2.25f}).to(kFloat16);
  expect_values(h, {3}, {0.0999755859375, 1.5, -2.25}, 0);
}

TEST(DType, Conversions) {
  Tensor f = from_vector<double>({-1.7, 0.0, 2.9, 300.0});
  expect_values(f.to(kInt32), {4}, {-1, 0, 2, 300}, 0);
  expect_values(f.to(kBool), {4}, {1, 0, 1, 1}, 0);
  expect_values(from_vector<int64_t>({1, 0, -3}).to(kFloat32), {3}, {1, 0, -3}, 0);
}
