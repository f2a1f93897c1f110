// The CUDA backend's code generator: the optimizer's kernel program rendered as CUDA C++.
//
// Each elementwise, reduction and row-wise kernel (and the elementwise epilogue after a library
// op) becomes one `extern "C" __global__` function, written from the same backend-neutral
// kernel code the CPU backend compiles (codegen/src/expr.h), so both backends compute the same
// thing. NVRTC compiles it to a CUBIN for the device's architecture (kiln/runtime/cuda.h).
//
// How a kernel spreads over the GPU (its strategy):
//   Elementwise  a grid-stride loop over the flattened loop space; where every operand is
//                contiguous (or read at one element) 16-byte vector loads and stores, behind a
//                run-time alignment check, with a scalar loop for the rest.
//   BlockRow     one block per row of a reduction (softmax, layernorm, row sums of long rows):
//                threads stride over the row, partial results meet through warp shuffles and
//                shared memory, every thread gets the row's result for the work that follows.
//   WarpRow      the same with one warp per row: rows of up to a few thousand elements.
//   ThreadRow    one thread per row, walking it in order: reductions whose rows are strided
//                in memory while neighbouring rows are adjacent (sums over dim 0), and running
//                sums (cumsum), which must add in row order.
//   Split        a full reduction of a large tensor: every block reduces its share into
//                8-byte slots, then a one-block finishing kernel combines the slots in order.
//   ColumnSplit  a reduction over an outer dim of a tall tensor (x.sum(0) of [100000, 4096],
//                a bias gradient): too few rows for thread-per-row to fill the GPU and rows
//                strided in memory, so each row is cut into chunks and one thread reduces one
//                chunk of one row (neighbouring threads: neighbouring rows, adjacent in
//                memory) into a slot, then a finishing kernel, one thread per row, combines the
//                row's chunks in order and stores.
//   RowSplit     a reduction over long rows contiguous in memory, too few of them for a block
//                each to fill the GPU (per-channel statistics: x.mean((0, 2, 3)) of [32, 64,
//                112, 112] is 64 rows of 401408): each row is cut into chunks, one block reduces
//                one chunk of one row into a slot, then the finishing kernel of ColumnSplit.
//   Tiled        elementwise work that reads an operand transposed (contiguous along another
//                loop than the one the stores are contiguous along: x.t() + y): 32 x 32 tiles
//                (64 x 64 with KILN_CUDA_TILE=64), each transposed operand first staged through
//                shared memory read along its own contiguous dim, so that both its reads and
//                the stores are coalesced.
// Indices are 32-bit where the loop space and every operand's reach fit (most kernels).
//
// A kernel's parameters, in order: per load a pointer (`const T*`) to its first element, or
// for a host number its value (`double` or `long long`); per store a pointer; the element count
// where the kernel takes it (CudaKernel::size_param); in a size-generic kernel the extent of
// each loop of more than one element and each operand's non-unit strides (`long long`, in the
// order CudaKernel::size_args holds their values); then the status
// word (`unsigned long long*`, device memory): bit k set means check k failed (an integer
// division by zero), raised by the host after the kernel. Both kernels of Split, ColumnSplit and
// RowSplit then take the slots (`unsigned long long*`) and their count (`long long`: Split's
// blocks, ColumnSplit's and RowSplit's chunks per row).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/codegen/cache.h"
#include "kiln/exec/program.h"
#include "kiln/passes/kernel.h"

namespace kiln::codegen {

enum class CudaStrategy : uint8_t { Elementwise, BlockRow, WarpRow, ThreadRow, Split, Tiled, ColumnSplit, RowSplit };
std::string_view cuda_strategy_name(CudaStrategy s);

// Threads per block every kernel is written for (at most; any multiple of 32 below works).
inline constexpr int kCudaBlock = 256;

struct CudaKernel {
  int kernel = -1;        // its index in the program
  bool epilogue = false;  // an opaque kernel's epilogue: load 0 is the library op's result
  std::string name;       // the entry point (Split, ColumnSplit: the partial step)
  std::string finish;     // Split, ColumnSplit: the finishing step's entry point
  std::string body;       // the kernel's CUDA C++ (both entry points), to follow cuda_prelude()
  CudaStrategy strategy = CudaStrategy::Elementwise;
  int64_t items = 0;  // what the grid spreads over: elements (Elementwise, Split), tiles (Tiled), rows (others)
  int64_t row_len = 0;  // the row strategies: elements per row (ColumnSplit cuts it into chunks)
  int tile = 0;       // Tiled: the side of its square tiles
  int group = 1;      // BlockRow, WarpRow: rows of the outermost loop a block or warp takes together (items: the groups)
  int vector = 1;     // elements per vector access on the fast path (1: none): Elementwise's
                      // loads and stores, BlockRow's and Split's loads in reduction passes
  // Elementwise over operands that are all contiguous (or read at one element): the element
  // count is a parameter, the last before the status word (`unsigned long long`), and the body
  // names no size, so one kernel (one CUBIN, one module) serves every size of the same op on the
  // same dtypes: an eager `a + b` on a new size compiles nothing.
  bool size_param = false;
  // Size-generic (render_cuda's `generic`): loop extents and non-unit strides are parameters
  // too, so the body names no size at all and one kernel serves every size of the same
  // structure (which loops are 1, which operands are contiguous, the strategy, the index width;
  // a WarpRow row cache is sized to a power of two). Costs index math by run-time divisors.
  bool generic = false;
  // The values of the size parameters for this kernel's instance: n_items, then the extents
  // and strides of a size-generic kernel.
  std::vector<int64_t> size_args;
  bool index32 = true;
  int slots = 0;      // Split, ColumnSplit: 8-byte accumulator slots per block (Split) or per chunk of a row
  std::vector<passes::Access> operands;  // the loads, then the stores
  size_t loads = 0;
  std::vector<std::string> param_types;  // the C type of each operand parameter
  std::vector<std::pair<std::string, std::string>> checks;  // per status bit: the op, the message
  std::string source() const;  // prelude + body: one translation unit
};

// Helpers every kernel's source starts with (vector types, 16-bit float conversions, total
// integer division, NaN-propagating max/min, warp and block reductions). Compiled as host C++
// when KILN_CUDA_EMULATION is defined (with a header that supplies CUDA's built-ins), so the
// rendered kernels can be tested on machines without a GPU.
std::string cuda_prelude();

// One kernel of a program rendered, or why not (opaque and control kernels without an
// epilogue to compile; an op the kernel code cannot express).
struct CudaRender {
  std::optional<CudaKernel> kernel;
  std::string why;
};
// Every kernel of the program, in order; entry points are named `<prefix><index>`. `generic`:
// size-generic kernels (CudaKernel::generic).
std::vector<CudaRender> render_cuda(const passes::KernelProgram& p, const std::string& prefix = "kiln_k",
                                    bool generic = false);

// The values of a kernel's operand parameters, 8 bytes each: device addresses of each buffer
// operand's first element (buffers by id, as the program runner hands them; `first` replaces an
// epilogue's load 0) and the bits of host numbers.
std::vector<uint64_t> cuda_operand_params(const CudaKernel& k, std::span<const Tensor> buffers,
                                          std::span<const ir::Slot> inputs, const Tensor* first = nullptr);

// What a size-generic 32-bit kernel divides by extent d with (kiln_udiv in the prelude): a
// multiplier in the low 32 bits and a shift in the high ones, exact for every dividend below
// 2^31. Raises kiln::Error unless 1 <= d < 2^31.
uint64_t cuda_divisor_magic(int64_t d);

// Grid and block for a launch on a device with `multiprocessors` SMs (Split, ColumnSplit,
// RowSplit: the partial step), and for the two-step strategies the slots' count and the
// finishing step's grid (Split: one block over the blocks' slots; ColumnSplit: enough chunks per
// row for the device's resident threads, each of at least kColumnChunkMin elements, and a thread
// per row; RowSplit: enough chunks per row for kRowSplitBlocksPerSm blocks per SM, each of at
// least kRowChunkMin elements, and a thread per row).
struct CudaLaunch {
  unsigned grid = 1, block = kCudaBlock;
  unsigned parts = 0, finish_grid = 0;  // (0: one step)
};
inline constexpr int64_t kColumnChunkMin = 32;
inline constexpr int64_t kRowChunkMin = 8192;
inline constexpr int64_t kRowSplitBlocksPerSm = 8;
CudaLaunch cuda_launch_dims(const CudaKernel& k, int multiprocessors, int block = kCudaBlock);
// The bytes of the slots a two-step launch's partial step writes (0 for the others).
size_t cuda_parts_bytes(const CudaKernel& k, const CudaLaunch& l);

// What dump-ir --emit=cuda / --emit=ptx shows for every kernel of a program. PTX needs NVRTC
// (no GPU); `arch` is the compute capability as a number (90: sm_90); `generic`: the
// size-generic kernels.
enum class CudaEmit { Source, Ptx };
std::string emit_cuda(const passes::KernelProgram& p, CudaEmit what, int arch = 90, bool generic = false);

// A kernel's CUBIN for sm_<arch>, through the process's memory cache and the disk cache
// (kiln/codegen/cache.h), compiled by NVRTC on a miss. The key holds the kernel's source, the
// architecture, NVRTC's version, the driver's version (0 without one), the backend's version
// and the SHA-256 of its sources. Throws kiln::Error when NVRTC is unavailable or fails.
struct CudaBinary {
  std::string cubin;
  enum class From { Memory, Disk, Compiled } from = From::Compiled;
  double ms = 0;  // wall time of this call
};
CudaBinary cuda_cubin(const CudaKernel& k, int arch);
CacheKey cuda_kernel_key(const CudaKernel& k, int arch);

// Compiles a kernel program for a GPU. Every rendered kernel is named by its content, loaded
// as its own module (CUBIN for the device's architecture through the caches; on the emulated
// driver its source) and launched on the device's stream with the launch geometry from the
// device's multiprocessor count. The program's buffers live on `device`: inputs must be there,
// outputs are made there. Library ops run on the device as calls (stats().library names them):
// the matmul family through cuBLAS, einsum as views, sums and cuBLAS products, cat as device
// copies, gather and index_select as a gather kernel whose index check the host reads; a fused
// epilogue runs as a compiled kernel on the result. Other opaque ops and a cond run on the
// host on copies of their operands (stats().interpreted). Kernels with checks
// (integer division by zero) make the host wait for their status word; everything else is
// asynchronous. stats().interpreted names each kernel that runs on the host. Throws
// kiln::Error when CUDA is unavailable or NVRTC fails.
struct CudaCompileOptions {
  int block = 0;  // threads per block, a multiple of 32 up to kCudaBlock (0: kCudaBlock; 64 on the emulator)
  // Replay the program as a CUDA graph (kiln::compile's reduce_overhead): the first run goes
  // as usual, then the launches are captured over buffers that stay put; each later run copies
  // the inputs in, launches the graph and copies the outputs out (so a later run never
  // overwrites a tensor an earlier one returned). Runs of one program are serialised. Programs
  // with work on the host (opaque ops other than the library ops, conds, integer products),
  // checks the host reads (integer division, gather's indices) or host-number inputs run as
  // usual; stats().graphs says which.
  bool graphs = false;
  // Size-generic kernels (CudaKernel::generic): a program compiled for other sizes of the same
  // structure loads the same modules and compiles nothing. kiln::compile uses them for the new
  // sizes of a dynamic dim, and eager ops on GPU tensors always.
  bool generic = false;
};
std::shared_ptr<exec::CompiledProgram> compile_cuda(std::shared_ptr<const passes::KernelProgram> program,
                                              std::vector<ir::Type> input_types, Device device = Device::cuda(),
                                              CudaCompileOptions opts = {});

// Eager ops on GPU tensors (a + b with a, b on cuda:0) run as one-node programs of this backend,
// cached by the op, its attributes and its operands' dtypes, sizes and strides (host numbers
// are arguments: x * 0.5 and x * 0.25 share one). How many such programs this process holds.
size_t cuda_eager_programs();
// How many kernel modules this process has loaded (one per distinct kernel and device): what a
// new size that needed no compile leaves unchanged.
size_t cuda_kernel_modules();

}  // namespace kiln::codegen
