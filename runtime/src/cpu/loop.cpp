#include "loop.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <numeric>

#include "kiln/runtime/env.h"
#include "kiln/runtime/parallel.h"

namespace kiln::cpu {

int num_threads() {
  static int n = env::num_threads();
  return n;
}

int64_t parallel_grain() {
  static const int64_t grain = kParallelGrainActive * (env::omp_passive_wait() ? kPassiveGrainFactor : 1);
  return grain;
}

namespace {
thread_local int last_threads = 0;
}
int last_parallel_threads() { return last_threads; }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  if (n <= 0) return;
  int nt = int(std::min<int64_t>(num_threads(), (n + grain - 1) / std::max<int64_t>(grain, 1)));
  if (nt <= 1 || parallel::in_job()) {
    last_threads = 1;
    f(0, n);
    return;
  }
  last_threads = nt;
  // On kiln's pool, as the compiled kernels (runtime/parallel.h): one set of kernel threads, and
  // the caller never waits for a part no thread has started. Exceptions must not leave a part:
  // the first is kept and rethrown after the job.
  std::exception_ptr err;
  std::mutex err_mu;
  const int64_t chunk = (n + nt - 1) / nt;
  parallel::run(nt, [&](int t) {
    int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b >= e) return;
    try {
      f(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(err_mu);
      if (!err) err = std::current_exception();
    }
  });
  if (err) std::rethrow_exception(err);
}

void copy_bytes(void* dst, const void* src, size_t n) {
  // One thread copies a large buffer at about half the rate two reach (a 64 MiB copy on a
  // 2-core host: 7.2 against 2.9 ms), and what it writes then sits in its own core's caches:
  // a compiled in-place kernel over the 64 MiB right after the copy ran 2.7 ms against 1.6 after
  // the split copy (docs/perf-journal.md, "In-register tile transposes, a parallel eager copy").
  constexpr int64_t kLine = 64, kGrainLines = (int64_t(256) << 10) / kLine;
  const int64_t lines = (int64_t(n) + kLine - 1) / kLine;
  parallel_for(lines, kGrainLines, [&](int64_t b, int64_t e) {
    const size_t lo = size_t(b * kLine), hi = std::min(size_t(e * kLine), n);
    std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, hi - lo);
  });
}

Iter::Iter(const std::vector<Tensor>& ops, IntArrayRef shape) : n_(int(ops.size())) {
  KILN_INTERNAL_ASSERT(n_ >= 1 && n_ <= kMaxOperands);
  const int64_t nd = int64_t(shape.size());
  numel_ = 1;
  for (int64_t s : shape) numel_ *= s;
  // byte strides per operand in the broadcast shape, outermost first
  std::array<std::vector<int64_t>, kMaxOperands> st;
  for (int k = 0; k < n_; ++k) {
    const Tensor& t = ops[k];
    st[k].assign(nd, 0);
    int64_t off = nd - t.dim();
    for (int64_t d = 0; d < t.dim(); ++d)
      if (t.sizes()[d] != 1) st[k][d + off] = t.strides()[d] * t.element_size();
    base_[k] = static_cast<char*>(t.data_ptr());
  }
  // Order dims innermost first: by the output's stride, then the inputs', ascending; a stable
  // sort keeps the row-major order among ties (e.g. broadcast dims of the output).
  std::vector<int64_t> perm(nd);
  std::iota(perm.begin(), perm.end(), 0);
  std::reverse(perm.begin(), perm.end());
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t x, int64_t y) {
    for (int k = 0; k < n_; ++k) {
      int64_t a = std::abs(st[k][x]), b = std::abs(st[k][y]);
      if (a == 0 || b == 0) continue;  // broadcast dims say nothing about order
      if (a != b) return a < b;
    }
    return false;
  });
  // Drop size-1 dims and merge dim pairs that are contiguous in every operand.
  for (int64_t d : perm) {
    if (shape[d] == 1) continue;
    if (!shape_.empty()) {
      int64_t last = int64_t(shape_.size()) - 1;
      bool mergeable = true;
      for (int k = 0; k < n_ && mergeable; ++k)
        mergeable = st[k][d] == strides_[k][last] * shape_[last];
      if (mergeable) {
        shape_[last] *= shape[d];
        continue;
      }
    }
    shape_.push_back(shape[d]);
    for (int k = 0; k < n_; ++k) strides_[k].push_back(st[k][d]);
  }
  if (shape_.empty()) {
    shape_.push_back(numel_ == 0 ? 0 : 1);
    for (int k = 0; k < n_; ++k) strides_[k].push_back(0);
  }
}

void Iter::serial_range(const Loop& loop, int64_t begin, int64_t end) const {
  const int nd = ndim();
  std::array<int64_t, 64> small_idx{};
  std::vector<int64_t> big_idx;
  int64_t* idx = small_idx.data();
  if (nd > 64) {
    big_idx.assign(nd, 0);
    idx = big_idx.data();
  }
  int64_t rem = begin;
  for (int d = 0; d < nd; ++d) {
    idx[d] = rem % shape_[d];
    rem /= shape_[d];
  }
  std::array<char*, kMaxOperands> ptr;
  std::array<int64_t, kMaxOperands> inner;
  for (int k = 0; k < n_; ++k) inner[k] = strides_[k][0];
  while (begin < end) {
    int64_t n = std::min(shape_[0] - idx[0], end - begin);
    for (int k = 0; k < n_; ++k) {
      char* p = base_[k];
      for (int d = 0; d < nd; ++d) p += idx[d] * strides_[k][d];
      ptr[k] = p;
    }
    loop(ptr.data(), inner.data(), n);
    begin += n;
    idx[0] += n;
    for (int d = 0; d < nd - 1 && idx[d] == shape_[d]; ++d) {
      idx[d] = 0;
      ++idx[d + 1];
    }
  }
}

void Iter::for_each(const Loop& loop, int64_t grain) const {
  if (numel_ == 0) return;
  parallel_for(numel_, grain, [&](int64_t b, int64_t e) { serial_range(loop, b, e); });
}

}  // namespace kiln::cpu
