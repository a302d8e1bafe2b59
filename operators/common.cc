#include "operators/common.h"

namespace loom::ops {

Status SameShapeInferShape(InferShapeContext* ctx) {
  ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

Status GradInferShape(InferShapeContext* ctx) {
  // Grad ops name their outputs "<Slot>@GRAD"; the matching forward input is slot "<Slot>".
  // Slot names are not enumerable through the context, so try the conventional ones.
  static const char* kSlots[] = {"X",     "Y",      "Input", "Filter", "Bias",
                                 "Scale", "Logits", "W",     "Param",  "Ids"};
  for (const char* slot : kSlots) {
    std::string grad = GradVarName(slot);
    for (int i = 0; i < ctx->OutputSize(grad); ++i) {
      if (ctx->OutputVarName(grad, i) == kEmptyVarName) continue;
      ctx->SetOutputDim(grad, ctx->InputDim(slot, i), i);
      ctx->SetOutputDtype(grad, ctx->InputDtype(slot, i), i);
    }
  }
  return Status::OK();
}

std::function<Status(const int&)> ValidDtype() {
  return [](const int& v) {
    return proto::DataType_IsValid(v) ? Status::OK()
                                      : InvalidArgument("not a valid dtype code: ", v);
  };
}

Status SameVarType(InferShapeContext* ctx) {
  ctx->SetOutputVarType("Out", ctx->InputVarType("X"));
  return Status::OK();
}

}  // namespace loom::ops
