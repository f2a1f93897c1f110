// The kernel cache's keys and checksum: stable across builders and runs, and sensitive to
// every field, its type and its position.
#include <gtest/gtest.h>
#include <kiln/codegen/cache.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace kiln::codegen;

namespace {
std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(gen() & 0xff);
  return s;
}
}  // namespace

TEST(CacheKey, SameFieldsGiveSameKey) {
  auto build = [] {
    return KeyBuilder().add("kernel").add(int64_t(-3)).add(uint64_t(7)).add(0.5).add(true);
  };
  EXPECT_EQ(build().finish(), build().finish());
  EXPECT_EQ(build().finish().hex(), build().finish().hex());
  // finish() does not consume the builder
  KeyBuilder b = build();
  EXPECT_EQ(b.finish(), b.finish());
  // the integer overloads follow signedness, not width
  EXPECT_EQ(KeyBuilder().add(5).finish(), KeyBuilder().add(int64_t(5)).finish());
  EXPECT_EQ(KeyBuilder().add(5u).finish(), KeyBuilder().add(uint64_t(5)).finish());
  EXPECT_EQ(KeyBuilder().add(std::string("s")).finish(), KeyBuilder().add("s").finish());
}

TEST(CacheKey, GoldenHex) {
  // If this changes, the hash changed: every user's cache is silently invalidated, so bump
  // kCacheFormatVersion deliberately (or restore the hash) rather than just updating the value.
  KeyBuilder b;
  b.add("kiln").add(int64_t(-1)).add(uint64_t(42)).add(1.5).add(false).add("");
  CacheKey k = b.finish();
  EXPECT_EQ(k.hex(), "8bdb847d71d4dd1033fbe360e2f93a3b");
  EXPECT_EQ(KeyBuilder().finish().hex(), "4d519cfc9f7f74a81137974e4facfe33");
  EXPECT_EQ(checksum64("kiln"), 0x1eee825f301f5b77ull);
}

TEST(CacheKey, HexFormat) {
  CacheKey k{.hi = 0x0123456789abcdefull, .lo = 0xfedcba9876543210ull};
  EXPECT_EQ(k.hex(), "0123456789abcdeffedcba9876543210");
  EXPECT_EQ(CacheKey{}.hex(), std::string(32, '0'));
  EXPECT_EQ(CacheKeyHash{}(k), CacheKeyHash{}(CacheKey{k}));
}

TEST(CacheKey, FieldsOrderAndTagsMatter) {
  std::vector<CacheKey> keys = {
      KeyBuilder().finish(),
      KeyBuilder().add("ab").add("c").finish(),
      KeyBuilder().add("a").add("bc").finish(),
      KeyBuilder().add("abc").finish(),
      KeyBuilder().add("c").add("ab").finish(),
      KeyBuilder().add("").finish(),
      KeyBuilder().add("").add("").finish(),
      KeyBuilder().add(std::string_view("a\0", 2)).finish(),
      KeyBuilder().add("a").finish(),
      KeyBuilder().add(int64_t(1)).finish(),
      KeyBuilder().add(uint64_t(1)).finish(),
      KeyBuilder().add(1.0).finish(),
      KeyBuilder().add(true).finish(),
      KeyBuilder().add(false).finish(),
      KeyBuilder().add(int64_t(0)).finish(),
      KeyBuilder().add(int64_t(1)).add(int64_t(2)).finish(),
      KeyBuilder().add(int64_t(2)).add(int64_t(1)).finish(),
      KeyBuilder().add(int64_t(-1)).finish(),
      KeyBuilder().add(std::numeric_limits<uint64_t>::max()).finish(),
  };
  // Single-bit and single-character changes of a long field.
  std::string text(1000, 'x');
  keys.push_back(KeyBuilder().add(text).finish());
  for (size_t pos : {size_t(0), size_t(7), size_t(8), size_t(500), size_t(999)}) {
    std::string t = text;
    t[pos] ^= 1;
    keys.push_back(KeyBuilder().add(t).finish());
  }
  std::set<std::string> hexes;
  for (const CacheKey& k : keys) hexes.insert(k.hex());
  EXPECT_EQ(hexes.size(), keys.size());
}

TEST(CacheKey, DoublesByBitPattern) {
  double nan1 = std::nan("1"), nan2 = std::nan("2");
  EXPECT_NE(KeyBuilder().add(0.0).finish(), KeyBuilder().add(-0.0).finish());
  EXPECT_NE(KeyBuilder().add(nan1).finish(), KeyBuilder().add(nan2).finish());
  EXPECT_EQ(KeyBuilder().add(nan1).finish(), KeyBuilder().add(nan1).finish());  // same bits
  EXPECT_NE(KeyBuilder().add(1.0).finish(), KeyBuilder().add(std::nextafter(1.0, 2.0)).finish());
  EXPECT_EQ(KeyBuilder().add(0.1 + 0.2).finish(), KeyBuilder().add(0.1 + 0.2).finish());
  EXPECT_EQ(KeyBuilder().add(2.5f).finish(), KeyBuilder().add(2.5).finish());  // exact widening
}

TEST(CacheKey, ChecksumSeesEveryByteAndTheLength) {
  std::string data = random_bytes(4099, 1);
  uint64_t base = checksum64(data);
  EXPECT_EQ(checksum64(data), base);
  std::set<uint64_t> seen{base};
  for (size_t pos = 0; pos < data.size(); pos += 37) {
    std::string d = data;
    d[pos] ^= 0x10;
    seen.insert(checksum64(d));
  }
  EXPECT_EQ(seen.size(), 1 + (data.size() + 36) / 37);
  EXPECT_NE(checksum64("a"), checksum64(std::string_view("a\0", 2)));
  EXPECT_NE(checksum64(""), checksum64(std::string_view("\0", 1)));
}
