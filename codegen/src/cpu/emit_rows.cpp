// A kernel's reduction loops (the Emitter, emitter.h): one pass over the row per reduction
// depth, row values kept in stashes, reductions over strided rows by columns, and the parts of a
// split reduction.
#include "emitter.h"

namespace kiln::codegen::cpu {

// The reduction loops [d, rank): `body` runs innermost.
template <class Body>
void Emitter::row_loops(int d, Body&& body, bool ahead, Hint hint) {
  if (d == rank()) {
    body();
    return;
  }
  if (ahead && d == rank() - 1) {
    row_ahead(d, body);
    return;
  }
  // A partial reduction runs its part of its first reduction loop (loop 0 of a full reduction).
  bool part = part_ == ReductionPart::Partial && d == reduce_from();
  if (hint == Hint::None && short_rows_) hint = Hint::NotUnrolled;
  loop(part ? begin_ : llvm::ConstantInt::get(idx_, 0),
       part ? end_ : extent_[size_t(d)], "row", [&](Value* i) {
         iv_[size_t(d)] = i;
         row_loops(d + 1, body, false, hint);
         iv_[size_t(d)] = nullptr;
       }, 1, hint, d == rank() - 1 ? float16_width() : 0);
}

// The row loop d (the innermost, the kernel's only reduction loop) in chunks of
// kPrefetchChunk elements, each first prefetching the same chunk of the row kRowsAhead rows
// on, for every load contiguous along the row. A row of a few KiB is a page or less: the
// hardware prefetchers stop at page boundaries, so every row would start with a full miss.
// (Past the last row the addresses are only hints.)
template <class Body>
void Emitter::row_ahead(int d, Body&& body) {
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
    }, 1, Hint::None, float16_width());
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
int Emitter::ahead_depth() const {
  if (generic_ || part_ != ReductionPart::Whole || rank() < 2 || reduce_from() != rank() - 1) return 0;
  const int64_t row = k_.loops.back();
  if (row > kMaxStash || row < kPrefetchChunk) return 0;
  int64_t n = 1;
  for (int64_t e : k_.loops) n *= e;
  if (n < kPrefetchMinElements) return 0;
  if (!row_calls_math()) return 0;
  for (size_t j = 0; j < k_.loads.size(); ++j)
    if (streams(j, rank() - 1) && moves(k_.loads[j], size_t(rank() - 2))) return std::min(2, code_.depth);
  return 0;
}

// Per outer index: one loop over the row per reduction depth, then the stores.
void Emitter::outer_body() {
  acc_.assign(code_.code.size(), nullptr);
  nan_.assign(code_.code.size(), nullptr);
  RowPlan plan = row_plan(k_, code_, true);
  const std::vector<size_t>&in_row = plan.in_row, &per_row = plan.per_row, &early = plan.early;
  const std::vector<std::vector<int>>&reduces = plan.reduces, &needs = plan.needs;
  plan_stash(needs, reduces);
  const int ahead = ahead_depth();
  // A deep split's step at depth d: what the depths before it reduced, as their finishing steps
  // combined it (each depth's slots after the earlier depths').
  if (carry_) {
    size_t slot = 0;
    for (int depth = 1; depth < part_depth_; ++depth)
      for (int r : reduces[size_t(depth)]) {
        Value* at = B.CreateConstInBoundsGEP1_64(B.getInt8Ty(), carry_, 8 * slot++);
        memo_[size_t(r)] = B.CreateLoad(compute_type(code_.code[size_t(r)].type), at);
      }
  }

  // (a split reduction's finishing step has no row loops: it combines the parts instead; its
  // partial step runs the pass of its own depth)
  for (int depth = 1; part_ != ReductionPart::Finish && depth <= code_.depth; ++depth) {
    if (part_ == ReductionPart::Partial && depth != part_depth_) continue;
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
        // NaN-propagating combines (docs/perf-journal.md, "Math calls out of reduction loops, a
        // cheaper max").
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
  const std::vector<int>& mine = reduces[size_t(part_ == ReductionPart::Whole ? 1 : part_depth_)];
  if (part_ == ReductionPart::Finish) {
    finish_parts(mine);
    if (part_depth_ < code_.depth) {
      // Not the last depth: its combined values go to the carry slots for the next passes.
      size_t slot = 0;
      for (int depth = 1; depth < part_depth_; ++depth) slot += reduces[size_t(depth)].size();
      for (int r : mine) B.CreateStore(memo_[size_t(r)], B.CreateConstInBoundsGEP1_64(B.getInt8Ty(), carry_, 8 * slot++));
      return;
    }
  }
  if (part_ == ReductionPart::Partial) {
    // This call's accumulators, slot by slot; the finishing call combines them.
    for (size_t q = 0; q < mine.size(); ++q)
      B.CreateStore(memo_[size_t(mine[q])], B.CreateConstInBoundsGEP1_64(B.getInt8Ty(), parts_, 8 * q));
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
// compiled against eager's 0.4. Kernels with one pass of reductions, no scans, per-row stores
// and stores along the row that need no reduction (written in the pass, element by element: a
// gradient fused beside its bias gradient, which layout lays out along K), where a load runs
// contiguously along K and no operand that varies along K runs contiguously along a reduction
// loop.
static bool by_columns(const passes::Kernel& k, const KernelCode& code, int K) {
  const int rank = int(k.loops.size()), rf = K + 1;
  if (K < 0 || rf >= rank || code.depth != 1) return false;
  for (const Instr& in : code.code)
    if (in.op == EOp::Scan || in.op == EOp::RowIndex) return false;
  const RowPlan plan = row_plan(k, code, true);
  if (!plan.in_row.empty()) return false;
  bool along_k = false;
  for (const passes::Access& a : k.loads) {
    along_k = along_k || (moves(a, size_t(K)) && a.strides[size_t(K)] == 1);
    // (a load broadcast along K, one value per row of the block, may run along the rows)
    for (int d = rf; d < rank; ++d)
      if (moves(a, size_t(K)) && moves(a, size_t(d)) && std::abs(a.strides[size_t(d)]) == 1) return false;
  }
  for (size_t j : plan.early) {
    const passes::Access& a = k.stores[j];
    if (!moves(a, size_t(K)) || a.strides[size_t(K)] != 1) return false;
  }
  return along_k;
}

bool splits_columns(const passes::Kernel& k, const KernelCode& code, bool generic) {
  return !generic && k.reduce_from == 1 && k.loops.size() >= 2 && k.loops[0] >= kSplitColumnsMinOutputs &&
         k.loops[0] <= int64_t(Emitter::kColumns) && k.loops[1] >= kSplitColumnsMinRows && by_columns(k, code, 0);
}

bool Emitter::wants_columns() const {
  const int K = reduce_from() - 1;
  if (part_ == ReductionPart::Partial) return K >= 0;  // (of the kernels with parts, those with an outer loop splits_columns)
  if (K < 0 || part_ != ReductionPart::Whole || generic_ || (flat_ > 1 && flat_ > K) || tile_ || chunk_ ||
      streaming() || k_.loops[size_t(K)] < 8)
    return false;
  return by_columns(k_, code_, K);
}

// A Partial call of a kernel that splits_columns runs its part of the rows for every output, one
// block of a constant count: LLVM unrolls a narrow block whole, keeps its accumulators in registers
// and runs each row by vectors. Its row loop is not vectorised (it would be, with gathers) but
// interleaved kColumnChains times: each accumulator a chain of additions, one per row, would
// otherwise wait on the last (4 cycles), and [524288, 4].sum(0) ran 0.22 ms with one chain and 0.07
// with four, [65536, 16] 0.038 either way (docs/perf-journal.md, "Compiled column reductions split
// along their rows"). It leaves the accumulators in its slots for Finish, output by output.
void Emitter::columns(int K, Value* lo, Value* hi) {
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
  auto zero = llvm::ConstantInt::get(idx_, 0);
  auto one_block = [&](Value* c0, Value* n) {
    auto at = [&](int r, Value* c) {
      return B.CreateInBoundsGEP(compute_type(code_.code[size_t(r)].type), block[size_t(r)], c);
    };
    loop(zero, n, "cols.init", [&](Value* c) {
      for (int r : reduces) B.CreateStore(identity(code_.code[size_t(r)]), at(r, c));
    });
    row_loops(reduce_from(), [&] {
      loop(zero, n, "cols", [&](Value* c) {
        iv_[size_t(K)] = B.CreateAdd(c0, c);
        for (int id : plan.needs[0]) value(id);
        for (int r : reduces) {
          const Instr& in = code_.code[size_t(r)];
          Value* a = B.CreateLoad(compute_type(in.type), at(r, c));
          B.CreateStore(combine(in, a, value(in.args[0])), at(r, c));
        }
        store_all(plan.early);
        forget_all();
      });
    }, false, part_ == ReductionPart::Partial ? Hint::Interleaved : Hint::Scalar);
    loop(zero, n, "cols.store", [&](Value* c) {
      iv_[size_t(K)] = B.CreateAdd(c0, c);
      if (part_ == ReductionPart::Partial) {
        // slot q of output c: byte 8 (c nreduces + q) of this part's slots
        Value* first = B.CreateMul(B.CreateZExt(iv_[size_t(K)], B.getInt64Ty()), B.getInt64(8 * reduces.size()));
        for (size_t q = 0; q < reduces.size(); ++q) {
          Value* slot = B.CreateInBoundsGEP(B.getInt8Ty(), parts_, B.CreateAdd(first, B.getInt64(8 * q)));
          B.CreateStore(B.CreateLoad(compute_type(code_.code[size_t(reduces[q])].type), at(reduces[q], c)), slot);
        }
      } else {
        for (int r : reduces) memo_[size_t(r)] = B.CreateLoad(compute_type(code_.code[size_t(r)].type), at(r, c));
        store_all(plan.per_row);
      }
      forget_all();
    });
    iv_[size_t(K)] = nullptr;
  };
  if (part_ == ReductionPart::Partial) {
    one_block(lo, B.CreateSub(hi, lo));  // (constants: the whole of loop K, at most kColumns)
    return;
  }
  Value* blocks = B.CreateUDiv(B.CreateAdd(B.CreateSub(hi, lo), llvm::ConstantInt::get(idx_, kColumns - 1)), width);
  loop(zero, blocks, "cols.block", [&](Value* b) {
    Value* c0 = B.CreateAdd(lo, B.CreateMul(b, width));
    Value* rest = B.CreateSub(hi, c0);
    one_block(c0, B.CreateSelect(B.CreateICmpSLT(rest, width), rest, width));
  });
}

// A split reduction's last step: every reduction's accumulator combined over the parts
// [begin, end) the partial calls wrote, in order (the same combine as the row loop's).
void Emitter::finish_parts(const std::vector<int>& reduces) {
  const uint64_t n = reduces.size();
  for (size_t q = 0; q < n; ++q) {
    const Instr& in = code_.code[size_t(reduces[q])];
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    acc_[size_t(reduces[q])] = eb.CreateAlloca(compute_type(in.type), nullptr, "acc");
    B.CreateStore(identity(in), acc_[size_t(reduces[q])]);
  }
  // (a kernel that splits_columns: each part has n slots per output of loop 0, this output's
  // at 8 n iv_0 within its part's)
  const bool cols = reduce_from() > 0;
  Value* per_part = B.getInt64(8 * uint64_t(part_slots(k_, code_, cols)));
  Value* mine = cols ? B.CreateMul(B.CreateZExt(iv_[0], B.getInt64Ty()), B.getInt64(8 * n)) : B.getInt64(0);
  loop(begin_, end_, "part", [&](Value* p) {
    Value* base = B.CreateAdd(B.CreateMul(B.CreateZExt(p, B.getInt64Ty()), per_part), mine);
    for (size_t q = 0; q < n; ++q) {
      const Instr& in = code_.code[size_t(reduces[q])];
      llvm::Type* t = compute_type(in.type);
      Value* slot = B.CreateInBoundsGEP(B.getInt8Ty(), parts_, B.CreateAdd(base, B.getInt64(8 * q)));
      Value* a = B.CreateLoad(t, acc_[size_t(reduces[q])]);
      B.CreateStore(combine(in, a, B.CreateLoad(t, slot)), acc_[size_t(reduces[q])]);
    }
  }, 1, Hint::Scalar);
  for (int r : reduces) memo_[size_t(r)] = B.CreateLoad(compute_type(code_.code[size_t(r)].type), acc_[size_t(r)]);
}

// The scans a row loop computes start from their identity: each loop that needs one runs it
// from the row's first element (a later loop recomputes it rather than keeping the row).
void Emitter::start_scans(const std::vector<int>& need) {
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
//   (which already kept its exp) 1.17 either way (docs/perf-journal.md, "Math calls out of
//   reduction loops").
void Emitter::plan_stash(const std::vector<std::vector<int>>& needs, const std::vector<std::vector<int>>& reduces) {
  stash_.assign(code_.code.size(), nullptr);
  stash_ready_.assign(code_.code.size(), false);
  int64_t row = 1;
  for (int d = reduce_from(); d < rank(); ++d) row *= k_.loops[size_t(d)];
  // (generic: the row's length is unknown; a deep split's passes are calls of their own, which
  // keep no stash from one to the next)
  if (row > kMaxStash || generic_ || carry_) return;
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
    if (!in.row || !calls_math(in) || (uses[i] < 2 && !reduced[i])) continue;
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
    // randomisation (docs/perf-journal.md, "no 4K aliasing").
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    llvm::AllocaInst* a = eb.CreateAlloca(eb.getInt8Ty(), eb.getInt64(uint64_t(size)), "stash");
    a->setAlignment(llvm::Align(kPage));
    stash_[i] = eb.CreateConstInBoundsGEP1_64(eb.getInt8Ty(), a, uint64_t(kStashSkew), "stash.row");
  }
}

// The position in the row (row-major over the reduction loops), for the stash.
Value* Emitter::row_index() {
  Value* at = llvm::ConstantInt::get(idx_, 0);
  for (int d = reduce_from(); d < rank(); ++d)
    at = B.CreateAdd(B.CreateMul(at, extent_[size_t(d)], "", true, true),
                     iv_[size_t(d)], "", true, true);
  return at;
}

void Emitter::forget_rows() {
  for (size_t i = 0; i < memo_.size(); ++i) {
    if (!code_.code[i].row) continue;
    if (memo_[i] && !stash_.empty() && stash_[i]) stash_ready_[i] = true;  // kept by this loop
    memo_[i] = nullptr;
  }
}

}  // namespace kiln::codegen::cpu
