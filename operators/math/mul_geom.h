// mul's operands as the 2-D matrices it multiplies (X flattened at x_num_col_dims, Y at
// y_num_col_dims), shared by the CPU kernels (mul.cc) and the CUDA kernels (mul_cuda.cu). Host
// code only.
#pragma once

#include "framework/op_registry.h"

namespace loom::ops {

struct MulGeom {
  DDim x2, y2;  // [rows, cols] of X and of Y
};

inline MulGeom MakeMulGeom(const KernelContext& ctx, const DDim& x, const DDim& y) {
  return MulGeom{FlattenTo2D(x, ctx.Attr<int>("x_num_col_dims")),
                 FlattenTo2D(y, ctx.Attr<int>("y_num_col_dims"))};
}

}  // namespace loom::ops
