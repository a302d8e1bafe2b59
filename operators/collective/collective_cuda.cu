// CUDA helper of the collective ops: a rank's gradient scaled by its sample weight before the
// reduction, on the compute stream.
#include "operators/collective/comm.h"
#include "operators/cuda_util.cuh"

namespace loom::ops {
namespace {

template <typename T>
__global__ void ScaleK(T* x, int64_t n, cuda::Acc<T> w) {
  using A = cuda::Acc<T>;
  LOOM_GRID_STRIDE(i, n) x[i] = static_cast<T>(static_cast<A>(x[i]) * w);
}

template <typename T>
Status Launch(const KernelContext& ctx, void* x, int64_t n, double w) {
  if (n == 0) return Status::OK();
  ScaleK<T><<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(ctx)>>>(
      static_cast<T*>(x), n, static_cast<cuda::Acc<T>>(w));
  return cuda::LaunchStatus(ctx);
}

}  // namespace

Status ScaleOnDevice(const KernelContext& ctx, void* x, int64_t n, DataType dtype, double w) {
  switch (dtype) {
    case proto::FP32: return Launch<float>(ctx, x, n, w);
    case proto::FP64: return Launch<double>(ctx, x, n, w);
    case proto::FP16: return Launch<__half>(ctx, x, n, w);
    default:
      return Unimplemented(ctx.Where(), ": input 'Weight' needs fp32, fp64 or fp16 data, got ",
                           DataTypeName(dtype));
  }
}

}  // namespace loom::ops
