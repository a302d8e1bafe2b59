// CUDA kernels of relu(+grad) (operators/nn/activation.cc), fp32, fp64 and fp16 (arithmetic
// in float).
#include "operators/cuda_util.cuh"

namespace loom::ops::cuda {
namespace {

template <typename T>
__global__ void ReluK(const T* x, T* o, int64_t n) {
  using A = Acc<T>;
  LOOM_GRID_STRIDE(i, n) o[i] = static_cast<A>(x[i]) > A(0) ? x[i] : static_cast<T>(A(0));
}

template <typename T>
__global__ void ReluGradK(const T* y, const T* g, T* o, int64_t n) {
  using A = Acc<T>;
  LOOM_GRID_STRIDE(i, n) o[i] = static_cast<A>(y[i]) > A(0) ? g[i] : static_cast<T>(A(0));
}

template <typename T>
Status Relu(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  T* o = MutableDataOf<T>(ctx.Output("Out"), ctx.place());
  if (x.numel() == 0) return Status::OK();
  ReluK<T><<<Blocks(x.numel()), kThreads, 0, Stream(ctx)>>>(DataOf<T>(x), o, x.numel());
  return LaunchStatus(ctx);
}

template <typename T>
Status ReluGrad(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& y = ctx.Input("Out");
  T* o = MutableDataOf<T>(dx, ctx.place());
  if (y.numel() == 0) return Status::OK();
  ReluGradK<T><<<Blocks(y.numel()), kThreads, 0, Stream(ctx)>>>(
      DataOf<T>(y), DataOf<T>(ctx.Input("Out@GRAD")), o, y.numel());
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(relu, kCUDA, FP32, Relu<float>);
LOOM_REGISTER_KERNEL(relu, kCUDA, FP64, Relu<double>);
LOOM_REGISTER_KERNEL(relu, kCUDA, FP16, Relu<__half>);
LOOM_REGISTER_KERNEL(relu_grad, kCUDA, FP32, ReluGrad<float>);
LOOM_REGISTER_KERNEL(relu_grad, kCUDA, FP64, ReluGrad<double>);
LOOM_REGISTER_KERNEL(relu_grad, kCUDA, FP16, ReluGrad<__half>);

}  // namespace loom::ops::cuda
