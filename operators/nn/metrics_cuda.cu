// CUDA kernels of top_k (fp32, fp64, int64), top_k_grad (fp32, fp64), arg_max (fp32, fp64,
// int64) and accuracy (int64 Indices; int64 or int32 Label), as operators/nn/loss_metrics.cc.
// top_k and arg_max give each row (each (pre, post) pair for arg_max) one thread that scans the
// searched axis: top_k picks the k largest by repeated selection in the CPU kernel's order
// (larger value first, lower index first on ties); arg_max returns the first largest index.
// top_k_grad zeroes X@GRAD and adds Out@GRAD at the chosen indices (atomicAdd). accuracy counts the
// rows whose label is among their k indices in one block.
#include "operators/cuda_util.cuh"

namespace loom::ops::cuda {
namespace {

// (a, ia) comes before (b, ib) in top_k's order.
template <typename T>
__device__ inline bool Before(T a, int64_t ia, T b, int64_t ib) {
  return a > b || (a == b && ia < ib);
}

template <typename T>
__global__ void TopKK(const T* x, T* out, int64_t* idx, int64_t rows, int64_t d, int k) {
  LOOM_GRID_STRIDE(r, rows) {
    const T* xr = x + r * d;
    int64_t prev = -1;
    for (int j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t c = 0; c < d; ++c) {
        // Candidates come strictly after the previous pick in the order.
        if (prev >= 0 && !Before(xr[prev], prev, xr[c], c)) continue;
        if (best < 0 || Before(xr[c], c, xr[best], best)) best = c;
      }
      out[r * k + j] = xr[best];
      idx[r * k + j] = best;
      prev = best;
    }
  }
}

template <typename T>
__global__ void TopKGradK(const T* g, const int64_t* idx, T* dx, int64_t rows, int64_t d,
                          int64_t k) {
  LOOM_GRID_STRIDE(i, rows * k) atomicAdd(dx + (i / k) * d + idx[i], g[i]);
}

template <typename T>
Status TopK(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int64_t d = x.dims()[x.dims().size() - 1], rows = d ? x.numel() / d : 0;
  const int k = ctx.Attr<int>("k");
  T* out = ctx.Output("Out")->mutable_data<T>(ctx.place());
  int64_t* idx = ctx.Output("Indices")->mutable_data<int64_t>(ctx.place());
  if (rows == 0 || k == 0) return Status::OK();
  TopKK<T><<<Blocks(rows), kThreads, 0, Stream(ctx)>>>(x.data<T>(), out, idx, rows, d, k);
  return LaunchStatus(ctx);
}

// One thread per (row, j); atomicAdd so that repeated indices in a row accumulate as on the CPU.
template <typename T>
Status TopKGrad(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& x = ctx.Input("X");
  const Tensor& idx = ctx.Input("Indices");
  const int64_t d = x.dims()[x.dims().size() - 1], rows = d ? x.numel() / d : 0;
  const int64_t k = idx.dims()[idx.dims().size() - 1];
  T* o = dx->mutable_data<T>(ctx.place());
  cudaMemsetAsync(o, 0, dx->nbytes(), Stream(ctx));
  if (rows * k > 0)
    TopKGradK<T><<<Blocks(rows * k), kThreads, 0, Stream(ctx)>>>(
        ctx.Input("Out@GRAD").data<T>(), idx.data<int64_t>(), o, rows, d, k);
  return LaunchStatus(ctx);
}

template <typename T>
__global__ void ArgMaxK(const T* x, int64_t* o, int64_t pre, int64_t n, int64_t post) {
  LOOM_GRID_STRIDE(t, pre * post) {
    const int64_t i = t / post, k = t % post;
    const T* base = x + i * n * post + k;
    int64_t best = 0;
    for (int64_t j = 1; j < n; ++j)
      if (base[j * post] > base[best * post]) best = j;
    o[t] = best;
  }
}

template <typename T>
Status ArgMax(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int axis = ctx.Attr<int>("axis");
  const int a = axis < 0 ? axis + x.dims().size() : axis;
  const int64_t pre = x.dims().product(0, a), n = x.dims()[a],
                post = x.dims().product(a + 1, x.dims().size());
  int64_t* o = ctx.Output("Out")->mutable_data<int64_t>(ctx.place());
  if (pre * post == 0) return Status::OK();
  ArgMaxK<T><<<Blocks(pre * post), kThreads, 0, Stream(ctx)>>>(x.data<T>(), o, pre, n, post);
  return LaunchStatus(ctx);
}

__global__ void AccuracyK(const int64_t* idx, const int64_t* l64, const int32_t* l32, int64_t n,
                          int64_t k, float* acc, int32_t* correct, int32_t* total) {
  __shared__ int32_t buf[kThreads];
  int32_t c = 0;
  for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {
    const int64_t l = l64 ? l64[r] : static_cast<int64_t>(l32[r]);
    for (int64_t j = 0; j < k; ++j)
      if (idx[r * k + j] == l) {
        ++c;
        break;
      }
  }
  c = BlockSum<int32_t>(c, buf);
  if (threadIdx.x == 0) {
    *acc = n ? static_cast<float>(c) / static_cast<float>(n) : 0.0f;
    *correct = c;
    *total = static_cast<int32_t>(n);
  }
}

Status Accuracy(const KernelContext& ctx) {
  const Tensor& idx = ctx.Input("Indices");
  const Tensor& label = ctx.Input("Label");
  const int64_t n = idx.dims()[0], k = idx.dims()[1];
  const bool is64 = label.dtype() == proto::INT64;
  AccuracyK<<<1, kThreads, 0, Stream(ctx)>>>(
      idx.data<int64_t>(), is64 ? label.data<int64_t>() : nullptr,
      is64 ? nullptr : label.data<int32_t>(), n, k,
      ctx.Output("Accuracy")->mutable_data<float>(ctx.place()),
      ctx.Output("Correct")->mutable_data<int32_t>(ctx.place()),
      ctx.Output("Total")->mutable_data<int32_t>(ctx.place()));
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(top_k, kCUDA, FP32, TopK<float>);
LOOM_REGISTER_KERNEL(top_k, kCUDA, FP64, TopK<double>);
LOOM_REGISTER_KERNEL(top_k, kCUDA, INT64, TopK<int64_t>);
LOOM_REGISTER_KERNEL(top_k_grad, kCUDA, FP32, TopKGrad<float>);
LOOM_REGISTER_KERNEL(top_k_grad, kCUDA, FP64, TopKGrad<double>);
LOOM_REGISTER_KERNEL(arg_max, kCUDA, FP32, ArgMax<float>);
LOOM_REGISTER_KERNEL(arg_max, kCUDA, FP64, ArgMax<double>);
LOOM_REGISTER_KERNEL(arg_max, kCUDA, INT64, ArgMax<int64_t>);
LOOM_REGISTER_KERNEL(accuracy, kCUDA, INT64, Accuracy);

}  // namespace loom::ops::cuda
