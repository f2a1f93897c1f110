#include "kiln/runtime/env.h"

#include <omp.h>

#include <cstdlib>
#include <string>

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
}  // namespace

int num_threads() {
  long long n = read_int("KILN_NUM_THREADS", 0);
  return n > 0 ? int(n) : omp_get_max_threads();
}

size_t cpu_cache_limit_bytes() {
  long long mb = read_int("KILN_CPU_CACHE_MB", 4096);
  return mb > 0 ? size_t(mb) << 20 : 0;
}
}  // namespace kiln::env
