// bilinear_tensor_product: Out[b, i] = X[b] · Weight[i] · Y[b]ᵀ (+ Bias[0, i]) for X [batch, M],
// Y [batch, N], Weight [size, M, N].
#include <algorithm>

#include "operators/common.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

Status BilinearInferShape(InferShapeContext* ctx) {
  const DDim x = ctx->InputDim("X"), y = ctx->InputDim("Y"), w = ctx->InputDim("Weight");
  if (x.size() != 2) return ctx->Error(ctx->DescribeInput("X"), " must be [batch, M]");
  if (y.size() != 2) return ctx->Error(ctx->DescribeInput("Y"), " must be [batch, N]");
  if (w.size() != 3) return ctx->Error(ctx->DescribeInput("Weight"), " must be [size, M, N]");
  if (x[0] >= 0 && y[0] >= 0 && x[0] != y[0])
    return ctx->Error(ctx->DescribeInput("X"), " and ", ctx->DescribeInput("Y"),
                      " must have the same batch size");
  if ((x[1] >= 0 && w[1] >= 0 && x[1] != w[1]) || (y[1] >= 0 && w[2] >= 0 && y[1] != w[2]))
    return ctx->Error(ctx->DescribeInput("Weight"), " must be [size, ", x[1], ", ", y[1], "] for ",
                      ctx->DescribeInput("X"), " and ", ctx->DescribeInput("Y"));
  if (ctx->HasInput("Bias")) {
    const DDim b = ctx->InputDim("Bias");
    if (b.size() != 2 || b[0] != 1 || (b[1] >= 0 && w[0] >= 0 && b[1] != w[0]))
      return ctx->Error(ctx->DescribeInput("Bias"), " must be [1, ", w[0], "]");
  }
  for (const char* slot : {"Y", "Weight"})
    if (ctx->InputDtype(slot) != ctx->InputDtype("X"))
      return ctx->Error(ctx->DescribeInput(slot), " must have the dtype of ",
                        ctx->DescribeInput("X"));
  ctx->SetOutputDim("Out", DDim({x[0], w[0]}));
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

template <typename T>
Status BilinearKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const Tensor& yt = ctx.Input("Y");
  const Tensor& wt = ctx.Input("Weight");
  const int64_t batch = xt.dims()[0], m = xt.dims()[1], n = yt.dims()[1], size = wt.dims()[0];
  if (yt.dims()[0] != batch) return ctx.Error("X has ", batch, " rows but Y ", yt.dims()[0]);
  const T* x = xt.data<T>();
  const T* y = yt.data<T>();
  const T* w = wt.data<T>();
  const T* bias = ctx.InputSize("Bias") > 0 ? ctx.Input("Bias").data<T>() : nullptr;
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({batch, size}));
  T* o = out->mutable_data<T>(ctx.place());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < size; ++i) {
      T acc = bias ? bias[i] : T(0);
      for (int64_t p = 0; p < m; ++p) {
        T row = 0;
        for (int64_t q = 0; q < n; ++q) row += w[(i * m + p) * n + q] * y[b * n + q];
        acc += x[b * m + p] * row;
      }
      o[b * size + i] = acc;
    }
  return Status::OK();
}

// With g = Out@GRAD: dX[b] = sum_i g[b, i] W[i] Y[b]ᵀ, dY[b] = sum_i g[b, i] W[i]ᵀ X[b],
// dW[i] = sum_b g[b, i] X[b]ᵀ Y[b], dBias[i] = sum_b g[b, i].
template <typename T>
Status BilinearGradKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const Tensor& yt = ctx.Input("Y");
  const Tensor& wt = ctx.Input("Weight");
  const int64_t batch = xt.dims()[0], m = xt.dims()[1], n = yt.dims()[1], size = wt.dims()[0];
  const T* x = xt.data<T>();
  const T* y = yt.data<T>();
  const T* w = wt.data<T>();
  const T* g = ctx.Input("Out@GRAD").data<T>();
  auto zeros = [&](const char* slot, const DDim& dims) -> T* {
    Tensor* t = ctx.OutputOrNull(slot);
    if (!t) return nullptr;
    t->Resize(dims);
    T* p = t->mutable_data<T>(ctx.place());
    std::fill(p, p + t->numel(), T(0));
    return p;
  };
  T* dx = zeros("X@GRAD", xt.dims());
  T* dy = zeros("Y@GRAD", yt.dims());
  T* dw = zeros("Weight@GRAD", wt.dims());
  T* db = ctx.InputSize("Bias") > 0 ? zeros("Bias@GRAD", ctx.Input("Bias").dims()) : nullptr;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < size; ++i) {
      const T gi = g[b * size + i];
      if (db) db[i] += gi;
      for (int64_t p = 0; p < m; ++p)
        for (int64_t q = 0; q < n; ++q) {
          const T wv = w[(i * m + p) * n + q];
          if (dx) dx[b * m + p] += gi * wv * y[b * n + q];
          if (dy) dy[b * n + q] += gi * wv * x[b * m + p];
          if (dw) dw[(i * m + p) * n + q] += gi * x[b * m + p] * y[b * n + q];
        }
    }
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(bilinear_tensor_product)
    .Doc("Out[b, i] = X[b] · Weight[i] · Y[b]ᵀ + Bias[0, i].")
    .Input("X", "[batch, M]")
    .Input("Y", "[batch, N]")
    .Input("Weight", "[size, M, N]")
    .Input("Bias", "[1, size]", false, true)
    .Output("Out", "[batch, size]")
    .InferShape(BilinearInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(
          fwd, {"X", "Y", "Weight", "Bias", "Out@GRAD"}, {"X", "Y", "Weight", "Bias"})};
    })
    .Kernel(Place::kCPU, proto::FP32, BilinearKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, BilinearKernel<double>);

LOOM_REGISTER_OP(bilinear_tensor_product_grad)
    .Doc("X@GRAD, Y@GRAD, Weight@GRAD and Bias@GRAD of bilinear_tensor_product.")
    .Input("X", "forward X")
    .Input("Y", "forward Y")
    .Input("Weight", "forward Weight")
    .Input("Bias", "forward Bias", false, true)
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("Y@GRAD", "gradient of Y", false, true)
    .Output("Weight@GRAD", "gradient of Weight", false, true)
    .Output("Bias@GRAD", "gradient of Bias", false, true)
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, BilinearGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, BilinearGradKernel<double>);

}  // namespace loom::ops
