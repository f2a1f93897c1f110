// The kernel cache through the CPU backend, across processes: compiling writes entries named
// by their keys, a new process loads them instead of compiling, corrupt entries are
// recompiled and rewritten, KILN_DISABLE_CACHE writes nothing, and two processes compiling
// into one directory at once leave valid entries.
//
// DiskCache::global() is configured once per process from the environment, and a process
// that has started the LLVM JIT (or OpenMP's threads) must not fork and go on compiling. So
// every test sets KILN_CACHE_DIR to a fresh directory and does all its compiling in child
// processes: this binary re-executed (/proc/self/exe) with KILN_CPU_CACHE_TEST_CHILD set, which
// a static initializer below sees before main() (and before gtest) and answers by compiling
// and running a fixed set of functions, checking them against eager, printing what the
// backend reported, and exiting with a status the parent checks. The parent only looks at
// files (and reads entries with a DiskCache of its own, which compiles nothing).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <kiln/codegen/cache.h>
#include <kiln/kiln.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_diff.h"

extern char** environ;

namespace fs = std::filesystem;
using namespace kiln;
using namespace kiln::cputest;

namespace {

constexpr const char* kRoleVar = "KILN_CPU_CACHE_TEST_CHILD";      // set: act as the child
constexpr const char* kExpectVar = "KILN_CPU_CACHE_TEST_EXPECT";   // compiled | disk | any
constexpr const char* kCorruptVar = "KILN_CPU_CACHE_TEST_CORRUPT";  // 1: expect corrupt entries

// Child exit statuses.
constexpr int kOk = 0, kWrongValues = 2, kWrongSource = 3, kNoCorruption = 4, kThrew = 5;

// ---- the child ----

// The functions every child compiles: an elementwise kernel, a row-wise one, a reduction and a
// cast, each one kernel, all distinct (so no kernel is a memory hit of another).
struct Workload {
  std::string name;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  std::function<std::vector<Tensor>(int call)> inputs;
};

std::vector<Workload> workloads() {
  using V = std::vector<Tensor>;
  return {
      {"elementwise", [](const V& in) { return (exp(in[0]) * in[1] + 1).relu(); },
       [](int c) { return V{make(kFloat32, {64, 33}, Layout::Contiguous, 11 + c), make(kFloat32, {64, 33}, Layout::Contiguous, 17 + c)}; }},
      {"softmax", [](const V& in) { return in[0].softmax(-1); },
       [](int c) { return V{make(kFloat32, {16, 100}, Layout::Contiguous, 23 + c, Values::Any, Specials::None)}; }},
      {"sum", [](const V& in) { return in[0].sum({0}); },
       [](int c) { return V{make(kFloat64, {33, 17}, Layout::Contiguous, 29 + c, Values::Any, Specials::None)}; }},
      {"cast_tanh", [](const V& in) { return (in[0].to(kFloat32) * 0.5).tanh(); },
       [](int c) { return V{make(kInt32, {1000}, Layout::Contiguous, 31 + c)}; }},
  };
}

// Compiles and runs the workloads (three calls each: the trace and two replays, each against
// eager), prints what the backend reported and the disk cache's statistics, and returns an
// exit status: kOk, or what went wrong.
int child_main() {
  std::string expect = std::getenv(kExpectVar) ? std::getenv(kExpectVar) : "any";
  bool want_corrupt = std::getenv(kCorruptVar) != nullptr;
  int status = kOk;
  int kernels = 0, compiled = 0, memory = 0, disk = 0;
  try {
    for (const Workload& w : workloads()) {
      auto f = compile([fn = w.fn](const std::vector<Tensor>& in) { return fn(in); }, cpu_options());
      for (int c = 0; c < 3; ++c) {
        Tensor got = f(w.inputs(c));
        Tensor want = w.fn(w.inputs(c));
        if (!close_to(got, want, {})) {
          std::printf("mismatch: %s call %d\n", w.name.c_str(), c);
          status = kWrongValues;
        }
      }
      for (const auto& g : f.explain(w.inputs(0)).graphs) {
        std::printf("graph %s: %s\n", w.name.c_str(), g.backend.c_str());
        std::optional<KernelCount> k = parse_backend(g.backend);
        if (!k) {
          status = status ? status : kWrongSource;
          continue;
        }
        kernels += k->kernels;
        compiled += k->compiled;
        memory += k->memory;
        disk += k->disk;
        bool ok = k->compiled == k->kernels &&
                  (expect == "disk" ? k->disk == k->kernels : expect == "compiled" ? k->disk == 0 && k->memory == 0 : true);
        if (!ok && !status) status = kWrongSource;
      }
    }
  } catch (const std::exception& e) {
    std::printf("threw: %s\n", e.what());
    return kThrew;
  }
  codegen::DiskCacheStats s = codegen::DiskCache::global().stats();
  std::printf("totals kernels=%d compiled=%d memory=%d disk=%d\n", kernels, compiled, memory, disk);
  std::printf("disk hits=%llu misses=%llu stores=%llu corrupt=%llu store_failures=%llu enabled=%d\n",
              (unsigned long long)s.hits, (unsigned long long)s.misses, (unsigned long long)s.stores,
              (unsigned long long)s.corrupt, (unsigned long long)s.store_failures,
              int(codegen::DiskCache::global().enabled()));
  if (want_corrupt && s.corrupt == 0 && !status) status = kNoCorruption;
  return status;
}

// Runs before main() in every process of this binary; only a child (kRoleVar set) acts.
[[maybe_unused]] const int child_hook = [] {
  if (!std::getenv(kRoleVar)) return 0;
  int status = child_main();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(status);
}();

// ---- the parent ----

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("kiln-cpu-cache-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
    // Private whatever the umask: the cache refuses a directory others can write.
    fs::permissions(path_, fs::perms::owner_all);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct Child {
  pid_t pid = -1;
  std::string out_path;
};
struct ChildResult {
  int status = -1;  // exit status, or 128 + signal
  std::string out;  // stdout and stderr
  // "totals" and "disk" lines, parsed
  std::map<std::string, long long> numbers;
};

// Starts this binary as a child with `env` set on top of the current environment (an empty
// value unsets the variable). Its output goes to `out_path`.
Child spawn_child(const std::map<std::string, std::string>& env, const std::string& out_path) {
  std::vector<std::string> vars;
  for (char** e = environ; *e; ++e) {
    std::string v = *e;
    std::string name = v.substr(0, v.find('='));
    if (!env.count(name)) vars.push_back(v);
  }
  for (const auto& [k, v] : env)
    if (!v.empty()) vars.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=-*";  // (the child exits before main; run nothing if not)
  char* argv[] = {exe.data(), filter.data(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  Child c;
  c.out_path = out_path;
  int rc = posix_spawn(&c.pid, exe.c_str(), &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) c.pid = -1;
  return c;
}

ChildResult wait_child(const Child& c) {
  ChildResult r;
  if (c.pid < 0) {
    r.out = "could not start the child";
    return r;
  }
  int st = 0;
  while (::waitpid(c.pid, &st, 0) < 0 && errno == EINTR) {
  }
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  std::ifstream in(c.out_path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.out = ss.str();
  static const std::regex kv(R"((\w+)=(\d+))");
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("totals ", 0) != 0 && line.rfind("disk ", 0) != 0) continue;
    for (std::sregex_iterator it(line.begin(), line.end(), kv), end; it != end; ++it)
      r.numbers[(*it)[1]] = std::stoll((*it)[2]);
  }
  return r;
}

class CpuCache : public ::testing::Test {
 protected:
  void SetUp() override {
    // Before anything compiles (nothing compiles in this process; the children inherit it).
    for (const char* v : {"KILN_CACHE_DIR", "KILN_DISABLE_CACHE"})
      if (const char* old = std::getenv(v)) saved_[v] = old;
    ::setenv("KILN_CACHE_DIR", cache_.str().c_str(), 1);
    ::unsetenv("KILN_DISABLE_CACHE");
  }
  // The environment as it was: later tests' child processes (death tests) must not inherit a
  // directory this test removes.
  void TearDown() override {
    for (const char* v : {"KILN_CACHE_DIR", "KILN_DISABLE_CACHE"}) {
      if (saved_.count(v))
        ::setenv(v, saved_[v].c_str(), 1);
      else
        ::unsetenv(v);
    }
  }

  // Runs one child to completion.
  ChildResult run(const std::string& expect, std::map<std::string, std::string> env = {}) {
    env[kRoleVar] = "1";
    env[kExpectVar] = expect;
    return wait_child(spawn_child(env, (logs_.path() / ("child" + std::to_string(n_++) + ".out")).string()));
  }
  Child start(const std::string& expect) {
    return spawn_child({{kRoleVar, "1"}, {kExpectVar, expect}},
                       (logs_.path() / ("child" + std::to_string(n_++) + ".out")).string());
  }

  // Every entry file under the versioned directory (and anything else found there).
  struct Listing {
    std::vector<fs::path> entries;  // <32 hex>.cpu-obj in their shard
    std::vector<fs::path> other;    // temp files, misnamed files
  };
  Listing list() const {
    Listing l;
    fs::path root = cache_.path() / ("v" + std::to_string(codegen::kCacheFormatVersion));
    if (!fs::exists(root)) return l;
    static const std::regex name(R"([0-9a-f]{32}\.cpu-obj)");
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (!e.is_regular_file()) continue;
      std::string file = e.path().filename().string();
      std::string shard = e.path().parent_path().filename().string();
      bool ok = std::regex_match(file, name) && e.path().parent_path().parent_path() == root &&
                shard == file.substr(0, 2);
      (ok ? l.entries : l.other).push_back(e.path());
    }
    return l;
  }

  // Whether every entry loads (magic, version, key, length and checksum all check out), read
  // through a DiskCache of this process's own (it compiles nothing).
  ::testing::AssertionResult all_valid(const Listing& l) const {
    codegen::DiskCacheConfig cfg;
    cfg.dir = cache_.str();
    codegen::DiskCache disk(cfg);
    for (const fs::path& p : l.entries) {
      std::string hex = p.filename().string().substr(0, 32);
      codegen::CacheKey key{std::stoull(hex.substr(0, 16), nullptr, 16), std::stoull(hex.substr(16), nullptr, 16)};
      if (key.hex() != hex) return ::testing::AssertionFailure() << "key round trip " << hex;
      std::optional<std::string> payload = disk.load(key, "cpu-obj");
      if (!payload || payload->empty()) return ::testing::AssertionFailure() << "entry does not load: " << p;
    }
    return ::testing::AssertionSuccess();
  }

  TempDir cache_, logs_;
  int n_ = 0;
  std::map<std::string, std::string> saved_;
};

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// (a) Compiling writes one entry per kernel, named <32 hex>.cpu-obj in a shard named by the
// key's first two hex digits, and nothing else (no temp files left behind).
TEST_F(CpuCache, CompilingWritesEntriesNamedByTheirKeys) {
  ChildResult r = run("compiled");
  ASSERT_EQ(r.status, kOk) << r.out;
  Listing l = list();
  EXPECT_TRUE(l.other.empty()) << "unexpected file " << (l.other.empty() ? "" : l.other[0].string());
  ASSERT_GT(r.numbers["compiled"], 0) << r.out;
  EXPECT_EQ(int64_t(l.entries.size()), r.numbers["compiled"]) << "one entry per compiled kernel\n" << r.out;
  EXPECT_EQ(r.numbers["stores"], r.numbers["compiled"]) << r.out;
  EXPECT_EQ(r.numbers["store_failures"], 0) << r.out;
  EXPECT_TRUE(all_valid(l));
}

// (b) A second process compiling the same functions loads every kernel from the disk:
// "cpu: 1 of 1 kernels compiled (0 from memory, 1 from disk)".
TEST_F(CpuCache, ANewProcessLoadsKernelsFromDisk) {
  ChildResult first = run("compiled");
  ASSERT_EQ(first.status, kOk) << first.out;
  ChildResult second = run("disk");
  EXPECT_EQ(second.status, kOk) << "expected every kernel from disk:\n" << second.out;
  EXPECT_EQ(second.numbers["disk"], first.numbers["compiled"]) << second.out;
  EXPECT_EQ(second.numbers["stores"], 0) << second.out;
  EXPECT_NE(second.out.find("1 of 1 kernels compiled (0 from memory, 1 from disk)"), std::string::npos) << second.out;
}

// (c) Corrupt entries (bytes flipped in the payload or the header, truncated, emptied) are
// detected, counted, recompiled and rewritten; results stay correct; a later process loads
// the rewritten entries.
TEST_F(CpuCache, CorruptEntriesAreRecompiledAndRewritten) {
  ChildResult first = run("compiled");
  ASSERT_EQ(first.status, kOk) << first.out;
  Listing before = list();
  ASSERT_FALSE(before.entries.empty());
  std::map<fs::path, std::string> corrupted;
  int i = 0;
  for (const fs::path& p : before.entries) {
    std::string b = bytes_of(p);
    switch (i++ % 4) {
      case 0: b[b.size() / 2] = char(b[b.size() / 2] ^ 0x5a); break;  // payload
      case 1: b[3] = char(b[3] ^ 0x01); break;                         // magic
      case 2: b.resize(b.size() / 2); break;                           // truncated
      default: b.clear(); break;                                       // empty
    }
    std::ofstream(p, std::ios::binary | std::ios::trunc) << b;
    corrupted[p] = b;
  }
  ChildResult second = wait_child(spawn_child({{kRoleVar, "1"}, {kExpectVar, "compiled"}, {kCorruptVar, "1"}},
                                              (logs_.path() / "corrupt.out").string()));
  EXPECT_EQ(second.status, kOk) << "expected correct results, every kernel compiled again and corrupt > 0:\n"
                                << second.out;
  EXPECT_EQ(second.numbers["corrupt"], int64_t(before.entries.size())) << second.out;
  Listing after = list();
  EXPECT_EQ(after.entries.size(), before.entries.size());
  for (const fs::path& p : before.entries) {
    ASSERT_TRUE(fs::exists(p)) << p << " was not rewritten";
    EXPECT_NE(bytes_of(p), corrupted[p]) << p << " still holds the corrupted bytes";
  }
  EXPECT_TRUE(all_valid(after));
  ChildResult third = run("disk");
  EXPECT_EQ(third.status, kOk) << third.out;
}

// (d) KILN_DISABLE_CACHE=1: nothing is read or written, and the results are right.
TEST_F(CpuCache, DisabledCacheWritesNothing) {
  ChildResult r = run("compiled", {{"KILN_DISABLE_CACHE", "1"}});
  EXPECT_EQ(r.status, kOk) << r.out;
  EXPECT_EQ(r.numbers["enabled"], 0) << r.out;
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(cache_.path()))
    if (!e.is_directory()) files.push_back(e.path());
  EXPECT_TRUE(files.empty()) << "wrote " << files.size() << " files, e.g. " << (files.empty() ? "" : files[0].string());
  // and a second disabled process compiles again
  ChildResult again = run("compiled", {{"KILN_DISABLE_CACHE", "1"}});
  EXPECT_EQ(again.status, kOk) << again.out;
}

// (e) Two processes compiling the same kernels into one directory at once: both correct, the
// entries valid and complete afterwards, no temp files left; a third process loads them all.
TEST_F(CpuCache, ConcurrentProcessesLeaveValidEntries) {
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    if (round > 0) fs::remove_all(cache_.path() / ("v" + std::to_string(codegen::kCacheFormatVersion)));
    Child a = start("any"), b = start("any");
    ChildResult ra = wait_child(a), rb = wait_child(b);
    EXPECT_EQ(ra.status, kOk) << ra.out;
    EXPECT_EQ(rb.status, kOk) << rb.out;
    Listing l = list();
    EXPECT_TRUE(l.other.empty()) << "left behind: " << (l.other.empty() ? "" : l.other[0].string());
    EXPECT_EQ(int64_t(l.entries.size()), ra.numbers["compiled"]) << ra.out;
    EXPECT_TRUE(all_valid(l));
    ChildResult third = run("disk");
    EXPECT_EQ(third.status, kOk) << third.out;
  }
}

}  // namespace
