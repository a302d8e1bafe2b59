// CUDA kernels of strided_slice (fp32, fp64, int32, int64) and strided_slice_grad (fp32, fp64),
// as operators/shape/strided_slice.cc: the selection is resolved on the host
// (strided_slice_geom.h); thread i copies output element i from its place in Input, or, for the
// gradient, writes Out@GRAD's element i to its place in a zeroed Input@GRAD (every place is
// selected at most once, so no atomics).
#include "operators/cuda_util.cuh"
#include "operators/shape/strided_slice_geom.h"

namespace loom::ops::cuda {
namespace {

struct StridedPlan {
  int rank = 0;
  int64_t dims[DDim::kMaxRank] = {};
  int64_t steps[DDim::kMaxRank] = {};
  int64_t base = 0;
};

StatusOr<StridedPlan> MakePlan(const KernelContext& ctx, const DDim& in, DDim* out_dims) {
  std::vector<StridedAxis> sel;
  const auto& axes = ctx.Attr<std::vector<int>>("axes");
  const auto& starts = ctx.Attr<std::vector<int>>("starts");
  const auto& ends = ctx.Attr<std::vector<int>>("ends");
  const auto& strides = ctx.Attr<std::vector<int>>("strides");
  const int bad = ResolveStrided(in, axes, starts, ends, strides, &sel);
  if (bad >= 0)
    return ctx.Error("on axis ", axes[bad], " start ", starts[bad], " and end ", ends[bad],
                     " select nothing with stride ", strides[bad], " (Input ", in.ToString(), ")");
  const StridedView v = MakeStridedView(in, sel);
  *out_dims = v.dims;
  StridedPlan p;
  p.rank = in.size();
  p.base = v.base;
  for (int d = 0; d < p.rank; ++d) {
    p.dims[d] = v.dims[d];
    p.steps[d] = v.steps[d];
  }
  return p;
}

__device__ inline int64_t FullIndex(const StridedPlan& p, int64_t i) {
  int64_t rest = i, off = p.base;
  for (int k = p.rank - 1; k >= 0; --k) {
    off += (rest % p.dims[k]) * p.steps[k];
    rest /= p.dims[k];
  }
  return off;
}

template <typename T>
__global__ void StridedSliceK(StridedPlan p, const T* x, T* o, int64_t n) {
  LOOM_GRID_STRIDE(i, n) o[i] = x[FullIndex(p, i)];
}

template <typename T>
__global__ void StridedSliceGradK(StridedPlan p, const T* g, T* dx, int64_t n) {
  LOOM_GRID_STRIDE(i, n) dx[FullIndex(p, i)] = g[i];
}

template <typename T>
Status StridedSlice(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("Input");
  DDim dims;
  LOOM_ASSIGN_OR_RETURN(StridedPlan p, MakePlan(ctx, x.dims(), &dims));
  Tensor* out = ctx.Output("Out");
  out->Resize(dims);
  T* o = MutableDataOf<T>(out, ctx.place());
  const int64_t n = dims.numel();
  if (n <= 0) return Status::OK();
  StridedSliceK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(p, DataOf<T>(x), o, n);
  return LaunchStatus(ctx);
}

template <typename T>
Status StridedSliceGrad(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("Input@GRAD");
  if (!dx) return Status::OK();
  const DDim in = ctx.Input("Input").dims();
  DDim dims;
  LOOM_ASSIGN_OR_RETURN(StridedPlan p, MakePlan(ctx, in, &dims));
  dx->Resize(in);
  T* d = MutableDataOf<T>(dx, ctx.place());
  cudaMemsetAsync(d, 0, dx->nbytes(), Stream(ctx));
  const int64_t n = dims.numel();
  if (n > 0)
    StridedSliceGradK<T>
        <<<Blocks(n), kThreads, 0, Stream(ctx)>>>(p, DataOf<T>(ctx.Input("Out@GRAD")), d, n);
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(strided_slice, kCUDA, FP32, StridedSlice<float>);
LOOM_REGISTER_KERNEL(strided_slice, kCUDA, FP64, StridedSlice<double>);
LOOM_REGISTER_KERNEL(strided_slice, kCUDA, INT32, StridedSlice<int32_t>);
LOOM_REGISTER_KERNEL(strided_slice, kCUDA, INT64, StridedSlice<int64_t>);
LOOM_REGISTER_KERNEL(strided_slice_grad, kCUDA, FP32, StridedSliceGrad<float>);
LOOM_REGISTER_KERNEL(strided_slice_grad, kCUDA, FP64, StridedSliceGrad<double>);

}  // namespace loom::ops::cuda
