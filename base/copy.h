// Host memory copies that stay fast whatever the two buffers' addresses are.
#pragma once

#include <cstddef>
#include <cstring>

namespace loom {

// memmove(dst, src, bytes), with one difference: a copy whose destination lies 1 to 63 bytes
// past the source modulo 4 KiB ((dst - src) mod 4096 in [1, 63]) runs backwards through
// 64-byte blocks instead of through the C library.
//
// Why: the C library copies 2 KiB .. ~512 KiB with `rep movsb` on CPUs with fast short
// `rep movsb` (FSRM), and on AMD Zen that instruction slows down ~20x when every load falls a
// few bytes past a store it has just done in the same 4 KiB page offset ("4K aliasing"; glibc
// bug 30994, fixed in glibc 2.39; Debian 12 ships 2.36). Two buffers from malloc land there
// easily: consecutive heap blocks of a page multiple sit 16 bytes (the block header) apart
// modulo 4 KiB. Measured on a 2-core AMD EPYC VM (docs/PERF.md "host copies"): 64 KiB took
// 36 us at 16 bytes past, 1.7 us in step; the backward loop takes 2.2 us at every offset in
// the band. Copying backwards puts each load below the stores just made, so no load waits on a
// store it merely aliases.
//
// Overlapping buffers keep memmove's meaning (they always go to memmove). Copies under 2 KiB
// (which the C library never does with `rep movsb`) are plain memmove, inline.
namespace internal {
inline constexpr size_t kCopyAliasingMinBytes = 2048;
void CopyBytesLarge(void* dst, const void* src, size_t bytes);
}  // namespace internal

inline void CopyBytes(void* dst, const void* src, size_t bytes) {
  if (bytes < internal::kCopyAliasingMinBytes) {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
    return;
  }
  internal::CopyBytesLarge(dst, src, bytes);
}

// Whether CopyBytes takes its own path for these buffers (for tests and benchmarks).
bool CopyBytesAvoidsAliasing(const void* dst, const void* src, size_t bytes);

// memcpy (disjoint buffers) with streaming stores: for a destination that will not be read
// again soon, so that the stores skip reading each line into the caches first. Other threads
// see the data only after StreamCopyFence on the writing thread.
void StreamCopyBytes(void* dst, const void* src, size_t bytes);
void StreamCopyFence();

}  // namespace loom
