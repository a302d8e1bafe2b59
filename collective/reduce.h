// Reduction kernels on host buffers: dst[i] = a[i] (op) b[i] for every element type and operator,
// plus the final scaling of kAvg. dst may alias a or b; a and b may not partially overlap dst.
// Pure functions on caller-owned memory; safe from any thread on disjoint buffers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collective/types.h"

namespace loom::collective {

// IEEE binary16 <-> binary32, round to nearest even; NaN stays NaN, overflow goes to infinity.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);

// A reduction as a value: the element type and the operator. kAvg reduces like kSum; the division
// happens once, in Finalize, on the rank that holds the complete sum.
struct Reduction {
  DataType dtype;
  ReduceOp op;
};

// dst[i] = a[i] op b[i] for i < count.
void Reduce(const Reduction& r, void* dst, const void* a, const void* b, size_t count);

// For kAvg divides every element by nranks; no-op for every other operator.
void Finalize(const Reduction& r, void* buf, size_t count, int nranks);

}  // namespace loom::collective
