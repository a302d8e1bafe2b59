// scatter_nd_add: Out = X with Updates added at the slices Index names. Index is [..., k]: each
// of its rows picks a slice X[i0, ..., i(k-1), ...]; Updates is Index.dims[:-1] + X.dims[k:].
// A slice named twice gets both updates. Fluid's scatter_nd is scatter_nd_add into zeros.
#include <algorithm>

#include "operators/common.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

Status ScatterNdAddInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X"), idx = ctx->InputDim("Index"), up = ctx->InputDim("Updates");
  if (idx.size() < 1 || idx[idx.size() - 1] < 0)
    return ctx->Error(ctx->DescribeInput("Index"), " needs a static last dim");
  const int64_t k = idx[idx.size() - 1];
  if (k > x.size())
    return ctx->Error(ctx->DescribeInput("Index"), " indexes ", k, " dims of ",
                      ctx->DescribeInput("X"), " (rank ", x.size(), ")");
  std::vector<int64_t> want = idx.vec();
  want.pop_back();
  for (int i = static_cast<int>(k); i < x.size(); ++i) want.push_back(x[i]);
  bool match = static_cast<int>(want.size()) == up.size();
  for (int i = 0; match && i < up.size(); ++i) match = want[i] < 0 || up[i] < 0 || want[i] == up[i];
  if (!match)
    return ctx->Error(ctx->DescribeInput("Updates"), " must be Index.dims[:-1] + X.dims[", k,
                      ":] = ", DDim(want).ToString());
  if (ctx->InputDtype("Updates") != ctx->InputDtype("X"))
    return ctx->Error(ctx->DescribeInput("Updates"), " must have the dtype of ",
                      ctx->DescribeInput("X"));
  ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

int64_t IndexValue(const Tensor& t, int64_t i) {
  return t.dtype() == proto::INT64 ? t.data<int64_t>()[i]
                                   : static_cast<int64_t>(t.data<int32_t>()[i]);
}

// The element offset in X of the slice each row of Index names; *inner = elements per slice.
StatusOr<std::vector<int64_t>> SliceOffsets(const KernelContext& ctx, int64_t* inner) {
  const DDim x = ctx.Input("X").dims();
  const Tensor& idx = ctx.Input("Index");
  if (idx.dtype() != proto::INT32 && idx.dtype() != proto::INT64)
    return ctx.Error("Index must be int32 or int64, got ", DataTypeName(idx.dtype()));
  const int64_t k = idx.dims()[idx.dims().size() - 1];
  *inner = 1;
  for (int i = static_cast<int>(k); i < x.size(); ++i) *inner *= x[i];
  const int64_t rows = k > 0 ? idx.numel() / k : 0;
  if (ctx.Input("Updates").numel() != rows * *inner)
    return ctx.Error("Updates has ", ctx.Input("Updates").numel(), " elements for ", rows,
                     " slices of ", *inner);
  std::vector<int64_t> offs(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t o = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t v = IndexValue(idx, r * k + j);
      if (v < 0 || v >= x[j])
        return ctx.Error("Index ", v, " in row ", r, " is outside dim ", j, " of X (", x[j], ")");
      o = o * x[j] + v;
    }
    offs[r] = o * *inner;
  }
  return offs;
}

template <typename T>
Status ScatterNdAddKernel(const KernelContext& ctx) {
  int64_t inner = 0;
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> offs, SliceOffsets(ctx, &inner));
  const Tensor& x = ctx.Input("X");
  const T* u = ctx.Input("Updates").data<T>();
  Tensor* out = ctx.Output("Out");
  out->Resize(x.dims());
  T* o = out->mutable_data<T>(ctx.place());
  if (o != x.data<T>()) std::copy_n(x.data<T>(), x.numel(), o);
  for (size_t r = 0; r < offs.size(); ++r)
    for (int64_t j = 0; j < inner; ++j) o[offs[r] + j] += u[r * inner + j];
  return Status::OK();
}

// X@GRAD = Out@GRAD; Updates@GRAD = Out@GRAD gathered at the slices.
template <typename T>
Status ScatterNdAddGradKernel(const KernelContext& ctx) {
  int64_t inner = 0;
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> offs, SliceOffsets(ctx, &inner));
  const Tensor& g = ctx.Input("Out@GRAD");
  if (Tensor* dx = ctx.OutputOrNull("X@GRAD")) {
    dx->Resize(g.dims());
    std::copy_n(g.data<T>(), g.numel(), dx->mutable_data<T>(ctx.place()));
  }
  if (Tensor* du = ctx.OutputOrNull("Updates@GRAD")) {
    du->Resize(ctx.Input("Updates").dims());
    T* o = du->mutable_data<T>(ctx.place());
    for (size_t r = 0; r < offs.size(); ++r)
      std::copy_n(g.data<T>() + offs[r], inner, o + r * inner);
  }
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(scatter_nd_add)
    .Doc(
        "Out = X, then Out[Index[r, 0], ..., Index[r, k - 1], ...] += Updates[r, ...] for every "
        "row r of Index ([..., k]); Updates is Index.dims[:-1] + X.dims[k:].")
    .Input("X", "the tensor added to")
    .Input("Index", "int32 / int64 [..., k]")
    .Input("Updates", "Index.dims[:-1] + X.dims[k:]")
    .Output("Out", "X's dims")
    .InferShape(ScatterNdAddInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          nn::MakeGradOp(fwd, {"X", "Index", "Updates", "Out@GRAD"}, {"X", "Updates"})};
    })
    .Kernel(Place::kCPU, proto::FP32, ScatterNdAddKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, ScatterNdAddKernel<double>)
    .Kernel(Place::kCPU, proto::INT32, ScatterNdAddKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, ScatterNdAddKernel<int64_t>);

LOOM_REGISTER_OP(scatter_nd_add_grad)
    .Doc("X@GRAD = Out@GRAD; Updates@GRAD = Out@GRAD at the slices Index names.")
    .Input("X", "forward X")
    .Input("Index", "forward Index")
    .Input("Updates", "forward Updates")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("Updates@GRAD", "gradient of Updates", false, true)
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, ScatterNdAddGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, ScatterNdAddGradKernel<double>);

}  // namespace loom::ops
