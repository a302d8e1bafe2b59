// CUDA part of the control-flow helpers: gradient pieces summed on the device.
#include "operators/control/control_util.h"
#include "operators/cuda_util.cuh"

namespace loom::ops {
namespace {

template <typename T>
__global__ void AddK(T* d, const T* s, int64_t n) {
  using A = cuda::Acc<T>;
  LOOM_GRID_STRIDE(i, n) d[i] = static_cast<T>(static_cast<A>(d[i]) + static_cast<A>(s[i]));
}

template <typename T>
Status Launch(const KernelContext& ctx, const Tensor& src, Tensor* dst) {
  int64_t n = src.numel();
  if (n == 0) return Status::OK();
  AddK<T><<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(ctx)>>>(
      cuda::MutableDataOf<T>(dst, ctx.place()), cuda::DataOf<T>(src), n);
  return cuda::LaunchStatus(ctx);
}

}  // namespace

Status AddOnCuda(const KernelContext& ctx, const Tensor& src, Tensor* dst) {
  switch (src.dtype()) {
    case proto::FP32: return Launch<float>(ctx, src, dst);
    case proto::FP64: return Launch<double>(ctx, src, dst);
    case proto::FP16: return Launch<__half>(ctx, src, dst);
    default: return ctx.Error("gradients of dtype ", DataTypeName(src.dtype()), " are not summed");
  }
}

}  // namespace loom::ops
