#include "kiln/codegen/cache.h"
#include "kiln/runtime/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <new>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

namespace kiln::codegen {
namespace fs = std::filesystem;

// ---- the hash ----------------------------------------------------------------------------

namespace {
// Odd "nothing up the sleeve" constants: the fractional parts of the square roots of the first
// primes (the same numbers as SHA-512's initial values).
constexpr uint64_t kMulA = 0xbb67ae8584caa73bull;      // sqrt(3)
constexpr uint64_t kMulB = 0xa54ff53a5f1d36f1ull;      // sqrt(7)
constexpr uint64_t kKeySeedA = 0x6a09e667f3bcc908ull;  // sqrt(2)
constexpr uint64_t kKeySeedB = 0x3c6ef372fe94f82bull;  // sqrt(5)
constexpr uint64_t kSumSeedA = 0x510e527fade682d1ull;  // sqrt(11)
constexpr uint64_t kSumSeedB = 0x9b05688c2b3e6c1full;  // sqrt(13)

// A 64-bit mixer. Each step (xor with a right shift, multiply by an odd constant) is
// invertible, so the whole is a bijection; the multiplies carry every input bit upwards and the
// shifts bring the high bits back down.
uint64_t mix(uint64_t x) {
  x ^= x >> 32;
  x *= kMulA;
  x ^= x >> 29;
  x *= kMulB;
  x ^= x >> 32;
  return x;
}

// Little-endian regardless of the host, and memcpy because `p` has no alignment.
uint64_t load_le64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

// Two chains over the 8-byte words of `bytes` (the last one zero-padded), then the length, so
// "a" and "a\0" differ. Lane a is h = mix(h ^ w); lane b feeds each word rotated and multiplied,
// so the two lanes' collisions are unrelated. Since every step is a bijection of the word for a
// given state, two inputs of one length that differ in a single word never collide in a lane.
// The lanes are independent dependency chains, so the CPU runs them side by side.
uint64_t hash_lanes(std::string_view bytes, uint64_t seed_a, uint64_t seed_b, uint64_t* other) {
  uint64_t a = seed_a, b = seed_b;
  auto absorb = [&](uint64_t w) {
    a = mix(a ^ w);
    b = mix(b + std::rotl(w, 32) * kMulA);
  };
  size_t n = bytes.size(), i = 0;
  for (; i + 8 <= n; i += 8) absorb(load_le64(bytes.data() + i));
  if (i < n) {
    char tail[8] = {};
    std::memcpy(tail, bytes.data() + i, n - i);
    absorb(load_le64(tail));
  }
  absorb(uint64_t(n));
  // Cross the lanes so each half of the result depends on both.
  if (other) *other = mix(b ^ std::rotl(a, 23));
  return mix(a ^ std::rotl(b, 29));
}

void put_le64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(char(uint8_t(v >> (8 * i))));
}
void put_le32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char(uint8_t(v >> (8 * i))));
}
uint32_t load_le32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | uint8_t(p[i]);
  return v;
}

// The field tags of KeyBuilder's encoding. With a tag before each field and a length before each
// string, the encoding of a field list can be read back unambiguously, so different field lists
// give different byte strings.
enum Tag : char { kTagString = 1, kTagInt = 2, kTagUint = 3, kTagDouble = 4, kTagBool = 5 };
}  // namespace

std::string CacheKey::hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(32, '0');
  for (int i = 0; i < 16; ++i) {
    s[15 - i] = kDigits[(hi >> (4 * i)) & 15];
    s[31 - i] = kDigits[(lo >> (4 * i)) & 15];
  }
  return s;
}

size_t CacheKeyHash::operator()(const CacheKey& k) const {
  return size_t(k.lo ^ std::rotl(k.hi, 32));  // both halves are already well mixed
}

KeyBuilder& KeyBuilder::add(std::string_view s) {
  bytes_.push_back(kTagString);
  put_le64(bytes_, s.size());
  bytes_.append(s);
  return *this;
}
KeyBuilder& KeyBuilder::add(int64_t v) {
  bytes_.push_back(kTagInt);
  put_le64(bytes_, uint64_t(v));
  return *this;
}
KeyBuilder& KeyBuilder::add(uint64_t v) {
  bytes_.push_back(kTagUint);
  put_le64(bytes_, v);
  return *this;
}
KeyBuilder& KeyBuilder::add(double v) {
  bytes_.push_back(kTagDouble);
  put_le64(bytes_, std::bit_cast<uint64_t>(v));
  return *this;
}
KeyBuilder& KeyBuilder::add(bool v) {
  bytes_.push_back(kTagBool);
  bytes_.push_back(v ? 1 : 0);
  return *this;
}

CacheKey KeyBuilder::finish() const {
  CacheKey k;
  k.hi = hash_lanes(bytes_, kKeySeedA, kKeySeedB, &k.lo);
  return k;
}

uint64_t checksum64(std::string_view bytes) {
  return hash_lanes(bytes, kSumSeedA, kSumSeedB, nullptr);
}

// ---- the entry format --------------------------------------------------------------------
//
//   offset  size  field (integers little-endian)
//        0     8  magic "KILNCACH"
//        8     4  format version (kCacheFormatVersion)
//       12     4  kind length
//       16     8  key.hi
//       24     8  key.lo
//       32     8  payload length
//       40     8  checksum64(payload)
//       48     .  kind, then payload
//
// Every header field is compared with what load expects and the file size must be exactly
// 48 + kind + payload, so a change to any header byte is caught as well as one to the payload.
// No fsync: a crash can leave a short or zeroed entry, which load discards like any other.

namespace {
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'C', 'A', 'C', 'H'};
constexpr size_t kHeaderSize = 48;
constexpr size_t kMaxKind = 32;
constexpr std::string_view kTempMarker = ".tmp.";

bool valid_kind(std::string_view kind) {
  if (kind.empty() || kind.size() > kMaxKind) return false;
  return std::all_of(kind.begin(), kind.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

bool is_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// "<32 hex>.<kind>": only files named like this are ever evicted, so a misconfigured
// KILN_CACHE_DIR cannot cost the user foreign files.
bool is_entry_name(std::string_view name) {
  return name.size() > 33 && is_hex(name.substr(0, 32)) && name[32] == '.' &&
         valid_kind(name.substr(33));
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(size_t(n));
  }
  return true;
}

// What a read of a cache file came to: every byte, an early end of the file (a truncated
// entry: corrupt), or an I/O error (the disk's problem, not the entry's: errno says which).
enum class Read { Ok, Short, Failed };

Read read_all_at(int fd, char* out, size_t size, off_t offset) {
  while (size > 0) {
    ssize_t n = ::pread(fd, out, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Read::Failed;
    if (n == 0) return Read::Short;
    out += n;
    size -= size_t(n);
    offset += n;
  }
  return Read::Ok;
}

// strerror's text, without strerror's shared buffer (threads compile concurrently).
std::string error_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// "a FIFO", "a directory", ...: what lies where an entry should be.
std::string file_type(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

// The one way the cache reports a problem: one line on stderr per kind of problem per process,
// since the cache is consulted once per kernel and one broken entry or unwritable directory
// would otherwise repeat for every kernel. (A diagnostics channel for the cache would route
// these lines here.)
std::mutex warn_mu;
std::set<std::string>& warned_kinds() {
  static auto* kinds = new std::set<std::string>;  // never destroyed: stores run during static teardown
  return *kinds;
}
void cache_warning(std::string_view kind, const std::string& message) {
  logs::emit(logs::Channel::Cache, std::string(kind) + ": " + message);  // (every time, where asked for)
  std::lock_guard<std::mutex> lock(warn_mu);
  if (!warned_kinds().insert(std::string(kind)).second) return;
  std::fprintf(stderr, "kiln: warning: [cache] %s\n", message.c_str());
}

// Closes a file descriptor on every way out, exceptions included.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Makes `dir` (its missing parents as the system makes directories) private to this user, or
// checks the one that is there: the entries are machine code the process loads and runs, so a
// directory another user owns, or that its group or others can write, would let them run code
// here. Returns whether the cache may use it; warns once when not.
bool private_directory(const std::string& dir) {
  std::error_code ec;
  fs::path parent = fs::path(dir).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);  // (a failure shows in the mkdir below)
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    const int err = errno;
    cache_warning("directory", "cannot create the kernel cache directory " + dir + " (" + error_text(err) +
                                   "); running without the disk cache");
    return false;
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    cache_warning("directory", "cannot use the kernel cache directory " + dir + " (" + error_text(err) +
                                   "); running without the disk cache");
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    cache_warning("directory", "the kernel cache directory " + dir + " is " + file_type(st.st_mode) +
                                   "; running without the disk cache");
    return false;
  }
  const char* why = nullptr;
  std::string owner;
  if (st.st_uid != ::geteuid()) {
    owner = "owned by user id " + std::to_string(st.st_uid) + ", not by this process's user (" +
            std::to_string(::geteuid()) + ")";
    why = owner.c_str();
  } else if (st.st_mode & S_IWOTH) {
    why = "writable by every user";
  } else if (st.st_mode & S_IWGRP) {
    why = "writable by its group";
  }
  if (why) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    cache_warning("untrusted", "the kernel cache directory " + dir + " is " + why + " (mode " + mode +
                                   "); its entries are machine code kiln runs, so whoever can write it could "
                                   "run code in this process: running without the disk cache (make it "
                                   "private, chmod 700, or set KILN_CACHE_DIR to a directory of your own)");
    return false;
  }
  return true;
}

// Unique among the threads and processes that may write one entry at the same moment: the
// pid tells processes apart (a forked child gets a new one), the thread id and the counter the
// calls within a process.
std::string temp_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  size_t tid = std::hash<std::thread::id>{}(std::this_thread::get_id());
  return path + std::string(kTempMarker) + std::to_string(::getpid()) + "." +
         std::to_string(tid) + "." + std::to_string(counter.fetch_add(1));
}
}  // namespace

// ---- configuration -----------------------------------------------------------------------

DiskCacheConfig DiskCacheConfig::from_env() {
  auto get = [](const char* name) -> std::string_view {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  DiskCacheConfig c;
  if (std::string_view d = get("KILN_CACHE_DIR"); !d.empty()) {
    c.dir = d;
  } else if (std::string_view x = get("XDG_CACHE_HOME"); !x.empty() && x[0] == '/') {
    c.dir = std::string(x) + "/kiln";  // the XDG spec says to ignore a relative XDG_CACHE_HOME
  } else if (std::string_view h = get("HOME"); !h.empty()) {
    c.dir = std::string(h) + "/.cache/kiln";
  } else {
    c.enabled = false;
  }
  if (std::string_view off = get("KILN_DISABLE_CACHE"); !off.empty() && off != "0")
    c.enabled = false;
  // Like the runtime's variables, a value that is not a number keeps the default.
  std::string_view mb = get("KILN_CACHE_MAX_MB");
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(mb.data(), mb.data() + mb.size(), v);
  if (!mb.empty() && ec == std::errc() && end == mb.data() + mb.size() && v < (1ull << 44)) {
    c.max_bytes = v << 20;
    if (v == 0) c.enabled = false;
  }
  return c;
}

DiskCache::DiskCache(DiskCacheConfig c) : max_bytes_(c.max_bytes) {
  if (c.dir.empty()) return;
  std::error_code ec;
  // Absolute, so a later chdir of the process does not move the cache.
  fs::path root = fs::absolute(fs::path(c.dir), ec);
  if (ec) return;
  std::string version = "v";  // (not "v" + to_string: GCC 12 warns falsely, -Wrestrict)
  version += std::to_string(kCacheFormatVersion);
  dir_ = (root / version).lexically_normal().string();
  if (!dir_.empty() && dir_.back() == '/') dir_.pop_back();
  if (!c.enabled || c.max_bytes == 0) return;
  // The root and the versioned directory are both checked: the root is what the user named,
  // and the versioned one is where the entries are.
  std::string root_dir = root.lexically_normal().string();
  if (root_dir.size() > 1 && root_dir.back() == '/') root_dir.pop_back();
  try {
    enabled_ = private_directory(root_dir) && private_directory(dir_);
  } catch (const std::exception&) {  // (only std::bad_alloc can be thrown here)
    enabled_ = false;
  }
}

void DiskCache::reset_warnings_for_testing() {
  std::lock_guard<std::mutex> lock(warn_mu);
  warned_kinds().clear();
}

DiskCache& DiskCache::global() {
  // Never destroyed: a backend may still compile (and store) during static teardown.
  static DiskCache* cache = new DiskCache(DiskCacheConfig::from_env());
  return *cache;
}

std::string DiskCache::entry_path(const CacheKey& key, std::string_view kind) const {
  std::string hex = key.hex();
  return dir_ + "/" + hex.substr(0, 2) + "/" + hex + "." + std::string(kind);
}

DiskCacheStats DiskCache::stats() const {
  DiskCacheStats s;
  s.hits = hits_.load();
  s.misses = misses_.load();
  s.stores = stores_.load();
  s.corrupt = corrupt_.load();
  s.evicted = evicted_.load();
  s.store_failures = store_failures_.load();
  return s;
}

// ---- load and store ----------------------------------------------------------------------

std::optional<std::string> DiskCache::load(const CacheKey& key, std::string_view kind) {
  if (!enabled_) return std::nullopt;
  if (!valid_kind(kind)) {
    ++misses_;
    return std::nullopt;
  }
  // Nothing may escape a compiled call but kiln::Error: the payload's size is bounded below, but
  // memory can still be short, and the entry is then a miss like any other.
  try {
    const std::string path = entry_path(key, kind);
    std::optional<std::string> entry = load_entry(path, key, kind);
    if (logs::enabled(logs::Channel::Cache))
      logs::emit(logs::Channel::Cache, std::string(entry ? "hit " : "miss ") + path);
    return entry;
  } catch (const std::exception& e) {
    ++misses_;
    try {
      cache_warning("memory", std::string("could not read a kernel cache entry (") + e.what() +
                                  "); ignored it, and the kernel is compiled instead");
    } catch (const std::exception&) {  // (no memory for the message either)
    }
    return std::nullopt;
  }
}

std::optional<std::string> DiskCache::load_entry(const std::string& path, const CacheKey& key,
                                                 std::string_view kind) {
  auto miss = [&]() -> std::optional<std::string> {
    ++misses_;
    return std::nullopt;
  };
  auto not_an_entry = [&](mode_t mode) {
    cache_warning("not-a-file", path + " is " + file_type(mode) +
                                    ", not a cache entry; ignored it (the next store of this kernel replaces it)");
    return miss();
  };
  // Looked at before it is opened: opening a FIFO for reading waits for a writer (and the
  // caller holds its backend's cache lock, so every compiling thread would wait with it); a
  // device may do anything on open; a link may point out of the cache.
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) != 0) {
    const int err = errno;
    if (err != ENOENT && err != ENOTDIR)
      cache_warning("unreadable", "cannot read " + path + " (" + error_text(err) + "); ignored it");
    return miss();  // absent (the common miss), or unreadable: nothing to repair either way
  }
  if (!S_ISREG(lst.st_mode)) return not_an_entry(lst.st_mode);
  // The name may be swapped between the lstat and the open: O_NONBLOCK makes an open of a FIFO
  // return at once and O_NOFOLLOW refuses a link, and fstat checks what was opened.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) return not_an_entry(S_IFLNK);
    if (err != ENOENT) cache_warning("unreadable", "cannot open " + path + " (" + error_text(err) + "); ignored it");
    return miss();
  }
  Fd closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return not_an_entry(st.st_mode);
  auto discard = [&](const std::string& kind_of_problem, const std::string& what) -> std::optional<std::string> {
    // Delete the file only if it is still the one we read: another writer may have renamed a
    // good entry over it meanwhile.
    struct stat now {};
    if (::lstat(path.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev)
      ::unlink(path.c_str());
    ++corrupt_;
    cache_warning(kind_of_problem, path + " " + what + "; removed it, and the next compile of this kernel rewrites it");
    return miss();
  };
  auto read_failed = [&]() -> std::optional<std::string> {
    const int err = errno;
    cache_warning("unreadable", "cannot read " + path + " (" + error_text(err) + "); ignored it");
    return miss();
  };

  // Every read below is bounded by the file's real size, and the payload's also by the cap
  // (store never writes an entry larger) and the format's limit, checked before anything is
  // allocated: a header may claim any length.
  const uint64_t file_size = uint64_t(st.st_size);
  const uint64_t fixed = kHeaderSize + kind.size();
  if (file_size < fixed) return discard("corrupt", "is corrupt (truncated to " + std::to_string(file_size) + " bytes)");
  char h[kHeaderSize];
  if (Read r = read_all_at(fd, h, kHeaderSize, 0); r != Read::Ok)
    return r == Read::Failed ? read_failed() : discard("corrupt", "is corrupt (truncated)");
  if (std::memcmp(h, kMagic, 8) != 0 || load_le32(h + 8) != kCacheFormatVersion || load_le32(h + 12) != kind.size() ||
      load_le64(h + 16) != key.hi || load_le64(h + 24) != key.lo)
    return discard("corrupt", "is corrupt (its header is not this entry's)");
  const uint64_t payload_len = load_le64(h + 32);
  const uint64_t most = std::min(max_bytes_, kMaxCacheEntryBytes);
  if (fixed > most || payload_len > most - fixed)
    return discard("oversized", "claims a payload of " + std::to_string(payload_len) +
                                    " bytes, more than the cache holds (at most " + std::to_string(most) +
                                    " bytes an entry); not read");
  if (payload_len != file_size - fixed)
    return discard("corrupt", "is corrupt (its header claims " + std::to_string(payload_len) +
                                  " bytes of payload, the file holds " + std::to_string(file_size - fixed) + ")");

  char stored_kind[kMaxKind];
  if (Read r = read_all_at(fd, stored_kind, kind.size(), kHeaderSize); r != Read::Ok)
    return r == Read::Failed ? read_failed() : discard("corrupt", "is corrupt (truncated)");
  if (std::string_view(stored_kind, kind.size()) != kind) return discard("corrupt", "is corrupt (another kind of entry)");
  std::string payload(payload_len, '\0');
  if (Read r = read_all_at(fd, payload.data(), payload.size(), off_t(fixed)); r != Read::Ok)
    return r == Read::Failed ? read_failed() : discard("corrupt", "is corrupt (truncated)");
  if (checksum64(payload) != load_le64(h + 40)) return discard("corrupt", "is corrupt (checksum mismatch)");

  ::futimens(fd, nullptr);  // a hit makes the entry young again: eviction is LRU, not FIFO
  ++hits_;
  return payload;
}

void DiskCache::store(const CacheKey& key, std::string_view kind, std::string_view payload) {
  if (!enabled_) return;
  if (!valid_kind(kind)) {
    ++store_failures_;
    return;
  }
  try {
    store_entry(key, kind, payload);
  } catch (const std::exception& e) {  // (only std::bad_alloc: the header and the names are built in memory)
    ++store_failures_;
    try {
      cache_warning("store", std::string("could not write a kernel cache entry (") + e.what() + ")");
    } catch (const std::exception&) {  // (no memory for the message either)
    }
  }
}

void DiskCache::store_entry(const CacheKey& key, std::string_view kind, std::string_view payload) {
  std::string header(kMagic, 8);
  put_le32(header, kCacheFormatVersion);
  put_le32(header, uint32_t(kind.size()));
  put_le64(header, key.hi);
  put_le64(header, key.lo);
  put_le64(header, payload.size());
  put_le64(header, checksum64(payload));
  header.append(kind);
  uint64_t entry_bytes = header.size() + payload.size();
  const uint64_t most = std::min(max_bytes_, kMaxCacheEntryBytes);
  if (entry_bytes > most) {  // over the cap it would evict everything, itself included
    cache_warning("too-large", "a " + std::string(kind) + " entry of " + std::to_string(entry_bytes) +
                                   " bytes is larger than the kernel cache holds (at most " + std::to_string(most) +
                                   " bytes an entry; KILN_CACHE_MAX_MB); not written, so every process compiles it");
    ++store_failures_;
    return;
  }

  std::string path = entry_path(key, kind);
  auto failed = [&](const std::string& what, int err) {
    cache_warning("store", "cannot write the kernel cache entry " + path + ": " + what + " (" + error_text(err) +
                               "); the kernel is compiled again by the next process");
    ++store_failures_;
  };
  // The shard directories are private like the cache's own (the versioned directory is made
  // again if it was removed while the process ran).
  std::string shard = path.substr(0, path.rfind('/'));
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
    const int err = errno;
    return failed("cannot create " + dir_, err);
  }
  if (::mkdir(shard.c_str(), 0700) != 0 && errno != EEXIST) {
    const int err = errno;
    return failed("cannot create " + shard, err);
  }
  std::string tmp;
  int fd = -1;
  // O_EXCL: never write into another writer's file (nor through a link planted at the name). A
  // name can only be taken by a crashed process of the same pid (its leftovers are removed
  // after an hour), so retry a few times.
  for (int attempt = 0; fd < 0 && attempt < 3; ++attempt) {
    tmp = temp_name(path);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    const int err = errno;
    return failed("cannot create " + tmp, err);
  }
  bool ok = write_all(fd, header) && write_all(fd, payload);
  int err = ok ? 0 : errno;
  if (::close(fd) != 0 && ok) {  // close reports delayed write errors (NFS, quota)
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return failed("writing " + tmp + " failed", err ? err : EIO);
  }
  // rename() replaces the final name atomically: readers see the old entry or the new one. It
  // also replaces whatever else was there (a FIFO, a link), except a directory.
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    return failed("cannot rename " + tmp + " over it", err);
  }
  ++stores_;
  enforce_cap(entry_bytes);
}

// ---- the size cap ------------------------------------------------------------------------

void DiskCache::enforce_cap(uint64_t added_bytes) {
  std::lock_guard<std::mutex> lock(size_mu_);
  // Scanning stats every file, so it happens once per process and then only when the
  // estimate says the cap is reached. Other processes' stores are not in the estimate: across
  // processes the cap is enforced at each process's next scan.
  if (scanned_ && size_estimate_ + added_bytes <= max_bytes_) {
    size_estimate_ += added_bytes;
    return;
  }
  evict_locked();
}

void DiskCache::evict_locked() {
  struct Item {
    fs::file_time_type mtime;
    uint64_t size;
    std::string path;
  };
  std::vector<Item> items;
  uint64_t total = 0;
  auto now = fs::file_time_type::clock::now();
  std::error_code ec;
  for (fs::directory_iterator shard(dir_, ec), end; !ec && shard != end; shard.increment(ec)) {
    std::string sname = shard->path().filename().string();
    if (sname.size() != 2 || !is_hex(sname)) continue;
    std::error_code fec;
    for (fs::directory_iterator f(shard->path(), fec); !fec && f != end; f.increment(fec)) {
      std::string name = f->path().filename().string();
      std::error_code sec;
      auto mtime = f->last_write_time(sec);
      uint64_t size = sec ? 0 : f->file_size(sec);
      if (sec) continue;  // gone meanwhile (another process evicted it)
      if (name.find(kTempMarker) != std::string::npos) {
        // A writer that crashed between open and rename left this; a live one is done in far
        // less than an hour.
        if (now - mtime > std::chrono::hours(1)) fs::remove(f->path(), sec);
        continue;
      }
      if (!is_entry_name(name)) continue;
      items.push_back({mtime, size, f->path().string()});
      total += size;
    }
  }
  if (total > max_bytes_) {
    // Down to 90% of the cap, so the next stores do not each trigger a scan.
    uint64_t target = max_bytes_ - max_bytes_ / 10;
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
      return a.mtime != b.mtime ? a.mtime < b.mtime : a.path < b.path;
    });
    for (const Item& it : items) {
      if (total <= target) break;
      std::error_code rec;
      if (fs::remove(it.path, rec)) ++evicted_;
      total -= it.size;  // gone either way: removed here or by another process
    }
  }
  size_estimate_ = total;
  scanned_ = true;
}

void DiskCache::clear() {
  if (dir_.empty()) return;
  std::lock_guard<std::mutex> lock(size_mu_);
  std::error_code ec;
  // Only the shard directories: whatever else lies in dir() is not ours.
  for (fs::directory_iterator shard(dir_, ec), end; !ec && shard != end; shard.increment(ec)) {
    std::string name = shard->path().filename().string();
    std::error_code rec;
    if (name.size() == 2 && is_hex(name)) fs::remove_all(shard->path(), rec);
  }
  scanned_ = false;
  size_estimate_ = 0;
}

}  // namespace kiln::codegen
