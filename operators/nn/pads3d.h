// The "paddings" attribute of the 3-D ops (conv3d, conv3d_transpose, pool3d): 3 values, the
// padding on each side of D, H and W, or 6, [before, after] of D, H and W (Fluid's [front, back,
// top, bottom, left, right]). Index arithmetic uses the padding before; the padding after only
// lengthens the axis and so the output size. Shared by the CPU and CUDA kernels; host code.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "framework/op_registry.h"

namespace loom::ops {

inline int64_t PadBefore(const std::vector<int>& pads, int axis) {
  return pads.size() == 6 ? pads[2 * axis] : pads[axis];
}

inline int64_t PadAfter(const std::vector<int>& pads, int axis) {
  return pads.size() == 6 ? pads[2 * axis + 1] : pads[axis];
}

// Check for the attribute: 3 or 6 values, each >= 0.
inline std::function<Status(const std::vector<int>&)> Pads3D() {
  return [](const std::vector<int>& v) {
    if (v.size() != 3 && v.size() != 6)
      return InvalidArgument("must hold 3 or 6 values, got ", v.size());
    for (int x : v)
      if (x < 0) return InvalidArgument("values must be >= 0, got ", x);
    return Status::OK();
  };
}

}  // namespace loom::ops
