// Scalar instructions as LLVM IR: math calls and the per-op lowering (scalar.h).
#include "scalar.h"

#include "jit.h"

namespace kiln::codegen::cpu {

using llvm::Value;

Value* ScalarBuilder::libm(const char* base, const Instr& in, std::vector<Value*> args) {
  std::string name = Jit::get().math_symbol(base, in.type == DType::Float32, rowwise_ && !in.row);
  llvm::Type* ty = compute_type(in.type);
  std::vector<llvm::Type*> ps(args.size(), ty);
  llvm::FunctionCallee f = M.getOrInsertFunction(name, llvm::FunctionType::get(ty, ps, false));
  if (auto* fn = llvm::dyn_cast<llvm::Function>(f.getCallee())) {
    fn->setDoesNotAccessMemory();
    fn->setDoesNotThrow();
    fn->setWillReturn();
  }
  auto* call = B.CreateCall(f, args);
  call->setDoesNotAccessMemory();
  call->setDoesNotThrow();
  return call;
}

Value* ScalarBuilder::arith(const Instr& in, const std::vector<Value*>& a, const std::vector<DType>& t) {
  llvm::Type* ty = compute_type(in.type);
  const bool fl = is_floating(in.type);
  // (a float instruction with a math function, eops.def: a call of it)
  if (const char* math = eop_math(in.op); math && fl) return libm(math, in, a);
  Value* v = nullptr;
  switch (in.op) {
    case EOp::Const:
      v = fl ? fconst(ty, in.f) : llvm::ConstantInt::get(ty, uint64_t(in.i), true);
      break;
    case EOp::Neg: v = fl ? B.CreateFNeg(a[0]) : B.CreateNeg(a[0]); break;
    case EOp::Abs:
      v = fl ? B.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a[0])
          : is_unsigned(in.type) ? a[0]
                                 : B.CreateBinaryIntrinsic(llvm::Intrinsic::abs, a[0], B.getFalse());
      break;
    case EOp::Sign: {
      Value* x = a[0];
      Value* zero = fl ? fconst(ty, 0.0) : llvm::ConstantInt::get(ty, 0);
      Value* pos = cmp(EOp::Gt, in.type, x, zero);
      Value* neg = cmp(EOp::Lt, in.type, x, zero);
      if (fl) v = B.CreateFSub(B.CreateUIToFP(pos, ty), B.CreateUIToFP(neg, ty));
      else v = B.CreateSub(B.CreateZExt(pos, ty), B.CreateZExt(neg, ty));
      break;
    }
    case EOp::Sqrt: v = B.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, a[0]); break;
    case EOp::Recip: v = B.CreateFDiv(fconst(ty, 1.0), a[0]); break;
    case EOp::Floor: v = B.CreateUnaryIntrinsic(llvm::Intrinsic::floor, a[0]); break;
    case EOp::Ceil: v = B.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, a[0]); break;
    case EOp::Round: v = B.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven, a[0]); break;
    case EOp::Trunc: v = B.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, a[0]); break;
    case EOp::IsNan: v = B.CreateFCmpUNO(a[0], a[0]); break;
    case EOp::IsInf: {
      Value* m = B.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a[0]);
      v = B.CreateFCmpOEQ(m, fconst(m->getType(), std::numeric_limits<double>::infinity()));
      break;
    }
    case EOp::IsFinite: {
      Value* m = B.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a[0]);
      v = B.CreateFCmpOLT(m, fconst(m->getType(), std::numeric_limits<double>::infinity()));
      break;
    }
    case EOp::Not: v = B.CreateNot(a[0]); break;
    case EOp::BitNot: v = B.CreateNot(a[0]); break;
    case EOp::Convert: v = convert(a[0], t[0], in.type); break;
    case EOp::RoundTo16: {
      Value* x = a[0];
      if (DType(in.index) == DType::Float16) {
        v = B.CreateFPExt(B.CreateFPTrunc(x, B.getHalfTy()), B.getFloatTy());
      } else {
        Value* bits = B.CreateZExt(to_bf16(x), B.getInt32Ty());
        v = B.CreateBitCast(B.CreateShl(bits, 16), B.getFloatTy());
      }
      break;
    }
    case EOp::Add: v = fl ? B.CreateFAdd(a[0], a[1]) : B.CreateAdd(a[0], a[1]); break;
    case EOp::Sub: v = fl ? B.CreateFSub(a[0], a[1]) : B.CreateSub(a[0], a[1]); break;
    case EOp::Mul: v = fl ? B.CreateFMul(a[0], a[1]) : B.CreateMul(a[0], a[1]); break;
    case EOp::Div: v = fl ? B.CreateFDiv(a[0], a[1]) : int_div(in, a[0], a[1], false); break;
    // (floats call fmod above, not frem: float32 gets kiln's exact vector fmod, frem would be 16
    // scalar calls)
    case EOp::Fmod: v = int_div(in, a[0], a[1], true); break;
    case EOp::Max: v = max_min(in.type, a[0], a[1], true); break;
    case EOp::Min: v = max_min(in.type, a[0], a[1], false); break;
    case EOp::Eq:
    case EOp::Ne:
    case EOp::Lt:
    case EOp::Le:
    case EOp::Gt:
    case EOp::Ge: v = cmp(in.op, t[0], a[0], a[1]); break;
    case EOp::And: v = B.CreateAnd(a[0], a[1]); break;
    case EOp::Or: v = B.CreateOr(a[0], a[1]); break;
    case EOp::Xor: v = B.CreateXor(a[0], a[1]); break;
    case EOp::Select: v = B.CreateSelect(a[0], a[1], a[2]); break;
    case EOp::Fma: v = B.CreateIntrinsic(llvm::Intrinsic::fma, {ty}, {a[0], a[1], a[2]}); break;
    case EOp::SignBit: {
      Value* x = a[0];
      Value* bits = B.CreateBitCast(x, B.getIntNTy(x->getType()->getPrimitiveSizeInBits().getFixedValue()));
      v = B.CreateICmpSLT(bits, llvm::ConstantInt::get(bits->getType(), 0));
      break;
    }
    case EOp::Load:
    case EOp::Arg:
    case EOp::RowCount:
    case EOp::RowIndex:
    case EOp::Reduce:
    case EOp::Scan: throw std::logic_error("kernel code: an instruction with row or operand state in arith()");
    default:  // (a math instruction on integers: the lowering converts their operands to floats)
      throw std::logic_error("kernel code: no scalar form of " + std::string(eop_name(in.op)) + " on " +
                             std::string(name(in.type)));
  }
  return v;
}

}  // namespace kiln::codegen::cpu
