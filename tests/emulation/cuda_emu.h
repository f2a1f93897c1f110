// CUDA's built-ins for host C++: what lets the CUDA backend's rendered kernels run on a machine
// without a GPU (test_cuda_render.cpp compiles them with the host compiler and this header).
//
// A launch runs its blocks one after another; each block's threads are real threads, so that
// __syncthreads (a barrier over the block) and the warp shuffles (a barrier over the warp and
// a slot per lane) behave as on the device: a kernel that forgets a barrier, reads a lane that
// did not write, or lets the threads of a block disagree shows up here as a wrong result or a
// hang, not only on the GPU. __shared__ variables are function statics: shared by the threads
// of the block running now. Not emulated: memory ordering between blocks, timing, occupancy.
#pragma once
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

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

struct Block {
  std::unique_ptr<std::barrier<>> all;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<unsigned long long> lanes;  // one shuffle slot per thread
};
inline thread_local Block* current = nullptr;

// Runs body() as a grid of `grid` blocks of `block` threads (a multiple of 32).
inline void launch(unsigned grid, unsigned block, const std::function<void()>& body) {
  for (unsigned b = 0; b < grid; ++b) {
    Block blk;
    blk.all = std::make_unique<std::barrier<>>(block);
    for (unsigned w = 0; w < (block + 31) / 32; ++w)
      blk.warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, block - 32 * w)));
    blk.lanes.assign(block, 0);
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t)
      threads.emplace_back([&, t] {
        threadIdx = {t, 0, 0};
        blockIdx = {b, 0, 0};
        blockDim = {block, 1, 1};
        gridDim = {grid, 1, 1};
        current = &blk;
        body();
        // a finished thread no longer holds up the others' barriers
        blk.all->arrive_and_drop();
        blk.warps[t / 32]->arrive_and_drop();
      });
    for (auto& th : threads) th.join();
  }
}

}  // namespace kiln_emu

inline void __syncthreads() { kiln_emu::current->all->arrive_and_wait(); }

template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8);
  kiln_emu::Block& b = *kiln_emu::current;
  const unsigned t = threadIdx.x, warp = t / 32;
  unsigned long long bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  b.lanes[t] = bits;
  b.warps[warp]->arrive_and_wait();
  unsigned long long other = b.lanes[(t & ~31u) | ((t & 31u) ^ unsigned(lane_mask))];
  b.warps[warp]->arrive_and_wait();  // every lane has read before any writes again
  T r;
  std::memcpy(&r, &other, sizeof(T));
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
