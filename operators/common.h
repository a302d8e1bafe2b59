// Helpers shared by op definitions: shape-inference building blocks, dtype dispatch and the
// CPU thread pool policy. Kernels themselves are plain functions on tensors.
#pragma once

#include <string>

#include "framework/op_registry.h"

namespace loom::ops {

// Out takes the dims and dtype of X.
Status SameShapeInferShape(InferShapeContext* ctx);
// For every output slot "S@GRAD" present: dims and dtype of input slot "S" (each var of it).
Status GradInferShape(InferShapeContext* ctx);

// Calls f.template operator()<T>() for the C++ type T of dtype (float, double, int32, int64).
template <typename F>
Status DispatchNumeric(DataType dtype, const std::string& where, F&& f) {
  switch (dtype) {
    case proto::FP32: f.template operator()<float>(); return Status::OK();
    case proto::FP64: f.template operator()<double>(); return Status::OK();
    case proto::INT32: f.template operator()<int32_t>(); return Status::OK();
    case proto::INT64: f.template operator()<int64_t>(); return Status::OK();
    default: return Unimplemented(where, ": dtype ", DataTypeName(dtype), " not supported");
  }
}

// Check for attribute "dtype": a valid DataType code.
std::function<Status(const int&)> ValidDtype();

// Out takes X's variable type (a SelectedRows X gives a SelectedRows Out): the InferVarType
// of ops that also run on sparse gradients row by row (scale, clip, clip_by_norm).
Status SameVarType(InferShapeContext* ctx);

// When X holds a SelectedRows (a sparse gradient): merges its repeated ids (MergeRows), calls
// f(value) on the merged value tensor (host, one row per id), writes the result to Out as a
// SelectedRows and returns true. Returns false when X holds a tensor (the caller's dense path).
template <typename F>
StatusOr<bool> ApplyToMergedRows(const KernelContext& ctx, F&& f) {
  const SelectedRows* x = ctx.InputSelectedRows("X");
  if (!x) return false;
  SelectedRows merged;  // X and Out may be one variable
  LOOM_RETURN_IF_ERROR(MergeRows(*x, &merged).WithContext(ctx.Where()));
  LOOM_RETURN_IF_ERROR(f(&merged.value));
  *ctx.OutputSelectedRows("Out") = std::move(merged);
  return true;
}

}  // namespace loom::ops
