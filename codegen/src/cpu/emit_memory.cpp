// How a kernel walks memory (the Emitter, emitter.h): square tiles for transposed reads, chunks
// that prefetch their streams ahead, non-temporal stores through staging buffers.
#include "emitter.h"

namespace kiln::codegen::cpu {

// Loops d and d + 1 (the innermost two, no reductions) in square blocks: an operand that is
// contiguous along d but strided along d + 1 (a transposed read) then reuses the cache lines
// a block touches instead of missing on every element.
void Emitter::tiled(int d, Value* lo, Value* hi) {
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
            }, 1, Hint::Scalar);
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
        }, 1, Hint::Scalar);
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
void Emitter::stage_blocks(size_t j, At&& at) {
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
    }, lanes, Hint::Scalar);
  }, lanes, Hint::Scalar);
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
void Emitter::chunked(int d, Value* lo, Value* hi) {
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
    }, 1, Hint::None, reduce_from() == rank() ? float16_width() : 0);
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
void Emitter::copy_out(size_t j, Value* src, Value* dst, Value* n) {
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
void Emitter::plan_streams() {
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

bool Emitter::streaming() const {
  return std::any_of(stream_buf_.begin(), stream_buf_.end(), [](auto* b) { return b != nullptr; });
}

// Operand j's address with loop d at index `at` (the other loops where they are now).
Value* Emitter::address_along(size_t j, int d, Value* at) {
  std::vector<Value*> idx(iv_.begin(), iv_.end());
  idx[size_t(d)] = at;
  return address_at(j, idx);
}

// Operand j's address at the given loop indices (null: not in that loop), as a plain GEP for
// prefetches: it may point past the operand (with a negative stride the lines ahead lie below).
Value* Emitter::address_at(size_t j, const std::vector<Value*>& idx) {
  const passes::Access& a = operand(j);
  Value* off = llvm::ConstantInt::get(idx_, 0);
  for (size_t e = 0; e < a.sizes.size() && e < idx.size(); ++e) {
    if (!moves(a, e) || !idx[e]) continue;
    off = B.CreateAdd(off, B.CreateMul(idx[e], stride_[j][e]));
  }
  return B.CreateGEP(storage_type(a.dtype), F_->getArg(unsigned(base_operand(j))), off);
}

// Load j reads contiguously along loop d (unit stride), so it streams through memory there.
bool Emitter::streams(size_t j, int d) const {
  const passes::Access& a = k_.loads[j];
  return a.buffer >= 0 && !a.iota && size_t(d) < a.strides.size() && moves(a, size_t(d)) &&
         std::abs(a.strides[size_t(d)]) == 1;
}

// Prefetches (to L1; for writing when `write`) one address per 64-byte line of `elems`
// elements of operand j, contiguous along loop d, from index `from + skip` of loop d with the
// other loops at `at`. Plain (not inbounds) addresses: past the operand they are only hints.
void Emitter::prefetch_lines(size_t j, std::vector<Value*> at, int d, Value* from, int64_t skip, int64_t elems,
                    bool write) {
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
bool Emitter::wants_prefetch() const {
  if (tile_ || rank() < 1 || reduce_from() != rank()) return false;
  int64_t n = 1;
  for (int64_t e : k_.loops) n *= e;
  if (!generic_ && n < kPrefetchMinElements) return false;
  bool math = false;
  for (const Instr& in : code_.code) math = math || calls_math(in);
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
// Which: an operand contiguous along d (the transposed one: one short run per row of the source)
// always; loads contiguous along d + 1 (the tile's rows, each continuing where the previous tile
// left off) only in kernels that move at least kStreamMinBytes, which come from memory; stores
// along d + 1 never. Measured on x.t() + y (docs/perf-journal.md, "In-register tile transposes, a
// parallel eager copy"): at [2048, 2048], from the last-level cache, 1.50 ms prefetching every
// operand, 1.34 without the prefetchw of the output, 1.00 with the transposed operand's lines
// alone; at [4096, 4096] y's lines are worth it (6.1 against 7.7 ms) and prefetching every other
// line is not enough (13 ms).
void Emitter::prefetch_tile(int d, Value* t0, Value* t1) {
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
    }, 1, Hint::Scalar);
  }
}

// A load that walks the innermost loop with a stride and the one before it contiguously.
bool Emitter::transposed(size_t j) const {
  const passes::Access& a = k_.loads[j];
  if (a.buffer < 0 || a.iota || a.strides.size() != size_t(rank())) return false;
  int64_t inner = a.sizes[size_t(rank() - 1)] > 1 ? std::abs(a.strides[size_t(rank() - 1)]) : 0;
  int64_t before = a.sizes[size_t(rank() - 2)] > 1 ? std::abs(a.strides[size_t(rank() - 2)]) : 0;
  return inner > 1 && before == 1;
}

// Where the current index of the two tiled loops sits in a tile buffer.
Value* Emitter::staged_index() {
  return B.CreateAdd(B.CreateMul(tile_i_, llvm::ConstantInt::get(idx_, kTileCols), "", true, true), tile_j_, "", true, true);
}

// Tile when the kernel is elementwise with at least two loops and some operand walks the
// innermost loop with a stride but the one before it contiguously (a transpose).
bool Emitter::wants_tiles() const {
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

}  // namespace kiln::codegen::cpu
