// Direct fp32 convolution kernels (AVX2 + FMA); see conv2d_direct.h.
#include "operators/nn/conv2d_direct.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "base/copy.h"
#include "framework/parallel.h"

namespace loom::ops::conv_direct {
namespace {

constexpr int64_t kTileP = 6;   // output pixels (forward) or filter taps (filter grad) per tile
constexpr int64_t kTileC = 16;  // output channels per tile: two vectors of 8 floats

bool CpuHasAvx2Fma() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

bool Enabled() {
  if (!CpuHasAvx2Fma()) return false;
  const char* algo = std::getenv("LOOM_CONV_ALGO");
  return algo == nullptr || std::strcmp(algo, "im2col") != 0;
}

// A tile always computes 16 channels; the direct kernels pay off only when at most a quarter of
// those are padding (e.g. 12-16, 24-32, 36-48, ... channels).
bool ChannelsFillTiles(int64_t channels) {
  int64_t padded = (channels + kTileC - 1) / kTileC * kTileC;
  return channels > 0 && 4 * (padded - channels) <= padded;
}

// One convolution in channel groups over NCHW planes, stride (sh, sw) and dilation (dh, dw);
// the input is read as if placed at row pt, column pl of a zero plane [Hp, Wp].
struct Conv {
  int64_t n, groups, cin, cout;  // batch; channel groups; channels per group (in, out)
  int64_t h, w, ho, wo;          // input and output planes
  int64_t kh, kw, sh, sw, dh, dw, pt, pl;
  int64_t Hp() const { return (ho - 1) * sh + (kh - 1) * dh + 1; }
  int64_t Wp() const { return (wo - 1) * sw + (kw - 1) * dw + 1; }
  int64_t Taps() const { return cin * kh * kw; }
  int64_t Blocks() const { return (cout + kTileC - 1) / kTileC; }
};

// Copies `planes` planes [h, w] into xp [planes, Hp, Wp] at (pt, pl), clipped to the padded
// plane. The rest of xp stays as allocated (zero): every call writes the same positions.
void PadPlanes(const Conv& cv, int64_t planes, const float* x, float* xp) {
  const int64_t hp = cv.Hp(), wp = cv.Wp();
  const int64_t y0 = std::max<int64_t>(0, -cv.pt), y1 = std::min(cv.h, hp - cv.pt);
  const int64_t z0 = std::max<int64_t>(0, -cv.pl), z1 = std::min(cv.w, wp - cv.pl);
  if (y1 <= y0 || z1 <= z0) return;
  for (int64_t c = 0; c < planes; ++c)
    for (int64_t y = y0; y < y1; ++y)
      CopyBytes(xp + (c * hp + y + cv.pt) * wp + z0 + cv.pl, x + (c * cv.h + y) * cv.w + z0,
                sizeof(float) * (z1 - z0));
}

// Offset in the padded input of the first tap of each output pixel.
std::vector<int64_t> PixelOffsets(const Conv& cv) {
  std::vector<int64_t> pix(cv.ho * cv.wo);
  for (int64_t y = 0; y < cv.ho; ++y)
    for (int64_t z = 0; z < cv.wo; ++z) pix[y * cv.wo + z] = y * cv.sh * cv.Wp() + z * cv.sw;
  return pix;
}

// The filter as [groups][blocks][taps][16]: the 16 output channels of a block for one tap are
// contiguous (channels past cout are zero). filt(gi, oc, tap) gives one weight.
template <typename F>
std::vector<float> PackFilter(const Conv& cv, F filt) {
  const int64_t taps = cv.Taps(), blocks = cv.Blocks();
  std::vector<float> packed(cv.groups * blocks * taps * kTileC, 0.0f);
  for (int64_t gi = 0; gi < cv.groups; ++gi)
    for (int64_t oc = 0; oc < cv.cout; ++oc) {
      float* dst = packed.data() + (gi * blocks + oc / kTileC) * taps * kTileC + oc % kTileC;
      for (int64_t t = 0; t < taps; ++t) dst[t * kTileC] = filt(gi, oc, t);
    }
  return packed;
}

// Two accumulators (16 channels) of one pixel or tap: a += b * w.
#define LOOM_CONV_FMA2(b_ptr, a0, a1, v0, v1)     \
  do {                                            \
    const __m256 b_ = _mm256_broadcast_ss(b_ptr); \
    a0 = _mm256_fmadd_ps(b_, v0, a0);             \
    a1 = _mm256_fmadd_ps(b_, v1, a1);             \
  } while (0)

// The whole 6 x 16 tile: the six inputs at p0..p5 + o times the 16 weights in v0, v1.
#define LOOM_CONV_FMA_TILE(o)                   \
  do {                                          \
    LOOM_CONV_FMA2(p0 + (o), a00, a01, v0, v1); \
    LOOM_CONV_FMA2(p1 + (o), a10, a11, v0, v1); \
    LOOM_CONV_FMA2(p2 + (o), a20, a21, v0, v1); \
    LOOM_CONV_FMA2(p3 + (o), a30, a31, v0, v1); \
    LOOM_CONV_FMA2(p4 + (o), a40, a41, v0, v1); \
    LOOM_CONV_FMA2(p5 + (o), a50, a51, v0, v1); \
  } while (0)

#define LOOM_CONV_LOAD_TILE(t)                                         \
  __m256 a00 = _mm256_loadu_ps(t), a01 = _mm256_loadu_ps(t + 8);       \
  __m256 a10 = _mm256_loadu_ps(t + 16), a11 = _mm256_loadu_ps(t + 24); \
  __m256 a20 = _mm256_loadu_ps(t + 32), a21 = _mm256_loadu_ps(t + 40); \
  __m256 a30 = _mm256_loadu_ps(t + 48), a31 = _mm256_loadu_ps(t + 56); \
  __m256 a40 = _mm256_loadu_ps(t + 64), a41 = _mm256_loadu_ps(t + 72); \
  __m256 a50 = _mm256_loadu_ps(t + 80), a51 = _mm256_loadu_ps(t + 88)

#define LOOM_CONV_STORE_TILE(t)                                 \
  _mm256_storeu_ps(t, a00), _mm256_storeu_ps(t + 8, a01);       \
  _mm256_storeu_ps(t + 16, a10), _mm256_storeu_ps(t + 24, a11); \
  _mm256_storeu_ps(t + 32, a20), _mm256_storeu_ps(t + 40, a21); \
  _mm256_storeu_ps(t + 48, a30), _mm256_storeu_ps(t + 56, a31); \
  _mm256_storeu_ps(t + 64, a40), _mm256_storeu_ps(t + 72, a41); \
  _mm256_storeu_ps(t + 80, a50), _mm256_storeu_ps(t + 88, a51)

// tile[r][0..16) = sum over taps of x at px[r] + tap offset times the tap's 16 weights, for the
// 6 pixels r. KW > 0: the kernel width, known at compile time (unrolled), with unit column
// dilation (cstep 1), so each tap is a constant displacement; KW = 0: any width and dilation.
template <int KW>
__attribute__((target("avx2,fma"))) void ConvTile(const float* const* px, const float* wt,
                                                  int64_t cin, int64_t kh, int64_t kw_rt,
                                                  int64_t plane, int64_t rstep, int64_t cstep,
                                                  float* tile) {
  const float *p0 = px[0], *p1 = px[1], *p2 = px[2], *p3 = px[3], *p4 = px[4], *p5 = px[5];
  const __m256 zero = _mm256_setzero_ps();
  __m256 a00 = zero, a01 = zero, a10 = zero, a11 = zero, a20 = zero, a21 = zero;
  __m256 a30 = zero, a31 = zero, a40 = zero, a41 = zero, a50 = zero, a51 = zero;
  const int64_t kw = KW > 0 ? KW : kw_rt;
  for (int64_t ic = 0; ic < cin; ++ic) {
    for (int64_t i = 0; i < kh; ++i) {
      const int64_t row = ic * plane + i * rstep;
#pragma GCC unroll 8
      for (int64_t j = 0; j < kw; ++j) {
        const __m256 v0 = _mm256_loadu_ps(wt), v1 = _mm256_loadu_ps(wt + 8);
        wt += kTileC;
        const int64_t o = row + j * (KW > 0 ? 1 : cstep);
        LOOM_CONV_FMA_TILE(o);
      }
    }
  }
  LOOM_CONV_STORE_TILE(tile);
}

using ConvTileFn = void (*)(const float* const*, const float*, int64_t, int64_t, int64_t, int64_t,
                            int64_t, int64_t, float*);

ConvTileFn PickConvTile(int64_t kw, int64_t cstep) {
  if (cstep != 1) return ConvTile<0>;
  switch (kw) {
    case 1: return ConvTile<1>;
    case 2: return ConvTile<2>;
    case 3: return ConvTile<3>;
    case 4: return ConvTile<4>;
    case 5: return ConvTile<5>;
    case 6: return ConvTile<6>;
    case 7: return ConvTile<7>;
    default: return ConvTile<0>;
  }
}

// tile[r][0..16) += sum over pixels p of x at px[r] + pix[p] times dt[p * ldt + 0..16), for
// the 6 taps r.
__attribute__((target("avx2,fma"))) void FilterTile(const float* const* px, const float* dt,
                                                    int64_t ldt, const int64_t* pix, int64_t npix,
                                                    float* tile) {
  const float *p0 = px[0], *p1 = px[1], *p2 = px[2], *p3 = px[3], *p4 = px[4], *p5 = px[5];
  LOOM_CONV_LOAD_TILE(tile);
  for (int64_t p = 0; p < npix; ++p) {
    const float* d = dt + p * ldt;
    const __m256 v0 = _mm256_loadu_ps(d), v1 = _mm256_loadu_ps(d + 8);
    const int64_t o = pix[p];
    LOOM_CONV_FMA_TILE(o);
  }
  LOOM_CONV_STORE_TILE(tile);
}

// Writes tile[r][c] (6 pixels x 16 channels) to dst[c * ld + r] for r < 6, c < nc: two 8x8
// transposes in registers (pixel rows 6 and 7 are zero) and one 8-float store per channel,
// instead of 96 scalar copies. Each store also writes dst[c * ld + 6..7]; the caller makes sure
// those lie inside the channel's plane and are written again later by the next tile.
__attribute__((target("avx2,fma"))) void StoreTileTransposed(const float* tile, float* dst,
                                                             int64_t ld, int64_t nc) {
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t half = 0; half < 2 && half * 8 < nc; ++half) {
    const float* t = tile + half * 8;
    __m256 r0 = _mm256_loadu_ps(t), r1 = _mm256_loadu_ps(t + 16), r2 = _mm256_loadu_ps(t + 32);
    __m256 r3 = _mm256_loadu_ps(t + 48), r4 = _mm256_loadu_ps(t + 64);
    __m256 r5 = _mm256_loadu_ps(t + 80);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, zero, 0x44), s5 = _mm256_shuffle_ps(t4, zero, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, zero, 0x44), s7 = _mm256_shuffle_ps(t5, zero, 0xEE);
    const __m256 cols[8] = {
        _mm256_permute2f128_ps(s0, s4, 0x20), _mm256_permute2f128_ps(s1, s5, 0x20),
        _mm256_permute2f128_ps(s2, s6, 0x20), _mm256_permute2f128_ps(s3, s7, 0x20),
        _mm256_permute2f128_ps(s0, s4, 0x31), _mm256_permute2f128_ps(s1, s5, 0x31),
        _mm256_permute2f128_ps(s2, s6, 0x31), _mm256_permute2f128_ps(s3, s7, 0x31)};
    const int64_t c_end = std::min<int64_t>(8, nc - half * 8);
    for (int64_t c = 0; c < c_end; ++c) _mm256_storeu_ps(dst + (half * 8 + c) * ld, cols[c]);
  }
}

#undef LOOM_CONV_FMA2
#undef LOOM_CONV_FMA_TILE
#undef LOOM_CONV_LOAD_TILE
#undef LOOM_CONV_STORE_TILE

// out [n, groups * cout, ho, wo] = cv applied to in [n, groups * cin, h, w] with the packed
// filter. (sample, group, channel block) items are split over Loom's threads, so a batch of one
// still uses every core.
void RunConv(const Conv& cv, const float* in, const std::vector<float>& packed, float* out) {
  const int64_t hp = cv.Hp(), wp = cv.Wp(), plane = hp * wp, npix = cv.ho * cv.wo;
  const int64_t taps = cv.Taps(), blocks = cv.Blocks();
  const std::vector<int64_t> pix = PixelOffsets(cv);
  const ConvTileFn tile_fn = PickConvTile(cv.kw, cv.dw);
  ParallelFor(cv.n * cv.groups * blocks, 1, [&](int64_t b, int64_t e) {
    std::unique_ptr<float[]> xp(new float[std::max<int64_t>(cv.cin * plane, 1)]());
    alignas(32) float tile[kTileP * kTileC];
    const float* px[kTileP];
    int64_t padded = -1;  // the (sample, group) whose input xp holds
    for (int64_t item = b; item < e; ++item) {
      const int64_t u = item / blocks, blk = item % blocks;
      if (u != padded) PadPlanes(cv, cv.cin, in + u * cv.cin * cv.h * cv.w, xp.get());
      padded = u;
      float* o = out + u * cv.cout * npix;
      const int64_t gi = u % cv.groups;
      const float* wt = packed.data() + (gi * blocks + blk) * taps * kTileC;
      const int64_t oc0 = blk * kTileC, nc = std::min(kTileC, cv.cout - oc0);
      for (int64_t p0 = 0; p0 < npix; p0 += kTileP) {
        const int64_t np = std::min(kTileP, npix - p0);
        for (int64_t r = 0; r < kTileP; ++r) px[r] = xp.get() + pix[p0 + std::min(r, np - 1)];
        tile_fn(px, wt, cv.cin, cv.kh, cv.kw, plane, cv.dh * wp, cv.dw, tile);
        if (p0 + 8 <= npix) {  // a later tile of this block rewrites pixels p0 + 6, p0 + 7
          StoreTileTransposed(tile, o + oc0 * npix + p0, npix, nc);
          continue;
        }
        for (int64_t c = 0; c < nc; ++c) {
          float* dst = o + (oc0 + c) * npix + p0;
          for (int64_t r = 0; r < np; ++r) dst[r] = tile[r * kTileC + c];
        }
      }
    }
  });
}

Conv ForwardConv(const ConvGeom& g) {
  return Conv{g.n,  g.groups, g.cg, g.mg, g.h,  g.w,  g.ho, g.wo,
              g.kh, g.kw,     g.sh, g.sw, g.dh, g.dw, g.ph, g.pw};
}

}  // namespace

bool SupportedForward(const ConvGeom& g) { return Enabled() && ChannelsFillTiles(g.mg); }

bool SupportedInputGrad(const ConvGeom& g) {
  return Enabled() && ChannelsFillTiles(g.cg) && g.sh == 1 && g.sw == 1 &&
         g.ph <= (g.kh - 1) * g.dh && g.pw <= (g.kw - 1) * g.dw;
}

bool SupportedFilterGrad(const ConvGeom& g) { return Enabled() && ChannelsFillTiles(g.mg); }

void Forward(const ConvGeom& g, const float* x, const float* w, float* out) {
  const Conv cv = ForwardConv(g);
  const int64_t taps = cv.Taps();
  auto packed = PackFilter(
      cv, [&](int64_t gi, int64_t oc, int64_t t) { return w[(gi * g.mg + oc) * taps + t]; });
  RunConv(cv, x, packed, out);
}

// With stride 1, dx[c][y][z] = sum over o, i, j of dout[o][y + ph - i dh][z + pw - j dw] *
// w[o][c][i][j]: a convolution of dout, padded by (kh - 1) dh - ph rows and (kw - 1) dw - pw
// columns, with the filter flipped in both axes and its channel axes swapped.
void InputGrad(const ConvGeom& g, const float* dout, const float* w, float* dx) {
  const Conv cv{g.n,
                g.groups,
                g.mg,
                g.cg,
                g.ho,
                g.wo,
                g.h,
                g.w,
                g.kh,
                g.kw,
                1,
                1,
                g.dh,
                g.dw,
                (g.kh - 1) * g.dh - g.ph,
                (g.kw - 1) * g.dw - g.pw};
  const int64_t k2 = g.kh * g.kw;
  auto packed = PackFilter(cv, [&](int64_t gi, int64_t c, int64_t t) {
    const int64_t o = t / k2, i = (t % k2) / g.kw, j = t % g.kw;
    return w[((gi * g.mg + o) * g.cg + c) * k2 + (g.kh - 1 - i) * g.kw + (g.kw - 1 - j)];
  });
  RunConv(cv, dout, packed, dx);
}

// dw[o][c][i][j] = sum over samples and output pixels of dout[o][pixel] * x[c][tap of pixel]:
// each tile holds 6 taps x 16 output channels and runs over every pixel of a sample, reading
// the output gradient transposed to [pixel][channel]. (sample, group, channel block) items are
// split over Loom's threads, each thread with its own partial sums, added up at the end.
void FilterGrad(const ConvGeom& g, const float* x, const float* dout, float* dw) {
  const Conv cv = ForwardConv(g);
  const int64_t hp = cv.Hp(), wp = cv.Wp(), plane = hp * wp, npix = cv.ho * cv.wo;
  const int64_t taps = cv.Taps(), blocks = cv.Blocks();
  const int64_t ldt = cv.groups * blocks * kTileC;  // row of the transposed gradient
  const std::vector<int64_t> pix = PixelOffsets(cv);
  std::vector<int64_t> tap_off(taps);
  for (int64_t c = 0; c < cv.cin; ++c)
    for (int64_t i = 0; i < cv.kh; ++i)
      for (int64_t j = 0; j < cv.kw; ++j)
        tap_off[(c * cv.kh + i) * cv.kw + j] = c * plane + i * cv.dh * wp + j * cv.dw;
  std::fill(dw, dw + g.m * taps, 0.0f);
  std::mutex mu;
  ParallelFor(cv.n * cv.groups * blocks, 1, [&](int64_t b, int64_t e) {
    std::vector<float> part(cv.groups * blocks * taps * kTileC, 0.0f);
    std::unique_ptr<float[]> xp(new float[std::max<int64_t>(g.c * plane, 1)]());
    std::vector<float> dt(npix * ldt, 0.0f);  // lanes past each group's channels stay zero
    alignas(32) float tile[kTileP * kTileC];
    const float* px[kTileP];
    int64_t loaded = -1;  // the sample whose input and output gradient xp and dt hold
    for (int64_t item = b; item < e; ++item) {
      const int64_t s = item / (cv.groups * blocks), gi = item / blocks % cv.groups;
      const int64_t blk = item % blocks;
      if (s != loaded) {
        PadPlanes(cv, g.c, x + s * g.c * g.h * g.w, xp.get());
        for (int64_t gj = 0; gj < cv.groups; ++gj)
          for (int64_t o = 0; o < cv.cout; ++o) {
            const float* src = dout + (s * g.m + gj * cv.cout + o) * npix;
            float* col = dt.data() + gj * blocks * kTileC + o;
            for (int64_t p = 0; p < npix; ++p) col[p * ldt] = src[p];
          }
        loaded = s;
      }
      const float* xg = xp.get() + gi * cv.cin * plane;
      const float* dtb = dt.data() + (gi * blocks + blk) * kTileC;
      float* acc = part.data() + (gi * blocks + blk) * taps * kTileC;
      for (int64_t t0 = 0; t0 < taps; t0 += kTileP) {
        const int64_t nt = std::min(kTileP, taps - t0);
        for (int64_t r = 0; r < kTileP; ++r) px[r] = xg + tap_off[t0 + std::min(r, nt - 1)];
        std::copy(acc + t0 * kTileC, acc + (t0 + nt) * kTileC, tile);
        std::fill(tile + nt * kTileC, tile + kTileP * kTileC, 0.0f);
        FilterTile(px, dtb, ldt, pix.data(), npix, tile);
        std::copy(tile, tile + nt * kTileC, acc + t0 * kTileC);
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    for (int64_t gi = 0; gi < cv.groups; ++gi)
      for (int64_t o = 0; o < cv.cout; ++o) {
        const float* src = part.data() + (gi * blocks + o / kTileC) * taps * kTileC + o % kTileC;
        float* dst = dw + (gi * cv.cout + o) * taps;
        for (int64_t t = 0; t < taps; ++t) dst[t] += src[t * kTileC];
      }
  });
}

}  // namespace loom::ops::conv_direct
