// center_loss: Loss[i] = 0.5 * ||X[i] - Centers[Label[i]]||² (Wen et al., "A Discriminative
// Feature Learning Approach"), SampleCenterDiff = X - Centers[Label]. With need_update the op
// also moves each class's center toward its samples: Centers[c] += rate * sum of the diffs of
// c's samples / (1 + their count), written to CentersOut (Centers itself in Fluid's layer). The
// centers take no gradient; X@GRAD = Loss@GRAD * SampleCenterDiff.
#include <algorithm>

#include "operators/common.h"

namespace loom::ops {
namespace {

Status CenterLossInferShape(InferShapeContext* ctx) {
  const DDim x = ctx->InputDim("X"), label = ctx->InputDim("Label"), c = ctx->InputDim("Centers");
  if (x.size() != 2) return ctx->Error(ctx->DescribeInput("X"), " must be [batch, D]");
  if (c.size() != 2 || (x[1] >= 0 && c[1] >= 0 && c[1] != x[1]))
    return ctx->Error(ctx->DescribeInput("Centers"), " must be [cluster_num, ", x[1], "]");
  if (c[0] >= 0 && c[0] != ctx->Attr<int>("cluster_num"))
    return ctx->Error(ctx->DescribeInput("Centers"),
                      " must have cluster_num = ", ctx->Attr<int>("cluster_num"), " rows");
  if (label.size() != 2 || (label[1] >= 0 && label[1] != 1))
    return ctx->Error(ctx->DescribeInput("Label"), " must be [batch, 1]");
  const DataType lt = ctx->InputDtype("Label");
  if (lt != proto::INT32 && lt != proto::INT64)
    return ctx->Error(ctx->DescribeInput("Label"), " must be int32 or int64");
  ctx->ShareDimAndDtype("X", "SampleCenterDiff");
  ctx->SetOutputDim("Loss", DDim({x[0], 1}));
  ctx->SetOutputDtype("Loss", ctx->InputDtype("X"));
  if (ctx->HasOutput("CentersOut")) ctx->ShareDimAndDtype("Centers", "CentersOut");
  return Status::OK();
}

template <typename T>
Status CenterLossKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const Tensor& lt = ctx.Input("Label");
  const Tensor& ct = ctx.Input("Centers");
  const int64_t batch = xt.dims()[0], d = xt.dims()[1], k = ct.dims()[0];
  if (lt.numel() != batch) return ctx.Error("Label has ", lt.numel(), " ids for ", batch, " rows");
  std::vector<int64_t> ids(batch);
  for (int64_t i = 0; i < batch; ++i) {
    ids[i] = lt.dtype() == proto::INT64 ? lt.data<int64_t>()[i] : lt.data<int32_t>()[i];
    if (ids[i] < 0 || ids[i] >= k)
      return ctx.Error("Label[", i, "] = ", ids[i], " is outside [0, cluster_num = ", k, ")");
  }
  const T* x = xt.data<T>();
  const T* c = ct.data<T>();
  Tensor* difft = ctx.Output("SampleCenterDiff");
  difft->Resize(xt.dims());
  T* diff = difft->mutable_data<T>(ctx.place());
  Tensor* losst = ctx.Output("Loss");
  losst->Resize(DDim({batch, 1}));
  T* loss = losst->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < batch; ++i) {
    T sq = 0;
    for (int64_t j = 0; j < d; ++j) {
      diff[i * d + j] = x[i * d + j] - c[ids[i] * d + j];
      sq += diff[i * d + j] * diff[i * d + j];
    }
    loss[i] = T(0.5) * sq;
  }
  Tensor* out = ctx.OutputOrNull("CentersOut");
  if (!out) return Status::OK();
  out->Resize(ct.dims());
  T* co = out->mutable_data<T>(ctx.place());
  if (co != c) std::copy_n(c, ct.numel(), co);
  if (!ctx.Attr<bool>("need_update")) return Status::OK();
  const Tensor& rt = ctx.Input("CenterUpdateRate");
  const T rate = rt.data<T>()[0];
  std::vector<T> acc(static_cast<size_t>(k * d), T(0));
  std::vector<int64_t> count(static_cast<size_t>(k), 0);
  for (int64_t i = 0; i < batch; ++i) {
    ++count[ids[i]];
    for (int64_t j = 0; j < d; ++j) acc[ids[i] * d + j] += diff[i * d + j];
  }
  for (int64_t q = 0; q < k; ++q)
    for (int64_t j = 0; j < d; ++j)
      co[q * d + j] += rate * acc[q * d + j] / static_cast<T>(1 + count[q]);
  return Status::OK();
}

template <typename T>
Status CenterLossGradKernel(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  const Tensor& difft = ctx.Input("SampleCenterDiff");
  const T* diff = difft.data<T>();
  const T* g = ctx.Input("Loss@GRAD").data<T>();
  const int64_t batch = difft.dims()[0], d = difft.dims()[1];
  dxt->Resize(difft.dims());
  T* dx = dxt->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t j = 0; j < d; ++j) dx[i * d + j] = g[i] * diff[i * d + j];
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(center_loss)
    .Doc(
        "Loss[i] = 0.5 * ||X[i] - Centers[Label[i]]||^2; SampleCenterDiff = X - Centers[Label]; "
        "with need_update, CentersOut[c] = Centers[c] + rate * (sum of c's diffs) / (1 + c's "
        "count).")
    .Input("X", "[batch, D] features")
    .Input("Label", "int32 / int64 [batch, 1] classes")
    .Input("Centers", "[cluster_num, D] the class centers")
    .Input("CenterUpdateRate", "[1] the centers' update rate (alpha)")
    .Output("SampleCenterDiff", "[batch, D] X - Centers[Label]")
    .Output("Loss", "[batch, 1]")
    .Output("CentersOut", "the updated centers (usually the Centers variable)", false, true)
    .Attr<int>("cluster_num", 1, "the number of classes")
    .Attr<bool>("need_update", true, "update the centers")
    .InferShape(CenterLossInferShape)
    .GradMaker([](const OpDesc& fwd) {
      proto::OpDesc g;
      OpDesc op(&g);
      op.SetType("center_loss_grad");
      op.SetInput("X", fwd.Input("X"));
      op.SetInput("SampleCenterDiff", fwd.Output("SampleCenterDiff"));
      op.SetInput("Loss@GRAD", {GradVarName(fwd.Output("Loss")[0])});
      op.SetOutput("X@GRAD", {GradVarName(fwd.Input("X")[0])});
      return std::vector<proto::OpDesc>{g};
    })
    .Kernel(Place::kCPU, proto::FP32, CenterLossKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, CenterLossKernel<double>);

LOOM_REGISTER_OP(center_loss_grad)
    .Doc("X@GRAD = Loss@GRAD * SampleCenterDiff (the centers take no gradient).")
    .Input("X", "forward X (for its dims)")
    .Input("SampleCenterDiff", "forward SampleCenterDiff")
    .Input("Loss@GRAD", "gradient of Loss")
    .Output("X@GRAD", "gradient of X", false, true)
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, CenterLossGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, CenterLossGradKernel<double>);

}  // namespace loom::ops
