// CUDA kernels of slice and gather (fp32, fp64, fp16, int32, int64) and of slice_grad and
// gather_grad (fp32, fp64, fp16), as operators/shape/slice.cc and gather.cc. slice copies the box
// selected by [start, end) ranges (Python's rules for negative and out-of-range bounds); slice_grad
// zeroes Input@GRAD and writes Out@GRAD into the box. gather picks rows of X by int32 / int64
// Index; an index outside [0, dims(X)[0]) is an error (flagged by the kernel, reported after it);
// gather_grad scatter-adds the rows of Out@GRAD into a zero X@GRAD with atomicAdd (repeated indices
// accumulate; the order of the additions to one row is not fixed).
#include <algorithm>

#include "operators/cuda_util.cuh"
#include "operators/shape/shape_util.h"

namespace loom::ops::cuda {
namespace {

// ---- slice

// The box: its dims and, per dim, the stride in the full tensor; `base` is the offset of the
// box's first element in the full tensor.
struct SlicePlan {
  int rank = 0;
  int64_t box_dims[DDim::kMaxRank] = {};
  int64_t full_stride[DDim::kMaxRank] = {};
  int64_t base = 0;
};

// The box of ComputeBox (shape_util.h) as device kernels walk it.
SlicePlan MakePlan(const DDim& in, const std::vector<int>& axes, const std::vector<int>& starts,
                   const std::vector<int>& ends, DDim* box_dims) {
  const SliceBox box = ComputeBox(in, axes, starts, ends);
  *box_dims = box.dims;
  SlicePlan p;
  p.rank = in.size();
  std::vector<int64_t> strides = Strides(in);
  for (int d = 0; d < p.rank; ++d) {
    p.box_dims[d] = box.dims[d];
    p.full_stride[d] = strides[d];
    p.base += box.offset[d] * strides[d];
  }
  return p;
}

__device__ inline int64_t FullIndex(const SlicePlan& p, int64_t i) {
  int64_t rest = i, off = p.base;
  for (int k = p.rank - 1; k >= 0; --k) {
    off += (rest % p.box_dims[k]) * p.full_stride[k];
    rest /= p.box_dims[k];
  }
  return off;
}

template <typename T>
__global__ void SliceK(SlicePlan p, const T* x, T* o, int64_t n) {
  LOOM_GRID_STRIDE(i, n) o[i] = x[FullIndex(p, i)];
}

template <typename T>
__global__ void SliceGradK(SlicePlan p, const T* g, T* dx, int64_t n) {
  LOOM_GRID_STRIDE(i, n) dx[FullIndex(p, i)] = g[i];
}

template <typename T>
Status Slice(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("Input");
  DDim box;
  SlicePlan p =
      MakePlan(x.dims(), ctx.Attr<std::vector<int>>("axes"), ctx.Attr<std::vector<int>>("starts"),
               ctx.Attr<std::vector<int>>("ends"), &box);
  T* o = MutableDataOf<T>(ctx.Output("Out"), ctx.place());
  const int64_t n = box.numel();
  if (n <= 0) return Status::OK();
  SliceK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(p, DataOf<T>(x), o, n);
  return LaunchStatus(ctx);
}

template <typename T>
Status SliceGrad(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("Input@GRAD");
  if (!dx) return Status::OK();
  DDim box;
  SlicePlan p =
      MakePlan(ctx.Input("Input").dims(), ctx.Attr<std::vector<int>>("axes"),
               ctx.Attr<std::vector<int>>("starts"), ctx.Attr<std::vector<int>>("ends"), &box);
  T* d = MutableDataOf<T>(dx, ctx.place());
  cudaMemsetAsync(d, 0, dx->nbytes(), Stream(ctx));
  const int64_t n = box.numel();
  if (n > 0)
    SliceGradK<T>
        <<<Blocks(n), kThreads, 0, Stream(ctx)>>>(p, DataOf<T>(ctx.Input("Out@GRAD")), d, n);
  return LaunchStatus(ctx);
}

// ---- gather

__device__ inline int64_t IndexAt(const int64_t* i64, const int32_t* i32, int64_t i) {
  return i64 ? i64[i] : static_cast<int64_t>(i32[i]);
}

// Thread e handles element e % width of output row e / width (width 0: only checks the index).
template <typename T>
__global__ void GatherK(const T* x, const int64_t* i64, const int32_t* i32, T* out, int64_t n,
                        int64_t rows, int64_t width, int64_t* bad) {
  const int64_t w = width > 0 ? width : 1;
  LOOM_GRID_STRIDE(e, n * w) {
    const int64_t i = e / w, id = IndexAt(i64, i32, i);
    if (id < 0 || id >= rows) {
      *bad = id;
      if (width > 0) out[e] = static_cast<T>(0.0f);
    } else if (width > 0) {
      out[e] = x[id * width + e % width];
    }
  }
}

template <typename T>
__global__ void GatherGradK(const T* g, const int64_t* i64, const int32_t* i32, T* dx, int64_t n,
                            int64_t rows, int64_t width, int64_t* bad) {
  const int64_t w = width > 0 ? width : 1;
  LOOM_GRID_STRIDE(e, n * w) {
    const int64_t i = e / w, id = IndexAt(i64, i32, i);
    if (id < 0 || id >= rows)
      *bad = id;
    else if (width > 0)
      atomicAdd(dx + id * width + e % width, g[e]);
  }
}

template <typename T, bool kGrad>
Status Gather(const KernelContext& ctx) {
  Tensor* out = kGrad ? ctx.OutputOrNull("X@GRAD") : ctx.Output("Out");
  if (!out) return Status::OK();
  const Tensor& x = ctx.Input("X");
  const Tensor& index = ctx.Input("Index");
  const int64_t rows = x.dims()[0], width = x.dims().product(1, x.dims().size());
  const int64_t n = index.numel();
  const bool is64 = index.dtype() == proto::INT64;
  const int64_t* i64 = is64 ? index.data<int64_t>() : nullptr;
  const int32_t* i32 = is64 ? nullptr : index.data<int32_t>();
  T* o = MutableDataOf<T>(out, ctx.place());
  cudaStream_t stream = Stream(ctx);
  if (kGrad) cudaMemsetAsync(o, 0, out->nbytes(), stream);
  if (n == 0) return LaunchStatus(ctx);
  DeviceFlag bad(ctx);
  const int64_t threads = n * std::max<int64_t>(width, 1);
  if constexpr (kGrad) {
    GatherGradK<T><<<Blocks(threads), kThreads, 0, stream>>>(DataOf<T>(ctx.Input("Out@GRAD")), i64,
                                                             i32, o, n, rows, width, bad.ptr());
  } else {
    GatherK<T><<<Blocks(threads), kThreads, 0, stream>>>(DataOf<T>(x), i64, i32, o, n, rows, width,
                                                         bad.ptr());
  }
  LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
  const int64_t id = bad.Read();
  if (id != DeviceFlag::kUnset)
    return ctx.Error("index ", id, " of Index is out of range [0, ", rows,
                     ") for dim 0 of X with dims ", x.dims().ToString());
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_KERNEL(slice, kCUDA, FP32, Slice<float>);
LOOM_REGISTER_KERNEL(slice, kCUDA, FP64, Slice<double>);
LOOM_REGISTER_KERNEL(slice, kCUDA, INT32, Slice<int32_t>);
LOOM_REGISTER_KERNEL(slice, kCUDA, INT64, Slice<int64_t>);
LOOM_REGISTER_KERNEL(slice_grad, kCUDA, FP32, SliceGrad<float>);
LOOM_REGISTER_KERNEL(slice_grad, kCUDA, FP64, SliceGrad<double>);
LOOM_REGISTER_KERNEL(gather, kCUDA, FP32, (Gather<float, false>));
LOOM_REGISTER_KERNEL(gather, kCUDA, FP64, (Gather<double, false>));
LOOM_REGISTER_KERNEL(gather, kCUDA, INT32, (Gather<int32_t, false>));
LOOM_REGISTER_KERNEL(gather, kCUDA, INT64, (Gather<int64_t, false>));
LOOM_REGISTER_KERNEL(gather_grad, kCUDA, FP32, (Gather<float, true>));
LOOM_REGISTER_KERNEL(gather_grad, kCUDA, FP64, (Gather<double, true>));
// fp16: the same copies; gather_grad scatter-adds with atomicAdd on __half (sm_70+), so rows
// gathered many times accumulate their gradient in fp16 (as the fp16 max-pool gradient does).
LOOM_REGISTER_KERNEL(slice, kCUDA, FP16, Slice<__half>);
LOOM_REGISTER_KERNEL(slice_grad, kCUDA, FP16, SliceGrad<__half>);
LOOM_REGISTER_KERNEL(gather, kCUDA, FP16, (Gather<__half, false>));
LOOM_REGISTER_KERNEL(gather_grad, kCUDA, FP16, (Gather<__half, true>));

}  // namespace loom::ops::cuda
