// CUDA kernels of scale, fill_constant, fill_zeros_like, sum, mean(+grad), elementwise_add(+grad).
#include "operators/cuda_util.cuh"
#include "operators/math/elementwise.h"

namespace loom::ops::cuda {
namespace {

template <typename T>
__global__ void ScaleK(const T* x, T* o, int64_t n, T s, T b) {
  LOOM_GRID_STRIDE(i, n) o[i] = s * x[i] + b;
}

template <typename T>
Status Scale(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  float s = ctx.Attr<float>("scale"), b = ctx.Attr<float>("bias");
  if (!ctx.Attr<bool>("bias_after_scale")) b *= s;
  int64_t n = x.numel();
  ScaleK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(
      x.data<T>(), ctx.Output("Out")->mutable_data<T>(ctx.place()), n, static_cast<T>(s),
      static_cast<T>(b));
  return LaunchStatus(ctx);
}

template <typename T>
__global__ void FillK(T* o, int64_t n, T v) {
  LOOM_GRID_STRIDE(i, n) o[i] = v;
}

template <typename T>
Status FillConstant(const KernelContext& ctx) {
  Tensor* out = ctx.Output("Out");
  int64_t n = out->numel();
  FillK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(out->mutable_data<T>(ctx.place()), n,
                                                    static_cast<T>(ctx.Attr<float>("value")));
  return LaunchStatus(ctx);
}

template <typename T>
Status FillZerosLike(const KernelContext& ctx) {
  Tensor* out = ctx.Output("Out");
  cudaMemsetAsync(out->mutable_data<T>(ctx.place()), 0, out->nbytes(), Stream(ctx));
  return LaunchStatus(ctx);
}

template <typename T>
__global__ void AccumulateK(T* o, const T* a, int64_t n, bool first) {
  LOOM_GRID_STRIDE(i, n) o[i] = first ? a[i] : o[i] + a[i];
}

template <typename T>
__global__ void Add2K(T* o, const T* a, const T* b, int64_t n) {
  LOOM_GRID_STRIDE(i, n) o[i] = a[i] + b[i];
}

template <typename T>
Status Sum(const KernelContext& ctx) {
  int k = ctx.InputSize("X");
  Tensor* out = ctx.Output("Out");
  int64_t n = out->numel();
  std::vector<const T*> ins;
  for (int i = 0; i < k; ++i) ins.push_back(ctx.Input("X", i).data<T>());
  T* o = out->mutable_data<T>(ctx.place());
  // Out may alias an input: fold pairwise so no input is overwritten before it is read, then
  // accumulate the rest.
  if (k == 1) {
    if (o != ins[0]) AccumulateK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(o, ins[0], n, true);
    return LaunchStatus(ctx);
  }
  int alias = -1;
  for (int i = 0; i < k; ++i)
    if (ins[i] == o) alias = i;
  int a = alias >= 0 ? alias : 0, b = a == 0 ? 1 : 0;
  Add2K<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(o, ins[a], ins[b], n);
  for (int i = 0; i < k; ++i)
    if (i != a && i != b) AccumulateK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(o, ins[i], n, false);
  return LaunchStatus(ctx);
}

template <typename T>
__global__ void MeanK(const T* x, int64_t n, T* out) {
  __shared__ double part[kThreads];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += static_cast<double>(x[i]);
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = static_cast<T>(n ? part[0] / n : 0.0);
}

template <typename T>
Status Mean(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  MeanK<T><<<1, kThreads, 0, Stream(ctx)>>>(x.data<T>(), x.numel(),
                                            ctx.Output("Out")->mutable_data<T>(ctx.place()));
  return LaunchStatus(ctx);
}

template <typename T>
__global__ void MeanGradK(const T* g, T* o, int64_t n) {
  LOOM_GRID_STRIDE(i, n) o[i] = g[0] / static_cast<T>(n);
}

template <typename T>
Status MeanGrad(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  int64_t n = dx->numel();
  MeanGradK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(ctx.Input("Out@GRAD").data<T>(),
                                                        dx->mutable_data<T>(ctx.place()), n);
  return LaunchStatus(ctx);
}

template <typename T>
__global__ void BroadcastAddK(const T* x, const T* y, T* o, int64_t total, int64_t n,
                              int64_t post) {
  LOOM_GRID_STRIDE(i, total) o[i] = x[i] + y[(i / post) % n];
}

template <typename T>
Status Add(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  auto plan = PlanBroadcast(x.dims(), y.dims(), ctx.Attr<int>("axis"));
  if (!plan.ok()) return ctx.Error(plan.status().message());
  int64_t total = x.numel();
  const BroadcastPlan& p = plan.value();
  BroadcastAddK<T><<<Blocks(total), kThreads, 0, Stream(ctx)>>>(
      x.data<T>(), y.data<T>(), ctx.Output("Out")->mutable_data<T>(ctx.place()), total,
      p.same_shape ? total : p.n, p.same_shape ? 1 : p.post);
  return LaunchStatus(ctx);
}

// dY[j] = sum over (i, k) of dOut[i, j, k]: one block per j.
template <typename T>
__global__ void ReduceBroadcastK(const T* g, T* dy, int64_t pre, int64_t n, int64_t post) {
  __shared__ T part[kThreads];
  for (int64_t j = blockIdx.x; j < n; j += gridDim.x) {
    T acc = 0;
    for (int64_t t = threadIdx.x; t < pre * post; t += blockDim.x) {
      int64_t i = t / post, k = t % post;
      acc += g[(i * n + j) * post + k];
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) dy[j] = part[0];
    __syncthreads();
  }
}

template <typename T>
Status AddGrad(const KernelContext& ctx) {
  const Tensor& dout = ctx.Input("Out@GRAD");
  cudaStream_t s = Stream(ctx);
  if (Tensor* dx = ctx.OutputOrNull("X@GRAD"))
    cudaMemcpyAsync(dx->mutable_data<T>(ctx.place()), dout.data<T>(), dout.nbytes(),
                    cudaMemcpyDeviceToDevice, s);
  if (Tensor* dy = ctx.OutputOrNull("Y@GRAD")) {
    auto plan = PlanBroadcast(ctx.Input("X").dims(), ctx.Input("Y").dims(), ctx.Attr<int>("axis"));
    if (!plan.ok()) return ctx.Error(plan.status().message());
    const BroadcastPlan& p = plan.value();
    T* o = dy->mutable_data<T>(ctx.place());
    if (p.same_shape) {
      cudaMemcpyAsync(o, dout.data<T>(), dout.nbytes(), cudaMemcpyDeviceToDevice, s);
    } else {
      ReduceBroadcastK<T><<<Blocks(p.n), kThreads, 0, s>>>(dout.data<T>(), o, p.pre, p.n, p.post);
    }
  }
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(scale, kCUDA, FP32, Scale<float>);
LOOM_REGISTER_KERNEL(scale, kCUDA, FP64, Scale<double>);
LOOM_REGISTER_KERNEL(fill_constant, kCUDA, FP32, FillConstant<float>);
LOOM_REGISTER_KERNEL(fill_constant, kCUDA, FP64, FillConstant<double>);
LOOM_REGISTER_KERNEL(fill_constant, kCUDA, INT64, FillConstant<int64_t>);
LOOM_REGISTER_KERNEL(fill_constant, kCUDA, INT32, FillConstant<int32_t>);
LOOM_REGISTER_KERNEL(fill_zeros_like, kCUDA, FP32, FillZerosLike<float>);
LOOM_REGISTER_KERNEL(fill_zeros_like, kCUDA, FP64, FillZerosLike<double>);
LOOM_REGISTER_KERNEL(sum, kCUDA, FP32, Sum<float>);
LOOM_REGISTER_KERNEL(sum, kCUDA, FP64, Sum<double>);
LOOM_REGISTER_KERNEL(mean, kCUDA, FP32, Mean<float>);
LOOM_REGISTER_KERNEL(mean, kCUDA, FP64, Mean<double>);
LOOM_REGISTER_KERNEL(mean_grad, kCUDA, FP32, MeanGrad<float>);
LOOM_REGISTER_KERNEL(mean_grad, kCUDA, FP64, MeanGrad<double>);
LOOM_REGISTER_KERNEL(elementwise_add, kCUDA, FP32, Add<float>);
LOOM_REGISTER_KERNEL(elementwise_add, kCUDA, FP64, Add<double>);
LOOM_REGISTER_KERNEL(elementwise_add_grad, kCUDA, FP32, AddGrad<float>);
LOOM_REGISTER_KERNEL(elementwise_add_grad, kCUDA, FP64, AddGrad<double>);

}  // namespace loom::ops::cuda
