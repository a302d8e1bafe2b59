#include "framework/allocator.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/copy.h"
#include "base/host_memory.h"
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

// Freed blocks of at least kCacheMinBytes are kept for reuse by a later allocation of the same
// rounded size, up to a process-wide budget (LOOM_CPU_CACHE_MB, default 1024; 0 turns the
// cache off). A training step allocates the same activation and gradient sizes every time;
// without the cache each such block goes back to the OS and the next step pays a page fault
// and a page clear per 4 KiB of it (~10% of a CNN step on a 2-core machine).
constexpr size_t kCacheMinBytes = 64 << 10;
constexpr size_t kCacheRound = 4 << 10;

size_t CacheBudget() {
  static const size_t budget = [] {
    if (const char* env = std::getenv("LOOM_CPU_CACHE_MB")) {
      long v = std::atol(env);
      return v > 0 ? static_cast<size_t>(v) << 20 : size_t{0};
    }
    return size_t{1024} << 20;
  }();
  return budget;
}

std::atomic<size_t> g_cached_bytes{0};  // over all CPU allocators
std::atomic<size_t> g_host_in_use{0};   // bytes handed out by all CPU allocators

// Host memory tensors may take in all (LOOM_HOST_MEMORY_MB; default: the machine's physical
// memory). Past it an allocation fails with ResourceExhausted instead of leaving the process to
// the kernel's out-of-memory killer (Linux overcommits: a huge malloc succeeds and the pages
// fail later).
}  // namespace

size_t HostMemoryLimit() {
  static const size_t limit = [] {
    if (const char* env = std::getenv("LOOM_HOST_MEMORY_MB")) {
      long v = std::atol(env);
      if (v > 0) return static_cast<size_t>(v) << 20;
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page)
                                 : SIZE_MAX;
  }();
  return limit;
}

namespace {

[[noreturn]] void OutOfHostMemory(size_t bytes, const char* why) {
  throw StatusError(ResourceExhausted("out of host memory allocating ", bytes, " bytes (", why,
                                      "; ", g_host_in_use.load() >> 20, " MiB in use, limit ",
                                      HostMemoryLimit() >> 20, " MiB: LOOM_HOST_MEMORY_MB)"));
}

class CpuAllocator : public Allocator {
 public:
  ~CpuAllocator() override {
    for (auto& [bytes, blocks] : cache_)
      for (void* p : blocks) Release(p, bytes);
  }

  void* Allocate(size_t bytes) override {
    if (bytes > HostMemoryLimit() - std::min(HostMemoryLimit(), g_host_in_use.load()))
      OutOfHostMemory(bytes, "over the limit");
    size_t rounded = Rounded(bytes);
    void* p = nullptr;
    if (rounded >= kCacheMinBytes) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find(rounded);
      if (it != cache_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        g_cached_bytes.fetch_sub(rounded);
      }
    }
    if (p == nullptr && Huge(rounded)) {
      p = AllocateHugeHostBlock(rounded);
      if (p == nullptr) OutOfHostMemory(bytes, "mmap failed");
    }
    if (p == nullptr) {
      p = std::aligned_alloc(kCpuAlignment, rounded);
      if (p == nullptr) OutOfHostMemory(bytes, "malloc failed");
    }
    g_host_in_use.fetch_add(bytes);
    Account(static_cast<ptrdiff_t>(bytes));
    return p;
  }

  void Free(void* ptr, size_t bytes) override {
    g_host_in_use.fetch_sub(bytes);
    Account(-static_cast<ptrdiff_t>(bytes));
    size_t rounded = Rounded(bytes);
    if (rounded >= kCacheMinBytes && g_cached_bytes.fetch_add(rounded) + rounded <= CacheBudget()) {
      std::lock_guard<std::mutex> lock(mu_);
      cache_[rounded].push_back(ptr);
      return;
    }
    if (rounded >= kCacheMinBytes) g_cached_bytes.fetch_sub(rounded);
    Release(ptr, rounded);
  }

 private:
  // Blocks of 2 MiB or more are mappings of their own in huge pages (base/host_memory.h).
  static bool Huge(size_t rounded) { return rounded >= kHugeHostBlockBytes && HugeHostBlocks(); }
  static void Release(void* p, size_t rounded) {
    if (Huge(rounded)) {
      FreeHugeHostBlock(p, rounded);
    } else {
      std::free(p);
    }
  }

  static size_t Rounded(size_t bytes) {
    size_t unit = bytes >= kCacheMinBytes ? kCacheRound : kCpuAlignment;
    if (bytes > SIZE_MAX - unit) OutOfHostMemory(bytes, "no such size");
    size_t r = (bytes + unit - 1) / unit * unit;
    return r == 0 ? kCpuAlignment : r;
  }

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> cache_;
};

}  // namespace

Allocator* GetAllocator(const Place& place) {
  static std::mutex mu;
  static auto* cpu = new std::unordered_map<int, std::unique_ptr<Allocator>>();
  if (place.is_cuda()) {
#if LOOM_CUDA_ENABLED
    return internal::CudaAllocator(place.device);
#else
    throw StatusError(
        FailedPrecondition("CUDA place ", place.ToString(), " in a build without CUDA"));
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
    CopyBytes(dst, src, bytes);
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
