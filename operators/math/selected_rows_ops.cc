// The ops Fluid has for SelectedRows variables (framework/selected_rows.h):
//   merge_selected_rows            Out = X with repeated ids summed (one row per id, ascending)
//   get_tensor_from_selected_rows  Out = X's value, a dense [rows, ...] tensor
// Clipping by global norm uses both to take the norm of a sparse gradient. A dense X passes
// through as a copy (a program whose sparse gradients a transpiler made dense still runs).
#include "operators/common.h"

namespace loom::ops {
namespace {

bool DenseInput(InferShapeContext* ctx) {
  return ctx->InputVarType("X") != proto::VarType::SELECTED_ROWS;
}

Status MergeVarType(InferShapeContext* ctx) {
  ctx->SetOutputVarType("Out", ctx->InputVarType("X"));
  return Status::OK();
}

Status MergeInferShape(InferShapeContext* ctx) {
  if (!ctx->IsRuntime() || DenseInput(ctx)) ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

Status MergeKernel(const KernelContext& ctx) {
  const SelectedRows* sx = ctx.InputSelectedRows("X");
  if (!sx) {
    TensorCopy(ctx.Input("X"), ctx.place(), ctx.Output("Out"));
    return Status::OK();
  }
  const SelectedRows& x = *sx;
  SelectedRows merged;
  LOOM_RETURN_IF_ERROR(MergeRows(x, &merged));
  *ctx.OutputSelectedRows("Out") = std::move(merged);
  return Status::OK();
}

Status GetTensorVarType(InferShapeContext* ctx) {
  ctx->SetOutputVarType("Out", proto::VarType::DENSE_TENSOR);
  return Status::OK();
}

Status GetTensorInferShape(InferShapeContext* ctx) {
  if (DenseInput(ctx)) {
    ctx->ShareDimAndDtype("X", "Out");
    return Status::OK();
  }
  if (ctx->IsRuntime()) return Status::OK();  // the kernel sets the dims
  DDim d = ctx->InputDim("X");
  if (d.size() >= 1) d[0] = -1;  // as many rows as the gradient has
  ctx->SetOutputDim("Out", d);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

Status GetTensorKernel(const KernelContext& ctx) {
  const SelectedRows* sx = ctx.InputSelectedRows("X");
  if (!sx) {
    TensorCopy(ctx.Input("X"), ctx.place(), ctx.Output("Out"));
    return Status::OK();
  }
  const SelectedRows& x = *sx;
  LOOM_RETURN_IF_ERROR(CheckSelectedRows(x, StrCat(ctx.Where(), ": input 'X'")));
  TensorCopy(x.value, ctx.place(), ctx.Output("Out"));
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(merge_selected_rows)
    .Doc("Out = the SelectedRows X with repeated ids summed: one row per id, ids ascending.")
    .Input("X", "a SelectedRows")
    .Output("Out", "the merged SelectedRows")
    .InferVarType(MergeVarType)
    .InferShape(MergeInferShape)
    .KernelDtypeFrom("X")
    .Kernel(Place::kCPU, proto::FP32, MergeKernel)
    .Kernel(Place::kCPU, proto::FP64, MergeKernel);

LOOM_REGISTER_OP(get_tensor_from_selected_rows)
    .Doc("Out = the value of the SelectedRows X: a dense tensor with one row per id of X.")
    .Input("X", "a SelectedRows")
    .Output("Out", "its value, [rows of X, ...]")
    .InferVarType(GetTensorVarType)
    .InferShape(GetTensorInferShape)
    .KernelDtypeFrom("X")
    .Kernel(Place::kCPU, proto::FP32, GetTensorKernel)
    .Kernel(Place::kCPU, proto::FP64, GetTensorKernel);

}  // namespace loom::ops
