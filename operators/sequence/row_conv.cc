// row_conv: the lookahead convolution of Deep Speech 2. For every row t of a sequence and
// feature d, Out[t, d] = sum_j X[t + j, d] * Filter[j, d] over j < Filter.dims[0] with t + j
// still inside t's sequence. X is a LoD tensor [rows, D] or a padded [batch, time, D] tensor
// (each batch entry one sequence of `time` rows).
#include <algorithm>

#include "operators/common.h"
#include "operators/nn/nn_util.h"
#include "operators/sequence/sequence_util.h"

namespace loom::ops {
namespace {

Status RowConvInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X"), f = ctx->InputDim("Filter");
  if (x.size() != 2 && x.size() != 3)
    return ctx->Error(ctx->DescribeInput("X"),
                      " must be a LoD tensor [rows, D] or a padded [batch, time, D]");
  if (f.size() != 2) return ctx->Error(ctx->DescribeInput("Filter"), " must be [context, D]");
  const int64_t d = x[x.size() - 1];
  if (d >= 0 && f[1] >= 0 && f[1] != d)
    return ctx->Error(ctx->DescribeInput("Filter"), " must have D = ", d, " columns (",
                      ctx->DescribeInput("X"), ")");
  if (ctx->InputDtype("Filter") != ctx->InputDtype("X"))
    return ctx->Error(ctx->DescribeInput("Filter"), " must have the dtype of ",
                      ctx->DescribeInput("X"));
  ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

// Row offsets of the sequences of X: its LoD, or one sequence per batch entry of a 3-D X.
StatusOr<std::vector<int64_t>> RowConvOffsets(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  if (x.dims().size() == 3) {
    std::vector<int64_t> off;
    for (int64_t b = 0; b <= x.dims()[0]; ++b) off.push_back(b * x.dims()[1]);
    return off;
  }
  return SequenceOffsets(ctx, "X");
}

template <typename T>
Status RowConvKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, RowConvOffsets(ctx));
  const Tensor& xt = ctx.Input("X");
  const Tensor& ft = ctx.Input("Filter");
  const int64_t d = xt.dims()[xt.dims().size() - 1], k = ft.dims()[0];
  const T* x = xt.data<T>();
  const T* w = ft.data<T>();
  Tensor* out = ctx.Output("Out");
  out->Resize(xt.dims());
  T* o = out->mutable_data<T>(ctx.place());
  std::fill(o, o + xt.numel(), T(0));
  for (size_t s = 0; s + 1 < off.size(); ++s)
    for (int64_t t = off[s]; t < off[s + 1]; ++t)
      for (int64_t j = 0; j < k && t + j < off[s + 1]; ++j)
        for (int64_t c = 0; c < d; ++c) o[t * d + c] += x[(t + j) * d + c] * w[j * d + c];
  out->set_lod(xt.lod());
  return Status::OK();
}

// X@GRAD[t + j] += Out@GRAD[t] * Filter[j]; Filter@GRAD[j] += Out@GRAD[t] * X[t + j].
template <typename T>
Status RowConvGradKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, RowConvOffsets(ctx));
  const Tensor& xt = ctx.Input("X");
  const Tensor& ft = ctx.Input("Filter");
  const int64_t d = xt.dims()[xt.dims().size() - 1], k = ft.dims()[0];
  const T* x = xt.data<T>();
  const T* w = ft.data<T>();
  const T* g = ctx.Input("Out@GRAD").data<T>();
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  Tensor* dft = ctx.OutputOrNull("Filter@GRAD");
  T* dx = nullptr;
  T* dw = nullptr;
  if (dxt) {
    dxt->Resize(xt.dims());
    dx = dxt->mutable_data<T>(ctx.place());
    std::fill(dx, dx + xt.numel(), T(0));
  }
  if (dft) {
    dft->Resize(ft.dims());
    dw = dft->mutable_data<T>(ctx.place());
    std::fill(dw, dw + ft.numel(), T(0));
  }
  for (size_t s = 0; s + 1 < off.size(); ++s)
    for (int64_t t = off[s]; t < off[s + 1]; ++t)
      for (int64_t j = 0; j < k && t + j < off[s + 1]; ++j)
        for (int64_t c = 0; c < d; ++c) {
          if (dx) dx[(t + j) * d + c] += g[t * d + c] * w[j * d + c];
          if (dw) dw[j * d + c] += g[t * d + c] * x[(t + j) * d + c];
        }
  if (dxt) dxt->set_lod(xt.lod());
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(row_conv)
    .Doc(
        "Out[t, d] = sum_j X[t + j, d] * Filter[j, d] for j < context with t + j inside t's "
        "sequence (lookahead convolution). X is a LoD tensor [rows, D] or a padded "
        "[batch, time, D].")
    .Input("X", "a LoD tensor [rows, D], or [batch, time, D]")
    .Input("Filter", "[future_context_size + 1, D]")
    .Output("Out", "X's dims and LoD")
    .SetsLoD()
    .InferShape(RowConvInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          nn::MakeGradOp(fwd, {"X", "Filter", "Out@GRAD"}, {"X", "Filter"})};
    })
    .Kernel(Place::kCPU, proto::FP32, RowConvKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, RowConvKernel<double>);

LOOM_REGISTER_OP(row_conv_grad)
    .Doc("X@GRAD and Filter@GRAD of row_conv.")
    .Input("X", "forward X")
    .Input("Filter", "forward Filter")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("Filter@GRAD", "gradient of Filter", false, true)
    .SetsLoD()
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, RowConvGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, RowConvGradKernel<double>);

}  // namespace loom::ops
