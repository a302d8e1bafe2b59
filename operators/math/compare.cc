// Comparison ops less_than, less_equal, greater_than, greater_equal, equal, not_equal (Y
// broadcast onto X by Fluid's elementwise rule; Out is bool with X's dims) and the logical ops
// logical_and, logical_or, logical_xor, logical_not on bool tensors. They have no gradient: a
// comparison is piecewise constant, and a bool is never trainable, so backward stops at them.
// Their usual consumer is conditional_block's Cond.
#include "operators/math/compare.h"
#include "operators/math/elementwise.h"

namespace loom::ops {

namespace {

Status CompareInferShape(InferShapeContext* ctx) {
  if (ctx->InputDtype("X") != ctx->InputDtype("Y"))
    return ctx->Error(ctx->DescribeInput("X"), " is ", DataTypeName(ctx->InputDtype("X")), " but ",
                      ctx->DescribeInput("Y"), " is ", DataTypeName(ctx->InputDtype("Y")));
  auto plan = PlanBroadcast(ctx->InputDim("X"), ctx->InputDim("Y"), ctx->Attr<int>("axis"));
  if (!plan.ok())
    return ctx->Error(ctx->DescribeInput("Y"), " vs ", ctx->DescribeInput("X"), ": ",
                      plan.status().message());
  ctx->SetOutputDim("Out", ctx->InputDim("X"));
  ctx->SetOutputDtype("Out", proto::BOOL);
  return Status::OK();
}

Status LogicalNotInferShape(InferShapeContext* ctx) {
  if (ctx->InputDtype("X") != proto::BOOL)
    return ctx->Error(ctx->DescribeInput("X"), " is ", DataTypeName(ctx->InputDtype("X")),
                      ", expected bool");
  ctx->SetOutputDim("Out", ctx->InputDim("X"));
  ctx->SetOutputDtype("Out", proto::BOOL);
  return Status::OK();
}

Status LogicalInferShape(InferShapeContext* ctx) {
  LOOM_RETURN_IF_ERROR(LogicalNotInferShape(ctx));
  if (ctx->InputDtype("Y") != proto::BOOL)
    return ctx->Error(ctx->DescribeInput("Y"), " is ", DataTypeName(ctx->InputDtype("Y")),
                      ", expected bool");
  return CompareInferShape(ctx);
}

template <typename Fn, typename T>
Status PredicateKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  auto plan = PlanBroadcast(x.dims(), y.dims(), ctx.Attr<int>("axis"));
  if (!plan.ok()) return ctx.Error(plan.status().message());
  const BroadcastPlan& p = plan.value();
  const T* xv = x.data<T>();
  const T* yv = y.data<T>();
  bool* o = ctx.Output("Out")->mutable_data<bool>(ctx.place());
  if (p.same_shape) {
    for (int64_t i = 0; i < p.n; ++i) o[i] = Fn::F(xv[i], yv[i]);
    return Status::OK();
  }
  for (int64_t i = 0; i < p.pre; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      int64_t base = (i * p.n + j) * p.post;
      for (int64_t k = 0; k < p.post; ++k) o[base + k] = Fn::F(xv[base + k], yv[j]);
    }
  return Status::OK();
}

Status LogicalNotKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const bool* xv = x.data<bool>();
  bool* o = ctx.Output("Out")->mutable_data<bool>(ctx.place());
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = !xv[i];
  return Status::OK();
}

}  // namespace

#define LOOM_COMPARE_OP(NAME, FN, DOC)                                                     \
  LOOM_REGISTER_OP(NAME)                                                                   \
      .Doc("Out = " DOC ", element-wise, as bool; Y is broadcast onto X by Fluid's rule.") \
      .Input("X", "first operand; Out has its dims")                                       \
      .Input("Y", "second operand, same dtype, broadcast onto X")                          \
      .Output("Out", "bool result")                                                        \
      .Attr<int>("axis", -1, "dim of X where Y's dims start (-1: align trailing dims)")    \
      .InferShape(CompareInferShape)                                                       \
      .Kernel(Place::kCPU, proto::FP32, PredicateKernel<cmp::FN, float>)                   \
      .Kernel(Place::kCPU, proto::FP64, PredicateKernel<cmp::FN, double>)                  \
      .Kernel(Place::kCPU, proto::INT32, PredicateKernel<cmp::FN, int32_t>)                \
      .Kernel(Place::kCPU, proto::INT64, PredicateKernel<cmp::FN, int64_t>)

LOOM_COMPARE_OP(less_than, LessThan, "X < Y");
LOOM_COMPARE_OP(less_equal, LessEqual, "X <= Y");
LOOM_COMPARE_OP(greater_than, GreaterThan, "X > Y");
LOOM_COMPARE_OP(greater_equal, GreaterEqual, "X >= Y");
LOOM_COMPARE_OP(equal, Equal, "X == Y");
LOOM_COMPARE_OP(not_equal, NotEqual, "X != Y");

#define LOOM_LOGICAL_OP(NAME, FN, DOC)                                                  \
  LOOM_REGISTER_OP(NAME)                                                                \
      .Doc("Out = " DOC ", element-wise on bool tensors; Y is broadcast onto X.")       \
      .Input("X", "bool; Out has its dims")                                             \
      .Input("Y", "bool, broadcast onto X")                                             \
      .Output("Out", "bool result")                                                     \
      .Attr<int>("axis", -1, "dim of X where Y's dims start (-1: align trailing dims)") \
      .InferShape(LogicalInferShape)                                                    \
      .Kernel(Place::kCPU, proto::BOOL, PredicateKernel<cmp::FN, bool>)

LOOM_LOGICAL_OP(logical_and, And, "X and Y");
LOOM_LOGICAL_OP(logical_or, Or, "X or Y");
LOOM_LOGICAL_OP(logical_xor, Xor, "X xor Y");

LOOM_REGISTER_OP(logical_not)
    .Doc("Out = not X, element-wise on a bool tensor.")
    .Input("X", "bool")
    .Output("Out", "bool result, X's dims")
    .InferShape(LogicalNotInferShape)
    .Kernel(Place::kCPU, proto::BOOL, LogicalNotKernel);

}  // namespace loom::ops
