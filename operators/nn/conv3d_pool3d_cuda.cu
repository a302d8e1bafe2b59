// CUDA kernels of conv3d, conv3d_transpose, pool3d and adaptive_pool2d / adaptive_pool3d (fp32,
// fp64, NCDHW), with the semantics of the CPU kernels (operators/nn/conv3d.cc,
// operators/nn/pool3d.cc). Direct kernels, one thread per result element:
//   conv forward      one output; sums its group's channels and kernel offsets
//   conv data grad    one input element; gathers the outputs whose windows hold it (no atomics)
//   conv filter grad  one filter element; sums over samples and output positions
//   pool forward      one output; pool backward: one output scattering into its window
//                     (atomicAdd: windows may overlap)
// The conv3d_transpose kernels are the conv3d ones with the roles of input and output swapped.
#include <string>
#include <vector>

#include "operators/cuda_util.cuh"
#include "operators/nn/pads3d.h"

namespace loom::ops::cuda {
namespace {

// ---- conv3d ----

// A conv3d whose input x is [n, c, in...] and output y [n, m, out...], filter [m, c / groups,
// k...].
struct Conv3DGeom {
  int64_t n, c, m, cg, mg;
  int64_t in[3], out[3], k[3], s[3], p[3], dil[3];
};

__device__ int64_t Volume(const int64_t v[3]) { return v[0] * v[1] * v[2]; }

template <typename T>
__global__ void Conv3DForwardK(Conv3DGeom g, const T* x, const T* w, T* y) {
  const int64_t iv = Volume(g.in), ov = Volume(g.out), kv = Volume(g.k);
  LOOM_GRID_STRIDE(idx, g.n * g.m * ov) {
    const int64_t o = idx % ov, m = (idx / ov) % g.m, b = idx / (ov * g.m);
    const int64_t od = o / (g.out[1] * g.out[2]), oh = (o / g.out[2]) % g.out[1];
    const int64_t ow = o % g.out[2], grp = m / g.mg;
    T acc = 0;
    for (int64_t cc = 0; cc < g.cg; ++cc) {
      const T* xp = x + (b * g.c + grp * g.cg + cc) * iv;
      const T* wp = w + (m * g.cg + cc) * kv;
      for (int64_t kd = 0; kd < g.k[0]; ++kd) {
        const int64_t id = od * g.s[0] - g.p[0] + kd * g.dil[0];
        if (id < 0 || id >= g.in[0]) continue;
        for (int64_t kh = 0; kh < g.k[1]; ++kh) {
          const int64_t ih = oh * g.s[1] - g.p[1] + kh * g.dil[1];
          if (ih < 0 || ih >= g.in[1]) continue;
          for (int64_t kw = 0; kw < g.k[2]; ++kw) {
            const int64_t iw = ow * g.s[2] - g.p[2] + kw * g.dil[2];
            if (iw < 0 || iw >= g.in[2]) continue;
            acc += xp[(id * g.in[1] + ih) * g.in[2] + iw] * wp[(kd * g.k[1] + kh) * g.k[2] + kw];
          }
        }
      }
    }
    y[idx] = acc;
  }
}

// The output index along axis a whose window puts kernel offset k on input index i, or -1.
__device__ int64_t OutputAt(const Conv3DGeom& g, int a, int64_t i, int64_t k) {
  const int64_t t = i + g.p[a] - k * g.dil[a];
  if (t < 0 || t % g.s[a] != 0) return -1;
  const int64_t o = t / g.s[a];
  return o < g.out[a] ? o : -1;
}

template <typename T>
__global__ void Conv3DBackwardDataK(Conv3DGeom g, const T* dy, const T* w, T* dx) {
  const int64_t iv = Volume(g.in), ov = Volume(g.out), kv = Volume(g.k);
  LOOM_GRID_STRIDE(idx, g.n * g.c * iv) {
    const int64_t i = idx % iv, c = (idx / iv) % g.c, b = idx / (iv * g.c);
    const int64_t id = i / (g.in[1] * g.in[2]), ih = (i / g.in[2]) % g.in[1], iw = i % g.in[2];
    const int64_t grp = c / g.cg, cc = c % g.cg;
    T acc = 0;
    for (int64_t mm = 0; mm < g.mg; ++mm) {
      const int64_t m = grp * g.mg + mm;
      const T* dyp = dy + (b * g.m + m) * ov;
      const T* wp = w + (m * g.cg + cc) * kv;
      for (int64_t kd = 0; kd < g.k[0]; ++kd) {
        const int64_t od = OutputAt(g, 0, id, kd);
        if (od < 0) continue;
        for (int64_t kh = 0; kh < g.k[1]; ++kh) {
          const int64_t oh = OutputAt(g, 1, ih, kh);
          if (oh < 0) continue;
          for (int64_t kw = 0; kw < g.k[2]; ++kw) {
            const int64_t ow = OutputAt(g, 2, iw, kw);
            if (ow < 0) continue;
            acc += dyp[(od * g.out[1] + oh) * g.out[2] + ow] * wp[(kd * g.k[1] + kh) * g.k[2] + kw];
          }
        }
      }
    }
    dx[idx] = acc;
  }
}

template <typename T>
__global__ void Conv3DBackwardFilterK(Conv3DGeom g, const T* x, const T* dy, T* dw) {
  const int64_t iv = Volume(g.in), ov = Volume(g.out), kv = Volume(g.k);
  LOOM_GRID_STRIDE(idx, g.m * g.cg * kv) {
    const int64_t kk = idx % kv, cc = (idx / kv) % g.cg, m = idx / (kv * g.cg);
    const int64_t kd = kk / (g.k[1] * g.k[2]), kh = (kk / g.k[2]) % g.k[1], kw = kk % g.k[2];
    const int64_t grp = m / g.mg;
    T acc = 0;
    for (int64_t b = 0; b < g.n; ++b) {
      const T* xp = x + (b * g.c + grp * g.cg + cc) * iv;
      const T* dyp = dy + (b * g.m + m) * ov;
      for (int64_t od = 0; od < g.out[0]; ++od) {
        const int64_t id = od * g.s[0] - g.p[0] + kd * g.dil[0];
        if (id < 0 || id >= g.in[0]) continue;
        for (int64_t oh = 0; oh < g.out[1]; ++oh) {
          const int64_t ih = oh * g.s[1] - g.p[1] + kh * g.dil[1];
          if (ih < 0 || ih >= g.in[1]) continue;
          for (int64_t ow = 0; ow < g.out[2]; ++ow) {
            const int64_t iw = ow * g.s[2] - g.p[2] + kw * g.dil[2];
            if (iw < 0 || iw >= g.in[2]) continue;
            acc +=
                xp[(id * g.in[1] + ih) * g.in[2] + iw] * dyp[(od * g.out[1] + oh) * g.out[2] + ow];
          }
        }
      }
    }
    dw[idx] = acc;
  }
}

// conv3d: x = Input, y = Output. conv3d_transpose: x = Output, y = Input (its filter
// [C, M / groups, k...] is the conv3d filter [m, c / groups, k...] of that conv).
Conv3DGeom MakeGeom(const KernelContext& ctx, const DDim& x, const DDim& y, const DDim& f) {
  const auto& strides = ctx.Attr<std::vector<int>>("strides");
  const auto& pads = ctx.Attr<std::vector<int>>("paddings");
  const auto& dils = ctx.Attr<std::vector<int>>("dilations");
  const int64_t groups = ctx.Attr<int>("groups");
  Conv3DGeom g;
  g.n = x[0], g.c = x[1], g.m = y[1];
  g.cg = g.c / groups, g.mg = g.m / groups;
  for (int a = 0; a < 3; ++a) {
    g.in[a] = x[2 + a], g.out[a] = y[2 + a], g.k[a] = f[2 + a];
    g.s[a] = strides[a], g.p[a] = PadBefore(pads, a), g.dil[a] = dils[a];
  }
  return g;
}

template <typename T>
void LaunchForward(const KernelContext& ctx, const Conv3DGeom& g, const T* x, const T* w, T* y) {
  const int64_t n = g.n * g.m * g.out[0] * g.out[1] * g.out[2];
  if (n > 0) Conv3DForwardK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(g, x, w, y);
}

template <typename T>
void LaunchData(const KernelContext& ctx, const Conv3DGeom& g, const T* dy, const T* w, T* dx) {
  const int64_t n = g.n * g.c * g.in[0] * g.in[1] * g.in[2];
  if (n > 0) Conv3DBackwardDataK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(g, dy, w, dx);
}

template <typename T>
void LaunchFilter(const KernelContext& ctx, const Conv3DGeom& g, const T* x, const T* dy, T* dw) {
  const int64_t n = g.m * g.cg * g.k[0] * g.k[1] * g.k[2];
  if (n > 0) Conv3DBackwardFilterK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(g, x, dy, dw);
}

template <typename T>
Status Conv3D(const KernelContext& ctx) {
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  Tensor* out = ctx.Output("Output");
  T* y = MutableDataOf<T>(out, ctx.place());
  Conv3DGeom g = MakeGeom(ctx, input.dims(), out->dims(), filter.dims());
  LaunchForward(ctx, g, DataOf<T>(input), DataOf<T>(filter), y);
  return LaunchStatus(ctx);
}

template <typename T>
Status Conv3DGrad(const KernelContext& ctx) {
  Tensor* dinput = ctx.OutputOrNull("Input@GRAD");
  Tensor* dfilter = ctx.OutputOrNull("Filter@GRAD");
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  const Tensor& dout = ctx.Input("Output@GRAD");
  Conv3DGeom g = MakeGeom(ctx, input.dims(), dout.dims(), filter.dims());
  if (dinput)
    LaunchData(ctx, g, DataOf<T>(dout), DataOf<T>(filter), MutableDataOf<T>(dinput, ctx.place()));
  if (dfilter)
    LaunchFilter(ctx, g, DataOf<T>(input), DataOf<T>(dout), MutableDataOf<T>(dfilter, ctx.place()));
  return LaunchStatus(ctx);
}

template <typename T>
Status Conv3DTranspose(const KernelContext& ctx) {
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  Tensor* out = ctx.Output("Output");
  T* y = MutableDataOf<T>(out, ctx.place());
  Conv3DGeom g = MakeGeom(ctx, out->dims(), input.dims(), filter.dims());
  LaunchData(ctx, g, DataOf<T>(input), DataOf<T>(filter), y);
  return LaunchStatus(ctx);
}

template <typename T>
Status Conv3DTransposeGrad(const KernelContext& ctx) {
  Tensor* dinput = ctx.OutputOrNull("Input@GRAD");
  Tensor* dfilter = ctx.OutputOrNull("Filter@GRAD");
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  const Tensor& dout = ctx.Input("Output@GRAD");
  Conv3DGeom g = MakeGeom(ctx, dout.dims(), input.dims(), filter.dims());
  if (dinput)
    LaunchForward(ctx, g, DataOf<T>(dout), DataOf<T>(filter),
                  MutableDataOf<T>(dinput, ctx.place()));
  if (dfilter)
    LaunchFilter(ctx, g, DataOf<T>(dout), DataOf<T>(input), MutableDataOf<T>(dfilter, ctx.place()));
  return LaunchStatus(ctx);
}

// ---- pool3d and adaptive pooling ----

// Over [planes, D, H, W] (D = 1 for adaptive_pool2d).
struct Pool3DGeom {
  int64_t planes, in[3], out[3], k[3], s[3], p[3];
  int64_t fixed_divisor;  // > 0: every average divides by it; 0: by the window volume
  bool adaptive, max;
};

// The window [start, end) of output index o along axis a.
__device__ void WindowOf(const Pool3DGeom& g, int a, int64_t o, int64_t* start, int64_t* end) {
  if (g.adaptive) {
    *start = o * g.in[a] / g.out[a];
    *end = ((o + 1) * g.in[a] + g.out[a] - 1) / g.out[a];
    return;
  }
  const int64_t a0 = o * g.s[a] - g.p[a];
  *start = a0 > 0 ? a0 : 0;
  *end = a0 + g.k[a] < g.in[a] ? a0 + g.k[a] : g.in[a];
}

// x: input dims; y: output dims.
Pool3DGeom MakePoolGeom(const KernelContext& ctx, const DDim& x, const DDim& y, bool adaptive) {
  Pool3DGeom g;
  g.planes = x[0] * x[1];
  g.adaptive = adaptive;
  g.max = ctx.Attr<std::string>("pooling_type") == "max";
  g.fixed_divisor = 0;
  const int rank = x.size() - 2, skip = 3 - rank;
  for (int a = 0; a < 3; ++a) {
    g.in[a] = a < skip ? 1 : x[2 + a - skip];
    g.out[a] = a < skip ? 1 : y[2 + a - skip];
    g.k[a] = g.s[a] = 1, g.p[a] = 0;
  }
  if (!adaptive) {
    const auto& ksize = ctx.Attr<std::vector<int>>("ksize");
    const auto& strides = ctx.Attr<std::vector<int>>("strides");
    const auto& pads = ctx.Attr<std::vector<int>>("paddings");
    const bool global = ctx.Attr<bool>("global_pooling");
    for (int a = 0; a < 3; ++a) {
      g.k[a] = global ? g.in[a] : ksize[a];
      g.s[a] = global ? 1 : strides[a];
      g.p[a] = global ? 0 : PadBefore(pads, a);
    }
    if (!ctx.Attr<bool>("exclusive")) g.fixed_divisor = g.k[0] * g.k[1] * g.k[2];
  }
  return g;
}

// The window of output element idx: its plane and [lo, hi) per axis.
struct PoolWindow {
  int64_t plane, lo[3], hi[3], count;
};

__device__ PoolWindow PoolWindowAt(const Pool3DGeom& g, int64_t idx) {
  const int64_t ov = g.out[0] * g.out[1] * g.out[2], o = idx % ov;
  const int64_t pos[3] = {o / (g.out[1] * g.out[2]), (o / g.out[2]) % g.out[1], o % g.out[2]};
  PoolWindow win;
  win.plane = idx / ov;
  win.count = 1;
  for (int a = 0; a < 3; ++a) {
    WindowOf(g, a, pos[a], &win.lo[a], &win.hi[a]);
    win.count *= win.hi[a] > win.lo[a] ? win.hi[a] - win.lo[a] : 0;
  }
  return win;
}

// mask (may be null; max only): the offset in its plane of the element each output took.
template <typename T>
__global__ void PoolK(Pool3DGeom g, const T* x, T* out, int32_t* mask) {
  const int64_t iv = g.in[0] * g.in[1] * g.in[2];
  LOOM_GRID_STRIDE(idx, g.planes * g.out[0] * g.out[1] * g.out[2]) {
    const PoolWindow win = PoolWindowAt(g, idx);
    const T* xp = x + win.plane * iv;
    T acc = 0;
    bool any = false;
    int64_t at = -1;
    for (int64_t d = win.lo[0]; d < win.hi[0]; ++d)
      for (int64_t h = win.lo[1]; h < win.hi[1]; ++h)
        for (int64_t w = win.lo[2]; w < win.hi[2]; ++w) {
          const int64_t i = (d * g.in[1] + h) * g.in[2] + w;
          const T v = xp[i];
          if (!any || v > acc) at = i;
          acc = !any ? v : (g.max ? (v > acc ? v : acc) : acc + v);
          any = true;
        }
    if (mask) mask[idx] = static_cast<int32_t>(at);
    if (!any)
      acc = T(0);  // a window entirely in the padding (ceil_mode)
    else if (!g.max)
      acc /= static_cast<T>(g.fixed_divisor > 0 ? g.fixed_divisor : win.count);
    out[idx] = acc;
  }
}

template <typename T>
__global__ void PoolGradK(Pool3DGeom g, const T* x, const T* out, const T* dout, T* dx) {
  const int64_t iv = g.in[0] * g.in[1] * g.in[2];
  LOOM_GRID_STRIDE(idx, g.planes * g.out[0] * g.out[1] * g.out[2]) {
    const PoolWindow win = PoolWindowAt(g, idx);
    if (win.count == 0) continue;
    const T* xp = x + win.plane * iv;
    T* dxp = dx + win.plane * iv;
    const T go = dout[idx];
    if (g.max) {
      const T target = out[idx];
      int64_t at = -1;
      for (int64_t d = win.lo[0]; d < win.hi[0] && at < 0; ++d)
        for (int64_t h = win.lo[1]; h < win.hi[1] && at < 0; ++h)
          for (int64_t w = win.lo[2]; w < win.hi[2]; ++w)
            if (xp[(d * g.in[1] + h) * g.in[2] + w] == target) {
              at = (d * g.in[1] + h) * g.in[2] + w;
              break;
            }
      if (at >= 0) atomicAdd(dxp + at, go);
      continue;
    }
    const T share = go / static_cast<T>(g.fixed_divisor > 0 ? g.fixed_divisor : win.count);
    for (int64_t d = win.lo[0]; d < win.hi[0]; ++d)
      for (int64_t h = win.lo[1]; h < win.hi[1]; ++h)
        for (int64_t w = win.lo[2]; w < win.hi[2]; ++w)
          atomicAdd(dxp + (d * g.in[1] + h) * g.in[2] + w, share);
  }
}

template <typename T, bool kAdaptive>
Status Pool(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  T* o = MutableDataOf<T>(out, ctx.place());
  if (out->numel() == 0) return Status::OK();
  Pool3DGeom g = MakePoolGeom(ctx, x.dims(), out->dims(), kAdaptive);
  Tensor* mask = kAdaptive ? ctx.OutputOrNull("Mask") : nullptr;
  int32_t* m = mask ? mask->mutable_data<int32_t>(ctx.place()) : nullptr;
  PoolK<T><<<Blocks(out->numel()), kThreads, 0, Stream(ctx)>>>(g, DataOf<T>(x), o, m);
  return LaunchStatus(ctx);
}

template <typename T, bool kAdaptive>
Status PoolGrad(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  const Tensor& x = ctx.Input("X");
  const Tensor& out = ctx.Input("Out");
  T* dx = MutableDataOf<T>(dxt, ctx.place());
  if (dxt->numel() == 0) return Status::OK();
  cudaMemsetAsync(dx, 0, dxt->nbytes(), Stream(ctx));
  Pool3DGeom g = MakePoolGeom(ctx, x.dims(), out.dims(), kAdaptive);
  if (out.numel() > 0)
    PoolGradK<T><<<Blocks(out.numel()), kThreads, 0, Stream(ctx)>>>(
        g, DataOf<T>(x), DataOf<T>(out), DataOf<T>(ctx.Input("Out@GRAD")), dx);
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(conv3d, kCUDA, FP32, Conv3D<float>);
LOOM_REGISTER_KERNEL(conv3d, kCUDA, FP64, Conv3D<double>);
LOOM_REGISTER_KERNEL(conv3d_grad, kCUDA, FP32, Conv3DGrad<float>);
LOOM_REGISTER_KERNEL(conv3d_grad, kCUDA, FP64, Conv3DGrad<double>);
LOOM_REGISTER_KERNEL(conv3d_transpose, kCUDA, FP32, Conv3DTranspose<float>);
LOOM_REGISTER_KERNEL(conv3d_transpose, kCUDA, FP64, Conv3DTranspose<double>);
LOOM_REGISTER_KERNEL(conv3d_transpose_grad, kCUDA, FP32, Conv3DTransposeGrad<float>);
LOOM_REGISTER_KERNEL(conv3d_transpose_grad, kCUDA, FP64, Conv3DTransposeGrad<double>);
LOOM_REGISTER_KERNEL(pool3d, kCUDA, FP32, (Pool<float, false>));
LOOM_REGISTER_KERNEL(pool3d, kCUDA, FP64, (Pool<double, false>));
LOOM_REGISTER_KERNEL(pool3d_grad, kCUDA, FP32, (PoolGrad<float, false>));
LOOM_REGISTER_KERNEL(pool3d_grad, kCUDA, FP64, (PoolGrad<double, false>));
LOOM_REGISTER_KERNEL(adaptive_pool2d, kCUDA, FP32, (Pool<float, true>));
LOOM_REGISTER_KERNEL(adaptive_pool2d, kCUDA, FP64, (Pool<double, true>));
LOOM_REGISTER_KERNEL(adaptive_pool2d_grad, kCUDA, FP32, (PoolGrad<float, true>));
LOOM_REGISTER_KERNEL(adaptive_pool2d_grad, kCUDA, FP64, (PoolGrad<double, true>));
LOOM_REGISTER_KERNEL(adaptive_pool3d, kCUDA, FP32, (Pool<float, true>));
LOOM_REGISTER_KERNEL(adaptive_pool3d, kCUDA, FP64, (Pool<double, true>));
LOOM_REGISTER_KERNEL(adaptive_pool3d_grad, kCUDA, FP32, (PoolGrad<float, true>));
LOOM_REGISTER_KERNEL(adaptive_pool3d_grad, kCUDA, FP64, (PoolGrad<double, true>));

}  // namespace loom::ops::cuda
