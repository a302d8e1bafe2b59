// CUDA kernels of reshape, squeeze, unsqueeze, flatten (+grad), assign and cast, as
// operators/shape/reshape.cc and cast_assign.cc: the reshape family and assign copy the data
// (device to device, skipped when Out is X itself); cast converts element-wise with C++ rules
// between fp32, fp64, int32, int64 and bool. The copies also run in fp16.
#include "operators/cuda_util.cuh"

namespace loom::ops::cuda {
namespace {

Status CopyDevice(const KernelContext& ctx, const Tensor& x, Tensor* out) {
  if (out->numel() != x.numel())
    return ctx.Error("output dims ", out->dims().ToString(), " hold ", out->numel(),
                     " elements, input dims ", x.dims().ToString(), " hold ", x.numel());
  void* o = out->mutable_data(ctx.place(), x.dtype());
  if (x.numel() > 0 && o != x.raw_data())
    cudaMemcpyAsync(o, x.raw_data(), x.nbytes(), cudaMemcpyDeviceToDevice, Stream(ctx));
  return LaunchStatus(ctx);
}

Status ReshapeLike(const KernelContext& ctx) {
  return CopyDevice(ctx, ctx.Input("X"), ctx.Output("Out"));
}

Status ReshapeLikeGrad(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  return CopyDevice(ctx, ctx.Input("Out@GRAD"), dx);
}

template <typename In, typename Out>
Status CastTo(const KernelContext& ctx, const Tensor& x, Tensor* out) {
  Out* o = out->mutable_data<Out>(ctx.place());
  const int64_t n = x.numel();
  if (n == 0) return Status::OK();
  ConvertK<In, Out><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(x.data<In>(), o, n);
  return LaunchStatus(ctx);
}

template <typename In>
Status Cast(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  switch (ctx.Attr<int>("out_dtype")) {
    case proto::FP32: return CastTo<In, float>(ctx, x, out);
    case proto::FP64: return CastTo<In, double>(ctx, x, out);
    case proto::INT32: return CastTo<In, int32_t>(ctx, x, out);
    case proto::INT64: return CastTo<In, int64_t>(ctx, x, out);
    case proto::BOOL: return CastTo<In, bool>(ctx, x, out);
    default: return ctx.Error("unsupported out_dtype ", ctx.Attr<int>("out_dtype"));
  }
}

}  // namespace

#define LOOM_COPY_CUDA(NAME, FN)               \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, FP32, FN); \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, FP64, FN); \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, FP16, FN)
#define LOOM_COPY_CUDA_ALL(NAME, FN)            \
  LOOM_COPY_CUDA(NAME, FN);                     \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, INT32, FN); \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, INT64, FN)

LOOM_COPY_CUDA_ALL(reshape, ReshapeLike);
LOOM_COPY_CUDA_ALL(squeeze, ReshapeLike);
LOOM_COPY_CUDA_ALL(unsqueeze, ReshapeLike);
LOOM_COPY_CUDA_ALL(flatten, ReshapeLike);
LOOM_COPY_CUDA(reshape_grad, ReshapeLikeGrad);
LOOM_COPY_CUDA(squeeze_grad, ReshapeLikeGrad);
LOOM_COPY_CUDA(unsqueeze_grad, ReshapeLikeGrad);
LOOM_COPY_CUDA(flatten_grad, ReshapeLikeGrad);
LOOM_COPY_CUDA_ALL(assign, ReshapeLike);
LOOM_REGISTER_KERNEL(assign, kCUDA, BOOL, ReshapeLike);

LOOM_REGISTER_KERNEL(cast, kCUDA, FP32, Cast<float>);
LOOM_REGISTER_KERNEL(cast, kCUDA, FP64, Cast<double>);
LOOM_REGISTER_KERNEL(cast, kCUDA, INT32, Cast<int32_t>);
LOOM_REGISTER_KERNEL(cast, kCUDA, INT64, Cast<int64_t>);
LOOM_REGISTER_KERNEL(cast, kCUDA, BOOL, Cast<bool>);

}  // namespace loom::ops::cuda
