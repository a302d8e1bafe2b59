// CUDA kernels of batch_norm(+grad) (NCHW, training and is_test, same moving-statistics update
// and SavedMean / SavedVariance = inverse std as operators/nn/batch_norm.cc) and of softmax /
// log_softmax (+grad) over any axis (operators/nn/softmax.cc), fp32 and fp64.
// Per-channel statistics: one block per channel. Softmax: one block per row when the axis is
// the last one, else one thread per (pre, post) column.
#include <cmath>

#include "operators/cuda_util.cuh"
#include "operators/nn/batch_norm_geom.h"
#include "operators/nn/softmax_geom.h"

namespace loom::ops::cuda {
namespace {

// ---- batch_norm ----

// Training statistics of channel ch (two passes: mean, then mean squared deviation); moving
// statistics updated element-wise (the outputs may alias the inputs).
template <typename T>
__global__ void BnTrainStatsK(const T* x, BnGeom g, const T* mean_in, const T* var_in, T* mean_out,
                              T* var_out, T* saved_mean, T* saved_inv_std, T eps, T momentum) {
  __shared__ T buf[kThreads];
  const int64_t count = g.n * g.inner;
  for (int64_t ch = blockIdx.x; ch < g.c; ch += gridDim.x) {
    T acc = 0;
    for (int64_t t = threadIdx.x; t < count; t += blockDim.x)
      acc += x[((t / g.inner) * g.c + ch) * g.inner + t % g.inner];
    const T mu = BlockSum(acc, buf) / static_cast<T>(count);
    acc = 0;
    for (int64_t t = threadIdx.x; t < count; t += blockDim.x) {
      T d = x[((t / g.inner) * g.c + ch) * g.inner + t % g.inner] - mu;
      acc += d * d;
    }
    const T var = BlockSum(acc, buf) / static_cast<T>(count);
    if (threadIdx.x == 0) {
      saved_mean[ch] = mu;
      saved_inv_std[ch] = T(1) / sqrt(var + eps);
      if (mean_out) mean_out[ch] = momentum * mean_in[ch] + (T(1) - momentum) * mu;
      if (var_out) var_out[ch] = momentum * var_in[ch] + (T(1) - momentum) * var;
    }
  }
}

// is_test: the moving statistics normalize; they pass through to MeanOut / VarianceOut.
template <typename T>
__global__ void BnTestStatsK(int64_t c, const T* mean_in, const T* var_in, T* mean_out, T* var_out,
                             T* saved_mean, T* saved_inv_std, T eps) {
  LOOM_GRID_STRIDE(ch, c) {
    T m = mean_in[ch], v = var_in[ch];
    saved_mean[ch] = m;
    saved_inv_std[ch] = T(1) / sqrt(v + eps);
    if (mean_out) mean_out[ch] = m;
    if (var_out) var_out[ch] = v;
  }
}

template <typename T>
__global__ void BnApplyK(const T* x, BnGeom g, const T* scale, const T* bias, const T* mean,
                         const T* inv_std, T* y) {
  LOOM_GRID_STRIDE(i, g.n * g.c * g.inner) {
    int64_t ch = (i / g.inner) % g.c;
    T a = scale[ch] * inv_std[ch];
    y[i] = x[i] * a + (bias[ch] - mean[ch] * a);
  }
}

// The output tensor of `slot` when present, else a scratch tensor of c elements in `scratch`.
template <typename T>
T* OutputOrScratch(const KernelContext& ctx, const char* slot, DataType dt, int64_t c,
                   Tensor* scratch) {
  if (Tensor* t = ctx.OutputOrNull(slot)) return t->mutable_data<T>(ctx.place());
  *scratch = Tensor(dt, DDim{c});
  return scratch->mutable_data<T>(ctx.place());
}

template <typename T>
Status BatchNorm(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  BnGeom g = GeomOf(xt.dims());
  const T eps = static_cast<T>(ctx.Attr<float>("epsilon"));
  const T momentum = static_cast<T>(ctx.Attr<float>("momentum"));
  const bool is_test = ctx.Attr<bool>("is_test");
  if (!is_test && g.n * g.inner == 0)
    return ctx.Error("training-mode batch_norm needs a non-empty batch, X has dims ",
                     xt.dims().ToString());
  const T* mean_in = ctx.Input("Mean").data<T>();
  const T* var_in = ctx.Input("Variance").data<T>();
  Tensor* mo = ctx.OutputOrNull("MeanOut");
  Tensor* vo = ctx.OutputOrNull("VarianceOut");
  T* mean_out = mo ? mo->mutable_data<T>(ctx.place()) : nullptr;
  T* var_out = vo ? vo->mutable_data<T>(ctx.place()) : nullptr;
  Tensor s1, s2;
  T* mean = OutputOrScratch<T>(ctx, "SavedMean", xt.dtype(), g.c, &s1);
  T* inv_std = OutputOrScratch<T>(ctx, "SavedVariance", xt.dtype(), g.c, &s2);
  T* y = ctx.Output("Y")->mutable_data<T>(ctx.place());
  if (g.c == 0) return Status::OK();
  cudaStream_t stream = Stream(ctx);
  if (is_test) {
    BnTestStatsK<T><<<Blocks(g.c), kThreads, 0, stream>>>(g.c, mean_in, var_in, mean_out, var_out,
                                                          mean, inv_std, eps);
  } else {
    BnTrainStatsK<T><<<RowBlocks(g.c), kThreads, 0, stream>>>(
        xt.data<T>(), g, mean_in, var_in, mean_out, var_out, mean, inv_std, eps, momentum);
  }
  const int64_t total = xt.numel();
  if (total > 0)
    BnApplyK<T>
        <<<Blocks(total), kThreads, 0, stream>>>(xt.data<T>(), g, ctx.Input("Scale").data<T>(),
                                                 ctx.Input("Bias").data<T>(), mean, inv_std, y);
  return LaunchStatus(ctx);
}

// dbias[ch] = Σ dy, dscale[ch] = Σ dy * (x - mean) * inv_std.
template <typename T>
__global__ void BnGradStatsK(const T* x, const T* dy, BnGeom g, const T* mean, const T* inv_std,
                             T* dbias, T* dscale) {
  __shared__ T buf[kThreads];
  const int64_t count = g.n * g.inner;
  for (int64_t ch = blockIdx.x; ch < g.c; ch += gridDim.x) {
    T sb = 0, sd = 0;
    const T mu = mean[ch];
    for (int64_t t = threadIdx.x; t < count; t += blockDim.x) {
      int64_t e = ((t / g.inner) * g.c + ch) * g.inner + t % g.inner;
      sb += dy[e];
      sd += dy[e] * (x[e] - mu);
    }
    sb = BlockSum(sb, buf);
    sd = BlockSum(sd, buf);
    if (threadIdx.x == 0) {
      dbias[ch] = sb;
      dscale[ch] = sd * inv_std[ch];
    }
  }
}

template <typename T>
__global__ void BnGradApplyK(const T* x, const T* dy, BnGeom g, const T* scale, const T* mean,
                             const T* inv_std, const T* dbias, const T* dscale, bool is_test,
                             T* dx) {
  const int64_t count = g.n * g.inner;
  const T inv_m = T(1) / static_cast<T>(count > 0 ? count : 1);
  LOOM_GRID_STRIDE(i, count * g.c) {
    int64_t ch = (i / g.inner) % g.c;
    T a = scale[ch] * inv_std[ch];
    if (is_test) {
      dx[i] = a * dy[i];
    } else {
      T xhat = (x[i] - mean[ch]) * inv_std[ch];
      dx[i] = a * (dy[i] - (dbias[ch] + xhat * dscale[ch]) * inv_m);
    }
  }
}

template <typename T>
Status BatchNormGrad(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  BnGeom g = GeomOf(xt.dims());
  const T* x = xt.data<T>();
  const T* mean = ctx.Input("SavedMean").data<T>();
  const T* inv_std = ctx.Input("SavedVariance").data<T>();
  const T* dy = ctx.Input("Y@GRAD").data<T>();
  const bool is_test = ctx.Attr<bool>("is_test");
  Tensor s1, s2;
  T* dbias = OutputOrScratch<T>(ctx, "Bias@GRAD", xt.dtype(), g.c, &s1);
  T* dscale = OutputOrScratch<T>(ctx, "Scale@GRAD", xt.dtype(), g.c, &s2);
  if (g.c == 0) return Status::OK();
  cudaStream_t stream = Stream(ctx);
  BnGradStatsK<T><<<RowBlocks(g.c), kThreads, 0, stream>>>(x, dy, g, mean, inv_std, dbias, dscale);
  if (Tensor* t = ctx.OutputOrNull("X@GRAD")) {
    T* dx = t->mutable_data<T>(ctx.place());
    if (xt.numel() > 0)
      BnGradApplyK<T><<<Blocks(xt.numel()), kThreads, 0, stream>>>(
          x, dy, g, ctx.Input("Scale").data<T>(), mean, inv_std, dbias, dscale, is_test, dx);
  }
  return LaunchStatus(ctx);
}

// ---- softmax / log_softmax ----

// post == 1: one block per row of d.
template <typename T, bool kLog>
__global__ void SoftmaxRowK(const T* x, T* o, int64_t rows, int64_t d) {
  __shared__ T buf[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    T* orow = o + r * d;
    T mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) mx = max(mx, xr[j]);
    mx = BlockMax(mx, buf);
    T sum = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) sum += exp(xr[j] - mx);
    const T lse = mx + log(BlockSum(sum, buf));
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      T v = xr[j] - lse;
      orow[j] = kLog ? v : exp(v);
    }
  }
}

// post > 1: one thread per (i, k), walking j with stride post (coalesced over k).
template <typename T, bool kLog>
__global__ void SoftmaxColK(const T* x, T* o, AxisView v) {
  LOOM_GRID_STRIDE(t, v.pre * v.post) {
    const int64_t base = (t / v.post) * v.d * v.post + t % v.post;
    T mx = -INFINITY;
    for (int64_t j = 0; j < v.d; ++j) mx = max(mx, x[base + j * v.post]);
    T sum = 0;
    for (int64_t j = 0; j < v.d; ++j) sum += exp(x[base + j * v.post] - mx);
    const T lse = mx + log(sum);
    for (int64_t j = 0; j < v.d; ++j) {
      T val = x[base + j * v.post] - lse;
      o[base + j * v.post] = kLog ? val : exp(val);
    }
  }
}

template <typename T, bool kLog>
Status Softmax(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  AxisView v = ViewAt(x.dims(), ctx.Attr<int>("axis"));
  T* o = ctx.Output("Out")->mutable_data<T>(ctx.place());
  if (v.d == 0 || x.numel() == 0) return Status::OK();
  if (v.post == 1) {
    SoftmaxRowK<T, kLog>
        <<<RowBlocks(v.pre), kThreads, 0, Stream(ctx)>>>(x.data<T>(), o, v.pre, v.d);
  } else {
    SoftmaxColK<T, kLog><<<Blocks(v.pre * v.post), kThreads, 0, Stream(ctx)>>>(x.data<T>(), o, v);
  }
  return LaunchStatus(ctx);
}

// softmax: dx = y * (g - Σ g y); log_softmax: dx = g - exp(y) * Σ g; sums over the axis.
template <typename T, bool kLog>
__global__ void SoftmaxGradRowK(const T* y, const T* g, T* o, int64_t rows, int64_t d) {
  __shared__ T buf[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t off = r * d;
    T acc = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      acc += kLog ? g[off + j] : g[off + j] * y[off + j];
    acc = BlockSum(acc, buf);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const int64_t e = off + j;
      o[e] = kLog ? g[e] - exp(y[e]) * acc : y[e] * (g[e] - acc);
    }
  }
}

template <typename T, bool kLog>
__global__ void SoftmaxGradColK(const T* y, const T* g, T* o, AxisView v) {
  LOOM_GRID_STRIDE(t, v.pre * v.post) {
    const int64_t base = (t / v.post) * v.d * v.post + t % v.post;
    T acc = 0;
    for (int64_t j = 0; j < v.d; ++j) {
      const int64_t e = base + j * v.post;
      acc += kLog ? g[e] : g[e] * y[e];
    }
    for (int64_t j = 0; j < v.d; ++j) {
      const int64_t e = base + j * v.post;
      o[e] = kLog ? g[e] - exp(y[e]) * acc : y[e] * (g[e] - acc);
    }
  }
}

template <typename T, bool kLog>
Status SoftmaxGrad(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& out = ctx.Input("Out");
  AxisView v = ViewAt(out.dims(), ctx.Attr<int>("axis"));
  const T* y = out.data<T>();
  const T* g = ctx.Input("Out@GRAD").data<T>();
  T* o = dx->mutable_data<T>(ctx.place());
  if (out.numel() == 0) return Status::OK();
  if (v.post == 1) {
    SoftmaxGradRowK<T, kLog><<<RowBlocks(v.pre), kThreads, 0, Stream(ctx)>>>(y, g, o, v.pre, v.d);
  } else {
    SoftmaxGradColK<T, kLog><<<Blocks(v.pre * v.post), kThreads, 0, Stream(ctx)>>>(y, g, o, v);
  }
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(batch_norm, kCUDA, FP32, BatchNorm<float>);
LOOM_REGISTER_KERNEL(batch_norm, kCUDA, FP64, BatchNorm<double>);
LOOM_REGISTER_KERNEL(batch_norm_grad, kCUDA, FP32, BatchNormGrad<float>);
LOOM_REGISTER_KERNEL(batch_norm_grad, kCUDA, FP64, BatchNormGrad<double>);
LOOM_REGISTER_KERNEL(softmax, kCUDA, FP32, (Softmax<float, false>));
LOOM_REGISTER_KERNEL(softmax, kCUDA, FP64, (Softmax<double, false>));
LOOM_REGISTER_KERNEL(softmax_grad, kCUDA, FP32, (SoftmaxGrad<float, false>));
LOOM_REGISTER_KERNEL(softmax_grad, kCUDA, FP64, (SoftmaxGrad<double, false>));
LOOM_REGISTER_KERNEL(log_softmax, kCUDA, FP32, (Softmax<float, true>));
LOOM_REGISTER_KERNEL(log_softmax, kCUDA, FP64, (Softmax<double, true>));
LOOM_REGISTER_KERNEL(log_softmax_grad, kCUDA, FP32, (SoftmaxGrad<float, true>));
LOOM_REGISTER_KERNEL(log_softmax_grad, kCUDA, FP64, (SoftmaxGrad<double, true>));

}  // namespace loom::ops::cuda
