// CUDA kernels of mul(+grad) (operators/math/mul.cc) through cuBLAS, fp32, fp64 and fp16
// (fp16 storage, fp32 accumulation).
#include "operators/cuda_util.cuh"
#include "operators/math/mul_geom.h"

namespace loom::ops::cuda {
namespace {

// Row-major C[m,n] = op(A)·op(B) (fp16: fp32 accumulation); empty extents give zeros.
template <typename T>
Status GemmChecked(const KernelContext& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                   const T* a, const T* b, T* c) {
  if (m == 0 || n == 0) return Status::OK();
  if (k == 0) {
    cudaMemsetAsync(c, 0, sizeof(T) * m * n, Stream(ctx));
    return Status::OK();
  }
  return CublasStatus(ctx, GemmStridedBatched<T>(Cublas(ctx), ta, tb, m, n, k, Acc<T>(1), a, 0, b,
                                                 0, Acc<T>(0), c, 0, 1));
}

template <typename T>
Status Mul(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const auto [x2, y2] = MakeMulGeom(ctx, x.dims(), y.dims());
  return GemmChecked<T>(ctx, false, false, x2[0], y2[1], x2[1], DataOf<T>(x), DataOf<T>(y),
                        MutableDataOf<T>(ctx.Output("Out"), ctx.place()));
}

template <typename T>
Status MulGrad(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const Tensor& dout = ctx.Input("Out@GRAD");
  const auto [x2, y2] = MakeMulGeom(ctx, x.dims(), y.dims());
  if (Tensor* dx = ctx.OutputOrNull("X@GRAD"))
    LOOM_RETURN_IF_ERROR(GemmChecked<T>(ctx, false, true, x2[0], x2[1], y2[1], DataOf<T>(dout),
                                        DataOf<T>(y), MutableDataOf<T>(dx, ctx.place())));
  if (Tensor* dy = ctx.OutputOrNull("Y@GRAD"))
    LOOM_RETURN_IF_ERROR(GemmChecked<T>(ctx, true, false, y2[0], y2[1], x2[0], DataOf<T>(x),
                                        DataOf<T>(dout), MutableDataOf<T>(dy, ctx.place())));
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_KERNEL(mul, kCUDA, FP32, Mul<float>);
LOOM_REGISTER_KERNEL(mul, kCUDA, FP64, Mul<double>);
LOOM_REGISTER_KERNEL(mul_grad, kCUDA, FP32, MulGrad<float>);
LOOM_REGISTER_KERNEL(mul_grad, kCUDA, FP64, MulGrad<double>);
LOOM_REGISTER_KERNEL(mul, kCUDA, FP16, Mul<__half>);
LOOM_REGISTER_KERNEL(mul_grad, kCUDA, FP16, MulGrad<__half>);

}  // namespace loom::ops::cuda
