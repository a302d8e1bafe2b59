#include "base/host_memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace loom {

namespace {

constexpr size_t kPage = 4096;

size_t MappedBytes(size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

}  // namespace

bool HugeHostBlocks() {
  static const bool on = [] {
    const char* env = std::getenv("LOOM_HUGE_PAGES");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return on;
}

void* AllocateHugeHostBlock(size_t bytes) {
  if (bytes == 0 || bytes > SIZE_MAX / 2) return nullptr;
  const size_t mapped = MappedBytes(bytes);
  // Map a huge page more than needed, then give back the head before the first 2 MiB boundary
  // and the tail past the block.
  const size_t span = mapped + kHugeHostBlockBytes;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugeHostBlockBytes - 1) & ~(kHugeHostBlockBytes - 1);
  const size_t head = aligned - start;
  const size_t tail = span - head - mapped;
  if (head > 0) munmap(raw, head);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + mapped), tail);
  void* p = reinterpret_cast<void*>(aligned);
  // Only advice: where the kernel has no transparent huge pages the block stays in 4 KiB pages.
  madvise(p, mapped, MADV_HUGEPAGE);
  return p;
}

void FreeHugeHostBlock(void* p, size_t bytes) {
  if (p != nullptr) munmap(p, MappedBytes(bytes));
}

}  // namespace loom
