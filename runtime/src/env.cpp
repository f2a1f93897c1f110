#include "kiln/runtime/env.h"

#include <omp.h>
#include <strings.h>

#include <cstdlib>
#include <string>

#include "kiln/runtime/error.h"

namespace kiln::env {
namespace {
long long read_int(const char* name, long long fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  try {
    return std::stoll(v);
  } catch (...) {
    return fallback;
  }
}
// A tuning variable's value: the fallback when unset or empty, else a whole number in [lo, hi].
long long read_setting(const char* name, long long fallback, long long lo, long long hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(v, &used);
  } catch (...) {
    used = 0;
  }
  KILN_CHECK(used == std::string(v).size() && n >= lo && n <= hi, "env", name, "=", v, ": expected a whole number from ",
             lo, " to ", hi);
  return n;
}
}  // namespace

int num_threads() {
  long long n = read_int("KILN_NUM_THREADS", 0);
  return n > 0 ? int(n) : omp_get_max_threads();
}

size_t cpu_cache_limit_bytes() {
  long long mb = read_int("KILN_CPU_CACHE_MB", 4096);
  return mb > 0 ? size_t(mb) << 20 : 0;
}

int cuda_grid_per_sm() { return int(read_setting("KILN_CUDA_GRID_PER_SM", 0, 0, 1024)); }

int cuda_tile() {
  const int t = int(read_setting("KILN_CUDA_TILE", 32, 32, 64));
  KILN_CHECK(t == 32 || t == 64, "env", "KILN_CUDA_TILE=", t, ": the tile's side is 32 or 64");
  return t;
}

size_t kernel_cache_bytes() {
  return size_t(read_setting("KILN_KERNEL_CACHE_MB", 16, 0, int64_t(1) << 20)) << 20;
}

std::string logs() {
  const char* v = std::getenv("KILN_LOGS");
  return v ? v : "";
}

bool cuda_row_groups() { return read_setting("KILN_CUDA_ROW_GROUPS", 1, 0, 1) == 1; }
int64_t cpu_thread_min_work() {
  return int64_t(read_setting("KILN_CPU_THREAD_MIN_WORK", 0, 0, int64_t(1) << 40));
}

bool omp_passive_wait() {
  static const bool passive = [] {
    const char* p = std::getenv("OMP_WAIT_POLICY");
    return p && strcasecmp(p, "passive") == 0;
  }();
  return passive;
}

CpuBlas cpu_blas() {
  const char* v = std::getenv("KILN_CPU_BLAS");
  if (!v || !*v) return CpuBlas::Auto;
  const std::string s = v;
  if (s == "auto") return CpuBlas::Auto;
  if (s == "onednn") return CpuBlas::OneDnn;
  if (s == "openblas") return CpuBlas::OpenBlas;
  KILN_FAIL("env", "KILN_CPU_BLAS=", s, ": expected auto, onednn or openblas");
}

bool cpu_row_groups() { return read_setting("KILN_CPU_ROW_GROUPS", 1, 0, 1) == 1; }
bool profile() { return read_setting("KILN_PROFILE", 0, 0, 1) == 1; }
std::string profile_trace() {
  const char* v = std::getenv("KILN_PROFILE_TRACE");
  return v ? v : "";
}
}  // namespace kiln::env
