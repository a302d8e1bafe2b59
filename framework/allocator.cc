#include "framework/allocator.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "loom/config.h"

namespace loom {

void Allocator::Account(ptrdiff_t delta) {
  size_t now = in_use_.fetch_add(static_cast<size_t>(delta)) + static_cast<size_t>(delta);
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

namespace {

constexpr size_t kCpuAlignment = 64;

class CpuAllocator : public Allocator {
 public:
  void* Allocate(size_t bytes) override {
    size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    void* p = std::aligned_alloc(kCpuAlignment, rounded == 0 ? kCpuAlignment : rounded);
    LOOM_CHECK(p != nullptr, "out of host memory allocating ", bytes, " bytes");
    Account(static_cast<ptrdiff_t>(bytes));
    return p;
  }
  void Free(void* ptr, size_t bytes) override {
    std::free(ptr);
    Account(-static_cast<ptrdiff_t>(bytes));
  }
};

}  // namespace

Allocator* GetAllocator(const Place& place) {
  static std::mutex mu;
  static auto* cpu = new std::unordered_map<int, std::unique_ptr<Allocator>>();
  if (place.is_cuda()) {
#if LOOM_CUDA_ENABLED
    return internal::CudaAllocator(place.device);
#else
    LOOM_CHECK(false, "CUDA place ", place.ToString(), " in a build without CUDA");
#endif
  }
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*cpu)[place.device];
  if (!slot) slot = std::make_unique<CpuAllocator>();
  return slot.get();
}

Allocation::Allocation(Place place, size_t bytes)
    : place_(place), size_(bytes), allocator_(GetAllocator(place)) {
  ptr_ = allocator_->Allocate(bytes);
}

Allocation::Allocation(Place place, void* ptr, size_t bytes, std::function<void(void*)> release)
    : place_(place), size_(bytes), ptr_(ptr), release_(std::move(release)) {}

Allocation::~Allocation() {
  if (release_) {
    release_(ptr_);
  } else {
    allocator_->Free(ptr_, size_);
  }
}

void MemCopy(const Place& dst_place, void* dst, const Place& src_place, const void* src,
             size_t bytes) {
  if (bytes == 0) return;
  if (dst_place.is_cpu() && src_place.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if LOOM_CUDA_ENABLED
  internal::CudaMemCopy(dst_place, dst, src_place, src, bytes);
#else
  LOOM_CHECK(false, "copy between ", src_place.ToString(), " and ", dst_place.ToString(),
             " in a build without CUDA");
#endif
}

}  // namespace loom
