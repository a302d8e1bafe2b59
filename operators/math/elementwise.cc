// elementwise_{add,sub,mul,div,max,min,pow} with Fluid's broadcast rule, and their gradients.
#include <cmath>
#include <type_traits>

#include "operators/math/elementwise.h"

namespace loom::ops {

StatusOr<BroadcastPlan> PlanBroadcast(const DDim& x, const DDim& y, int axis) {
  BroadcastPlan plan;
  if (x == y) {
    plan.same_shape = true;
    plan.n = x.numel();
    return plan;
  }
  if (y.known() && y.numel() == 1) {  // a one-element Y is a scalar for every X
    plan.pre = x.numel();
    return plan;
  }
  DDim yt = y;
  while (yt.size() > 1 && yt[yt.size() - 1] == 1) yt.resize(yt.size() - 1);
  if (axis == -1) axis = x.size() - yt.size();
  if (yt.size() > x.size() || axis < 0 || axis + yt.size() > x.size())
    return InvalidArgument("cannot broadcast dims ", y.ToString(), " onto ", x.ToString(),
                           " at axis ", axis);
  for (int i = 0; i < yt.size(); ++i) {
    if (x[axis + i] >= 0 && yt[i] >= 0 && x[axis + i] != yt[i])
      return InvalidArgument("cannot broadcast dims ", y.ToString(), " onto ", x.ToString(),
                             " at axis ", axis, ": dim ", i, " is ", yt[i], ", expected ",
                             x[axis + i]);
  }
  plan.pre = x.product(0, axis);
  plan.n = yt.numel();
  plan.post = x.product(axis + yt.size(), x.size());
  return plan;
}

Status ElementwiseInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X"), y = ctx->InputDim("Y");
  if (ctx->InputDtype("X") != ctx->InputDtype("Y"))
    return ctx->Error("X (var '", ctx->InputVarName("X"), "') is ",
                      DataTypeName(ctx->InputDtype("X")), " but Y (var '", ctx->InputVarName("Y"),
                      "') is ", DataTypeName(ctx->InputDtype("Y")));
  auto plan = PlanBroadcast(x, y, ctx->Attr<int>("axis"));
  if (!plan.ok())
    return ctx->Error(ctx->DescribeInput("Y"), " vs ", ctx->DescribeInput("X"), ": ",
                      plan.status().message());
  ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

namespace {

// Each functor gives f(x, y) and the partial derivatives given x, y and out = f(x, y).
struct AddF {
  template <typename T>
  static T F(T x, T y) {
    return x + y;
  }
  template <typename T>
  static T Dx(T, T, T) {
    return T(1);
  }
  template <typename T>
  static T Dy(T, T, T) {
    return T(1);
  }
};
struct SubF {
  template <typename T>
  static T F(T x, T y) {
    return x - y;
  }
  template <typename T>
  static T Dx(T, T, T) {
    return T(1);
  }
  template <typename T>
  static T Dy(T, T, T) {
    return T(-1);
  }
};
struct MulF {
  template <typename T>
  static T F(T x, T y) {
    return x * y;
  }
  template <typename T>
  static T Dx(T, T y, T) {
    return y;
  }
  template <typename T>
  static T Dy(T x, T, T) {
    return x;
  }
};
struct DivF {
  template <typename T>
  static T F(T x, T y) {
    if constexpr (std::is_integral_v<T>) {
      // x / -1 is -x, wrapping for the most negative value (INT_MIN / -1 traps in hardware).
      if (y == -1) return static_cast<T>(std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(x));
    }
    return x / y;
  }
  template <typename T>
  static T Dx(T, T y, T) {
    return T(1) / y;
  }
  template <typename T>
  static T Dy(T, T y, T out) {
    return -out / y;
  }
};
// Ties send the gradient to Y for max and to X for min (as Fluid does).
struct MaxF {
  template <typename T>
  static T F(T x, T y) {
    return x > y ? x : y;
  }
  template <typename T>
  static T Dx(T x, T y, T) {
    return x > y ? T(1) : T(0);
  }
  template <typename T>
  static T Dy(T x, T y, T) {
    return x > y ? T(0) : T(1);
  }
};
struct MinF {
  template <typename T>
  static T F(T x, T y) {
    return x < y ? x : y;
  }
  template <typename T>
  static T Dx(T x, T y, T) {
    return x <= y ? T(1) : T(0);
  }
  template <typename T>
  static T Dy(T x, T y, T) {
    return x <= y ? T(0) : T(1);
  }
};
struct PowF {
  template <typename T>
  static T F(T x, T y) {
    if constexpr (std::is_integral_v<T>) {
      // Exact, wrapping on overflow (as numpy); y >= 0 (CheckIntegerOperands).
      std::make_unsigned_t<T> base = x, r = 1;
      for (T e = y; e > 0; e >>= 1) {
        if (e & 1) r *= base;
        base *= base;
      }
      return static_cast<T>(r);
    }
    return static_cast<T>(std::pow(x, y));
  }
  template <typename T>
  static T Dx(T x, T y, T) {
    return static_cast<T>(y * std::pow(x, y - T(1)));
  }
  template <typename T>
  static T Dy(T x, T, T out) {
    return static_cast<T>(out * std::log(x));
  }
};

// Integer operands without a defined result are an error, never a trap: division by zero
// (Paddle raises), a negative integer power (numpy raises).
template <typename Fn, typename T>
Status CheckIntegerOperands(const KernelContext& ctx, const T* y, int64_t n) {
  if constexpr (std::is_integral_v<T> && std::is_same_v<Fn, DivF>) {
    for (int64_t i = 0; i < n; ++i)
      if (y[i] == 0) return ctx.Error("integer division by zero: Y's element ", i, " is 0");
  }
  if constexpr (std::is_integral_v<T> && std::is_same_v<Fn, PowF>) {
    for (int64_t i = 0; i < n; ++i)
      if (y[i] < 0)
        return ctx.Error("integer power with a negative exponent: Y's element ", i, " is ", y[i]);
  }
  return Status::OK();
}

template <typename Fn, typename T>
Status BinaryKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  auto plan = PlanBroadcast(x.dims(), y.dims(), ctx.Attr<int>("axis"));
  if (!plan.ok()) return ctx.Error(plan.status().message());
  const BroadcastPlan& p = plan.value();
  const T* xv = x.data<T>();
  const T* yv = y.data<T>();
  LOOM_RETURN_IF_ERROR((CheckIntegerOperands<Fn, T>(ctx, yv, y.numel())));
  T* o = ctx.Output("Out")->mutable_data<T>(ctx.place());
  if (p.same_shape) {
    for (int64_t i = 0; i < p.n; ++i) o[i] = Fn::F(xv[i], yv[i]);
    return Status::OK();
  }
  for (int64_t i = 0; i < p.pre; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      int64_t base = (i * p.n + j) * p.post;
      T b = yv[j];
      for (int64_t k = 0; k < p.post; ++k) o[base + k] = Fn::F(xv[base + k], b);
    }
  return Status::OK();
}

template <typename Fn, typename T>
Status BinaryGradKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  auto plan = PlanBroadcast(x.dims(), y.dims(), ctx.Attr<int>("axis"));
  if (!plan.ok()) return ctx.Error(plan.status().message());
  const BroadcastPlan& p = plan.value();
  const T* xv = x.data<T>();
  const T* yv = y.data<T>();
  const T* out = ctx.Input("Out").data<T>();
  const T* g = ctx.Input("Out@GRAD").data<T>();
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  Tensor* dy = ctx.OutputOrNull("Y@GRAD");
  T* dxv = dx ? dx->mutable_data<T>(ctx.place()) : nullptr;
  T* dyv = dy ? dy->mutable_data<T>(ctx.place()) : nullptr;
  int64_t pre = p.same_shape ? 1 : p.pre, post = p.same_shape ? 1 : p.post;
  if (dyv) std::fill(dyv, dyv + p.n, T(0));
  for (int64_t i = 0; i < pre; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      int64_t base = (i * p.n + j) * post;
      T acc = 0;
      for (int64_t k = 0; k < post; ++k) {
        int64_t e = base + k;
        T yj = p.same_shape ? yv[e] : yv[j];
        if (dxv) dxv[e] = g[e] * Fn::Dx(xv[e], yj, out[e]);
        acc += g[e] * Fn::Dy(xv[e], yj, out[e]);
      }
      if (dyv) dyv[j] += acc;
    }
  return Status::OK();
}

}  // namespace

// Declares elementwise_NAME and elementwise_NAME_grad.
#define LOOM_ELEMENTWISE_OP(NAME, FN, DOC)                                                 \
  LOOM_REGISTER_OP(elementwise_##NAME)                                                     \
      .Doc(DOC " Y is broadcast onto X by Fluid's axis rule.")                             \
      .Input("X", "first operand; Out has its dims")                                       \
      .Input("Y", "second operand, broadcast onto X")                                      \
      .Output("Out", "the result")                                                         \
      .Attr<int>("axis", -1, "dim of X where Y's dims start (-1: align trailing dims)")    \
      .InferShape(ElementwiseInferShape)                                                   \
      .GradMaker(DefaultGradMaker())                                                       \
      .Kernel(Place::kCPU, proto::FP32, BinaryKernel<FN, float>)                           \
      .Kernel(Place::kCPU, proto::FP64, BinaryKernel<FN, double>)                          \
      .Kernel(Place::kCPU, proto::INT32, BinaryKernel<FN, int32_t>)                        \
      .Kernel(Place::kCPU, proto::INT64, BinaryKernel<FN, int64_t>);                       \
  LOOM_REGISTER_OP(elementwise_##NAME##_grad)                                              \
      .Doc("gradient of elementwise_" #NAME "; Y@GRAD is summed over the broadcast dims.") \
      .Input("X", "forward X")                                                             \
      .Input("Y", "forward Y")                                                             \
      .Input("Out", "forward Out")                                                         \
      .Input("Out@GRAD", "gradient of Out")                                                \
      .Output("X@GRAD", "gradient of X", false, true)                                      \
      .Output("Y@GRAD", "gradient of Y", false, true)                                      \
      .AttrsFrom("elementwise_" #NAME)                                                     \
      .InferShape(GradInferShape)                                                          \
      .Kernel(Place::kCPU, proto::FP32, BinaryGradKernel<FN, float>)                       \
      .Kernel(Place::kCPU, proto::FP64, BinaryGradKernel<FN, double>)

LOOM_ELEMENTWISE_OP(add, AddF, "Out = X + Y.");
LOOM_ELEMENTWISE_OP(sub, SubF, "Out = X - Y.");
LOOM_ELEMENTWISE_OP(mul, MulF, "Out = X * Y.");
LOOM_ELEMENTWISE_OP(div, DivF, "Out = X / Y.");
LOOM_ELEMENTWISE_OP(max, MaxF, "Out = max(X, Y).");
LOOM_ELEMENTWISE_OP(min, MinF, "Out = min(X, Y).");
LOOM_ELEMENTWISE_OP(pow, PowF, "Out = X ^ Y.");

}  // namespace loom::ops
