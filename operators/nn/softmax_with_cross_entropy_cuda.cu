// CUDA kernels of softmax_with_cross_entropy(+grad) (operators/nn/softmax_with_cross_entropy.cc),
// fp32 and fp64.
#include "operators/cuda_util.cuh"

namespace loom::ops::cuda {
namespace {

// One block per row: max, sum of exp, softmax and loss. Bad hard labels set *bad.
template <typename T>
__global__ void SwceK(const T* x, const int64_t* l64, const int32_t* l32, const T* soft, T* sm,
                      T* loss, int64_t rows, int64_t d, int64_t ignore, int64_t* bad) {
  __shared__ T red[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    T* sr = sm + r * d;
    T mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) mx = max(mx, xr[j]);
    red[threadIdx.x] = mx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) red[threadIdx.x] = max(red[threadIdx.x], red[threadIdx.x + s]);
      __syncthreads();
    }
    mx = red[0];
    __syncthreads();
    T sum = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) sum += exp(xr[j] - mx);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
      __syncthreads();
    }
    T log_sum = log(red[0]);
    __syncthreads();
    T acc = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      T logp = xr[j] - mx - log_sum;
      sr[j] = exp(logp);
      if (soft) acc -= soft[r * d + j] * logp;
    }
    if (soft) {
      red[threadIdx.x] = acc;
      __syncthreads();
      for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
      }
      if (threadIdx.x == 0) loss[r] = red[0];
      __syncthreads();
    } else if (threadIdx.x == 0) {
      int64_t l = l64 ? l64[r] : l32[r];
      if (l == ignore) {
        loss[r] = 0;
      } else if (l < 0 || l >= d) {
        *bad = l;
        loss[r] = 0;
      } else {
        loss[r] = -(xr[l] - mx - log_sum);
      }
    }
  }
}

template <typename T>
Status Swce(const KernelContext& ctx) {
  const Tensor& logits = ctx.Input("Logits");
  const Tensor& label = ctx.Input("Label");
  int64_t d = logits.dims()[logits.dims().size() - 1];
  int64_t rows = d ? logits.numel() / d : 0;
  bool soft = ctx.Attr<bool>("soft_label");
  Tensor flag(proto::INT64, DDim{1});
  int64_t* bad = flag.mutable_data<int64_t>(ctx.place());
  const int64_t kNone = INT64_MIN;
  cudaMemcpyAsync(bad, &kNone, sizeof(kNone), cudaMemcpyHostToDevice, Stream(ctx));
  SwceK<T><<<RowBlocks(rows), kThreads, 0, Stream(ctx)>>>(
      logits.data<T>(), !soft && label.dtype() == proto::INT64 ? label.data<int64_t>() : nullptr,
      !soft && label.dtype() == proto::INT32 ? label.data<int32_t>() : nullptr,
      soft ? label.data<T>() : nullptr, ctx.Output("Softmax")->mutable_data<T>(ctx.place()),
      ctx.Output("Loss")->mutable_data<T>(ctx.place()), rows, d, ctx.Attr<int>("ignore_index"),
      bad);
  int64_t host = kNone;
  cudaMemcpyAsync(&host, bad, sizeof(host), cudaMemcpyDeviceToHost, Stream(ctx));
  cudaStreamSynchronize(Stream(ctx));
  if (host != kNone) return ctx.Error("label ", host, " is out of range [0, ", d, ")");
  return LaunchStatus(ctx);
}

// Hard labels: Logits@GRAD = (Softmax - onehot(label)) * Loss@GRAD, zero for ignored rows.
template <typename T>
__global__ void SwceHardGradK(const T* sm, const int64_t* l64, const int32_t* l32, const T* dloss,
                              T* o, int64_t rows, int64_t d, int64_t ignore) {
  LOOM_GRID_STRIDE(i, rows * d) {
    int64_t r = i / d, j = i % d;
    int64_t l = l64 ? l64[r] : l32[r];
    o[i] = l == ignore ? T(0) : (sm[i] - (j == l ? T(1) : T(0))) * dloss[r];
  }
}

// Soft labels: Logits@GRAD = (Softmax * sum(label) - label) * Loss@GRAD, one block per row
// (exact also when a row of labels does not sum to one, as on the CPU).
template <typename T>
__global__ void SwceSoftGradK(const T* sm, const T* soft, const T* dloss, T* o, int64_t rows,
                              int64_t d) {
  __shared__ T red[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* lr = soft + r * d;
    T acc = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) acc += lr[j];
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
      __syncthreads();
    }
    T lsum = red[0], g = dloss[r];
    __syncthreads();
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      o[r * d + j] = (sm[r * d + j] * lsum - lr[j]) * g;
  }
}

template <typename T>
Status SwceGrad(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("Logits@GRAD");
  if (!dx) return Status::OK();
  const Tensor& sm = ctx.Input("Softmax");
  const Tensor& label = ctx.Input("Label");
  int64_t d = sm.dims()[sm.dims().size() - 1];
  int64_t rows = d ? sm.numel() / d : 0;
  const T* dloss = ctx.Input("Loss@GRAD").data<T>();
  T* o = dx->mutable_data<T>(ctx.place());
  if (ctx.Attr<bool>("soft_label")) {
    SwceSoftGradK<T><<<RowBlocks(rows), kThreads, 0, Stream(ctx)>>>(sm.data<T>(), label.data<T>(),
                                                                    dloss, o, rows, d);
  } else {
    bool i64 = label.dtype() == proto::INT64;
    SwceHardGradK<T><<<Blocks(rows * d), kThreads, 0, Stream(ctx)>>>(
        sm.data<T>(), i64 ? label.data<int64_t>() : nullptr, i64 ? nullptr : label.data<int32_t>(),
        dloss, o, rows, d, ctx.Attr<int>("ignore_index"));
  }
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(softmax_with_cross_entropy, kCUDA, FP32, Swce<float>);
LOOM_REGISTER_KERNEL(softmax_with_cross_entropy, kCUDA, FP64, Swce<double>);
LOOM_REGISTER_KERNEL(softmax_with_cross_entropy_grad, kCUDA, FP32, SwceGrad<float>);
LOOM_REGISTER_KERNEL(softmax_with_cross_entropy_grad, kCUDA, FP64, SwceGrad<double>);

}  // namespace loom::ops::cuda
