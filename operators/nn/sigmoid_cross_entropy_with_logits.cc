// sigmoid_cross_entropy_with_logits (with gradient), Fluid 1.x's: the cross entropy of
// sigmoid(X) against probabilities, element-wise.
#include <algorithm>
#include <cmath>

#include "operators/common.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

// ---- sigmoid_cross_entropy_with_logits ----
// Out = max(x, 0) - x z + log(1 + exp(-|x|)) element-wise (0 where z == ignore_index); with
// normalize, divided by the count of labels that are not ignored.
Status SigmoidXentInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X"), z = ctx->InputDim("Label");
  if (!DimsCompatible(x, z))
    return ctx->Error(ctx->DescribeInput("Label"), " must have the dims of ",
                      ctx->DescribeInput("X"));
  if (ctx->InputDtype("X") != ctx->InputDtype("Label"))
    return ctx->Error(ctx->DescribeInput("Label"), " must have the dtype of ",
                      ctx->DescribeInput("X"), " (labels are probabilities in [0, 1])");
  ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

template <typename T>
T KeptCount(const T* z, int64_t n, T ignore, bool normalize) {
  if (!normalize) return T(1);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) kept += z[i] != ignore;
  return static_cast<T>(std::max<int64_t>(kept, 1));
}

template <typename T>
Status SigmoidXentKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const T* x = xt.data<T>();
  const T* z = ctx.Input("Label").data<T>();
  const int64_t n = xt.numel();
  const T ignore = static_cast<T>(ctx.Attr<int>("ignore_index"));
  const T count = KeptCount(z, n, ignore, ctx.Attr<bool>("normalize"));
  T* out = ctx.Output("Out")->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < n; ++i)
    out[i] =
        z[i] == ignore
            ? T(0)
            : (std::max(x[i], T(0)) - x[i] * z[i] + std::log1p(std::exp(-std::abs(x[i])))) / count;
  return Status::OK();
}

template <typename T>
Status SigmoidXentGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& xt = ctx.Input("X");
  const T* x = xt.data<T>();
  const T* z = ctx.Input("Label").data<T>();
  const T* g = ctx.Input("Out@GRAD").data<T>();
  const int64_t n = xt.numel();
  const T ignore = static_cast<T>(ctx.Attr<int>("ignore_index"));
  const T count = KeptCount(z, n, ignore, ctx.Attr<bool>("normalize"));
  T* o = dx->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < n; ++i)
    o[i] = z[i] == ignore ? T(0) : g[i] * (T(1) / (T(1) + std::exp(-x[i])) - z[i]) / count;
  return Status::OK();
}

#define LOOM_FLOAT_KERNELS(fn) \
  Kernel(Place::kCPU, proto::FP32, fn<float>).Kernel(Place::kCPU, proto::FP64, fn<double>)

}  // namespace

LOOM_REGISTER_OP(sigmoid_cross_entropy_with_logits)
    .Doc(
        "Out = max(X, 0) - X * Label + log(1 + exp(-|X|)) element-wise (the cross entropy of "
        "sigmoid(X) against Label); 0 where Label == ignore_index; with normalize, divided by "
        "the number of labels not ignored.")
    .Input("X", "logits")
    .Input("Label", "targets in [0, 1], the dims of X")
    .Output("Out", "element-wise loss")
    .Attr<int>("ignore_index", -100, "a label value whose loss (and gradient) is 0")
    .Attr<bool>("normalize", false, "divide by the count of labels not ignored")
    .InferShape(SigmoidXentInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(fwd, {"X", "Label", "Out@GRAD"}, {"X"})};
    })
    .LOOM_FLOAT_KERNELS(SigmoidXentKernel);

LOOM_REGISTER_OP(sigmoid_cross_entropy_with_logits_grad)
    .Doc("X@GRAD = Out@GRAD * (sigmoid(X) - Label) (0 where ignored; normalized alike).")
    .Input("X", "forward X")
    .Input("Label", "forward Label")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("sigmoid_cross_entropy_with_logits")
    .InferShape(GradInferShape)
    .LOOM_FLOAT_KERNELS(SigmoidXentGradKernel);

}  // namespace loom::ops
