// The transports Loom's communicators run over, described once. The transpiler, comm_init, the
// CLI (run, transpile, bench), Python and the docs read this table; a transport's name, where
// its buffers live, what it runs and its measured crossovers are spelled nowhere else. Unknown
// names get one error listing the registered ones.
//
// The factories stay with their libraries (the CUDA and NCCL transports are libraries of their
// own that this one cannot reference): CreateInProcessTransports / InProcessWorld,
// CreateMpiCommunicator, CreateNcclCommunicators, CreateCudaP2PCommunicators; comm_init maps a
// TransportId to them in one switch (operators/collective/comm.cc).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "collective/communicator.h"
#include "collective/selector.h"

namespace loom::collective {

enum class TransportId { kInProcess, kMpi, kNccl, kCudaP2P };
enum class DeviceKind { kCpu, kCuda };

struct TransportInfo {
  TransportId id;
  const char* name;     // as given to flags, ops and Python: "inprocess", "mpi", ...
  const char* display;  // in tables and messages: "in-process", "mpi", "nccl", "cuda-p2p"
  DeviceKind device;    // where the ranks' buffers live
  bool processes;       // one process per rank (under mpirun); else ranks are threads
  bool schedules;       // runs Loom's ring, tree, multi_tree and star
  bool native;          // has collectives of its own (Algorithm::kNative)
  bool shared_devices;  // several ranks may name one device (virtual devices on one GPU)
  bool built;           // compiled into this build
  const char* summary;
};

// Every registered transport, in a fixed order.
const std::vector<TransportInfo>& Transports();
const TransportInfo& GetTransport(TransportId id);
// The transport called `name`: InvalidArgument listing the registered names when there is none.
StatusOr<const TransportInfo*> FindTransport(const std::string& name);
// "inprocess, mpi, nccl, cuda_p2p".
std::string TransportNames();

// A communicator's options over `t` with its measured crossovers and chunking (communicator.h).
CommunicatorOptions TransportDefaults(const TransportInfo& t);
// What algorithm kAuto's selector is built from: a communicator's options (the one conversion;
// the communicator, the transpiler and the bench all use it).
SelectorOptions SelectorOptionsOf(const CommunicatorOptions& options);

}  // namespace loom::collective
