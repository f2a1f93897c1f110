#include "test_util.h"

#include <cstring>

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

// float16 widens branch-free (half.h), so that loops over it vectorise: every one of the 65536
// bit patterns gives sign * 2^(e - 15) * (1 + m / 1024), or sign * m * 2^-24 for subnormals,
// infinities as infinities, and NaN as the quiet NaN with its payload (what F16C gives); every
// non-NaN value narrows back to its bits; and a tensor's conversion (the vector loop) agrees.
TEST(DType, EveryHalfWidensExactly) {
  std::vector<uint16_t> all(65536);
  int64_t wrong = 0, round_trip = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    all[h] = uint16_t(h);
    const float got = Half::to_float(uint16_t(h));
    const int e = int(h >> 10) & 31, m = int(h & 1023);
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 31) {
      uint32_t bits;
      std::memcpy(&bits, &got, 4);
      const uint32_t want = (h & 0x8000 ? 0x80000000u : 0u) | 0x7f800000u | (m ? 0x400000u : 0u) | (uint32_t(m) << 13);
      wrong += bits != want;
      continue;
    }
    const double want = e == 0 ? sign * m * std::ldexp(1.0, -24) : sign * std::ldexp(1.0 + m / 1024.0, e - 15);
    wrong += double(got) != want || std::signbit(got) != (sign < 0);
    round_trip += Half(got).bits != h;
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(round_trip, 0);
  Tensor t = empty({65536}, kFloat16);
  std::memcpy(t.data_ptr(), all.data(), sizeof(uint16_t) * all.size());
  std::vector<float> wide = t.to(kFloat32).to_vector<float>();
  int64_t differ = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = wide[h], b = Half::to_float(uint16_t(h));
    differ += std::memcmp(&a, &b, 4) != 0;
  }
  EXPECT_EQ(differ, 0);
}

TEST(DType, Conversions) {
  Tensor f = from_vector<double>({-1.7, 0.0, 2.9, 300.0});
  expect_values(f.to(kInt32), {4}, {-1, 0, 2, 300}, 0);
  expect_values(f.to(kBool), {4}, {1, 0, 1, 1}, 0);
  expect_values(from_vector<int64_t>({1, 0, -3}).to(kFloat32), {3}, {1, 0, -3}, 0);
}
