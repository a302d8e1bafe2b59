// CUDA kernels of momentum (with Nesterov) and adam / adamw, fp32, fp64 and fp16, and of
// squared_l2_norm(+grad), fp32 and fp64 (operators/optimizers/momentum_adam.cc). The learning
// rate and the beta powers stay on the device: kernels read them through pointers, and the beta
// powers advance in a one-thread kernel queued after the update (the outputs may alias them).
// fp16 (Param, Grad and the optimizer state in fp16; the CPU has no fp16 kernels) computes in
// float and takes the learning rate and beta powers in fp16 or fp32, whichever they are.
// squared_l2_norm sums in double in one block.
#include <algorithm>
#include <cmath>

#include "operators/cuda_util.cuh"

namespace loom::ops::cuda {
namespace {

template <typename T>
__global__ void MomentumK(const T* p, const T* g, const T* v, const T* lr, T* po, T* vo, int64_t n,
                          T mu, bool nesterov) {
  const T rate = lr[0];
  LOOM_GRID_STRIDE(i, n) {
    T nv = mu * v[i] + g[i];
    vo[i] = nv;
    po[i] = p[i] - rate * (nesterov ? g[i] + mu * nv : nv);
  }
}

template <typename T>
Status Momentum(const KernelContext& ctx) {
  const Tensor& param = ctx.Input("Param");
  int64_t n = param.numel();
  T* po = ctx.Output("ParamOut")->mutable_data<T>(ctx.place());
  T* vo = ctx.Output("VelocityOut")->mutable_data<T>(ctx.place());
  if (n == 0) return Status::OK();
  MomentumK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(
      param.data<T>(), ctx.Input("Grad").data<T>(), ctx.Input("Velocity").data<T>(),
      ctx.Input("LearningRate").data<T>(), po, vo, n, static_cast<T>(ctx.Attr<float>("mu")),
      ctx.Attr<bool>("use_nesterov"));
  return LaunchStatus(ctx);
}

template <typename T>
__global__ void AdamK(const T* p, const T* g, const T* m1, const T* m2, const T* lr, const T* b1p,
                      const T* b2p, T* po, T* m1o, T* m2o, int64_t n, T b1, T b2, T eps, T coeff) {
  const T lr_t = lr[0] * sqrt(T(1) - b2p[0]) / (T(1) - b1p[0]);
  const T eps_t = eps * sqrt(T(1) - b2p[0]);
  const T decay = T(1) - lr[0] * coeff;
  LOOM_GRID_STRIDE(i, n) {
    T a = b1 * m1[i] + (T(1) - b1) * g[i];
    T b = b2 * m2[i] + (T(1) - b2) * g[i] * g[i];
    m1o[i] = a;
    m2o[i] = b;
    po[i] = p[i] * decay - lr_t * a / (sqrt(b) + eps_t);
  }
}

// lazy_mode: a row (dim 0) whose gradient is all zero keeps its parameter and moments. One
// block per row: its threads find whether any gradient of the row is nonzero, then update it.
template <typename T>
__global__ void LazyAdamK(const T* p, const T* g, const T* m1, const T* m2, const T* lr,
                          const T* b1p, const T* b2p, T* po, T* m1o, T* m2o, int64_t rows,
                          int64_t width, T b1, T b2, T eps, T coeff) {
  const T lr_t = lr[0] * sqrt(T(1) - b2p[0]) / (T(1) - b1p[0]);
  const T eps_t = eps * sqrt(T(1) - b2p[0]);
  const T decay = T(1) - lr[0] * coeff;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * width;
    int any = 0;
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x) any |= g[base + j] != T(0);
    any = __syncthreads_or(any);
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      const int64_t i = base + j;
      if (any) {
        T a = b1 * m1[i] + (T(1) - b1) * g[i];
        T b = b2 * m2[i] + (T(1) - b2) * g[i] * g[i];
        m1o[i] = a;
        m2o[i] = b;
        po[i] = p[i] * decay - lr_t * a / (sqrt(b) + eps_t);
      } else {
        m1o[i] = m1[i];
        m2o[i] = m2[i];
        po[i] = p[i];
      }
    }
    __syncthreads();
  }
}

template <typename T>
__global__ void AdvancePowsK(const T* b1p, const T* b2p, T* b1o, T* b2o, T b1, T b2) {
  T a = b1p[0] * b1, b = b2p[0] * b2;
  b1o[0] = a;
  b2o[0] = b;
}

template <typename T, bool kDecoupledDecay>
Status Adam(const KernelContext& ctx) {
  const Tensor& param = ctx.Input("Param");
  int64_t n = param.numel();
  T b1 = static_cast<T>(ctx.Attr<float>("beta1")), b2 = static_cast<T>(ctx.Attr<float>("beta2"));
  T eps = static_cast<T>(ctx.Attr<float>("epsilon"));
  T coeff = kDecoupledDecay ? static_cast<T>(ctx.Attr<float>("coeff")) : T(0);
  const T* b1p = ctx.Input("Beta1Pow").data<T>();
  const T* b2p = ctx.Input("Beta2Pow").data<T>();
  T* po = ctx.Output("ParamOut")->mutable_data<T>(ctx.place());
  T* m1o = ctx.Output("Moment1Out")->mutable_data<T>(ctx.place());
  T* m2o = ctx.Output("Moment2Out")->mutable_data<T>(ctx.place());
  if (n > 0 && ctx.Attr<bool>("lazy_mode") && param.dims().size() >= 2) {
    const int64_t rows = param.dims()[0];
    LazyAdamK<T>
        <<<static_cast<unsigned>(std::min<int64_t>(rows, 65535)), kThreads, 0, Stream(ctx)>>>(
            param.data<T>(), ctx.Input("Grad").data<T>(), ctx.Input("Moment1").data<T>(),
            ctx.Input("Moment2").data<T>(), ctx.Input("LearningRate").data<T>(), b1p, b2p, po, m1o,
            m2o, rows, n / rows, b1, b2, eps, coeff);
  } else if (n > 0) {
    AdamK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(
        param.data<T>(), ctx.Input("Grad").data<T>(), ctx.Input("Moment1").data<T>(),
        ctx.Input("Moment2").data<T>(), ctx.Input("LearningRate").data<T>(), b1p, b2p, po, m1o, m2o,
        n, b1, b2, eps, coeff);
  }
  AdvancePowsK<T>
      <<<1, 1, 0, Stream(ctx)>>>(b1p, b2p, ctx.Output("Beta1PowOut")->mutable_data<T>(ctx.place()),
                                 ctx.Output("Beta2PowOut")->mutable_data<T>(ctx.place()), b1, b2);
  return LaunchStatus(ctx);
}

// ---- fp16 ----

// A one-element fp16 or fp32 tensor on the device, read as float.
struct ScalarRef {
  const void* p;
  bool half;
  __device__ float Get() const {
    return half ? __half2float(*static_cast<const __half*>(p)) : *static_cast<const float*>(p);
  }
};

StatusOr<ScalarRef> ScalarOf(const KernelContext& ctx, const char* slot) {
  const Tensor& t = ctx.Input(slot);
  if (t.dtype() == proto::FP16) return ScalarRef{t.raw_data(), true};
  if (t.dtype() == proto::FP32) return ScalarRef{t.raw_data(), false};
  return ctx.Error("fp16 ", slot, " must be fp16 or fp32, got ", DataTypeName(t.dtype()));
}

__global__ void MomentumHalfK(const __half* p, const __half* g, const __half* v, ScalarRef lr,
                              __half* po, __half* vo, int64_t n, float mu, bool nesterov) {
  const float rate = lr.Get();
  LOOM_GRID_STRIDE(i, n) {
    float gi = __half2float(g[i]);
    float nv = mu * __half2float(v[i]) + gi;
    vo[i] = __float2half(nv);
    po[i] = __float2half(__half2float(p[i]) - rate * (nesterov ? gi + mu * nv : nv));
  }
}

Status MomentumHalf(const KernelContext& ctx) {
  const Tensor& param = ctx.Input("Param");
  int64_t n = param.numel();
  auto lr = ScalarOf(ctx, "LearningRate");
  if (!lr.ok()) return lr.status();
  __half* po = MutableDataOf<__half>(ctx.Output("ParamOut"), ctx.place());
  __half* vo = MutableDataOf<__half>(ctx.Output("VelocityOut"), ctx.place());
  if (n == 0) return Status::OK();
  MomentumHalfK<<<Blocks(n), kThreads, 0, Stream(ctx)>>>(
      DataOf<__half>(param), DataOf<__half>(ctx.Input("Grad")),
      DataOf<__half>(ctx.Input("Velocity")), lr.value(), po, vo, n, ctx.Attr<float>("mu"),
      ctx.Attr<bool>("use_nesterov"));
  return LaunchStatus(ctx);
}

__global__ void AdamHalfK(const __half* p, const __half* g, const __half* m1, const __half* m2,
                          ScalarRef lr, ScalarRef b1p, ScalarRef b2p, __half* po, __half* m1o,
                          __half* m2o, int64_t n, float b1, float b2, float eps, float coeff) {
  const float rate = lr.Get(), pow1 = b1p.Get(), pow2 = b2p.Get();
  const float lr_t = rate * sqrtf(1.f - pow2) / (1.f - pow1);
  const float eps_t = eps * sqrtf(1.f - pow2);
  const float decay = 1.f - rate * coeff;
  LOOM_GRID_STRIDE(i, n) {
    float gi = __half2float(g[i]);
    float a = b1 * __half2float(m1[i]) + (1.f - b1) * gi;
    float b = b2 * __half2float(m2[i]) + (1.f - b2) * gi * gi;
    m1o[i] = __float2half(a);
    m2o[i] = __float2half(b);
    po[i] = __float2half(__half2float(p[i]) * decay - lr_t * a / (sqrtf(b) + eps_t));
  }
}

// The beta powers advance in their own dtype (fp16 or fp32).
__global__ void AdvancePowsHalfK(ScalarRef b1p, ScalarRef b2p, void* b1o, void* b2o, float b1,
                                 float b2) {
  float a = b1p.Get() * b1, b = b2p.Get() * b2;
  if (b1p.half)
    *static_cast<__half*>(b1o) = __float2half(a);
  else
    *static_cast<float*>(b1o) = a;
  if (b2p.half)
    *static_cast<__half*>(b2o) = __float2half(b);
  else
    *static_cast<float*>(b2o) = b;
}

template <bool kDecoupledDecay>
Status AdamHalf(const KernelContext& ctx) {
  const Tensor& param = ctx.Input("Param");
  int64_t n = param.numel();
  float b1 = ctx.Attr<float>("beta1"), b2 = ctx.Attr<float>("beta2");
  float eps = ctx.Attr<float>("epsilon");
  float coeff = kDecoupledDecay ? ctx.Attr<float>("coeff") : 0.f;
  if (ctx.Attr<bool>("lazy_mode"))
    return ctx.Error("lazy_mode is not available for fp16 parameters (fp32 and fp64 have it)");
  auto lr = ScalarOf(ctx, "LearningRate");
  auto b1p = ScalarOf(ctx, "Beta1Pow");
  auto b2p = ScalarOf(ctx, "Beta2Pow");
  for (const auto* s : {&lr, &b1p, &b2p})
    if (!s->ok()) return s->status();
  __half* po = MutableDataOf<__half>(ctx.Output("ParamOut"), ctx.place());
  __half* m1o = MutableDataOf<__half>(ctx.Output("Moment1Out"), ctx.place());
  __half* m2o = MutableDataOf<__half>(ctx.Output("Moment2Out"), ctx.place());
  Tensor* b1o = ctx.Output("Beta1PowOut");
  Tensor* b2o = ctx.Output("Beta2PowOut");
  void* b1o_p = b1o->mutable_data(ctx.place(), ctx.Input("Beta1Pow").dtype());
  void* b2o_p = b2o->mutable_data(ctx.place(), ctx.Input("Beta2Pow").dtype());
  if (n > 0)
    AdamHalfK<<<Blocks(n), kThreads, 0, Stream(ctx)>>>(
        DataOf<__half>(param), DataOf<__half>(ctx.Input("Grad")),
        DataOf<__half>(ctx.Input("Moment1")), DataOf<__half>(ctx.Input("Moment2")), lr.value(),
        b1p.value(), b2p.value(), po, m1o, m2o, n, b1, b2, eps, coeff);
  AdvancePowsHalfK<<<1, 1, 0, Stream(ctx)>>>(b1p.value(), b2p.value(), b1o_p, b2o_p, b1, b2);
  return LaunchStatus(ctx);
}

template <typename T>
__global__ void SquaredL2NormK(const T* x, int64_t n, T* out) {
  __shared__ double buf[kThreads];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  acc = BlockSum(acc, buf);
  if (threadIdx.x == 0) out[0] = static_cast<T>(acc);
}

template <typename T>
Status SquaredL2Norm(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  SquaredL2NormK<T><<<1, kThreads, 0, Stream(ctx)>>>(
      x.data<T>(), x.numel(), ctx.Output("Out")->mutable_data<T>(ctx.place()));
  return LaunchStatus(ctx);
}

template <typename T>
__global__ void SquaredL2NormGradK(const T* x, const T* g, T* o, int64_t n) {
  const T gv = g[0];
  LOOM_GRID_STRIDE(i, n) o[i] = T(2) * x[i] * gv;
}

template <typename T>
Status SquaredL2NormGrad(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& x = ctx.Input("X");
  T* o = dx->mutable_data<T>(ctx.place());
  if (x.numel() == 0) return Status::OK();
  SquaredL2NormGradK<T><<<Blocks(x.numel()), kThreads, 0, Stream(ctx)>>>(
      x.data<T>(), ctx.Input("Out@GRAD").data<T>(), o, x.numel());
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(momentum, kCUDA, FP16, MomentumHalf);
LOOM_REGISTER_KERNEL(adam, kCUDA, FP16, AdamHalf<false>);
LOOM_REGISTER_KERNEL(adamw, kCUDA, FP16, AdamHalf<true>);
LOOM_REGISTER_KERNEL(momentum, kCUDA, FP32, Momentum<float>);
LOOM_REGISTER_KERNEL(momentum, kCUDA, FP64, Momentum<double>);
LOOM_REGISTER_KERNEL(adam, kCUDA, FP32, (Adam<float, false>));
LOOM_REGISTER_KERNEL(adam, kCUDA, FP64, (Adam<double, false>));
LOOM_REGISTER_KERNEL(adamw, kCUDA, FP32, (Adam<float, true>));
LOOM_REGISTER_KERNEL(adamw, kCUDA, FP64, (Adam<double, true>));

LOOM_REGISTER_KERNEL(squared_l2_norm, kCUDA, FP32, SquaredL2Norm<float>);
LOOM_REGISTER_KERNEL(squared_l2_norm, kCUDA, FP64, SquaredL2Norm<double>);
LOOM_REGISTER_KERNEL(squared_l2_norm_grad, kCUDA, FP32, SquaredL2NormGrad<float>);
LOOM_REGISTER_KERNEL(squared_l2_norm_grad, kCUDA, FP64, SquaredL2NormGrad<double>);
}  // namespace loom::ops::cuda
