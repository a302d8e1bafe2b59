// CUDA kernels of layer_norm(+grad), fp32 and fp64, with the semantics of
// operators/nn/layer_norm.cc: X as [left, right] split at begin_norm_axis, optional Scale and
// Bias, Mean and Variance (biased) per row. Forward and X@GRAD: one block per row;
// Scale@GRAD and Bias@GRAD: one thread per column summing over the rows.
#include <cmath>

#include "operators/cuda_util.cuh"

namespace loom::ops::cuda {
namespace {

template <typename T>
__global__ void LayerNormK(const T* x, const T* scale, const T* bias, T* y, T* mean_out, T* var_out,
                           int64_t left, int64_t right, T eps) {
  __shared__ T buf[kThreads];
  for (int64_t r = blockIdx.x; r < left; r += gridDim.x) {
    const T* xr = x + r * right;
    T* yr = y + r * right;
    T acc = 0;
    for (int64_t j = threadIdx.x; j < right; j += blockDim.x) acc += xr[j];
    const T mu = right ? BlockSum(acc, buf) / static_cast<T>(right) : T(0);
    acc = 0;
    for (int64_t j = threadIdx.x; j < right; j += blockDim.x) acc += (xr[j] - mu) * (xr[j] - mu);
    const T var = right ? BlockSum(acc, buf) / static_cast<T>(right) : T(0);
    const T inv_std = T(1) / sqrt(var + eps);
    for (int64_t j = threadIdx.x; j < right; j += blockDim.x) {
      T v = (xr[j] - mu) * inv_std;
      if (scale) v *= scale[j];
      if (bias) v += bias[j];
      yr[j] = v;
    }
    if (threadIdx.x == 0) {
      if (mean_out) mean_out[r] = mu;
      if (var_out) var_out[r] = var;
    }
  }
}

template <typename T>
Status LayerNorm(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  DDim rows = FlattenTo2D(xt.dims(), ctx.Attr<int>("begin_norm_axis"));
  const int64_t left = rows[0], right = rows[1];
  const Tensor* st = ctx.InputOrNull("Scale");
  const Tensor* bt = ctx.InputOrNull("Bias");
  T* y = ctx.Output("Y")->mutable_data<T>(ctx.place());
  Tensor* mt = ctx.OutputOrNull("Mean");
  Tensor* vt = ctx.OutputOrNull("Variance");
  T* mean_out = mt ? mt->mutable_data<T>(ctx.place()) : nullptr;
  T* var_out = vt ? vt->mutable_data<T>(ctx.place()) : nullptr;
  if (left == 0) return Status::OK();
  LayerNormK<T><<<RowBlocks(left), kThreads, 0, Stream(ctx)>>>(
      xt.data<T>(), st ? st->data<T>() : nullptr, bt ? bt->data<T>() : nullptr, y, mean_out,
      var_out, left, right, static_cast<T>(ctx.Attr<float>("epsilon")));
  return LaunchStatus(ctx);
}

// Scale@GRAD[j] = Σ_r dy[r, j] * x̂[r, j], Bias@GRAD[j] = Σ_r dy[r, j].
template <typename T>
__global__ void LayerNormParamGradK(const T* x, const T* dy, const T* mean, const T* var, T* dscale,
                                    T* dbias, int64_t left, int64_t right, T eps) {
  LOOM_GRID_STRIDE(j, right) {
    T ds = 0, db = 0;
    for (int64_t r = 0; r < left; ++r) {
      const int64_t e = r * right + j;
      ds += dy[e] * (x[e] - mean[r]) / sqrt(var[r] + eps);
      db += dy[e];
    }
    if (dscale) dscale[j] = ds;
    if (dbias) dbias[j] = db;
  }
}

// X@GRAD = inv_std * (g - avg(g) - x̂ * avg(g * x̂)) per row, g = dy * Scale.
template <typename T>
__global__ void LayerNormInputGradK(const T* x, const T* scale, const T* dy, const T* mean,
                                    const T* var, T* dx, int64_t left, int64_t right, T eps) {
  __shared__ T buf[kThreads];
  for (int64_t r = blockIdx.x; r < left; r += gridDim.x) {
    const int64_t off = r * right;
    const T mu = mean[r], inv_std = T(1) / sqrt(var[r] + eps);
    T sg = 0, sgx = 0;
    for (int64_t j = threadIdx.x; j < right; j += blockDim.x) {
      T g = scale ? dy[off + j] * scale[j] : dy[off + j];
      sg += g;
      sgx += g * (x[off + j] - mu) * inv_std;
    }
    sg = BlockSum(sg, buf);
    sgx = BlockSum(sgx, buf);
    const T inv_n = T(1) / static_cast<T>(right);
    for (int64_t j = threadIdx.x; j < right; j += blockDim.x) {
      T g = scale ? dy[off + j] * scale[j] : dy[off + j];
      T xhat = (x[off + j] - mu) * inv_std;
      dx[off + j] = inv_std * (g - sg * inv_n - xhat * sgx * inv_n);
    }
  }
}

template <typename T>
Status LayerNormGrad(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  DDim rows = FlattenTo2D(xt.dims(), ctx.Attr<int>("begin_norm_axis"));
  const int64_t left = rows[0], right = rows[1];
  const Tensor* st = ctx.InputOrNull("Scale");
  const T* x = xt.data<T>();
  const T* mean = ctx.Input("Mean").data<T>();
  const T* var = ctx.Input("Variance").data<T>();
  const T* dy = ctx.Input("Y@GRAD").data<T>();
  const T eps = static_cast<T>(ctx.Attr<float>("epsilon"));
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  Tensor* dst = ctx.OutputOrNull("Scale@GRAD");
  Tensor* dbt = ctx.OutputOrNull("Bias@GRAD");
  T* dx = dxt ? dxt->mutable_data<T>(ctx.place()) : nullptr;
  T* dscale = dst ? dst->mutable_data<T>(ctx.place()) : nullptr;
  T* dbias = dbt ? dbt->mutable_data<T>(ctx.place()) : nullptr;
  cudaStream_t stream = Stream(ctx);
  if ((dscale || dbias) && right > 0)
    LayerNormParamGradK<T>
        <<<Blocks(right), kThreads, 0, stream>>>(x, dy, mean, var, dscale, dbias, left, right, eps);
  if (dx && left > 0 && right > 0)
    LayerNormInputGradK<T><<<RowBlocks(left), kThreads, 0, stream>>>(
        x, st ? st->data<T>() : nullptr, dy, mean, var, dx, left, right, eps);
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(layer_norm, kCUDA, FP32, LayerNorm<float>);
LOOM_REGISTER_KERNEL(layer_norm, kCUDA, FP64, LayerNorm<double>);
LOOM_REGISTER_KERNEL(layer_norm_grad, kCUDA, FP32, LayerNormGrad<float>);
LOOM_REGISTER_KERNEL(layer_norm_grad, kCUDA, FP64, LayerNormGrad<double>);

}  // namespace loom::ops::cuda
