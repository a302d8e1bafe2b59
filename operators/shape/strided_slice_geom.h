// The selection of strided_slice, shared by its CPU kernels (strided_slice.cc) and CUDA twins
// (strided_slice_cuda.cu), so both resolve Fluid's bounds alike: per sliced axis a (start, end,
// stride) triple picks start, start + stride, ... up to (not including) end; negative start /
// end count from the end, end = -1 with a negative stride means "through index 0", bounds are
// clamped to the dim, and a pair that points against its stride selects nothing (an error).
#pragma once

#include <vector>

#include "operators/shape/shape_util.h"

namespace loom::ops {

// Per dim: the first index taken, how many (-1: unknown at compile time) and the signed step.
struct StridedAxis {
  int64_t first = 0;
  int64_t count = 0;
  int64_t step = 1;
};

// Per dim of `in` (all of them; unsliced dims whole). Attributes must be validated (same
// lengths, axes in range, no 0 stride). Returns the index of the triple that selects against
// its stride, or -1.
int ResolveStrided(const DDim& in, const std::vector<int>& axes, const std::vector<int>& starts,
                   const std::vector<int>& ends, const std::vector<int>& strides,
                   std::vector<StridedAxis>* sel);

// The selection as a box over the full tensor: its dims, the offset of its first element and,
// per dim, the (signed) distance in elements between neighbours.
struct StridedView {
  DDim dims;
  int64_t base = 0;
  std::vector<int64_t> steps;
};
StridedView MakeStridedView(const DDim& in, const std::vector<StridedAxis>& sel);

}  // namespace loom::ops
