// sgd: ParamOut = Param - LearningRate * Grad (in place when ParamOut is Param). A SelectedRows
// Grad moves only its rows (the others have a zero gradient), as Fluid's sparse sgd.
#include "operators/common.h"
#include "operators/optimizers/optimizer_checks.h"

namespace loom::ops {
namespace {

Status SgdInferShape(InferShapeContext* ctx) {
  LOOM_RETURN_IF_ERROR(CheckLikeParam(ctx, "Grad", "Param"));
  LOOM_RETURN_IF_ERROR(CheckScalarOfParam(ctx, "LearningRate"));
  ctx->ShareDimAndDtype("Param", "ParamOut");
  return Status::OK();
}

template <typename T>
Status SgdKernel(const KernelContext& ctx) {
  const Tensor& param = ctx.Input("Param");
  UpdateGrad<T> grad;
  LOOM_RETURN_IF_ERROR(grad.Read(ctx, param, /*densify=*/false));
  T lr = ctx.Input("LearningRate").data<T>()[0];
  const T* p = param.data<T>();
  T* out = ctx.Output("ParamOut")->mutable_data<T>(ctx.place());
  if (grad.sparse() && out != p) std::copy(p, p + param.numel(), out);
  grad.ForEach(param.numel(), [&](int64_t i, T g) { out[i] = p[i] - lr * g; });
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(sgd)
    .Doc("Stochastic gradient descent: ParamOut = Param - LearningRate * Grad.")
    .Input("Param", "parameter")
    .Input("Grad", "its gradient")
    .Input("LearningRate", "learning rate, one element")
    .Output("ParamOut", "updated parameter (usually the Param var itself)")
    .InferShape(SgdInferShape)
    .Kernel(Place::kCPU, proto::FP32, SgdKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SgdKernel<double>);

}  // namespace loom::ops
