// The kernel cache's disk entries: round trips, corruption, the size cap, the environment,
// threads and processes (the keys are in test_cache_key.cpp). Every test works in its own
// temp directory.
#include <gtest/gtest.h>
#include <kiln/codegen/cache.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../common/scoped_env.h"

namespace fs = std::filesystem;
using namespace kiln::codegen;

namespace {

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("kiln-cache-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

using kiln::testing::ScopedEnv;

// Clears every variable from_env reads, so the outer environment cannot leak into a test.
struct CleanEnv {
  ScopedEnv dir{"KILN_CACHE_DIR", nullptr}, off{"KILN_DISABLE_CACHE", nullptr},
      mb{"KILN_CACHE_MAX_MB", nullptr}, xdg{"XDG_CACHE_HOME", nullptr}, home{"HOME", nullptr};
};

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const fs::path& p, std::string_view bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}
std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(gen() & 0xff);
  return s;
}
CacheKey key_of(int i) { return KeyBuilder().add("test-entry").add(i).finish(); }

// Every file under `dir` whose name marks it as a writer's temp file.
std::vector<std::string> temp_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos)
      out.push_back(e.path().string());
  return out;
}
size_t file_count(const fs::path& dir) {
  if (!fs::exists(dir)) return 0;
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

DiskCacheConfig config_for(const TempDir& d, uint64_t max_bytes = 64ull << 20) {
  return DiskCacheConfig{.dir = d.str(), .enabled = true, .max_bytes = max_bytes};
}

}  // namespace

// ---- round trips and misses --------------------------------------------------------------

TEST(DiskCache, StoreThenLoadRoundTrips) {
  TempDir d;
  DiskCache cache(config_for(d));
  ASSERT_TRUE(cache.enabled());
  EXPECT_EQ(cache.dir(), (d.path() / ("v" + std::to_string(kCacheFormatVersion))).string());
  std::vector<std::string> payloads = {"", "x", random_bytes(1 << 20, 7)};
  for (size_t i = 0; i < payloads.size(); ++i) {
    SCOPED_TRACE(payloads[i].size());
    cache.store(key_of(int(i)), "cpu-obj", payloads[i]);
    EXPECT_TRUE(fs::exists(cache.entry_path(key_of(int(i)), "cpu-obj")));
    std::optional<std::string> got = cache.load(key_of(int(i)), "cpu-obj");
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(*got, payloads[i]);
  }
  // a second cache on the same directory (a later run) sees the entries
  DiskCache again(config_for(d));
  EXPECT_EQ(again.load(key_of(2), "cpu-obj"), payloads[2]);
  DiskCacheStats s = cache.stats();
  EXPECT_EQ(s.stores, 3u);
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.misses + s.corrupt + s.store_failures + s.evicted, 0u);
  EXPECT_TRUE(temp_files(d.path()).empty());
}

TEST(DiskCache, EntryLayout) {
  TempDir d;
  DiskCache cache(config_for(d));
  CacheKey k = key_of(1);
  cache.store(k, "cpu-obj", "hello");
  std::string path = cache.entry_path(k, "cpu-obj");
  EXPECT_EQ(fs::path(path).filename().string(), k.hex() + ".cpu-obj");
  EXPECT_EQ(fs::path(path).parent_path().filename().string(), k.hex().substr(0, 2));
  std::string bytes = read_bytes(path);
  ASSERT_EQ(bytes.size(), 48u + 7 + 5);
  EXPECT_EQ(bytes.substr(0, 8), "KILNCACH");
  EXPECT_EQ(uint8_t(bytes[8]), kCacheFormatVersion);
  EXPECT_EQ(bytes.substr(48), "cpu-objhello");
}

TEST(DiskCache, MissOnAbsentKeyOtherKindOrBadKind) {
  TempDir d;
  DiskCache cache(config_for(d));
  EXPECT_FALSE(cache.load(key_of(1), "cpu-obj"));
  cache.store(key_of(1), "cpu-obj", "payload");
  EXPECT_FALSE(cache.load(key_of(2), "cpu-obj"));
  EXPECT_FALSE(cache.load(key_of(1), "cuda-cubin"));
  EXPECT_EQ(cache.load(key_of(1), "cpu-obj"), "payload");
  // kinds are part of the file name: path separators and the like are refused, not thrown
  const std::vector<std::string> bad_kinds = {"",    "a/b", "..", "cpu.obj",
                                              "x y", std::string(33, 'k')};
  for (const std::string& bad : bad_kinds) {
    EXPECT_NO_THROW(cache.store(key_of(1), bad, "p")) << bad;
    EXPECT_FALSE(cache.load(key_of(1), bad)) << bad;
  }
  DiskCacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 3u + 6);
  EXPECT_EQ(s.store_failures, 6u);
  EXPECT_EQ(s.corrupt, 0u);
}

// ---- corrupted entries -------------------------------------------------------------------

namespace {
// Stores a valid entry, damages its file, and checks that load reports a miss, deletes the
// file and counts it as corrupt, and that a new store works again. One directory per test.
class Damage {
 public:
  Damage() : cache_(config_for(dir_)) {}

  void check(const std::function<void(const fs::path&, std::string& bytes)>& damage) {
    std::string payload = random_bytes(300, 3);
    cache_.store(key_, kind_, payload);
    fs::path path = cache_.entry_path(key_, kind_);
    std::string bytes = read_bytes(path);
    ASSERT_EQ(bytes.size(), 48 + kind_.size() + payload.size());
    uint64_t corrupt = cache_.stats().corrupt, hits = cache_.stats().hits;
    damage(path, bytes);
    EXPECT_FALSE(cache_.load(key_, kind_));
    EXPECT_FALSE(fs::exists(path));
    EXPECT_EQ(cache_.stats().corrupt, corrupt + 1);
    EXPECT_EQ(cache_.stats().hits, hits);
    cache_.store(key_, kind_, payload);
    EXPECT_EQ(cache_.load(key_, kind_), payload);
    EXPECT_EQ(cache_.stats().corrupt, corrupt + 1);
  }

 private:
  TempDir dir_;
  std::string kind_ = "cpu-obj";
  DiskCache cache_;
  CacheKey key_ = key_of(1);
};
}  // namespace

TEST(DiskCacheCorrupt, Truncated) {
  Damage d;
  for (size_t keep : {size_t(0), size_t(1), size_t(47), size_t(48), size_t(55), size_t(354)}) {
    SCOPED_TRACE(keep);
    d.check([&](const fs::path& p, std::string& b) { fs::resize_file(p, keep); });
  }
}

TEST(DiskCacheCorrupt, AppendedBytes) {
  Damage().check([](const fs::path& p, std::string& b) { write_bytes(p, b + "x"); });
}

TEST(DiskCacheCorrupt, FlippedPayloadByte) {
  Damage d;
  for (size_t pos : {size_t(55), size_t(200), size_t(354)}) {
    SCOPED_TRACE(pos);
    d.check([&](const fs::path& p, std::string& b) {
      b[pos] ^= 0x04;
      write_bytes(p, b);
    });
  }
}

TEST(DiskCacheCorrupt, FlippedHeaderByte) {
  // Every byte of the header and the kind, one bit each.
  Damage d;
  for (size_t pos = 0; pos < 48 + 7; ++pos) {
    SCOPED_TRACE(pos);
    d.check([&](const fs::path& p, std::string& b) {
      b[pos] ^= 0x01;
      write_bytes(p, b);
    });
  }
}

TEST(DiskCacheCorrupt, Garbage) {
  Damage d;
  d.check([](const fs::path& p, std::string& b) { write_bytes(p, random_bytes(b.size(), 9)); });
  d.check([](const fs::path& p, std::string& b) {
    write_bytes(p, "KILNCACH" + random_bytes(200, 9));  // a good magic, nothing else
  });
  // a huge claimed payload length must not be trusted (nor allocated)
  d.check([](const fs::path& p, std::string& b) {
    for (int i = 32; i < 40; ++i) b[i] = char(0xff);
    write_bytes(p, b);
  });
}

TEST(DiskCacheCorrupt, EntryOfAnotherKeyOrKind) {
  Damage d;
  // A valid entry of key 2 under key 1's name: the header's key gives it away.
  d.check([](const fs::path& p, std::string& b) {
    TempDir other;
    DiskCache c(config_for(other));
    c.store(key_of(2), "cpu-obj", random_bytes(300, 3));
    fs::copy_file(c.entry_path(key_of(2), "cpu-obj"), p, fs::copy_options::overwrite_existing);
  });
  // ... and one of another kind with the same length of name
  d.check([](const fs::path& p, std::string& b) {
    TempDir other;
    DiskCache c(config_for(other));
    c.store(key_of(1), "gpu-obj", random_bytes(300, 3));
    fs::copy_file(c.entry_path(key_of(1), "gpu-obj"), p, fs::copy_options::overwrite_existing);
  });
}

// ---- configuration -----------------------------------------------------------------------

TEST(DiskCacheConfig, DisabledCacheStoresAndLoadsNothing) {
  TempDir d;
  DiskCacheConfig c = config_for(d);
  c.enabled = false;
  DiskCache cache(c);
  EXPECT_FALSE(cache.enabled());
  cache.store(key_of(1), "cpu-obj", "payload");
  EXPECT_FALSE(cache.load(key_of(1), "cpu-obj"));
  EXPECT_EQ(file_count(d.path()), 0u);

  // the same through the environment
  CleanEnv clean;
  ScopedEnv dir("KILN_CACHE_DIR", d.str().c_str());
  for (const char* value : {"1", "yes"}) {
    ScopedEnv off("KILN_DISABLE_CACHE", value);
    EXPECT_FALSE(DiskCacheConfig::from_env().enabled) << value;
    DiskCache env_cache(DiskCacheConfig::from_env());
    EXPECT_FALSE(env_cache.enabled());
    env_cache.store(key_of(1), "cpu-obj", "payload");
    EXPECT_FALSE(env_cache.load(key_of(1), "cpu-obj"));
    EXPECT_EQ(file_count(d.path()), 0u);
    DiskCacheStats s = env_cache.stats();
    EXPECT_EQ(s.stores + s.hits + s.misses + s.store_failures, 0u);
  }
  ScopedEnv on("KILN_DISABLE_CACHE", "0");
  EXPECT_TRUE(DiskCacheConfig::from_env().enabled);
}

TEST(DiskCacheConfig, FromEnvironment) {
  TempDir d;
  CleanEnv clean;
  EXPECT_FALSE(DiskCacheConfig::from_env().enabled);  // no KILN_CACHE_DIR, XDG_CACHE_HOME or HOME
  EXPECT_FALSE(DiskCache(DiskCacheConfig::from_env()).enabled());

  std::string home = (d.path() / "home").string(), xdg = (d.path() / "xdg").string();
  ScopedEnv h("HOME", home.c_str());
  EXPECT_EQ(DiskCacheConfig::from_env().dir, home + "/.cache/kiln");
  {
    ScopedEnv rel("XDG_CACHE_HOME", "relative/dir");  // ignored, as the XDG spec says
    EXPECT_EQ(DiskCacheConfig::from_env().dir, home + "/.cache/kiln");
  }
  ScopedEnv x("XDG_CACHE_HOME", xdg.c_str());
  EXPECT_EQ(DiskCacheConfig::from_env().dir, xdg + "/kiln");

  std::string moved = (d.path() / "elsewhere").string();
  ScopedEnv k("KILN_CACHE_DIR", moved.c_str());
  DiskCacheConfig c = DiskCacheConfig::from_env();
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(c.dir, moved);
  EXPECT_EQ(c.max_bytes, 512ull << 20);
  DiskCache cache(c);
  ASSERT_TRUE(cache.enabled());
  EXPECT_EQ(cache.dir(), moved + "/v" + std::to_string(kCacheFormatVersion));
  cache.store(key_of(1), "cpu-obj", "payload");
  EXPECT_TRUE(fs::exists(cache.entry_path(key_of(1), "cpu-obj")));
  EXPECT_EQ(file_count(moved), 1u);
  EXPECT_FALSE(fs::exists(xdg));
  EXPECT_FALSE(fs::exists(home));

  {
    ScopedEnv mb("KILN_CACHE_MAX_MB", "3");
    EXPECT_EQ(DiskCacheConfig::from_env().max_bytes, 3ull << 20);
  }
  for (const char* bad : {"abc", "-5", "12x", ""}) {
    ScopedEnv mb("KILN_CACHE_MAX_MB", bad);
    EXPECT_EQ(DiskCacheConfig::from_env().max_bytes, 512ull << 20) << bad;
  }
  ScopedEnv zero("KILN_CACHE_MAX_MB", "0");
  EXPECT_FALSE(DiskCacheConfig::from_env().enabled);
}

// ---- the size cap ------------------------------------------------------------------------

namespace {
// Makes stored entries' ages distinct and ordered without sleeping.
void set_age(const DiskCache& cache, int i, int seconds_ago) {
  fs::last_write_time(cache.entry_path(key_of(i), "cpu-obj"),
                      fs::file_time_type::clock::now() - std::chrono::seconds(seconds_ago));
}
uint64_t entries_bytes(const fs::path& dir) {
  uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) n += e.file_size();
  return n;
}
}  // namespace

TEST(DiskCache, SizeCapEvictsOldest) {
  TempDir d;
  const uint64_t cap = 4096;  // each entry is 48 + 7 + 1000 bytes: three fit, four do not
  DiskCache cache(config_for(d, cap));
  const int n = 8;
  for (int i = 0; i < n; ++i) {
    cache.store(key_of(i), "cpu-obj", random_bytes(1000, i));
    set_age(cache, i, 1000 - i);
    EXPECT_LE(entries_bytes(cache.dir()), cap) << "after store " << i;
  }
  std::vector<bool> present;
  for (int i = 0; i < n; ++i) present.push_back(fs::exists(cache.entry_path(key_of(i), "cpu-obj")));
  EXPECT_FALSE(present.front());
  EXPECT_TRUE(present.back());
  for (int i = 1; i < n; ++i)
    EXPECT_TRUE(!present[i - 1] || present[i]) << i << " evicted before " << i - 1;
  size_t kept = std::count(present.begin(), present.end(), true);
  EXPECT_GE(kept, 2u);
  EXPECT_EQ(cache.stats().evicted, uint64_t(n) - kept);
  EXPECT_EQ(cache.load(key_of(n - 1), "cpu-obj"), random_bytes(1000, n - 1));
}

TEST(DiskCache, HitMakesEntryYoung) {
  TempDir d;
  DiskCache cache(config_for(d, 4096));
  for (int i = 0; i < 3; ++i) {
    cache.store(key_of(i), "cpu-obj", random_bytes(1000, i));
    set_age(cache, i, 1000 - i);
  }
  ASSERT_TRUE(cache.load(key_of(0), "cpu-obj"));  // the oldest is used again
  cache.store(key_of(3), "cpu-obj", random_bytes(1000, 3));
  EXPECT_TRUE(fs::exists(cache.entry_path(key_of(0), "cpu-obj")));
  EXPECT_FALSE(fs::exists(cache.entry_path(key_of(1), "cpu-obj")));
  EXPECT_TRUE(fs::exists(cache.entry_path(key_of(3), "cpu-obj")));
  EXPECT_EQ(cache.stats().evicted, 1u);
}

TEST(DiskCache, OversizedEntryIsNotWritten) {
  TempDir d;
  DiskCache cache(config_for(d, 4096));
  cache.store(key_of(0), "cpu-obj", "small");
  cache.store(key_of(1), "cpu-obj", random_bytes(5000, 1));
  EXPECT_FALSE(cache.load(key_of(1), "cpu-obj"));
  EXPECT_EQ(cache.load(key_of(0), "cpu-obj"), "small");  // and it evicted nothing
  EXPECT_EQ(cache.stats().store_failures, 1u);
}

TEST(DiskCache, ClearRemovesEntriesOnly) {
  TempDir d;
  DiskCache cache(config_for(d));
  for (int i = 0; i < 5; ++i) cache.store(key_of(i), "cpu-obj", "p");
  write_bytes(fs::path(cache.dir()) / "not-ours.txt", "keep me");
  cache.clear();
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(cache.load(key_of(i), "cpu-obj"));
  EXPECT_EQ(file_count(cache.dir()), 1u);
  cache.store(key_of(0), "cpu-obj", "again");
  EXPECT_EQ(cache.load(key_of(0), "cpu-obj"), "again");
}

// ---- failures ----------------------------------------------------------------------------

TEST(DiskCache, UnwritableDirectoryCountsStoreFailure) {
  // A file in the way (chmod would not stop root, which the tests may run as).
  TempDir d;
  DiskCache cache(config_for(d));
  fs::path shard = fs::path(cache.entry_path(key_of(1), "cpu-obj")).parent_path();
  write_bytes(shard, "a file where the shard directory goes");
  EXPECT_NO_THROW(cache.store(key_of(1), "cpu-obj", "payload"));
  EXPECT_FALSE(cache.load(key_of(1), "cpu-obj"));
  EXPECT_EQ(cache.stats().store_failures, 1u);
  EXPECT_EQ(cache.stats().stores, 0u);

  // the versioned directory replaced by a file after the cache was made
  fs::remove_all(cache.dir());
  write_bytes(cache.dir(), "in the way");
  EXPECT_NO_THROW(cache.store(key_of(2), "cpu-obj", "payload"));
  EXPECT_EQ(cache.stats().store_failures, 2u);
  EXPECT_TRUE(temp_files(d.path()).empty());

  // a directory where the entry goes: the rename fails, and the temp file is cleaned up
  fs::remove(cache.dir());
  DiskCache again(config_for(d));
  ASSERT_TRUE(again.enabled());
  fs::create_directories(again.entry_path(key_of(3), "cpu-obj"));
  EXPECT_NO_THROW(again.store(key_of(3), "cpu-obj", "payload"));
  EXPECT_FALSE(again.load(key_of(3), "cpu-obj"));
  EXPECT_EQ(again.stats().store_failures, 1u);
  EXPECT_EQ(again.stats().corrupt, 0u);
  EXPECT_TRUE(temp_files(d.path()).empty());

  // a root that cannot be created: disabled, quietly
  fs::path blocked = d.path() / "blocked";
  write_bytes(blocked, "x");
  DiskCache off(DiskCacheConfig{.dir = (blocked / "cache").string()});
  EXPECT_FALSE(off.enabled());
  EXPECT_NO_THROW(off.store(key_of(1), "cpu-obj", "payload"));
  EXPECT_FALSE(off.load(key_of(1), "cpu-obj"));
}

// ---- concurrency -------------------------------------------------------------------------

TEST(DiskCache, ConcurrentThreads) {
  TempDir d;
  DiskCache cache(config_for(d));
  const std::string shared = random_bytes(4096, 11);
  const int threads = 4, rounds = 100;
  std::atomic<int> wrong{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int r = 0; r < rounds; ++r) {
        cache.store(key_of(-1), "cpu-obj", shared);
        if (cache.load(key_of(-1), "cpu-obj") != shared) ++wrong;
        std::string mine = random_bytes(512 + r, uint32_t(t * 1000 + r));
        cache.store(key_of(t), "cpu-obj", mine);
        if (cache.load(key_of(t), "cpu-obj") != mine) ++wrong;
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(wrong.load(), 0);
  DiskCacheStats s = cache.stats();
  EXPECT_EQ(s.stores, uint64_t(threads * rounds * 2));
  EXPECT_EQ(s.hits, uint64_t(threads * rounds * 2));
  EXPECT_EQ(s.corrupt + s.store_failures + s.misses, 0u);
  EXPECT_TRUE(temp_files(d.path()).empty());
  EXPECT_EQ(file_count(cache.dir()), size_t(threads + 1));
}

TEST(DiskCache, TwoProcessesWritingOneKey) {
  TempDir d;
  const std::string payload = random_bytes(64 << 10, 5);
  const CacheKey key = key_of(77);
  // Both processes store the same entry 200 times and check every load they make.
  auto hammer = [&]() -> int {
    DiskCache cache(config_for(d));
    for (int i = 0; i < 200; ++i) {
      cache.store(key, "cpu-obj", payload);
      if (i % 10 == 0 && cache.load(key, "cpu-obj") != payload) return 2;
    }
    DiskCacheStats s = cache.stats();
    return s.store_failures == 0 && s.corrupt == 0 ? 0 : 3;
  };
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(hammer());  // no gtest and no destructors in the child
  int parent_result = hammer();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(parent_result, 0);
  DiskCache cache(config_for(d));
  EXPECT_EQ(cache.load(key, "cpu-obj"), payload);
  EXPECT_TRUE(temp_files(d.path()).empty());
  EXPECT_EQ(file_count(cache.dir()), 1u);
}
