// The kernel cache's disk entries: round trips, corruption, files that are not entries, the
// directory's trust checks, the warnings, the size cap, the environment, threads and processes
// (the keys are in test_cache_key.cpp). Every test works in its own temp directory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <kiln/codegen/cache.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
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
    // Private whatever the umask: the cache refuses a directory others can write.
    fs::permissions(path_, fs::perms::owner_all);
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
DiskCacheConfig config_at(const fs::path& dir) {
  return DiskCacheConfig{.dir = dir.string(), .enabled = true, .max_bytes = 64ull << 20};
}

// stderr of `f`, from a clean slate of the once-per-process warnings.
std::string warnings_of(const std::function<void()>& f) {
  DiskCache::reset_warnings_for_testing();
  ::testing::internal::CaptureStderr();
  f();
  return ::testing::internal::GetCapturedStderr();
}
size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}
unsigned mode_of(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return unsigned(st.st_mode & 07777);
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

  // a root that cannot be created: disabled, with one warning naming it
  fs::path blocked = d.path() / "blocked";
  write_bytes(blocked, "x");
  std::optional<DiskCache> off;
  std::string err = warnings_of([&] { off.emplace(DiskCacheConfig{.dir = (blocked / "cache").string()}); });
  EXPECT_FALSE(off->enabled());
  EXPECT_NE(err.find("kiln: warning: [cache] cannot create the kernel cache directory " + (blocked / "cache").string()),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("running without the disk cache"), std::string::npos) << err;
  EXPECT_NO_THROW(off->store(key_of(1), "cpu-obj", "payload"));
  EXPECT_FALSE(off->load(key_of(1), "cpu-obj"));
}

// ---- files that are not entries ----------------------------------------------------------

// A FIFO under an entry's name: opening it for reading would wait for a writer, with the
// backend's cache lock held, so every compiling thread would hang. It is looked at first and
// skipped: a miss, left in place, and the next store renames the entry over it.
TEST(DiskCacheFiles, FifoInPlaceOfAnEntryIsSkippedWithoutBlocking) {
  TempDir d;
  DiskCache cache(config_for(d));
  const CacheKey key = key_of(1);
  const std::string path = cache.entry_path(key, "cpu-obj");
  fs::create_directories(fs::path(path).parent_path());
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
  bool done = false;
  std::optional<std::string> got;
  std::string err = warnings_of([&] {
    // On a thread the test can give up on, so that a load that blocks fails the test instead
    // of hanging it.
    std::future<std::optional<std::string>> pending =
        std::async(std::launch::async, [&] { return cache.load(key, "cpu-obj"); });
    done = pending.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    if (!done) {
      // A writer's open lets the blocked one return, so that the test can end.
      int w = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
      if (w >= 0) ::close(w);
    }
    got = pending.get();
  });
  ASSERT_TRUE(done) << "the load blocked on a FIFO for 20 s";
  EXPECT_FALSE(got);
  EXPECT_TRUE(fs::is_fifo(path));
  DiskCacheStats s = cache.stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.corrupt, 0u);
  EXPECT_NE(err.find("kiln: warning: [cache] " + path + " is a FIFO (named pipe), not a cache entry; ignored it"),
            std::string::npos)
      << err;

  cache.store(key, "cpu-obj", "payload");
  EXPECT_TRUE(fs::is_regular_file(path));
  EXPECT_EQ(cache.load(key, "cpu-obj"), "payload");
}

// A symbolic link under an entry's name is not followed, even to a valid entry: the cache's
// entries are its own files.
TEST(DiskCacheFiles, SymbolicLinkInPlaceOfAnEntryIsNotFollowed) {
  TempDir d, elsewhere;
  DiskCache cache(config_for(d)), other(config_for(elsewhere));
  const CacheKey key = key_of(1);
  other.store(key, "cpu-obj", "an entry elsewhere");
  const std::string path = cache.entry_path(key, "cpu-obj");
  fs::create_directories(fs::path(path).parent_path());
  fs::create_symlink(other.entry_path(key, "cpu-obj"), path);
  std::optional<std::string> got;
  std::string err = warnings_of([&] { got = cache.load(key, "cpu-obj"); });
  EXPECT_FALSE(got);
  EXPECT_TRUE(fs::is_symlink(path));
  EXPECT_EQ(cache.stats().corrupt, 0u);
  EXPECT_NE(err.find(path + " is a symbolic link, not a cache entry"), std::string::npos) << err;

  cache.store(key, "cpu-obj", "mine");
  EXPECT_FALSE(fs::is_symlink(path));
  EXPECT_EQ(cache.load(key, "cpu-obj"), "mine");
  EXPECT_EQ(other.load(key, "cpu-obj"), "an entry elsewhere");  // the link's target is untouched
}

// A header whose payload length agrees with the file's size, but claims more than the cache
// ever writes: refused before anything is allocated or read (under a memory limit the
// allocation threw std::bad_alloc out of the compiled call). The file is sparse: a terabyte
// where the file system allows it, else 6 GiB.
TEST(DiskCacheCorrupt, HeaderClaimingAHugePayloadIsRefusedUnread) {
  TempDir d;
  DiskCache cache(config_for(d));
  const CacheKey key = key_of(1);
  cache.store(key, "cpu-obj", "payload");
  const std::string path = cache.entry_path(key, "cpu-obj");
  const uint64_t fixed = 48 + 7;
  uint64_t claimed = 0;
  for (uint64_t size : {uint64_t(1) << 40, uint64_t(6) << 30})
    if (::truncate(path.c_str(), off_t(fixed + size)) == 0) {
      claimed = size;
      break;
    }
  if (claimed == 0) GTEST_SKIP() << "the file system holds no sparse file of 6 GiB";
  {
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = char(uint8_t(claimed >> (8 * i)));
    int fd = ::open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::pwrite(fd, len, 8, 32), 8);
    ::close(fd);
  }
  std::optional<std::string> got;
  double seconds = 0;
  std::string err = warnings_of([&] {
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_NO_THROW(got = cache.load(key, "cpu-obj"));
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  EXPECT_FALSE(got);
  EXPECT_LT(seconds, 5.0) << "the claimed payload was read";
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(cache.stats().corrupt, 1u);
  EXPECT_NE(err.find(path + " claims a payload of " + std::to_string(claimed) + " bytes, more than the cache holds"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("removed it"), std::string::npos) << err;
  cache.store(key, "cpu-obj", "payload");
  EXPECT_EQ(cache.load(key, "cpu-obj"), "payload");
}

// ---- warnings ----------------------------------------------------------------------------

// Corrupt entries are said once per process (one line, naming the first file and what was
// done), removed, and written again by the next store, as the next compile does.
TEST(DiskCacheWarnings, CorruptEntryWarnsOnceAndIsRewritten) {
  TempDir d;
  DiskCache cache(config_for(d));
  std::string err = warnings_of([&] {
    for (int i = 0; i < 3; ++i) {
      const std::string payload = random_bytes(100, uint32_t(i));
      cache.store(key_of(i), "cpu-obj", payload);
      fs::path p = cache.entry_path(key_of(i), "cpu-obj");
      std::string b = read_bytes(p);
      b[60] ^= 0x01;  // in the payload
      write_bytes(p, b);
      EXPECT_FALSE(cache.load(key_of(i), "cpu-obj")) << i;
      EXPECT_FALSE(fs::exists(p)) << i;
      cache.store(key_of(i), "cpu-obj", payload);
      EXPECT_EQ(cache.load(key_of(i), "cpu-obj"), payload) << i;
    }
  });
  EXPECT_EQ(count_of(err, "kiln: warning: [cache]"), 1u) << err;
  EXPECT_NE(err.find("kiln: warning: [cache] " + cache.entry_path(key_of(0), "cpu-obj") +
                     " is corrupt (checksum mismatch); removed it, and the next compile of this kernel rewrites it"),
            std::string::npos)
      << err;
  EXPECT_EQ(cache.stats().corrupt, 3u);
  EXPECT_EQ(cache.stats().hits, 3u);
}

// A store that cannot write says so (once), naming the entry and why.
TEST(DiskCacheWarnings, UnwritableEntryWarnsOnce) {
  TempDir d;
  DiskCache cache(config_for(d));
  std::string err = warnings_of([&] {
    for (int i = 0; i < 3; ++i) {
      fs::path shard = fs::path(cache.entry_path(key_of(i), "cpu-obj")).parent_path();
      if (!fs::exists(shard)) write_bytes(shard, "a file where the shard directory goes");
      cache.store(key_of(i), "cpu-obj", "payload");
    }
  });
  EXPECT_EQ(cache.stats().store_failures, 3u);
  EXPECT_EQ(count_of(err, "kiln: warning: [cache]"), 1u) << err;
  EXPECT_NE(err.find("kiln: warning: [cache] cannot write the kernel cache entry " + cache.entry_path(key_of(0), "cpu-obj")),
            std::string::npos)
      << err;
}

// ---- the directory's trust checks --------------------------------------------------------

// Directories the cache makes are private to the user, and so are its entries.
TEST(DiskCacheTrust, NewDirectoriesArePrivate) {
  TempDir d;
  const fs::path root = d.path() / "new" / "cache";
  DiskCache cache(config_at(root));
  ASSERT_TRUE(cache.enabled());
  cache.store(key_of(1), "cpu-obj", "payload");
  const fs::path entry = cache.entry_path(key_of(1), "cpu-obj");
  EXPECT_EQ(mode_of(root), 0700u);
  EXPECT_EQ(mode_of(cache.dir()), 0700u);
  EXPECT_EQ(mode_of(entry.parent_path()), 0700u);
  EXPECT_EQ(mode_of(entry), 0600u);
  EXPECT_EQ(cache.load(key_of(1), "cpu-obj"), "payload");
}

// Whoever can write the directory can run code in the process: a root or versioned directory
// its group or others can write is refused, with one warning naming it, and nothing is read or
// written there. One only its owner can write (an older kiln's, made under umask 022) is used.
TEST(DiskCacheTrust, DirectoryOthersCanWriteIsRefused) {
  struct Case {
    fs::perms root, version;  // (the versioned directory's, if any)
    std::string why, refused;  // refused: "root" or "version"
  };
  const fs::perms group_writable = fs::perms::owner_all | fs::perms::group_all;
  const std::vector<Case> cases = {
      {fs::perms::all, fs::perms::none, "is writable by every user (mode 0777)", "root"},
      {group_writable, fs::perms::none, "is writable by its group (mode 0770)", "root"},
      {fs::perms::owner_all, fs::perms::all, "is writable by every user (mode 0777)", "version"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.why + " " + c.refused);
    TempDir d;
    const fs::path root = d.path() / "cache", version = root / ("v" + std::to_string(kCacheFormatVersion));
    fs::create_directories(root);
    fs::permissions(root, c.root);
    if (c.version != fs::perms::none) {
      fs::create_directory(version);
      fs::permissions(version, c.version);
    }
    std::optional<DiskCache> cache;
    std::string err = warnings_of([&] { cache.emplace(config_at(root)); });
    EXPECT_FALSE(cache->enabled());
    const fs::path named = c.refused == "root" ? root : version;
    EXPECT_NE(err.find("kiln: warning: [cache] the kernel cache directory " + named.string() + " " + c.why),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("running without the disk cache"), std::string::npos) << err;
    EXPECT_EQ(count_of(err, "kiln: warning:"), 1u) << err;
    cache->store(key_of(1), "cpu-obj", "payload");
    EXPECT_FALSE(cache->load(key_of(1), "cpu-obj"));
    EXPECT_EQ(file_count(root), 0u);
    EXPECT_EQ(mode_of(root), unsigned(c.root));  // refused, not changed
  }
  TempDir d;
  const fs::path root = d.path() / "older";
  fs::create_directories(root);
  fs::permissions(root, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);
  DiskCache cache(config_at(root));
  EXPECT_TRUE(cache.enabled());
}

// A directory another user owns is refused too. Only root can give one away, and the tests
// run as root in CI.
TEST(DiskCacheTrust, DirectoryOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root can make a directory another user's";
  TempDir d;
  const fs::path root = d.path() / "theirs";
  fs::create_directories(root);
  fs::permissions(root, fs::perms::owner_all);
  ASSERT_EQ(::chown(root.c_str(), 65534, 65534), 0) << std::strerror(errno);
  std::optional<DiskCache> cache;
  std::string err = warnings_of([&] { cache.emplace(config_at(root)); });
  EXPECT_FALSE(cache->enabled());
  EXPECT_NE(err.find("the kernel cache directory " + root.string() + " is owned by user id 65534, not by this process's user (0)"),
            std::string::npos)
      << err;
  EXPECT_EQ(file_count(root), 0u);
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
