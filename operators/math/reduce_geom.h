// Which dims reduce_sum / reduce_mean / reduce_max reduce (operators/math/reduce.cc), shared by
// shape inference, the CPU kernels and the CUDA kernels (matmul_reduce_cuda.cu). Host code only.
#pragma once

#include <vector>

#include "framework/op_registry.h"

namespace loom::ops {

// mask[k]: dim k of x is reduced. `dims` may be negative (counted from the end); reduce_all
// (`all`) reduces every dim and ignores `dims`.
inline StatusOr<std::vector<bool>> ReducedMask(const DDim& x, const std::vector<int>& dims,
                                               bool all) {
  std::vector<bool> mask(x.size(), all);
  if (all) return mask;
  for (int d : dims) {
    int k = d < 0 ? d + x.size() : d;
    if (k < 0 || k >= x.size())
      return InvalidArgument("dim ", d, " is out of range for rank ", x.size());
    mask[k] = true;
  }
  return mask;
}

}  // namespace loom::ops
