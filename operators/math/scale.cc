// scale: Out = scale * X + bias (bias before scaling when bias_after_scale is false).
#include <cmath>
#include <type_traits>

#include "operators/common.h"

namespace loom::ops {
namespace {

template <typename T>
void ScaleCompute(const Tensor& x, float scale, float bias, bool bias_after_scale, Tensor* out,
                  const Place& place) {
  const T* in = x.data<T>();
  T* o = out->mutable_data<T>(place);
  int64_t n = x.numel();
  T s = static_cast<T>(scale);
  T b = static_cast<T>(bias_after_scale ? bias : bias * scale);
  if constexpr (std::is_integral_v<T>) {
    // Integers wrap on overflow (as numpy's), never undefined behaviour.
    using U = std::make_unsigned_t<T>;
    for (int64_t i = 0; i < n; ++i)
      o[i] = static_cast<T>(static_cast<U>(s) * static_cast<U>(in[i]) + static_cast<U>(b));
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = s * in[i] + b;
  }
}

// An integer tensor is scaled by integers only: scale 0.5 would silently become 0.
Status ScaleInferShape(InferShapeContext* ctx) {
  const DataType dt = ctx->InputDtype("X");
  if (dt == proto::INT32 || dt == proto::INT64) {
    for (const char* a : {"scale", "bias"}) {
      const float v = ctx->Attr<float>(a);
      if (!std::isfinite(v) || v != std::trunc(v) || std::fabs(v) > 2147483647.0f)
        return ctx->Error("attribute ", a, " = ", v, " cannot scale an ", DataTypeName(dt),
                          " tensor (an integer in the int32 range is needed)");
    }
  }
  return SameShapeInferShape(ctx);
}

template <typename T>
Status ScaleKernel(const KernelContext& ctx) {
  ScaleCompute<T>(ctx.Input("X"), ctx.Attr<float>("scale"), ctx.Attr<float>("bias"),
                  ctx.Attr<bool>("bias_after_scale"), ctx.Output("Out"), ctx.place());
  return Status::OK();
}

// d(scale*x + b)/dx = scale: the gradient is a scale op with bias 0.
std::vector<proto::OpDesc> ScaleGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("scale");
  op.SetInput("X", {GradVarName(fwd.Output("Out")[0])});
  op.SetOutput("Out", {GradVarName(fwd.Input("X")[0])});
  op.SetAttr("scale", fwd.Attr<float>("scale", 1.0f));
  op.SetAttr("bias", 0.0f);
  return {g};
}

}  // namespace

LOOM_REGISTER_OP(scale)
    .Doc("Out = scale * X + bias (or scale * (X + bias) when bias_after_scale is false).")
    .Input("X", "input tensor")
    .Output("Out", "output tensor, same shape as X")
    .Attr<float>("scale", 1.0f, "multiplier")
    .Attr<float>("bias", 0.0f, "added offset")
    .Attr<bool>("bias_after_scale", true, "add bias after scaling (true) or before (false)")
    .InferShape(ScaleInferShape)
    .GradMaker(ScaleGradMaker)
    .Kernel(Place::kCPU, proto::FP32, ScaleKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, ScaleKernel<double>)
    .Kernel(Place::kCPU, proto::INT32, ScaleKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, ScaleKernel<int64_t>);

}  // namespace loom::ops
