// momentum (with Nesterov), adam and adamw: in-place parameter updates; optimizer state lives in
// its own vars (velocity, moments, beta powers) so the transpiler can place it with the param.
// Also squared_l2_norm, the building block of clipping by global norm.
#include <algorithm>
#include <cmath>

#include "framework/parallel.h"
#include "operators/common.h"
#include "operators/optimizers/optimizer_checks.h"

namespace loom::ops {
namespace {

Status MomentumInferShape(InferShapeContext* ctx) {
  LOOM_RETURN_IF_ERROR(CheckLikeParam(ctx, "Grad", "Param"));
  LOOM_RETURN_IF_ERROR(CheckLikeParam(ctx, "Velocity", "Param"));
  LOOM_RETURN_IF_ERROR(CheckScalarOfParam(ctx, "LearningRate"));
  ctx->ShareDimAndDtype("Param", "ParamOut");
  ctx->ShareDimAndDtype("Velocity", "VelocityOut");
  return Status::OK();
}

// v = mu v + g;  p -= lr (g + mu v) with Nesterov, else p -= lr v.
template <typename T>
Status MomentumKernel(const KernelContext& ctx) {
  const Tensor& param = ctx.Input("Param");
  int64_t n = param.numel();
  const T* p = param.data<T>();
  UpdateGrad<T> grad;  // a sparse gradient is zero on the other rows, which still move
  LOOM_RETURN_IF_ERROR(grad.Read(ctx, param, /*densify=*/true));
  const T* g = grad.dense();
  const T* v = ctx.Input("Velocity").data<T>();
  T lr = ctx.Input("LearningRate").data<T>()[0];
  T mu = static_cast<T>(ctx.Attr<float>("mu"));
  bool nesterov = ctx.Attr<bool>("use_nesterov");
  T* po = ctx.Output("ParamOut")->mutable_data<T>(ctx.place());
  T* vo = ctx.Output("VelocityOut")->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < n; ++i) {
    T nv = mu * v[i] + g[i];
    vo[i] = nv;
    po[i] = p[i] - lr * (nesterov ? g[i] + mu * nv : nv);
  }
  return Status::OK();
}

Status AdamInferShape(InferShapeContext* ctx) {
  LOOM_RETURN_IF_ERROR(CheckLikeParam(ctx, "Grad", "Param"));
  LOOM_RETURN_IF_ERROR(CheckLikeParam(ctx, "Moment1", "Param"));
  LOOM_RETURN_IF_ERROR(CheckLikeParam(ctx, "Moment2", "Param"));
  for (const char* s : {"LearningRate", "Beta1Pow", "Beta2Pow"})
    LOOM_RETURN_IF_ERROR(CheckScalarOfParam(ctx, s));
  ctx->ShareDimAndDtype("Param", "ParamOut");
  ctx->ShareDimAndDtype("Moment1", "Moment1Out");
  ctx->ShareDimAndDtype("Moment2", "Moment2Out");
  ctx->ShareDimAndDtype("Beta1Pow", "Beta1PowOut");
  ctx->ShareDimAndDtype("Beta2Pow", "Beta2PowOut");
  return Status::OK();
}

// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; lr_t = lr sqrt(1-b2^t) / (1-b1^t);
// p -= lr_t m / (sqrt(v) + eps sqrt(1-b2^t)) [+ lr coeff p for adamw, decoupled];
// the beta powers advance by one step.
template <typename T, bool kDecoupledDecay>
Status AdamKernel(const KernelContext& ctx) {
  const Tensor& param = ctx.Input("Param");
  int64_t n = param.numel();
  const T* p = param.data<T>();
  const bool lazy = ctx.Attr<bool>("lazy_mode");
  // Lazy with a sparse gradient: only its rows move (Fluid's lazy Adam over SelectedRows);
  // otherwise every row moves, the untouched ones with a zero gradient.
  UpdateGrad<T> grad;
  LOOM_RETURN_IF_ERROR(grad.Read(ctx, param, /*densify=*/!lazy));
  const T* g = grad.dense();
  const T* m1 = ctx.Input("Moment1").data<T>();
  const T* m2 = ctx.Input("Moment2").data<T>();
  T lr = ctx.Input("LearningRate").data<T>()[0];
  T b1p = ctx.Input("Beta1Pow").data<T>()[0], b2p = ctx.Input("Beta2Pow").data<T>()[0];
  T b1 = static_cast<T>(ctx.Attr<float>("beta1")), b2 = static_cast<T>(ctx.Attr<float>("beta2"));
  T eps = static_cast<T>(ctx.Attr<float>("epsilon"));
  T coeff = kDecoupledDecay ? static_cast<T>(ctx.Attr<float>("coeff")) : T(0);
  T* po = ctx.Output("ParamOut")->mutable_data<T>(ctx.place());
  T* m1o = ctx.Output("Moment1Out")->mutable_data<T>(ctx.place());
  T* m2o = ctx.Output("Moment2Out")->mutable_data<T>(ctx.place());
  // The update runs in place on the outputs (the usual case: they are the input variables),
  // which leaves the loop four streams the compiler can vectorize.
  if (po != p) std::copy(p, p + n, po);
  if (m1o != m1) std::copy(m1, m1 + n, m1o);
  if (m2o != m2) std::copy(m2, m2 + n, m2o);
  const T lr_t = lr * std::sqrt(T(1) - b2p) / (T(1) - b1p);
  const T eps_t = eps * std::sqrt(T(1) - b2p);
  const T decay = kDecoupledDecay ? T(1) - lr * coeff : T(1);
  auto update_one = [=](int64_t i, T gi) {
    T a = b1 * m1o[i] + (T(1) - b1) * gi;
    T b = b2 * m2o[i] + (T(1) - b2) * gi * gi;
    m1o[i] = a;
    m2o[i] = b;
    po[i] = po[i] * decay - lr_t * a / (std::sqrt(b) + eps_t);
  };
  auto update = [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) update_one(i, g[i]);
  };
  if (grad.sparse()) {
    grad.ForEach(n, update_one);
  } else if (lazy && param.dims().size() >= 2 && n > 0) {
    // Only the rows (dim 0) the gradient touches move, as Fluid's lazy Adam over a sparse
    // gradient: a row whose gradient is all zero keeps its parameter and moments.
    const int64_t rows = param.dims()[0], width = n / rows;
    ParallelFor(rows, std::max<int64_t>(1, 65536 / std::max<int64_t>(width, 1)),
                [=](int64_t begin, int64_t end) {
                  for (int64_t r = begin; r < end; ++r) {
                    const T* gr = g + r * width;
                    if (std::any_of(gr, gr + width, [](T v) { return v != T(0); }))
                      update(r * width, (r + 1) * width);
                  }
                });
  } else {
    ParallelFor(n, 65536, update);
  }
  ctx.Output("Beta1PowOut")->mutable_data<T>(ctx.place())[0] = b1p * b1;
  ctx.Output("Beta2PowOut")->mutable_data<T>(ctx.place())[0] = b2p * b2;
  return Status::OK();
}

Status SquaredL2NormInferShape(InferShapeContext* ctx) {
  ctx->SetOutputDim("Out", DDim{1});
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

template <typename T>
Status SquaredL2NormKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const T* in = x.data<T>();
  double acc = 0;
  for (int64_t i = 0, i_end = x.numel(); i < i_end; ++i) acc += static_cast<double>(in[i]) * in[i];
  ctx.Output("Out")->mutable_data<T>(ctx.place())[0] = static_cast<T>(acc);
  return Status::OK();
}

template <typename T>
Status SquaredL2NormGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& x = ctx.Input("X");
  T g = ctx.Input("Out@GRAD").data<T>()[0];
  const T* in = x.data<T>();
  T* o = dx->mutable_data<T>(ctx.place());
  for (int64_t i = 0, i_end = x.numel(); i < i_end; ++i) o[i] = T(2) * in[i] * g;
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(momentum)
    .Doc(
        "Momentum SGD: Velocity = mu * Velocity + Grad; Param -= lr * (Nesterov ? Grad + mu * "
        "Velocity : Velocity).")
    .Input("Param", "parameter")
    .Input("Grad", "its gradient")
    .Input("Velocity", "velocity accumulator")
    .Input("LearningRate", "learning rate, one element")
    .Output("ParamOut", "updated parameter (the Param var)")
    .Output("VelocityOut", "updated velocity (the Velocity var)")
    .Attr<float>("mu", 0.9f, "momentum")
    .Attr<bool>("use_nesterov", false, "Nesterov accelerated gradient")
    .InferShape(MomentumInferShape)
    .Kernel(Place::kCPU, proto::FP32, MomentumKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, MomentumKernel<double>);

#define LOOM_ADAM_SLOTS                                                                 \
  .Input("Param", "parameter")                                                          \
      .Input("Grad", "its gradient")                                                    \
      .Input("LearningRate", "learning rate, one element")                              \
      .Input("Moment1", "first moment")                                                 \
      .Input("Moment2", "second moment")                                                \
      .Input("Beta1Pow", "beta1^t, one element")                                        \
      .Input("Beta2Pow", "beta2^t, one element")                                        \
      .Output("ParamOut", "updated parameter")                                          \
      .Output("Moment1Out", "updated first moment")                                     \
      .Output("Moment2Out", "updated second moment")                                    \
      .Output("Beta1PowOut", "beta1^(t+1)")                                             \
      .Output("Beta2PowOut", "beta2^(t+1)")                                             \
      .Attr<float>("beta1", 0.9f, "decay of the first moment")                          \
      .Attr<float>("beta2", 0.999f, "decay of the second moment")                       \
      .Attr<float>("epsilon", 1e-8f, "numerical stabilizer")                            \
      .Attr<bool>("lazy_mode", false,                                                   \
                  "only rows (dim 0) with a nonzero gradient move (Fluid's lazy Adam)") \
      .InferShape(AdamInferShape)

LOOM_REGISTER_OP(adam)
    .Doc("Adam with bias correction; the beta powers advance each step.") LOOM_ADAM_SLOTS
    .Kernel(Place::kCPU, proto::FP32, AdamKernel<float, false>)
    .Kernel(Place::kCPU, proto::FP64, AdamKernel<double, false>);

LOOM_REGISTER_OP(adamw)
    .Doc("Adam with decoupled weight decay: Param *= (1 - lr * coeff) before the Adam step.")
        LOOM_ADAM_SLOTS.Attr<float>("coeff", 0.01f, "weight decay coefficient")
    .Kernel(Place::kCPU, proto::FP32, AdamKernel<float, true>)
    .Kernel(Place::kCPU, proto::FP64, AdamKernel<double, true>);

LOOM_REGISTER_OP(squared_l2_norm)
    .Doc("Out = sum(X^2), dims [1] (used for clipping by global norm).")
    .Input("X", "input")
    .Output("Out", "sum of squares")
    .InferShape(SquaredL2NormInferShape)
    .GradMaker(DefaultGradMaker())
    .Kernel(Place::kCPU, proto::FP32, SquaredL2NormKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SquaredL2NormKernel<double>);

LOOM_REGISTER_OP(squared_l2_norm_grad)
    .Doc("X@GRAD = 2 X Out@GRAD.")
    .Input("X", "forward input")
    .Input("Out", "forward output")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, SquaredL2NormGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SquaredL2NormGradKernel<double>);

}  // namespace loom::ops
