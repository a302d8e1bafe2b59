// softmax / log_softmax see their input as [pre, d, post] around the softmax axis; the view is
// shared by the CPU kernels (softmax.cc) and the CUDA kernels (norm_softmax_cuda.cu). A plain
// struct, passed by value to device kernels. Host code only.
#pragma once

#include <cstdint>

#include "framework/ddim.h"

namespace loom::ops {

struct AxisView {
  int64_t pre = 1, d = 1, post = 1;
};

// The view of dims around `axis` (negative: counted from the end; validated by shape inference).
inline AxisView ViewAt(const DDim& dims, int axis) {
  if (axis < 0) axis += dims.size();
  AxisView v;
  v.pre = dims.product(0, axis);
  v.d = dims[axis];
  v.post = dims.product(axis + 1, dims.size());
  return v;
}

}  // namespace loom::ops
