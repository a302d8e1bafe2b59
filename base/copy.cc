#include "base/copy.h"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace loom {
namespace {

// Below this the C library copies with vector moves, never `rep movsb` (its threshold is
// 2112 bytes and up).
constexpr size_t kAliasingMinBytes = 2048;
constexpr uintptr_t kPageMask = 4095;
constexpr uintptr_t kAliasingBand = 64;  // destinations 1..63 bytes past the source

}  // namespace

bool CopyBytesAvoidsAliasing(const void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
  if (bytes < kAliasingMinBytes) return false;
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t s = reinterpret_cast<uintptr_t>(src);
  const bool disjoint = d >= s ? d - s >= bytes : s - d >= bytes;
  const uintptr_t skew = (d - s) & kPageMask;
  return disjoint && skew != 0 && skew < kAliasingBand;
#else
  (void)dst, (void)src, (void)bytes;
  return false;
#endif
}

void CopyBytes(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
#if defined(__SSE2__)
  if (CopyBytesAvoidsAliasing(dst, src, bytes)) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    size_t i = bytes;
    while (i >= 64) {
      i -= 64;
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), a);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    }
    std::memcpy(d, s, i);  // the head, under 64 bytes
    return;
  }
#endif
  std::memmove(dst, src, bytes);
}

}  // namespace loom
