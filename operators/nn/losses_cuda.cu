// CUDA kernels of cross_entropy(+grad) and square_error_cost(+grad)
// (operators/nn/loss_metrics.cc), fp32 and fp64, with the CPU semantics: hard labels int64 or
// int32 with ignore_index, or soft labels; an out-of-range hard label is an error (reported
// after the kernel, which flags it).
#include <cmath>

#include "operators/cuda_util.cuh"

namespace loom::ops::cuda {
namespace {

constexpr int64_t kNoBadLabel = DeviceFlag::kUnset;

__device__ inline int64_t LabelOf(const int64_t* l64, const int32_t* l32, int64_t r) {
  return l64 ? l64[r] : static_cast<int64_t>(l32[r]);
}

// Hard labels: one thread per row.
template <typename T>
__global__ void CrossEntropyHardK(const T* p, const int64_t* l64, const int32_t* l32, T* y,
                                  int64_t rows, int64_t d, int64_t ignore, int64_t* bad) {
  LOOM_GRID_STRIDE(r, rows) {
    int64_t l = LabelOf(l64, l32, r);
    if (l == ignore) {
      y[r] = 0;
    } else if (l < 0 || l >= d) {
      *bad = l;
      y[r] = 0;
    } else {
      y[r] = -log(p[r * d + l]);
    }
  }
}

// Soft labels: one block per row.
template <typename T>
__global__ void CrossEntropySoftK(const T* p, const T* label, T* y, int64_t rows, int64_t d) {
  __shared__ T buf[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T acc = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      acc -= label[r * d + j] * log(p[r * d + j]);
    acc = BlockSum(acc, buf);
    if (threadIdx.x == 0) y[r] = acc;
  }
}

template <typename T>
Status CrossEntropy(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& label = ctx.Input("Label");
  const int64_t d = x.dims()[x.dims().size() - 1], rows = d ? x.numel() / d : 0;
  T* y = ctx.Output("Y")->mutable_data<T>(ctx.place());
  if (rows == 0) return Status::OK();
  if (ctx.Attr<bool>("soft_label")) {
    CrossEntropySoftK<T>
        <<<RowBlocks(rows), kThreads, 0, Stream(ctx)>>>(x.data<T>(), label.data<T>(), y, rows, d);
    return LaunchStatus(ctx);
  }
  const bool i64 = label.dtype() == proto::INT64;
  DeviceFlag bad(ctx);
  CrossEntropyHardK<T><<<Blocks(rows), kThreads, 0, Stream(ctx)>>>(
      x.data<T>(), i64 ? label.data<int64_t>() : nullptr, i64 ? nullptr : label.data<int32_t>(), y,
      rows, d, ctx.Attr<int>("ignore_index"), bad.ptr());
  LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
  int64_t l = bad.Read();
  if (l != kNoBadLabel) return ctx.Error("label ", l, " is out of range [0, ", d, ")");
  return Status::OK();
}

// X@GRAD: soft -g[r] * label / p; hard -g[r] / p at the label (0 elsewhere and on ignored rows).
template <typename T>
__global__ void CrossEntropyGradK(const T* p, const T* soft, const int64_t* l64, const int32_t* l32,
                                  const T* g, T* o, int64_t rows, int64_t d, int64_t ignore,
                                  int64_t* bad) {
  LOOM_GRID_STRIDE(i, rows * d) {
    const int64_t r = i / d, j = i % d;
    if (soft) {
      o[i] = -g[r] * soft[i] / p[i];
      continue;
    }
    const int64_t l = LabelOf(l64, l32, r);
    if (l != ignore && (l < 0 || l >= d)) {
      *bad = l;
      o[i] = 0;
    } else {
      o[i] = l != ignore && j == l ? -g[r] / p[i] : T(0);
    }
  }
}

template <typename T>
Status CrossEntropyGrad(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& x = ctx.Input("X");
  const Tensor& label = ctx.Input("Label");
  const int64_t d = x.dims()[x.dims().size() - 1], rows = d ? x.numel() / d : 0;
  T* o = dx->mutable_data<T>(ctx.place());
  if (x.numel() == 0) return Status::OK();
  const bool soft = ctx.Attr<bool>("soft_label");
  const bool i64 = !soft && label.dtype() == proto::INT64;
  const bool i32 = !soft && !i64;
  DeviceFlag bad(ctx);
  CrossEntropyGradK<T><<<Blocks(rows * d), kThreads, 0, Stream(ctx)>>>(
      x.data<T>(), soft ? label.data<T>() : nullptr, i64 ? label.data<int64_t>() : nullptr,
      i32 ? label.data<int32_t>() : nullptr, ctx.Input("Y@GRAD").data<T>(), o, rows, d,
      ctx.Attr<int>("ignore_index"), bad.ptr());
  LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
  int64_t l = bad.Read();
  if (l != kNoBadLabel) return ctx.Error("label ", l, " is out of range [0, ", d, ")");
  return Status::OK();
}

template <typename T>
__global__ void SquareErrorK(const T* a, const T* b, T* o, int64_t n) {
  LOOM_GRID_STRIDE(i, n) o[i] = (a[i] - b[i]) * (a[i] - b[i]);
}

template <typename T>
Status SquareError(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  T* o = ctx.Output("Out")->mutable_data<T>(ctx.place());
  if (x.numel() == 0) return Status::OK();
  SquareErrorK<T><<<Blocks(x.numel()), kThreads, 0, Stream(ctx)>>>(
      x.data<T>(), ctx.Input("Y").data<T>(), o, x.numel());
  return LaunchStatus(ctx);
}

template <typename T>
__global__ void SquareErrorGradK(const T* a, const T* b, const T* g, T* ox, T* oy, int64_t n) {
  LOOM_GRID_STRIDE(i, n) {
    T v = T(2) * (a[i] - b[i]) * g[i];
    if (ox) ox[i] = v;
    if (oy) oy[i] = -v;
  }
}

template <typename T>
Status SquareErrorGrad(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  Tensor* dy = ctx.OutputOrNull("Y@GRAD");
  T* ox = dx ? dx->mutable_data<T>(ctx.place()) : nullptr;
  T* oy = dy ? dy->mutable_data<T>(ctx.place()) : nullptr;
  if (x.numel() == 0 || (!ox && !oy)) return Status::OK();
  SquareErrorGradK<T><<<Blocks(x.numel()), kThreads, 0, Stream(ctx)>>>(
      x.data<T>(), ctx.Input("Y").data<T>(), ctx.Input("Out@GRAD").data<T>(), ox, oy, x.numel());
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(cross_entropy, kCUDA, FP32, CrossEntropy<float>);
LOOM_REGISTER_KERNEL(cross_entropy, kCUDA, FP64, CrossEntropy<double>);
LOOM_REGISTER_KERNEL(cross_entropy_grad, kCUDA, FP32, CrossEntropyGrad<float>);
LOOM_REGISTER_KERNEL(cross_entropy_grad, kCUDA, FP64, CrossEntropyGrad<double>);
LOOM_REGISTER_KERNEL(square_error_cost, kCUDA, FP32, SquareError<float>);
LOOM_REGISTER_KERNEL(square_error_cost, kCUDA, FP64, SquareError<double>);
LOOM_REGISTER_KERNEL(square_error_cost_grad, kCUDA, FP32, SquareErrorGrad<float>);
LOOM_REGISTER_KERNEL(square_error_cost_grad, kCUDA, FP64, SquareErrorGrad<double>);

}  // namespace loom::ops::cuda
