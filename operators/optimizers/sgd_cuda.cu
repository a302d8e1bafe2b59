// CUDA kernel of sgd (operators/optimizers/sgd.cc), fp32, fp64 and fp16 (arithmetic in
// float).
#include "operators/cuda_util.cuh"

namespace loom::ops::cuda {
namespace {

template <typename T>
__global__ void SgdK(const T* p, const T* g, const T* lr, T* o, int64_t n) {
  using A = Acc<T>;
  const A rate = static_cast<A>(lr[0]);
  LOOM_GRID_STRIDE(i, n) {
    o[i] = static_cast<T>(static_cast<A>(p[i]) - rate * static_cast<A>(g[i]));
  }
}

template <typename T>
Status Sgd(const KernelContext& ctx) {
  const Tensor& p = ctx.Input("Param");
  T* o = MutableDataOf<T>(ctx.Output("ParamOut"), ctx.place());
  if (p.numel() == 0) return Status::OK();
  SgdK<T><<<Blocks(p.numel()), kThreads, 0, Stream(ctx)>>>(
      DataOf<T>(p), DataOf<T>(ctx.Input("Grad")), DataOf<T>(ctx.Input("LearningRate")), o,
      p.numel());
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(sgd, kCUDA, FP32, Sgd<float>);
LOOM_REGISTER_KERNEL(sgd, kCUDA, FP64, Sgd<double>);
LOOM_REGISTER_KERNEL(sgd, kCUDA, FP16, Sgd<__half>);

}  // namespace loom::ops::cuda
