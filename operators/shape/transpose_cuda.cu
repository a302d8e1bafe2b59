// CUDA kernels of transpose (fp32, fp64, fp16, int32, int64) and transpose_grad (fp32, fp64,
// fp16), as operators/shape/transpose.cc: dim i of Out is dim axis[i] of X; the gradient
// transposes Out@GRAD by the inverse permutation. One thread per output element.
#include "operators/cuda_util.cuh"
#include "operators/shape/shape_util.h"

namespace loom::ops::cuda {
namespace {

struct TransposePlan {
  int rank = 0;
  int64_t out_dims[DDim::kMaxRank] = {};
  int64_t src_stride[DDim::kMaxRank] = {};  // stride in X of output dim k
};

template <typename T>
__global__ void TransposeK(TransposePlan p, const T* x, T* o, int64_t n) {
  LOOM_GRID_STRIDE(i, n) {
    int64_t rest = i, src = 0;
    for (int k = p.rank - 1; k >= 0; --k) {
      src += (rest % p.out_dims[k]) * p.src_stride[k];
      rest /= p.out_dims[k];
    }
    o[i] = x[src];
  }
}

template <typename T>
Status TransposeBy(const KernelContext& ctx, const Tensor& x, const std::vector<int>& perm,
                   Tensor* out) {
  const DDim& in = x.dims();
  std::vector<int64_t> strides = Strides(in);
  TransposePlan p;
  p.rank = static_cast<int>(perm.size());
  DDim od;
  for (int k = 0; k < p.rank; ++k) {
    p.out_dims[k] = in[perm[k]];
    p.src_stride[k] = strides[perm[k]];
    od.push_back(in[perm[k]]);
  }
  out->Resize(od);
  T* o = MutableDataOf<T>(out, ctx.place());
  const int64_t n = x.numel();
  if (n == 0) return Status::OK();
  TransposeK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(p, DataOf<T>(x), o, n);
  return LaunchStatus(ctx);
}

template <typename T>
Status Transpose(const KernelContext& ctx) {
  return TransposeBy<T>(ctx, ctx.Input("X"), NormalizedPerm(ctx.Attr<std::vector<int>>("axis")),
                        ctx.Output("Out"));
}

template <typename T>
Status TransposeGrad(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  return TransposeBy<T>(ctx, ctx.Input("Out@GRAD"),
                        InversePermutation(NormalizedPerm(ctx.Attr<std::vector<int>>("axis"))), dx);
}

}  // namespace

LOOM_REGISTER_KERNEL(transpose, kCUDA, FP32, Transpose<float>);
LOOM_REGISTER_KERNEL(transpose, kCUDA, FP64, Transpose<double>);
LOOM_REGISTER_KERNEL(transpose, kCUDA, FP16, Transpose<__half>);
LOOM_REGISTER_KERNEL(transpose, kCUDA, INT32, Transpose<int32_t>);
LOOM_REGISTER_KERNEL(transpose, kCUDA, INT64, Transpose<int64_t>);
LOOM_REGISTER_KERNEL(transpose_grad, kCUDA, FP32, TransposeGrad<float>);
LOOM_REGISTER_KERNEL(transpose_grad, kCUDA, FP64, TransposeGrad<double>);
LOOM_REGISTER_KERNEL(transpose_grad, kCUDA, FP16, TransposeGrad<__half>);

}  // namespace loom::ops::cuda
