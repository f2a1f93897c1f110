// Every environment variable kiln reads is defined here and documented in docs/env_vars.md.
#pragma once
#include <cstddef>

namespace kiln::env {
// KILN_NUM_THREADS: threads the eager kernels use (default: the OpenMP default, i.e. all cores).
int num_threads();
// KILN_CPU_CACHE_MB: how much freed large-block memory the CPU allocator keeps for reuse
// (default 4096 MiB; 0 turns caching off).
size_t cpu_cache_limit_bytes();
}  // namespace kiln::env
