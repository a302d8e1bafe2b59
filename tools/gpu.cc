#include <cuda_runtime.h>

#include "loom/config.h"
#include "collective/transport/cuda_p2p.h"
#include "tools/gpu.h"
#if LOOM_NCCL_ENABLED
#include "collective/transport/nccl.h"
#endif

namespace loom::cli {
namespace {

Status Cuda(cudaError_t e, const char* what, int device) {
  if (e == cudaSuccess) return Status::OK();
  cudaGetLastError();
  return Internal(what, " on CUDA device ", device, " failed: ", cudaGetErrorString(e));
}

class DeviceMemory final : public BenchMemory {
 public:
  explicit DeviceMemory(int device) : device_(device) {}
  StatusOr<std::shared_ptr<void>> Allocate(size_t bytes) override {
    bytes = std::max<size_t>(bytes, 1);
    void* p = nullptr;
    LOOM_RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "cudaSetDevice", device_));
    LOOM_RETURN_IF_ERROR(Cuda(cudaMalloc(&p, bytes), "cudaMalloc", device_));
    std::shared_ptr<void> out(p, [d = device_](void* q) {
      cudaSetDevice(d);
      cudaFree(q);
    });
    LOOM_RETURN_IF_ERROR(Cuda(cudaMemset(p, 0, bytes), "cudaMemset", device_));
    return out;
  }
  Status Upload(void* dst, const void* host, size_t bytes) override {
    LOOM_RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "cudaSetDevice", device_));
    return Cuda(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy", device_);
  }
  Status Download(void* host, const void* src, size_t bytes) override {
    LOOM_RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "cudaSetDevice", device_));
    return Cuda(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy", device_);
  }

 private:
  int device_;
};

}  // namespace

StatusOr<CudaBenchGroup> MakeCudaBenchGroup(const std::vector<int>& devices,
                                            const std::string& transport,
                                            const collective::CommunicatorOptions& options) {
  CudaBenchGroup group;
  if (transport == "p2p") {
    LOOM_ASSIGN_OR_RETURN(group.comms, collective::CreateCudaP2PCommunicators(devices, options));
  } else if (transport == "nccl") {
#if LOOM_NCCL_ENABLED
    LOOM_ASSIGN_OR_RETURN(group.comms, collective::CreateNcclCommunicators(devices, options));
#else
    return Unimplemented("this loom was built without NCCL; use --transport p2p");
#endif
  } else {
    return InvalidArgument("CUDA places take --transport p2p or nccl, not '", transport, "'");
  }
  for (int d : devices) group.memory.push_back(std::make_unique<DeviceMemory>(d));
  return group;
}

StatusOr<collective::Topology> DetectGpuTopology() {
  const int n = collective::CudaDeviceCount();
  if (n == 0) return NotFound("the CUDA runtime sees no GPU");
  std::vector<int> devices;
  for (int d = 0; d < n; ++d) devices.push_back(d);
  return collective::DetectCudaTopology(devices);
}

}  // namespace loom::cli
