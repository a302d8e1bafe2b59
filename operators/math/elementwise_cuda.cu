// CUDA kernels of scale, fill_constant, fill_zeros_like, sum, mean(+grad) and the elementwise
// binaries add, sub, mul, div, max, min, pow (+grad) with Fluid's broadcast rule
// (operators/math/elementwise.h). All run in fp32, fp64 and fp16 (fp16 computes in float; the
// CPU has no fp16 kernels); fill_constant also in int32 / int64, the binaries' forward also in
// int32 / int64 except pow.
#include "operators/cuda_util.cuh"
#include "operators/math/elementwise.h"
#include "operators/math/fill_value.h"

namespace loom::ops::cuda {
namespace {

// T is the element type, A = Acc<T> the arithmetic one (float for fp16).
template <typename T>
__global__ void ScaleK(const T* x, T* o, int64_t n, Acc<T> s, Acc<T> b) {
  LOOM_GRID_STRIDE(i, n) o[i] = static_cast<T>(s * static_cast<Acc<T>>(x[i]) + b);
}

// A SelectedRows X (a sparse gradient) scales its value into a SelectedRows Out.
template <typename T>
Status Scale(const KernelContext& ctx) {
  float s = ctx.Attr<float>("scale"), b = ctx.Attr<float>("bias");
  if (const Tensor* st = ctx.InputOrNull("ScaleTensor")) {
    if (st->numel() != 1 || (st->dtype() != proto::FP32 && st->dtype() != proto::FP64))
      return ctx.Error("input 'ScaleTensor' must be one float32 or float64 element");
    Tensor host;
    cudaStreamSynchronize(Stream(ctx));  // its writer ran on the op's stream
    TensorCopy(*st, Place::CPU(), &host);
    s = host.dtype() == proto::FP32 ? host.data<float>()[0]
                                    : static_cast<float>(host.data<double>()[0]);
  }
  if (!ctx.Attr<bool>("bias_after_scale")) b *= s;
  const SelectedRows* sx = ctx.InputSelectedRows("X");
  SelectedRows sparse_out;
  if (sx) {
    sparse_out.rows = sx->rows;
    sparse_out.height = sx->height;
    sparse_out.value.Resize(sx->value.dims());
  }
  const Tensor& x = sx ? sx->value : ctx.Input("X");
  int64_t n = x.numel();
  T* o = MutableDataOf<T>(sx ? &sparse_out.value : ctx.Output("Out"), ctx.place());
  if (n > 0)
    ScaleK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(DataOf<T>(x), o, n, static_cast<Acc<T>>(s),
                                                       static_cast<Acc<T>>(b));
  if (sx) *ctx.OutputSelectedRows("Out") = std::move(sparse_out);
  return LaunchStatus(ctx);
}

template <typename T>
__global__ void FillK(T* o, int64_t n, T v) {
  LOOM_GRID_STRIDE(i, n) o[i] = v;
}

template <typename T>
Status FillConstant(const KernelContext& ctx) {
  Tensor* out = ctx.Output("Out");
  int64_t n = out->numel();
  auto value = ResolveFillValue(ctx.Attr<std::string>("str_value"), ctx.Attr<float>("value"),
                                static_cast<DataType>(ctx.Attr<int>("dtype")));
  if (!value.ok()) return ctx.Error(value.status().message());
  T* o = MutableDataOf<T>(out, ctx.place());
  if (n == 0) return Status::OK();
  T v;
  if constexpr (std::is_integral_v<T>) {
    v = static_cast<T>(value.value().integer);
  } else {
    v = static_cast<T>(static_cast<Acc<T>>(value.value().real));
  }
  FillK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(o, n, v);
  return LaunchStatus(ctx);
}

template <typename T>
Status FillZerosLike(const KernelContext& ctx) {
  Tensor* out = ctx.Output("Out");
  cudaMemsetAsync(MutableDataOf<T>(out, ctx.place()), 0, out->nbytes(), Stream(ctx));
  return LaunchStatus(ctx);
}

template <typename T>
__global__ void AccumulateK(T* o, const T* a, int64_t n, bool first) {
  using A = Acc<T>;
  LOOM_GRID_STRIDE(i, n) {
    o[i] = first ? a[i] : static_cast<T>(static_cast<A>(o[i]) + static_cast<A>(a[i]));
  }
}

template <typename T>
__global__ void Add2K(T* o, const T* a, const T* b, int64_t n) {
  using A = Acc<T>;
  LOOM_GRID_STRIDE(i, n) o[i] = static_cast<T>(static_cast<A>(a[i]) + static_cast<A>(b[i]));
}

template <typename T>
Status Sum(const KernelContext& ctx) {
  int k = ctx.InputSize("X");
  Tensor* out = ctx.Output("Out");
  int64_t n = out->numel();
  std::vector<const T*> ins;
  for (int i = 0; i < k; ++i) ins.push_back(DataOf<T>(ctx.Input("X", i)));
  T* o = MutableDataOf<T>(out, ctx.place());
  // Out may alias an input: fold pairwise so no input is overwritten before it is read, then
  // accumulate the rest.
  if (k == 1) {
    if (o != ins[0]) AccumulateK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(o, ins[0], n, true);
    return LaunchStatus(ctx);
  }
  int alias = -1;
  for (int i = 0; i < k; ++i)
    if (ins[i] == o) alias = i;
  int a = alias >= 0 ? alias : 0, b = a == 0 ? 1 : 0;
  Add2K<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(o, ins[a], ins[b], n);
  for (int i = 0; i < k; ++i)
    if (i != a && i != b)
      AccumulateK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(o, ins[i], n, false);
  return LaunchStatus(ctx);
}

template <typename T>
__global__ void MeanK(const T* x, int64_t n, T* out) {
  __shared__ double part[kThreads];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    acc += static_cast<double>(static_cast<Acc<T>>(x[i]));
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = static_cast<T>(static_cast<Acc<T>>(n ? part[0] / n : 0.0));
}

template <typename T>
Status Mean(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  MeanK<T><<<1, kThreads, 0, Stream(ctx)>>>(DataOf<T>(x), x.numel(),
                                            MutableDataOf<T>(ctx.Output("Out"), ctx.place()));
  return LaunchStatus(ctx);
}

template <typename T>
__global__ void MeanGradK(const T* g, T* o, int64_t n) {
  using A = Acc<T>;
  LOOM_GRID_STRIDE(i, n) o[i] = static_cast<T>(static_cast<A>(g[0]) / static_cast<A>(n));
}

template <typename T>
Status MeanGrad(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  int64_t n = dx->numel();
  T* o = MutableDataOf<T>(dx, ctx.place());
  if (n == 0) return Status::OK();
  MeanGradK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(DataOf<T>(ctx.Input("Out@GRAD")), o, n);
  return LaunchStatus(ctx);
}

// Binary functors on the arithmetic type A: F(x, y) and the partials given x, y and
// out = F(x, y), as in operators/math/elementwise.cc (max ties send the gradient to Y, min
// ties to X).
struct AddF {
  template <typename A>
  __device__ static A F(A x, A y) {
    return x + y;
  }
  template <typename A>
  __device__ static A Dx(A, A, A) {
    return A(1);
  }
  template <typename A>
  __device__ static A Dy(A, A, A) {
    return A(1);
  }
};
struct SubF {
  template <typename A>
  __device__ static A F(A x, A y) {
    return x - y;
  }
  template <typename A>
  __device__ static A Dx(A, A, A) {
    return A(1);
  }
  template <typename A>
  __device__ static A Dy(A, A, A) {
    return A(-1);
  }
};
struct MulF {
  template <typename A>
  __device__ static A F(A x, A y) {
    return x * y;
  }
  template <typename A>
  __device__ static A Dx(A, A y, A) {
    return y;
  }
  template <typename A>
  __device__ static A Dy(A x, A, A) {
    return x;
  }
};
struct DivF {
  template <typename A>
  __device__ static A F(A x, A y) {
    if constexpr (std::is_integral_v<A>) {
      // x / -1 is -x, wrapping for the most negative value (as the CPU kernel).
      using U = std::make_unsigned_t<A>;
      if (y == A(-1)) return static_cast<A>(U(0) - static_cast<U>(x));
    }
    return x / y;
  }
  template <typename A>
  __device__ static A Dx(A, A y, A) {
    return A(1) / y;
  }
  template <typename A>
  __device__ static A Dy(A, A y, A out) {
    return -out / y;
  }
};
struct MaxF {
  template <typename A>
  __device__ static A F(A x, A y) {
    return x > y ? x : y;
  }
  template <typename A>
  __device__ static A Dx(A x, A y, A) {
    return x > y ? A(1) : A(0);
  }
  template <typename A>
  __device__ static A Dy(A x, A y, A) {
    return x > y ? A(0) : A(1);
  }
};
struct MinF {
  template <typename A>
  __device__ static A F(A x, A y) {
    return x < y ? x : y;
  }
  template <typename A>
  __device__ static A Dx(A x, A y, A) {
    return x <= y ? A(1) : A(0);
  }
  template <typename A>
  __device__ static A Dy(A x, A y, A) {
    return x <= y ? A(0) : A(1);
  }
};
struct PowF {
  template <typename A>
  __device__ static A F(A x, A y) {
    return pow(x, y);
  }
  template <typename A>
  __device__ static A Dx(A x, A y, A) {
    return y * pow(x, y - A(1));
  }
  template <typename A>
  __device__ static A Dy(A x, A, A out) {
    return out * log(x);
  }
};

// Out[i] = F(X[i], Y[(i / post) % n]) (same shapes: n = total, post = 1).
template <typename Fn, typename T>
__global__ void BinaryK(const T* x, const T* y, T* o, int64_t total, int64_t n, int64_t post) {
  using A = Acc<T>;
  LOOM_GRID_STRIDE(i, total) {
    o[i] =
        static_cast<T>(Fn::template F<A>(static_cast<A>(x[i]), static_cast<A>(y[(i / post) % n])));
  }
}

// The first index of a zero in y (stays at its initial all-ones value when there is none).
template <typename T>
__global__ void FirstZeroK(const T* y, int64_t n, unsigned long long* first) {
  LOOM_GRID_STRIDE(i, n) {
    if (y[i] == T(0)) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

// Integer division by zero is an error, as on the CPU (a GPU does not trap: it would write
// garbage). The divisor is scanned on the device first; the stream waits for the answer.
template <typename Fn, typename T>
Status CheckIntegerDivisor(const KernelContext& ctx, const Tensor& y) {
  if constexpr (std::is_integral_v<T> && std::is_same_v<Fn, DivF>) {
    const int64_t n = y.numel();
    if (n == 0) return Status::OK();
    Tensor flag(proto::INT64, DDim{1});
    auto* first = static_cast<unsigned long long*>(flag.mutable_data(ctx.place(), proto::INT64));
    cudaStream_t s = Stream(ctx);
    cudaMemsetAsync(first, 0xff, sizeof(unsigned long long), s);
    FirstZeroK<T><<<Blocks(n), kThreads, 0, s>>>(DataOf<T>(y), n, first);
    unsigned long long host = 0;
    cudaMemcpyAsync(&host, first, sizeof(host), cudaMemcpyDeviceToHost, s);
    if (cudaStreamSynchronize(s) != cudaSuccess) return LaunchStatus(ctx);
    if (host != ~0ull) return ctx.Error("integer division by zero: Y's element ", host, " is 0");
  }
  return Status::OK();
}

template <typename Fn, typename T>
Status Binary(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  auto plan = PlanBroadcast(x.dims(), y.dims(), ctx.Attr<int>("axis"));
  if (!plan.ok()) return ctx.Error(plan.status().message());
  LOOM_RETURN_IF_ERROR((CheckIntegerDivisor<Fn, T>(ctx, y)));
  const int64_t total = x.numel();
  const BroadcastPlan& p = plan.value();
  T* o = MutableDataOf<T>(ctx.Output("Out"), ctx.place());
  if (total == 0) return Status::OK();
  BinaryK<Fn, T><<<Blocks(total), kThreads, 0, Stream(ctx)>>>(
      DataOf<T>(x), DataOf<T>(y), o, total, p.same_shape ? total : p.n, p.same_shape ? 1 : p.post);
  return LaunchStatus(ctx);
}

// X@GRAD element-wise; with same shapes Y@GRAD too.
template <typename Fn, typename T>
__global__ void BinaryGradK(const T* x, const T* y, const T* out, const T* g, T* dx, T* dy,
                            int64_t total, int64_t n, int64_t post) {
  using A = Acc<T>;
  LOOM_GRID_STRIDE(i, total) {
    A xv = static_cast<A>(x[i]), yv = static_cast<A>(y[(i / post) % n]);
    A ov = out ? static_cast<A>(out[i]) : Fn::template F<A>(xv, yv), gv = static_cast<A>(g[i]);
    if (dx) dx[i] = static_cast<T>(gv * Fn::template Dx<A>(xv, yv, ov));
    if (dy) dy[i] = static_cast<T>(gv * Fn::template Dy<A>(xv, yv, ov));
  }
}

// Broadcast Y@GRAD[j] = Σ over (i, k) of g * Dy at [i, j, k]: one block per j.
template <typename Fn, typename T>
__global__ void ReduceDyK(const T* x, const T* y, const T* out, const T* g, T* dy, int64_t pre,
                          int64_t n, int64_t post) {
  using A = Acc<T>;
  __shared__ A buf[kThreads];
  for (int64_t j = blockIdx.x; j < n; j += gridDim.x) {
    const A yv = static_cast<A>(y[j]);
    A acc = 0;
    for (int64_t t = threadIdx.x; t < pre * post; t += blockDim.x) {
      int64_t e = ((t / post) * n + j) * post + t % post;
      A xv = static_cast<A>(x[e]);
      A ov = out ? static_cast<A>(out[e]) : Fn::template F<A>(xv, yv);
      acc += static_cast<A>(g[e]) * Fn::template Dy<A>(xv, yv, ov);
    }
    acc = BlockSum(acc, buf);
    if (threadIdx.x == 0) dy[j] = static_cast<T>(acc);
  }
}

template <typename Fn, typename T>
Status BinaryGrad(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  auto plan = PlanBroadcast(x.dims(), y.dims(), ctx.Attr<int>("axis"));
  if (!plan.ok()) return ctx.Error(plan.status().message());
  const BroadcastPlan& p = plan.value();
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  Tensor* dyt = ctx.OutputOrNull("Y@GRAD");
  T* dx = dxt ? MutableDataOf<T>(dxt, ctx.place()) : nullptr;
  T* dy = dyt ? MutableDataOf<T>(dyt, ctx.place()) : nullptr;
  const int64_t total = x.numel();
  // Out is recomputed from X and Y where a grad op comes without it.
  const T* xv = DataOf<T>(x);
  const T* yv = DataOf<T>(y);
  const Tensor* out = ctx.InputOrNull("Out");
  const T* ov = out ? DataOf<T>(*out) : nullptr;
  const T* gv = DataOf<T>(ctx.Input("Out@GRAD"));
  cudaStream_t s = Stream(ctx);
  const int64_t n = p.same_shape ? total : p.n, post = p.same_shape ? 1 : p.post;
  if (total > 0 && (dx || (dy && p.same_shape)))
    BinaryGradK<Fn, T><<<Blocks(total), kThreads, 0, s>>>(
        xv, yv, ov, gv, dx, p.same_shape ? dy : nullptr, total, n, post);
  if (dy && !p.same_shape) {
    if (total == 0) {
      cudaMemsetAsync(dy, 0, dyt->nbytes(), s);
    } else {
      ReduceDyK<Fn, T><<<RowBlocks(p.n), kThreads, 0, s>>>(xv, yv, ov, gv, dy, p.pre, p.n, p.post);
    }
  }
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(scale, kCUDA, FP32, Scale<float>);
LOOM_REGISTER_KERNEL(scale, kCUDA, FP64, Scale<double>);
LOOM_REGISTER_KERNEL(scale, kCUDA, FP16, Scale<__half>);
LOOM_REGISTER_KERNEL(fill_constant, kCUDA, FP32, FillConstant<float>);
LOOM_REGISTER_KERNEL(fill_constant, kCUDA, FP64, FillConstant<double>);
LOOM_REGISTER_KERNEL(fill_constant, kCUDA, FP16, FillConstant<__half>);
LOOM_REGISTER_KERNEL(fill_constant, kCUDA, INT64, FillConstant<int64_t>);
LOOM_REGISTER_KERNEL(fill_constant, kCUDA, INT32, FillConstant<int32_t>);
LOOM_REGISTER_KERNEL(fill_zeros_like, kCUDA, FP32, FillZerosLike<float>);
LOOM_REGISTER_KERNEL(fill_zeros_like, kCUDA, FP64, FillZerosLike<double>);
LOOM_REGISTER_KERNEL(fill_zeros_like, kCUDA, FP16, FillZerosLike<__half>);
LOOM_REGISTER_KERNEL(sum, kCUDA, FP32, Sum<float>);
LOOM_REGISTER_KERNEL(sum, kCUDA, FP64, Sum<double>);
LOOM_REGISTER_KERNEL(sum, kCUDA, FP16, Sum<__half>);
LOOM_REGISTER_KERNEL(mean, kCUDA, FP32, Mean<float>);
LOOM_REGISTER_KERNEL(mean, kCUDA, FP64, Mean<double>);
LOOM_REGISTER_KERNEL(mean, kCUDA, FP16, Mean<__half>);
LOOM_REGISTER_KERNEL(mean_grad, kCUDA, FP32, MeanGrad<float>);
LOOM_REGISTER_KERNEL(mean_grad, kCUDA, FP64, MeanGrad<double>);
LOOM_REGISTER_KERNEL(mean_grad, kCUDA, FP16, MeanGrad<__half>);

// Forward: fp32, fp64, fp16, and int32 / int64 where the CPU has them (all but pow); grads:
// fp32, fp64, fp16.
#define LOOM_BINARY_CUDA(NAME, FN)                                                        \
  LOOM_REGISTER_KERNEL(elementwise_##NAME, kCUDA, FP32, (Binary<FN, float>));             \
  LOOM_REGISTER_KERNEL(elementwise_##NAME, kCUDA, FP64, (Binary<FN, double>));            \
  LOOM_REGISTER_KERNEL(elementwise_##NAME, kCUDA, FP16, (Binary<FN, __half>));            \
  LOOM_REGISTER_KERNEL(elementwise_##NAME##_grad, kCUDA, FP32, (BinaryGrad<FN, float>));  \
  LOOM_REGISTER_KERNEL(elementwise_##NAME##_grad, kCUDA, FP64, (BinaryGrad<FN, double>)); \
  LOOM_REGISTER_KERNEL(elementwise_##NAME##_grad, kCUDA, FP16, (BinaryGrad<FN, __half>))
#define LOOM_BINARY_INT_CUDA(NAME, FN)                                           \
  LOOM_REGISTER_KERNEL(elementwise_##NAME, kCUDA, INT32, (Binary<FN, int32_t>)); \
  LOOM_REGISTER_KERNEL(elementwise_##NAME, kCUDA, INT64, (Binary<FN, int64_t>))

LOOM_BINARY_CUDA(add, AddF);
LOOM_BINARY_CUDA(sub, SubF);
LOOM_BINARY_CUDA(mul, MulF);
LOOM_BINARY_CUDA(div, DivF);
LOOM_BINARY_CUDA(max, MaxF);
LOOM_BINARY_CUDA(min, MinF);
LOOM_BINARY_CUDA(pow, PowF);
LOOM_BINARY_INT_CUDA(add, AddF);
LOOM_BINARY_INT_CUDA(sub, SubF);
LOOM_BINARY_INT_CUDA(mul, MulF);
LOOM_BINARY_INT_CUDA(div, DivF);
LOOM_BINARY_INT_CUDA(max, MaxF);
LOOM_BINARY_INT_CUDA(min, MinF);

}  // namespace loom::ops::cuda
