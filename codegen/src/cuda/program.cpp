// The CUDA backend around the rendered kernels: their parameters and launch geometry, their
// CUBINs through the memory and disk caches, and what dump-ir --emit=cuda|ptx prints.
#include <chrono>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "codegen_source_hash.h"
#include "kiln/codegen/cuda.h"
#include "kiln/runtime/cuda.h"
#include "kiln/runtime/env.h"
#include "kiln/runtime/error.h"

namespace kiln::codegen {

namespace {
// Bumped whenever the CUDA this backend renders for the same kernel changes meaning (the key
// also holds the source itself and the SHA-256 of the backend's sources).
constexpr int64_t kCudaCodegenVersion = 1;
}  // namespace

std::vector<uint64_t> cuda_operand_params(const CudaKernel& k, std::span<const Tensor> buffers,
                                          std::span<const ir::Slot> inputs, const Tensor* first) {
  std::vector<uint64_t> out(k.operands.size(), 0);
  for (size_t j = 0; j < k.operands.size(); ++j) {
    const passes::Access& a = k.operands[j];
    if (j == 0 && first && k.epilogue) {
      out[j] = uint64_t(reinterpret_cast<uintptr_t>(static_cast<const char*>(first->storage()->data()) +
                                                    first->storage_offset() * itemsize(first->dtype())));
      continue;
    }
    if (a.buffer < 0) {
      KILN_CHECK(size_t(a.arg) < inputs.size(), "cuda", "kernel ", k.name, ": host number ", a.arg, " of ", inputs.size(),
                 " inputs");
      const Scalar& s = inputs[size_t(a.arg)].scalar;
      if (is_floating(a.dtype)) {
        double d = s.to_double();
        std::memcpy(&out[j], &d, sizeof d);
      } else {
        out[j] = uint64_t(s.to_int());
      }
      continue;
    }
    KILN_CHECK(size_t(a.buffer) < buffers.size(), "cuda", "kernel ", k.name, ": buffer ", a.buffer, " of ", buffers.size());
    const Tensor& t = buffers[size_t(a.buffer)];
    int64_t at = a.storage_relative ? a.offset : t.storage_offset() + a.offset;
    out[j] = uint64_t(reinterpret_cast<uintptr_t>(static_cast<const char*>(t.storage()->data()) + at * itemsize(a.dtype)));
  }
  for (int64_t v : k.size_args) out.push_back(uint64_t(v));
  return out;
}

uint64_t cuda_divisor_magic(int64_t d) {
  KILN_CHECK(d >= 1 && d < (int64_t(1) << 31), "cuda", "a fast divisor must be in [1, 2^31), not ", d);
  // s = ceil(log2 d), m = floor(2^32 * (2^s - d) / d) + 1 (below 2^32 since d > 2^(s-1)).
  // For r < 2^31, (umulhi(r, m) + r) >> s = floor(r * (2^32 + m) / 2^(32+s)), and
  // (2^32 + m) * d = 2^(32+s) + e with 0 < e <= d, so that is floor(r/d + r*e / (d * 2^(32+s))),
  // where r*e < 2^(31+s) keeps the excess below 1/d: never enough to reach the next integer.
  // (umulhi(r, m) < r, so the sum fits in 32 bits.)
  uint64_t s = 0;
  while ((int64_t(1) << s) < d) ++s;
  const uint64_t m = ((uint64_t(1) << 32) * ((uint64_t(1) << s) - uint64_t(d))) / uint64_t(d) + 1;
  return (m & 0xffffffffu) | (s << 32);
}

CudaLaunch cuda_launch_dims(const CudaKernel& k, int multiprocessors, int block) {
  KILN_CHECK(block >= 32 && block <= kCudaBlock && block % 32 == 0, "cuda", "launch of ", k.name, ": block of ", block,
             " threads (a multiple of 32 up to ", kCudaBlock, ")");
  const int64_t sms = std::max(1, multiprocessors);
  // Enough blocks to fill every SM several times over; the kernels' loops cover the rest
  // (KILN_CUDA_GRID_PER_SM: how many times; 0, one block per step of work, up to the driver's
  // limit of a grid's x dimension).
  const int per_sm = env::cuda_grid_per_sm();
  const int64_t most = per_sm > 0 ? sms * per_sm : int64_t(0x7fffffff);
  int64_t per_block = block;  // items one block takes per step
  switch (k.strategy) {
    case CudaStrategy::Elementwise: per_block = int64_t(block) * k.vector; break;
    case CudaStrategy::BlockRow:
    case CudaStrategy::RowSplit:
    case CudaStrategy::Tiled: per_block = 1; break;
    case CudaStrategy::WarpRow: per_block = block / 32; break;
    case CudaStrategy::ThreadRow:
    case CudaStrategy::Split:
    case CudaStrategy::ColumnSplit: per_block = block; break;
  }
  auto blocks = [&](int64_t items) { return (std::max<int64_t>(items, 1) + per_block - 1) / per_block; };
  CudaLaunch l;
  l.block = unsigned(block);
  if (k.strategy == CudaStrategy::ColumnSplit) {
    // Enough (row, chunk) pairs for every thread an SM holds (2048 on sm_70 and later), in
    // chunks of at least kColumnChunkMin elements: the slots then hold at most 8 bytes per 32
    // elements read, and the finishing kernel reads them once.
    const int64_t rows = std::max<int64_t>(k.items, 1), len = std::max<int64_t>(k.row_len, 1);
    const int64_t want = (sms * 2048 + rows - 1) / rows;
    const int64_t chunks = std::clamp<int64_t>(want, 1, std::max<int64_t>(1, len / kColumnChunkMin));
    l.parts = unsigned(chunks);
    l.grid = unsigned(std::clamp<int64_t>(blocks(rows * chunks), 1, most));
    l.finish_grid = unsigned(std::clamp<int64_t>(blocks(rows), 1, most));
    return l;
  }
  if (k.strategy == CudaStrategy::RowSplit) {
    // Enough (row, chunk) pairs, a block each, for kRowSplitBlocksPerSm blocks per SM, in chunks
    // of at least kRowChunkMin elements (32 per thread of a block); a thread per row finishes.
    const int64_t rows = std::max<int64_t>(k.items, 1), len = std::max<int64_t>(k.row_len, 1);
    const int64_t want = (sms * kRowSplitBlocksPerSm + rows - 1) / rows;
    const int64_t chunks = std::clamp<int64_t>(want, 1, std::max<int64_t>(1, len / kRowChunkMin));
    l.parts = unsigned(chunks);
    l.grid = unsigned(std::clamp<int64_t>(rows * chunks, 1, most));
    l.finish_grid = unsigned(std::clamp<int64_t>((rows + block - 1) / block, 1, most));
    return l;
  }
  l.grid = unsigned(std::clamp<int64_t>(blocks(k.items), 1, k.strategy == CudaStrategy::Split ? sms * 4 : most));
  if (k.strategy == CudaStrategy::Split) l.parts = l.grid, l.finish_grid = 1;
  return l;
}

size_t cuda_parts_bytes(const CudaKernel& k, const CudaLaunch& l) {
  const size_t per_part = size_t(k.slots) * sizeof(uint64_t);
  if (k.strategy == CudaStrategy::Split) return size_t(l.parts) * per_part;
  if (k.strategy == CudaStrategy::ColumnSplit || k.strategy == CudaStrategy::RowSplit)
    return size_t(l.parts) * per_part * size_t(std::max<int64_t>(k.items, 1));
  return 0;
}

CacheKey cuda_kernel_key(const CudaKernel& k, int arch) {
  return KeyBuilder()
      .add("kiln cuda kernel")
      .add(kCudaCodegenVersion)
      .add(KILN_CODEGEN_SOURCE_HASH)
      .add(int64_t(arch))
      .add(cuda::nvrtc_version())
      .add(int64_t(cuda::driver_version()))
      .add(k.source())
      .finish();
}

CudaBinary cuda_cubin(const CudaKernel& k, int arch) {
  auto t0 = std::chrono::steady_clock::now();
  CudaBinary b;
  CacheKey key = cuda_kernel_key(k, arch);
  static std::mutex mu;
  static std::unordered_map<CacheKey, std::string, CacheKeyHash> memory;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = memory.find(key); it != memory.end()) {
    b.cubin = it->second;
    b.from = CudaBinary::From::Memory;
  } else if (auto disk = DiskCache::global().load(key, "cubin")) {
    b.cubin = std::move(*disk);
    b.from = CudaBinary::From::Disk;
  } else {
    b.cubin = cuda::compile_cubin(k.source(), k.name + ".cu", arch);
    DiskCache::global().store(key, "cubin", b.cubin);
  }
  if (b.from != CudaBinary::From::Memory) memory.emplace(key, b.cubin);
  b.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return b;
}

std::string emit_cuda(const passes::KernelProgram& p, CudaEmit what, int arch, bool generic) {
  std::ostringstream o;
  auto rendered = render_cuda(p, "kiln_k", generic);
  if (what == CudaEmit::Source) o << cuda_prelude();
  for (size_t i = 0; i < rendered.size(); ++i) {
    const passes::Kernel& k = p.kernels[i];
    o << "// kernel k" << i << " (" << passes::kernel_kind_name(k.kind) << ")";
    if (!rendered[i].kernel) {
      o << ": not rendered: " << rendered[i].why << "\n\n";
      continue;
    }
    const CudaKernel& ck = *rendered[i].kernel;
    o << (ck.epilogue ? ", the epilogue after its library op" : "") << ": " << cuda_strategy_name(ck.strategy) << ", "
      << ck.items
      << (ck.strategy == CudaStrategy::Elementwise || ck.strategy == CudaStrategy::Split ? " elements"
          : ck.strategy == CudaStrategy::Tiled ? " tiles of " + std::to_string(ck.tile) + " x " + std::to_string(ck.tile)
          : ck.group > 1                       ? " groups of " + std::to_string(ck.group) + " rows"
                                               : " rows")
      << (ck.strategy == CudaStrategy::ColumnSplit || ck.strategy == CudaStrategy::RowSplit
              ? " of " + std::to_string(ck.row_len) + " elements in chunks"
              : "")
      << (ck.vector > 1 ? ", " + std::to_string(ck.vector) + "-wide vector accesses" : "")
      << (ck.index32 ? ", 32-bit indices" : ", 64-bit indices") << (ck.generic ? ", size-generic" : "") << "\n";
    if (what == CudaEmit::Source) o << ck.body << "\n";
    else o << cuda::compile_ptx(ck.source(), ck.name + ".cu", arch) << "\n";
  }
  return o.str();
}

}  // namespace kiln::codegen
