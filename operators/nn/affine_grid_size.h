// The grid height and width of affine_grid: output_shape[2:4] of the attribute, or of the
// optional OutputShape input (int32 [4], read when the op runs). Shared by the CPU kernels
// (grid_sample.cc) and the CUDA kernels (grid_sample_cuda.cu). Host code.
#pragma once

#include <utility>
#include <vector>

#include "framework/allocator.h"
#include "framework/op_registry.h"

namespace loom::ops {

inline StatusOr<std::pair<int64_t, int64_t>> AffineGridSize(const KernelContext& ctx) {
  int64_t shape[4];
  if (const Tensor* t = ctx.InputOrNull("OutputShape")) {
    if (t->numel() != 4 || t->dtype() != proto::INT32)
      return InvalidArgument(ctx.Where(), ": OutputShape must hold 4 int32 values, got ",
                             t->dims().ToString(), " ", DataTypeName(t->dtype()));
    int32_t host[4];
    MemCopy(Place::CPU(), host, t->place(), t->data<int32_t>(), sizeof(host));
    for (int i = 0; i < 4; ++i) shape[i] = host[i];
  } else {
    const auto& attr = ctx.Attr<std::vector<int>>("output_shape");
    for (int i = 0; i < 4; ++i) shape[i] = attr[i];
  }
  if (shape[2] < 2 || shape[3] < 2)
    return InvalidArgument(ctx.Where(), ": the output height and width (", shape[2], ", ", shape[3],
                           ") must be at least 2");
  return std::make_pair(shape[2], shape[3]);
}

}  // namespace loom::ops
