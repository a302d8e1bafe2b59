// The GPU side of the CLI: where `loom bench collective` keeps one rank's buffers (host memory for
// in-process and MPI ranks, or a GPU for --places cuda:...) and `loom topo --detect`'s reading of
// the GPUs' links. Compiled from gpu.cc in CUDA builds, else from gpu_none.cc, which reports
// that CUDA is missing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "collective/communicator.h"
#include "collective/topology.h"
#include "collective/transport_registry.h"

namespace loom::cli {

class BenchMemory {
 public:
  virtual ~BenchMemory() = default;
  // Zeroed buffer of `bytes` bytes.
  virtual StatusOr<std::shared_ptr<void>> Allocate(size_t bytes) = 0;
  virtual Status Upload(void* dst, const void* host, size_t bytes) = 0;
  virtual Status Download(void* host, const void* src, size_t bytes) = 0;
};

std::unique_ptr<BenchMemory> HostBenchMemory();

// One communicator and one device memory per entry of `devices` (CUDA ordinals; repeats are
// virtual devices on one GPU for the CUDA P2P transport), over the CUDA P2P transport (Loom's
// schedules) or NCCL (its collectives as algorithm native).
struct CudaBenchGroup {
  std::vector<std::unique_ptr<collective::Communicator>> comms;
  std::vector<std::unique_ptr<BenchMemory>> memory;
};
StatusOr<CudaBenchGroup> MakeCudaBenchGroup(const std::vector<int>& devices,
                                            const collective::TransportInfo& transport,
                                            const collective::CommunicatorOptions& options);

// `loom devices`: the CUDA runtime and driver versions, NCCL's version and one line per visible
// GPU (name, compute capability, multiprocessors, memory). `count` is the number of GPUs seen
// (0 without a GPU or in a build without CUDA; the text then says why).
struct GpuReport {
  int count = 0;
  std::string text;
};
GpuReport DescribeGpus();

// The links between this machine's visible GPUs from the CUDA runtime and NVML
// (collective::DetectCudaTopology); NotFound without a GPU or without CUDA in the build.
StatusOr<collective::Topology> DetectGpuTopology();

}  // namespace loom::cli
