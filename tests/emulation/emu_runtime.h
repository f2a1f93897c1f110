// The emulated driver's side of a kernel launch, as the modules it compiles see it (cuda_emu.h)
// and as it implements it (driver.cpp): the host threads of a grid, each block's barrier, and
// the warp lanes of the shuffles. Kept out of the modules, whose compile time is mostly their
// headers. (A change here changes every module's cache key: driver.cpp hashes this file too.)
#pragma once

namespace kiln_emu {

struct Runtime {
  // What a host thread of the grid runs: thread index t of block b, blk being that block's state.
  using Thread = void (*)(void* ctx, unsigned grid, unsigned block, unsigned b, unsigned t, void* blk);
  // Runs thread(ctx, grid, block, b, t, blk) for every thread t of every block b: the blocks one
  // after another, the threads of a block at once (real threads, so barriers behave).
  void (*launch)(unsigned grid, unsigned block, Thread thread, void* ctx);
  // __syncthreads: the barrier of every thread of blk.
  void (*sync)(void* blk);
  // __shfl_xor_sync: thread t gives `bits` and gets those of lane (t % 32) ^ lane_mask of its warp.
  unsigned long long (*shfl_xor)(void* blk, unsigned t, unsigned long long bits, unsigned lane_mask);
};

}  // namespace kiln_emu

// Exported by every module: the driver calls it once the module is loaded.
extern "C" void kiln_emu_bind(const kiln_emu::Runtime* runtime);
