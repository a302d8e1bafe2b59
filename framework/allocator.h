// Allocators: one per place. Each CPU place has its own allocator and statistics, so several
// CPU devices in one process account their memory independently (as GPUs would).
// Thread-safety: Allocate/Free may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>

#include "framework/place.h"

namespace loom {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr, size_t bytes) = 0;

  size_t bytes_in_use() const { return in_use_.load(); }
  size_t peak_bytes() const { return peak_.load(); }

 protected:
  void Account(ptrdiff_t delta);

 private:
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
};

// The allocator of a place (created on first use, lives for the process). Aborts for a CUDA
// place when Loom was built without CUDA: callers check places before reaching here.
Allocator* GetAllocator(const Place& place);

// Host memory all CPU tensors together may take: LOOM_HOST_MEMORY_MB, else the machine's
// physical memory. Past it a CPU allocation throws StatusError(ResourceExhausted).
size_t HostMemoryLimit();

// A block of memory on a place; freed when the last reference goes.
class Allocation {
 public:
  Allocation(Place place, size_t bytes);
  // Wraps memory owned elsewhere (e.g. a NumPy array): release(ptr) runs when the last
  // reference goes. Such memory is not counted by the place's allocator statistics.
  Allocation(Place place, void* ptr, size_t bytes, std::function<void(void*)> release);
  ~Allocation();
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  void* ptr() const { return ptr_; }
  size_t size() const { return size_; }
  const Place& place() const { return place_; }

 private:
  Place place_;
  size_t size_;
  void* ptr_;
  Allocator* allocator_ = nullptr;
  std::function<void(void*)> release_;
};

// Copies bytes between places (host<->device, device<->device). Synchronous.
void MemCopy(const Place& dst_place, void* dst, const Place& src_place, const void* src,
             size_t bytes);

namespace internal {
// Defined in allocator_cuda.cc when CUDA is enabled.
Allocator* CudaAllocator(int device);
void CudaMemCopy(const Place& dst_place, void* dst, const Place& src_place, const void* src,
                 size_t bytes);
}  // namespace internal

}  // namespace loom
