#include "collective/transport/cuda_p2p.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "collective/transport/cuda_reduce.h"
#include "collective/transport/inprocess.h"
#include "collective/transport/nvml_links.h"
#include "collective/transport_registry.h"

namespace loom::collective {
namespace {

Status CudaStatus(cudaError_t e, const char* what, int rank) {
  if (e == cudaSuccess) return Status::OK();
  cudaGetLastError();  // clear a non-sticky error so the rank can go on
  return Internal(what, " on rank ", rank, " failed: ", cudaGetErrorString(e));
}

// Host memory that CUDA does not know (the communicator's signatures) or pinned host memory.
bool IsHostPointer(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return true;
  }
  return attr.type == cudaMemoryTypeUnregistered || attr.type == cudaMemoryTypeHost;
}

// The GPUs of one group: rank r lives on devices[r]. streams[p][g] is rank p's stream on the g-th
// distinct GPU; only rank p's thread uses it, so operations of different performers never queue
// behind each other.
class CudaPeerMemory final : public RankMemory,
                             public std::enable_shared_from_this<CudaPeerMemory> {
 public:
  static StatusOr<std::shared_ptr<CudaPeerMemory>> Create(const std::vector<int>& devices) {
    std::shared_ptr<CudaPeerMemory> m(new CudaPeerMemory());
    m->devices_ = devices;
    for (int d : devices) {
      if (std::find(m->gpus_.begin(), m->gpus_.end(), d) == m->gpus_.end()) m->gpus_.push_back(d);
    }
    const size_t g = m->gpus_.size();
    m->peer_.assign(g * g, false);
    for (size_t a = 0; a < g; ++a) {
      m->peer_[a * g + a] = true;
      for (size_t b = 0; b < g; ++b) {
        if (a == b) continue;
        int can = 0;
        LOOM_RETURN_IF_ERROR(CudaStatus(cudaDeviceCanAccessPeer(&can, m->gpus_[a], m->gpus_[b]),
                                        "cudaDeviceCanAccessPeer", 0));
        if (!can) continue;
        LOOM_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(m->gpus_[a]), "cudaSetDevice", 0));
        const cudaError_t e = cudaDeviceEnablePeerAccess(m->gpus_[b], 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) {
          cudaGetLastError();
        } else {
          LOOM_RETURN_IF_ERROR(CudaStatus(e, "cudaDeviceEnablePeerAccess", 0));
        }
        m->peer_[a * g + b] = true;
      }
    }
    m->streams_.assign(devices.size(), std::vector<cudaStream_t>(g, nullptr));
    for (size_t r = 0; r < devices.size(); ++r) {
      for (size_t i = 0; i < g; ++i) {
        LOOM_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(m->gpus_[i]), "cudaSetDevice", r));
        LOOM_RETURN_IF_ERROR(
            CudaStatus(cudaStreamCreateWithFlags(&m->streams_[r][i], cudaStreamNonBlocking),
                       "cudaStreamCreate", r));
      }
    }
    return m;
  }

  ~CudaPeerMemory() override {
    for (size_t r = 0; r < streams_.size(); ++r) {
      for (size_t i = 0; i < streams_[r].size(); ++i) {
        if (streams_[r][i] == nullptr) continue;
        cudaSetDevice(gpus_[i]);
        cudaStreamDestroy(streams_[r][i]);
      }
    }
  }

  const char* name() const override { return GetTransport(TransportId::kCudaP2P).display; }

  Status Copy(int performer, int dst_rank, void* dst, int src_rank, const void* src,
              size_t bytes) override {
    if (dst == src || bytes == 0) return Status::OK();
    if (IsHostPointer(dst) && IsHostPointer(src)) {
      std::memmove(dst, src, bytes);
      return Status::OK();
    }
    const int g = GpuIndex(dst_rank);
    cudaStream_t stream = streams_[performer][g];
    LOOM_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(gpus_[g]), "cudaSetDevice", performer));
    LOOM_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream),
                                    "cudaMemcpyAsync", performer));
    return CudaStatus(cudaStreamSynchronize(stream), "copy", performer);
  }

  Status Reduce(int performer, const Reduction& reduction, int dst_rank, void* dst,
                const void* local, int src_rank, const void* remote, size_t count) override {
    if (count == 0) return Status::OK();
    const int g = GpuIndex(dst_rank), h = GpuIndex(src_rank);
    cudaStream_t stream = streams_[performer][g];
    LOOM_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(gpus_[g]), "cudaSetDevice", performer));
    void* staging = nullptr;
    if (!peer_[g * gpus_.size() + h]) {
      // No peer access from the receiver's GPU: bring the operand over first.
      const size_t bytes = count * DataTypeSize(reduction.dtype);
      LOOM_RETURN_IF_ERROR(
          CudaStatus(cudaMallocAsync(&staging, bytes, stream), "cudaMallocAsync", performer));
      Status s = CudaStatus(cudaMemcpyAsync(staging, remote, bytes, cudaMemcpyDefault, stream),
                            "cudaMemcpyAsync", performer);
      if (!s.ok()) {
        cudaFreeAsync(staging, stream);
        return s;
      }
      remote = staging;
    }
    Status s = CudaStatus(internal::LaunchReduce(reduction, dst, local, remote, count, stream),
                          "reduction kernel", performer);
    if (staging != nullptr) cudaFreeAsync(staging, stream);
    const Status synced = CudaStatus(cudaStreamSynchronize(stream), "reduction", performer);
    return s.ok() ? synced : s;
  }

  Status Finalize(int rank, const Reduction& reduction, void* buf, size_t count,
                  int nranks) override {
    if (reduction.op != ReduceOp::kAvg || count == 0) return Status::OK();
    const int g = GpuIndex(rank);
    cudaStream_t stream = streams_[rank][g];
    LOOM_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(gpus_[g]), "cudaSetDevice", rank));
    LOOM_RETURN_IF_ERROR(CudaStatus(internal::LaunchFinalize(reduction, buf, count, nranks, stream),
                                    "average kernel", rank));
    return CudaStatus(cudaStreamSynchronize(stream), "average", rank);
  }

  std::shared_ptr<void> Allocate(int rank, size_t bytes) override {
    const int g = GpuIndex(rank);
    cudaStream_t stream = streams_[rank][g];
    bytes = std::max<size_t>(bytes, 1);
    void* p = nullptr;
    if (cudaSetDevice(gpus_[g]) != cudaSuccess ||
        cudaMallocAsync(&p, bytes, stream) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    if (cudaMemsetAsync(p, 0, bytes, stream) != cudaSuccess ||
        cudaStreamSynchronize(stream) != cudaSuccess) {
      cudaGetLastError();
      cudaFreeAsync(p, stream);
      return nullptr;
    }
    // The deleter runs on the rank's thread after every transfer into the buffer has completed;
    // it keeps the streams alive.
    std::shared_ptr<CudaPeerMemory> self = shared_from_this();
    return std::shared_ptr<void>(p, [self, g, stream](void* q) {
      cudaSetDevice(self->gpus_[g]);
      cudaFreeAsync(q, stream);
    });
  }

 private:
  CudaPeerMemory() = default;
  int GpuIndex(int rank) const {
    return static_cast<int>(std::find(gpus_.begin(), gpus_.end(), devices_[rank]) - gpus_.begin());
  }

  std::vector<int> devices_;  // per rank
  std::vector<int> gpus_;     // distinct ordinals
  std::vector<bool> peer_;    // peer_[a * gpus + b]: kernels on gpus_[a] may read gpus_[b]
  std::vector<std::vector<cudaStream_t>> streams_;
};

Status CheckDevices(const std::vector<int>& devices) {
  LOOM_ENFORCE(!devices.empty(), "the CUDA P2P transport needs at least one device");
  LOOM_ENFORCE(static_cast<int>(devices.size()) <= kMaxWorldSize,
               "the CUDA P2P transport takes at most ", kMaxWorldSize, " ranks, got ",
               devices.size());
  const int available = CudaDeviceCount();
  if (available == 0) return FailedPrecondition("the CUDA P2P transport found no CUDA device");
  for (int d : devices) {
    LOOM_ENFORCE(d >= 0 && d < available, "CUDA device ", d, " does not exist (", available,
                 " visible)");
  }
  return Status::OK();
}

}  // namespace

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

StatusOr<Topology> DetectCudaTopology(const std::vector<int>& devices) {
  LOOM_RETURN_IF_ERROR(CheckDevices(devices));
  const size_t n = devices.size();
  // NVLink counts from NVML where the driver has it; the CUDA P2P attributes otherwise.
  std::vector<std::string> bus_ids(n);
  bool have_bus_ids = true;
  for (size_t r = 0; r < n; ++r) {
    char id[32] = {0};
    if (cudaDeviceGetPCIBusId(id, sizeof id, devices[r]) != cudaSuccess) {
      cudaGetLastError();
      have_bus_ids = false;
      break;
    }
    bus_ids[r] = id;
  }
  std::optional<internal::NvLinkCounts> nvlinks;
  if (have_bus_ids) nvlinks = internal::CountNvLinks(bus_ids);
  std::vector<std::vector<int>> weights(n, std::vector<int>(n, 0));
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      if (a == b) continue;
      if (devices[a] == devices[b]) {
        weights[a][b] = 3;  // virtual devices on one GPU share its memory
        continue;
      }
      if (nvlinks) {
        const int links = nvlinks->links[a][b];
        if (links >= 2 || (nvlinks->switched[a] && nvlinks->switched[b])) {
          weights[a][b] = 3;
          continue;
        }
        if (links == 1) {
          weights[a][b] = 2;
          continue;
        }
      }
      // Peer access with native atomics is what NVLink pairs report; PCIe peers lack atomics.
      int access = 0, atomics = 0;
      if (cudaDeviceGetP2PAttribute(&access, cudaDevP2PAttrAccessSupported, devices[a],
                                    devices[b]) != cudaSuccess ||
          cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, devices[a],
                                    devices[b]) != cudaSuccess) {
        cudaGetLastError();
        access = 0;
      }
      weights[a][b] = access && atomics && !nvlinks ? 2 : 1;
    }
  }
  // Both directions are asked; keep the matrix symmetric with the weaker answer.
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      weights[a][b] = weights[b][a] = std::min(weights[a][b], weights[b][a]);
    }
  }
  return Topology::FromWeights(weights);
}

StatusOr<std::vector<std::unique_ptr<Transport>>> CreateCudaP2PTransports(
    const std::vector<int>& devices) {
  LOOM_RETURN_IF_ERROR(CheckDevices(devices));
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<CudaPeerMemory> memory, CudaPeerMemory::Create(devices));
  return CreateInProcessTransports(static_cast<int>(devices.size()), InProcessTransportOptions{},
                                   std::move(memory));
}

StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateCudaP2PCommunicators(
    const std::vector<int>& devices, const CommunicatorOptions& options,
    const std::optional<Topology>& topology) {
  LOOM_ASSIGN_OR_RETURN(auto transports, CreateCudaP2PTransports(devices));
  Topology machine = Topology::Uniform(1);
  if (topology) {
    machine = *topology;
  } else {
    LOOM_ASSIGN_OR_RETURN(machine, DetectCudaTopology(devices));
  }
  LOOM_ENFORCE(machine.size() == static_cast<int>(devices.size()), "topology '", machine.name(),
               "' has ", machine.size(), " devices for ", devices.size(), " ranks");
  LOOM_ASSIGN_OR_RETURN(auto plan, CommPlan::Create(machine));
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& t : transports) {
    comms.push_back(std::make_unique<Communicator>(std::move(t), plan, options));
  }
  return comms;
}

}  // namespace loom::collective
