// kiln's kernel threads (see parallel.h).
//
// One job at a time: a job is a generation number, a count of parts and a body. The caller
// publishes it by bumping the generation (the futex word sleeping workers wait on), then claims
// parts like any worker. A part is claimed by a compare-and-swap on (generation, next part), so a
// worker that wakes late, after its job is over, finds another generation and claims nothing;
// the job's fields are read only after a successful claim, while the caller still waits for
// that part, so they cannot change under it.
#include "kiln/runtime/parallel.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/runtime/env.h"

namespace kiln::parallel {

namespace {

// How long a worker spins for the next job before it sleeps: the kernels of one compiled call
// follow each other within microseconds; a sleeping worker costs the next job nothing but its
// help (the caller does not wait for it).
constexpr auto kSpin = std::chrono::microseconds(50);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t seen) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

thread_local bool tls_in_job = false;

class Pool {
 public:
  static Pool& get() {
    static Pool* pool = new Pool();  // never destroyed: its workers may still sleep at exit
    return *pool;
  }
  int threads() const { return threads_; }
  uint64_t by_workers() const { return by_workers_.load(std::memory_order_relaxed); }

  void run(int parts, Body body, void* context) {
    if (parts <= 0) return;
    std::unique_lock<std::mutex> lock(busy_, std::defer_lock);
    if (parts == 1 || threads_ <= 1 || tls_in_job || !lock.try_lock()) {
      for (int i = 0; i < parts; ++i) body(context, i);
      return;
    }
    start_workers();
    tls_in_job = true;
    const uint32_t gen = epoch_.load(std::memory_order_relaxed) + 1;
    parts_.store(parts, std::memory_order_relaxed);
    body_ = body;
    context_ = context;
    done_.store(0, std::memory_order_relaxed);
    state_.store(uint64_t(gen) << 32, std::memory_order_release);
    // (seq_cst with the workers' sleepers_ then epoch_: a worker going to sleep either sees the
    // new generation or is counted, and then woken)
    epoch_.store(gen, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(&epoch_);
    int part;
    while (claim(gen, &part)) {
      body(context, part);
      done_.fetch_add(1, std::memory_order_release);
    }
    // Every part is claimed; wait for those a worker is running.
    for (int spins = 0; done_.load(std::memory_order_acquire) < parts; ++spins) {
      if (spins < 4096) cpu_relax();
      else sched_yield();  // (a worker preempted in its part needs this core)
    }
    tls_in_job = false;
  }

 private:
  Pool() : threads_(std::max(1, env::num_threads())) {}

  void start_workers() {
    std::call_once(started_, [this] {
      for (int i = 1; i < threads_; ++i) std::thread([this] { work(); }).detach();
    });
  }

  // Claims the next part of generation `gen`, if it is still the job and has parts left.
  bool claim(uint32_t gen, int* part) {
    uint64_t s = state_.load(std::memory_order_acquire);
    while (true) {
      if (uint32_t(s >> 32) != gen) return false;
      const uint32_t next = uint32_t(s);
      if (next >= uint32_t(parts_.load(std::memory_order_relaxed))) return false;
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        *part = int(next);
        return true;
      }
    }
  }

  void work() {
    tls_in_job = true;  // a body that starts a job of its own runs it alone
    uint32_t seen = epoch_.load(std::memory_order_acquire);
    while (true) {
      uint32_t gen = epoch_.load(std::memory_order_acquire);
      if (gen == seen) {
        const auto until = std::chrono::steady_clock::now() + kSpin;
        for (int i = 0; (gen = epoch_.load(std::memory_order_acquire)) == seen; ++i) {
          cpu_relax();
          if ((i & 255) == 255 && std::chrono::steady_clock::now() > until) {
            sleepers_.fetch_add(1, std::memory_order_seq_cst);
            if (epoch_.load(std::memory_order_seq_cst) == seen) futex_wait(&epoch_, seen);
            sleepers_.fetch_sub(1, std::memory_order_relaxed);
          }
        }
      }
      seen = gen;
      int part;
      while (claim(gen, &part)) {
        body_(context_, part);
        by_workers_.fetch_add(1, std::memory_order_relaxed);
        done_.fetch_add(1, std::memory_order_release);
      }
    }
  }

  const int threads_;
  std::once_flag started_;
  std::mutex busy_;                       // held by the caller of the job running
  std::atomic<uint32_t> epoch_{0};        // the current job's generation (the futex word)
  std::atomic<uint64_t> state_{0};        // generation << 32 | the next part to claim
  std::atomic<int> parts_{0};
  std::atomic<int> done_{0};              // parts finished
  Body body_ = nullptr;
  void* context_ = nullptr;
  std::atomic<int> sleepers_{0};
  std::atomic<uint64_t> by_workers_{0};
};

}  // namespace

int threads() { return Pool::get().threads(); }
void run(int parts, Body body, void* context) { Pool::get().run(parts, body, context); }
uint64_t parts_run_by_workers() { return Pool::get().by_workers(); }
bool in_job() { return tls_in_job; }

}  // namespace kiln::parallel
