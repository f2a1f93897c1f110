// LLVM IR for one kernel: the loop nest over the kernel's loop space, operand addresses from
// each access's sizes and strides, and the kernel code (expr.h) instruction by instruction.
//
// The IR is written plainly (scalar loops, accumulators in stack slots) and left to LLVM's O3
// pipeline to vectorise: innermost loops over contiguous operands become vector loops, broadcast
// operands are hoisted, reductions marked reassociable become vector partial sums, and the libm
// calls of transcendentals become vector calls through the vector-library table (jit.cpp).
// Operands that no other operand of the kernel shares a buffer with are `noalias`, so the
// vectoriser needs no run-time overlap checks for them.
#include "emit.h"

#include "jit.h"
#include "scalar.h"

#include <cmath>
#include <limits>

namespace kiln::codegen::cpu {

using llvm::BasicBlock;
using llvm::Value;

// Whether operand dim d is read at all (not broadcast along the loop) and, if so, whether its
// stride is a run-time argument of a size-generic kernel (anything but +-1: unit strides stay
// constants, so that contiguous operands still vectorise without gathers).
static bool moves(const passes::Access& a, size_t d) { return a.sizes[d] != 1 && a.strides[d] != 0; }
static bool stride_is_arg(const passes::Access& a, size_t d) { return moves(a, d) && std::abs(a.strides[d]) != 1; }

std::vector<int64_t> generic_args(const passes::Kernel& k) {
  std::vector<int64_t> out(k.loops.begin(), k.loops.end());
  for (const auto* list : {&k.loads, &k.stores})
    for (const passes::Access& a : *list) {
      if (a.buffer < 0) continue;
      for (size_t d = 0; d < a.sizes.size() && d < k.loops.size(); ++d)
        if (stride_is_arg(a, d)) out.push_back(a.strides[d]);
    }
  return out;
}

namespace {

// The kernel's loops, operands and row state; its instructions' arithmetic is ScalarBuilder's.
class Emitter : ScalarBuilder {
 public:
  Emitter(llvm::Module& m, const passes::Kernel& k, const KernelCode& code, ReductionPart part, bool generic)
      : ScalarBuilder(m), k_(k), code_(code), part_(part), generic_(generic), memo_(code.code.size(), nullptr) {
    // A row-wise kernel's per-row values run once per row, outside the vectorised row loops,
    // unless the rows are so short that LLVM unrolls them whole and vectorises the outer loop
    // instead: below kMinLibmRow elements the per-row calls stay SLEEF's, which it can.
    int64_t row = 1;
    for (int d = reduce_from(); d < rank(); ++d) row *= k_.loops[size_t(d)];
    rowwise_ = reduce_from() < rank() && (generic_ || row >= kMinLibmRow);
    // Rows shorter than that LLVM unrolls whole, and then vectorises the loop over the rows: a
    // lane per row, each element by a gather. Rows of 16 to 63 elements without math calls or
    // 16-bit operands keep that loop scalar, and the SLP vectoriser runs each row by vectors with
    // a horizontal fold: amax over float64 rows of 16 0.35 -> 0.12 ms, sums over float64 rows of
    // 32 0.63 -> 0.23 (rows of 5, float16 rows and rows with exp ran slower that way).
    scalar_rows_ = reduce_from() < rank() && !rowwise_ && row >= 16;
    for (const Instr& in : code.code) scalar_rows_ = scalar_rows_ && !calls_math(in.op);
    for (const auto* ops : {&k.loads, &k.stores})
      for (const passes::Access& a : *ops)
        scalar_rows_ = scalar_rows_ && a.dtype != DType::Float16 && a.dtype != DType::BFloat16;
  }

  void emit(const std::string& name) {
    const size_t nops = k_.loads.size() + k_.stores.size();
    const bool split = part_ != ReductionPart::Whole;
    auto* ptr = llvm::PointerType::getUnqual(C);
    auto* i64 = B.getInt64Ty();
    idx_ = !generic_ && fits_index32(k_) ? B.getInt32Ty() : i64;

    find_in_place();
    // The body: one pointer parameter per operand, so that noalias can say which do not overlap.
    std::vector<llvm::Type*> params(nops, ptr);
    params.push_back(ptr);  // args
    params.push_back(i64);  // begin
    params.push_back(i64);  // end
    params.push_back(ptr);  // status
    if (split) params.push_back(ptr);  // the partial accumulators
    auto* body_ty = llvm::FunctionType::get(B.getVoidTy(), params, false);
    F_ = llvm::Function::Create(body_ty, llvm::Function::InternalLinkage, name + ".body", M);
    F_->addFnAttr(llvm::Attribute::NoUnwind);
    F_->addFnAttr(llvm::Attribute::AlwaysInline);
    for (size_t j = 0; j < nops; ++j) {
      if (!shares_buffer(j)) F_->addParamAttr(unsigned(j), llvm::Attribute::NoAlias);
      F_->addParamAttr(unsigned(j), llvm::Attribute::NoUndef);
    }
    BasicBlock* entry = BasicBlock::Create(C, "entry", F_);
    B.SetInsertPoint(entry);
    entry_ = entry;
    args_ = F_->getArg(unsigned(nops));
    Value* begin = F_->getArg(unsigned(nops + 1));
    Value* end = F_->getArg(unsigned(nops + 2));
    Value* status = F_->getArg(unsigned(nops + 3));
    if (split) {
      parts_ = F_->getArg(unsigned(nops + 4));
      F_->addParamAttr(unsigned(nops + 4), llvm::Attribute::NoAlias);  // the host's own slots
    }
    iv_.assign(k_.loops.size(), nullptr);
    read_sizes();
    flat_ = thread_loops(k_, generic_);
    tile_ = wants_tiles();
    prefetch_ = wants_prefetch();
    plan_streams();
    chunk_ = !tile_ && (prefetch_ || streaming());
    columns_ = wants_columns();
    staged_.assign(k_.loads.size(), Staged{});
    if (tile_) {
      for (size_t j = 0; j < k_.loads.size(); ++j) {
        if (!transposed(j)) continue;
        llvm::IRBuilder<> eb(entry_, entry_->begin());
        staged_[j].buf = eb.CreateAlloca(storage_type(k_.loads[j].dtype), eb.getInt64(kTileRows * kTileCols), "tile");
        staged_[j].buf->setAlignment(llvm::Align(64));  // (stage_blocks stores whole vectors)
      }
    }
    if (!code_.checks.empty()) {
      // The check flags this call raised, one bit each, gathered in a local word (a register
      // after mem2reg: an `or` reduction the loop vectoriser keeps in vector lanes).
      llvm::IRBuilder<> eb(entry_, entry_->begin());
      flags_ = eb.CreateAlloca(i64, nullptr, "flags");
      B.CreateStore(B.getInt64(0), flags_);
    }
    begin_ = B.CreateTrunc(begin, idx_);
    end_ = B.CreateTrunc(end, idx_);
    outer(0, begin_, end_);
    if (streaming()) {
      // Non-temporal stores are weakly ordered (x86: they bypass the store order): a full fence
      // (mfence) before the caller, or another thread after the launch's barrier, reads them.
      B.CreateFence(llvm::AtomicOrdering::SequentiallyConsistent);
    }
    if (flags_) {
      // Any flag set: or them into the caller's status word, atomically (the threads of one
      // split kernel share it); a call that met no error leaves it alone.
      Value* flags = B.CreateLoad(i64, flags_);
      BasicBlock* report = BasicBlock::Create(C, "report", F_);
      BasicBlock* done = BasicBlock::Create(C, "done", F_);
      B.CreateCondBr(B.CreateICmpNE(flags, B.getInt64(0)), report, done);
      B.SetInsertPoint(report);
      B.CreateAtomicRMW(llvm::AtomicRMWInst::Or, status, flags, llvm::MaybeAlign(8), llvm::AtomicOrdering::Monotonic);
      B.CreateBr(done);
      B.SetInsertPoint(done);
    }
    B.CreateRetVoid();

    // The entry point with the uniform signature: unpacks the operand array.
    auto* entry_ty = llvm::FunctionType::get(B.getVoidTy(), {ptr, ptr, i64, i64, ptr}, false);
    llvm::Function* E = llvm::Function::Create(entry_ty, llvm::Function::ExternalLinkage, name, M);
    E->addFnAttr(llvm::Attribute::NoUnwind);
    B.SetInsertPoint(BasicBlock::Create(C, "entry", E));
    std::vector<Value*> call_args;
    for (size_t j = 0; j < nops; ++j)
      call_args.push_back(B.CreateLoad(ptr, B.CreateConstInBoundsGEP1_64(ptr, E->getArg(0), j), "op" + std::to_string(j)));
    call_args.push_back(E->getArg(1));
    call_args.push_back(E->getArg(2));
    call_args.push_back(E->getArg(3));
    call_args.push_back(E->getArg(4));
    if (split) call_args.push_back(B.CreateLoad(ptr, B.CreateConstInBoundsGEP1_64(ptr, E->getArg(0), nops), "parts"));
    B.CreateCall(F_, call_args);
    B.CreateRetVoid();
  }

 private:
  const passes::Kernel& k_;
  const KernelCode& code_;
  ReductionPart part_;
  bool generic_;  // sizes and non-unit strides are run-time arguments (generic_args)
  std::vector<Value*> extent_;               // per loop: its extent (a constant, or loaded from args)
  std::vector<std::vector<Value*>> stride_;  // per operand and dim: its stride
  Value* parts_ = nullptr;  // Partial, Finish: the accumulator slots (8 bytes each)
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
  static constexpr int64_t kMinLibmRow = 64;  // see the constructor
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
  int reduce_from() const { return std::min(k_.reduce_from, rank()); }
  const passes::Access& operand(size_t j) const {
    return j < k_.loads.size() ? k_.loads[j] : k_.stores[j - k_.loads.size()];
  }
  // Whether another operand may overlap operand j's memory. A load that reads through exactly
  // the index a store writes (an in-place update: x.add_(1)) uses the store's pointer
  // (in_place_), so the pair does not count: the vectoriser sees one pointer and a dependence
  // distance of 0, where two pointers into one buffer would make it check for overlap at run
  // time, find it, and run the scalar loop.
  bool shares_buffer(size_t j) const {
    const passes::Access& a = operand(j);
    if (a.buffer < 0) return false;
    for (size_t i = 0; i < k_.loads.size() + k_.stores.size(); ++i) {
      if (i == j || operand(i).buffer != a.buffer) continue;
      if (base_operand(i) == base_operand(j)) continue;
      return true;
    }
    return false;
  }
  size_t base_operand(size_t j) const { return j < in_place_.size() && in_place_[j] >= 0 ? size_t(in_place_[j]) : j; }
  void find_in_place() {
    in_place_.assign(k_.loads.size(), -1);
    for (size_t j = 0; j < k_.loads.size(); ++j)
      if (int s = in_place_store(k_, j); s >= 0) in_place_[j] = int(k_.loads.size()) + s;
  }


  // ---- loops ----

  // Emits `for (i = lo; i < hi; ++i) body(i)` in rotated form; the builder ends after the loop.
  // `width` > 0 asks the loop vectorizer for that many lanes (llvm.loop.vectorize.width).
  template <class Body>
  void loop(Value* lo, Value* hi, const char* name, Body&& body, uint64_t step = 1, bool scalar = false,
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
    if (scalar) {
      // llvm.loop.vectorize.enable = false: the loop stays scalar
      llvm::Metadata* off[] = {llvm::MDString::get(C, "llvm.loop.vectorize.enable"),
                               llvm::ConstantAsMetadata::get(B.getFalse())};
      llvm::Metadata* ops[] = {nullptr, llvm::MDNode::get(C, off)};
      llvm::MDNode* self = llvm::MDNode::getDistinct(C, ops);
      self->replaceOperandWith(0, self);
      latch->setMetadata(llvm::LLVMContext::MD_loop, self);
    } else if (width > 0) {
      // (the width alone, without llvm.loop.vectorize.enable: a loop the vectorizer is told it
      // must transform, and cannot, e.g. for a scalar call, makes LLVM print a warning)
      llvm::Metadata* w[] = {llvm::MDString::get(C, "llvm.loop.vectorize.width"),
                             llvm::ConstantAsMetadata::get(B.getInt32(width))};
      llvm::Metadata* ops[] = {nullptr, llvm::MDNode::get(C, w)};
      llvm::MDNode* self = llvm::MDNode::getDistinct(C, ops);
      self->replaceOperandWith(0, self);
      latch->setMetadata(llvm::LLVMContext::MD_loop, self);
    }
    B.SetInsertPoint(exit);
  }

  // Whether x is NaN. A float16 value widened to float tests its bits as an integer instead:
  // InstCombine narrows `fcmp uno (fpext a), (fpext a)` to a float16 compare, which x86 runs one
  // lane at a time.
  Value* is_nan(Value* x) {
    if (auto* ext = llvm::dyn_cast<llvm::FPExtInst>(x); ext && ext->getSrcTy()->isHalfTy()) {
      Value* bits = B.CreateBitCast(ext->getOperand(0), B.getInt16Ty());
      return B.CreateICmpUGT(B.CreateAnd(bits, B.getInt16(0x7fff)), B.getInt16(0x7c00));
    }
    return B.CreateFCmpUNO(x, x);
  }

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

  // The outer loops [d, reduce_from): the outermost runs [begin, end), or with thread_loops() > 1
  // the leading loops flattened do, each index split into their coordinates. When the last two
  // are tiled (tile_), they run as blocks of kTileRows x kTileCols.
  void outer(int d, Value* begin, Value* end) {
    if (d == reduce_from()) {
      outer_body();
      return;
    }
    if (d == 0 && flat_ > 1) {
      loop(begin, end, "outer.flat", [&](Value* f) {
        Value* r = f;
        for (int e = flat_ - 1; e > 0; --e) {
          iv_[size_t(e)] = B.CreateURem(r, extent_[size_t(e)]);
          r = B.CreateUDiv(r, extent_[size_t(e)]);
        }
        iv_[0] = r;
        outer(flat_, begin, end);
        for (int e = 0; e < flat_; ++e) iv_[size_t(e)] = nullptr;
      }, 1, scalar_rows_ && flat_ == reduce_from());
      return;
    }
    Value* lo = d == 0 ? begin : llvm::ConstantInt::get(idx_, 0);
    Value* hi = d == 0 ? end : extent_[size_t(d)];
    if (columns_ && d == reduce_from() - 1) {
      columns(d, lo, hi);
      return;
    }
    if (tile_ && d == rank() - 2) {
      tiled(d, lo, hi);
      return;
    }
    if (chunk_ && d == rank() - 1) {
      chunked(d, lo, hi);
      return;
    }
    // (the innermost loop of an elementwise kernel: the lanes its float16 operands want)
    const bool innermost = d == rank() - 1 && reduce_from() == rank();
    loop(lo, hi, "outer", [&](Value* i) {
      iv_[size_t(d)] = i;
      outer(d + 1, begin, end);
      iv_[size_t(d)] = nullptr;
    }, 1, scalar_rows_ && d == reduce_from() - 1, innermost ? float16_width() : 0);
  }

  // Loops d and d + 1 (the innermost two, no reductions) in square blocks: an operand that is
  // contiguous along d but strided along d + 1 (a transposed read) then reuses the cache lines
  // a block touches instead of missing on every element.
  void tiled(int d, Value* lo, Value* hi) {
    Value* hi2 = extent_[size_t(d + 1)];
    Value* rows = llvm::ConstantInt::get(idx_, kTileRows), *cols = llvm::ConstantInt::get(idx_, kTileCols);
    Value* zero = llvm::ConstantInt::get(idx_, 0);
    auto min = [&](Value* a, Value* b) { return B.CreateSelect(B.CreateICmpSLT(a, b), a, b); };
    loop(lo, hi, "tile", [&](Value* t0) {
      loop(zero, hi2, "tile", [&](Value* t1) {
        // Inside a tile the loops count from 0 (local indices), so that every address, the
        // tile buffer's included, is plainly affine in the innermost index.
        Value* n0 = B.CreateSub(min(B.CreateAdd(t0, rows, "", true, true), hi), t0, "", true, true);
        Value* n1 = B.CreateSub(min(B.CreateAdd(t1, cols, "", true, true), hi2), t1, "", true, true);
        prefetch_tile(d, t0, B.CreateAdd(t1, cols));
        auto at = [&](Value* i, Value* j) {
          iv_[size_t(d)] = B.CreateAdd(t0, i, "", true, true);
          iv_[size_t(d + 1)] = B.CreateAdd(t1, j, "", true, true);
          tile_i_ = i;
          tile_j_ = j;
        };
        // Transposed operands first: copied into a tile buffer walking their own contiguous
        // direction (loads stay in the lines the tile brings in), then read back in the loop
        // order below, where every access is contiguous and vectorises. A full tile of an
        // operand with unit stride along d is transposed in registers, block by block
        // (stage_blocks); partial tiles and reversed operands take a scalar loop.
        for (size_t j = 0; j < staged_.size(); ++j) {
          if (!staged_[j].buf) continue;
          llvm::Type* ty = storage_type(k_.loads[j].dtype);
          auto scalar_stage = [&] {
            loop(zero, n1, "stage", [&](Value* jj) {
              loop(zero, n0, "stage", [&](Value* ii) {
                at(ii, jj);
                Value* raw = B.CreateLoad(ty, address(j));
                B.CreateStore(raw, B.CreateInBoundsGEP(ty, staged_[j].buf, staged_index()));
              }, 1, true);
            });
          };
          if (k_.loads[j].strides[size_t(d)] != 1) {
            scalar_stage();
            continue;
          }
          BasicBlock* full = BasicBlock::Create(C, "stage.full", F_);
          BasicBlock* part = BasicBlock::Create(C, "stage.part", F_);
          BasicBlock* staged = BasicBlock::Create(C, "stage.done", F_);
          B.CreateCondBr(B.CreateAnd(B.CreateICmpEQ(n0, rows), B.CreateICmpEQ(n1, cols)), full, part);
          B.SetInsertPoint(full);
          stage_blocks(j, at);
          B.CreateBr(staged);
          B.SetInsertPoint(part);
          scalar_stage();
          B.CreateBr(staged);
          B.SetInsertPoint(staged);
        }
        loop(zero, n0, "outer", [&](Value* i) {
          loop(zero, n1, "outer", [&](Value* j) {
            at(i, j);
            outer_body();
          });
        });
        // Streaming stores wrote the tile to their buffers: out row by row.
        for (size_t j = 0; j < stream_buf_.size(); ++j) {
          if (!stream_buf_[j]) continue;
          loop(zero, n0, "rows", [&](Value* i) {
            iv_[size_t(d)] = B.CreateAdd(t0, i, "", true, true);
            Value* row = B.CreateMul(B.CreateZExt(i, B.getInt64Ty()), B.getInt64(kTileCols * itemsize(k_.stores[j].dtype)));
            copy_out(j, B.CreateInBoundsGEP(B.getInt8Ty(), stream_buf_[j], row),
                     address_along(k_.loads.size() + j, d + 1, t1), n1);
          }, 1, true);
        }
        iv_[size_t(d)] = iv_[size_t(d + 1)] = nullptr;
      }, kTileCols);
    }, kTileRows);
  }

  // Copies a full tile of transposed load j into its tile buffer as square blocks of L x L
  // elements (L lanes of at most 64 bytes, at most 16): L vector loads along the operand's
  // contiguous direction (loop d: the tile's rows), a transpose in registers, L vector stores
  // along the buffer's rows. The transpose is log2(L) rounds of interleaves: row 2k takes the
  // low halves of rows k and k + L/2 lane by lane, row 2k + 1 their high halves; after log2(L)
  // rounds row r holds column r. Against the scalar copy (one load and one store per element,
  // which bounded x.t() + y even from cache), L loads, L log2(L) shuffles and L stores per
  // L * L elements.
  template <class At>
  void stage_blocks(size_t j, At&& at) {
    const DType dt = k_.loads[j].dtype;
    llvm::Type* ty = storage_type(dt);
    const uint64_t lanes = std::min<uint64_t>(16, 64 / uint64_t(itemsize(dt)));
    auto* vty = llvm::FixedVectorType::get(ty, unsigned(lanes));
    std::vector<int> lo_mask, hi_mask;
    for (uint64_t l = 0; l < lanes / 2; ++l) {
      lo_mask.insert(lo_mask.end(), {int(l), int(lanes + l)});
      hi_mask.insert(hi_mask.end(), {int(lanes / 2 + l), int(lanes + lanes / 2 + l)});
    }
    const llvm::Align elem(uint64_t(itemsize(dt))), row_align(lanes * uint64_t(itemsize(dt)));
    Value* zero = llvm::ConstantInt::get(idx_, 0);
    loop(zero, llvm::ConstantInt::get(idx_, kTileRows), "stage.block", [&](Value* bi) {
      loop(zero, llvm::ConstantInt::get(idx_, kTileCols), "stage.block", [&](Value* bj) {
        std::vector<Value*> v(lanes);
        for (uint64_t r = 0; r < lanes; ++r) {
          at(bi, B.CreateAdd(bj, llvm::ConstantInt::get(idx_, r), "", true, true));
          v[r] = B.CreateAlignedLoad(vty, address(j), elem);
        }
        for (uint64_t half = lanes / 2; half >= 1; half /= 2) {
          std::vector<Value*> next(lanes);
          for (uint64_t k = 0; k < lanes / 2; ++k) {
            next[2 * k] = B.CreateShuffleVector(v[k], v[k + lanes / 2], lo_mask);
            next[2 * k + 1] = B.CreateShuffleVector(v[k], v[k + lanes / 2], hi_mask);
          }
          v.swap(next);
        }
        for (uint64_t r = 0; r < lanes; ++r) {
          at(B.CreateAdd(bi, llvm::ConstantInt::get(idx_, r), "", true, true), bj);
          B.CreateAlignedStore(v[r], B.CreateInBoundsGEP(ty, staged_[j].buf, staged_index()), row_align);
        }
      }, lanes, true);
    }, lanes, true);
  }

  // The innermost loop of an elementwise kernel as chunks of kPrefetchChunk elements, each
  // first prefetching the cache lines its contiguous loads will read kPrefetchAhead elements
  // later. The hardware prefetchers alone fall behind when a loop spends long on each line
  // (vector sin and cos over 512-bit lines: measured 1.6 ns per element from memory against
  // 1.1 from cache on one core); one prefetch per line restores the in-cache rate.
  //
  // A streaming store (plan_streams) writes its chunk to a staging buffer on the stack, then
  // copies it out (copy_out: non-temporal stores for the whole lines of an aligned destination):
  // the output's lines are never read into the cache first, which saves a third of a copy's
  // memory traffic.
  void chunked(int d, Value* lo, Value* hi) {
    Value* chunk = llvm::ConstantInt::get(idx_, uint64_t(kPrefetchChunk));
    loop(lo, hi, "chunk", [&](Value* c) {
      for (size_t j = 0; prefetch_ && j < k_.loads.size(); ++j)
        if (streams(j, d)) prefetch_lines(j, iv_, d, c, kPrefetchAhead, kPrefetchChunk);
      Value* stop = B.CreateAdd(c, chunk, "", true, true);
      stop = B.CreateSelect(B.CreateICmpSLT(stop, hi), stop, hi);
      chunk_start_ = c;
      loop(c, stop, "outer", [&](Value* i) {
        iv_[size_t(d)] = i;
        outer_body();
        iv_[size_t(d)] = nullptr;
      }, 1, false, reduce_from() == rank() ? float16_width() : 0);
      chunk_start_ = nullptr;
      for (size_t j = 0; j < stream_buf_.size(); ++j)
        if (stream_buf_[j])
          copy_out(j, stream_buf_[j], address_along(k_.loads.size() + j, d, c), B.CreateSub(stop, c, "", true, true));
    }, uint64_t(kPrefetchChunk));
  }

  // n elements of store j from `src` (its staging buffer) to `dst`: when dst is 64-byte aligned,
  // its whole lines with non-temporal 64-byte stores and the rest (less than a line) plainly;
  // otherwise everything plainly. (A line is written one way only, so no line is shared between
  // the two kinds of store.)
  void copy_out(size_t j, Value* src, Value* dst, Value* n) {
    const uint64_t size = itemsize(k_.stores[j].dtype);
    auto* i64 = B.getInt64Ty();
    Value* bytes = B.CreateMul(B.CreateZExt(n, i64), B.getInt64(size));
    Value* aligned = B.CreateICmpEQ(B.CreateAnd(B.CreatePtrToInt(dst, i64), 63), B.getInt64(0));
    Value* streamed = B.CreateSelect(aligned, B.CreateAnd(bytes, ~uint64_t(63)), B.getInt64(0));
    auto* line = llvm::FixedVectorType::get(B.getInt32Ty(), 16);  // 64 bytes
    llvm::MDNode* nt = llvm::MDNode::get(C, llvm::ConstantAsMetadata::get(B.getInt32(1)));
    BasicBlock* pre = B.GetInsertBlock();
    BasicBlock* body = BasicBlock::Create(C, "stream", F_);
    BasicBlock* rest = BasicBlock::Create(C, "stream.rest", F_);
    B.CreateCondBr(B.CreateICmpUGT(streamed, B.getInt64(0)), body, rest);
    B.SetInsertPoint(body);
    llvm::PHINode* at = B.CreatePHI(i64, 2, "byte");
    at->addIncoming(B.getInt64(0), pre);
    Value* v = B.CreateAlignedLoad(line, B.CreateInBoundsGEP(B.getInt8Ty(), src, at), llvm::Align(64));
    B.CreateAlignedStore(v, B.CreateInBoundsGEP(B.getInt8Ty(), dst, at), llvm::Align(64))
        ->setMetadata(llvm::LLVMContext::MD_nontemporal, nt);
    Value* next = B.CreateAdd(at, B.getInt64(64), "", true, true);
    at->addIncoming(next, body);
    B.CreateCondBr(B.CreateICmpULT(next, streamed), body, rest);
    B.SetInsertPoint(rest);
    B.CreateMemCpy(B.CreateInBoundsGEP(B.getInt8Ty(), dst, streamed), llvm::MaybeAlign(size),
                   B.CreateInBoundsGEP(B.getInt8Ty(), src, streamed), llvm::MaybeAlign(size), B.CreateSub(bytes, streamed));
  }

  // Stores that stream (chunked() copies them out with non-temporal stores): those of a large
  // elementwise kernel that write contiguously along its innermost loop, into memory no other
  // operand of the kernel touches (a line the kernel also reads is in the cache anyway), whose
  // output is too large to be read back from the cache by whatever comes next.
  // In tiles (tiled()) a streaming store's tile goes to its buffer and out row by row.
  // A row-wise kernel with one reduction loop (softmax) streams the stores it makes along the
  // row: the last row loop writes the row to a buffer, copied out after it (stream_rows_).
  void plan_streams() {
    stream_buf_.assign(k_.stores.size(), nullptr);
    if (generic_ || rank() < 1) return;
    const bool rows = reduce_from() == rank() - 1 && k_.loops.back() >= 64 && k_.loops.back() <= kMaxStash;
    if (reduce_from() != rank() && !rows) return;
    if (reduce_from() == rank() && !tile_ && k_.loops.back() < kPrefetchChunk && rank() > 1) return;  // short rows
    int64_t n = 1;
    for (int64_t e : k_.loops) n *= e;
    std::vector<bool> in_row(k_.stores.size(), true);
    if (rows) {
      in_row.assign(k_.stores.size(), false);
      RowPlan plan = row_plan(k_, code_, true);
      for (size_t j : plan.in_row) in_row[j] = true;
      for (size_t j : plan.early) in_row[j] = true;
    }
    for (size_t j = 0; j < k_.stores.size(); ++j) {
      const passes::Access& a = k_.stores[j];
      const size_t op = k_.loads.size() + j;
      if (!in_row[j] || a.buffer < 0 || a.strides.size() != size_t(rank()) || shares_buffer(op)) continue;
      if (!moves(a, size_t(rank() - 1)) || a.strides[size_t(rank() - 1)] != 1) continue;
      if (std::find(in_place_.begin(), in_place_.end(), int(op)) != in_place_.end()) continue;
      if (k_.bytes_read + k_.bytes_written < kStreamMinBytes || n * int64_t(itemsize(a.dtype)) < kStreamMinStore) continue;
      llvm::IRBuilder<> eb(entry_, entry_->begin());
      const uint64_t elems = tile_ ? kTileRows * kTileCols : rows ? uint64_t(k_.loops.back()) : uint64_t(kPrefetchChunk);
      auto* buf = eb.CreateAlloca(storage_type(a.dtype), eb.getInt64(elems), "stream");
      buf->setAlignment(llvm::Align(64));
      stream_buf_[j] = buf;
      stream_rows_ = rows;
    }
  }

  bool streaming() const {
    return std::any_of(stream_buf_.begin(), stream_buf_.end(), [](auto* b) { return b != nullptr; });
  }

  // Operand j's address with loop d at index `at` (the other loops where they are now).
  Value* address_along(size_t j, int d, Value* at) {
    std::vector<Value*> idx(iv_.begin(), iv_.end());
    idx[size_t(d)] = at;
    return address_at(j, idx);
  }
  // Operand j's address at the given loop indices (null: not in that loop), as a plain GEP for
  // prefetches: it may point past the operand (with a negative stride the lines ahead lie below).
  Value* address_at(size_t j, const std::vector<Value*>& idx) {
    const passes::Access& a = operand(j);
    Value* off = llvm::ConstantInt::get(idx_, 0);
    for (size_t e = 0; e < a.sizes.size() && e < idx.size(); ++e) {
      if (!moves(a, e) || !idx[e]) continue;
      off = B.CreateAdd(off, B.CreateMul(idx[e], stride_[j][e]));
    }
    return B.CreateGEP(storage_type(a.dtype), F_->getArg(unsigned(base_operand(j))), off);
  }

  // Load j reads contiguously along loop d (unit stride), so it streams through memory there.
  bool streams(size_t j, int d) const {
    const passes::Access& a = k_.loads[j];
    return a.buffer >= 0 && size_t(d) < a.strides.size() && moves(a, size_t(d)) && std::abs(a.strides[size_t(d)]) == 1;
  }

  // Prefetches (to L1; for writing when `write`) one address per 64-byte line of `elems`
  // elements of operand j, contiguous along loop d, from index `from + skip` of loop d with the
  // other loops at `at`. Plain (not inbounds) addresses: past the operand they are only hints.
  void prefetch_lines(size_t j, std::vector<Value*> at, int d, Value* from, int64_t skip, int64_t elems,
                      bool write = false) {
    const int64_t size = int64_t(itemsize(operand(j).dtype));
    for (int64_t byte = 0; byte < elems * size; byte += 64) {
      at[size_t(d)] = B.CreateAdd(from, llvm::ConstantInt::get(idx_, uint64_t(skip + byte / size)));
      B.CreateIntrinsic(llvm::Intrinsic::prefetch, {B.getPtrTy()},
                        {address_at(j, at), B.getInt32(write ? 1 : 0), B.getInt32(3), B.getInt32(1)});
    }
  }

  // Prefetch when the kernel is elementwise, large, calls the vector math library (a loop that
  // spends few cycles per line is served by the hardware prefetchers: a + b measured up to 8%
  // slower with the prefetches) and some load streams along its innermost loop.
  bool wants_prefetch() const {
    if (tile_ || rank() < 1 || reduce_from() != rank()) return false;
    int64_t n = 1;
    for (int64_t e : k_.loops) n *= e;
    if (!generic_ && n < kPrefetchMinElements) return false;
    bool math = false;
    for (const Instr& in : code_.code) math = math || calls_math(in.op);
    if (!math) return false;
    for (size_t j = 0; j < k_.loads.size(); ++j)
      if (streams(j, rank() - 1)) return true;
    return false;
  }

  // Prefetches the lines of the tile at (t0, t1) of loops d, d + 1 for operands that are
  // contiguous along one of them: their kTileRows or kTileCols runs of lines. A tile's operands
  // are many short runs (a transposed operand's column strip touches a new page in every row),
  // which the hardware prefetchers do not follow; the next tile's lines arrive while this one
  // computes. (Past the last tile the addresses are only hints.)
  // Which: an operand contiguous along d (the transposed one: one short run per row of the
  // source) always; loads contiguous along d + 1 (the tile's rows, each continuing where the
  // previous tile left off) only in kernels that move at least kStreamMinBytes, which come from
  // memory; stores along d + 1 never. Measured on x.t() + y (session 14, docs/perf.md): at
  // [2048, 2048], from the last-level cache, 1.50 ms prefetching every operand, 1.34 without the
  // prefetchw of the output, 1.00 with the transposed operand's lines alone; at [4096, 4096]
  // y's lines are worth it (6.1 against 7.7 ms) and prefetching every other line is not enough
  // (13 ms).
  void prefetch_tile(int d, Value* t0, Value* t1) {
    const bool from_memory = k_.bytes_read + k_.bytes_written >= kStreamMinBytes;
    Value* zero = llvm::ConstantInt::get(idx_, 0);
    for (size_t j = 0; j < k_.loads.size() + k_.stores.size(); ++j) {
      const passes::Access& a = operand(j);
      if (a.buffer < 0 || a.strides.size() != size_t(rank())) continue;
      if (j < k_.loads.size() && base_operand(j) != j) continue;  // read through its store's pointer
      int line = -1;  // the tiled loop the operand is contiguous along
      for (int e : {d + 1, d})
        if (line < 0 && moves(a, size_t(e)) && std::abs(a.strides[size_t(e)]) == 1) line = e;
      if (line < 0) continue;
      const int other = line == d ? d + 1 : d;
      const uint64_t runs = other == d ? kTileRows : kTileCols, run = line == d ? kTileRows : kTileCols;
      const bool write = j >= k_.loads.size();
      if (line == d + 1 && (write || !from_memory)) continue;
      Value* base_line = line == d ? t0 : t1;
      Value* base_other = other == d ? t0 : t1;
      loop(zero, llvm::ConstantInt::get(idx_, runs), "prefetch", [&](Value* r) {
        std::vector<Value*> at(iv_.begin(), iv_.end());
        at[size_t(other)] = B.CreateAdd(base_other, r);
        prefetch_lines(j, at, line, base_line, 0, int64_t(run), write);
      }, 1, true);
    }
  }

  // A load that walks the innermost loop with a stride and the one before it contiguously.
  bool transposed(size_t j) const {
    const passes::Access& a = k_.loads[j];
    if (a.buffer < 0 || a.strides.size() != size_t(rank())) return false;
    int64_t inner = a.sizes[size_t(rank() - 1)] > 1 ? std::abs(a.strides[size_t(rank() - 1)]) : 0;
    int64_t before = a.sizes[size_t(rank() - 2)] > 1 ? std::abs(a.strides[size_t(rank() - 2)]) : 0;
    return inner > 1 && before == 1;
  }
  // Where the current index of the two tiled loops sits in a tile buffer.
  Value* staged_index() {
    return B.CreateAdd(B.CreateMul(tile_i_, llvm::ConstantInt::get(idx_, kTileCols), "", true, true), tile_j_, "", true, true);
  }

  // Tile when the kernel is elementwise with at least two loops and some operand walks the
  // innermost loop with a stride but the one before it contiguously (a transpose).
  bool wants_tiles() const {
    if (rank() < 2 || reduce_from() != rank()) return false;
    // (a size-generic kernel tiles whatever its sizes: partial tiles are handled anyway)
    if (!generic_ &&
        (k_.loops[size_t(rank() - 1)] < 2 * int64_t(kTileCols) || k_.loops[size_t(rank() - 2)] < 2 * int64_t(kTileRows)))
      return false;
    for (size_t j = 0; j < k_.loads.size() + k_.stores.size(); ++j) {
      const passes::Access& a = operand(j);
      if (a.buffer < 0 || a.strides.size() != size_t(rank())) continue;
      int64_t inner = a.sizes[size_t(rank() - 1)] > 1 ? std::abs(a.strides[size_t(rank() - 1)]) : 0;
      int64_t before = a.sizes[size_t(rank() - 2)] > 1 ? std::abs(a.strides[size_t(rank() - 2)]) : 0;
      if (inner > 1 && before == 1) return true;
    }
    return false;
  }

  // The reduction loops [d, rank): `body` runs innermost.
  template <class Body>
  void row_loops(int d, Body&& body, bool ahead = false) {
    if (d == rank()) {
      body();
      return;
    }
    if (ahead && d == rank() - 1) {
      row_ahead(d, body);
      return;
    }
    // A partial reduction runs its part of loop 0.
    bool part = part_ == ReductionPart::Partial && d == 0;
    loop(part ? begin_ : llvm::ConstantInt::get(idx_, 0),
         part ? end_ : extent_[size_t(d)], "row", [&](Value* i) {
           iv_[size_t(d)] = i;
           row_loops(d + 1, body);
           iv_[size_t(d)] = nullptr;
         }, 1, false, d == rank() - 1 ? float16_width() : 0);
  }

  // The row loop d (the innermost, the kernel's only reduction loop) in chunks of
  // kPrefetchChunk elements, each first prefetching the same chunk of the row kRowsAhead rows
  // on, for every load contiguous along the row. A row of a few KiB is a page or less: the
  // hardware prefetchers stop at page boundaries, so every row would start with a full miss.
  // (Past the last row the addresses are only hints.)
  template <class Body>
  void row_ahead(int d, Body&& body) {
    Value* chunk = llvm::ConstantInt::get(idx_, uint64_t(kPrefetchChunk));
    Value* hi = extent_[size_t(d)];
    const int row = reduce_from() - 1;  // the outer loop whose next index is the next row
    loop(llvm::ConstantInt::get(idx_, 0), hi, "row.chunk", [&](Value* c) {
      for (size_t j = 0; j < k_.loads.size(); ++j) {
        if (!streams(j, d) || !moves(k_.loads[j], size_t(row))) continue;
        std::vector<Value*> at(iv_.begin(), iv_.end());
        at[size_t(row)] = B.CreateAdd(iv_[size_t(row)], llvm::ConstantInt::get(idx_, uint64_t(kRowsAhead)));
        prefetch_lines(j, at, d, c, 0, kPrefetchChunk);
      }
      Value* stop = B.CreateAdd(c, chunk, "", true, true);
      stop = B.CreateSelect(B.CreateICmpSLT(stop, hi), stop, hi);
      loop(c, stop, "row", [&](Value* i) {
        iv_[size_t(d)] = i;
        body();
        iv_[size_t(d)] = nullptr;
      }, 1, false, float16_width());
    }, uint64_t(kPrefetchChunk));
  }

  // Which row loop of a row-wise kernel prefetches rows ahead (row_ahead), or 0 for none: the
  // second (the first reads the row from memory, the second from L1), or the only one. As for
  // elementwise kernels (wants_prefetch), only where the row's code calls the vector math
  // library: softmax's exp pass is compute-bound, and without the prefetch the memory sits
  // idle while it runs and the next row's first pass then waits on memory (interleaved A/B on
  // an Intel host at [4096, 1024]: softmax 1.21 -> 1.05 ms two rows ahead, 1.17 one row ahead;
  // log_softmax within 2%); a layer norm, whose passes are short, ran 2-10% slower with it.
  // Kernels of at least kPrefetchMinElements with one reduction loop, rows of kPrefetchChunk
  // to kMaxStash elements, and a load contiguous along the row.
  int ahead_depth() const {
    if (generic_ || part_ != ReductionPart::Whole || rank() < 2 || reduce_from() != rank() - 1) return 0;
    const int64_t row = k_.loops.back();
    if (row > kMaxStash || row < kPrefetchChunk) return 0;
    int64_t n = 1;
    for (int64_t e : k_.loops) n *= e;
    if (n < kPrefetchMinElements) return 0;
    bool math = false;
    for (const Instr& in : code_.code) math = math || (in.row && calls_math(in.op));
    if (!math) return 0;
    for (size_t j = 0; j < k_.loads.size(); ++j)
      if (streams(j, rank() - 1) && moves(k_.loads[j], size_t(rank() - 2))) return std::min(2, code_.depth);
    return 0;
  }

  // Per outer index: one loop over the row per reduction depth, then the stores.
  void outer_body() {
    acc_.assign(code_.code.size(), nullptr);
    nan_.assign(code_.code.size(), nullptr);
    RowPlan plan = row_plan(k_, code_, true);
    const std::vector<size_t>&in_row = plan.in_row, &per_row = plan.per_row, &early = plan.early;
    const std::vector<std::vector<int>>&reduces = plan.reduces, &needs = plan.needs;
    plan_stash(needs, reduces);
    const int ahead = ahead_depth();

    // (a split reduction's finishing step has no row loops: it combines the parts instead)
    for (int depth = 1; part_ != ReductionPart::Finish && depth <= code_.depth; ++depth) {
      const std::vector<int>& need = needs[size_t(depth - 1)];
      for (int id : need)
        if (!code_.code[size_t(id)].row) value(id);
      for (int r : reduces[size_t(depth)]) {
        const Instr& in = code_.code[size_t(r)];
        llvm::IRBuilder<> eb(entry_, entry_->begin());
        acc_[size_t(r)] = eb.CreateAlloca(compute_type(in.type), nullptr, "acc");
        B.CreateStore(identity(in), acc_[size_t(r)]);
        if (tracks_nan_apart(in)) {
          // A float max/min keeps NaN (eager's amax does) as a flag beside a plain maximum:
          // over rows of 100, softmax ran 1.12 -> 0.72 ms and amax 0.42 -> 0.18 against
          // NaN-propagating combines (docs/perf.md, session 15).
          nan_[size_t(r)] = eb.CreateAlloca(B.getInt1Ty(), nullptr, "nan");
          B.CreateStore(B.getFalse(), nan_[size_t(r)]);
        }
      }
      start_scans(need);
      // Row values from math calls that this pass reduces get a loop of their own that fills
      // their stash (plan_stash); the reducing loop below then reads them back.
      bool calls = false;
      for (int id : need) calls = calls || (stash_[size_t(id)] && !stash_ready_[size_t(id)]);
      calls = calls && !reduces[size_t(depth)].empty();
      if (calls) {
        row_loops(reduce_from(), [&] {
          for (int id : need)
            if (stash_[size_t(id)] && !stash_ready_[size_t(id)]) value(id);
          forget_rows();
        }, depth == ahead);
        start_scans(need);  // (a scan the calls needed runs again from the row's start)
      }
      row_loops(reduce_from(), [&] {
        for (int id : need)
          if (code_.code[size_t(id)].row) value(id);
        for (int r : reduces[size_t(depth)]) {
          const Instr& in = code_.code[size_t(r)];
          Value* a = B.CreateLoad(compute_type(in.type), acc_[size_t(r)]);
          Value* x = value(in.args[0]);
          if (llvm::AllocaInst* nan = nan_[size_t(r)])
            B.CreateStore(B.CreateOr(B.CreateLoad(B.getInt1Ty(), nan), is_nan(x)), nan);
          B.CreateStore(combine(in, a, x, nan_[size_t(r)] != nullptr), acc_[size_t(r)]);
        }
        if (depth == 1)
          store_all(early);
        forget_rows();
      }, depth == ahead && !calls);
      for (int r : reduces[size_t(depth)]) {
        llvm::Type* t = compute_type(code_.code[size_t(r)].type);
        Value* v = B.CreateLoad(t, acc_[size_t(r)]);
        if (llvm::AllocaInst* nan = nan_[size_t(r)])
          v = B.CreateSelect(B.CreateLoad(B.getInt1Ty(), nan), llvm::ConstantFP::getNaN(t), v);
        memo_[size_t(r)] = v;
      }
    }
    if (part_ == ReductionPart::Finish) finish_parts(reduces[1]);
    if (part_ == ReductionPart::Partial) {
      // This call's accumulators, slot by slot; the finishing call combines them.
      for (size_t q = 0; q < reduces[1].size(); ++q)
        B.CreateStore(memo_[size_t(reduces[1][q])], B.CreateConstInBoundsGEP1_64(B.getInt8Ty(), parts_, 8 * q));
      return;
    }
    store_all(per_row);
    if (!in_row.empty()) {
      for (int id : needs.back())
        if (!code_.code[size_t(id)].row) value(id);
      start_scans(needs.back());
      row_loops(reduce_from(), [&] {
        store_all(in_row);
        forget_rows();
      });
    }
    for (size_t j = 0; j < k_.stores.size(); ++j) {
      if (!stream_rows_ || !stream_buf_[j]) continue;
      std::vector<Value*> start(iv_.begin(), iv_.end());
      start[size_t(rank() - 1)] = llvm::ConstantInt::get(idx_, 0);
      copy_out(j, stream_buf_[j], address_at(k_.loads.size() + j, start), extent_[size_t(rank() - 1)]);
    }
  }

  // A reduction over rows strided in memory into outputs that neighbour each other in memory
  // (x.sum(0) of a row-major matrix: a bias gradient) runs by columns: loop K (the innermost
  // outer loop) in blocks of kColumns outputs whose accumulators are a stack array, each row of
  // the block read along K into them, the vector lanes along K. Output by output, every row is
  // a new cache line, and LLVM walked each column with gathers: [4096, 1024].sum(0) took 15 ms
  // compiled against eager's 0.4. Kernels with one pass of reductions, no scans and only
  // per-row stores, where a load runs contiguously along K and none along a reduction loop.
  static constexpr uint64_t kColumns = 256;
  bool wants_columns() const {
    const int K = reduce_from() - 1;
    if (K < 0 || reduce_from() >= rank() || part_ != ReductionPart::Whole || generic_ || code_.depth != 1 ||
        (flat_ > 1 && flat_ > K) || tile_ || chunk_ || streaming() || k_.loops[size_t(K)] < 8)
      return false;
    for (const Instr& in : code_.code)
      if (in.op == EOp::Scan || in.op == EOp::RowIndex) return false;
    const RowPlan plan = row_plan(k_, code_, true);
    if (!plan.in_row.empty() || !plan.early.empty()) return false;
    bool along_k = false;
    for (const passes::Access& a : k_.loads) {
      along_k = along_k || (moves(a, size_t(K)) && a.strides[size_t(K)] == 1);
      for (int d = reduce_from(); d < rank(); ++d)
        if (moves(a, size_t(d)) && std::abs(a.strides[size_t(d)]) == 1) return false;
    }
    return along_k;
  }
  void columns(int K, Value* lo, Value* hi) {
    const RowPlan plan = row_plan(k_, code_, true);
    const std::vector<int>& reduces = plan.reduces[1];
    std::vector<llvm::AllocaInst*> block(code_.code.size(), nullptr);
    for (int r : reduces) {
      llvm::IRBuilder<> eb(entry_, entry_->begin());
      block[size_t(r)] = eb.CreateAlloca(compute_type(code_.code[size_t(r)].type), eb.getInt64(kColumns), "acc.cols");
      block[size_t(r)]->setAlignment(llvm::Align(64));
    }
    auto forget_all = [&] { std::fill(memo_.begin(), memo_.end(), nullptr); };
    auto width = llvm::ConstantInt::get(idx_, kColumns);
    Value* blocks = B.CreateUDiv(B.CreateAdd(B.CreateSub(hi, lo), llvm::ConstantInt::get(idx_, kColumns - 1)), width);
    loop(llvm::ConstantInt::get(idx_, 0), blocks, "cols.block", [&](Value* b) {
      Value* c0 = B.CreateAdd(lo, B.CreateMul(b, width));
      Value* rest = B.CreateSub(hi, c0);
      Value* n = B.CreateSelect(B.CreateICmpSLT(rest, width), rest, width);
      auto at = [&](int r, Value* c) {
        return B.CreateInBoundsGEP(compute_type(code_.code[size_t(r)].type), block[size_t(r)], c);
      };
      loop(llvm::ConstantInt::get(idx_, 0), n, "cols.init", [&](Value* c) {
        for (int r : reduces) B.CreateStore(identity(code_.code[size_t(r)]), at(r, c));
      });
      row_loops(reduce_from(), [&] {
        loop(llvm::ConstantInt::get(idx_, 0), n, "cols", [&](Value* c) {
          iv_[size_t(K)] = B.CreateAdd(c0, c);
          for (int id : plan.needs[0]) value(id);
          for (int r : reduces) {
            const Instr& in = code_.code[size_t(r)];
            Value* a = B.CreateLoad(compute_type(in.type), at(r, c));
            B.CreateStore(combine(in, a, value(in.args[0])), at(r, c));
          }
          forget_all();
        });
      });
      loop(llvm::ConstantInt::get(idx_, 0), n, "cols.store", [&](Value* c) {
        iv_[size_t(K)] = B.CreateAdd(c0, c);
        for (int r : reduces) memo_[size_t(r)] = B.CreateLoad(compute_type(code_.code[size_t(r)].type), at(r, c));
        store_all(plan.per_row);
        forget_all();
      });
      iv_[size_t(K)] = nullptr;
    });
  }

  // A split reduction's last step: every reduction's accumulator combined over the parts
  // [begin, end) the partial calls wrote, in order (the same combine as the row loop's).
  void finish_parts(const std::vector<int>& reduces) {
    const uint64_t n = reduces.size();
    for (size_t q = 0; q < n; ++q) {
      const Instr& in = code_.code[size_t(reduces[q])];
      llvm::IRBuilder<> eb(entry_, entry_->begin());
      acc_[size_t(reduces[q])] = eb.CreateAlloca(compute_type(in.type), nullptr, "acc");
      B.CreateStore(identity(in), acc_[size_t(reduces[q])]);
    }
    loop(begin_, end_, "part", [&](Value* p) {
      Value* base = B.CreateMul(B.CreateZExt(p, B.getInt64Ty()), B.getInt64(8 * n));
      for (size_t q = 0; q < n; ++q) {
        const Instr& in = code_.code[size_t(reduces[q])];
        llvm::Type* t = compute_type(in.type);
        Value* slot = B.CreateInBoundsGEP(B.getInt8Ty(), parts_, B.CreateAdd(base, B.getInt64(8 * q)));
        Value* a = B.CreateLoad(t, acc_[size_t(reduces[q])]);
        B.CreateStore(combine(in, a, B.CreateLoad(t, slot)), acc_[size_t(reduces[q])]);
      }
    }, 1, true);
    for (int r : reduces) memo_[size_t(r)] = B.CreateLoad(compute_type(code_.code[size_t(r)].type), acc_[size_t(r)]);
  }

  // The scans a row loop computes start from their identity: each loop that needs one runs it
  // from the row's first element (a later loop recomputes it rather than keeping the row).
  void start_scans(const std::vector<int>& need) {
    if (scan_.empty()) scan_.assign(code_.code.size(), nullptr);
    for (int id : need) {
      const Instr& in = code_.code[size_t(id)];
      if (in.op != EOp::Scan) continue;
      if (!scan_[size_t(id)]) {
        llvm::IRBuilder<> eb(entry_, entry_->begin());
        scan_[size_t(id)] = eb.CreateAlloca(compute_type(in.type), nullptr, "scan");
      }
      B.CreateStore(identity(in), scan_[size_t(id)]);
    }
  }

  // Row values that cost a transcendental call are kept in a stack array the size of a row
  // (the row is in L1 either way; the call is what costs) when
  // - more than one row loop needs them (softmax's exp): the first computes them, later loops
  //   read them back instead of calling again;
  // - a reduction of their pass depends on them (sum(exp(x - max)), log_softmax's): then they
  //   are computed by a loop of their own and reduced by the next (outer_body). x86-64's calling
  //   convention keeps no vector register across a call, so an accumulator updated between
  //   calls is stored and reloaded around each one, and every call waits on the previous
  //   iteration's store: log_softmax [4096, 1024] ran 1.57 ms that way and 1.39 split, softmax
  //   (which already kept its exp) 1.17 either way (docs/perf.md, session 15).
  void plan_stash(const std::vector<std::vector<int>>& needs, const std::vector<std::vector<int>>& reduces) {
    stash_.assign(code_.code.size(), nullptr);
    stash_ready_.assign(code_.code.size(), false);
    int64_t row = 1;
    for (int d = reduce_from(); d < rank(); ++d) row *= k_.loops[size_t(d)];
    if (row > kMaxStash || generic_) return;  // (generic: the row's length is unknown)
    std::vector<int> uses(code_.code.size(), 0);
    std::vector<bool> reduced(code_.code.size(), false);  // needed by a pass that reduces
    for (size_t d = 0; d < needs.size(); ++d) {
      const bool reduces_here = d + 1 < reduces.size() && !reduces[d + 1].empty();
      for (int id : needs[d]) {
        uses[size_t(id)]++;
        if (reduces_here) reduced[size_t(id)] = true;
      }
    }
    int64_t bytes = 0;  // (on the kernel threads' stacks: at most kStashBudget, first come)
    for (size_t i = 0; i < code_.code.size(); ++i) {
      const Instr& in = code_.code[i];
      if (!in.row || !calls_math(in.op) || (uses[i] < 2 && !reduced[i])) continue;
      llvm::Type* t = compute_type(in.type);
      const int64_t size = row * int64_t(M.getDataLayout().getTypeAllocSize(t)) + kStashSkew;
      if (bytes + size > kStashBudget) continue;
      bytes += size;
      // Half a page past a page boundary. A row of whole pages starts at the same offset in
      // every page of a page-aligned buffer; a stash at about that offset too makes loads that
      // follow its stores (the next elements of the row, or of the stash after the output's
      // stores) match them in the address bits the core compares first (4K aliasing) and
      // wait. Where the stash fell was up to the thread's stack: softmax [4096, 1024] ran 0.93-
      // 1.01 ms in most processes, 1.18-1.78 in others, 1.21 in every one without address
      // randomisation (docs/perf.md, session 15).
      llvm::IRBuilder<> eb(entry_, entry_->begin());
      llvm::AllocaInst* a = eb.CreateAlloca(eb.getInt8Ty(), eb.getInt64(uint64_t(size)), "stash");
      a->setAlignment(llvm::Align(kPage));
      stash_[i] = eb.CreateConstInBoundsGEP1_64(eb.getInt8Ty(), a, uint64_t(kStashSkew), "stash.row");
    }
  }

  // The position in the row (row-major over the reduction loops), for the stash.
  Value* row_index() {
    Value* at = llvm::ConstantInt::get(idx_, 0);
    for (int d = reduce_from(); d < rank(); ++d)
      at = B.CreateAdd(B.CreateMul(at, extent_[size_t(d)], "", true, true),
                       iv_[size_t(d)], "", true, true);
    return at;
  }

  void forget_rows() {
    for (size_t i = 0; i < memo_.size(); ++i) {
      if (!code_.code[i].row) continue;
      if (memo_[i] && !stash_.empty() && stash_[i]) stash_ready_[i] = true;  // kept by this loop
      memo_[i] = nullptr;
    }
  }

  // The loop extents and operand strides: constants, or in a size-generic kernel the values
  // generic_args() lists, loaded from `args` after the host numbers (one slot per load).
  void read_sizes() {
    size_t slot = k_.loads.size();
    auto next = [&] {
      return static_cast<Value*>(B.CreateLoad(idx_, B.CreateConstInBoundsGEP1_64(B.getInt64Ty(), args_, uint64_t(slot++))));
    };
    extent_.clear();
    for (int64_t e : k_.loops) extent_.push_back(generic_ ? next() : llvm::ConstantInt::get(idx_, uint64_t(e)));
    stride_.assign(k_.loads.size() + k_.stores.size(), {});
    for (size_t j = 0; j < stride_.size(); ++j) {
      const passes::Access& a = operand(j);
      stride_[j].assign(a.strides.size(), nullptr);
      if (a.buffer < 0) continue;
      for (size_t d = 0; d < a.strides.size(); ++d) {
        bool arg = generic_ && d < k_.loops.size() && stride_is_arg(a, d);
        stride_[j][d] = arg ? next() : llvm::ConstantInt::get(idx_, uint64_t(a.strides[d]), true);
      }
    }
  }

  // ---- operands ----

  Value* address(size_t j) {
    const passes::Access& a = operand(j);
    // The caller passes the address of the access's first element: its offset is applied.
    Value* off = llvm::ConstantInt::get(idx_, 0);
    for (size_t d = 0; d < a.sizes.size() && d < iv_.size(); ++d) {
      if (!moves(a, d) || !iv_[d]) continue;
      Value* term = B.CreateMul(iv_[d], stride_[j][d], "", false, true);
      off = B.CreateAdd(off, term, "", false, true);
    }
    return B.CreateInBoundsGEP(storage_type(a.dtype), F_->getArg(unsigned(base_operand(j))), off);
  }

  Value* load(int j, DType to) {
    const passes::Access& a = k_.loads[size_t(j)];
    if (a.buffer < 0) {
      Value* bits = B.CreateLoad(B.getInt64Ty(), B.CreateConstInBoundsGEP1_64(B.getInt64Ty(), args_, uint64_t(j)));
      if (is_floating(a.dtype)) return convert(B.CreateBitCast(bits, B.getDoubleTy()), DType::Float64, to);
      return convert(bits, DType::Int64, to);
    }
    Value* raw = staged_.empty() || !staged_[size_t(j)].buf
                     ? B.CreateLoad(storage_type(a.dtype), address(size_t(j)))
                     : B.CreateLoad(storage_type(a.dtype), B.CreateInBoundsGEP(storage_type(a.dtype), staged_[size_t(j)].buf,
                                                                               staged_index()));
    Value* v;
    if (a.dtype == DType::BFloat16)
      v = B.CreateBitCast(B.CreateShl(B.CreateZExt(raw, B.getInt32Ty()), 16), B.getFloatTy());
    else if (a.dtype == DType::Float16)
      v = B.CreateFPExt(raw, B.getFloatTy());
    else if (a.dtype == DType::Bool)
      v = B.CreateICmpNE(raw, B.getInt8(0));
    else
      v = raw;
    return convert(v, compute_dtype(a.dtype), to);
  }

  // Stores operands `js` of one point after computing every value they store. Code is emitted
  // where it is first used, so storing one by one would put a load needed only by a later
  // store after an earlier store, and that store may write the memory the load reads (an
  // in-place update of the element the kernel also reads, as written back by fuse).
  void store_all(const std::vector<size_t>& js) {
    for (size_t j : js) value(code_.stores[j]);
    for (size_t j : js) store(j);
  }

  void store(size_t j) {
    const passes::Access& a = k_.stores[j];
    int id = code_.stores[j];
    Value* v = convert(value(id), code_.code[size_t(id)].type, compute_dtype(a.dtype));
    if (a.dtype == DType::BFloat16) v = to_bf16(v);
    else if (a.dtype == DType::Float16) v = B.CreateFPTrunc(v, B.getHalfTy());
    else if (a.dtype == DType::Bool) v = B.CreateZExt(v, B.getInt8Ty());
    if (j < stream_buf_.size() && stream_buf_[j]) {
      // A streaming store writes its staging buffer: at the tile's, the row's or the chunk's index.
      Value* at = tile_          ? staged_index()
                  : stream_rows_ ? row_index()
                                 : B.CreateSub(iv_[size_t(rank() - 1)], chunk_start_, "", true, true);
      B.CreateStore(v, B.CreateInBoundsGEP(storage_type(a.dtype), stream_buf_[j], at));
      return;
    }
    B.CreateStore(v, address(k_.loads.size() + j));
  }

  Value* value(int id) {
    if (Value* v = memo_[size_t(id)]) return v;
    const Instr& in = code_.code[size_t(id)];
    Value* stash = stash_.empty() ? nullptr : stash_[size_t(id)];
    llvm::Type* stash_type = compute_type(in.type);
    if (stash && stash_ready_[size_t(id)]) {
      Value* v = B.CreateLoad(stash_type, B.CreateInBoundsGEP(stash_type, stash, row_index()));
      memo_[size_t(id)] = v;
      return v;
    }
    auto arg = [&](size_t i) { return value(in.args[i]); };
    llvm::Type* ty = compute_type(in.type);
    bool fl = is_floating(in.type);
    Value* v = nullptr;
    switch (in.op) {
      case EOp::Load:
      case EOp::Arg: v = load(in.index, in.type); break;
      case EOp::RowCount: {
        Value* n = llvm::ConstantInt::get(idx_, 1);
        for (int d = reduce_from(); d < rank(); ++d) n = B.CreateMul(n, extent_[size_t(d)]);
        v = B.CreateUIToFP(n, ty);
        break;
      }
      case EOp::Reduce:
        // Computed by its row loop before anything that uses it is emitted.
        throw std::logic_error("kernel code: a reduction used before its loop");
      case EOp::RowIndex: v = B.CreateSExtOrTrunc(row_index(), B.getInt64Ty()); break;
      case EOp::Scan: {
        // The running value: this point's element added to the row so far, in row order
        // (no reassociation: each partial result is stored, as eager's loop computes it).
        if (in.reducer != Reducer::Sum || scan_.empty() || !scan_[size_t(id)])
          throw std::logic_error("kernel code: a scan outside a row loop, or not a sum");
        Value* prev = B.CreateLoad(ty, scan_[size_t(id)]);
        v = fl ? B.CreateFAdd(prev, arg(0)) : B.CreateAdd(prev, arg(0));
        B.CreateStore(v, scan_[size_t(id)]);
        break;
      }
      default: {
        // Arguments last first: the order only decides how the IR reads, and this is the one
        // kiln has always emitted (the goldens match it).
        std::vector<Value*> args(in.args.size());
        std::vector<DType> types(in.args.size());
        for (size_t i = in.args.size(); i-- > 0;) {
          args[i] = value(in.args[i]);
          types[i] = code_.code[size_t(in.args[i])].type;
        }
        v = arith(in, args, types);
      }
    }
    if (stash) B.CreateStore(v, B.CreateInBoundsGEP(stash_type, stash, row_index()));
    memo_[size_t(id)] = v;
    return v;
  }
};

}  // namespace

int thread_loops(const passes::Kernel& k, bool generic) {
  const int rank = int(k.loops.size()), rf = std::min(k.reduce_from, rank);
  if (rf == 0) return 0;
  if (generic) return 1;
  const int most = rf < rank ? rf : std::max(1, rank - 2);
  int n = 1;
  for (int64_t rows = k.loops[0]; n < most && rows < kThreadRowsMin; ++n) rows *= k.loops[size_t(n)];
  return n;
}

void emit_kernel(llvm::Module& m, const std::string& name, const passes::Kernel& k, const KernelCode& code, bool generic) {
  Emitter(m, k, code, ReductionPart::Whole, generic).emit(name);
  if (!splits_reduction(k, code, true)) return;
  Emitter(m, k, code, ReductionPart::Partial, generic).emit(name + kPartialSuffix);
  Emitter(m, k, code, ReductionPart::Finish, generic).emit(name + kFinishSuffix);
}

}  // namespace kiln::codegen::cpu
