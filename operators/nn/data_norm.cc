// data_norm: Fluid's normalization by accumulated statistics (CTR models). With per-column
// BatchSize, BatchSum and BatchSquareSum [C] (parameters),
//   Means = BatchSum / BatchSize,  Scales = sqrt(BatchSize / BatchSquareSum),
//   Y = (X - Means) * Scales          for X [N, C].
// The grad op gives X@GRAD = Y@GRAD * Scales (the statistics held fixed) and, as Fluid does,
// "gradients" of the statistics that are this batch's own statistics: BatchSize@GRAD = N,
// BatchSum@GRAD = sum of X over the rows, BatchSquareSum@GRAD = sum of (X - Means)^2 + N * eps;
// the optimizer's update folds them into the parameters.
#include <cmath>
#include <vector>

#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

constexpr const char* kStats[] = {"BatchSize", "BatchSum", "BatchSquareSum"};

Status DataNormInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  if (x.size() != 2) return ctx->Error(ctx->DescribeInput("X"), " must be 2-D [N, C]");
  if (!IsFloatingPoint(ctx->InputDtype("X")))
    return ctx->Error(ctx->DescribeInput("X"), " must be floating point");
  for (const char* slot : kStats) {
    DDim s = ctx->InputDim(slot);
    if (s.numel() >= 0 && x[1] >= 0 && s.numel() != x[1])
      return ctx->Error(ctx->DescribeInput(slot), " must hold one value per column of X (", x[1],
                        ")");
    if (ctx->InputDtype(slot) != ctx->InputDtype("X"))
      return ctx->Error(ctx->DescribeInput(slot), " must have X's dtype");
  }
  ctx->ShareDimAndDtype("X", "Y");
  ctx->SetOutputDim("Means", DDim{x[1]});
  ctx->SetOutputDtype("Means", ctx->InputDtype("X"));
  ctx->SetOutputDim("Scales", DDim{x[1]});
  ctx->SetOutputDtype("Scales", ctx->InputDtype("X"));
  return Status::OK();
}

template <typename T>
Status DataNormKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int64_t n = x.dims()[0], c = x.dims()[1];
  const T* size = ctx.Input("BatchSize").data<T>();
  const T* sum = ctx.Input("BatchSum").data<T>();
  const T* sq = ctx.Input("BatchSquareSum").data<T>();
  T* means = ctx.Output("Means")->mutable_data<T>(ctx.place());
  T* scales = ctx.Output("Scales")->mutable_data<T>(ctx.place());
  for (int64_t j = 0; j < c; ++j) {
    if (!(size[j] > 0) || !(sq[j] > 0))
      return ctx.Error("column ", j, ": BatchSize (", size[j], ") and BatchSquareSum (", sq[j],
                       ") must be positive");
    means[j] = sum[j] / size[j];
    scales[j] = std::sqrt(size[j] / sq[j]);
  }
  const T* xd = x.data<T>();
  T* y = ctx.Output("Y")->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) y[i * c + j] = (xd[i * c + j] - means[j]) * scales[j];
  return Status::OK();
}

template <typename T>
Status DataNormGradKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int64_t n = x.dims()[0], c = x.dims()[1];
  const T* xd = x.data<T>();
  const T* means = ctx.Input("Means").data<T>();
  const T* scales = ctx.Input("Scales").data<T>();
  if (Tensor* dx_t = ctx.OutputOrNull("X@GRAD")) {
    const T* dy = ctx.Input("Y@GRAD").data<T>();
    T* dx = dx_t->mutable_data<T>(ctx.place());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < c; ++j) dx[i * c + j] = dy[i * c + j] * scales[j];
  }
  const T eps = static_cast<T>(ctx.Attr<float>("epsilon"));
  if (Tensor* t = ctx.OutputOrNull("BatchSize@GRAD")) {
    T* d = t->mutable_data<T>(ctx.place());
    std::fill(d, d + c, static_cast<T>(n));
  }
  if (Tensor* t = ctx.OutputOrNull("BatchSum@GRAD")) {
    T* d = t->mutable_data<T>(ctx.place());
    std::fill(d, d + c, T(0));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < c; ++j) d[j] += xd[i * c + j];
  }
  if (Tensor* t = ctx.OutputOrNull("BatchSquareSum@GRAD")) {
    T* d = t->mutable_data<T>(ctx.place());
    std::fill(d, d + c, static_cast<T>(n) * eps);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < c; ++j) {
        const T v = xd[i * c + j] - means[j];
        d[j] += v * v;
      }
  }
  return Status::OK();
}

std::vector<proto::OpDesc> DataNormGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(
      fwd, {"X", "BatchSize", "BatchSum", "BatchSquareSum", "Means", "Scales", "Y@GRAD"},
      {"X", "BatchSize", "BatchSum", "BatchSquareSum"})};
}

Status DataNormGradInferShape(InferShapeContext* ctx) {
  for (const char* slot : {"X", "BatchSize", "BatchSum", "BatchSquareSum"}) {
    std::string grad = GradVarName(slot);
    if (ctx->HasOutput(grad) && ctx->OutputVarName(grad) != kEmptyVarName)
      ctx->ShareDimAndDtype(slot, grad);
  }
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(data_norm)
    .Doc(
        "Y = (X - BatchSum / BatchSize) * sqrt(BatchSize / BatchSquareSum) per column, from "
        "accumulated statistics.")
    .Input("X", "input [N, C]")
    .Input("BatchSize", "accumulated row count per column [C]")
    .Input("BatchSum", "accumulated sum per column [C]")
    .Input("BatchSquareSum", "accumulated sum of squared deviations per column [C]")
    .Output("Y", "normalized X [N, C]")
    .Output("Means", "BatchSum / BatchSize [C]")
    .Output("Scales", "sqrt(BatchSize / BatchSquareSum) [C]")
    .Attr<float>("epsilon", 1e-5f, "added per row to BatchSquareSum's gradient", nn::FloatIn(0, 1))
    .Attr<std::string>("data_layout", "NCHW", "'NCHW' or 'NHWC' (2-D X: the same)",
                       nn::OneOf({"NCHW", "NHWC"}))
    .Attr<bool>("sync_stats", false, "accepted (one place: nothing to synchronize)")
    .Attr<float>("summary_decay_rate", 0.9999999f, "accepted (Fluid's parameter-server decay)")
    .KernelDtypeFrom("X")
    .InferShape(DataNormInferShape)
    .GradMaker(DataNormGradMaker)
    .Kernel(Place::kCPU, proto::FP32, DataNormKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, DataNormKernel<double>);

LOOM_REGISTER_OP(data_norm_grad)
    .Doc(
        "X@GRAD = Y@GRAD * Scales; the statistics' gradients are the batch's own statistics "
        "(N, the column sums, the squared deviations plus N * epsilon), as in Fluid.")
    .Input("X", "forward X")
    .Input("BatchSize", "forward BatchSize")
    .Input("BatchSum", "forward BatchSum")
    .Input("BatchSquareSum", "forward BatchSquareSum")
    .Input("Means", "forward Means")
    .Input("Scales", "forward Scales")
    .Input("Y@GRAD", "gradient of Y")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("BatchSize@GRAD", "N per column", false, true)
    .Output("BatchSum@GRAD", "the column sums of X", false, true)
    .Output("BatchSquareSum@GRAD", "squared deviations from Means plus N * epsilon", false, true)
    .AttrsFrom("data_norm")
    .KernelDtypeFrom("X")
    .InferShape(DataNormGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, DataNormGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, DataNormGradKernel<double>);

}  // namespace loom::ops
