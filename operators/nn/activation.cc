// relu and its gradient (which needs only Out, so X can be freed early).
#include "framework/parallel.h"
#include "operators/common.h"

namespace loom::ops {
namespace {

template <typename T>
Status ReluKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const T* in = x.data<T>();
  T* o = ctx.Output("Out")->mutable_data<T>(ctx.place());
  ParallelFor(x.numel(), kElementwiseGrain, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) o[i] = in[i] > T(0) ? in[i] : T(0);
  });
  return Status::OK();
}

template <typename T>
Status ReluGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& out = ctx.Input("Out");
  const T* y = out.data<T>();
  const T* g = ctx.Input("Out@GRAD").data<T>();
  T* o = dx->mutable_data<T>(ctx.place());
  ParallelFor(out.numel(), kElementwiseGrain, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) o[i] = y[i] > T(0) ? g[i] : T(0);
  });
  return Status::OK();
}

Status ReluGradInferShape(InferShapeContext* ctx) {
  ctx->SetOutputDim("X@GRAD", ctx->InputDim("Out"));
  ctx->SetOutputDtype("X@GRAD", ctx->InputDtype("Out"));
  return Status::OK();
}

std::vector<proto::OpDesc> ReluGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("relu_grad");
  op.SetInput("Out", fwd.Output("Out"));
  op.SetInput("Out@GRAD", {GradVarName(fwd.Output("Out")[0])});
  op.SetOutput("X@GRAD", {GradVarName(fwd.Input("X")[0])});
  return {g};
}

}  // namespace

LOOM_REGISTER_OP(relu)
    .Doc("Out = max(X, 0).")
    .Input("X", "input")
    .Output("Out", "output, same dims as X")
    .InferShape(SameShapeInferShape)
    .GradMaker(ReluGradMaker)
    .Kernel(Place::kCPU, proto::FP32, ReluKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, ReluKernel<double>);

LOOM_REGISTER_OP(relu_grad)
    .Doc("X@GRAD = Out@GRAD where Out > 0, else 0.")
    .Input("Out", "forward output")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .InferShape(ReluGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, ReluGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, ReluGradKernel<double>);

}  // namespace loom::ops
