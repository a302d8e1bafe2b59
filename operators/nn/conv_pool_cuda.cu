// CUDA kernels of conv2d(+grad) and pool2d(+grad), fp32, fp64 and fp16 (fp16 storage, fp32
// arithmetic and GEMM accumulation), NCHW, with the semantics of the CPU kernels
// (operators/nn/conv2d.cc, operators/nn/pool2d.cc).
// conv2d lowers chunks of samples to an im2col buffer and runs strided-batched cuBLAS GEMMs over
// (sample, group); the input gradient goes back through col2im as a gather (one thread per
// input pixel, no atomics). pool2d runs one thread per output; the max-pool gradient goes to the
// first window element equal to the output (atomicAdd where windows overlap), the average-pool
// gradient is a gather with the forward divisor.
#include <algorithm>

#include "operators/cuda_util.cuh"
#include "operators/nn/conv_geom.h"
#include "operators/nn/pool_geom.h"

namespace loom::ops::cuda {
namespace {

// ---- conv2d ----

// col[s][(c * kh + i) * kw + j][oh * wo + ow] = x[s0 + s][c][oh*sh - ph + i*dh][ow*sw - pw + j*dw]
// (0 outside the image) for the cs samples from s0.
template <typename T>
__global__ void Im2ColK(ConvGeom g, const T* x, T* col, int64_t cs) {
  const int64_t p = g.ho * g.wo, rows = g.c * g.kh * g.kw;
  LOOM_GRID_STRIDE(idx, cs * rows * p) {
    int64_t pix = idx % p, r = (idx / p) % rows, s = idx / (p * rows);
    int64_t j = r % g.kw, i = (r / g.kw) % g.kh, c = r / (g.kh * g.kw);
    int64_t ih = (pix / g.wo) * g.sh - g.ph + i * g.dh;
    int64_t iw = (pix % g.wo) * g.sw - g.pw + j * g.dw;
    col[idx] = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w ? x[((s * g.c + c) * g.h + ih) * g.w + iw]
                                                          : static_cast<T>(0.0f);
  }
}

// The adjoint of Im2ColK as a gather: dx[s][c][ih][iw] = sum of the column entries read from it.
template <typename T>
__global__ void Col2ImK(ConvGeom g, const T* col, T* dx, int64_t cs) {
  const int64_t p = g.ho * g.wo, rows = g.c * g.kh * g.kw;
  LOOM_GRID_STRIDE(idx, cs * g.c * g.h * g.w) {
    int64_t iw = idx % g.w, ih = (idx / g.w) % g.h, c = (idx / (g.w * g.h)) % g.c;
    int64_t s = idx / (g.w * g.h * g.c);
    const T* cols = col + s * rows * p;
    Acc<T> acc = 0;
    for (int64_t i = 0; i < g.kh; ++i) {
      int64_t th = ih + g.ph - i * g.dh;
      if (th < 0 || th % g.sh != 0) continue;
      int64_t oh = th / g.sh;
      if (oh >= g.ho) continue;
      for (int64_t j = 0; j < g.kw; ++j) {
        int64_t tw = iw + g.pw - j * g.dw;
        if (tw < 0 || tw % g.sw != 0) continue;
        int64_t ow = tw / g.sw;
        if (ow >= g.wo) continue;
        acc += static_cast<Acc<T>>(cols[((c * g.kh + i) * g.kw + j) * p + oh * g.wo + ow]);
      }
    }
    dx[idx] = static_cast<T>(acc);
  }
}

// Samples per column buffer: at most 2^25 elements, at least one sample.
int64_t SamplesPerChunk(const ConvGeom& g) {
  constexpr int64_t kColBudget = int64_t{1} << 25;
  int64_t per_sample = std::max<int64_t>(g.Rows() * g.P(), 1);
  return std::clamp<int64_t>(kColBudget / per_sample, 1, std::max<int64_t>(g.n, 1));
}

// One GEMM per (sample, group) of a chunk of cs samples: operand offsets are
// s * s_stride + gi * g_stride. Batches over whichever of samples and groups is longer.
struct Operand {
  int64_t s_stride, g_stride;
};

template <typename T>
Status GemmOverSamplesAndGroups(const KernelContext& ctx, int64_t cs, int64_t groups, bool ta,
                                bool tb, int64_t m, int64_t n, int64_t k, const T* a, Operand oa,
                                const T* b, Operand ob, Acc<T> beta, T* c, Operand oc) {
  cublasHandle_t h = Cublas(ctx);
  if (cs >= groups) {
    for (int64_t gi = 0; gi < groups; ++gi)
      LOOM_RETURN_IF_ERROR(CublasStatus(
          ctx, GemmStridedBatched<T>(h, ta, tb, m, n, k, Acc<T>(1), a + gi * oa.g_stride,
                                     oa.s_stride, b + gi * ob.g_stride, ob.s_stride, beta,
                                     c + gi * oc.g_stride, oc.s_stride, cs)));
  } else {
    for (int64_t s = 0; s < cs; ++s)
      LOOM_RETURN_IF_ERROR(CublasStatus(
          ctx, GemmStridedBatched<T>(h, ta, tb, m, n, k, Acc<T>(1), a + s * oa.s_stride,
                                     oa.g_stride, b + s * ob.s_stride, ob.g_stride, beta,
                                     c + s * oc.s_stride, oc.g_stride, groups)));
  }
  return Status::OK();
}

// Output[s, g*mg:(g+1)*mg] = W_g [mg, K] · col_{s,g} [K, P].
template <typename T>
Status Conv2D(const KernelContext& ctx) {
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  ConvGeom g = MakeConvGeom(ctx, input.dims(), filter.dims());
  T* out = MutableDataOf<T>(ctx.Output("Output"), ctx.place());
  const int64_t k = g.K(), p = g.P(), chunk = SamplesPerChunk(g);
  if (g.n * g.m * p == 0) return Status::OK();
  if (k == 0) {
    cudaMemsetAsync(out, 0, sizeof(T) * g.n * g.m * p, Stream(ctx));
    return LaunchStatus(ctx);
  }
  Tensor col(input.dtype(), DDim{chunk * g.Rows() * p});
  T* cb = MutableDataOf<T>(&col, ctx.place());
  const T* x = DataOf<T>(input);
  for (int64_t s0 = 0; s0 < g.n; s0 += chunk) {
    const int64_t cs = std::min(chunk, g.n - s0);
    Im2ColK<T><<<Blocks(cs * g.Rows() * p), kThreads, 0, Stream(ctx)>>>(g, x + s0 * g.c * g.h * g.w,
                                                                        cb, cs);
    LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
    LOOM_RETURN_IF_ERROR(GemmOverSamplesAndGroups<T>(
        ctx, cs, g.groups, false, false, g.mg, p, k, DataOf<T>(filter), Operand{0, g.mg * k}, cb,
        Operand{g.Rows() * p, k * p}, Acc<T>(0), out + s0 * g.m * p, Operand{g.m * p, g.mg * p}));
  }
  return Status::OK();
}

// Filter@GRAD_g = Σ_s dOut_{s,g} [mg, P] · col_{s,g}ᵀ [P, K] (per sample, batched over
// groups, accumulating); Input@GRAD = col2im(W_gᵀ · dOut_{s,g}).
template <typename T>
Status Conv2DGrad(const KernelContext& ctx) {
  Tensor* dinput = ctx.OutputOrNull("Input@GRAD");
  Tensor* dfilter = ctx.OutputOrNull("Filter@GRAD");
  if (!dinput && !dfilter) return Status::OK();
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  ConvGeom g = MakeConvGeom(ctx, input.dims(), filter.dims());
  const T* x = DataOf<T>(input);
  const T* w = DataOf<T>(filter);
  const T* dout = DataOf<T>(ctx.Input("Output@GRAD"));
  const int64_t k = g.K(), p = g.P(), chunk = SamplesPerChunk(g);
  cudaStream_t stream = Stream(ctx);
  T* dx = dinput ? MutableDataOf<T>(dinput, ctx.place()) : nullptr;
  T* dw = dfilter ? MutableDataOf<T>(dfilter, ctx.place()) : nullptr;
  if (dw) cudaMemsetAsync(dw, 0, dfilter->nbytes(), stream);
  if (g.n * k * p * g.m == 0) {
    if (dx) cudaMemsetAsync(dx, 0, dinput->nbytes(), stream);
    return LaunchStatus(ctx);
  }
  Tensor col(input.dtype(), DDim{chunk * g.Rows() * p});
  T* cb = MutableDataOf<T>(&col, ctx.place());
  // fp16: Filter@GRAD is summed over the samples in an fp32 buffer, converted once at the end.
  constexpr bool kHalf = std::is_same_v<T, __half>;
  Tensor dw32(proto::FP32, DDim{kHalf && dw ? g.m * k : 0});
  float* dwf = kHalf && dw ? dw32.mutable_data<float>(ctx.place()) : nullptr;
  if (dwf) cudaMemsetAsync(dwf, 0, dw32.nbytes(), stream);
  for (int64_t s0 = 0; s0 < g.n; s0 += chunk) {
    const int64_t cs = std::min(chunk, g.n - s0);
    const T* dout0 = dout + s0 * g.m * p;
    if (dw) {
      Im2ColK<T>
          <<<Blocks(cs * g.Rows() * p), kThreads, 0, stream>>>(g, x + s0 * g.c * g.h * g.w, cb, cs);
      LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
      for (int64_t s = 0; s < cs; ++s) {
        if constexpr (kHalf) {
          LOOM_RETURN_IF_ERROR(CublasStatus(
              ctx, GemmStridedBatchedHalfToFloat(
                       Cublas(ctx), false, true, g.mg, k, p, 1.0f, dout0 + s * g.m * p, g.mg * p,
                       cb + s * g.Rows() * p, k * p, 1.0f, dwf, g.mg * k, g.groups)));
        } else {
          LOOM_RETURN_IF_ERROR(CublasStatus(
              ctx, GemmStridedBatched<T>(Cublas(ctx), false, true, g.mg, k, p, Acc<T>(1),
                                         dout0 + s * g.m * p, g.mg * p, cb + s * g.Rows() * p,
                                         k * p, Acc<T>(1), dw, g.mg * k, g.groups)));
        }
      }
    }
    if (dx) {
      LOOM_RETURN_IF_ERROR(GemmOverSamplesAndGroups<T>(
          ctx, cs, g.groups, true, false, k, p, g.mg, w, Operand{0, g.mg * k}, dout0,
          Operand{g.m * p, g.mg * p}, Acc<T>(0), cb, Operand{g.Rows() * p, k * p}));
      Col2ImK<T><<<Blocks(cs * g.c * g.h * g.w), kThreads, 0, stream>>>(
          g, cb, dx + s0 * g.c * g.h * g.w, cs);
      LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
    }
  }
  if (dwf) {
    ConvertK<float, T><<<Blocks(g.m * k), kThreads, 0, stream>>>(dwf, dw, g.m * k);
    return LaunchStatus(ctx);
  }
  return Status::OK();
}

// ---- pool2d ----

// The window of output (oh, ow) clipped to the image, and the average's divisor.
struct Window {
  int64_t h0, h1, w0, w1, divisor;
};

__device__ Window WindowAt(const PoolGeom& g, int64_t oh, int64_t ow) {
  Window win;
  win.h0 = oh * g.sh - g.ph;
  win.w0 = ow * g.sw - g.pw;
  win.h1 = min(win.h0 + g.kh, g.h);
  win.w1 = min(win.w0 + g.kw, g.w);
  win.h0 = max(win.h0, int64_t{0});
  win.w0 = max(win.w0, int64_t{0});
  int64_t area = max(win.h1 - win.h0, int64_t{0}) * max(win.w1 - win.w0, int64_t{0});
  win.divisor = g.exclusive ? area : g.kh * g.kw;
  return win;
}

template <typename T>
__global__ void PoolK(PoolGeom g, const T* x, T* out) {
  LOOM_GRID_STRIDE(idx, g.planes * g.ho * g.wo) {
    int64_t ow = idx % g.wo, oh = (idx / g.wo) % g.ho, pl = idx / (g.wo * g.ho);
    const T* xp = x + pl * g.h * g.w;
    Window win = WindowAt(g, oh, ow);
    Acc<T> acc = 0;
    bool any = false;
    for (int64_t ih = win.h0; ih < win.h1; ++ih)
      for (int64_t iw = win.w0; iw < win.w1; ++iw) {
        Acc<T> v = static_cast<Acc<T>>(xp[ih * g.w + iw]);
        acc = !any ? v : (g.max ? (v > acc ? v : acc) : acc + v);
        any = true;
      }
    // A window entirely in the padding (possible with ceil_mode) yields 0, as on the CPU.
    if (any && !g.max) acc /= static_cast<Acc<T>>(win.divisor);
    out[idx] = static_cast<T>(any ? acc : Acc<T>(0));
  }
}

// Max: the gradient of each output goes to the first element (row-major) of its window equal
// to the output; overlapping windows may pick the same element, hence atomicAdd.
template <typename T>
__global__ void MaxPoolGradK(PoolGeom g, const T* x, const T* out, const T* dout, T* dx) {
  LOOM_GRID_STRIDE(idx, g.planes * g.ho * g.wo) {
    int64_t ow = idx % g.wo, oh = (idx / g.wo) % g.ho, pl = idx / (g.wo * g.ho);
    const T* xp = x + pl * g.h * g.w;
    Window win = WindowAt(g, oh, ow);
    const Acc<T> target = static_cast<Acc<T>>(out[idx]);
    int64_t at = -1;
    for (int64_t ih = win.h0; ih < win.h1 && at < 0; ++ih)
      for (int64_t iw = win.w0; iw < win.w1; ++iw)
        if (static_cast<Acc<T>>(xp[ih * g.w + iw]) == target) {
          at = ih * g.w + iw;
          break;
        }
    if (at >= 0) atomicAdd(dx + pl * g.h * g.w + at, dout[idx]);
  }
}

// Avg: dx[ih][iw] = Σ over the windows holding (ih, iw) of dout / divisor. A pixel of the image
// lies in a clipped window exactly when it lies in the unclipped one.
template <typename T>
__global__ void AvgPoolGradK(PoolGeom g, const T* dout, T* dx) {
  LOOM_GRID_STRIDE(idx, g.planes * g.h * g.w) {
    int64_t iw = idx % g.w, ih = (idx / g.w) % g.h, pl = idx / (g.w * g.h);
    const T* dp = dout + pl * g.ho * g.wo;
    int64_t th = ih + g.ph - g.kh + 1, tw = iw + g.pw - g.kw + 1;
    int64_t oh0 = th <= 0 ? 0 : (th + g.sh - 1) / g.sh;
    int64_t ow0 = tw <= 0 ? 0 : (tw + g.sw - 1) / g.sw;
    int64_t oh1 = min((ih + g.ph) / g.sh, g.ho - 1), ow1 = min((iw + g.pw) / g.sw, g.wo - 1);
    Acc<T> acc = 0;
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow)
        acc += static_cast<Acc<T>>(dp[oh * g.wo + ow]) /
               static_cast<Acc<T>>(WindowAt(g, oh, ow).divisor);
    dx[idx] = static_cast<T>(acc);
  }
}

template <typename T>
Status Pool2D(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  PoolGeom g = MakePoolGeom(ctx, x.dims());
  T* out = MutableDataOf<T>(ctx.Output("Out"), ctx.place());
  const int64_t n = g.planes * g.ho * g.wo;
  if (n == 0) return Status::OK();
  PoolK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(g, DataOf<T>(x), out);
  return LaunchStatus(ctx);
}

template <typename T>
Status Pool2DGrad(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  const Tensor& x = ctx.Input("X");
  PoolGeom g = MakePoolGeom(ctx, x.dims());
  T* dx = MutableDataOf<T>(dxt, ctx.place());
  const T* dout = DataOf<T>(ctx.Input("Out@GRAD"));
  if (dxt->numel() == 0) return Status::OK();
  if (g.max) {
    cudaMemsetAsync(dx, 0, dxt->nbytes(), Stream(ctx));
    const int64_t n = g.planes * g.ho * g.wo;
    if (n > 0)
      MaxPoolGradK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(
          g, DataOf<T>(x), DataOf<T>(ctx.Input("Out")), dout, dx);
  } else {
    AvgPoolGradK<T><<<Blocks(dxt->numel()), kThreads, 0, Stream(ctx)>>>(g, dout, dx);
  }
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(conv2d, kCUDA, FP32, Conv2D<float>);
LOOM_REGISTER_KERNEL(conv2d, kCUDA, FP64, Conv2D<double>);
LOOM_REGISTER_KERNEL(conv2d_grad, kCUDA, FP32, Conv2DGrad<float>);
LOOM_REGISTER_KERNEL(conv2d_grad, kCUDA, FP64, Conv2DGrad<double>);
LOOM_REGISTER_KERNEL(pool2d, kCUDA, FP32, Pool2D<float>);
LOOM_REGISTER_KERNEL(pool2d, kCUDA, FP64, Pool2D<double>);
LOOM_REGISTER_KERNEL(pool2d_grad, kCUDA, FP32, Pool2DGrad<float>);
LOOM_REGISTER_KERNEL(pool2d_grad, kCUDA, FP64, Pool2DGrad<double>);
LOOM_REGISTER_KERNEL(conv2d, kCUDA, FP16, Conv2D<__half>);
LOOM_REGISTER_KERNEL(conv2d_grad, kCUDA, FP16, Conv2DGrad<__half>);
LOOM_REGISTER_KERNEL(pool2d, kCUDA, FP16, Pool2D<__half>);
LOOM_REGISTER_KERNEL(pool2d_grad, kCUDA, FP16, Pool2DGrad<__half>);

}  // namespace loom::ops::cuda
