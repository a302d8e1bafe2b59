// Fluid's other element-wise activations (beside unary.cc's table), each with its attributes
// and Fluid's defaults: elu, relu6, selu, hard_sigmoid, hard_swish, swish, softshrink,
// hard_shrink, tanh_shrink, thresholded_relu, logsigmoid, sign, erf, acos, asin, atan, brelu,
// soft_relu, stanh, pow. Forward f(x) and derivative f'(x, y) per op, as in unary.cc; the
// attributes are read only by these ops (unary.cc's hot ops keep their smaller set).
#include <cmath>

#include "operators/common.h"

namespace loom::ops {
namespace {

struct ActAttrs {
  float alpha = 0, threshold = 0, scale = 0, offset = 0, beta = 0, lambda = 0, t_min = 0, t_max = 0,
        scale_a = 0, scale_b = 0, factor = 0, slope = 0;
};

ActAttrs ReadActAttrs(const AttributeMap& attrs) {
  ActAttrs a;
  auto get = [&](const char* name, float* v) {
    if (auto it = attrs.find(name); it != attrs.end()) *v = std::get<float>(it->second);
  };
  get("alpha", &a.alpha);
  get("threshold", &a.threshold);
  get("scale", &a.scale);
  get("offset", &a.offset);
  get("beta", &a.beta);
  get("lambda", &a.lambda);
  get("t_min", &a.t_min);
  get("t_max", &a.t_max);
  get("scale_a", &a.scale_a);
  get("scale_b", &a.scale_b);
  get("factor", &a.factor);
  get("slope", &a.slope);
  return a;
}

template <typename T>
using Fn = T (*)(T x, const ActAttrs& a);
template <typename T>
using DFn = T (*)(T x, T y, const ActAttrs& a);

template <typename T, Fn<T> F>
Status Forward(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const ActAttrs a = ReadActAttrs(ctx.Attrs());
  const T* in = x.data<T>();
  T* o = ctx.Output("Out")->mutable_data<T>(ctx.place());
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = F(in[i], a);
  return Status::OK();
}

template <typename T, DFn<T> D>
Status Backward(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& x = ctx.Input("X");
  const ActAttrs a = ReadActAttrs(ctx.Attrs());
  const T* in = x.data<T>();
  const T* y = ctx.Input("Out").data<T>();
  const T* g = ctx.Input("Out@GRAD").data<T>();
  T* o = dx->mutable_data<T>(ctx.place());
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = g[i] * D(in[i], y[i], a);
  return Status::OK();
}

template <typename T>
T Sigm(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <typename T>
T Elu(T x, const ActAttrs& a) {
  return x > 0 ? x : T(a.alpha) * std::expm1(x);
}
template <typename T>
T EluD(T x, T y, const ActAttrs& a) {
  return x > 0 ? T(1) : y + T(a.alpha);
}
template <typename T>
T Relu6(T x, const ActAttrs& a) {
  return std::min(std::max(x, T(0)), T(a.threshold));
}
template <typename T>
T Relu6D(T x, T, const ActAttrs& a) {
  return x > 0 && x < T(a.threshold) ? T(1) : T(0);
}
template <typename T>
T Selu(T x, const ActAttrs& a) {
  return T(a.scale) * (x > 0 ? x : T(a.alpha) * std::expm1(x));
}
template <typename T>
T SeluD(T x, T y, const ActAttrs& a) {
  return x > 0 ? T(a.scale) : y + T(a.scale) * T(a.alpha);
}
template <typename T>
T HardSigmoid(T x, const ActAttrs& a) {
  return std::min(std::max(T(a.slope) * x + T(a.offset), T(0)), T(1));
}
template <typename T>
T HardSigmoidD(T x, T, const ActAttrs& a) {
  const T v = T(a.slope) * x + T(a.offset);
  return v > 0 && v < 1 ? T(a.slope) : T(0);
}
template <typename T>
T HardSwish(T x, const ActAttrs& a) {
  return x * std::min(std::max(x + T(a.offset), T(0)), T(a.threshold)) / T(a.scale);
}
template <typename T>
T HardSwishD(T x, T, const ActAttrs& a) {
  const T v = x + T(a.offset);
  if (v <= 0) return T(0);
  if (v >= T(a.threshold)) return T(a.threshold) / T(a.scale);
  return (T(2) * x + T(a.offset)) / T(a.scale);
}
template <typename T>
T Swish(T x, const ActAttrs& a) {
  return x * Sigm(T(a.beta) * x);
}
template <typename T>
T SwishD(T x, T, const ActAttrs& a) {
  const T s = Sigm(T(a.beta) * x);
  return s + T(a.beta) * x * s * (T(1) - s);
}
template <typename T>
T Softshrink(T x, const ActAttrs& a) {
  const T l = T(a.lambda);
  return x > l ? x - l : (x < -l ? x + l : T(0));
}
template <typename T>
T ShrinkD(T x, T, const ActAttrs& a) {
  return std::abs(x) > T(a.lambda) ? T(1) : T(0);
}
template <typename T>
T HardShrink(T x, const ActAttrs& a) {
  return std::abs(x) > T(a.threshold) ? x : T(0);
}
template <typename T>
T HardShrinkD(T x, T, const ActAttrs& a) {
  return std::abs(x) > T(a.threshold) ? T(1) : T(0);
}
template <typename T>
T TanhShrink(T x, const ActAttrs&) {
  return x - std::tanh(x);
}
template <typename T>
T TanhShrinkD(T x, T, const ActAttrs&) {
  const T t = std::tanh(x);
  return t * t;
}
template <typename T>
T ThresholdedRelu(T x, const ActAttrs& a) {
  return x > T(a.threshold) ? x : T(0);
}
template <typename T>
T ThresholdedReluD(T x, T, const ActAttrs& a) {
  return x > T(a.threshold) ? T(1) : T(0);
}
template <typename T>
T LogSigmoid(T x, const ActAttrs&) {
  // -log(1 + e^-x), without overflow for large |x|.
  return x > 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x));
}
template <typename T>
T LogSigmoidD(T x, T, const ActAttrs&) {
  return Sigm(-x);
}
template <typename T>
T Sign(T x, const ActAttrs&) {
  return x > 0 ? T(1) : (x < 0 ? T(-1) : T(0));
}
template <typename T>
T ZeroD(T, T, const ActAttrs&) {
  return T(0);
}
template <typename T>
T Erf(T x, const ActAttrs&) {
  return std::erf(x);
}
template <typename T>
T ErfD(T x, T, const ActAttrs&) {
  return T(2) / std::sqrt(T(M_PI)) * std::exp(-x * x);
}
template <typename T>
T Acos(T x, const ActAttrs&) {
  return std::acos(x);
}
template <typename T>
T AcosD(T x, T, const ActAttrs&) {
  return -T(1) / std::sqrt(T(1) - x * x);
}
template <typename T>
T Asin(T x, const ActAttrs&) {
  return std::asin(x);
}
template <typename T>
T AsinD(T x, T, const ActAttrs&) {
  return T(1) / std::sqrt(T(1) - x * x);
}
template <typename T>
T Atan(T x, const ActAttrs&) {
  return std::atan(x);
}
template <typename T>
T AtanD(T x, T, const ActAttrs&) {
  return T(1) / (T(1) + x * x);
}
template <typename T>
T Brelu(T x, const ActAttrs& a) {
  return std::min(std::max(x, T(a.t_min)), T(a.t_max));
}
template <typename T>
T BreluD(T x, T, const ActAttrs& a) {
  return x > T(a.t_min) && x < T(a.t_max) ? T(1) : T(0);
}
template <typename T>
T SoftRelu(T x, const ActAttrs& a) {
  const T t = T(a.threshold);
  return std::log1p(std::exp(std::min(std::max(x, -t), t)));
}
template <typename T>
T SoftReluD(T x, T, const ActAttrs& a) {
  const T t = T(a.threshold);
  return x > -t && x < t ? Sigm(x) : T(0);
}
template <typename T>
T Stanh(T x, const ActAttrs& a) {
  return T(a.scale_b) * std::tanh(T(a.scale_a) * x);
}
template <typename T>
T StanhD(T x, T, const ActAttrs& a) {
  const T t = std::tanh(T(a.scale_a) * x);
  return T(a.scale_a) * T(a.scale_b) * (T(1) - t * t);
}
template <typename T>
T Pow(T x, const ActAttrs& a) {
  return std::pow(x, T(a.factor));
}
template <typename T>
T PowD(T x, T, const ActAttrs& a) {
  return T(a.factor) * std::pow(x, T(a.factor) - T(1));
}

Status ActGradInferShape(InferShapeContext* ctx) {
  ctx->ShareDimAndDtype("X", "X@GRAD");
  return Status::OK();
}

std::vector<proto::OpDesc> ActGradMaker(const OpDesc& fwd) { return {MakeDefaultGradOp(fwd)}; }

}  // namespace

// Op NAME (with the attributes ATTRS, a chain of .Attr<float>(...) calls) and NAME_grad.
#define LOOM_ACT_OP(NAME, F, D, DOC, ATTRS)                                          \
  LOOM_REGISTER_OP(NAME)                                                             \
      .Doc(DOC)                                                                      \
      .Input("X", "input")                                                           \
      .Output("Out", "output, same dims as X") ATTRS.InferShape(SameShapeInferShape) \
      .GradMaker(ActGradMaker)                                                       \
      .Kernel(Place::kCPU, proto::FP32, Forward<float, F<float>>)                    \
      .Kernel(Place::kCPU, proto::FP64, Forward<double, F<double>>);                 \
  LOOM_REGISTER_OP(NAME##_grad)                                                      \
      .Doc("gradient of " #NAME)                                                     \
      .Input("X", "forward input")                                                   \
      .Input("Out", "forward output")                                                \
      .Input("Out@GRAD", "gradient of Out")                                          \
      .Output("X@GRAD", "gradient of X", false, true)                                \
      .AttrsFrom(#NAME)                                                              \
      .InferShape(ActGradInferShape)                                                 \
      .Kernel(Place::kCPU, proto::FP32, Backward<float, D<float>>)                   \
      .Kernel(Place::kCPU, proto::FP64, Backward<double, D<double>>)

#define NO_ATTRS

LOOM_ACT_OP(elu, Elu, EluD, "Out = X if X > 0 else alpha * (exp(X) - 1).",
            .Attr<float>("alpha", 1.0f, "scale of the negative part"));
LOOM_ACT_OP(relu6, Relu6, Relu6D, "Out = min(max(X, 0), threshold).",
            .Attr<float>("threshold", 6.0f, "the upper bound"));
LOOM_ACT_OP(selu, Selu, SeluD, "Out = scale * (X if X > 0 else alpha * (exp(X) - 1)).",
            .Attr<float>("scale", 1.0507009873554804934f, "scale")
                .Attr<float>("alpha", 1.6732632423543772848f, "alpha"));
LOOM_ACT_OP(hard_sigmoid, HardSigmoid, HardSigmoidD, "Out = min(max(slope * X + offset, 0), 1).",
            .Attr<float>("slope", 0.2f, "slope").Attr<float>("offset", 0.5f, "offset"));
LOOM_ACT_OP(hard_swish, HardSwish, HardSwishD,
            "Out = X * min(max(X + offset, 0), threshold) / scale.",
            .Attr<float>("threshold", 6.0f, "threshold")
                .Attr<float>("scale", 6.0f, "scale")
                .Attr<float>("offset", 3.0f, "offset"));
LOOM_ACT_OP(swish, Swish, SwishD, "Out = X * sigmoid(beta * X).",
            .Attr<float>("beta", 1.0f, "beta"));
LOOM_ACT_OP(softshrink, Softshrink, ShrinkD,
            "Out = X - lambda if X > lambda, X + lambda if X < -lambda, else 0.",
            .Attr<float>("lambda", 0.5f, "the threshold"));
LOOM_ACT_OP(hard_shrink, HardShrink, HardShrinkD, "Out = X if |X| > threshold else 0.",
            .Attr<float>("threshold", 0.5f, "the threshold"));
LOOM_ACT_OP(tanh_shrink, TanhShrink, TanhShrinkD, "Out = X - tanh(X).", NO_ATTRS);
LOOM_ACT_OP(thresholded_relu, ThresholdedRelu, ThresholdedReluD, "Out = X if X > threshold else 0.",
            .Attr<float>("threshold", 1.0f, "threshold"));
LOOM_ACT_OP(logsigmoid, LogSigmoid, LogSigmoidD, "Out = log(sigmoid(X)).", NO_ATTRS);
LOOM_ACT_OP(sign, Sign, ZeroD, "Out = 1, 0 or -1 by the sign of X (gradient 0).", NO_ATTRS);
LOOM_ACT_OP(erf, Erf, ErfD, "Out = erf(X).", NO_ATTRS);
LOOM_ACT_OP(acos, Acos, AcosD, "Out = arccos(X).", NO_ATTRS);
LOOM_ACT_OP(asin, Asin, AsinD, "Out = arcsin(X).", NO_ATTRS);
LOOM_ACT_OP(atan, Atan, AtanD, "Out = arctan(X).", NO_ATTRS);
LOOM_ACT_OP(brelu, Brelu, BreluD, "Out = min(max(X, t_min), t_max).",
            .Attr<float>("t_min", 0.0f, "lower bound").Attr<float>("t_max", 24.0f, "upper bound"));
LOOM_ACT_OP(soft_relu, SoftRelu, SoftReluD, "Out = log(1 + exp(clip(X, -threshold, threshold))).",
            .Attr<float>("threshold", 40.0f, "the clip bound"));
LOOM_ACT_OP(
    stanh, Stanh, StanhD, "Out = scale_b * tanh(scale_a * X).",
    .Attr<float>("scale_a", 0.67f, "inner scale").Attr<float>("scale_b", 1.7159f, "outer scale"));
LOOM_ACT_OP(pow, Pow, PowD, "Out = X ^ factor.", .Attr<float>("factor", 1.0f, "the exponent"));

}  // namespace loom::ops
