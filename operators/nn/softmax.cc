// softmax and log_softmax over the last axis (rows of a [N, D] view), with gradients.
#include <cmath>

#include "operators/common.h"

namespace loom::ops {
namespace {

Status LastAxisOnly(InferShapeContext* ctx) {
  int rank = ctx->InputDim("X").size();
  int axis = ctx->Attr<int>("axis");
  if (rank == 0) return ctx->Error(ctx->DescribeInput("X"), " must have rank >= 1");
  if (axis != -1 && axis != rank - 1)
    return ctx->Error("only the last axis is supported (axis -1 or ", rank - 1, "), got ", axis);
  return SameShapeInferShape(ctx);
}

template <typename T, bool kLog>
Status SoftmaxKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  int64_t d = x.dims()[x.dims().size() - 1];
  int64_t rows = d ? x.numel() / d : 0;
  const T* in = x.data<T>();
  T* o = ctx.Output("Out")->mutable_data<T>(ctx.place());
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = in + r * d;
    T* orow = o + r * d;
    T mx = xr[0];
    for (int64_t j = 1; j < d; ++j) mx = std::max(mx, xr[j]);
    T sum = 0;
    for (int64_t j = 0; j < d; ++j) sum += std::exp(xr[j] - mx);
    T log_sum = std::log(sum);
    for (int64_t j = 0; j < d; ++j)
      orow[j] = kLog ? xr[j] - mx - log_sum : std::exp(xr[j] - mx - log_sum);
  }
  return Status::OK();
}

// softmax: dx = y * (g - sum(g * y)); log_softmax: dx = g - exp(y) * sum(g).
template <typename T, bool kLog>
Status SoftmaxGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& out = ctx.Input("Out");
  int64_t d = out.dims()[out.dims().size() - 1];
  int64_t rows = d ? out.numel() / d : 0;
  const T* y = out.data<T>();
  const T* g = ctx.Input("Out@GRAD").data<T>();
  T* o = dx->mutable_data<T>(ctx.place());
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * d;
    const T* gr = g + r * d;
    T* orow = o + r * d;
    T acc = 0;
    for (int64_t j = 0; j < d; ++j) acc += kLog ? gr[j] : gr[j] * yr[j];
    for (int64_t j = 0; j < d; ++j)
      orow[j] = kLog ? gr[j] - std::exp(yr[j]) * acc : yr[j] * (gr[j] - acc);
  }
  return Status::OK();
}

Status SoftmaxGradInferShape(InferShapeContext* ctx) {
  ctx->ShareDimAndDtype("Out", "X@GRAD");
  return Status::OK();
}

template <const char* kGradType>
std::vector<proto::OpDesc> SoftmaxGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType(kGradType);
  op.SetInput("Out", fwd.Output("Out"));
  op.SetInput("Out@GRAD", {GradVarName(fwd.Output("Out")[0])});
  op.SetOutput("X@GRAD", {GradVarName(fwd.Input("X")[0])});
  op.SetAttr("axis", fwd.Attr<int>("axis", -1));
  return {g};
}

constexpr char kSoftmaxGrad[] = "softmax_grad";
constexpr char kLogSoftmaxGrad[] = "log_softmax_grad";

}  // namespace

LOOM_REGISTER_OP(softmax)
    .Doc("Out = exp(X) / sum(exp(X)) over the last axis.")
    .Input("X", "input [..., D]")
    .Output("Out", "probabilities, same dims")
    .Attr<int>("axis", -1, "only the last axis is supported")
    .InferShape(LastAxisOnly)
    .GradMaker(SoftmaxGradMaker<kSoftmaxGrad>)
    .Kernel(Place::kCPU, proto::FP32, SoftmaxKernel<float, false>)
    .Kernel(Place::kCPU, proto::FP64, SoftmaxKernel<double, false>);

LOOM_REGISTER_OP(softmax_grad)
    .Doc("X@GRAD = Out * (Out@GRAD - sum(Out@GRAD * Out)).")
    .Input("Out", "forward output")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .Attr<int>("axis", -1, "as in the forward op")
    .InferShape(SoftmaxGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, SoftmaxGradKernel<float, false>)
    .Kernel(Place::kCPU, proto::FP64, SoftmaxGradKernel<double, false>);

LOOM_REGISTER_OP(log_softmax)
    .Doc("Out = X - log(sum(exp(X))) over the last axis.")
    .Input("X", "input [..., D]")
    .Output("Out", "log-probabilities, same dims")
    .Attr<int>("axis", -1, "only the last axis is supported")
    .InferShape(LastAxisOnly)
    .GradMaker(SoftmaxGradMaker<kLogSoftmaxGrad>)
    .Kernel(Place::kCPU, proto::FP32, SoftmaxKernel<float, true>)
    .Kernel(Place::kCPU, proto::FP64, SoftmaxKernel<double, true>);

LOOM_REGISTER_OP(log_softmax_grad)
    .Doc("X@GRAD = Out@GRAD - exp(Out) * sum(Out@GRAD).")
    .Input("Out", "forward output")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .Attr<int>("axis", -1, "as in the forward op")
    .InferShape(SoftmaxGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, SoftmaxGradKernel<float, true>)
    .Kernel(Place::kCPU, proto::FP64, SoftmaxGradKernel<double, true>);

}  // namespace loom::ops
