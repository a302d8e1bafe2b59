#include "framework/device_context.h"

#include <map>
#include <mutex>

#include "base/status.h"
#include "loom/config.h"

namespace loom {

#if !LOOM_CUDA_ENABLED
CUDADeviceContext::CUDADeviceContext(Place place) : DeviceContext(place) {
  LOOM_CHECK(false, "CUDA place ", place.ToString(), " in a build without CUDA");
}
CUDADeviceContext::~CUDADeviceContext() = default;
void CUDADeviceContext::Wait() const {}
int CudaDeviceCount() { return 0; }
#endif

DeviceContext* GetDeviceContext(const Place& place) {
  static std::mutex mu;
  static auto* contexts = new std::map<Place, std::unique_ptr<DeviceContext>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*contexts)[place];
  if (!slot) {
    if (place.is_cpu()) {
      slot = std::make_unique<CPUDeviceContext>(place);
    } else {
      slot = std::make_unique<CUDADeviceContext>(place);
    }
  }
  return slot.get();
}

}  // namespace loom
