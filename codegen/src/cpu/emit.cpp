// LLVM IR for one kernel: the loop nest over the kernel's loop space, operand addresses from
// each access's sizes and strides, and the kernel code (expr.h) instruction by instruction.
//
// The IR is written plainly (scalar loops, accumulators in stack slots) and left to LLVM's O3
// pipeline to vectorise: innermost loops over contiguous operands become vector loops, broadcast
// operands are hoisted, reductions marked reassociable become vector partial sums, and the libm
// calls of transcendentals become vector calls through the vector-library table (jit.cpp).
// Operands that no other operand of the kernel shares a buffer with are `noalias`, so the
// vectoriser needs no run-time overlap checks for them.
#include "emitter.h"

#include "jit.h"

#include <cmath>
#include <limits>

namespace kiln::codegen::cpu {

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

Emitter::Emitter(llvm::Module& m, const passes::Kernel& k, const KernelCode& code, ReductionPart part, bool generic,
                 int depth)
    : ScalarBuilder(m), k_(k), code_(code), part_(part), part_depth_(depth), generic_(generic),
      memo_(code.code.size(), nullptr) {
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
  for (const Instr& in : code.code) scalar_rows_ = scalar_rows_ && !calls_math(in);
  for (const auto* ops : {&k.loads, &k.stores})
    for (const passes::Access& a : *ops)
      scalar_rows_ = scalar_rows_ && a.dtype != DType::Float16 && a.dtype != DType::BFloat16;
  // Rows of 16 to 63 elements, contiguous, whose row values call the vector math library
  // (softmax over 16 classes) run row-wise as longer rows do: the loop over the rows scalar,
  // each row loop vectorised along the row and never unrolled whole (Hint::NotUnrolled). LLVM
  // unrolled them whole and vectorised the loop over the rows, a lane per row, every element by
  // a gather and every store by a scatter: softmax over float32 rows of 16 ran 0.98 ms, 0.56
  // row-wise; over rows of 32 2.19 and 0.92; float16 rows of 16 3.10 and 0.62. Rows of 8 and
  // 10 keep the gathers (0.19 against 0.45, 0.45 against 0.86). Rows of 20 ran slower row-wise
  // (1.29 against 1.77: the 4 past the last 16 take a call each) and go row-wise all the same,
  // as every other length measured from 16 to 63 ran faster: docs/perf-journal.md, "Compiled
  // column reductions split along their rows", its compiled softmax over short rows.
  if (rowwise_ || generic_ || rank() < 1 || reduce_from() != rank() - 1 || row < kMinShortRow) return;
  const size_t r = size_t(rank() - 1);
  bool along = false, contiguous = true;
  for (const auto* ops : {&k.loads, &k.stores})
    for (const passes::Access& a : *ops) {
      if (a.buffer < 0 || a.sizes.size() <= r || !moves(a, r)) continue;
      along = true;
      contiguous = contiguous && std::abs(a.strides[r]) == 1;
    }
  short_rows_ = row_calls_math() && along && contiguous;
  if (short_rows_) rowwise_ = scalar_rows_ = true;
}

void Emitter::emit(const std::string& name) {
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
  // (a deep split's steps: the partial accumulators, then the carry slots)
  const bool carry = split && reduce_from() == 0 && part_depths(code_) > 1;
  if (split) params.push_back(ptr);
  if (carry) params.push_back(ptr);
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
  if (carry) {
    carry_ = F_->getArg(unsigned(nops + 5));
    F_->addParamAttr(unsigned(nops + 5), llvm::Attribute::NoAlias);
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
  if (carry) call_args.push_back(B.CreateLoad(ptr, B.CreateConstInBoundsGEP1_64(ptr, E->getArg(0), nops + 1), "carry"));
  B.CreateCall(F_, call_args);
  B.CreateRetVoid();
}

// Whether another operand may overlap operand j's memory. A load that reads through exactly
// the index a store writes (an in-place update: x.add_(1)) uses the store's pointer
// (in_place_), so the pair does not count: the vectoriser sees one pointer and a dependence
// distance of 0, where two pointers into one buffer would make it check for overlap at run
// time, find it, and run the scalar loop.
bool Emitter::shares_buffer(size_t j) const {
  const passes::Access& a = operand(j);
  if (a.buffer < 0) return false;
  for (size_t i = 0; i < k_.loads.size() + k_.stores.size(); ++i) {
    if (i == j || operand(i).buffer != a.buffer) continue;
    if (base_operand(i) == base_operand(j)) continue;
    return true;
  }
  return false;
}

// Whether x is NaN. A float16 value widened to float tests its bits as an integer instead:
// InstCombine narrows `fcmp uno (fpext a), (fpext a)` to a float16 compare, which x86 runs one
// lane at a time.
Value* Emitter::is_nan(Value* x) {
  if (auto* ext = llvm::dyn_cast<llvm::FPExtInst>(x); ext && ext->getSrcTy()->isHalfTy()) {
    Value* bits = B.CreateBitCast(ext->getOperand(0), B.getInt16Ty());
    return B.CreateICmpUGT(B.CreateAnd(bits, B.getInt16(0x7fff)), B.getInt16(0x7c00));
  }
  return B.CreateFCmpUNO(x, x);
}

// The outer loops [d, reduce_from): the outermost runs [begin, end), or with thread_loops() > 1
// the leading loops flattened do, each index split into their coordinates. When the last two
// are tiled (tile_), they run as blocks of kTileRows x kTileCols.
void Emitter::outer(int d, Value* begin, Value* end) {
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
    }, 1, scalar_rows_ && flat_ == reduce_from() ? Hint::Scalar : Hint::None);
    return;
  }
  // [begin, end) is loop 0's range, except in the parts of a kernel that splits_columns: those
  // of its rows (Partial) or the parts (Finish), and loop 0 runs whole.
  const bool range = d == 0 && part_ == ReductionPart::Whole;
  Value* lo = range ? begin : llvm::ConstantInt::get(idx_, 0);
  Value* hi = range ? end : extent_[size_t(d)];
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
  }, 1, scalar_rows_ && d == reduce_from() - 1 ? Hint::Scalar : Hint::None, innermost ? float16_width() : 0);
}

// The loop extents and operand strides: constants, or in a size-generic kernel the values
// generic_args() lists, loaded from `args` after the host numbers (one slot per load).
void Emitter::read_sizes() {
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

Value* Emitter::address(size_t j) {
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

Value* Emitter::load(int j, DType to) {
  const passes::Access& a = k_.loads[size_t(j)];
  if (a.buffer < 0) {
    Value* bits = B.CreateLoad(B.getInt64Ty(), B.CreateConstInBoundsGEP1_64(B.getInt64Ty(), args_, uint64_t(j)));
    if (is_floating(a.dtype)) return convert(B.CreateBitCast(bits, B.getDoubleTy()), DType::Float64, to);
    return convert(bits, DType::Int64, to);
  }
  const bool staged = !staged_.empty() && staged_[size_t(j)].buf;
  if (a.iota && !staged) {
    // Each element holds its index: the value at the operand's first element (where the
    // launch pointed it) plus the index the loops reach, with no stream through memory.
    Value* at = B.CreateLoad(B.getInt64Ty(), F_->getArg(unsigned(base_operand(size_t(j)))));
    for (size_t d = 0; d < a.sizes.size() && d < iv_.size(); ++d) {
      if (!moves(a, d) || !iv_[d]) continue;
      at = B.CreateAdd(at, B.CreateSExt(B.CreateMul(iv_[d], stride_[size_t(j)][d], "", false, true), B.getInt64Ty()));
    }
    return convert(at, DType::Int64, to);
  }
  Value* raw = !staged ? B.CreateLoad(storage_type(a.dtype), address(size_t(j)))
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
void Emitter::store_all(const std::vector<size_t>& js) {
  for (size_t j : js) value(code_.stores[j]);
  for (size_t j : js) store(j);
}

void Emitter::store(size_t j) {
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

Value* Emitter::value(int id) {
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
  if (!has_parts(k, code, generic)) return;
  for (int d = 1; d <= part_depths(code); ++d) {
    Emitter(m, k, code, ReductionPart::Partial, generic, d).emit(part_symbol(name, kPartialSuffix, d));
    Emitter(m, k, code, ReductionPart::Finish, generic, d).emit(part_symbol(name, kFinishSuffix, d));
  }
}

}  // namespace kiln::codegen::cpu
