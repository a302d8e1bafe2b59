// dropout's attributes as its CPU kernels (dropout.cc) and CUDA kernels (dropout_cuda.cu) read
// them. Host code only.
#pragma once

#include <string>

#include "framework/op_registry.h"

namespace loom::ops {

// "upscale_in_train": kept values are divided by (1 - p) in training and is_test passes X
// through; "downgrade_in_infer": training keeps values as they are and is_test scales by 1 - p.
inline bool DropoutUpscalesInTrain(const KernelContext& ctx) {
  return ctx.Attr<std::string>("dropout_implementation") == "upscale_in_train";
}

}  // namespace loom::ops
