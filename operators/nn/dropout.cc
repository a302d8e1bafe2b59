// dropout: zeroes each element of X with probability dropout_prob during training.
// "downgrade_in_infer": train Out = X * Mask, test Out = X * (1 - p);
// "upscale_in_train":   train Out = X * Mask / (1 - p), test Out = X.
// Mask (X's dims and dtype) holds 1 for kept and 0 for dropped elements. A non-zero seed makes
// the mask a pure function of the seed; seed 0 draws a fresh one on every run.
#include <random>

#include "operators/nn/dropout_attrs.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

Status DropoutInferShape(InferShapeContext* ctx) {
  ctx->ShareDimAndDtype("X", "Out");
  if (ctx->HasOutput("Mask")) ctx->ShareDimAndDtype("X", "Mask");
  return Status::OK();
}

template <typename T>
Status DropoutKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const T* x = xt.data<T>();
  const int64_t n = xt.numel();
  const double p = ctx.Attr<float>("dropout_prob");
  const bool upscale = DropoutUpscalesInTrain(ctx);
  T* out = ctx.Output("Out")->mutable_data<T>(ctx.place());
  Tensor* mt = ctx.OutputOrNull("Mask");
  T* mask = mt ? mt->mutable_data<T>(ctx.place()) : nullptr;
  if (ctx.Attr<bool>("is_test")) {
    const T factor = upscale ? T(1) : static_cast<T>(1.0 - p);
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * factor;
    if (mask) std::fill(mask, mask + n, T(1));
    return Status::OK();
  }
  // Kept elements are scaled by 1 / (1 - p) in upscale mode (p == 1 keeps nothing).
  const T keep_scale = upscale && p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(1);
  int seed = ctx.Attr<int>("seed");
  std::mt19937_64 rng(seed != 0 ? static_cast<uint64_t>(seed) : std::random_device{}());
  std::bernoulli_distribution keep(1.0 - p);
  for (int64_t i = 0; i < n; ++i) {
    bool k = keep(rng);
    if (mask) mask[i] = k ? T(1) : T(0);
    out[i] = k ? x[i] * keep_scale : T(0);
  }
  return Status::OK();
}

// Training: X@GRAD = Out@GRAD * Mask (/ (1 - p) when upscaling); test: the forward factor.
template <typename T>
Status DropoutGradKernel(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  const Tensor& dout = ctx.Input("Out@GRAD");
  const T* g = dout.data<T>();
  const int64_t n = dout.numel();
  const double p = ctx.Attr<float>("dropout_prob");
  const bool upscale = DropoutUpscalesInTrain(ctx);
  T* dx = dxt->mutable_data<T>(ctx.place());
  if (ctx.Attr<bool>("is_test")) {
    const T factor = upscale ? T(1) : static_cast<T>(1.0 - p);
    for (int64_t i = 0; i < n; ++i) dx[i] = g[i] * factor;
    return Status::OK();
  }
  const Tensor* mt = ctx.InputOrNull("Mask");
  if (!mt) return ctx.Error("training-mode dropout_grad needs the forward Mask");
  if (mt->numel() != n)
    return ctx.Error("Mask has dims ", mt->dims().ToString(), " but Out@GRAD has ",
                     dout.dims().ToString());
  const T* mask = mt->data<T>();
  const T keep_scale = upscale && p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(1);
  for (int64_t i = 0; i < n; ++i) dx[i] = g[i] * mask[i] * keep_scale;
  return Status::OK();
}

Status DropoutGradInferShape(InferShapeContext* ctx) {
  if (ctx->HasOutput("X@GRAD")) ctx->ShareDimAndDtype("Out@GRAD", "X@GRAD");
  return Status::OK();
}

std::vector<proto::OpDesc> DropoutGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(fwd, {"Mask", "Out@GRAD"}, {"X"})};
}

}  // namespace

LOOM_REGISTER_OP(dropout)
    .Doc(
        "Randomly zeroes elements of X with probability dropout_prob (training); see "
        "dropout_implementation for the scaling.")
    .Input("X", "input")
    .Output("Out", "output, same dims as X")
    .Output("Mask", "1 for kept, 0 for dropped elements; X's dims and dtype", false, true)
    .Attr<float>("dropout_prob", 0.5f, "probability of dropping an element", nn::FloatIn(0, 1))
    .Attr<bool>("is_test", false, "inference: no dropping, only the scaling")
    .Attr<int>("seed", 0, "random seed; 0 draws a fresh one on every run")
    .Attr<std::string>("dropout_implementation", "downgrade_in_infer",
                       "'downgrade_in_infer' or 'upscale_in_train'",
                       nn::OneOf({"downgrade_in_infer", "upscale_in_train"}))
    .InferShape(DropoutInferShape)
    .GradMaker(DropoutGradMaker)
    .Kernel(Place::kCPU, proto::FP32, DropoutKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, DropoutKernel<double>);

LOOM_REGISTER_OP(dropout_grad)
    .Doc("X@GRAD = Out@GRAD * Mask (scaled as in the forward op).")
    .Input("Mask", "forward Mask (not read with is_test)", false, true)
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("dropout")
    .KernelDtypeFrom("Out@GRAD")
    .InferShape(DropoutGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, DropoutGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, DropoutGradKernel<double>);

}  // namespace loom::ops
