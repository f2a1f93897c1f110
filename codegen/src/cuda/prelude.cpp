// The helpers every rendered CUDA kernel starts with (kiln/codegen/cuda.h: cuda_prelude()).
//
// Written to compile two ways: by NVRTC for the GPU, and as host C++ when KILN_CUDA_EMULATION
// is defined, where a test header supplies threadIdx, __syncthreads, the warp shuffles and the
// other built-ins, so that the kernels' arithmetic and index math are checked without a GPU.
// NVRTC sees no standard headers: everything here is spelled with built-ins.
#include "kiln/codegen/cuda.h"

namespace kiln::codegen {

std::string cuda_prelude() {
  return R"(// kiln: CUDA kernels rendered from a kernel program
#if defined(KILN_CUDA_EMULATION)
#define KD inline
#else
#define KD __device__ __forceinline__
#endif

// Bit casts.
KD float kiln_as_float(unsigned u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f; __builtin_memcpy(&f, &u, 4); return f;
#endif
}
KD unsigned kiln_float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  unsigned u; __builtin_memcpy(&u, &f, 4); return u;
#endif
}
KD double kiln_as_double(unsigned long long u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double((long long)u);
#else
  double d; __builtin_memcpy(&d, &u, 8); return d;
#endif
}
KD unsigned long long kiln_double_bits(double d) {
#if defined(__CUDA_ARCH__)
  return (unsigned long long)__double_as_longlong(d);
#else
  unsigned long long u; __builtin_memcpy(&u, &d, 8); return u;
#endif
}
template <class T> KD T kiln_inf();
template <> KD float kiln_inf<float>() { return kiln_as_float(0x7f800000u); }
template <> KD double kiln_inf<double>() { return kiln_as_double(0x7ff0000000000000ull); }
template <class T> KD T kiln_nan();
template <> KD float kiln_nan<float>() { return kiln_as_float(0x7fc00000u); }
template <> KD double kiln_nan<double>() { return kiln_as_double(0x7ff8000000000000ull); }
KD bool kiln_signbit(float x) { return (kiln_float_bits(x) >> 31) != 0; }
KD bool kiln_signbit(double x) { return (kiln_double_bits(x) >> 63) != 0; }

// 16-bit floats are stored as their bits and computed as float32.
KD float kiln_h2f(unsigned short h) {
#if defined(__CUDA_ARCH__)
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
#else
  unsigned sign = (unsigned)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return kiln_as_float(sign | 0x7f800000u | (man << 13));
  if (exp == 0) { float v = (float)man * 5.9604644775390625e-08f; return sign ? -v : v; }
  return kiln_as_float(sign | ((exp + 112) << 23) | (man << 13));
#endif
}
KD unsigned short kiln_f2h(float f) {  // round to nearest even; NaN stays a quiet NaN
#if defined(__CUDA_ARCH__)
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
#else
  unsigned x = kiln_float_bits(f), ax = x & 0x7fffffffu;
  unsigned short sign = (unsigned short)((x >> 16) & 0x8000u);
  if (ax > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (ax < 0x38800000u) return (unsigned short)(sign | (kiln_float_bits(kiln_as_float(ax) + 0.5f) - 0x3f000000u));
  ax += 0xc8000fffu + ((ax >> 13) & 1u);
  return (unsigned short)(sign | (ax >> 13));
#endif
}
KD float kiln_bf2f(unsigned short b) { return kiln_as_float((unsigned)b << 16); }
// On sm_80 and later one instruction (ptxas packs two of them into one F2FP.BF16.F32.PACK_AB)
// where the bit arithmetic takes about seven: 58 fewer per 8 elements of add_sin_cos_bf16's
// vector loop (docs/perf-journal.md, "A float to bfloat16 in one instruction"). A NaN becomes
// the canonical one there, which no comparison of values sees (as with kiln_max's max.NaN).
KD unsigned short kiln_f2bf(float f) {  // round to nearest even; NaN stays a quiet NaN
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
#else
  unsigned x = kiln_float_bits(f);
  unsigned rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return (unsigned short)((x & 0x7fffffffu) > 0x7f800000u ? ((x >> 16) | 0x40u) : rounded);
#endif
}

// Float to integer saturates (NaN gives 0), then wraps to the narrower type, as the CPU
// backend's fptosi.sat does: never undefined.
KD long long kiln_f2ll(double x) {
  if (x != x) return 0;
  if (x >= 9223372036854775807.0) return (long long)0x7fffffffffffffffull;
  if (x <= -9223372036854775808.0) return (long long)0x8000000000000000ull;
  return (long long)x;
}

// Integer arithmetic that wraps: int and long long go through their unsigned types (signed
// overflow is undefined in C++); narrower types compute in int and wrap on conversion.
template <class T> KD T kiln_add(T a, T b) { return (T)(a + b); }
template <class T> KD T kiln_sub(T a, T b) { return (T)(a - b); }
template <class T> KD T kiln_mul(T a, T b) { return (T)(a * b); }
template <> KD int kiln_add<int>(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
template <> KD int kiln_sub<int>(int a, int b) { return (int)((unsigned)a - (unsigned)b); }
template <> KD int kiln_mul<int>(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
template <> KD long long kiln_add<long long>(long long a, long long b) {
  return (long long)((unsigned long long)a + (unsigned long long)b);
}
template <> KD long long kiln_sub<long long>(long long a, long long b) {
  return (long long)((unsigned long long)a - (unsigned long long)b);
}
template <> KD long long kiln_mul<long long>(long long a, long long b) {
  return (long long)((unsigned long long)a * (unsigned long long)b);
}
template <class T> KD T kiln_neg(T a) { return kiln_sub<T>((T)0, a); }
// Division and remainder made total (the caller raises the zero-divisor check): x / 0 and
// x % 0 give 0, x / -1 is -x (wrapping), x % -1 is 0.
template <class T> KD T kiln_idiv(T x, T y) {
  if (y == (T)0) return (T)0;
  if ((T)-1 < (T)0 && y == (T)-1) return kiln_neg<T>(x);
  return (T)(x / y);
}
template <class T> KD T kiln_irem(T x, T y) {
  if (y == (T)0 || ((T)-1 < (T)0 && y == (T)-1)) return (T)0;
  return (T)(x % y);
}

// r / d for r < 2^31 and 1 <= d < 2^31, without a division: `md` packs a multiplier (low 32
// bits) and a shift (high bits) the host computed for d (cuda_divisor_magic), so that the
// quotient is a high multiply, an add and a shift. Size-generic kernels divide their flat
// indices by run-time extents this way; specialised ones divide by constants, which the
// compiler turns into the same sequence.
KD unsigned kiln_udiv(unsigned r, unsigned long long md) {
  return (__umulhi(r, (unsigned)md) + r) >> (unsigned)(md >> 32);
}

// Max and min propagate NaN (the first NaN operand, as the CPU backend's llvm.maximum) and
// order -0 below +0, with selects rather than branches: a row reduction's max is a chain of
// these, and the branchy form cost twelve instructions and two convergence barriers per element
// (softmax's SASS). Equal operands give the AND of their bits for max, the OR for min: the same
// value, and +0 / -0 for a pair of zeros of different signs.
template <class T> KD T kiln_max(T a, T b) { return a > b ? a : b; }
template <class T> KD T kiln_min(T a, T b) { return a < b ? a : b; }
KD float kiln_bits_and(float a, float b) { return kiln_as_float(kiln_float_bits(a) & kiln_float_bits(b)); }
KD float kiln_bits_or(float a, float b) { return kiln_as_float(kiln_float_bits(a) | kiln_float_bits(b)); }
KD double kiln_bits_and(double a, double b) { return kiln_as_double(kiln_double_bits(a) & kiln_double_bits(b)); }
KD double kiln_bits_or(double a, double b) { return kiln_as_double(kiln_double_bits(a) | kiln_double_bits(b)); }
template <class T> KD T kiln_fmax(T a, T b) {
  const T m = (a > b || a != a) ? a : b;
  return a == b ? kiln_bits_and(a, b) : m;
}
template <class T> KD T kiln_fmin(T a, T b) {
  const T m = (a < b || a != a) ? a : b;
  return a == b ? kiln_bits_or(a, b) : m;
}
// float on sm_80 and later: one instruction, max.NaN / min.NaN (what LLVM's NVPTX backend
// lowers llvm.maximum / llvm.minimum to there: NaN-propagating, -0 below +0; its NaN is the
// canonical one rather than the first operand's, which no comparison of values sees).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
template <> KD float kiln_max<float>(float a, float b) { float r; asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
template <> KD float kiln_min<float>(float a, float b) { float r; asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
#else
template <> KD float kiln_max<float>(float a, float b) { return kiln_fmax(a, b); }
template <> KD float kiln_min<float>(float a, float b) { return kiln_fmin(a, b); }
#endif
template <> KD double kiln_max<double>(double a, double b) { return kiln_fmax(a, b); }
template <> KD double kiln_min<double>(double a, double b) { return kiln_fmin(a, b); }

// Vector accesses: N elements in one aligned load or store (16 bytes at most).
template <class T, int N> struct alignas(sizeof(T) * N) kiln_vec { T v[N]; };
KD bool kiln_aligned(const void* p, unsigned long long bytes) { return ((unsigned long long)p & (bytes - 1)) == 0; }

// 8-byte accumulator slots (Split kernels): a value's bits, zero-extended.
KD unsigned long long kiln_slot(double v) { return kiln_double_bits(v); }
KD unsigned long long kiln_slot(float v) { return kiln_float_bits(v); }
KD unsigned long long kiln_slot(long long v) { return (unsigned long long)v; }
KD unsigned long long kiln_slot(int v) { return (unsigned long long)(unsigned)v; }
KD unsigned long long kiln_slot(short v) { return (unsigned long long)(unsigned short)v; }
KD unsigned long long kiln_slot(signed char v) { return (unsigned long long)(unsigned char)v; }
KD unsigned long long kiln_slot(unsigned char v) { return v; }
KD unsigned long long kiln_slot(bool v) { return v ? 1ull : 0ull; }
template <class T> KD void kiln_put(unsigned long long* slot, T v) { *slot = kiln_slot(v); }
template <class T> KD T kiln_get(const unsigned long long* slot) { return (T)*slot; }
template <> KD double kiln_get<double>(const unsigned long long* slot) { return kiln_as_double(*slot); }
template <> KD float kiln_get<float>(const unsigned long long* slot) { return kiln_as_float((unsigned)*slot); }
template <> KD bool kiln_get<bool>(const unsigned long long* slot) { return *slot != 0; }

// Warp and block reductions. The butterfly (xor) leaves the result in every lane; the block's
// warps then meet in shared memory, and every thread combines the warps' results in the same
// order, so all threads of the block hold the same value.
KD int kiln_shfl_xor(int v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
KD unsigned kiln_shfl_xor(unsigned v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
KD long long kiln_shfl_xor(long long v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
KD unsigned long long kiln_shfl_xor(unsigned long long v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
KD float kiln_shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
KD double kiln_shfl_xor(double v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
KD bool kiln_shfl_xor(bool v, int m) { return __shfl_xor_sync(0xffffffffu, (int)v, m) != 0; }
KD signed char kiln_shfl_xor(signed char v, int m) { return (signed char)__shfl_xor_sync(0xffffffffu, (int)v, m); }
KD unsigned char kiln_shfl_xor(unsigned char v, int m) { return (unsigned char)__shfl_xor_sync(0xffffffffu, (int)v, m); }
KD short kiln_shfl_xor(short v, int m) { return (short)__shfl_xor_sync(0xffffffffu, (int)v, m); }
template <class T, class F> KD T kiln_warp_reduce(T v, F f) {
  for (int m = 16; m > 0; m >>= 1) v = f(v, kiln_shfl_xor(v, m));
  return v;
}
template <class T, class F> KD T kiln_block_reduce(T v, F f) {
  __shared__ T part[32];
  v = kiln_warp_reduce(v, f);
  if ((threadIdx.x & 31u) == 0) part[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = part[0];
  for (unsigned w = 1; w < (blockDim.x >> 5); ++w) r = f(r, part[w]);
  __syncthreads();  // part is free for the next reduction
  return r;
}

)";
}

}  // namespace kiln::codegen
