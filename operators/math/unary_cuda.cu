// CUDA kernels of the element-wise unary family (operators/math/unary.cc): sigmoid, tanh, exp,
// log, sqrt, square, abs, gelu, leaky_relu and clip, forward and grad, fp32, fp64 and fp16
// (fp16 computes in float; the CPU has no fp16 kernels). Same formulas as the CPU table; grad
// kernels read X, Out and Out@GRAD as the CPU ones do.
#include <cmath>

#include "operators/cuda_util.cuh"
#include "operators/math/unary_attrs.h"

namespace loom::ops::cuda {
namespace {

// Each functor: F(x) and D(x, y) = dy/dx at x with y = F(x).
struct SigmoidF {
  template <typename T>
  __device__ static T F(T x, UnaryAttrs) {
    return T(1) / (T(1) + exp(-x));
  }
  template <typename T>
  __device__ static T D(T, T y, UnaryAttrs) {
    return y * (T(1) - y);
  }
};
struct TanhF {
  template <typename T>
  __device__ static T F(T x, UnaryAttrs) {
    return tanh(x);
  }
  template <typename T>
  __device__ static T D(T, T y, UnaryAttrs) {
    return T(1) - y * y;
  }
};
struct ExpFn {
  template <typename T>
  __device__ static T F(T x, UnaryAttrs) {
    return exp(x);
  }
  template <typename T>
  __device__ static T D(T, T y, UnaryAttrs) {
    return y;
  }
};
struct LogF {
  template <typename T>
  __device__ static T F(T x, UnaryAttrs) {
    return log(x);
  }
  template <typename T>
  __device__ static T D(T x, T, UnaryAttrs) {
    return T(1) / x;
  }
};
struct SqrtF {
  template <typename T>
  __device__ static T F(T x, UnaryAttrs) {
    return sqrt(x);
  }
  template <typename T>
  __device__ static T D(T, T y, UnaryAttrs) {
    return T(0.5) / y;
  }
};
struct SquareF {
  template <typename T>
  __device__ static T F(T x, UnaryAttrs) {
    return x * x;
  }
  template <typename T>
  __device__ static T D(T x, T, UnaryAttrs) {
    return T(2) * x;
  }
};
struct AbsF {
  template <typename T>
  __device__ static T F(T x, UnaryAttrs) {
    return x < T(0) ? -x : x;
  }
  template <typename T>
  __device__ static T D(T x, T, UnaryAttrs) {
    return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
  }
};
struct GeluF {
  template <typename T>
  __device__ static T F(T x, UnaryAttrs) {
    return T(0.5) * x * (T(1) + erf(x / sqrt(T(2))));
  }
  template <typename T>
  __device__ static T D(T x, T, UnaryAttrs) {
    T cdf = T(0.5) * (T(1) + erf(x / sqrt(T(2))));
    T pdf = exp(T(-0.5) * x * x) / sqrt(T(2) * T(3.14159265358979323846));
    return cdf + x * pdf;
  }
};
struct LeakyReluF {
  template <typename T>
  __device__ static T F(T x, UnaryAttrs a) {
    return x > T(0) ? x : T(a.alpha) * x;
  }
  template <typename T>
  __device__ static T D(T x, T, UnaryAttrs a) {
    return x > T(0) ? T(1) : T(a.alpha);
  }
};
struct ClipF {
  template <typename T>
  __device__ static T F(T x, UnaryAttrs a) {
    return x < T(a.min) ? T(a.min) : (x > T(a.max) ? T(a.max) : x);
  }
  template <typename T>
  __device__ static T D(T x, T, UnaryAttrs a) {
    return x >= T(a.min) && x <= T(a.max) ? T(1) : T(0);
  }
};

// T is the element type, A = Acc<T> the arithmetic one (float for fp16).
template <typename Fn, typename T>
__global__ void ForwardK(const T* x, T* o, int64_t n, UnaryAttrs a) {
  using A = Acc<T>;
  LOOM_GRID_STRIDE(i, n) o[i] = static_cast<T>(Fn::template F<A>(static_cast<A>(x[i]), a));
}

template <typename Fn, typename T>
__global__ void BackwardK(const T* x, const T* y, const T* g, T* o, int64_t n, UnaryAttrs a) {
  using A = Acc<T>;
  LOOM_GRID_STRIDE(i, n) {
    o[i] = static_cast<T>(static_cast<A>(g[i]) *
                          Fn::template D<A>(static_cast<A>(x[i]), static_cast<A>(y[i]), a));
  }
}

template <typename Fn, typename T>
Status Forward(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  int64_t n = x.numel();
  T* o = MutableDataOf<T>(ctx.Output("Out"), ctx.place());
  if (n == 0) return Status::OK();
  ForwardK<Fn, T>
      <<<Blocks(n), kThreads, 0, Stream(ctx)>>>(DataOf<T>(x), o, n, ReadUnaryAttrs(ctx.Attrs()));
  return LaunchStatus(ctx);
}

template <typename Fn, typename T>
Status Backward(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& x = ctx.Input("X");
  int64_t n = x.numel();
  T* o = MutableDataOf<T>(dx, ctx.place());
  if (n == 0) return Status::OK();
  BackwardK<Fn, T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(
      DataOf<T>(x), DataOf<T>(ctx.Input("Out")), DataOf<T>(ctx.Input("Out@GRAD")), o, n,
      ReadUnaryAttrs(ctx.Attrs()));
  return LaunchStatus(ctx);
}

}  // namespace

#define LOOM_UNARY_CUDA(NAME, FN)                                         \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, FP32, (Forward<FN, float>));          \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, FP64, (Forward<FN, double>));         \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, FP16, (Forward<FN, __half>));         \
  LOOM_REGISTER_KERNEL(NAME##_grad, kCUDA, FP32, (Backward<FN, float>));  \
  LOOM_REGISTER_KERNEL(NAME##_grad, kCUDA, FP64, (Backward<FN, double>)); \
  LOOM_REGISTER_KERNEL(NAME##_grad, kCUDA, FP16, (Backward<FN, __half>))

LOOM_UNARY_CUDA(sigmoid, SigmoidF);
LOOM_UNARY_CUDA(tanh, TanhF);
LOOM_UNARY_CUDA(exp, ExpFn);
LOOM_UNARY_CUDA(log, LogF);
LOOM_UNARY_CUDA(sqrt, SqrtF);
LOOM_UNARY_CUDA(square, SquareF);
LOOM_UNARY_CUDA(abs, AbsF);
LOOM_UNARY_CUDA(gelu, GeluF);
LOOM_UNARY_CUDA(leaky_relu, LeakyReluF);
LOOM_UNARY_CUDA(clip, ClipF);

}  // namespace loom::ops::cuda
