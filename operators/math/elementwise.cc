// elementwise_add with Fluid's broadcast rule, and its gradient.
#include "operators/math/elementwise.h"

namespace loom::ops {

StatusOr<BroadcastPlan> PlanBroadcast(const DDim& x, const DDim& y, int axis) {
  BroadcastPlan plan;
  if (x == y) {
    plan.same_shape = true;
    plan.n = x.numel();
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
                      DataTypeName(ctx->InputDtype("X")), " but Y (var '",
                      ctx->InputVarName("Y"), "') is ", DataTypeName(ctx->InputDtype("Y")));
  auto plan = PlanBroadcast(x, y, ctx->Attr<int>("axis"));
  if (!plan.ok())
    return ctx->Error(ctx->DescribeInput("Y"), " vs ", ctx->DescribeInput("X"), ": ",
                      plan.status().message());
  ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

namespace {

template <typename T>
void AddCompute(const T* x, const T* y, const BroadcastPlan& p, T* out) {
  if (p.same_shape) {
    for (int64_t i = 0; i < p.n; ++i) out[i] = x[i] + y[i];
    return;
  }
  for (int64_t i = 0; i < p.pre; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      const T* xr = x + (i * p.n + j) * p.post;
      T* o = out + (i * p.n + j) * p.post;
      T yv = y[j];
      for (int64_t k = 0; k < p.post; ++k) o[k] = xr[k] + yv;
    }
}

template <typename T>
Status AddKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  auto plan = PlanBroadcast(x.dims(), y.dims(), ctx.Attr<int>("axis"));
  if (!plan.ok()) return ctx.Error(plan.status().message());
  AddCompute<T>(x.data<T>(), y.data<T>(), plan.value(),
                ctx.Output("Out")->mutable_data<T>(ctx.place()));
  return Status::OK();
}

template <typename T>
Status AddGradKernel(const KernelContext& ctx) {
  const Tensor& dout = ctx.Input("Out@GRAD");
  const T* g = dout.data<T>();
  if (Tensor* dx = ctx.OutputOrNull("X@GRAD")) {
    T* o = dx->mutable_data<T>(ctx.place());
    std::copy(g, g + dout.numel(), o);
  }
  if (Tensor* dy = ctx.OutputOrNull("Y@GRAD")) {
    auto plan = PlanBroadcast(ctx.Input("X").dims(), ctx.Input("Y").dims(), ctx.Attr<int>("axis"));
    if (!plan.ok()) return ctx.Error(plan.status().message());
    const BroadcastPlan& p = plan.value();
    T* o = dy->mutable_data<T>(ctx.place());
    if (p.same_shape) {
      std::copy(g, g + dout.numel(), o);
    } else {
      std::fill(o, o + p.n, T(0));
      for (int64_t i = 0; i < p.pre; ++i)
        for (int64_t j = 0; j < p.n; ++j) {
          const T* gr = g + (i * p.n + j) * p.post;
          T acc = 0;
          for (int64_t k = 0; k < p.post; ++k) acc += gr[k];
          o[j] += acc;
        }
    }
  }
  return Status::OK();
}

std::vector<proto::OpDesc> AddGradMaker(const OpDesc& fwd) {
  proto::OpDesc g = MakeDefaultGradOp(fwd);
  OpDesc(&g).RemoveInput("Out");  // the gradient does not need the forward output
  return {g};
}

}  // namespace

LOOM_REGISTER_OP(elementwise_add)
    .Doc("Out = X + Y, with Y broadcast onto X by Fluid's axis rule.")
    .Input("X", "first operand; Out has its dims")
    .Input("Y", "second operand, broadcast onto X")
    .Output("Out", "the sum")
    .Attr<int>("axis", -1, "dim of X where Y's dims start (-1: align trailing dims)")
    .InferShape(ElementwiseInferShape)
    .GradMaker(AddGradMaker)
    .Kernel(Place::kCPU, proto::FP32, AddKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, AddKernel<double>)
    .Kernel(Place::kCPU, proto::INT32, AddKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, AddKernel<int64_t>);

LOOM_REGISTER_OP(elementwise_add_grad)
    .Doc("X@GRAD = Out@GRAD; Y@GRAD = Out@GRAD summed over the broadcast dims.")
    .Input("X", "forward X")
    .Input("Y", "forward Y")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("Y@GRAD", "gradient of Y", false, true)
    .Attr<int>("axis", -1, "as in the forward op")
    .InferShape(GradInferShape)
    .KernelDtypeFrom("Out@GRAD")
    .Kernel(Place::kCPU, proto::FP32, AddGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, AddGradKernel<double>);

}  // namespace loom::ops
