// The kernel cache's keys and its on-disk store of compiled object code, shared by the CPU
// (LLVM) and CUDA backends. Nothing here depends on LLVM.
//
// A backend builds a CacheKey from everything that decides the machine code it would produce
// (the kernel program's text, the target CPU or GPU, compiler versions, options) and asks the
// DiskCache for the object stored under that key; on a miss it compiles and stores the result.
// Keys are stable across processes, runs and machines of the same kind, so a second run of the
// same program skips compilation.
//
// Disk entries are written atomically (temp file + rename) and verified on load (magic, format
// version, kind, key, length and a checksum of the payload), so a crash mid-write, a full disk
// or a concurrent writer in another process can cost a recompilation but never hand back a
// wrong object. Nothing throws out of load/store, not even std::bad_alloc: the cache is an
// optimization, and a failure costs a compilation. Each kind of failure (a corrupt entry, a
// file that is not an entry, an unwritable directory, ...) is said once per process on stderr,
// "kiln: warning: [cache] ...", naming the file and what kiln did about it.
//
// The directory is a trust boundary: its entries are machine code that kiln loads and runs, so
// whoever can write it can run code in the process. The cache creates it private to the user
// (mode 0700) and refuses, with a warning, one that another user owns or that others can write:
// the process then runs without the disk cache (docs/codegen.md, "The kernel cache").
#pragma once
#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace kiln::codegen {

// Bumped whenever the entry layout changes; entries of other versions live in other
// directories (dir/v<N>/) and are never read.
inline constexpr uint32_t kCacheFormatVersion = 1;

// The largest entry the format holds (header, kind and payload). Compiled kernels are kilobytes
// to a few megabytes; the bound lets load refuse a header that claims more before it allocates
// or reads anything, whatever KILN_CACHE_MAX_MB allows.
inline constexpr uint64_t kMaxCacheEntryBytes = 1ull << 30;

// A stable 128-bit key (not std::hash: identical across processes, runs and machines).
struct CacheKey {
  uint64_t hi = 0, lo = 0;
  std::string hex() const;  // 32 lowercase hex chars, hi first
  bool operator==(const CacheKey&) const = default;
};
struct CacheKeyHash {
  size_t operator()(const CacheKey& k) const;
};

// Builds a key from typed fields. Each field is encoded with a type tag (and strings with their
// length), so ("ab", "c") != ("a", "bc"), int64 5 != uint64 5 and true != int64 1. Doubles are
// hashed by bit pattern: -0.0 != 0.0, and NaNs with different payloads differ.
class KeyBuilder {
 public:
  KeyBuilder& add(std::string_view s);
  // Without this a string literal would pick add(bool): pointer-to-bool is a standard
  // conversion and beats the user-defined one to string_view.
  KeyBuilder& add(const char* s) { return add(std::string_view(s)); }
  KeyBuilder& add(int64_t v);
  KeyBuilder& add(uint64_t v);
  KeyBuilder& add(double v);
  KeyBuilder& add(bool v);
  // Other integer types (int, unsigned, long long) go to add(int64_t) or add(uint64_t) by
  // signedness; without this add(3) would be ambiguous.
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  KeyBuilder& add(T v) {
    if constexpr (std::is_signed_v<T>)
      return add(static_cast<int64_t>(v));
    else
      return add(static_cast<uint64_t>(v));
  }

  // A char is a string of length 1 or a number; say which (and plain char's signedness
  // differs between x86 and ARM).
  KeyBuilder& add(char) = delete;

  CacheKey finish() const;

 private:
  std::string bytes_;  // the tagged encoding of the fields so far; hashed by finish()
};

// A stable 64-bit checksum of bytes (the disk entries' integrity check).
uint64_t checksum64(std::string_view bytes);

struct DiskCacheConfig {
  std::string dir;  // the root; entries go in dir + "/v<kCacheFormatVersion>/"
  bool enabled = true;
  uint64_t max_bytes = 512ull << 20;  // size cap; least recently used entries evicted past it
  // KILN_CACHE_DIR, KILN_DISABLE_CACHE, KILN_CACHE_MAX_MB (docs/env_vars.md).
  static DiskCacheConfig from_env();
};

struct DiskCacheStats {
  uint64_t hits = 0, misses = 0, stores = 0;
  uint64_t corrupt = 0;         // bad entries found by load, deleted and reported as misses
  uint64_t evicted = 0;         // entries removed to keep the directory under max_bytes
  uint64_t store_failures = 0;  // stores that wrote nothing (unwritable dir, disk full, ...)
};

// The on-disk object cache. All methods may be called concurrently from many threads, and
// several processes may share one directory.
class DiskCache {
 public:
  // Creates the root and the versioned directory private to the user (mode 0700). If that
  // fails, or either is owned by another user or writable by its group or by others, the cache
  // is disabled with a warning; a config that is disabled, has no dir or a zero cap disables it
  // quietly. Disabled, loads miss and stores do nothing, without an error.
  explicit DiskCache(DiskCacheConfig c);
  DiskCache(const DiskCache&) = delete;
  DiskCache& operator=(const DiskCache&) = delete;

  // The process-wide cache, configured once from the environment.
  static DiskCache& global();

  // The payload stored under `key` and `kind` (e.g. "cpu-obj"), or nullopt on a miss. An entry
  // that is truncated, has a bad magic/version, another kind or key, claims a payload larger
  // than the cap (or kMaxCacheEntryBytes) or fails its checksum is deleted, counted in
  // stats().corrupt and reported as a miss: never returned, and a claimed length is never
  // allocated before it is checked against the file's size and the cap. Anything but a regular
  // file under the entry's name (a FIFO, a socket, a device, a symbolic link, a directory) is
  // never opened for reading: a miss, left in place (the next store replaces it). A hit
  // refreshes the entry's modification time, which makes eviction least-recently-used.
  // `kind` must be 1-32 chars of [A-Za-z0-9_-] (it is part of the file name); any other kind
  // misses (load) or counts a store failure (store) rather than throwing.
  std::optional<std::string> load(const CacheKey& key, std::string_view kind);

  // Writes atomically: a uniquely named temp file in the entry's directory, written fully, then
  // renamed over the final name, so concurrent writers of one key (threads or processes) leave
  // one valid entry. Then keeps the directory under max_bytes. Never throws: failures count in
  // stats().store_failures. An entry larger than max_bytes (or kMaxCacheEntryBytes) on its own
  // is not written.
  void store(const CacheKey& key, std::string_view kind, std::string_view payload);

  bool enabled() const { return enabled_; }
  const std::string& dir() const { return dir_; }  // the versioned directory, absolute
  // Where the entry for key/kind lives (whether or not it exists): dir()/<hex[0:2]>/<hex>.<kind>.
  std::string entry_path(const CacheKey& key, std::string_view kind) const;
  DiskCacheStats stats() const;

  // Removes every entry of this format version (for tests and a future `kiln-cache clear`).
  void clear();

  // Forgets which kinds of warning this process has printed, so that a test can see one again.
  static void reset_warnings_for_testing();

 private:
  // load and store without their guards (the kind checked, exceptions turned into misses and
  // store failures).
  std::optional<std::string> load_entry(const std::string& path, const CacheKey& key, std::string_view kind);
  void store_entry(const CacheKey& key, std::string_view kind, std::string_view payload);
  void enforce_cap(uint64_t added_bytes);
  void evict_locked();

  std::string dir_;
  bool enabled_ = false;
  uint64_t max_bytes_ = 0;

  // Writers' estimate of the directory's size: exact after a scan, then grown by this
  // process's own stores, so the directory is only rescanned once the estimate passes the cap.
  std::mutex size_mu_;
  bool scanned_ = false;
  uint64_t size_estimate_ = 0;

  std::atomic<uint64_t> hits_{0}, misses_{0}, stores_{0}, corrupt_{0}, evicted_{0},
      store_failures_{0};
};

}  // namespace kiln::codegen
