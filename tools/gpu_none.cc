#include "tools/gpu.h"

#include "framework/place.h"

namespace loom::cli {

StatusOr<CudaBenchGroup> MakeCudaBenchGroup(const std::vector<int>&,
                                            const collective::TransportInfo&,
                                            const collective::CommunicatorOptions&) {
  return Unimplemented(
      "this loom was built without CUDA (no nvcc found at configure time); --places cuda:... "
      "is unavailable");
}

GpuReport DescribeGpus() {
  const char* cuda = PlaceKindName(Place::kCUDA);
  return {0, StrCat(cuda, ": not in this build (no nvcc found at configure time)\n", cuda,
                    " devices: 0\n")};
}

StatusOr<collective::Topology> DetectGpuTopology() {
  return NotFound("this loom was built without CUDA");
}

}  // namespace loom::cli
