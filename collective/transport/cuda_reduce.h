// Internal: the reduction kernels of the CUDA P2P transport, the device twins of reduce.h (same
// element types, operators, integer wrap-around, fp16 through float rounded to nearest even, and
// max/min written as std::max/std::min so NaNs come out the same). Each call enqueues on `stream`
// and returns the launch status.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "collective/reduce.h"

namespace loom::collective::internal {

// dst[i] = a[i] (op) b[i] for i < count (kAvg reduces like kSum).
cudaError_t LaunchReduce(const Reduction& reduction, void* dst, const void* a, const void* b,
                         size_t count, cudaStream_t stream);
// buf[i] /= nranks for kAvg (integers truncate); nothing for every other operator.
cudaError_t LaunchFinalize(const Reduction& reduction, void* buf, size_t count, int nranks,
                           cudaStream_t stream);

}  // namespace loom::collective::internal
