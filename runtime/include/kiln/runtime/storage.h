// Storage: a reference-counted block of device memory that tensors view into.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "device.h"

namespace kiln {

class Storage {
 public:
  using Deleter = std::function<void(void*)>;
  // Allocates nbytes on `device` through its caching allocator.
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device = Device::cpu());
  // Wraps memory owned elsewhere; `deleter` (may be empty) runs when the last tensor goes.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, Device device, Deleter deleter);
  // Page-locked host memory (the CUDA driver's), for asynchronous copies to and from a GPU.
  static std::shared_ptr<Storage> allocate_pinned(size_t nbytes);

  Storage(void* data, size_t nbytes, Device device, Deleter deleter)
      : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool is_pinned() const { return pinned_; }
  // Writes in place so far (autograd checks that what it saved was not overwritten since).
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  Deleter deleter_;
  bool pinned_ = false;
  std::atomic<uint64_t> version_{0};
};

// The CPU caching allocator. Fresh pages cost a page fault per 4 KiB on first write (2-5 GB/s
// here), so large blocks are kept for reuse instead of being returned to the kernel, and are
// backed by transparent huge pages where the system allows it.
namespace cpu_allocator {
void* allocate(size_t nbytes);
void release(void* p, size_t nbytes);
struct Stats {
  size_t allocated_bytes = 0;  // handed out and not yet released
  size_t cached_bytes = 0;     // released and kept for reuse
  size_t hits = 0, misses = 0;
};
Stats stats();
// Returns every cached block to the system.
void empty_cache();
}  // namespace cpu_allocator

}  // namespace kiln
