// CUDA kernels of mul (cuBLAS), relu(+grad), softmax_with_cross_entropy(+grad), sgd and the
// random initializers. mul(+grad), relu(+grad) and sgd also run in fp16 (arithmetic in float).
#include <random>

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

template <typename T>
__global__ void ReluK(const T* x, T* o, int64_t n) {
  using A = Acc<T>;
  LOOM_GRID_STRIDE(i, n) o[i] = static_cast<A>(x[i]) > A(0) ? x[i] : static_cast<T>(A(0));
}

template <typename T>
__global__ void ReluGradK(const T* y, const T* g, T* o, int64_t n) {
  using A = Acc<T>;
  LOOM_GRID_STRIDE(i, n) o[i] = static_cast<A>(y[i]) > A(0) ? g[i] : static_cast<T>(A(0));
}

template <typename T>
Status Relu(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  T* o = MutableDataOf<T>(ctx.Output("Out"), ctx.place());
  if (x.numel() == 0) return Status::OK();
  ReluK<T><<<Blocks(x.numel()), kThreads, 0, Stream(ctx)>>>(DataOf<T>(x), o, x.numel());
  return LaunchStatus(ctx);
}

template <typename T>
Status ReluGrad(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& y = ctx.Input("Out");
  T* o = MutableDataOf<T>(dx, ctx.place());
  if (y.numel() == 0) return Status::OK();
  ReluGradK<T><<<Blocks(y.numel()), kThreads, 0, Stream(ctx)>>>(
      DataOf<T>(y), DataOf<T>(ctx.Input("Out@GRAD")), o, y.numel());
  return LaunchStatus(ctx);
}

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

template <typename T>
__global__ void SgdK(const T* p, const T* g, const T* lr, T* o, int64_t n) {
  using A = Acc<T>;
  const A rate = static_cast<A>(lr[0]);
  LOOM_GRID_STRIDE(i, n) {
    o[i] = static_cast<T>(static_cast<A>(p[i]) - rate * static_cast<A>(g[i]));
  }
}

template <typename T>
Status Sgd(const KernelContext& ctx) {
  const Tensor& p = ctx.Input("Param");
  T* o = MutableDataOf<T>(ctx.Output("ParamOut"), ctx.place());
  if (p.numel() == 0) return Status::OK();
  SgdK<T><<<Blocks(p.numel()), kThreads, 0, Stream(ctx)>>>(
      DataOf<T>(p), DataOf<T>(ctx.Input("Grad")), DataOf<T>(ctx.Input("LearningRate")), o,
      p.numel());
  return LaunchStatus(ctx);
}

// Counter-based generator: element i of stream `seed` is a hash of (seed, i), so results do
// not depend on the launch geometry.
__device__ inline uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__device__ inline double Unit(uint64_t seed, uint64_t i) {
  return (Mix(seed ^ Mix(i)) >> 11) * (1.0 / 9007199254740992.0);
}

template <typename T>
__global__ void UniformK(T* o, int64_t n, uint64_t seed, double lo, double hi) {
  LOOM_GRID_STRIDE(i, n) o[i] = static_cast<T>(lo + (hi - lo) * Unit(seed, i));
}

template <typename T>
__global__ void GaussianK(T* o, int64_t n, uint64_t seed, double mean, double std) {
  LOOM_GRID_STRIDE(i, n) {
    double u1 = Unit(seed, 2 * i) + 1e-300, u2 = Unit(seed, 2 * i + 1);
    o[i] = static_cast<T>(mean + std * sqrt(-2.0 * log(u1)) * cospi(2.0 * u2));
  }
}

uint64_t SeedOf(const KernelContext& ctx) {
  int seed = ctx.Attr<int>("seed");
  return seed != 0 ? static_cast<uint64_t>(seed) : std::random_device{}();
}

template <typename T>
Status Uniform(const KernelContext& ctx) {
  Tensor* out = ctx.Output("Out");
  UniformK<T><<<Blocks(out->numel()), kThreads, 0, Stream(ctx)>>>(
      out->mutable_data<T>(ctx.place()), out->numel(), SeedOf(ctx), ctx.Attr<float>("min"),
      ctx.Attr<float>("max"));
  return LaunchStatus(ctx);
}

template <typename T>
Status Gaussian(const KernelContext& ctx) {
  Tensor* out = ctx.Output("Out");
  GaussianK<T><<<Blocks(out->numel()), kThreads, 0, Stream(ctx)>>>(
      out->mutable_data<T>(ctx.place()), out->numel(), SeedOf(ctx), ctx.Attr<float>("mean"),
      ctx.Attr<float>("std"));
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(mul, kCUDA, FP32, Mul<float>);
LOOM_REGISTER_KERNEL(mul, kCUDA, FP64, Mul<double>);
LOOM_REGISTER_KERNEL(mul_grad, kCUDA, FP32, MulGrad<float>);
LOOM_REGISTER_KERNEL(mul_grad, kCUDA, FP64, MulGrad<double>);
LOOM_REGISTER_KERNEL(mul, kCUDA, FP16, Mul<__half>);
LOOM_REGISTER_KERNEL(mul_grad, kCUDA, FP16, MulGrad<__half>);
LOOM_REGISTER_KERNEL(relu, kCUDA, FP32, Relu<float>);
LOOM_REGISTER_KERNEL(relu, kCUDA, FP64, Relu<double>);
LOOM_REGISTER_KERNEL(relu, kCUDA, FP16, Relu<__half>);
LOOM_REGISTER_KERNEL(relu_grad, kCUDA, FP32, ReluGrad<float>);
LOOM_REGISTER_KERNEL(relu_grad, kCUDA, FP64, ReluGrad<double>);
LOOM_REGISTER_KERNEL(relu_grad, kCUDA, FP16, ReluGrad<__half>);
LOOM_REGISTER_KERNEL(softmax_with_cross_entropy, kCUDA, FP32, Swce<float>);
LOOM_REGISTER_KERNEL(softmax_with_cross_entropy, kCUDA, FP64, Swce<double>);
LOOM_REGISTER_KERNEL(softmax_with_cross_entropy_grad, kCUDA, FP32, SwceGrad<float>);
LOOM_REGISTER_KERNEL(softmax_with_cross_entropy_grad, kCUDA, FP64, SwceGrad<double>);
LOOM_REGISTER_KERNEL(sgd, kCUDA, FP32, Sgd<float>);
LOOM_REGISTER_KERNEL(sgd, kCUDA, FP64, Sgd<double>);
LOOM_REGISTER_KERNEL(sgd, kCUDA, FP16, Sgd<__half>);
LOOM_REGISTER_KERNEL(uniform_random, kCUDA, FP32, Uniform<float>);
LOOM_REGISTER_KERNEL(uniform_random, kCUDA, FP64, Uniform<double>);
LOOM_REGISTER_KERNEL(gaussian_random, kCUDA, FP32, Gaussian<float>);
LOOM_REGISTER_KERNEL(gaussian_random, kCUDA, FP64, Gaussian<double>);

}  // namespace loom::ops::cuda
