// Shape inference shared by the optimizer ops: a mismatch between an optimizer's inputs is a
// compile-time error naming the op and the slots, never a kernel reading a tensor as the wrong
// type. Also the gradient an update kernel reads: dense, or a SelectedRows (sparse).
#pragma once

#include <vector>

#include "operators/common.h"

namespace loom::ops {

// `slot` has the dims and dtype of `like` (Grad, Velocity and Moment* of Param). A SelectedRows
// has no dims at run time: UpdateGrad checks it against Param in the kernel.
inline Status CheckLikeParam(InferShapeContext* ctx, const char* slot, const char* like) {
  if (ctx->IsRuntime() && ctx->InputVarType(slot) == proto::VarType::SELECTED_ROWS)
    return Status::OK();
  if (!DimsCompatible(ctx->InputDim(slot), ctx->InputDim(like)))
    return ctx->Error(ctx->DescribeInput(slot), " must have the dims of ",
                      ctx->DescribeInput(like));
  if (ctx->InputDtype(slot) != ctx->InputDtype(like))
    return ctx->Error(ctx->DescribeInput(slot), " is ", DataTypeName(ctx->InputDtype(slot)),
                      " but ", like, " is ", DataTypeName(ctx->InputDtype(like)));
  return Status::OK();
}

// A one-element input (LearningRate, Beta1Pow, ...) of Param's dtype, or float32 for a float16
// Param (mixed precision keeps the optimizer's scalars in float32).
inline Status CheckScalarOfParam(InferShapeContext* ctx, const char* slot) {
  DDim d = ctx->InputDim(slot);
  if (d.known() && d.numel() != 1)
    return ctx->Error(ctx->DescribeInput(slot), " must hold one element");
  const DataType dt = ctx->InputDtype(slot), param = ctx->InputDtype("Param");
  if (dt != param && !(param == proto::FP16 && dt == proto::FP32))
    return ctx->Error(ctx->DescribeInput(slot), " is ", DataTypeName(dt), " but Param is ",
                      DataTypeName(param), " (the optimizer's scalars take Param's dtype)");
  return Status::OK();
}

// The Grad of an update op. Dense: the tensor. A SelectedRows (an embedding's sparse gradient):
// checked against Param (height = Param's rows, row width, dtype), its repeated ids summed
// (MergeRows: ascending ids, each id's repeats added in order, so the sums equal a dense
// gradient's), then either kept as rows, for the updates that move only the rows a batch
// touched (sgd, adagrad, lazy adam), or scattered into a dense gradient of Param's shape, for
// the updates that also move untouched rows (momentum and adam decay their state everywhere).
template <typename T>
class UpdateGrad {
 public:
  Status Read(const KernelContext& ctx, const Tensor& param, bool densify) {
    const SelectedRows* s = ctx.InputSelectedRows("Grad");
    if (!s) {
      dense_ = ctx.Input("Grad").data<T>();
      return Status::OK();
    }
    const std::string where = StrCat(ctx.Where(), ": Grad (var '", ctx.InputVarName("Grad"), "')");
    LOOM_RETURN_IF_ERROR(CheckSelectedRows(*s, where));
    if (param.dims().size() < 1 || s->DenseDims() != param.dims())
      return InvalidArgument(where, " is a SelectedRows of dense shape ", s->DenseDims().ToString(),
                             ", Param is ", param.dims().ToString());
    if (s->value.dtype() != ToDataType<T>())
      return InvalidArgument(where, " is ", DataTypeName(s->value.dtype()), ", Param is ",
                             DataTypeName(ToDataType<T>()));
    if (!s->rows.empty() && !s->value.place().is_cpu())
      return InvalidArgument(where, " is on ", s->value.place().ToString(),
                             "; this kernel runs on the host");
    LOOM_RETURN_IF_ERROR(MergeRows(*s, &merged_));
    width_ = merged_.RowWidth();
    if (densify) {
      LOOM_RETURN_IF_ERROR(SelectedRowsToDense(merged_, &densified_));
      dense_ = densified_.data<T>();
    } else {
      sparse_ = true;
      values_ = merged_.rows.empty() ? nullptr : merged_.value.data<T>();
    }
    return Status::OK();
  }
  bool sparse() const { return sparse_; }
  // Dense: Param's numel values.
  const T* dense() const { return dense_; }
  // Sparse: row k of the gradient is Param's row rows()[k], its values at values() + k * width().
  const std::vector<int64_t>& rows() const { return merged_.rows; }
  const T* values() const { return values_; }
  int64_t width() const { return width_; }
  // Calls f(param_index, grad_value) for every element the gradient has (all of Param when
  // dense; the touched rows when sparse).
  template <typename F>
  void ForEach(int64_t numel, F&& f) const {
    if (!sparse_) {
      for (int64_t i = 0; i < numel; ++i) f(i, dense_[i]);
      return;
    }
    for (size_t k = 0; k < merged_.rows.size(); ++k) {
      const int64_t base = merged_.rows[k] * width_;
      const T* v = values_ + static_cast<int64_t>(k) * width_;
      for (int64_t j = 0; j < width_; ++j) f(base + j, v[j]);
    }
  }

 private:
  bool sparse_ = false;
  const T* dense_ = nullptr;
  const T* values_ = nullptr;
  int64_t width_ = 0;
  SelectedRows merged_;
  Tensor densified_;
};

}  // namespace loom::ops
