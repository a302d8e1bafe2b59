// CUDA kernels of momentum (with Nesterov) and adam / adamw, fp32 and fp64. The learning rate
// and the beta powers stay on the device: kernels read them through pointers, and the beta
// powers advance in a one-thread kernel queued after the update (the outputs may alias them).
#include <cmath>

#include "operators/cuda_util.cuh"

namespace loom::ops::cuda {
namespace {

template <typename T>
__global__ void MomentumK(const T* p, const T* g, const T* v, const T* lr, T* po, T* vo,
                          int64_t n, T mu, bool nesterov) {
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
__global__ void AdamK(const T* p, const T* g, const T* m1, const T* m2, const T* lr,
                      const T* b1p, const T* b2p, T* po, T* m1o, T* m2o, int64_t n, T b1, T b2,
                      T eps, T coeff) {
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
  if (n > 0)
    AdamK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(
        param.data<T>(), ctx.Input("Grad").data<T>(), ctx.Input("Moment1").data<T>(),
        ctx.Input("Moment2").data<T>(), ctx.Input("LearningRate").data<T>(), b1p, b2p, po, m1o,
        m2o, n, b1, b2, eps, coeff);
  AdvancePowsK<T><<<1, 1, 0, Stream(ctx)>>>(
      b1p, b2p, ctx.Output("Beta1PowOut")->mutable_data<T>(ctx.place()),
      ctx.Output("Beta2PowOut")->mutable_data<T>(ctx.place()), b1, b2);
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(momentum, kCUDA, FP32, Momentum<float>);
LOOM_REGISTER_KERNEL(momentum, kCUDA, FP64, Momentum<double>);
LOOM_REGISTER_KERNEL(adam, kCUDA, FP32, (Adam<float, false>));
LOOM_REGISTER_KERNEL(adam, kCUDA, FP64, (Adam<double, false>));
LOOM_REGISTER_KERNEL(adamw, kCUDA, FP32, (Adam<float, true>));
LOOM_REGISTER_KERNEL(adamw, kCUDA, FP64, (Adam<double, true>));

}  // namespace loom::ops::cuda
