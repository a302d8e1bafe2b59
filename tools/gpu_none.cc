#include "tools/gpu.h"

namespace loom::cli {

StatusOr<CudaBenchGroup> MakeCudaBenchGroup(const std::vector<int>&,
                                            const collective::TransportInfo&,
                                            const collective::CommunicatorOptions&) {
  return Unimplemented(
      "this loom was built without CUDA (no nvcc found at configure time); --places cuda:... "
      "is unavailable");
}

GpuReport DescribeGpus() {
  return {0, "cuda: not in this build (no nvcc found at configure time)\ncuda devices: 0\n"};
}

StatusOr<collective::Topology> DetectGpuTopology() {
  return NotFound("this loom was built without CUDA");
}

}  // namespace loom::cli
