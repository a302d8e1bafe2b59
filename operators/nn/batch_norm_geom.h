// batch_norm sees X (NCHW or [N, C]) as [n, c, inner]; shared by the CPU kernels
// (batch_norm.cc) and the CUDA kernels (norm_softmax_cuda.cu). A plain struct, passed by value
// to device kernels. Host code only.
#pragma once

#include <cstdint>

#include "framework/ddim.h"

namespace loom::ops {

struct BnGeom {
  int64_t n, c, inner;  // X viewed as [n, c, inner]
};

inline BnGeom GeomOf(const DDim& x) { return {x[0], x[1], x.product(2, x.size())}; }

}  // namespace loom::ops
