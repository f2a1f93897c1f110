// The kernel program: what the optimizer hands to the backends.
//
// An ordered list of kernels over a set of buffers. Each kernel is a loop nest (its loop space,
// outermost loop first, the reduction loops innermost) and a body: a small graph of the op
// table's elementwise, reduction and opaque ops whose inputs are the kernel's loads and whose
// outputs are its stores. Every load and store is an affine index into one buffer, given as
// sizes and strides over the loop space plus an element offset; a size of 1 where the loop's
// extent is larger means the operand is broadcast along that loop. The body is written in the
// loop space: its values have the loop space's sizes (1 along the loops they do not vary in,
// and 1 along the reduction loops after a reduction, which always keeps its dims).
//
// Views never appear in bodies: the layout pass folds them into the index of the load or
// store that reads them, so a transpose or a slice costs nothing. A `copy` (write-back) is a
// store into the view it writes.
//
// Buffers are the graph's inputs, its tensor constants, the outputs it returns (allocated per
// run), and temporaries: values that cross from one kernel to another. The memory plan places
// temporaries in one arena, reusing the bytes of buffers that are dead (and, where a kernel
// reads and writes the same index, the buffer it is reading).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/ir/exec.h"
#include "kiln/ir/graph.h"
#include "kiln/runtime/rules.h"
#include "kiln/runtime/tensor.h"

namespace kiln::passes {

// How an operand's index walks memory, from cheapest to dearest for a backend: contiguous
// (one linear run, vectorisable), broadcast (contiguous apart from loops it does not vary in),
// permuted (a permutation of a contiguous layout, e.g. a transpose), general (anything else:
// slices with steps, diagonals, partial overlaps). The rule is rules::stride_class, which the
// compile cache's signature keys on too.
using StrideClass = rules::StrideClass;
using rules::stride_class_name;

enum class BufferKind : uint8_t { Input, Constant, Temp, Output };
std::string_view buffer_kind_name(BufferKind k);

struct Buffer {
  int id = 0;
  BufferKind kind = BufferKind::Temp;
  DType dtype = DType::Float32;
  int64_t numel = 0;       // elements the buffer spans (inputs: as given at run time)
  int input = -1;          // Input: the graph input it is
  int value = -1;          // the graph value it materialises (Temp, Output, Constant), for printing
  Tensor constant;         // Constant: the data
  bool iota = false;       // Constant: an `iota` node's value, each element's row-major index
  std::vector<int64_t> sizes, strides;  // Temp/Output: the layout of the value it holds
  int64_t arena_offset = -1;  // Temp: byte offset in the arena, once planned
  int64_t bytes() const;
};

// One operand of a kernel: a buffer read or written through an affine index over the loop
// space, or (buffer == -1) a host number passed as the graph input `arg`.
struct Access {
  int buffer = -1;
  int arg = -1;
  DType dtype = DType::Float32;
  // One per loop; a size is the loop's extent or 1 (broadcast). The operands of an opaque op or a
  // cond are read whole: their own sizes and strides. A store's body value may be 1 where the
  // store is larger (it is broadcast) or larger where the store is 1 (it is constant there).
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;                   // in elements, from the buffer's first element
  bool storage_relative = false;        // offset counts from the storage start (as_strided offset=k)
  StrideClass cls = StrideClass::Contiguous;
  int align = 64;  // bytes: the largest power of two (up to 64) dividing the first element's address
  // A load of an iota buffer that no kernel writes: each element holds its own index, so a
  // backend may compute the value (the first element's value, read once, plus the index the
  // loops reach) instead of reading memory. The buffer holds the values all the same, for the
  // paths that read them.
  bool iota = false;
  bool operator==(const Access&) const = default;
  // Whether two accesses name the same element at every loop index (sizes compared only where
  // the access moves: a broadcast load and a store of the same element are the same index).
  bool same_index(const Access& o) const;
};

enum class KernelKind : uint8_t {
  Elementwise,  // one pass over the loop space
  Reduction,    // reductions over the innermost loops, results stored per outer index
  RowWise,      // reductions whose results feed elementwise work on the same rows (softmax, layernorm)
  Opaque,       // a library op (matmul, cat, gather, ...) and the elementwise epilogue fused after it
  Control,      // a cond node, run with its regions
};
std::string_view kernel_kind_name(KernelKind k);

struct Kernel {
  KernelKind kind = KernelKind::Elementwise;
  std::vector<int64_t> loops;  // extents, outermost first
  int reduce_from = 0;         // loops[reduce_from..] are reduction loops (== loops.size(): none)
  std::vector<Access> loads, stores;
  ir::Graph body{"kernel"};    // inputs: the loads; outputs: the stores
  std::vector<int> nodes;      // the graph nodes (by index) it computes
  int64_t bytes_read = 0, bytes_written = 0;
};

struct KernelProgram {
  std::vector<Buffer> buffers;
  std::vector<Kernel> kernels;
  std::vector<Access> outputs;  // what the graph returns: a buffer and the view of it
  int64_t arena_bytes = 0;      // the temporaries' arena, once planned
  int64_t peak_bytes = 0;       // most temporary and output bytes live at once
  bool planned = false;         // the memory plan has run (else every temporary has its own bytes)
  bool laid_out = false;        // the layout pass has run (else logical loop order, typed layouts)
};

// The program as text (what dump-ir prints after the kernel passes).
std::string print(const KernelProgram& p);
// In how many places two programs differ: each kernel (its kind, loops, accesses, body, nodes,
// traffic) and each buffer (kind, dtype, size, layout, arena offset, the graph value it holds)
// that is not the same in both, or is in one only, and the program's outputs and totals (arena,
// peak, whether laid out and planned) as one more. 0: print(a) == print(b). A kernel pass
// reports the rewrites it made this way, without printing.
int differences(const KernelProgram& a, const KernelProgram& b);
// A reduction kernel whose outermost loop is short (2 to `max_copies` elements, not reduced,
// followed by at least one more outer loop) with that loop unrolled into its body: the loop is
// gone, each load and store that moves along it comes once per copy (its offset moved on by the
// copy's steps), each value that varies along it is computed once per copy, and every other value
// once for all. n-body's [2, N, N] forces then compute the distance of a pair once for both
// components. nullopt where the kernel is not such a reduction, where nothing would be shared
// or nothing computed per copy, where its body holds a row op (softmax, cumsum), or where it
// stores into a buffer it reads.
std::optional<Kernel> unroll_outer_loop(const Kernel& k, int max_copies = 4);

// A kernel in a few words, for the kernel profile (kiln/runtime/profile.h): its kind, its ops
// (each once, in order), its loops and the dtype it stores: "rowwise softmax 16384x4096 f32".
std::string kernel_summary(const Kernel& k);
// The bytes kernel `k` of `p` must move at least: per buffer, the distinct elements its loads
// read plus those its stores write (a broadcast operand once, not once per use; at most the
// buffer's own bytes each way). bytes_read and bytes_written count what the loop nest asks
// for, a broadcast operand once per element of the loop space: that is the kernel's work, this
// its compulsory traffic, what a share of the copy bandwidth is taken of (the kernel profile).
int64_t traffic_bytes(const KernelProgram& p, const Kernel& k);
// One line per kernel with the bytes it reads and writes and its traffic, then the totals and
// the peak.
std::string stats(const KernelProgram& p);

// Structural checks: operand indices in range, loads and stores matching the body's inputs and
// outputs in dtype and sizes, accesses inside their buffers, no two temporaries live at once in
// overlapping arena bytes (unless one kernel reads and writes them through the same index), a
// kernel that writes a buffer reads it only through the index it writes. nullopt when sound.
std::optional<std::string> verify_program(const KernelProgram& p);

// The view access `a` names in its buffer's tensor `buffer` (its offset counts from the
// buffer's first element, or from the storage start when storage_relative). The program runner
// (kiln/exec/runner.h) and the backends read and write buffers through it.
Tensor access_view(const Tensor& buffer, const Access& a);

}  // namespace kiln::passes
