#include <cuda_runtime.h>

#include <cstdio>

#include "collective/transport/cuda_p2p.h"
#include "framework/place.h"
#include "loom/config.h"
#include "tools/gpu.h"
#if LOOM_NCCL_ENABLED
#include <nccl.h>

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
                                            const collective::TransportInfo& transport,
                                            const collective::CommunicatorOptions& options) {
  CudaBenchGroup group;
  if (transport.id == collective::TransportId::kCudaP2P) {
    LOOM_ASSIGN_OR_RETURN(group.comms, collective::CreateCudaP2PCommunicators(devices, options));
  } else if (transport.id == collective::TransportId::kNccl) {
#if LOOM_NCCL_ENABLED
    LOOM_ASSIGN_OR_RETURN(group.comms, collective::CreateNcclCommunicators(devices, options));
#else
    return Unimplemented("this loom was built without NCCL; use --transport cuda_p2p");
#endif
  } else {
    return InvalidArgument("CUDA places take --transport cuda_p2p or nccl, not '", transport.name,
                           "'");
  }
  for (int d : devices) group.memory.push_back(std::make_unique<DeviceMemory>(d));
  return group;
}

GpuReport DescribeGpus() {
  GpuReport r;
  auto version = [](int v) { return StrCat(v / 1000, ".", (v % 1000) / 10); };
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  r.text = StrCat(PlaceKindName(Place::kCUDA), ": runtime ", version(runtime), ", driver ",
                  driver > 0 ? version(driver) : std::string("none"), "\n");
#if LOOM_NCCL_ENABLED
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess)
    r.text += StrCat("nccl: ", nccl / 10000, ".", (nccl / 100) % 100, ".", nccl % 100, "\n");
#else
  r.text += "nccl: not in this build\n";
#endif
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    r.text += StrCat("cuda devices: 0 (", cudaGetErrorString(e), ")\n");
    cudaGetLastError();
    return r;
  }
  r.count = n;
  r.text += StrCat("cuda devices: ", n, "\n");
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
      cudaGetLastError();
      r.text += StrCat("  cuda:", d, "  (properties unavailable)\n");
      continue;
    }
    char gib[32];
    std::snprintf(gib, sizeof gib, "%.1f GiB", p.totalGlobalMem / 1073741824.0);
    r.text +=
        StrCat("  cuda:", d, "  ", p.name, "  sm_", p.major, p.minor, "  ", p.multiProcessorCount,
               " SMs  ", gib, "  L2 ", p.l2CacheSize >> 20, " MiB  pci ", p.pciBusID, "\n");
  }
  return r;
}

StatusOr<collective::Topology> DetectGpuTopology() {
  const int n = collective::CudaDeviceCount();
  if (n == 0) return NotFound("the CUDA runtime sees no GPU");
  std::vector<int> devices;
  for (int d = 0; d < n; ++d) devices.push_back(d);
  return collective::DetectCudaTopology(devices);
}

}  // namespace loom::cli
