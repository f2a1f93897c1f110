#include "kiln/runtime/storage.h"

#include <sys/mman.h>

#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/runtime/cuda.h"
#include "kiln/runtime/env.h"
#include "kiln/runtime/error.h"

namespace kiln {

namespace cpu_allocator {
namespace {
constexpr size_t kAlign = 64;                 // a cache line, and an AVX-512 vector
constexpr size_t kLargeBlock = 256 * 1024;    // from here on blocks are cached and page-aligned
constexpr size_t kHugePage = 2 * 1024 * 1024;

// Rounds a large request up to one of four size classes per power of two, so a freed block
// serves later requests of nearly the same size.
size_t size_class(size_t n) {
  size_t p = size_t(1) << (63 - __builtin_clzll(n));  // largest power of two <= n
  size_t step = std::max<size_t>(p / 4, 4096);
  return (n + step - 1) / step * step;
}

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;
  Stats stats;
  size_t limit = env::cpu_cache_limit_bytes();
};
Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: tensors may be freed during static teardown
  return *c;
}

void* system_large(size_t n) {
  // (aligned_alloc wants a size that is a multiple of the alignment; size classes need not be)
  const size_t align = n >= kHugePage ? kHugePage : 4096;
  void* p = std::aligned_alloc(align, (n + align - 1) / align * align);
  if (p && n >= kHugePage) madvise(p, n, MADV_HUGEPAGE);
  return p;
}

// A byte count past int64 is a size computation gone wrong (a negative one cast): rounding it up
// to a block would wrap it into a small one.
void check_count(size_t nbytes, const std::string& where) {
  KILN_CHECK(nbytes <= size_t(std::numeric_limits<int64_t>::max()), "alloc", "cannot allocate ", nbytes, " bytes ",
             where, ": more than int64 can count");
}
}  // namespace

void* allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  check_count(nbytes, "on cpu");
  if (nbytes < kLargeBlock) {
    void* p = std::aligned_alloc(kAlign, (nbytes + kAlign - 1) / kAlign * kAlign);
    KILN_CHECK(p, "alloc", "out of memory allocating ", nbytes, " bytes on cpu");
    return p;
  }
  size_t n = size_class(nbytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free_blocks.find(n);
    if (it != c.free_blocks.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.stats.cached_bytes -= n;
      c.stats.allocated_bytes += n;
      ++c.stats.hits;
      return p;
    }
    ++c.stats.misses;
    c.stats.allocated_bytes += n;
  }
  void* p = system_large(n);
  if (!p) {
    empty_cache();
    p = system_large(n);
  }
  if (!p) {
    std::lock_guard<std::mutex> lock(c.mu);
    c.stats.allocated_bytes -= n;
  }
  KILN_CHECK(p, "alloc", "out of memory allocating ", nbytes, " bytes on cpu");
  return p;
}

void release(void* p, size_t nbytes) {
  if (!p) return;
  if (nbytes < kLargeBlock) {
    std::free(p);
    return;
  }
  size_t n = size_class(nbytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.stats.allocated_bytes -= n;
    if (c.stats.cached_bytes + n <= c.limit) {
      c.free_blocks[n].push_back(p);
      c.stats.cached_bytes += n;
      return;
    }
  }
  std::free(p);
}

Stats stats() {
  std::lock_guard<std::mutex> lock(cache().mu);
  return cache().stats;
}

void empty_cache() {
  Cache& c = cache();
  std::unordered_map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    blocks.swap(c.free_blocks);
    c.stats.cached_bytes = 0;
  }
  for (auto& [n, v] : blocks)
    for (void* p : v) std::free(p);
}
}  // namespace cpu_allocator

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  if (device.is_cuda()) {
    cpu_allocator::check_count(nbytes, "on " + device.str());
    // The driver's stream-ordered pool (kiln/runtime/cuda.h); throws when CUDA is unavailable.
    KILN_CHECK(cuda_is_available(), "alloc", "cannot allocate on ", device.str(), ": ", cuda_unavailable_reason());
    int index = device.index;
    void* p = cuda::allocate(nbytes, index);
    return std::make_shared<Storage>(p, nbytes, device, [nbytes, index](void* q) { cuda::release(q, nbytes, index); });
  }
  void* p = cpu_allocator::allocate(nbytes);
  return std::make_shared<Storage>(p, nbytes, device,
                                   [nbytes](void* q) { cpu_allocator::release(q, nbytes); });
}

std::shared_ptr<Storage> Storage::allocate_pinned(size_t nbytes) {
  cpu_allocator::check_count(nbytes, "of pinned memory");
  void* p = cuda::allocate_pinned(nbytes);
  auto s = std::make_shared<Storage>(p, nbytes, Device::cpu(), [](void* q) { cuda::release_pinned(q); });
  s->pinned_ = true;
  return s;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, Device device, Deleter deleter) {
  return std::make_shared<Storage>(data, nbytes, device, std::move(deleter));
}

Storage::~Storage() {
  if (deleter_) deleter_(data_);
}

}  // namespace kiln
