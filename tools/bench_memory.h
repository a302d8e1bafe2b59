// Where `loom bench collective` keeps one rank's buffers: host memory (in-process and MPI ranks)
// or a GPU (--places cuda:...). The GPU side is compiled from bench_cuda.cc in CUDA builds, else
// from bench_cuda_none.cc, which reports that CUDA is missing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collective/communicator.h"
#include "framework/status.h"

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
// virtual devices on one GPU for transport "p2p"), over transport "p2p" (the CUDA P2P transport:
// Loom's schedules) or "nccl" (NCCL's collectives as algorithm native).
struct CudaBenchGroup {
  std::vector<std::unique_ptr<collective::Communicator>> comms;
  std::vector<std::unique_ptr<BenchMemory>> memory;
};
StatusOr<CudaBenchGroup> MakeCudaBenchGroup(const std::vector<int>& devices,
                                            const std::string& transport,
                                            const collective::CommunicatorOptions& options);

}  // namespace loom::cli
