// The eager CPU kernels' iteration engine (internal).
//
// An Iter takes an output and inputs that all broadcast to one shape, expresses every operand
// as byte strides over that shape (0 where an input is broadcast), orders dims so the one with
// the smallest output stride is innermost, and merges neighbouring dims that are laid out one
// after the other for every operand. Kernels then see a sequence of 1-d inner loops
// `loop(ptrs, strides, n)`; when every stride equals the element size the inner loop is a plain
// contiguous loop that the C++ compiler vectorises. Large iterations are split across threads.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "kiln/runtime/tensor.h"

namespace kiln::cpu {

inline constexpr int kMaxOperands = 5;
// Below this many elements an op runs on one thread: the fork/join costs more than it saves. 32768,
// or kPassiveGrainFactor times that under OMP_WAIT_POLICY=passive (env::omp_passive_wait), where
// the other threads sleep between ops and waking one costs about 50 us. On 2 threads of a Zen 5
// host under passive waits (docs/perf-journal.md, "Eager threads under passive waits"), threaded
// against one thread: an add of 2^17 floats 40-50 us against 13, of 2^19 77-83 against 60, of 2^20
// level (103-116 against 101-103), of 2^21 faster (191-219 against 274-313); exp of 2^19 88-92
// against 82, of 2^20 130-139 against 163-168; a full sum of 2^20 79-83 against 53, of 2^21 level.
inline constexpr int64_t kParallelGrainActive = 32768;
inline constexpr int64_t kPassiveGrainFactor = 16;
int64_t parallel_grain();

class Iter {
 public:
  // operands[0] is the output. Every operand's sizes must broadcast to `shape`.
  Iter(const std::vector<Tensor>& operands, IntArrayRef shape);

  int ntensors() const { return n_; }
  int64_t numel() const { return numel_; }
  int ndim() const { return int(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }  // innermost first
  int64_t stride(int op, int d) const { return strides_[op][d]; }
  char* base(int op) const { return base_[op]; }

  // loop(char** ptrs, const int64_t* inner_strides, int64_t n) over every inner row.
  using Loop = std::function<void(char**, const int64_t*, int64_t)>;
  void for_each(const Loop& loop, int64_t grain = parallel_grain()) const;
  // Runs the linear index range [begin, end) of the iteration space on this thread.
  void serial_range(const Loop& loop, int64_t begin, int64_t end) const;

 private:
  int n_;
  int64_t numel_;
  std::vector<int64_t> shape_;
  std::array<std::vector<int64_t>, kMaxOperands> strides_;
  std::array<char*, kMaxOperands> base_{};
};

// Runs f(begin, end) over [0, n) split into chunks across the kernel threads.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f);
// How many threads the calling thread's last parallel_for ran on (for the tests of the grains).
int last_parallel_threads();
int num_threads();

// memcpy of n bytes between buffers that do not overlap, split across the kernel threads at
// cache-line boundaries when it is large.
void copy_bytes(void* dst, const void* src, size_t n);

// ---- typed inner loops ----

// out = f(a): Out and In are the stored types.
template <typename Out, typename In, typename F>
void unary_loop(const Iter& it, F f) {
  it.for_each([&](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(Out) && s[1] == sizeof(In)) {
      Out* o = reinterpret_cast<Out*>(p[0]);
      const In* a = reinterpret_cast<const In*>(p[1]);
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<Out*>(p[0] + i * s[0]) = f(*reinterpret_cast<const In*>(p[1] + i * s[1]));
    }
  });
}

// out = f(a, b), with fast paths for contiguous operands and a broadcast (stride 0) operand.
template <typename Out, typename A, typename B, typename F>
void binary_loop(const Iter& it, F f, int64_t grain = parallel_grain()) {
  it.for_each([&](char** p, const int64_t* s, int64_t n) {
    Out* o = reinterpret_cast<Out*>(p[0]);
    const A* a = reinterpret_cast<const A*>(p[1]);
    const B* b = reinterpret_cast<const B*>(p[2]);
    if (s[0] == sizeof(Out) && s[1] == sizeof(A) && s[2] == sizeof(B)) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
    } else if (s[0] == sizeof(Out) && s[1] == sizeof(A) && s[2] == 0) {
      const B bv = *b;
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);
    } else if (s[0] == sizeof(Out) && s[1] == 0 && s[2] == sizeof(B)) {
      const A av = *a;
      for (int64_t i = 0; i < n; ++i) o[i] = f(av, b[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<Out*>(p[0] + i * s[0]) = f(*reinterpret_cast<const A*>(p[1] + i * s[1]),
                                                     *reinterpret_cast<const B*>(p[2] + i * s[2]));
    }
  }, grain);
}

// out = f(a, b, c), with fast paths for contiguous operands and a broadcast (stride 0) b or c
// (where(c, x, 0.0), masked_fill's value).
template <typename Out, typename A, typename B, typename C, typename F>
void ternary_loop(const Iter& it, F f) {
  it.for_each([&](char** p, const int64_t* s, int64_t n) {
    Out* o = reinterpret_cast<Out*>(p[0]);
    const A* a = reinterpret_cast<const A*>(p[1]);
    const B* b = reinterpret_cast<const B*>(p[2]);
    const C* c = reinterpret_cast<const C*>(p[3]);
    const bool dense = s[0] == sizeof(Out) && s[1] == sizeof(A);
    if (dense && s[2] == sizeof(B) && s[3] == sizeof(C)) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i], c[i]);
    } else if (dense && s[2] == sizeof(B) && s[3] == 0) {
      const C cv = *c;
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i], cv);
    } else if (dense && s[2] == 0 && s[3] == sizeof(C)) {
      const B bv = *b;
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv, c[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<Out*>(p[0] + i * s[0]) = f(*reinterpret_cast<const A*>(p[1] + i * s[1]),
                                                     *reinterpret_cast<const B*>(p[2] + i * s[2]),
                                                     *reinterpret_cast<const C*>(p[3] + i * s[3]));
    }
  });
}

}  // namespace kiln::cpu
