// kiln-bench's measurements: the interleaved timing loop, the output check, the STREAM copy,
// the machine's description and the compile times measured in child processes.
#include <fcntl.h>
#include <omp.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <kiln/runtime/cuda.h>

#include "bench.h"

extern char** environ;

namespace kiln::bench {

// ---------------------------------------------------------------- timing

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool ProgramArgs::wanted(const std::string& name) const {
  return names.empty() || std::find(names.begin(), names.end(), name) != names.end();
}

int parse_program_args(int argc, char** argv, const char* tool,
                       const std::vector<std::pair<std::string, std::string>>& known, ProgramArgs& args) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--list") {
      for (const auto& [name, what] : known) std::printf("%-16s %s\n", name.c_str(), what.c_str());
      return 0;
    }
    if (a == "--reps" && i + 1 < argc) {
      args.reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--explain") {
      args.explain = true;
    } else if (std::none_of(known.begin(), known.end(), [&](const auto& k) { return k.first == a; })) {
      std::fprintf(stderr, "%s: no program '%s' (--list names them)\n", tool, a.c_str());
      return 2;
    } else {
      args.names.push_back(a);
    }
  }
  return -1;
}

double median_ms(const std::function<void()>& f, int reps) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  return median(std::move(t));
}

namespace {

using Clock = std::chrono::steady_clock;

double call_once(Timed& t) {
  const int call = t.calls++;
  if (t.before) t.before(call);
  auto t0 = Clock::now();
  t.run(call);
  auto t1 = Clock::now();
  t.drop();  // the result is freed after the clock stopped
  return std::chrono::duration<double>(t1 - t0).count();
}

}  // namespace

void time_interleaved(std::vector<Timed*> variants, const RepPolicy& policy) {
  const size_t n = variants.size();
  for (int w = 0; w < policy.warmup; ++w)
    for (Timed* t : variants) call_once(*t);
  std::vector<double> total(n, 0.0);
  auto satisfied = [&](size_t i) {
    const int reps = int(variants[i]->seconds.size());
    return reps >= policy.max_reps || (reps >= policy.reps && total[i] >= policy.min_time);
  };
  for (size_t round = 0;; ++round) {
    bool any = false;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (round + k) % n;  // the order rotates from round to round
      if (satisfied(i)) continue;
      any = true;
      double s = call_once(*variants[i]);
      variants[i]->seconds.push_back(s);
      total[i] += s;
    }
    if (!any) break;
  }
}

// ---------------------------------------------------------------- checks

Tolerance tolerance_for(DType dt, bool loose) {
  switch (dt) {
    case DType::Float64: return loose ? Tolerance{1e-8, 1e-11} : Tolerance{1e-9, 1e-12};
    case DType::Float32: return loose ? Tolerance{1e-3, 1e-4} : Tolerance{1e-4, 1e-5};
    case DType::Float16:
    case DType::BFloat16: return Tolerance{2e-2, 1e-2};
    default: return Tolerance{0, 0};
  }
}

namespace {

std::string shape_str(const Tensor& t) {
  std::string s = std::string(name(t.dtype())) + "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

CheckResult compare_one(const Tensor& want, const Tensor& got, bool loose) {
  if (got.dtype() != want.dtype() || got.sizes().vec() != want.sizes().vec())
    return {false, "expected " + shape_str(want) + ", got " + shape_str(got)};
  if (!is_floating(want.dtype())) {
    std::vector<int64_t> a = got.to_vector<int64_t>(), b = want.to_vector<int64_t>();
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i])
        return {false, "element " + std::to_string(i) + ": " + std::to_string(a[i]) + " != " + std::to_string(b[i]) +
                           " (exact match expected)"};
    return {};
  }
  std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  double scale = 0;
  for (double v : b)
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  const Tolerance tol = tolerance_for(want.dtype(), loose);
  double max_abs = 0, max_rel = 0;
  size_t worst = 0, bad = 0;
  bool nan_mismatch = false, inf_mismatch = false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      if (std::isnan(a[i]) != std::isnan(b[i])) nan_mismatch = true, ++bad, worst = i;
      continue;
    }
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) inf_mismatch = true, ++bad, worst = i;
      continue;
    }
    double d = std::fabs(a[i] - b[i]);
    if (d > tol.atol * scale + tol.rtol * std::fabs(b[i])) {
      ++bad;
      if (d > max_abs) worst = i;
    }
    max_abs = std::max(max_abs, d);
    if (b[i] != 0) max_rel = std::max(max_rel, d / std::fabs(b[i]));
  }
  if (!bad) return {};
  std::string msg = std::to_string(bad) + " of " + std::to_string(a.size()) + " elements differ";
  if (nan_mismatch) msg += " (NaN in different places)";
  if (inf_mismatch) msg += " (infinities differ)";
  msg += "; max abs err " + fmt(max_abs) + ", max rel err " + fmt(max_rel) + " (rtol " + fmt(tol.rtol) + ", atol " +
         fmt(tol.atol) + " x max|ref| " + fmt(scale) + "); worst at element " + std::to_string(worst) + ": " +
         fmt(a[worst]) + " vs " + fmt(b[worst]);
  return {false, msg};
}

}  // namespace

CheckResult compare_outputs(const std::vector<Tensor>& want, const std::vector<Tensor>& got, bool loose) {
  if (want.size() != got.size())
    return {false, "expected " + std::to_string(want.size()) + " outputs, got " + std::to_string(got.size())};
  for (size_t i = 0; i < want.size(); ++i) {
    CheckResult r = compare_one(want[i], got[i], loose);
    if (!r.ok) return {false, "output " + std::to_string(i) + ": " + r.message};
  }
  return {};
}

// ---------------------------------------------------------------- the machine

double cuda_copy_gbps(size_t bytes, int reps) {
  // The GPU's STREAM-like copy: device to device, bytes read + written per second.
  void* a = cuda::allocate(bytes);
  void* b = cuda::allocate(bytes);
  cuda::fill_bytes(a, 1, bytes);
  cuda::copy_on_device(b, a, bytes);
  cuda::copy_on_device(b, a, bytes);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    cuda::Event start, stop;
    start.record();
    cuda::copy_on_device(b, a, bytes);
    stop.record();
    stop.synchronize();
    t.push_back(start.elapsed_ms(stop) / 1e3);
  }
  cuda::release(a, bytes);
  cuda::release(b, bytes);
  return 2.0 * double(bytes) / median(t) / 1e9;
}

double stream_copy_gbps(int threads, int reps) {
  const int64_t n = int64_t(32) << 20;  // 32 Mi floats: 128 MiB per array, 256 MiB in all
  const size_t bytes = size_t(n) * sizeof(float);
  const size_t align = size_t(2) << 20;
  float* a = static_cast<float*>(std::aligned_alloc(align, bytes));
  float* b = static_cast<float*>(std::aligned_alloc(align, bytes));
  KILN_CHECK(a && b, "bench", "cannot allocate the STREAM arrays");
  madvise(a, bytes, MADV_HUGEPAGE);  // as kiln's allocator does for large blocks
  madvise(b, bytes, MADV_HUGEPAGE);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) {  // first touch by the threads that copy
    a[i] = float(i & 1023);
    b[i] = 0.0f;
  }
  auto copy = [&] {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) b[i] = a[i];
  };
  copy();
  copy();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    copy();
    auto t1 = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  volatile float sink = b[n / 3];  // keep the copies observable
  (void)sink;
  std::free(a);
  std::free(b);
  return 2.0 * double(bytes) / median(t) / 1e9;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "unknown";
}

std::string malloc_name() {
  const char* pre = std::getenv("LD_PRELOAD");
  const char* conf = std::getenv("MALLOC_CONF");
  std::string p = pre ? pre : "";
  for (const char* lib : {"jemalloc", "tcmalloc", "mimalloc"})
    if (p.find(lib) != std::string::npos) {
      std::string s = lib;
      if (std::string(lib) == "jemalloc" && conf && *conf) s += " (MALLOC_CONF=" + std::string(conf) + ")";
      return s + " (LD_PRELOAD)";
    }
  return p.empty() ? "glibc malloc" : "LD_PRELOAD=" + p;
}

// ---------------------------------------------------------------- compile time

namespace {

// Runs this executable with `args` and `env`; returns its stdout, or nullopt (and `error`) when
// it could not start or did not exit with status 0. Its stderr goes to ours.
std::optional<std::string> run_self(const std::vector<std::string>& args, const std::vector<std::string>& env,
                                    std::string& error) {
  std::vector<char*> argv, envp;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    error = std::string("pipe: ") + std::strerror(errno);
    return std::nullopt;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    error = std::string("cannot start /proc/self/exe: ") + std::strerror(rc);
    return std::nullopt;
  }
  std::string out;
  char buf[4096];
  for (ssize_t got; (got = read(fds[0], buf, sizeof buf)) != 0;) {
    if (got < 0) {
      if (errno == EINTR) continue;
      break;
    }
    out.append(buf, size_t(got));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    error = WIFEXITED(status) ? "the child exited with status " + std::to_string(WEXITSTATUS(status))
                              : "the child died of signal " + std::to_string(WTERMSIG(status));
    return std::nullopt;
  }
  return out;
}

// The value of the child's line "KEY X".
std::optional<double> parse_child_line(const std::string& out, const std::string& key, std::string& error) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.size() > key.size() && line.rfind(key + " ", 0) == 0) return std::atof(line.c_str() + key.size() + 1);
  error = "the child printed no " + key + " line";
  return std::nullopt;
}

}  // namespace

CompileTimes measure_compile_times(const std::string& workload, const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  static int counter = 0;
  constexpr int kPairs = 3;
  CompileTimes ct;
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "KILN_CACHE_DIR=", 15) != 0) env.emplace_back(*e);
  std::vector<std::string> argv = {"kiln-bench", "--first-call", workload};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<double> cold, warm, cold_over, warm_over;
  for (int pair = 0; pair < kPairs && ct.error.empty(); ++pair) {
    std::error_code ec;
    fs::path dir = fs::temp_directory_path(ec) /
                   ("kiln-bench-cache-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(dir, ec);
    if (!fs::create_directories(dir, ec)) {
      ct.error = "cannot create " + dir.string() + ": " + ec.message();
      break;
    }
    std::vector<std::string> with_dir = env;
    with_dir.push_back("KILN_CACHE_DIR=" + dir.string());
    for (int pass = 0; pass < 2 && ct.error.empty(); ++pass) {
      std::optional<std::string> out = run_self(argv, with_dir, ct.error);
      std::optional<double> ms = out ? parse_child_line(*out, "first_call_ms", ct.error) : std::nullopt;
      std::optional<double> eager = ms ? parse_child_line(*out, "eager_ms", ct.error) : std::nullopt;
      if (eager) {
        (pass == 0 ? cold : warm).push_back(*ms);
        (pass == 0 ? cold_over : warm_over).push_back(*ms - *eager);
      }
    }
    fs::remove_all(dir, ec);
  }
  if (!cold.empty()) ct.cold_ms = median(cold);
  if (!warm.empty()) ct.warm_ms = median(warm);
  if (!cold_over.empty()) ct.cold_over_eager_ms = median(cold_over);
  if (!warm_over.empty()) ct.warm_over_eager_ms = median(warm_over);
  return ct;
}

}  // namespace kiln::bench
