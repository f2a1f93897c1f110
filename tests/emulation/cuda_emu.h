// CUDA's built-ins for host C++: what lets the CUDA backend's rendered kernels run on a machine
// without a GPU (the emulated driver, driver.cpp, compiles them with the host compiler and this header).
//
// A launch runs its blocks one after another; each block's threads are real threads, so that
// __syncthreads (a barrier over the block) and the warp shuffles (a barrier over the warp and
// a slot per lane) behave as on the device: a kernel that forgets a barrier, reads a lane that
// did not write, or lets the threads of a block disagree shows up here as a wrong result or a
// hang, not only on the GPU. __shared__ variables are function statics: shared by the threads
// of the block running now. Not emulated: memory ordering between blocks, timing, occupancy.
#pragma once
// Only what the kernels use: the threads, barriers and warp lanes live in the driver
// (emu_runtime.h), which hands them over when it loads a module (kiln_emu_bind); this header is
// compiled into every module.
#include <cmath>
#include <cstring>

#include "emu_runtime.h"

struct kiln_emu_dim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline thread_local kiln_emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static

namespace kiln_emu {

static const Runtime* runtime = nullptr;    // this module's, set by kiln_emu_bind
static thread_local void* current = nullptr;  // the block the calling thread is in

// Runs body() as a grid of `grid` blocks of `block` threads (a multiple of 32).
template <class F>
void launch(unsigned grid, unsigned block, const F& body) {
  runtime->launch(grid, block,
                  [](void* ctx, unsigned g, unsigned bs, unsigned b, unsigned t, void* blk) {
                    threadIdx = {t, 0, 0};
                    blockIdx = {b, 0, 0};
                    blockDim = {bs, 1, 1};
                    gridDim = {g, 1, 1};
                    current = blk;
                    (*static_cast<const F*>(ctx))();
                  },
                  const_cast<F*>(&body));
}

}  // namespace kiln_emu

extern "C" void kiln_emu_bind(const kiln_emu::Runtime* r) { kiln_emu::runtime = r; }

inline void __syncthreads() { kiln_emu::runtime->sync(kiln_emu::current); }

template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8);
  unsigned long long bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = kiln_emu::runtime->shfl_xor(kiln_emu::current, threadIdx.x, bits, unsigned(lane_mask));
  T r;
  std::memcpy(&r, &bits, sizeof(T));
  return r;
}

inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((static_cast<unsigned long long>(a) * b) >> 32); }

inline unsigned long long atomicOr(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_or(p, v, __ATOMIC_RELAXED);
}
inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
  unsigned long long old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v < old && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}
