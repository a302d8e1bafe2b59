// Shape inference shared by the optimizer ops: a mismatch between an optimizer's inputs is a
// compile-time error naming the op and the slots, never a kernel reading a tensor as the wrong
// type.
#pragma once

#include "operators/common.h"

namespace loom::ops {

// `slot` has the dims and dtype of `like` (Grad, Velocity and Moment* of Param).
inline Status CheckLikeParam(InferShapeContext* ctx, const char* slot, const char* like) {
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

}  // namespace loom::ops
