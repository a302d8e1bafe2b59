// scale: Out = scale * X + bias (bias before scaling when bias_after_scale is false). A
// SelectedRows X gives a SelectedRows Out: the same rows, their values scaled (as Fluid).
#include <cmath>
#include <type_traits>

#include "operators/common.h"

namespace loom::ops {
namespace {

template <typename T>
void ScaleCompute(const Tensor& x, double scale, double bias, bool bias_after_scale, Tensor* out,
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

// The scale: ScaleTensor's one element when given (host tensors; float64 kept whole), else
// the attribute.
StatusOr<double> ScaleOf(const KernelContext& ctx) {
  const Tensor* s = ctx.InputOrNull("ScaleTensor");
  if (!s) return ctx.Attr<float>("scale");
  if (s->numel() != 1 || !s->place().is_cpu())
    return ctx.Error("input 'ScaleTensor' must be one element on the host, it is ",
                     s->dims().ToString(), " on ", s->place().ToString());
  switch (s->dtype()) {
    case proto::FP32: return s->data<float>()[0];
    case proto::FP64: return s->data<double>()[0];
    default:
      return ctx.Error("input 'ScaleTensor' is ", DataTypeName(s->dtype()),
                       ", must be float32 or float64");
  }
}

template <typename T>
Status ScaleKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(double scale, ScaleOf(ctx));
  if (const SelectedRows* x = ctx.InputSelectedRows("X")) {
    SelectedRows out;  // X and Out may be one variable
    out.rows = x->rows;
    out.height = x->height;
    out.value.Resize(x->value.dims());
    if (x->value.initialized())
      ScaleCompute<T>(x->value, scale, ctx.Attr<float>("bias"), ctx.Attr<bool>("bias_after_scale"),
                      &out.value, ctx.place());
    *ctx.OutputSelectedRows("Out") = std::move(out);
    return Status::OK();
  }
  ScaleCompute<T>(ctx.Input("X"), scale, ctx.Attr<float>("bias"),
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
    .Input("ScaleTensor", "one element on the host; when given, the multiplier", false, true)
    .Output("Out", "output tensor, same shape as X")
    .Attr<float>("scale", 1.0f, "multiplier (unless ScaleTensor is given)")
    .Attr<float>("bias", 0.0f, "added offset")
    .Attr<bool>("bias_after_scale", true, "add bias after scaling (true) or before (false)")
    .InferVarType(SameVarType)
    .InferShape(ScaleInferShape)
    .GradMaker(ScaleGradMaker)
    .Kernel(Place::kCPU, proto::FP32, ScaleKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, ScaleKernel<double>)
    .Kernel(Place::kCPU, proto::INT32, ScaleKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, ScaleKernel<int64_t>);

}  // namespace loom::ops
