#include "collective/transport_registry.h"

namespace loom::collective {

const std::vector<TransportInfo>& Transports() {
  static const std::vector<TransportInfo> kTransports = {
      {TransportId::kInProcess, "inprocess", "in-process", DeviceKind::kCpu, false, true, true,
       false, true,
       "ranks are threads of one process over shared memory (Loom's schedules, and native: one "
       "pass over shared memory)"},
      {TransportId::kMpi, "mpi", "mpi", DeviceKind::kCpu, true, true, true, false,
       LOOM_COLLECTIVE_HAS_MPI != 0,
       "one process per rank under mpirun (Loom's schedules over MPI point-to-point, and native: "
       "Open MPI's collectives)"},
      {TransportId::kNccl, "nccl", "nccl", DeviceKind::kCuda, false, false, true, false,
       LOOM_COLLECTIVE_HAS_NCCL != 0,
       "CUDA places, a thread and a GPU per rank, NCCL's own collectives"},
      {TransportId::kCudaP2P, "cuda_p2p", "cuda-p2p", DeviceKind::kCuda, false, true, false, true,
       LOOM_COLLECTIVE_HAS_CUDA != 0,
       "CUDA places running Loom's schedules with peer copies and reduction kernels (a GPU may "
       "hold several ranks)"},
  };
  return kTransports;
}

const TransportInfo& GetTransport(TransportId id) { return Transports()[static_cast<size_t>(id)]; }

std::string TransportNames() {
  std::string out;
  for (const auto& t : Transports()) out += (out.empty() ? "" : ", ") + std::string(t.name);
  return out;
}

StatusOr<const TransportInfo*> FindTransport(const std::string& name) {
  for (const auto& t : Transports())
    if (name == t.name) return &t;
  return InvalidArgument("unknown transport '", name, "' (registered: ", TransportNames(), ")");
}

CommunicatorOptions TransportDefaults(const TransportInfo& t) {
  CommunicatorOptions o;
  switch (t.id) {
    case TransportId::kInProcess:
      o.auto_tree_max_bytes = kInProcessAutoTreeMaxBytes;
      o.auto_native_min_bytes = kInProcessAutoNativeMinBytes;
      break;
    case TransportId::kMpi:
      o.pipeline_chunk_bytes = size_t{256} << 10;
      o.overlapped_transfers = true;  // MPI_Isend / MPI_Irecv progress together
      o.auto_tree_max_bytes = kMpiAutoTreeMaxBytes;
      o.auto_star_max_ranks = kMpiAutoStarMaxRanks;
      o.auto_native_min_bytes = kMpiAutoNativeMinBytes;
      o.auto_native_max_bytes = kMpiAutoNativeMaxBytes;
      o.auto_direct_min_bytes = kMpiAutoDirectMinBytes;
      o.auto_direct_max_bytes = kMpiAutoDirectMaxBytes;
      break;
    case TransportId::kNccl:
    case TransportId::kCudaP2P: o.auto_tree_max_bytes = kLinkAutoTreeMaxBytes; break;
  }
  return o;
}

SelectorOptions SelectorOptionsOf(const CommunicatorOptions& options) {
  SelectorOptions s;
  s.tree_max_bytes = options.auto_tree_max_bytes;
  s.star_max_ranks = options.auto_star_max_ranks;
  s.direct_min_bytes = options.auto_direct_min_bytes;
  s.direct_max_bytes = options.auto_direct_max_bytes;
  s.native_min_bytes = options.auto_native_min_bytes;
  s.native_max_bytes = options.auto_native_max_bytes;
  s.chunk_bytes = options.pipeline_chunk_bytes;
  s.overlapped_transfers = options.overlapped_transfers;
  s.cost_model = options.cost_model;
  s.use_default_cost_model = options.default_cost_model;
  return s;
}

}  // namespace loom::collective
