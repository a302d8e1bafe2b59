// lookup_table: embedding lookup. Out[i] = W[Ids[i]]; Ids is int64 (or int32) [N, 1] or [N]
// (any rank; a trailing 1 is dropped), Out is Ids' dims (without the trailing 1) + [D].
// Rows whose id equals padding_idx are zero and get no gradient. The gradient is dense, or with
// is_sparse a SelectedRows: one row per looked-up id (repeats kept, padding ids dropped), so a
// step costs the batch's rows, not the table's.
#include <vector>

#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

Status LookupTableInferShape(InferShapeContext* ctx) {
  DDim w = ctx->InputDim("W"), ids = ctx->InputDim("Ids");
  if (w.size() != 2) return ctx->Error(ctx->DescribeInput("W"), " must be 2-D [V, D]");
  if (ids.size() < 1) return ctx->Error(ctx->DescribeInput("Ids"), " must have rank >= 1");
  DataType idt = ctx->InputDtype("Ids");
  if (idt != proto::INT64 && idt != proto::INT32)
    return ctx->Error(ctx->DescribeInput("Ids"), " is ", DataTypeName(idt),
                      ", must be int64 or int32");
  if (!IsFloatingPoint(ctx->InputDtype("W")))
    return ctx->Error(ctx->DescribeInput("W"), " is ", DataTypeName(ctx->InputDtype("W")),
                      ", must be floating point");
  int padding_idx = ctx->Attr<int>("padding_idx");
  if (w[0] >= 0 && padding_idx >= w[0])
    return ctx->Error("padding_idx (", padding_idx, ") is out of range for ",
                      ctx->DescribeInput("W"), " (", w[0], " rows)");
  DDim out;
  int keep = ids.size() >= 2 && ids[ids.size() - 1] == 1 ? ids.size() - 1 : ids.size();
  for (int i = 0; i < keep; ++i) out.push_back(ids[i]);
  out.push_back(w[1]);
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("W"));
  return Status::OK();
}

// The ids as int64, checked against [0, rows).
Status ReadIds(const KernelContext& ctx, const Tensor& ids, int64_t rows,
               std::vector<int64_t>* out) {
  out->resize(ids.numel());
  for (int64_t i = 0, i_end = ids.numel(); i < i_end; ++i) {
    int64_t id = ids.dtype() == proto::INT64 ? ids.data<int64_t>()[i]
                                             : static_cast<int64_t>(ids.data<int32_t>()[i]);
    if (id < 0 || id >= rows)
      return ctx.Error("id ", id, " at position ", i, " of Ids is out of range [0, ", rows,
                       ") of W (", rows, " rows)");
    (*out)[i] = id;
  }
  return Status::OK();
}

template <typename T>
Status LookupTableKernel(const KernelContext& ctx) {
  const Tensor& w = ctx.Input("W");
  const int64_t rows = w.dims()[0], d = w.dims()[1];
  std::vector<int64_t> ids;
  LOOM_RETURN_IF_ERROR(ReadIds(ctx, ctx.Input("Ids"), rows, &ids));
  const int64_t pad = ctx.Attr<int>("padding_idx");
  const T* table = w.data<T>();
  T* out = ctx.Output("Out")->mutable_data<T>(ctx.place());
  for (size_t i = 0; i < ids.size(); ++i) {
    T* dst = out + static_cast<int64_t>(i) * d;
    if (ids[i] == pad)
      std::fill(dst, dst + d, T(0));
    else
      std::copy(table + ids[i] * d, table + (ids[i] + 1) * d, dst);
  }
  return Status::OK();
}

// Sparse: W@GRAD = SelectedRows {rows: the ids that are not padding_idx, in order;
// value[k] = Out@GRAD of the k-th of them}.
template <typename T>
Status LookupTableSparseGrad(const KernelContext& ctx, SelectedRows* dw) {
  const Tensor& w = ctx.Input("W");
  const int64_t rows = w.dims()[0], d = w.dims()[1];
  std::vector<int64_t> ids;
  LOOM_RETURN_IF_ERROR(ReadIds(ctx, ctx.Input("Ids"), rows, &ids));
  const int64_t pad = ctx.Attr<int>("padding_idx");
  const T* g = ctx.Input("Out@GRAD").data<T>();
  dw->height = rows;
  dw->rows.clear();
  for (int64_t id : ids)
    if (id != pad) dw->rows.push_back(id);
  dw->value.Resize({static_cast<int64_t>(dw->rows.size()), d});
  T* dst = dw->value.template mutable_data<T>(ctx.place());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == pad) continue;
    std::copy(g + static_cast<int64_t>(i) * d, g + static_cast<int64_t>(i + 1) * d, dst);
    dst += d;
  }
  return Status::OK();
}

// W@GRAD = 0, then W@GRAD[Ids[i]] += Out@GRAD[i] for every i whose id is not padding_idx.
template <typename T>
Status LookupTableGradKernel(const KernelContext& ctx) {
  if (ctx.Attr<bool>("is_sparse")) {
    SelectedRows* dw = ctx.OutputSelectedRows("W@GRAD");
    return dw ? LookupTableSparseGrad<T>(ctx, dw) : Status::OK();
  }
  Tensor* dwt = ctx.OutputOrNull("W@GRAD");
  if (!dwt) return Status::OK();
  const Tensor& w = ctx.Input("W");
  const int64_t rows = w.dims()[0], d = w.dims()[1];
  std::vector<int64_t> ids;
  LOOM_RETURN_IF_ERROR(ReadIds(ctx, ctx.Input("Ids"), rows, &ids));
  const int64_t pad = ctx.Attr<int>("padding_idx");
  const T* g = ctx.Input("Out@GRAD").data<T>();
  T* dw = dwt->mutable_data<T>(ctx.place());
  std::fill(dw, dw + dwt->numel(), T(0));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == pad) continue;
    const T* src = g + static_cast<int64_t>(i) * d;
    T* dst = dw + ids[i] * d;
    for (int64_t j = 0; j < d; ++j) dst[j] += src[j];
  }
  return Status::OK();
}

std::vector<proto::OpDesc> LookupTableGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(fwd, {"W", "Ids", "Out@GRAD"}, {"W"})};
}

Status LookupTableGradInferShape(InferShapeContext* ctx) {
  // Sparse: the VarDesc describes the dense shape; at run time the SelectedRows has no dims.
  if (ctx->HasOutput("W@GRAD")) ctx->ShareDimAndDtype("W", "W@GRAD");
  return Status::OK();
}

Status LookupTableGradVarType(InferShapeContext* ctx) {
  if (ctx->HasOutput("W@GRAD"))
    ctx->SetOutputVarType("W@GRAD", ctx->Attr<bool>("is_sparse") ? proto::VarType::SELECTED_ROWS
                                                                 : proto::VarType::DENSE_TENSOR);
  return Status::OK();
}

std::function<Status(const int&)> PaddingIdxCheck() {
  return [](const int& v) {
    return v >= -1 ? Status::OK()
                   : InvalidArgument("must be -1 (none) or a row index >= 0, got ", v);
  };
}

}  // namespace

LOOM_REGISTER_OP(lookup_table)
    .Doc("Embedding lookup: Out[i] = W[Ids[i]]; rows for padding_idx are zero.")
    .Input("W", "embedding table [V, D]")
    .Input("Ids", "int64 ids [N, 1] or [N], each in [0, V)")
    .Output("Out", "embeddings [N, D]")
    .Attr<int>("padding_idx", -1, "id whose rows are zero and get no gradient; -1 for none",
               PaddingIdxCheck())
    .Attr<bool>("is_sparse", false,
                "the gradient of W is a SelectedRows of the looked-up rows, not a dense tensor")
    .Attr<bool>("is_distributed", false,
                "the table lives on the parameter servers (set by the distribute transpiler)")
    .KernelDtypeFrom("W")
    .InferShape(LookupTableInferShape)
    .GradMaker(LookupTableGradMaker)
    .Kernel(Place::kCPU, proto::FP32, LookupTableKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, LookupTableKernel<double>);

LOOM_REGISTER_OP(lookup_table_grad)
    .Doc(
        "W@GRAD of lookup_table: Out@GRAD rows scatter-added at Ids (dense), or with is_sparse "
        "those rows as a SelectedRows")
    .Input("W", "forward W (for its dims)")
    .Input("Ids", "forward Ids")
    .Input("Out@GRAD", "gradient of Out")
    .Output("W@GRAD", "gradient of W", false, true)
    .AttrsFrom("lookup_table")
    .KernelDtypeFrom("W")
    .InferVarType(LookupTableGradVarType)
    .InferShape(LookupTableGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, LookupTableGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, LookupTableGradKernel<double>);

}  // namespace loom::ops
