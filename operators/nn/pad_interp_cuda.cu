// CUDA kernels of pad2d and the resizes (bilinear_interp, nearest_interp, trilinear_interp),
// fp32 and fp64, with the index rules of the CPU kernels (operators/nn/pad2d.cc,
// operators/nn/interp.cc). Forward: one thread per output element gathering its source pixels.
// Gradient: one thread per output element adding Out@GRAD into the pixels it read (atomicAdd:
// several outputs may read one pixel).
#include <array>
#include <string>
#include <vector>

#include "operators/cuda_util.cuh"
#include "operators/nn/interp_size.h"
#include "operators/nn/pad2d_paddings.h"

namespace loom::ops::cuda {
namespace {

// ---- pad2d ----

struct Pad2DGeom {
  int64_t n, c, h, w, ho, wo, top, left;
  bool nhwc;
  int mode;  // 0 constant, 1 reflect, 2 edge
};

Pad2DGeom MakePad2DGeom(const KernelContext& ctx, const DDim& x,
                        const std::array<int64_t, 4>& pads) {
  const std::string& mode = ctx.Attr<std::string>("mode");
  Pad2DGeom g;
  g.nhwc = ctx.Attr<std::string>("data_format") == "NHWC";
  g.n = x[0];
  g.c = g.nhwc ? x[3] : x[1];
  g.h = g.nhwc ? x[1] : x[2];
  g.w = g.nhwc ? x[2] : x[3];
  g.top = pads[0], g.left = pads[2];
  g.ho = g.h + pads[0] + pads[1];
  g.wo = g.w + pads[2] + pads[3];
  g.mode = mode == "reflect" ? 1 : mode == "edge" ? 2 : 0;
  return g;
}

// The input index read along an axis of extent n for i = output index - pad, or -1.
__device__ int64_t PadSource(int64_t i, int64_t n, int mode) {
  if (i >= 0 && i < n) return i;
  if (mode == 0) return -1;
  if (mode == 2) return i < 0 ? 0 : n - 1;
  if (i < 0) i = -i;
  if (i >= n) i = 2 * (n - 1) - i;
  return i;
}

// The input offset read by output element idx, or -1 for the constant padding.
__device__ int64_t PadSourceOffset(const Pad2DGeom& g, int64_t idx) {
  int64_t b, ch, oh, ow;
  if (g.nhwc) {
    ch = idx % g.c, ow = (idx / g.c) % g.wo, oh = (idx / (g.c * g.wo)) % g.ho;
    b = idx / (g.c * g.wo * g.ho);
  } else {
    ow = idx % g.wo, oh = (idx / g.wo) % g.ho, ch = (idx / (g.wo * g.ho)) % g.c;
    b = idx / (g.wo * g.ho * g.c);
  }
  const int64_t ih = PadSource(oh - g.top, g.h, g.mode);
  const int64_t iw = PadSource(ow - g.left, g.w, g.mode);
  if (ih < 0 || iw < 0) return -1;
  return g.nhwc ? ((b * g.h + ih) * g.w + iw) * g.c + ch : ((b * g.c + ch) * g.h + ih) * g.w + iw;
}

template <typename T>
__global__ void Pad2DK(Pad2DGeom g, const T* x, T value, T* out) {
  LOOM_GRID_STRIDE(idx, g.n * g.c * g.ho * g.wo) {
    const int64_t i = PadSourceOffset(g, idx);
    out[idx] = i >= 0 ? x[i] : value;
  }
}

template <typename T>
__global__ void Pad2DGradK(Pad2DGeom g, const T* dout, T* dx) {
  LOOM_GRID_STRIDE(idx, g.n * g.c * g.ho * g.wo) {
    const int64_t i = PadSourceOffset(g, idx);
    if (i >= 0) atomicAdd(dx + i, dout[idx]);
  }
}

template <typename T>
Status Pad2D(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  LOOM_ASSIGN_OR_RETURN(auto pads, Pad2DPaddings(ctx, x.dims()));
  Pad2DGeom g = MakePad2DGeom(ctx, x.dims(), pads);
  Tensor* out = ctx.Output("Out");
  out->Resize(g.nhwc ? DDim{g.n, g.ho, g.wo, g.c} : DDim{g.n, g.c, g.ho, g.wo});
  T* o = MutableDataOf<T>(out, ctx.place());
  if (out->numel() == 0) return Status::OK();
  Pad2DK<T><<<Blocks(out->numel()), kThreads, 0, Stream(ctx)>>>(
      g, DataOf<T>(x), static_cast<T>(ctx.Attr<float>("pad_value")), o);
  return LaunchStatus(ctx);
}

template <typename T>
Status Pad2DGrad(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  const DDim x = ctx.Input("X").dims();
  LOOM_ASSIGN_OR_RETURN(auto pads, Pad2DPaddings(ctx, x));
  Pad2DGeom g = MakePad2DGeom(ctx, x, pads);
  T* dx = MutableDataOf<T>(dxt, ctx.place());
  if (dxt->numel() == 0) return Status::OK();
  cudaMemsetAsync(dx, 0, dxt->nbytes(), Stream(ctx));
  const int64_t n = g.n * g.c * g.ho * g.wo;
  if (n > 0)
    Pad2DGradK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(g, DataOf<T>(ctx.Input("Out@GRAD")), dx);
  return LaunchStatus(ctx);
}

// ---- resizes ----

// Extents are D, H, W; a 2-D resize has D = 1 in and out (its taps then read depth 0 only).
struct InterpGeom {
  int64_t n, c, in[3], out[3];
  float ratio[3];
  bool linear, align_corners, channels_last, has_depth;
  int align_mode;
};

float InterpRatio(int64_t in, int64_t out, bool align_corners) {
  if (out <= 1) return 0.f;
  return align_corners ? static_cast<float>(in - 1) / static_cast<float>(out - 1)
                       : static_cast<float>(in) / static_cast<float>(out);
}

// x: the input dims; y: the output dims (both in the op's layout).
InterpGeom MakeInterpGeom(const KernelContext& ctx, const DDim& x, const DDim& y, bool linear) {
  const std::string& layout = ctx.Attr<std::string>("data_layout");
  InterpGeom g;
  g.channels_last = layout == "NHWC" || layout == "NDHWC";
  g.linear = linear;
  g.align_corners = ctx.Attr<bool>("align_corners");
  g.align_mode = ctx.Attr<int>("align_mode");
  const int rank = x.size() - 2, first = g.channels_last ? 1 : 2, skip = 3 - rank;
  g.has_depth = rank == 3;
  g.n = x[0];
  g.c = g.channels_last ? x[x.size() - 1] : x[1];
  for (int a = 0; a < 3; ++a) {
    g.in[a] = a < skip ? 1 : x[first + a - skip];
    g.out[a] = a < skip ? 1 : y[first + a - skip];
    g.ratio[a] = InterpRatio(g.in[a], g.out[a], g.align_corners);
  }
  return g;
}

// The source indices and weights of output index o along axis a (as MakeAxisTaps on the CPU).
__device__ int AxisTaps(const InterpGeom& g, int a, int64_t o, int64_t idx[2], float w[2]) {
  if (a == 0 && !g.has_depth) {  // the depth of a 2-D resize: one tap, as on the CPU
    idx[0] = 0;
    w[0] = 1.f;
    return 1;
  }
  const float ratio = g.ratio[a];
  const int64_t in = g.in[a];
  const float scaled = ratio * static_cast<float>(o);
  if (!g.linear) {
    const double src = g.align_corners ? scaled + 0.5 : scaled;
    int64_t i = static_cast<int64_t>(src);
    idx[0] = i < in - 1 ? i : in - 1;
    w[0] = 1.f;
    return 1;
  }
  const bool half_pixel = g.align_mode == 0 && !g.align_corners;
  const double centre = static_cast<double>(ratio) * (o + 0.5) - 0.5;
  int64_t lo = half_pixel ? static_cast<int64_t>(centre) : static_cast<int64_t>(scaled);
  lo = lo > 0 ? lo : 0;
  const int64_t hi = lo + 1 < in - 1 ? lo + 1 : in - 1;
  float src = half_pixel ? static_cast<float>(centre) : scaled;
  if (half_pixel && src < 0.f) src = 0.f;
  const float frac = src - static_cast<float>(lo);
  idx[0] = lo, idx[1] = hi;
  w[0] = 1.f - frac, w[1] = frac;
  return 2;
}

// Calls f(input offset, weight) for every tap of output element idx.
template <typename F>
__device__ void ForEachInterpTap(const InterpGeom& g, int64_t idx, F f) {
  const int64_t osp = g.out[0] * g.out[1] * g.out[2], isp = g.in[0] * g.in[1] * g.in[2];
  int64_t b, ch, sp;
  if (g.channels_last) {
    ch = idx % g.c, sp = (idx / g.c) % osp, b = idx / (g.c * osp);
  } else {
    sp = idx % osp, ch = (idx / osp) % g.c, b = idx / (osp * g.c);
  }
  const int64_t od = sp / (g.out[1] * g.out[2]), oh = (sp / g.out[2]) % g.out[1];
  const int64_t ow = sp % g.out[2];
  int64_t id[2], ih[2], iw[2];
  float wd[2], wh[2], ww[2];
  const int nd = AxisTaps(g, 0, od, id, wd), nh = AxisTaps(g, 1, oh, ih, wh);
  const int nw = AxisTaps(g, 2, ow, iw, ww);
  for (int td = 0; td < nd; ++td)
    for (int th = 0; th < nh; ++th)
      for (int tw = 0; tw < nw; ++tw) {
        const int64_t s = (id[td] * g.in[1] + ih[th]) * g.in[2] + iw[tw];
        const int64_t off = g.channels_last ? (b * isp + s) * g.c + ch : (b * g.c + ch) * isp + s;
        f(off, wd[td], wh[th], ww[tw]);
      }
}

template <typename T>
__global__ void InterpK(InterpGeom g, const T* x, T* out) {
  LOOM_GRID_STRIDE(idx, g.n * g.c * g.out[0] * g.out[1] * g.out[2]) {
    T acc = 0;
    ForEachInterpTap(g, idx, [&](int64_t i, float wd, float wh, float ww) {
      acc += x[i] * static_cast<T>(wd) * static_cast<T>(wh) * static_cast<T>(ww);
    });
    out[idx] = acc;
  }
}

template <typename T>
__global__ void InterpGradK(InterpGeom g, const T* dout, T* dx) {
  LOOM_GRID_STRIDE(idx, g.n * g.c * g.out[0] * g.out[1] * g.out[2]) {
    const T go = dout[idx];
    ForEachInterpTap(g, idx, [&](int64_t i, float wd, float wh, float ww) {
      atomicAdd(dx + i, go * static_cast<T>(wd) * static_cast<T>(wh) * static_cast<T>(ww));
    });
  }
}

template <typename T, bool kLinear>
Status Interp(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  LOOM_ASSIGN_OR_RETURN(DDim y, InterpOutDims(ctx, x.dims()));
  Tensor* out = ctx.Output("Out");
  out->Resize(y);
  T* o = MutableDataOf<T>(out, ctx.place());
  if (out->numel() == 0) return Status::OK();
  InterpGeom g = MakeInterpGeom(ctx, x.dims(), y, kLinear);
  InterpK<T><<<Blocks(out->numel()), kThreads, 0, Stream(ctx)>>>(g, DataOf<T>(x), o);
  return LaunchStatus(ctx);
}

template <typename T, bool kLinear>
Status InterpGrad(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  const Tensor& dout = ctx.Input("Out@GRAD");
  T* dx = MutableDataOf<T>(dxt, ctx.place());
  if (dxt->numel() == 0) return Status::OK();
  cudaMemsetAsync(dx, 0, dxt->nbytes(), Stream(ctx));
  InterpGeom g = MakeInterpGeom(ctx, ctx.Input("X").dims(), dout.dims(), kLinear);
  if (dout.numel() > 0)
    InterpGradK<T><<<Blocks(dout.numel()), kThreads, 0, Stream(ctx)>>>(g, DataOf<T>(dout), dx);
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(pad2d, kCUDA, FP32, Pad2D<float>);
LOOM_REGISTER_KERNEL(pad2d, kCUDA, FP64, Pad2D<double>);
LOOM_REGISTER_KERNEL(pad2d_grad, kCUDA, FP32, Pad2DGrad<float>);
LOOM_REGISTER_KERNEL(pad2d_grad, kCUDA, FP64, Pad2DGrad<double>);
LOOM_REGISTER_KERNEL(bilinear_interp, kCUDA, FP32, (Interp<float, true>));
LOOM_REGISTER_KERNEL(bilinear_interp, kCUDA, FP64, (Interp<double, true>));
LOOM_REGISTER_KERNEL(bilinear_interp_grad, kCUDA, FP32, (InterpGrad<float, true>));
LOOM_REGISTER_KERNEL(bilinear_interp_grad, kCUDA, FP64, (InterpGrad<double, true>));
LOOM_REGISTER_KERNEL(trilinear_interp, kCUDA, FP32, (Interp<float, true>));
LOOM_REGISTER_KERNEL(trilinear_interp, kCUDA, FP64, (Interp<double, true>));
LOOM_REGISTER_KERNEL(trilinear_interp_grad, kCUDA, FP32, (InterpGrad<float, true>));
LOOM_REGISTER_KERNEL(trilinear_interp_grad, kCUDA, FP64, (InterpGrad<double, true>));
LOOM_REGISTER_KERNEL(nearest_interp, kCUDA, FP32, (Interp<float, false>));
LOOM_REGISTER_KERNEL(nearest_interp, kCUDA, FP64, (Interp<double, false>));
LOOM_REGISTER_KERNEL(nearest_interp_grad, kCUDA, FP32, (InterpGrad<float, false>));
LOOM_REGISTER_KERNEL(nearest_interp_grad, kCUDA, FP64, (InterpGrad<double, false>));

}  // namespace loom::ops::cuda
