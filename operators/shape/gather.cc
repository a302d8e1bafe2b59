// gather: rows of X picked by an integer index vector. gather_grad scatter-adds Out@GRAD back
// into a zero X@GRAD (repeated indices accumulate).
#include <algorithm>

#include "base/copy.h"
#include "operators/shape/shape_util.h"

namespace loom::ops {
namespace {

Status GatherInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X"), index = ctx->InputDim("Index");
  if (x.size() == 0) return ctx->Error(ctx->DescribeInput("X"), " must have rank >= 1");
  DataType it = ctx->InputDtype("Index");
  if (it != proto::INT32 && it != proto::INT64)
    return ctx->Error(ctx->DescribeInput("Index"), " is ", DataTypeName(it),
                      "; it must be int32 or int64");
  bool column = index.size() == 2 && (index[1] == 1 || index[1] < 0);
  if (index.size() != 1 && !column)
    return ctx->Error(ctx->DescribeInput("Index"), " must be 1-D (or [N, 1])");
  DDim out = x;
  out[0] = index[0];
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

Status GatherGradInferShape(InferShapeContext* ctx) { return GradLikeInput(ctx, "X"); }

// Checks every index against [0, rows).
template <typename I>
Status CheckIndex(const Tensor& index, int64_t rows, const DDim& x_dims) {
  const I* idx = index.data<I>();
  for (int64_t i = 0, i_end = index.numel(); i < i_end; ++i)
    if (idx[i] < 0 || idx[i] >= rows)
      return InvalidArgument("index ", static_cast<int64_t>(idx[i]), " (Index[", i,
                             "]) is out of range [0, ", rows, ") for dim 0 of X with dims ",
                             x_dims.ToString());
  return Status::OK();
}

// Out[i, :] = X[index[i], :].
template <typename T, typename I>
Status GatherCompute(const Tensor& x, const Tensor& index, Tensor* out, const Place& place) {
  int64_t rows = x.dims()[0];
  LOOM_RETURN_IF_ERROR(CheckIndex<I>(index, rows, x.dims()));
  int64_t width = x.dims().product(1, x.dims().size());
  const I* idx = index.data<I>();
  const T* in = x.data<T>();
  T* o = out->mutable_data<T>(place);
  if (width == 0) return Status::OK();
  for (int64_t i = 0, i_end = index.numel(); i < i_end; ++i)
    CopyBytes(o + i * width, in + idx[i] * width, static_cast<size_t>(width) * sizeof(T));
  return Status::OK();
}

// dx = zeros; dx[index[i], :] += g[i, :].
template <typename T, typename I>
Status GatherGradCompute(const Tensor& index, const Tensor& g, Tensor* dx, const Place& place) {
  int64_t rows = dx->dims()[0];
  LOOM_RETURN_IF_ERROR(CheckIndex<I>(index, rows, dx->dims()));
  int64_t width = dx->dims().product(1, dx->dims().size());
  const I* idx = index.data<I>();
  const T* gv = g.data<T>();
  T* d = dx->mutable_data<T>(place);
  std::fill(d, d + dx->numel(), T(0));
  for (int64_t i = 0, i_end = index.numel(); i < i_end; ++i) {
    T* row = d + idx[i] * width;
    const T* src = gv + i * width;
    for (int64_t k = 0; k < width; ++k) row[k] += src[k];
  }
  return Status::OK();
}

template <typename T>
Status GatherKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& index = ctx.Input("Index");
  Tensor* out = ctx.Output("Out");
  Status st = index.dtype() == proto::INT32 ? GatherCompute<T, int32_t>(x, index, out, ctx.place())
                                            : GatherCompute<T, int64_t>(x, index, out, ctx.place());
  return st.ok() ? st : ctx.Error(st.message());
}

template <typename T>
Status GatherGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& index = ctx.Input("Index");
  const Tensor& g = ctx.Input("Out@GRAD");
  Status st = index.dtype() == proto::INT32
                  ? GatherGradCompute<T, int32_t>(index, g, dx, ctx.place())
                  : GatherGradCompute<T, int64_t>(index, g, dx, ctx.place());
  return st.ok() ? st : ctx.Error(st.message());
}

std::vector<proto::OpDesc> GatherGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("gather_grad");
  op.SetInput("X", fwd.Input("X"));
  op.SetInput("Index", fwd.Input("Index"));
  op.SetInput("Out@GRAD", {GradVarName(fwd.Output("Out")[0])});
  op.SetOutput("X@GRAD", {GradVarName(fwd.Input("X")[0])});
  return {g};
}

}  // namespace

LOOM_REGISTER_OP(gather)
    .Doc("Out[i] = X[Index[i]]: rows (dim 0 entries) of X picked by Index.")
    .Input("X", "the source, rank >= 1")
    .Input("Index", "int32 or int64 row indices in [0, dims(X)[0]), 1-D or [N, 1]")
    .Output("Out", "[N] + dims(X)[1:]")
    .InferShape(GatherInferShape)
    .GradMaker(GatherGradMaker)
    .KernelDtypeFrom("X")
    .LOOM_SHAPE_KERNELS_ALL(GatherKernel);

LOOM_REGISTER_OP(gather_grad)
    .Doc("gradient of gather: X@GRAD = zeros with Out@GRAD rows added at Index")
    .Input("X", "forward input (for its dims)")
    .Input("Index", "forward index")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .InferShape(GatherGradInferShape)
    .KernelDtypeFrom("X")
    .LOOM_SHAPE_KERNELS_FLOAT(GatherGradKernel);

}  // namespace loom::ops
