#include "base/copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace loom {
namespace {

// A 4 KiB-aligned arena, so that tests place buffers at chosen page offsets.
struct Arena {
  explicit Arena(size_t bytes) : storage(bytes + 4096) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(storage.data());
    base = storage.data() + ((4096 - p % 4096) % 4096);
  }
  std::vector<unsigned char> storage;
  unsigned char* base;
};

void Fill(unsigned char* p, size_t bytes, unsigned seed) {
  for (size_t i = 0; i < bytes; ++i)
    p[i] = static_cast<unsigned char>((i * 131 + seed * 7) ^ (i >> 8));
}

// Copies between two disjoint buffers at every page skew around the aliasing band and checks
// every byte, and that the bytes around the destination are untouched.
TEST(CopyBytesTest, DisjointBuffersAtEverySkew) {
  const size_t sizes[] = {0, 1, 63, 64, 65, 2047, 2048, 2049, 4096 + 13, 65536, 65536 + 5, 300000};
  const size_t max_bytes = 300000 + 64;
  Arena arena(3 * max_bytes + 8192);
  unsigned char* src = arena.base + 8;
  for (size_t bytes : sizes) {
    for (size_t skew : {0, 1, 7, 8, 16, 24, 31, 32, 48, 63, 64, 65, 100, 4032, 4090}) {
      // dst sits `skew` bytes past src modulo 4 KiB, a whole number of pages past its end.
      unsigned char* dst = src + ((bytes + 64) / 4096 + 1) * 4096 + skew;
      ASSERT_LE(dst + bytes + 16, arena.base + 3 * max_bytes + 8192);
      Fill(src, bytes, 1);
      std::memset(dst - 16, 0xAB, bytes + 32);
      CopyBytes(dst, src, bytes);
      ASSERT_EQ(std::memcmp(dst, src, bytes), 0) << bytes << " bytes at skew " << skew;
      for (int g = 1; g <= 16; ++g) {
        ASSERT_EQ(dst[-g], 0xAB) << "wrote before the destination: " << bytes << " @ " << skew;
        ASSERT_EQ(dst[bytes + g - 1], 0xAB)
            << "wrote past the destination: " << bytes << " @ " << skew;
      }
      const bool own = CopyBytesAvoidsAliasing(dst, src, bytes);
#if defined(__SSE2__)
      EXPECT_EQ(own, bytes >= 2048 && skew % 4096 != 0 && skew % 4096 < 64)
          << bytes << " @ " << skew;
#else
      EXPECT_FALSE(own);
#endif
    }
  }
}

// A destination below the source whose skew still falls in the band (dst - src = -2 * 64 KiB
// + 16): the backward loop copies it too.
TEST(CopyBytesTest, DestinationBelowSource) {
  Arena arena(4 * 65536);
  unsigned char* dst = arena.base + 16;
  unsigned char* src = arena.base + 2 * 65536;  // dst - src = -2*65536 + 16: skew 16
  ASSERT_EQ((reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src)) & 4095, 16u);
  Fill(src, 65536, 3);
  CopyBytes(dst, src, 65536);
  EXPECT_EQ(std::memcmp(dst, src, 65536), 0);
#if defined(__SSE2__)
  EXPECT_TRUE(CopyBytesAvoidsAliasing(dst, src, 65536));
#endif
}

// Overlapping buffers keep memmove's meaning in both directions, skews in the band included.
TEST(CopyBytesTest, OverlapIsMemmove) {
  const size_t bytes = 20000;
  for (ptrdiff_t shift : {-4100, -4096, -63, -16, -1, 1, 16, 63, 4096, 4100, 4112}) {
    Arena arena(3 * bytes);
    unsigned char* src = arena.base + bytes;
    Fill(src, bytes, 5);
    std::vector<unsigned char> want(src, src + bytes);
    unsigned char* dst = src + shift;
    EXPECT_FALSE(CopyBytesAvoidsAliasing(dst, src, bytes)) << shift;
    CopyBytes(dst, src, bytes);
    EXPECT_EQ(std::memcmp(dst, want.data(), bytes), 0) << "shift " << shift;
  }
}

// Streaming copies at every destination alignment a 16-byte store cares about, with heads and
// tails of every length.
TEST(StreamCopyBytesTest, EveryAlignmentAndLength) {
  Arena arena(2 * 70000);
  for (size_t bytes : {0, 1, 15, 16, 17, 63, 64, 65, 129, 4096, 65536 + 7}) {
    for (size_t align = 0; align < 16; ++align) {
      unsigned char* src = arena.base + 3;
      unsigned char* dst = arena.base + 70000 + align;
      Fill(src, bytes, static_cast<unsigned>(align));
      std::memset(dst - 1, 0xCD, bytes + 2);
      StreamCopyBytes(dst, src, bytes);
      StreamCopyFence();
      ASSERT_EQ(std::memcmp(dst, src, bytes), 0) << bytes << " bytes, alignment " << align;
      ASSERT_EQ(dst[-1], 0xCD);
      ASSERT_EQ(dst[bytes], 0xCD);
    }
  }
}

TEST(CopyBytesTest, SameBufferAndEmptyCopyAreNoOps) {
  std::vector<unsigned char> a(5000);
  Fill(a.data(), a.size(), 9);
  std::vector<unsigned char> want = a;
  CopyBytes(a.data(), a.data(), a.size());
  CopyBytes(a.data() + 100, a.data(), 0);
  EXPECT_EQ(a, want);
}

}  // namespace
}  // namespace loom
