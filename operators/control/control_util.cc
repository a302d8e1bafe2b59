#include "operators/control/control_util.h"

#include <cstring>
#include <vector>

#include "loom/config.h"

namespace loom::ops {

void CopyOnPlace(const KernelContext& ctx, const Tensor& src, Tensor* dst) {
  if (!src.place().is_cpu() || !ctx.place().is_cpu()) ctx.device().Wait();
  TensorCopy(src, ctx.place(), dst);
}

void ZerosOnPlace(const KernelContext& ctx, const Tensor& like, Tensor* dst) {
  dst->Resize(like.dims());
  void* p = dst->mutable_data(ctx.place(), like.dtype());
  size_t bytes = dst->nbytes();
  if (bytes == 0) return;
  if (ctx.place().is_cpu()) {
    std::memset(p, 0, bytes);
    return;
  }
  std::vector<char> zeros(bytes, 0);
  ctx.device().Wait();
  MemCopy(ctx.place(), p, Place::CPU(), zeros.data(), bytes);
}

Status AddOnPlace(const KernelContext& ctx, const Tensor& src, Tensor* dst) {
  if (src.dims() != dst->dims() || src.dtype() != dst->dtype())
    return ctx.Error("gradient pieces disagree: ", DataTypeName(src.dtype()), src.dims().ToString(),
                     " vs ", DataTypeName(dst->dtype()), dst->dims().ToString());
  if (!ctx.place().is_cpu()) {
#if LOOM_CUDA_ENABLED
    return AddOnCuda(ctx, src, dst);
#else
    return ctx.Error("no CUDA in this build");
#endif
  }
  const int64_t n = src.numel();
  switch (src.dtype()) {
    case proto::FP32: {
      float* d = dst->data<float>();
      const float* s = src.data<float>();
      for (int64_t i = 0; i < n; ++i) d[i] += s[i];
      return Status::OK();
    }
    case proto::FP64: {
      double* d = dst->data<double>();
      const double* s = src.data<double>();
      for (int64_t i = 0; i < n; ++i) d[i] += s[i];
      return Status::OK();
    }
    default:
      return ctx.Error("gradients of dtype ", DataTypeName(src.dtype()), " are not summed on ",
                       ctx.place().ToString());
  }
}

}  // namespace loom::ops
