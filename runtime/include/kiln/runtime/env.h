// Every environment variable kiln reads is defined here and documented in docs/env_vars.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::env {
// KILN_NUM_THREADS: threads the eager kernels use (default: the OpenMP default, i.e. all cores).
int num_threads();
// KILN_CPU_CACHE_MB: how much freed large-block memory the CPU allocator keeps for reuse
// (default 4096 MiB; 0 turns caching off).
size_t cpu_cache_limit_bytes();

// Tuning variables of the CUDA backend, read at each use, so that a sweep (tools/bench/sweep.py)
// or a test can compare settings; a value out of range raises kiln::Error naming the variable.
// KILN_CUDA_GRID_PER_SM: the most blocks per multiprocessor a grid-stride kernel is launched
// with; 0 (the default): no cap, one block per step of work (a tile, a block's rows or
// elements), which an H100 ran 1-12% faster than a cap of 8 (docs/perf-journal.md, "The lease
// plan on an H100, and what it found").
int cuda_grid_per_sm();
// KILN_CUDA_TILE: the side of the Tiled strategy's tiles, 32 (default) or 64.
int cuda_tile();
// KILN_CUDA_ROW_GROUPS: 1 (default): row kernels take the rows of a short outer loop together
// where they share work (docs/codegen.md); 0: a block or warp per row.
bool cuda_row_groups();

// KILN_CPU_ROW_GROUPS: 1 (default): the CPU backend unrolls a reduction's short outermost loop
// into its body where the copies share work (passes::unroll_outer_loop; docs/codegen.md); 0: not.
bool cpu_row_groups();

// KILN_CPU_THREAD_MIN_WORK: a compiled CPU kernel runs on the kernel threads from this much
// work (its elements times each one's cost; codegen/src/cpu/program.cpp); 0 (default): 2^15, or
// 64 times that under OMP_WAIT_POLICY=PASSIVE. Read at each compile. (The test binaries set
// 2^15 whatever the policy: tests/common/thread_coverage.cpp.)
int64_t cpu_thread_min_work();
// OMP_WAIT_POLICY (OpenMP's own, read here once): whether it is `passive`, in any case. Idle
// OpenMP threads then sleep, and waking one costs tens of microseconds: the CPU kernels and
// products go threaded only from more work.
bool omp_passive_wait();

// KILN_CPU_BLAS: the library float32 products run on on the CPU, read at each product. auto
// (default): oneDNN's sgemm where kiln was built with it (KILN_WITH_ONEDNN) for products of at
// least 2^15 multiply-adds, OpenBLAS for the smaller ones and without oneDNN; onednn: every
// float32 product through oneDNN (kiln::Error where it was built without); openblas: none.
// float64 products always run on OpenBLAS (oneDNN has no double-precision product).
enum class CpuBlas { Auto, OneDnn, OpenBlas };
CpuBlas cpu_blas();

// KILN_KERNEL_CACHE_MB: how much compiled CPU kernel code (object bytes) kiln keeps linked for
// reuse beyond what live compiled functions use (default 16: about 10,000 small kernels, some
// 100 MB of the process once linked; the least recently used goes first). Read at each new
// kernel.
size_t kernel_cache_bytes();

// KILN_LOGS: the diagnostics channels turned on (kiln/runtime/log.h), a comma-separated list
// of their names or `all`; "" (default): none. Read at each call.
std::string logs();

// KILN_PROFILE: 1 records every kernel of the process and prints the kernel profile's table
// on stderr at exit (kiln/runtime/profile.h); 0 (default): only a kiln::Profiler records.
bool profile();
// KILN_PROFILE_TRACE: with KILN_PROFILE=1, the file the kernel timeline is written to at exit
// (ProfileReport::chrome_trace); "" (default): none.
std::string profile_trace();
}  // namespace kiln::env
