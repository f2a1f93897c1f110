#include "test_util.h"

#include <cmath>
#include <cstring>
#include <functional>

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

// float32 tensors narrow to float16 and bfloat16 by vectors (F16C's vcvtps2ph, an integer
// rounding for bfloat16: runtime/src/cpu/float16_blocks.cpp) and give half.h's scalar rounding
// bit for bit: every pattern of the low 16 bits (where the rounding is decided) under a few top
// mantissa bits, at the exponents where the results change kind (zero and subnormal inputs,
// float16's subnormal and overflow edges, 1, float32's largest, inf and NaN), both signs; and 2^21
// random bit patterns. Lengths not a multiple of the vector leave a scalar tail too.
TEST(DType, Float32NarrowsLikeTheScalarRoundingEverywhere) {
  std::vector<uint32_t> bits;
  for (uint32_t sign : {0u, 1u})
    for (uint32_t e : {0u, 1u, 101u, 102u, 103u, 112u, 113u, 127u, 142u, 143u, 254u, 255u})
      for (uint32_t top : {0u, 1u, 0x3fu, 0x40u, 0x7fu})
        for (uint32_t low = 0; low < 65536; ++low) bits.push_back(sign << 31 | e << 23 | top << 16 | low);
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < (1 << 21) + 5; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    bits.push_back(uint32_t(state >> 32));
  }
  Tensor f = empty({int64_t(bits.size())}, kFloat32);
  std::memcpy(f.data_ptr(), bits.data(), bits.size() * 4);
  const Tensor h = f.to(kFloat16), b = f.to(kBFloat16);
  const uint16_t* hp = static_cast<const uint16_t*>(h.data_ptr());
  const uint16_t* bp = static_cast<const uint16_t*>(b.data_ptr());
  int64_t wrong_h = 0, wrong_b = 0;
  for (size_t i = 0; i < bits.size(); ++i) {
    float x;
    std::memcpy(&x, &bits[i], 4);
    wrong_h += hp[i] != Half(x).bits;
    wrong_b += bp[i] != BFloat16(x).bits;
  }
  EXPECT_EQ(wrong_h, 0);
  EXPECT_EQ(wrong_b, 0);
  // and every bfloat16 widens to its bits shifted up
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = uint16_t(i);
  Tensor t = empty({65536}, kBFloat16);
  std::memcpy(t.data_ptr(), all.data(), 2 * all.size());
  std::vector<float> wide = t.to(kFloat32).to_vector<float>();
  int64_t differ = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    uint32_t w;
    std::memcpy(&w, &wide[i], 4);
    differ += w != i << 16;
  }
  EXPECT_EQ(differ, 0);
}

// Unary ops on 16-bit floats run on widened blocks of 256 (float16_blocks.h): every element,
// block tails and vector tails included, is the op on the widened value rounded once, as one
// element at a time gives it (a strided view takes the element-wise loop).
TEST(DType, SixteenBitUnaryOpsByWidenedBlocks) {
  manual_seed(31);
  for (DType d : {kFloat16, kBFloat16})
    for (int64_t n : {int64_t(1), int64_t(15), int64_t(256), int64_t(1000)}) {
      Tensor x = (randn({n}) * 3).to(d);
      Tensor strided = stack({x, x}, 1).select(1, 0);
      ASSERT_TRUE(n == 1 || !strided.is_contiguous());
      for (auto op : {+[](const Tensor& t) { return relu(t); }, +[](const Tensor& t) { return neg(t); },
                      +[](const Tensor& t) { return abs(t); }, +[](const Tensor& t) { return exp(t); }}) {
        Tensor got = op(x), want = op(strided);
        ASSERT_EQ(got.dtype(), d);
        EXPECT_EQ(std::memcmp(got.data_ptr(), want.contiguous().data_ptr(), size_t(n) * 2), 0)
            << name(d) << " n " << n;
      }
    }
}

// neg and abs of 16-bit floats flip or clear the sign bit of every pattern, NaNs included (as
// PyTorch's do), contiguous and strided; float32 and float64 abs clear a NaN's sign too.
TEST(DType, SixteenBitNegAndAbsOnTheSignBit) {
  std::vector<uint16_t> bits(65536);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = uint16_t(i);
  for (DType d : {kFloat16, kBFloat16}) {
    Tensor x = empty({65536}, d);
    std::memcpy(x.data_ptr(), bits.data(), bits.size() * 2);
    const Tensor strided = stack({x, x}, 1).select(1, 1);
    for (bool is_abs : {false, true})
      for (const Tensor& in : {x, strided}) {
        const Tensor got = (is_abs ? abs(in) : neg(in)).contiguous();
        ASSERT_EQ(got.dtype(), d);
        const uint16_t* g = static_cast<const uint16_t*>(got.data_ptr());
        for (size_t i = 0; i < bits.size(); ++i)
          ASSERT_EQ(g[i], is_abs ? uint16_t(i & 0x7fff) : uint16_t(i ^ 0x8000))
              << name(d) << (is_abs ? " abs" : " neg") << " of 0x" << std::hex << i;
      }
  }
  EXPECT_FALSE(std::signbit(abs(full({3}, -NAN)).to_vector<float>()[0]));
  EXPECT_FALSE(std::signbit(abs(full({3}, -NAN, kFloat64)).to_vector<double>()[2]));
}

// Binary ops on 16-bit floats go by widened blocks too (elementwise.h, opmath_binary_loop),
// with either operand contiguous or broadcast: each element is the float32 op on the widened
// operands rounded once, as one element at a time computes it.
TEST(DType, SixteenBitBinaryOpsByWidenedBlocks) {
  manual_seed(37);
  for (DType d : {kFloat16, kBFloat16}) {
    auto to_d = [&](float v) { return d == kFloat16 ? float(Half(v)) : float(BFloat16(v)); };
    for (int64_t n : {int64_t(1), int64_t(17), int64_t(300), int64_t(1000)}) {
      Tensor a = (randn({n}) * 3).to(d), b = (randn({n}) * 3).to(d), one = (randn({1}) * 3).to(d);
      const std::vector<float> av = a.to(kFloat32).to_vector<float>(), bv = b.to(kFloat32).to_vector<float>();
      const float ov = one.to(kFloat32).item<float>();
      struct Case { const char* what; Tensor got; std::function<float(size_t)> want; };
      const std::vector<Case> cases = {
          {"a + b", a + b, [&](size_t i) { return av[i] + bv[i]; }},
          {"a * b", a * b, [&](size_t i) { return av[i] * bv[i]; }},
          {"a / b", a / b, [&](size_t i) { return av[i] / bv[i]; }},
          {"a - b", a - b, [&](size_t i) { return std::fma(-1.0f, bv[i], av[i]); }},
          {"one + b", one.expand({n}) + b, [&](size_t i) { return ov + bv[i]; }},
          {"a * one", a * one.expand({n}), [&](size_t i) { return av[i] * ov; }},
          {"a + 2.5 b", add(a, b, 2.5), [&](size_t i) { return std::fma(2.5f, bv[i], av[i]); }},
          {"clamp", clamp(a, -1.0, 1.5), [&](size_t i) { return std::min(std::max(av[i], -1.0f), 1.5f); }},
          {"maximum", maximum(a, b), [&](size_t i) { return std::max(av[i], bv[i]); }},
      };
      for (const Case& c : cases) {
        ASSERT_EQ(c.got.dtype(), d);
        const std::vector<float> got = c.got.to(kFloat32).to_vector<float>();
        int64_t wrong = 0;
        for (size_t i = 0; i < size_t(n); ++i) wrong += got[i] != to_d(c.want(i));
        EXPECT_EQ(wrong, 0) << name(d) << " " << c.what << " n " << n;
      }
      // ops with a float32 vector form run it on the widened blocks (and float32 tensors run
      // the same one), and ops without run their scalar form there: exactly the float32 op
      // on the widened values, rounded once
      const Tensor aw = a.to(kFloat32), bw = b.to(kFloat32), pos = a.abs() + 0.5, posw = pos.to(kFloat32);
      const std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>> widened = {
          {"pow", {pow(pos, b), pow(posw, bw).to(d)}},
          {"remainder", {remainder(a, b), remainder(aw, bw).to(d)}},
          {"atan2", {atan2(a, b), atan2(aw, bw).to(d)}},
          {"sqrt", {sqrt(pos), sqrt(posw).to(d)}},
          {"log", {log(pos), log(posw).to(d)}},
      };
      for (const auto& [what, pair] : widened) {
        EXPECT_EQ(std::memcmp(pair.first.data_ptr(), pair.second.data_ptr(), size_t(n) * 2), 0)
            << name(d) << " " << what << " n " << n;
      }
      // maximum keeps a NaN
      Tensor with_nan = a.clone();
      with_nan.index({n / 2}) = NAN;
      EXPECT_TRUE(std::isnan(maximum(with_nan, b).index({n / 2}).item<float>()));
      EXPECT_TRUE(std::isnan(maximum(b, with_nan).index({n / 2}).item<float>()));
    }
  }
}

TEST(DType, Conversions) {
  Tensor f = from_vector<double>({-1.7, 0.0, 2.9, 300.0});
  expect_values(f.to(kInt32), {4}, {-1, 0, 2, 300}, 0);
  expect_values(f.to(kBool), {4}, {1, 0, 1, 1}, 0);
  expect_values(from_vector<int64_t>({1, 0, -3}).to(kFloat32), {3}, {1, 0, -3}, 0);
}
