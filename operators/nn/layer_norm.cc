// layer_norm: X is viewed as [left, right] split at begin_norm_axis; every row is normalized
// by its own mean and variance, then scaled and shifted element-wise by the optional Scale and
// Bias ([right]). Mean and Variance ([left]) are returned for the gradient.
#include <cmath>
#include <vector>

#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

Status LayerNormInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  int axis = ctx->Attr<int>("begin_norm_axis");
  if (axis >= x.size())
    return ctx->Error("begin_norm_axis (", axis, ") must be below the rank of ",
                      ctx->DescribeInput("X"));
  int64_t left = x.product(0, axis), right = x.product(axis, x.size());
  for (const char* slot : {"Scale", "Bias"}) {
    if (!ctx->HasInput(slot)) continue;
    DDim d = ctx->InputDim(slot);
    if (d.size() != 1) return ctx->Error(ctx->DescribeInput(slot), " must be 1-D");
    if (right >= 0 && d[0] >= 0 && d[0] != right)
      return ctx->Error(ctx->DescribeInput(slot), " must have ", right,
                        " entries: the product of the dims of ", ctx->DescribeInput("X"),
                        " from begin_norm_axis ", axis);
    if (ctx->InputDtype(slot) != ctx->InputDtype("X"))
      return ctx->Error(ctx->DescribeInput(slot), " is ", DataTypeName(ctx->InputDtype(slot)),
                        " but ", ctx->DescribeInput("X"), " is ",
                        DataTypeName(ctx->InputDtype("X")));
  }
  ctx->ShareDimAndDtype("X", "Y");
  for (const char* slot : {"Mean", "Variance"}) {
    if (!ctx->HasOutput(slot)) continue;
    ctx->SetOutputDim(slot, DDim{left});
    ctx->SetOutputDtype(slot, ctx->InputDtype("X"));
  }
  return Status::OK();
}

template <typename T>
Status LayerNormKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  DDim rows = FlattenTo2D(xt.dims(), ctx.Attr<int>("begin_norm_axis"));
  const int64_t left = rows[0], right = rows[1];
  const T* x = xt.data<T>();
  const Tensor* st = ctx.InputOrNull("Scale");
  const Tensor* bt = ctx.InputOrNull("Bias");
  const T* scale = st ? st->data<T>() : nullptr;
  const T* bias = bt ? bt->data<T>() : nullptr;
  const T eps = static_cast<T>(ctx.Attr<float>("epsilon"));
  T* y = ctx.Output("Y")->mutable_data<T>(ctx.place());
  Tensor* mt = ctx.OutputOrNull("Mean");
  Tensor* vt = ctx.OutputOrNull("Variance");
  T* mean_out = mt ? mt->mutable_data<T>(ctx.place()) : nullptr;
  T* var_out = vt ? vt->mutable_data<T>(ctx.place()) : nullptr;
  for (int64_t r = 0; r < left; ++r) {
    const T* xr = x + r * right;
    T* yr = y + r * right;
    T sum = 0;
    for (int64_t j = 0; j < right; ++j) sum += xr[j];
    T mu = right ? sum / static_cast<T>(right) : T(0);
    T sq = 0;
    for (int64_t j = 0; j < right; ++j) sq += (xr[j] - mu) * (xr[j] - mu);
    T var = right ? sq / static_cast<T>(right) : T(0);
    T inv_std = T(1) / std::sqrt(var + eps);
    for (int64_t j = 0; j < right; ++j) {
      T v = (xr[j] - mu) * inv_std;
      if (scale) v *= scale[j];
      if (bias) v += bias[j];
      yr[j] = v;
    }
    if (mean_out) mean_out[r] = mu;
    if (var_out) var_out[r] = var;
  }
  return Status::OK();
}

// Per row, with x̂ = (x - mean) * inv_std and g = Y@GRAD * Scale:
// X@GRAD = inv_std * (g - avg(g) - x̂ * avg(g * x̂)); Scale@GRAD = Σ_rows Y@GRAD * x̂;
// Bias@GRAD = Σ_rows Y@GRAD.
template <typename T>
Status LayerNormGradKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  DDim rows = FlattenTo2D(xt.dims(), ctx.Attr<int>("begin_norm_axis"));
  const int64_t left = rows[0], right = rows[1];
  const T* x = xt.data<T>();
  const Tensor* st = ctx.InputOrNull("Scale");
  const T* scale = st ? st->data<T>() : nullptr;
  const T* mean = ctx.Input("Mean").data<T>();
  const T* var = ctx.Input("Variance").data<T>();
  const T* dy = ctx.Input("Y@GRAD").data<T>();
  const T eps = static_cast<T>(ctx.Attr<float>("epsilon"));
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  Tensor* dst = ctx.OutputOrNull("Scale@GRAD");
  Tensor* dbt = ctx.OutputOrNull("Bias@GRAD");
  T* dx = dxt ? dxt->mutable_data<T>(ctx.place()) : nullptr;
  T* dscale = dst ? dst->mutable_data<T>(ctx.place()) : nullptr;
  T* dbias = dbt ? dbt->mutable_data<T>(ctx.place()) : nullptr;
  if (dscale) std::fill(dscale, dscale + right, T(0));
  if (dbias) std::fill(dbias, dbias + right, T(0));
  std::vector<T> g(right);
  for (int64_t r = 0; r < left; ++r) {
    const T* xr = x + r * right;
    const T* dyr = dy + r * right;
    const T mu = mean[r];
    const T inv_std = T(1) / std::sqrt(var[r] + eps);
    for (int64_t j = 0; j < right; ++j) {
      T xhat = (xr[j] - mu) * inv_std;
      if (dscale) dscale[j] += dyr[j] * xhat;
      if (dbias) dbias[j] += dyr[j];
    }
    if (!dx) continue;
    T sum_g = 0, sum_gx = 0;
    for (int64_t j = 0; j < right; ++j) {
      g[j] = scale ? dyr[j] * scale[j] : dyr[j];
      sum_g += g[j];
      sum_gx += g[j] * (xr[j] - mu) * inv_std;
    }
    const T inv_n = T(1) / static_cast<T>(right);
    T* dxr = dx + r * right;
    for (int64_t j = 0; j < right; ++j) {
      T xhat = (xr[j] - mu) * inv_std;
      dxr[j] = inv_std * (g[j] - sum_g * inv_n - xhat * sum_gx * inv_n);
    }
  }
  return Status::OK();
}

Status LayerNormGradInferShape(InferShapeContext* ctx) {
  if (ctx->HasOutput("X@GRAD")) ctx->ShareDimAndDtype("X", "X@GRAD");
  DDim x = ctx->InputDim("X");
  int axis = ctx->Attr<int>("begin_norm_axis");
  DDim param{axis < x.size() ? x.product(axis, x.size()) : -1};
  for (const char* slot : {"Scale@GRAD", "Bias@GRAD"}) {
    if (!ctx->HasOutput(slot)) continue;
    ctx->SetOutputDim(slot, param);
    ctx->SetOutputDtype(slot, ctx->InputDtype("X"));
  }
  return Status::OK();
}

std::vector<proto::OpDesc> LayerNormGradMaker(const OpDesc& fwd) {
  return {
      nn::MakeGradOp(fwd, {"X", "Scale", "Mean", "Variance", "Y@GRAD"}, {"X", "Scale", "Bias"})};
}

}  // namespace

LOOM_REGISTER_OP(layer_norm)
    .Doc(
        "Y = (X - mean) / sqrt(var + epsilon) * Scale + Bias, with mean and var taken over "
        "the dims of X from begin_norm_axis on (one pair per leading index).")
    .Input("X", "input")
    .Input("Scale", "scale [product of X.dims[begin_norm_axis:]]", false, true)
    .Input("Bias", "bias [product of X.dims[begin_norm_axis:]]", false, true)
    .Output("Y", "normalized output, same dims as X")
    .Output("Mean", "row means [product of X.dims[:begin_norm_axis]]")
    .Output("Variance", "row variances [product of X.dims[:begin_norm_axis]]")
    .Attr<int>("begin_norm_axis", 1, "first normalized axis", Positive("begin_norm_axis"))
    .Attr<float>("epsilon", 1e-5f, "added to the variance", nn::PositiveFloat())
    .InferShape(LayerNormInferShape)
    .GradMaker(LayerNormGradMaker)
    .Kernel(Place::kCPU, proto::FP32, LayerNormKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, LayerNormKernel<double>);

LOOM_REGISTER_OP(layer_norm_grad)
    .Doc("X@GRAD, Scale@GRAD and Bias@GRAD of layer_norm from Y@GRAD.")
    .Input("X", "forward X")
    .Input("Scale", "forward Scale", false, true)
    .Input("Mean", "forward Mean")
    .Input("Variance", "forward Variance")
    .Input("Y@GRAD", "gradient of Y")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("Scale@GRAD", "gradient of Scale", false, true)
    .Output("Bias@GRAD", "gradient of Bias", false, true)
    .AttrsFrom("layer_norm")
    .InferShape(LayerNormGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, LayerNormGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, LayerNormGradKernel<double>);

}  // namespace loom::ops
