// sequence_scatter: adds the updates of sequence i to row i of X. Ids and Updates are LoD
// tensors [K, 1] with one sequence per row of X: Out = X, then Out[i, Ids[j]] += Updates[j] for
// every j of sequence i.
#include <algorithm>

#include "operators/common.h"
#include "operators/nn/nn_util.h"
#include "operators/sequence/sequence_util.h"

namespace loom::ops {
namespace {

Status SequenceScatterInferShape(InferShapeContext* ctx) {
  const DDim x = ctx->InputDim("X"), ids = ctx->InputDim("Ids"), up = ctx->InputDim("Updates");
  if (x.size() != 2) return ctx->Error(ctx->DescribeInput("X"), " must be [rows, width]");
  const DataType it = ctx->InputDtype("Ids");
  if (it != proto::INT32 && it != proto::INT64)
    return ctx->Error(ctx->DescribeInput("Ids"), " must be int32 or int64");
  if (ids.size() != 2 || up.size() != 2 || (ids[0] >= 0 && up[0] >= 0 && ids[0] != up[0]))
    return ctx->Error(ctx->DescribeInput("Ids"), " and ", ctx->DescribeInput("Updates"),
                      " must be LoD tensors [K, 1] of the same K");
  if (ctx->InputDtype("Updates") != ctx->InputDtype("X"))
    return ctx->Error(ctx->DescribeInput("Updates"), " must have the dtype of ",
                      ctx->DescribeInput("X"));
  ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

// For every update j: its element offset in X.
StatusOr<std::vector<int64_t>> ScatterPlaces(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& ids = ctx.Input("Ids");
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, SequenceOffsets(ctx, "Ids"));
  const int64_t rows = x.dims()[0], width = x.dims()[1];
  if (static_cast<int64_t>(off.size()) - 1 != rows)
    return ctx.Error("Ids has ", off.size() - 1, " sequences for ", rows, " rows of X");
  if (ctx.Input("Updates").numel() != ids.numel())
    return ctx.Error("Updates has ", ctx.Input("Updates").numel(), " elements for ", ids.numel(),
                     " ids");
  std::vector<int64_t> places(static_cast<size_t>(ids.numel()));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = off[i]; j < off[i + 1]; ++j) {
      const int64_t c =
          ids.dtype() == proto::INT64 ? ids.data<int64_t>()[j] : ids.data<int32_t>()[j];
      if (c < 0 || c >= width)
        return ctx.Error("Ids[", j, "] = ", c, " is outside row ", i, " of X (width ", width, ")");
      places[j] = i * width + c;
    }
  return places;
}

template <typename T>
Status SequenceScatterKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> places, ScatterPlaces(ctx));
  const Tensor& x = ctx.Input("X");
  const T* u = ctx.Input("Updates").data<T>();
  Tensor* out = ctx.Output("Out");
  out->Resize(x.dims());
  T* o = out->mutable_data<T>(ctx.place());
  if (o != x.data<T>()) std::copy_n(x.data<T>(), x.numel(), o);
  for (size_t j = 0; j < places.size(); ++j) o[places[j]] += u[j];
  out->set_lod(x.lod());
  return Status::OK();
}

// X@GRAD = Out@GRAD; Updates@GRAD[j] = Out@GRAD at update j's place.
template <typename T>
Status SequenceScatterGradKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> places, ScatterPlaces(ctx));
  const Tensor& g = ctx.Input("Out@GRAD");
  if (Tensor* dx = ctx.OutputOrNull("X@GRAD")) {
    dx->Resize(g.dims());
    std::copy_n(g.data<T>(), g.numel(), dx->mutable_data<T>(ctx.place()));
    dx->set_lod(ctx.Input("X").lod());
  }
  if (Tensor* du = ctx.OutputOrNull("Updates@GRAD")) {
    const Tensor& up = ctx.Input("Updates");
    du->Resize(up.dims());
    T* o = du->mutable_data<T>(ctx.place());
    for (size_t j = 0; j < places.size(); ++j) o[j] = g.data<T>()[places[j]];
    du->set_lod(up.lod());
  }
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(sequence_scatter)
    .Doc(
        "Out = X, then Out[i, Ids[j]] += Updates[j] for every j of sequence i of Ids (one "
        "sequence per row of X).")
    .Input("X", "[rows, width]")
    .Input("Ids", "int32 / int64 LoD tensor [K, 1], one sequence per row of X")
    .Input("Updates", "LoD tensor [K, 1], X's dtype")
    .Output("Out", "X's dims")
    .SetsLoD()
    .InferShape(SequenceScatterInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          nn::MakeGradOp(fwd, {"X", "Ids", "Updates", "Out@GRAD"}, {"X", "Updates"})};
    })
    .Kernel(Place::kCPU, proto::FP32, SequenceScatterKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SequenceScatterKernel<double>)
    .Kernel(Place::kCPU, proto::INT32, SequenceScatterKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, SequenceScatterKernel<int64_t>);

LOOM_REGISTER_OP(sequence_scatter_grad)
    .Doc("X@GRAD = Out@GRAD; Updates@GRAD[j] = Out@GRAD at the place update j was added.")
    .Input("X", "forward X")
    .Input("Ids", "forward Ids")
    .Input("Updates", "forward Updates")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("Updates@GRAD", "gradient of Updates", false, true)
    .SetsLoD()
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, SequenceScatterGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SequenceScatterGradKernel<double>);

}  // namespace loom::ops
