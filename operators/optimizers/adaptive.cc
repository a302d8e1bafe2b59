// Fluid's other update ops: adagrad, decayed_adagrad, rmsprop (plain and centered), adamax,
// adadelta, lamb, lars_momentum and ftrl. Each updates Param and its state in place (the
// outputs are the input variables); the state lives in vars of its own, shaped like Param (or
// one element for the beta powers), so the transpilers place it with the parameter. The rules
// are Fluid 1.x's (python/loom/optimizer.py states each one; tests/python/test_optimizers_more.py
// checks them against NumPy). Grad may be a SelectedRows (optimizer_checks.h's UpdateGrad).
#include <cmath>

#include "operators/common.h"
#include "operators/optimizers/optimizer_checks.h"

namespace loom::ops {
namespace {

// Shape inference of an update op: Grad and every `like` input have Param's dims and dtype,
// every `scalars` input one element; each output shares its input's dims.
using SlotPairs = std::initializer_list<std::pair<const char*, const char*>>;  // (input, output)

Status InferUpdate(InferShapeContext* ctx, SlotPairs like, SlotPairs scalars) {
  LOOM_RETURN_IF_ERROR(CheckLikeParam(ctx, "Grad", "Param"));
  ctx->ShareDimAndDtype("Param", "ParamOut");
  for (const auto& [in, out] : like) {
    if (ctx->InputSize(in) == 0) continue;
    LOOM_RETURN_IF_ERROR(CheckLikeParam(ctx, in, "Param"));
    if (ctx->OutputSize(out) == 0)
      return ctx->Error("input ", in, " is given but output ", out, " is not");
    ctx->ShareDimAndDtype(in, out);
  }
  for (const auto& [in, out] : scalars) {
    LOOM_RETURN_IF_ERROR(CheckScalarOfParam(ctx, in));
    if (out != nullptr) ctx->ShareDimAndDtype(in, out);
  }
  return Status::OK();
}

// The state tensors of an update: outputs that start as copies of their inputs (usually the same
// buffer), updated in place.
template <typename T>
T* InPlace(const KernelContext& ctx, const char* in, const char* out) {
  const Tensor& x = ctx.Input(in);
  T* o = ctx.Output(out)->mutable_data<T>(ctx.place());
  const T* i = x.data<T>();
  if (o != i) std::copy(i, i + x.numel(), o);
  return o;
}

template <typename T>
T Scalar(const KernelContext& ctx, const char* slot) {
  return ctx.Input(slot).data<T>()[0];
}

template <typename T>
T AttrT(const KernelContext& ctx, const char* name) {
  return static_cast<T>(ctx.Attr<float>(name));
}

template <typename T>
double Norm(const T* x, int64_t n) {
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return std::sqrt(acc);
}

// moment += g^2 (decayed: moment = decay moment + (1 - decay) g^2);
// p -= lr g / (sqrt(moment) + eps).
// A SelectedRows gradient: adagrad moves only its rows (a zero gradient changes neither the
// moment nor the parameter), decayed adagrad every row (its moment decays everywhere).
template <typename T, bool kDecayed>
Status AdagradKernel(const KernelContext& ctx) {
  const int64_t n = ctx.Input("Param").numel();
  UpdateGrad<T> grad;
  LOOM_RETURN_IF_ERROR(grad.Read(ctx, ctx.Input("Param"), /*densify=*/kDecayed));
  T* p = InPlace<T>(ctx, "Param", "ParamOut");
  T* m = InPlace<T>(ctx, "Moment", "MomentOut");
  const T lr = Scalar<T>(ctx, "LearningRate"), eps = AttrT<T>(ctx, "epsilon");
  const T decay = kDecayed ? AttrT<T>(ctx, "decay") : T(1);
  grad.ForEach(n, [&](int64_t i, T g) {
    m[i] = kDecayed ? decay * m[i] + (T(1) - decay) * g * g : m[i] + g * g;
    p[i] -= lr * g / (std::sqrt(m[i]) + eps);
  });
  return Status::OK();
}

// ms = decay ms + (1 - decay) g^2; centered: mg = decay mg + (1 - decay) g and the denominator
// is sqrt(ms - mg^2 + eps), else sqrt(ms + eps); mom = momentum mom + lr g / denom; p -= mom.
template <typename T>
Status RmspropKernel(const KernelContext& ctx) {
  const int64_t n = ctx.Input("Param").numel();
  UpdateGrad<T> grad;  // a sparse gradient is densified: these updates move every row
  LOOM_RETURN_IF_ERROR(grad.Read(ctx, ctx.Input("Param"), /*densify=*/true));
  const T* g = grad.dense();
  T* p = InPlace<T>(ctx, "Param", "ParamOut");
  T* ms = InPlace<T>(ctx, "MeanSquare", "MeanSquareOut");
  T* mom = InPlace<T>(ctx, "Moment", "MomentOut");
  const bool centered = ctx.Attr<bool>("centered");
  if (centered && ctx.InputSize("MeanGrad") == 0)
    return ctx.Error("centered rmsprop needs input MeanGrad (and output MeanGradOut)");
  T* mg = centered ? InPlace<T>(ctx, "MeanGrad", "MeanGradOut") : nullptr;
  const T lr = Scalar<T>(ctx, "LearningRate"), eps = AttrT<T>(ctx, "epsilon");
  const T rho = AttrT<T>(ctx, "decay"), mu = AttrT<T>(ctx, "momentum");
  for (int64_t i = 0; i < n; ++i) {
    ms[i] = rho * ms[i] + (T(1) - rho) * g[i] * g[i];
    T denom;
    if (centered) {
      mg[i] = rho * mg[i] + (T(1) - rho) * g[i];
      denom = std::sqrt(ms[i] - mg[i] * mg[i] + eps);
    } else {
      denom = std::sqrt(ms[i] + eps);
    }
    mom[i] = mu * mom[i] + lr * g[i] / denom;
    p[i] -= mom[i];
  }
  return Status::OK();
}

// m = b1 m + (1 - b1) g; u = max(b2 u + eps, |g|); p -= lr / (1 - b1^t) m / u; b1^t advances.
template <typename T>
Status AdamaxKernel(const KernelContext& ctx) {
  const int64_t n = ctx.Input("Param").numel();
  UpdateGrad<T> grad;  // a sparse gradient is densified: these updates move every row
  LOOM_RETURN_IF_ERROR(grad.Read(ctx, ctx.Input("Param"), /*densify=*/true));
  const T* g = grad.dense();
  T* p = InPlace<T>(ctx, "Param", "ParamOut");
  T* m = InPlace<T>(ctx, "Moment", "MomentOut");
  T* u = InPlace<T>(ctx, "InfNorm", "InfNormOut");
  const T lr = Scalar<T>(ctx, "LearningRate"), b1p = Scalar<T>(ctx, "Beta1Pow");
  const T b1 = AttrT<T>(ctx, "beta1"), b2 = AttrT<T>(ctx, "beta2"), eps = AttrT<T>(ctx, "epsilon");
  const T lr_t = lr / (T(1) - b1p);
  for (int64_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (T(1) - b1) * g[i];
    u[i] = std::max(b2 * u[i] + eps, std::abs(g[i]));
    p[i] -= lr_t * m[i] / u[i];
  }
  ctx.Output("Beta1PowOut")->mutable_data<T>(ctx.place())[0] = b1p * b1;
  return Status::OK();
}

// g2 = rho g2 + (1 - rho) g^2; upd = -sqrt((u2 + eps) / (g2 + eps)) g;
// u2 = rho u2 + (1 - rho) upd^2; p += upd.
template <typename T>
Status AdadeltaKernel(const KernelContext& ctx) {
  const int64_t n = ctx.Input("Param").numel();
  UpdateGrad<T> grad;  // a sparse gradient is densified: these updates move every row
  LOOM_RETURN_IF_ERROR(grad.Read(ctx, ctx.Input("Param"), /*densify=*/true));
  const T* g = grad.dense();
  T* p = InPlace<T>(ctx, "Param", "ParamOut");
  T* g2 = InPlace<T>(ctx, "AvgSquaredGrad", "AvgSquaredGradOut");
  T* u2 = InPlace<T>(ctx, "AvgSquaredUpdate", "AvgSquaredUpdateOut");
  const T rho = AttrT<T>(ctx, "rho"), eps = AttrT<T>(ctx, "epsilon");
  for (int64_t i = 0; i < n; ++i) {
    g2[i] = rho * g2[i] + (T(1) - rho) * g[i] * g[i];
    const T upd = -std::sqrt((u2[i] + eps) / (g2[i] + eps)) * g[i];
    u2[i] = rho * u2[i] + (T(1) - rho) * upd * upd;
    p[i] += upd;
  }
  return Status::OK();
}

// Adam's moments; r = m_hat / (sqrt(v_hat) + eps) + wd p; p -= lr (||p|| / ||r||) r, the
// ratio 1 when either norm is 0; the beta powers advance.
template <typename T>
Status LambKernel(const KernelContext& ctx) {
  const int64_t n = ctx.Input("Param").numel();
  UpdateGrad<T> grad;  // a sparse gradient is densified: these updates move every row
  LOOM_RETURN_IF_ERROR(grad.Read(ctx, ctx.Input("Param"), /*densify=*/true));
  const T* g = grad.dense();
  T* p = InPlace<T>(ctx, "Param", "ParamOut");
  T* m = InPlace<T>(ctx, "Moment1", "Moment1Out");
  T* v = InPlace<T>(ctx, "Moment2", "Moment2Out");
  const T lr = Scalar<T>(ctx, "LearningRate");
  const T b1p = Scalar<T>(ctx, "Beta1Pow"), b2p = Scalar<T>(ctx, "Beta2Pow");
  const T b1 = AttrT<T>(ctx, "beta1"), b2 = AttrT<T>(ctx, "beta2"), eps = AttrT<T>(ctx, "epsilon");
  const T wd = AttrT<T>(ctx, "weight_decay");
  std::vector<T> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (T(1) - b1) * g[i];
    v[i] = b2 * v[i] + (T(1) - b2) * g[i] * g[i];
    const T mh = m[i] / (T(1) - b1p), vh = v[i] / (T(1) - b2p);
    r[i] = mh / (std::sqrt(vh) + eps) + wd * p[i];
  }
  const double pn = Norm(p, n), rn = Norm(r.data(), n);
  const T ratio = pn > 0 && rn > 0 ? static_cast<T>(pn / rn) : T(1);
  for (int64_t i = 0; i < n; ++i) p[i] -= lr * ratio * r[i];
  ctx.Output("Beta1PowOut")->mutable_data<T>(ctx.place())[0] = b1p * b1;
  ctx.Output("Beta2PowOut")->mutable_data<T>(ctx.place())[0] = b2p * b2;
  return Status::OK();
}

// local_lr = lr coeff ||p|| / (||g|| + wd ||p|| + eps) (lr when either norm is 0);
// v = mu v + local_lr (g + wd p); p -= v.
template <typename T>
Status LarsMomentumKernel(const KernelContext& ctx) {
  const int64_t n = ctx.Input("Param").numel();
  UpdateGrad<T> grad;  // a sparse gradient is densified: these updates move every row
  LOOM_RETURN_IF_ERROR(grad.Read(ctx, ctx.Input("Param"), /*densify=*/true));
  const T* g = grad.dense();
  T* p = InPlace<T>(ctx, "Param", "ParamOut");
  T* v = InPlace<T>(ctx, "Velocity", "VelocityOut");
  const T lr = Scalar<T>(ctx, "LearningRate"), mu = AttrT<T>(ctx, "mu");
  const T coeff = AttrT<T>(ctx, "lars_coeff"), wd = AttrT<T>(ctx, "lars_weight_decay");
  const T eps = AttrT<T>(ctx, "epsilon");
  const double pn = Norm(p, n), gn = Norm(g, n);
  const T local = pn > 0 && gn > 0 ? static_cast<T>(lr * coeff * pn / (gn + wd * pn + eps)) : lr;
  for (int64_t i = 0; i < n; ++i) {
    v[i] = mu * v[i] + local * (g[i] + wd * p[i]);
    p[i] -= v[i];
  }
  return Status::OK();
}

// FTRL-Proximal: new_sq = sq + g^2; lin += g - (new_sq^-k - sq^-k) / lr p (k = lr_power;
// sqrt for -0.5); p = |lin| > l1 ? (l1 sign(lin) - lin) / (new_sq^-k / lr + 2 l2) : 0.
template <typename T>
Status FtrlKernel(const KernelContext& ctx) {
  const int64_t n = ctx.Input("Param").numel();
  UpdateGrad<T> grad;  // a sparse gradient is densified: these updates move every row
  LOOM_RETURN_IF_ERROR(grad.Read(ctx, ctx.Input("Param"), /*densify=*/true));
  const T* g = grad.dense();
  T* p = InPlace<T>(ctx, "Param", "ParamOut");
  T* sq = InPlace<T>(ctx, "SquaredAccumulator", "SquaredAccumOut");
  T* lin = InPlace<T>(ctx, "LinearAccumulator", "LinearAccumOut");
  const T lr = Scalar<T>(ctx, "LearningRate");
  const T l1 = AttrT<T>(ctx, "l1"), l2 = AttrT<T>(ctx, "l2"), k = AttrT<T>(ctx, "lr_power");
  const bool half = ctx.Attr<float>("lr_power") == -0.5f;
  auto pw = [&](T x) { return half ? std::sqrt(x) : std::pow(x, -k); };
  for (int64_t i = 0; i < n; ++i) {
    const T new_sq = sq[i] + g[i] * g[i];
    lin[i] += g[i] - (pw(new_sq) - pw(sq[i])) / lr * p[i];
    const T x = l1 * (lin[i] > T(0) ? T(1) : (lin[i] < T(0) ? T(-1) : T(0))) - lin[i];
    const T y = pw(new_sq) / lr + T(2) * l2;
    p[i] = std::abs(lin[i]) > l1 ? x / y : T(0);
    sq[i] = new_sq;
  }
  return Status::OK();
}

std::function<Status(const float&)> Above0(const char* name) {
  return [name](const float& v) {
    return v > 0 ? Status::OK() : InvalidArgument(name, " must be > 0, got ", v);
  };
}
std::function<Status(const float&)> InUnit(const char* name) {
  return [name](const float& v) {
    return v >= 0 && v < 1 ? Status::OK() : InvalidArgument(name, " must be in [0, 1), got ", v);
  };
}

#define LOOM_UPDATE_KERNELS(fn) \
  Kernel(Place::kCPU, proto::FP32, fn<float>).Kernel(Place::kCPU, proto::FP64, fn<double>)

}  // namespace

LOOM_REGISTER_OP(adagrad)
    .Doc("Adagrad: Moment += Grad^2; Param -= lr * Grad / (sqrt(Moment) + epsilon).")
    .Input("Param", "parameter")
    .Input("Grad", "its gradient")
    .Input("Moment", "sum of squared gradients")
    .Input("LearningRate", "learning rate, one element")
    .Output("ParamOut", "updated parameter (the Param var)")
    .Output("MomentOut", "updated moment (the Moment var)")
    .Attr<float>("epsilon", 1e-6f, "numerical stabilizer", Above0("epsilon"))
    .InferShape([](InferShapeContext* c) {
      return InferUpdate(c, {{"Moment", "MomentOut"}}, {{"LearningRate", nullptr}});
    })
    .Kernel(Place::kCPU, proto::FP32, AdagradKernel<float, false>)
    .Kernel(Place::kCPU, proto::FP64, AdagradKernel<double, false>);

LOOM_REGISTER_OP(decayed_adagrad)
    .Doc(
        "Decayed Adagrad: Moment = decay * Moment + (1 - decay) * Grad^2; Param -= lr * Grad / "
        "(sqrt(Moment) + epsilon).")
    .Input("Param", "parameter")
    .Input("Grad", "its gradient")
    .Input("Moment", "decayed average of squared gradients")
    .Input("LearningRate", "learning rate, one element")
    .Output("ParamOut", "updated parameter (the Param var)")
    .Output("MomentOut", "updated moment (the Moment var)")
    .Attr<float>("decay", 0.95f, "decay of the moment", InUnit("decay"))
    .Attr<float>("epsilon", 1e-6f, "numerical stabilizer", Above0("epsilon"))
    .InferShape([](InferShapeContext* c) {
      return InferUpdate(c, {{"Moment", "MomentOut"}}, {{"LearningRate", nullptr}});
    })
    .Kernel(Place::kCPU, proto::FP32, AdagradKernel<float, true>)
    .Kernel(Place::kCPU, proto::FP64, AdagradKernel<double, true>);

LOOM_REGISTER_OP(rmsprop)
    .Doc(
        "RMSProp: MeanSquare = decay * MeanSquare + (1 - decay) * Grad^2 (centered: also "
        "MeanGrad, and MeanSquare - MeanGrad^2 below); Moment = momentum * Moment + lr * Grad "
        "/ sqrt(MeanSquare + epsilon); Param -= Moment.")
    .Input("Param", "parameter")
    .Input("Grad", "its gradient")
    .Input("MeanSquare", "decayed average of squared gradients")
    .Input("MeanGrad", "decayed average of gradients (centered only)", false, true)
    .Input("Moment", "momentum accumulator")
    .Input("LearningRate", "learning rate, one element")
    .Output("ParamOut", "updated parameter (the Param var)")
    .Output("MeanSquareOut", "the MeanSquare var")
    .Output("MeanGradOut", "the MeanGrad var (centered only)", false, true)
    .Output("MomentOut", "the Moment var")
    .Attr<float>("epsilon", 1e-10f, "numerical stabilizer", Above0("epsilon"))
    .Attr<float>("decay", 0.9f, "decay of the averages (Fluid's rho)", InUnit("decay"))
    .Attr<float>("momentum", 0.0f, "momentum", InUnit("momentum"))
    .Attr<bool>("centered", false, "normalize by the variance estimate instead")
    .InferShape([](InferShapeContext* c) {
      return InferUpdate(
          c,
          {{"MeanSquare", "MeanSquareOut"}, {"MeanGrad", "MeanGradOut"}, {"Moment", "MomentOut"}},
          {{"LearningRate", nullptr}});
    })
    .LOOM_UPDATE_KERNELS(RmspropKernel);

LOOM_REGISTER_OP(adamax)
    .Doc(
        "Adamax: Moment = beta1 * Moment + (1 - beta1) * Grad; InfNorm = max(beta2 * InfNorm + "
        "epsilon, |Grad|); Param -= lr / (1 - Beta1Pow) * Moment / InfNorm; Beta1Pow advances.")
    .Input("Param", "parameter")
    .Input("Grad", "its gradient")
    .Input("LearningRate", "learning rate, one element")
    .Input("Moment", "first moment")
    .Input("InfNorm", "exponentially weighted infinity norm")
    .Input("Beta1Pow", "beta1^t, one element")
    .Output("ParamOut", "updated parameter")
    .Output("MomentOut", "the Moment var")
    .Output("InfNormOut", "the InfNorm var")
    .Output("Beta1PowOut", "beta1^(t+1)")
    .Attr<float>("beta1", 0.9f, "decay of the moment", InUnit("beta1"))
    .Attr<float>("beta2", 0.999f, "decay of the infinity norm", InUnit("beta2"))
    .Attr<float>("epsilon", 1e-8f, "numerical stabilizer", Above0("epsilon"))
    .InferShape([](InferShapeContext* c) {
      return InferUpdate(c, {{"Moment", "MomentOut"}, {"InfNorm", "InfNormOut"}},
                         {{"LearningRate", nullptr}, {"Beta1Pow", "Beta1PowOut"}});
    })
    .LOOM_UPDATE_KERNELS(AdamaxKernel);

LOOM_REGISTER_OP(adadelta)
    .Doc(
        "Adadelta (Fluid 1.x: no learning rate): AvgSquaredGrad = rho * it + (1 - rho) * Grad^2; "
        "update = -sqrt((AvgSquaredUpdate + epsilon) / (AvgSquaredGrad + epsilon)) * Grad; "
        "AvgSquaredUpdate = rho * it + (1 - rho) * update^2; Param += update.")
    .Input("Param", "parameter")
    .Input("Grad", "its gradient")
    .Input("AvgSquaredGrad", "decayed average of squared gradients")
    .Input("AvgSquaredUpdate", "decayed average of squared updates")
    .Output("ParamOut", "updated parameter")
    .Output("AvgSquaredGradOut", "the AvgSquaredGrad var")
    .Output("AvgSquaredUpdateOut", "the AvgSquaredUpdate var")
    .Attr<float>("rho", 0.95f, "decay of the averages", InUnit("rho"))
    .Attr<float>("epsilon", 1e-6f, "numerical stabilizer", Above0("epsilon"))
    .InferShape([](InferShapeContext* c) {
      return InferUpdate(
          c, {{"AvgSquaredGrad", "AvgSquaredGradOut"}, {"AvgSquaredUpdate", "AvgSquaredUpdateOut"}},
          {});
    })
    .LOOM_UPDATE_KERNELS(AdadeltaKernel);

LOOM_REGISTER_OP(lamb)
    .Doc(
        "LAMB: Adam's moments; r = m_hat / (sqrt(v_hat) + epsilon) + weight_decay * Param; "
        "Param -= lr * (||Param|| / ||r||) * r (ratio 1 when a norm is 0); the beta powers "
        "advance.")
    .Input("Param", "parameter")
    .Input("Grad", "its gradient")
    .Input("LearningRate", "learning rate, one element")
    .Input("Moment1", "first moment")
    .Input("Moment2", "second moment")
    .Input("Beta1Pow", "beta1^t, one element")
    .Input("Beta2Pow", "beta2^t, one element")
    .Output("ParamOut", "updated parameter")
    .Output("Moment1Out", "the Moment1 var")
    .Output("Moment2Out", "the Moment2 var")
    .Output("Beta1PowOut", "beta1^(t+1)")
    .Output("Beta2PowOut", "beta2^(t+1)")
    .Attr<float>("beta1", 0.9f, "decay of the first moment", InUnit("beta1"))
    .Attr<float>("beta2", 0.999f, "decay of the second moment", InUnit("beta2"))
    .Attr<float>("epsilon", 1e-6f, "numerical stabilizer", Above0("epsilon"))
    .Attr<float>("weight_decay", 0.01f, "decoupled weight decay")
    .InferShape([](InferShapeContext* c) {
      return InferUpdate(
          c, {{"Moment1", "Moment1Out"}, {"Moment2", "Moment2Out"}},
          {{"LearningRate", nullptr}, {"Beta1Pow", "Beta1PowOut"}, {"Beta2Pow", "Beta2PowOut"}});
    })
    .LOOM_UPDATE_KERNELS(LambKernel);

LOOM_REGISTER_OP(lars_momentum)
    .Doc(
        "LARS momentum: local_lr = lr * lars_coeff * ||Param|| / (||Grad|| + lars_weight_decay "
        "* ||Param|| + epsilon) (lr when a norm is 0); Velocity = mu * Velocity + local_lr * "
        "(Grad + lars_weight_decay * Param); Param -= Velocity.")
    .Input("Param", "parameter")
    .Input("Grad", "its gradient")
    .Input("Velocity", "velocity accumulator")
    .Input("LearningRate", "learning rate, one element")
    .Output("ParamOut", "updated parameter")
    .Output("VelocityOut", "the Velocity var")
    .Attr<float>("mu", 0.0001f, "momentum")
    .Attr<float>("lars_coeff", 0.001f, "trust coefficient")
    .Attr<float>("lars_weight_decay", 0.0005f, "weight decay")
    .Attr<float>("epsilon", 0.0f, "added to the local rate's denominator")
    .InferShape([](InferShapeContext* c) {
      return InferUpdate(c, {{"Velocity", "VelocityOut"}}, {{"LearningRate", nullptr}});
    })
    .LOOM_UPDATE_KERNELS(LarsMomentumKernel);

LOOM_REGISTER_OP(ftrl)
    .Doc(
        "FTRL-Proximal with L1/L2: SquaredAccumulator += Grad^2, LinearAccumulator += Grad - "
        "(new_sq^-lr_power - sq^-lr_power) / lr * Param; Param = |lin| > l1 ? (l1 sign(lin) - "
        "lin) / (new_sq^-lr_power / lr + 2 l2) : 0.")
    .Input("Param", "parameter")
    .Input("Grad", "its gradient")
    .Input("SquaredAccumulator", "sum of squared gradients")
    .Input("LinearAccumulator", "linear accumulator")
    .Input("LearningRate", "learning rate, one element")
    .Output("ParamOut", "updated parameter")
    .Output("SquaredAccumOut", "the SquaredAccumulator var")
    .Output("LinearAccumOut", "the LinearAccumulator var")
    .Attr<float>("l1", 0.0f, "L1 regularization strength")
    .Attr<float>("l2", 0.0f, "L2 regularization strength")
    .Attr<float>("lr_power", -0.5f, "the learning rate's power (-0.5: 1 / sqrt)")
    .InferShape([](InferShapeContext* c) {
      return InferUpdate(
          c, {{"SquaredAccumulator", "SquaredAccumOut"}, {"LinearAccumulator", "LinearAccumOut"}},
          {{"LearningRate", nullptr}});
    })
    .LOOM_UPDATE_KERNELS(FtrlKernel);

}  // namespace loom::ops
