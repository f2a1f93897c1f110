// The Emitter (internal to codegen/cpu): LLVM IR for one kernel's loop nest, operands and row
// state, built on ScalarBuilder's instructions. Its parts, in the order a kernel is emitted:
//   emit.cpp         the function and its entry point, the outer loops, operands and values;
//   emit_memory.cpp  how memory is walked: tiles, chunks, prefetches, streaming stores;
//   emit_rows.cpp    the reduction loops: row passes, stashes, columns, split reductions.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "emit.h"
#include "scalar.h"

namespace kiln::codegen::cpu {

using llvm::BasicBlock;
using llvm::Value;

// Whether operand dim d is read at all (not broadcast along the loop) and, if so, whether its
// stride is a run-time argument of a size-generic kernel (anything but +-1: unit strides stay
// constants, so that contiguous operands still vectorise without gathers).
inline bool moves(const passes::Access& a, size_t d) { return a.sizes[d] != 1 && a.strides[d] != 0; }
inline bool stride_is_arg(const passes::Access& a, size_t d) { return moves(a, d) && std::abs(a.strides[d]) != 1; }

// The kernel's loops, operands and row state; its instructions' arithmetic is ScalarBuilder's.
class Emitter : ScalarBuilder {
 public:
  // A reduction over rows strided in memory into outputs that neighbour each other in memory
  // (x.sum(0) of a row-major matrix) runs by columns of at most kColumns outputs (columns()).
  static constexpr uint64_t kColumns = 256;
  static constexpr unsigned kColumnChains = 4;  // see columns()

  // `depth`: the reduction depth a Partial or Finish step runs (emit.h: deep splits).
  Emitter(llvm::Module& m, const passes::Kernel& k, const KernelCode& code, ReductionPart part, bool generic,
          int depth = 1);

  void emit(const std::string& name);

 private:
  const passes::Kernel& k_;
  const KernelCode& code_;
  ReductionPart part_;
  int part_depth_ = 1;  // Partial, Finish: the depth whose pass or combining this step is
  bool generic_;  // sizes and non-unit strides are run-time arguments (generic_args)
  std::vector<Value*> extent_;               // per loop: its extent (a constant, or loaded from args)
  std::vector<std::vector<Value*>> stride_;  // per operand and dim: its stride
  Value* parts_ = nullptr;  // Partial, Finish: the accumulator slots (8 bytes each)
  Value* carry_ = nullptr;  // a deep split's steps: the combined values of the depths before the last
  Value* begin_ = nullptr;  // the range the call runs (outermost loop, or for a split
  Value* end_ = nullptr;    // reduction: Partial's part of loop 0, Finish's parts)
  llvm::Function* F_ = nullptr;
  BasicBlock* entry_ = nullptr;
  Value* args_ = nullptr;
  llvm::Type* idx_ = nullptr;
  std::vector<int> in_place_;  // per load: the store operand whose pointer it reads through, or -1
  std::vector<Value*> iv_;     // per loop: the current index (null: not inside that loop)
  int flat_ = 1;               // the leading loops [begin, end) runs over, flattened (thread_loops)
  std::vector<Value*> memo_;   // per instruction: its value where the builder is now
  std::vector<llvm::AllocaInst*> acc_;
  std::vector<llvm::AllocaInst*> nan_;  // per float max/min reduction: the row met a NaN
  std::vector<llvm::AllocaInst*> scan_;  // per Scan instruction: its running value
  bool tile_ = false;
  bool columns_ = false;   // the reduction runs by columns (wants_columns)
  bool scalar_rows_ = false;  // the loop over short rows stays scalar (constructor)
  bool short_rows_ = false;   // and their row loops are vectorised, not unrolled (constructor)
  bool prefetch_ = false;  // the innermost loop runs in chunks that prefetch their streams ahead
  bool chunk_ = false;     // the innermost loop runs in chunks (to prefetch, or for streaming stores)
  std::vector<llvm::AllocaInst*> stream_buf_;  // per store: its chunk's staging buffer when it streams
  Value* chunk_start_ = nullptr;               // the index the current chunk starts at
  bool stream_rows_ = false;                   // a row-wise kernel's row stores stream
  struct Staged {
    llvm::AllocaInst* buf = nullptr;  // kTileRows x kTileCols elements of a transposed load
  };
  Value* tile_i_ = nullptr;  // the local indices inside the current tile
  Value* tile_j_ = nullptr;
  std::vector<Staged> staged_;  // per load
  std::vector<Value*> stash_;  // per row instruction: its row kept on the stack (first element), or null
  std::vector<bool> stash_ready_;         // the stash holds the row (a later loop reads it)
  static constexpr int64_t kMaxStash = 8192;  // elements per row
  static constexpr int64_t kStashBudget = int64_t(128) << 10;  // bytes of stash per kernel
  static constexpr int64_t kPage = 4096, kStashSkew = kPage / 2;  // see plan_stash
  static constexpr int64_t kMinLibmRow = 64, kMinShortRow = 16;  // see the constructor
  static constexpr uint64_t kTileRows = 64, kTileCols = 64;
  // Software prefetch (see chunked()): chunks of this many elements, each prefetching the
  // lines of its contiguous loads this many elements ahead; only kernels with at least
  // kPrefetchMinElements elements (smaller ones come from cache).
  static constexpr int64_t kPrefetchChunk = 256, kPrefetchAhead = 512, kPrefetchMinElements = int64_t(1) << 16;
  static constexpr int64_t kRowsAhead = 2;  // row_ahead(): how many rows on it prefetches
  // Stores stream (plan_streams) in kernels that move at least kStreamMinBytes, and only those
  // that write at least kStreamMinStore. Below that the data may still be in the last-level
  // cache for the next call or kernel, where a non-temporal store would send it to memory
  // (measured on an Intel host with a large L3: 16 MiB layer norms ran 1.5x slower streamed,
  // 64 MiB elementwise kernels 1.4x faster).
  static constexpr int64_t kStreamMinBytes = int64_t(64) << 20, kStreamMinStore = int64_t(4) << 20;

  int rank() const { return int(k_.loops.size()); }
  // Whether a value that varies along the row calls the vector math library (calls_math).
  bool row_calls_math() const {
    for (const Instr& in : code_.code)
      if (in.row && calls_math(in)) return true;
    return false;
  }
  int reduce_from() const { return std::min(k_.reduce_from, rank()); }
  const passes::Access& operand(size_t j) const {
    return j < k_.loads.size() ? k_.loads[j] : k_.stores[j - k_.loads.size()];
  }
  bool shares_buffer(size_t j) const;
  size_t base_operand(size_t j) const { return j < in_place_.size() && in_place_[j] >= 0 ? size_t(in_place_[j]) : j; }
  void find_in_place() {
    in_place_.assign(k_.loads.size(), -1);
    for (size_t j = 0; j < k_.loads.size(); ++j)
      if (int s = in_place_store(k_, j); s >= 0) in_place_[j] = int(k_.loads.size()) + s;
  }

  // ---- loops ----

  // How LLVM's loop passes are to take a loop (its llvm.loop metadata).
  enum class Hint {
    None,         // as they see fit
    Scalar,       // not vectorised (llvm.loop.vectorize.enable false)
    Interleaved,  // one lane, interleaved kColumnChains times: each reduction in that many chains
    NotUnrolled,  // vectorised as a loop, never unrolled whole first (a short row: the constructor)
  };

  // Emits `for (i = lo; i < hi; ++i) body(i)` in rotated form; the builder ends after the loop.
  // `width` > 0 asks the loop vectorizer for that many lanes (llvm.loop.vectorize.width; with
  // Hint::None or NotUnrolled).
  template <class Body>
  void loop(Value* lo, Value* hi, const char* name, Body&& body, uint64_t step = 1, Hint hint = Hint::None,
            unsigned width = 0) {
    BasicBlock* pre = B.GetInsertBlock();
    BasicBlock* head = BasicBlock::Create(C, name, F_);
    BasicBlock* exit = BasicBlock::Create(C, std::string(name) + ".exit", F_);
    B.CreateCondBr(B.CreateICmpSLT(lo, hi), head, exit);
    B.SetInsertPoint(head);
    llvm::PHINode* i = B.CreatePHI(idx_, 2, "i");
    i->addIncoming(lo, pre);
    body(i);
    Value* next = B.CreateAdd(i, llvm::ConstantInt::get(idx_, step), "i.next", true, true);
    i->addIncoming(next, B.GetInsertBlock());
    llvm::BranchInst* latch = B.CreateCondBr(B.CreateICmpSLT(next, hi), head, exit);
    std::vector<llvm::Metadata*> ops = {nullptr};  // (0: the loop's own node)
    auto set = [&](const char* key, llvm::Constant* v) {
      llvm::Metadata* kv[] = {llvm::MDString::get(C, key), llvm::ConstantAsMetadata::get(v)};
      ops.push_back(llvm::MDNode::get(C, kv));
    };
    if (hint == Hint::Scalar) {
      set("llvm.loop.vectorize.enable", B.getFalse());
    } else if (hint == Hint::Interleaved) {
      set("llvm.loop.vectorize.width", B.getInt32(1));
      set("llvm.loop.interleave.count", B.getInt32(kColumnChains));
    } else {
      if (hint == Hint::NotUnrolled) ops.push_back(llvm::MDNode::get(C, {llvm::MDString::get(C, "llvm.loop.unroll.disable")}));
      // (the width alone, without llvm.loop.vectorize.enable: a loop the vectorizer is told it
      // must transform, and cannot, e.g. for a scalar call, makes LLVM print a warning)
      if (width > 0) set("llvm.loop.vectorize.width", B.getInt32(width));
    }
    if (ops.size() > 1) {
      llvm::MDNode* self = llvm::MDNode::getDistinct(C, ops);
      self->replaceOperandWith(0, self);
      latch->setMetadata(llvm::LLVMContext::MD_loop, self);
    }
    B.SetInsertPoint(exit);
  }

  Value* is_nan(Value* x);

  // The lanes a row loop (or an elementwise kernel's innermost loop) over float16 operands asks
  // for. LLVM 19's x86 cost model prices a vector float16 conversion as if scalarised, and
  // picked 2 or 4 lanes for such loops (a float16 row sum ran 2.8x slower compiled than eager,
  // an elementwise float16 chain 2.2x torch.compile's time); with 16 the conversions are one
  // vcvtph2ps or vcvtps2ph each, as for the float32 loops. 0: no hint.
  unsigned float16_width() const {
    for (const auto& a : k_.loads)
      if (a.dtype == DType::Float16) return 16;
    for (const auto& a : k_.stores)
      if (a.dtype == DType::Float16) return 16;
    return 0;
  }

  // The outer loops [d, reduce_from), and then outer_body (emit.cpp).
  void outer(int d, Value* begin, Value* end);

  // ---- memory walks (emit_memory.cpp) ----
  bool wants_tiles() const;
  void tiled(int d, Value* lo, Value* hi);
  bool transposed(size_t j) const;
  Value* staged_index();
  template <class At>
  void stage_blocks(size_t j, At&& at);
  bool wants_prefetch() const;
  void chunked(int d, Value* lo, Value* hi);
  void prefetch_tile(int d, Value* t0, Value* t1);
  void prefetch_lines(size_t j, std::vector<Value*> at, int d, Value* from, int64_t skip, int64_t elems,
                      bool write = false);
  void plan_streams();
  bool streaming() const;
  bool streams(size_t j, int d) const;
  void copy_out(size_t j, Value* src, Value* dst, Value* n);
  Value* address_along(size_t j, int d, Value* at);
  Value* address_at(size_t j, const std::vector<Value*>& idx);

  // ---- reduction loops (emit_rows.cpp) ----
  void outer_body();
  template <class Body>
  void row_loops(int d, Body&& body, bool ahead = false, Hint hint = Hint::None);
  template <class Body>
  void row_ahead(int d, Body&& body);
  int ahead_depth() const;
  bool wants_columns() const;
  void columns(int K, Value* lo, Value* hi);
  void finish_parts(const std::vector<int>& reduces);
  void start_scans(const std::vector<int>& need);
  void plan_stash(const std::vector<std::vector<int>>& needs, const std::vector<std::vector<int>>& reduces);
  Value* row_index();
  void forget_rows();

  // ---- operands and values (emit.cpp) ----
  void read_sizes();
  Value* address(size_t j);
  Value* load(int j, DType to);
  void store_all(const std::vector<size_t>& js);
  void store(size_t j);
  Value* value(int id);
};

}  // namespace kiln::codegen::cpu
