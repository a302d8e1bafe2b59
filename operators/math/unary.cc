// Element-wise unary ops: one table entry per op (forward f(x) and derivative f'(x, y)), from
// which the op, its grad op and CPU kernels are registered. Grad ops read X and Out.
#include <cmath>

#include "operators/common.h"
#include "operators/math/unary_attrs.h"

namespace loom::ops {
namespace {

template <typename T>
using UnaryFn = T (*)(T x, const UnaryAttrs& a);
template <typename T>
using UnaryGradFn = T (*)(T x, T y, const UnaryAttrs& a);  // dy/dx at x (y = f(x))

template <typename T, UnaryFn<T> F>
Status Forward(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  UnaryAttrs a = ReadUnaryAttrs(ctx.Attrs());
  const T* in = x.data<T>();
  T* o = ctx.Output("Out")->mutable_data<T>(ctx.place());
  for (int64_t i = 0, i_end = x.numel(); i < i_end; ++i) o[i] = F(in[i], a);
  return Status::OK();
}

template <typename T, UnaryGradFn<T> G>
Status Backward(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& x = ctx.Input("X");
  UnaryAttrs a = ReadUnaryAttrs(ctx.Attrs());
  const T* in = x.data<T>();
  const T* y = ctx.Input("Out").data<T>();
  const T* g = ctx.Input("Out@GRAD").data<T>();
  T* o = dx->mutable_data<T>(ctx.place());
  for (int64_t i = 0, i_end = x.numel(); i < i_end; ++i) o[i] = g[i] * G(in[i], y[i], a);
  return Status::OK();
}

// clang-format off
template <typename T> T Sigmoid(T x, const UnaryAttrs&) { return T(1) / (T(1) + std::exp(-x)); }
template <typename T> T SigmoidD(T, T y, const UnaryAttrs&) { return y * (T(1) - y); }
template <typename T> T Tanh(T x, const UnaryAttrs&) { return std::tanh(x); }
template <typename T> T TanhD(T, T y, const UnaryAttrs&) { return T(1) - y * y; }
template <typename T> T Exp(T x, const UnaryAttrs&) { return std::exp(x); }
template <typename T> T ExpD(T, T y, const UnaryAttrs&) { return y; }
template <typename T> T Log(T x, const UnaryAttrs&) { return std::log(x); }
template <typename T> T LogD(T x, T, const UnaryAttrs&) { return T(1) / x; }
template <typename T> T Sqrt(T x, const UnaryAttrs&) { return std::sqrt(x); }
template <typename T> T SqrtD(T, T y, const UnaryAttrs&) { return T(0.5) / y; }
template <typename T> T Square(T x, const UnaryAttrs&) { return x * x; }
template <typename T> T SquareD(T x, T, const UnaryAttrs&) { return T(2) * x; }
template <typename T> T Abs(T x, const UnaryAttrs&) { return std::abs(x); }
template <typename T> T AbsD(T x, T, const UnaryAttrs&) {
  return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
}
template <typename T> T LeakyRelu(T x, const UnaryAttrs& a) {
  return x > T(0) ? x : T(a.alpha) * x;
}
template <typename T> T LeakyReluD(T x, T, const UnaryAttrs& a) {
  return x > T(0) ? T(1) : T(a.alpha);
}
template <typename T> T Clip(T x, const UnaryAttrs& a) {
  return std::min(std::max(x, T(a.min)), T(a.max));
}
template <typename T> T ClipD(T x, T, const UnaryAttrs& a) {
  return x >= T(a.min) && x <= T(a.max) ? T(1) : T(0);
}
// GELU, exact form: x * Phi(x).
template <typename T> T Gelu(T x, const UnaryAttrs&) {
  return T(0.5) * x * (T(1) + std::erf(x / std::sqrt(T(2))));
}
template <typename T> T GeluD(T x, T, const UnaryAttrs&) {
  T cdf = T(0.5) * (T(1) + std::erf(x / std::sqrt(T(2))));
  T pdf = std::exp(T(-0.5) * x * x) / std::sqrt(T(2) * T(M_PI));
  return cdf + x * pdf;
}
// Piecewise-constant rounding: gradient 0 (as Fluid's floor / ceil / round).
template <typename T> T Floor(T x, const UnaryAttrs&) { return std::floor(x); }
template <typename T> T Ceil(T x, const UnaryAttrs&) { return std::ceil(x); }
template <typename T> T Round(T x, const UnaryAttrs&) { return std::round(x); }
template <typename T> T ZeroD(T, T, const UnaryAttrs&) { return T(0); }
template <typename T> T Cos(T x, const UnaryAttrs&) { return std::cos(x); }
template <typename T> T CosD(T x, T, const UnaryAttrs&) { return -std::sin(x); }
template <typename T> T Sin(T x, const UnaryAttrs&) { return std::sin(x); }
template <typename T> T SinD(T x, T, const UnaryAttrs&) { return std::cos(x); }
template <typename T> T Reciprocal(T x, const UnaryAttrs&) { return T(1) / x; }
template <typename T> T ReciprocalD(T, T y, const UnaryAttrs&) { return -y * y; }
template <typename T> T Rsqrt(T x, const UnaryAttrs&) { return T(1) / std::sqrt(x); }
template <typename T> T RsqrtD(T, T y, const UnaryAttrs&) { return T(-0.5) * y * y * y; }
// softplus = ln(1 + e^x), computed without overflow for large x.
template <typename T> T Softplus(T x, const UnaryAttrs&) {
  return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}
template <typename T> T SoftplusD(T x, T, const UnaryAttrs&) {
  return T(1) / (T(1) + std::exp(-x));
}
template <typename T> T Softsign(T x, const UnaryAttrs&) { return x / (T(1) + std::abs(x)); }
template <typename T> T SoftsignD(T x, T, const UnaryAttrs&) {
  const T d = T(1) + std::abs(x);
  return T(1) / (d * d);
}
// clang-format on

Status UnaryGradInferShape(InferShapeContext* ctx) {
  ctx->ShareDimAndDtype("X", "X@GRAD");
  return Status::OK();
}

std::vector<proto::OpDesc> UnaryGradMaker(const OpDesc& fwd) {
  proto::OpDesc g = MakeDefaultGradOp(fwd);
  return {g};
}

// A SelectedRows X (a sparse gradient): its rows merged, then clipped (as Fluid's clip of a
// SelectedRows; the rows it does not hold stay absent).
template <typename T>
Status ClipKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(bool sparse, ApplyToMergedRows(ctx, [&](Tensor* v) {
                          const UnaryAttrs a = ReadUnaryAttrs(ctx.Attrs());
                          T* x = v->data<T>();
                          for (int64_t i = 0, n = v->numel(); i < n; ++i) x[i] = Clip<T>(x[i], a);
                          return Status::OK();
                        }));
  return sparse ? Status::OK() : Forward<T, Clip<T>>(ctx);
}

Status ClipCheck(InferShapeContext* ctx) {
  if (ctx->Attr<float>("min") > ctx->Attr<float>("max"))
    return ctx->Error("attribute min (", ctx->Attr<float>("min"), ") > max (",
                      ctx->Attr<float>("max"), ")");
  return SameShapeInferShape(ctx);
}

// Declares op NAME and NAME_grad with fp32/fp64 CPU kernels from F and D.
#define LOOM_UNARY_OP(NAME, F, D, DOC)                               \
  LOOM_REGISTER_OP(NAME)                                             \
      .Doc(DOC)                                                      \
      .Input("X", "input")                                           \
      .Output("Out", "output, same dims as X")                       \
      .InferShape(SameShapeInferShape)                               \
      .GradMaker(UnaryGradMaker)                                     \
      .Kernel(Place::kCPU, proto::FP32, Forward<float, F<float>>)    \
      .Kernel(Place::kCPU, proto::FP64, Forward<double, F<double>>); \
  LOOM_REGISTER_OP(NAME##_grad)                                      \
      .Doc("gradient of " #NAME)                                     \
      .Input("X", "forward input")                                   \
      .Input("Out", "forward output")                                \
      .Input("Out@GRAD", "gradient of Out")                          \
      .Output("X@GRAD", "gradient of X", false, true)                \
      .InferShape(UnaryGradInferShape)                               \
      .Kernel(Place::kCPU, proto::FP32, Backward<float, D<float>>)   \
      .Kernel(Place::kCPU, proto::FP64, Backward<double, D<double>>)

LOOM_UNARY_OP(sigmoid, Sigmoid, SigmoidD, "Out = 1 / (1 + exp(-X)).");
LOOM_UNARY_OP(tanh, Tanh, TanhD, "Out = tanh(X).");
LOOM_UNARY_OP(exp, Exp, ExpD, "Out = exp(X).");
LOOM_UNARY_OP(log, Log, LogD, "Out = ln(X).");
LOOM_UNARY_OP(sqrt, Sqrt, SqrtD, "Out = sqrt(X).");
LOOM_UNARY_OP(square, Square, SquareD, "Out = X * X.");
LOOM_UNARY_OP(abs, Abs, AbsD, "Out = |X| (gradient 0 at 0).");
LOOM_UNARY_OP(gelu, Gelu, GeluD, "Out = X * Phi(X), Phi the standard normal CDF.");
LOOM_UNARY_OP(floor, Floor, ZeroD, "Out = floor(X) (gradient 0).");
LOOM_UNARY_OP(ceil, Ceil, ZeroD, "Out = ceil(X) (gradient 0).");
LOOM_UNARY_OP(round, Round, ZeroD, "Out = X rounded half away from zero (gradient 0).");
LOOM_UNARY_OP(cos, Cos, CosD, "Out = cos(X).");
LOOM_UNARY_OP(sin, Sin, SinD, "Out = sin(X).");
LOOM_UNARY_OP(reciprocal, Reciprocal, ReciprocalD, "Out = 1 / X.");
LOOM_UNARY_OP(rsqrt, Rsqrt, RsqrtD, "Out = 1 / sqrt(X).");
LOOM_UNARY_OP(softplus, Softplus, SoftplusD, "Out = ln(1 + exp(X)).");
LOOM_UNARY_OP(softsign, Softsign, SoftsignD, "Out = X / (1 + |X|).");

LOOM_REGISTER_OP(leaky_relu)
    .Doc("Out = X if X > 0 else alpha * X.")
    .Input("X", "input")
    .Output("Out", "output, same dims as X")
    .Attr<float>("alpha", 0.02f, "slope for negative inputs")
    .InferShape(SameShapeInferShape)
    .GradMaker(UnaryGradMaker)
    .Kernel(Place::kCPU, proto::FP32, Forward<float, LeakyRelu<float>>)
    .Kernel(Place::kCPU, proto::FP64, Forward<double, LeakyRelu<double>>);
LOOM_REGISTER_OP(leaky_relu_grad)
    .Doc("gradient of leaky_relu")
    .Input("X", "forward input")
    .Input("Out", "forward output")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("leaky_relu")
    .InferShape(UnaryGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, Backward<float, LeakyReluD<float>>)
    .Kernel(Place::kCPU, proto::FP64, Backward<double, LeakyReluD<double>>);

LOOM_REGISTER_OP(clip)
    .Doc("Out = min(max(X, min), max) (a SelectedRows X: its merged rows clipped).")
    .Input("X", "input")
    .Output("Out", "output, same dims as X")
    .RequiredAttr<float>("min", "lower bound")
    .RequiredAttr<float>("max", "upper bound")
    .InferVarType(SameVarType)
    .InferShape(ClipCheck)
    .GradMaker(UnaryGradMaker)
    .Kernel(Place::kCPU, proto::FP32, ClipKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, ClipKernel<double>);
LOOM_REGISTER_OP(clip_grad)
    .Doc("gradient of clip: passes where min <= X <= max")
    .Input("X", "forward input")
    .Input("Out", "forward output")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("clip")
    .InferShape(UnaryGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, Backward<float, ClipD<float>>)
    .Kernel(Place::kCPU, proto::FP64, Backward<double, ClipD<double>>);

}  // namespace
}  // namespace loom::ops
