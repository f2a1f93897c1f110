// Scalar instructions as LLVM IR (internal to codegen/cpu): the storage and compute types of
// each dtype, conversions, reduction identities and combines, total integer division, math
// calls, comparisons, and arith(), which lowers every kernel-code instruction whose value
// depends only on its arguments'. The loop nest, operands and row state are the
// Emitter's (emitter.h), which builds on this class.
#pragma once
#include <limits>
#include <stdexcept>
#include <vector>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include "../expr.h"

namespace kiln::codegen::cpu {

class ScalarBuilder {
 public:
  explicit ScalarBuilder(llvm::Module& m) : C(m.getContext()), M(m), B(C) {}

 protected:
  using Value = llvm::Value;

  llvm::LLVMContext& C;
  llvm::Module& M;
  llvm::IRBuilder<> B;
  llvm::AllocaInst* flags_ = nullptr;  // the check flags raised so far (kernels with checks)
  // The kernel has row loops, long enough that its instructions that are not row values run
  // once per row outside any loop the vectoriser turns into vector code (the Emitter decides).
  bool rowwise_ = false;

  llvm::Type* storage_type(DType t) {
    switch (t) {
      case DType::Bool:
      case DType::UInt8:
      case DType::Int8: return B.getInt8Ty();
      case DType::Int16:
      case DType::BFloat16: return B.getInt16Ty();
      case DType::Float16: return B.getHalfTy();
      case DType::Int32: return B.getInt32Ty();
      case DType::Int64: return B.getInt64Ty();
      case DType::Float32: return B.getFloatTy();
      case DType::Float64: return B.getDoubleTy();
    }
    return B.getFloatTy();
  }
  llvm::Type* compute_type(DType t) { return t == DType::Bool ? B.getInt1Ty() : storage_type(compute_dtype(t)); }
  static bool is_unsigned(DType t) { return t == DType::UInt8 || t == DType::Bool; }

  // float32 to bfloat16 bits, rounding to nearest even; NaN stays a quiet NaN (as runtime/half.h).
  Value* to_bf16(Value* f) {
    Value* x = B.CreateBitCast(f, B.getInt32Ty());
    Value* lsb = B.CreateAnd(B.CreateLShr(x, 16), 1);
    Value* rounded = B.CreateLShr(B.CreateAdd(B.CreateAdd(x, B.getInt32(0x7fff)), lsb), 16);
    Value* qnan = B.CreateOr(B.CreateLShr(x, 16), 0x40);
    Value* is_nan = B.CreateICmpUGT(B.CreateAnd(x, 0x7fffffff), B.getInt32(0x7f800000));
    return B.CreateTrunc(B.CreateSelect(is_nan, qnan, rounded), B.getInt16Ty());
  }

  // ---- conversions ----

  Value* convert(Value* v, DType from, DType to) {
    from = compute_dtype(from);
    to = compute_dtype(to);
    if (from == to) return v;
    llvm::Type* ty = compute_type(to);
    if (to == DType::Bool) {
      if (is_floating(from)) return B.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0));
      return B.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
    }
    if (is_floating(from) && is_floating(to)) return B.CreateFPCast(v, ty);
    if (is_floating(to)) return is_unsigned(from) ? B.CreateUIToFP(v, ty) : B.CreateSIToFP(v, ty);
    if (is_floating(from)) {
      // Saturating to int64, then wrapping to the narrower type: no poison for any input.
      Value* wide = B.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {B.getInt64Ty(), v->getType()}, {v});
      return B.CreateTrunc(wide, ty);
    }
    return B.CreateIntCast(v, ty, !is_unsigned(from));
  }

  // ---- instructions ----

  Value* fconst(llvm::Type* t, double v) { return llvm::ConstantFP::get(t, v); }

  Value* identity(const Instr& in) {
    llvm::Type* t = compute_type(in.type);
    bool fl = is_floating(in.type);
    switch (in.reducer) {
      case Reducer::Sum: return fl ? fconst(t, 0.0) : llvm::ConstantInt::get(t, 0);
      case Reducer::Prod: return fl ? fconst(t, 1.0) : llvm::ConstantInt::get(t, 1);
      case Reducer::Max:
        if (fl) return fconst(t, -std::numeric_limits<double>::infinity());
        return is_unsigned(in.type) ? llvm::ConstantInt::get(t, 0) : llvm::ConstantInt::get(t, llvm::APInt::getSignedMinValue(t->getIntegerBitWidth()));
      case Reducer::Min:
        if (fl) return fconst(t, std::numeric_limits<double>::infinity());
        return is_unsigned(in.type) ? llvm::ConstantInt::get(t, llvm::APInt::getMaxValue(t->getIntegerBitWidth()))
                                    : llvm::ConstantInt::get(t, llvm::APInt::getSignedMaxValue(t->getIntegerBitWidth()));
      case Reducer::Any: return B.getFalse();
      case Reducer::All: return B.getTrue();
    }
    return nullptr;
  }

  // Float max/min reductions whose NaNs the caller tracks apart (nan_apart: a flag of its own,
  // emit.cpp) combine with maxnum/minnum under no-NaNs, a single vmaxps/vminps; otherwise with
  // LLVM's NaN-propagating maximum/minimum, which x86 lowers to five or six instructions.
  static bool tracks_nan_apart(const Instr& in) {
    return is_floating(in.type) && (in.reducer == Reducer::Max || in.reducer == Reducer::Min);
  }

  Value* combine(const Instr& in, Value* acc, Value* x, bool nan_apart = false) {
    bool fl = is_floating(in.type);
    if (nan_apart && tracks_nan_apart(in)) {
      // (a NaN makes the result poison, which only the caller's select over its flag sees)
      auto* r = llvm::cast<llvm::Instruction>(B.CreateBinaryIntrinsic(
          in.reducer == Reducer::Max ? llvm::Intrinsic::maxnum : llvm::Intrinsic::minnum, acc, x));
      // (no-signed-zeros too: the vectoriser takes a maxnum reduction only with both; which of
      // +0 and -0 wins a tie was never defined: eager's lane order decides it there)
      llvm::FastMathFlags fmf;
      fmf.setNoNaNs();
      fmf.setNoSignedZeros();
      r->setFastMathFlags(fmf);
      return r;
    }
    llvm::FastMathFlags fmf;
    fmf.setAllowReassoc();  // partial sums in vector lanes: what makes the reduction vectorise
    switch (in.reducer) {
      case Reducer::Sum: {
        if (!fl) return B.CreateAdd(acc, x);
        auto* r = llvm::cast<llvm::Instruction>(B.CreateFAdd(acc, x));
        r->setFastMathFlags(fmf);
        return r;
      }
      case Reducer::Prod: {
        if (!fl) return B.CreateMul(acc, x);
        auto* r = llvm::cast<llvm::Instruction>(B.CreateFMul(acc, x));
        r->setFastMathFlags(fmf);
        return r;
      }
      case Reducer::Max: return max_min(in.type, acc, x, true);
      case Reducer::Min: return max_min(in.type, acc, x, false);
      case Reducer::Any: return B.CreateOr(acc, x);
      case Reducer::All: return B.CreateAnd(acc, x);
    }
    return nullptr;
  }

  // Integer division or remainder (EOp::Div, Fmod), total: the divisor is replaced by 1 where it
  // is 0 (the result is then 0, and the instruction's check flag is raised) or -1 (x86's idiv
  // traps on INT_MIN / -1, LLVM calls it undefined; the quotient is -x, wrapping, as eager's,
  // and the remainder 0).
  Value* int_div(const Instr& in, Value* x, Value* y, bool rem) {
    llvm::Type* ty = x->getType();
    Value* zero = llvm::ConstantInt::get(ty, 0);
    Value* is_zero = B.CreateICmpEQ(y, zero);
    if (in.index >= 0) {
      if (!flags_) throw std::logic_error("kernel code: a check without the kernel's checks");
      Value* bit = B.CreateShl(B.CreateZExt(is_zero, B.getInt64Ty()), uint64_t(in.index));
      B.CreateStore(B.CreateOr(B.CreateLoad(B.getInt64Ty(), flags_), bit), flags_);
    }
    if (is_unsigned(in.type)) {
      Value* safe = B.CreateSelect(is_zero, llvm::ConstantInt::get(ty, 1), y);
      return B.CreateSelect(is_zero, zero, rem ? B.CreateURem(x, safe) : B.CreateUDiv(x, safe));
    }
    Value* minus_one = B.CreateICmpEQ(y, llvm::ConstantInt::getSigned(ty, -1));
    Value* safe = B.CreateSelect(B.CreateOr(is_zero, minus_one), llvm::ConstantInt::get(ty, 1), y);
    Value* q = rem ? B.CreateSRem(x, safe) : B.CreateSDiv(x, safe);  // (x % 1 is 0 already)
    if (!rem) q = B.CreateSelect(minus_one, B.CreateNeg(x), q);
    return B.CreateSelect(is_zero, zero, q);
  }

  Value* max_min(DType t, Value* a, Value* b, bool max) {
    if (is_floating(t)) return B.CreateBinaryIntrinsic(max ? llvm::Intrinsic::maximum : llvm::Intrinsic::minimum, a, b);
    if (t == DType::Bool) return max ? B.CreateOr(a, b) : B.CreateAnd(a, b);
    llvm::Intrinsic::ID id = is_unsigned(t) ? (max ? llvm::Intrinsic::umax : llvm::Intrinsic::umin)
                                            : (max ? llvm::Intrinsic::smax : llvm::Intrinsic::smin);
    return B.CreateBinaryIntrinsic(id, a, b);
  }

  Value* cmp(EOp op, DType t, Value* a, Value* b) {
    if (is_floating(t)) {
      llvm::CmpInst::Predicate p = op == EOp::Eq   ? llvm::CmpInst::FCMP_OEQ
                                   : op == EOp::Ne ? llvm::CmpInst::FCMP_UNE
                                   : op == EOp::Lt ? llvm::CmpInst::FCMP_OLT
                                   : op == EOp::Le ? llvm::CmpInst::FCMP_OLE
                                   : op == EOp::Gt ? llvm::CmpInst::FCMP_OGT
                                                   : llvm::CmpInst::FCMP_OGE;
      return B.CreateFCmp(p, a, b);
    }
    bool u = is_unsigned(t);
    llvm::CmpInst::Predicate p = op == EOp::Eq   ? llvm::CmpInst::ICMP_EQ
                                 : op == EOp::Ne ? llvm::CmpInst::ICMP_NE
                                 : op == EOp::Lt ? (u ? llvm::CmpInst::ICMP_ULT : llvm::CmpInst::ICMP_SLT)
                                 : op == EOp::Le ? (u ? llvm::CmpInst::ICMP_ULE : llvm::CmpInst::ICMP_SLE)
                                 : op == EOp::Gt ? (u ? llvm::CmpInst::ICMP_UGT : llvm::CmpInst::ICMP_SGT)
                                                 : (u ? llvm::CmpInst::ICMP_UGE : llvm::CmpInst::ICMP_SGE);
    return B.CreateICmp(p, a, b);
  }

  // A math function by its double name ("sin") for instruction `in`, as Jit::math_symbol
  // names it: per row of a row-wise kernel (`in` not a row value) a fast libm function where
  // one is as accurate, else SLEEF's scalar 1-ulp form, whose vector forms the vectoriser
  // substitutes. Declared as not touching memory, so calls can be hoisted and vectorised
  // (libm's errno is never read).
  Value* libm(const char* base, const Instr& in, std::vector<Value*> args);

  // The value of instruction `in` from its arguments' values `a` and their types `t`, for
  // every op but those that read operands or row state (Load, Arg, RowCount, RowIndex, Reduce,
  // Scan: the Emitter's).
  Value* arith(const Instr& in, const std::vector<Value*>& a, const std::vector<DType>& t);
};

}  // namespace kiln::codegen::cpu
