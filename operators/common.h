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

}  // namespace loom::ops
