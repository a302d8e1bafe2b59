#include "base/copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace loom {
namespace {

constexpr uintptr_t kPageMask = 4095;
constexpr uintptr_t kAliasingBand = 64;  // destinations 1..63 bytes past the source

#if defined(__SSE2__)
// Moves the 64 bytes at src to dst: four loads, then four stores through `store`.
template <typename Store>
inline void Move64(char* dst, const char* src, Store store) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
  const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
  store(reinterpret_cast<__m128i*>(dst), a);
  store(reinterpret_cast<__m128i*>(dst + 16), b);
  store(reinterpret_cast<__m128i*>(dst + 32), c);
  store(reinterpret_cast<__m128i*>(dst + 48), d);
}
#endif

}  // namespace

bool CopyBytesAvoidsAliasing(const void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
  if (bytes < internal::kCopyAliasingMinBytes) return false;
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

void internal::CopyBytesLarge(void* dst, const void* src, size_t bytes) {
  if (dst == src) return;
#if defined(__SSE2__)
  if (CopyBytesAvoidsAliasing(dst, src, bytes)) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    size_t i = bytes;
    while (i >= 64) {  // backwards: each load lies below the stores just made
      i -= 64;
      Move64(d + i, s + i, [](__m128i* p, __m128i v) { _mm_storeu_si128(p, v); });
    }
    std::memcpy(d, s, i);  // the head, under 64 bytes
    return;
  }
#endif
  std::memmove(dst, src, bytes);
}

void StreamCopyBytes(void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  // Streaming stores need 16-byte aligned destinations: the head up to that goes by memcpy.
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  size_t i = head;
  for (; i + 64 <= bytes; i += 64)
    Move64(d + i, s + i, [](__m128i* p, __m128i v) { _mm_stream_si128(p, v); });
  std::memcpy(d + i, s + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

void StreamCopyFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace loom
