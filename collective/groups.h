// Joining a group: how the ranks of one collective group find each other and get their
// communicators. Ranks that are threads of one process (in-process groups; device groups such as
// an NCCL clique or CUDA P2P) meet through a process-wide registry keyed by the group's name, so
// that each rank can join from its own thread; MPI ranks are the processes of MPI_COMM_WORLD.
// Each transport of the registry (transport_registry.h) has one join function, and JoinGroup is
// the one dispatch over them: adding a transport adds a row there and a function here.
// Thread-safety: every function may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "collective/communicator.h"
#include "collective/transport_registry.h"

namespace loom::collective {

// A rank's communicator. It shares ownership of its group (and the peers' transports), so the
// group lives as long as any rank's GroupComm.
using GroupComm = std::shared_ptr<Communicator>;

struct GroupOptions {
  int timeout_ms = 30000;
  std::string topology;  // preset name; empty: all ranks linked alike
  // Algorithm auto's allreduce tree/ring crossover; < 0: the transport's measured default
  // (communicator.h).
  long long tree_max_bytes = -1;
  // Ranks may name the same device (virtual devices sharing a GPU: the CUDA P2P transport).
  // Otherwise two ranks on one device fail the group (NCCL needs a GPU per rank).
  bool shared_devices = false;
};

// Rank `rank` of the in-process group `key` of nranks ranks. The first rank to arrive creates
// the group; it is forgotten by the registry once every rank has joined, so a later group may
// reuse the name.
StatusOr<GroupComm> JoinInProcessGroup(const std::string& key, int nranks, int rank,
                                       const GroupOptions& options);

// Rank `rank` of nranks over MPI_COMM_WORLD: one process per rank, started by mpirun. MPI is
// initialized here when the caller has not done it (whoever initialized it finalizes it, after
// every communicator is gone: MpiFinalize). Fails when the world's size or this process's rank
// differ from what the caller expects, and when Loom was built without MPI.
StatusOr<GroupComm> JoinMpiWorld(int nranks, int rank, const GroupOptions& options);

// The communicators of a group whose ranks are created together, one per device.
struct DeviceGroupComms {
  std::shared_ptr<void> owner;       // keeps them alive
  std::vector<Communicator*> comms;  // comms[r] is rank r's
};
using DeviceGroupFactory =
    std::function<StatusOr<DeviceGroupComms>(const std::vector<int>& devices)>;

// Rank `rank` of the group `key` of nranks threads of one process, rank r driving device
// devices[r]. A group whose communicators must be created together (NCCL's ncclCommInitAll)
// meets here: each rank brings its device; the last to arrive calls `factory` with the devices
// in rank order and every rank gets its communicator. A rank that waits longer than
// options.timeout_ms for the others gets Timeout naming the missing ranks (and the ranks that
// arrive later start a new group). Two ranks on one device, or a group asked for with another
// nranks, are errors.
StatusOr<GroupComm> JoinDeviceGroup(const std::string& key, int nranks, int rank, int device,
                                    const GroupOptions& options, const DeviceGroupFactory& factory);

// JoinDeviceGroup with NCCL communicators: the ranks' CUDA devices as one NCCL clique.
// Unimplemented when Loom was built without NCCL.
StatusOr<GroupComm> JoinNcclGroup(const std::string& key, int nranks, int rank, int device,
                                  const GroupOptions& options);

// JoinDeviceGroup with CUDA P2P communicators: Loom's own schedules (ring, tree, multi_tree,
// star) on the ranks' GPUs, with peer copies and reduction kernels; the trees follow
// options.topology, or the links the CUDA runtime reports when it is empty. Unimplemented when
// Loom was built without CUDA.
StatusOr<GroupComm> JoinCudaP2PGroup(const std::string& key, int nranks, int rank, int device,
                                     const GroupOptions& options);

// The one dispatch from a registered transport to the group its rank joins (device: the rank's
// CUDA device, for the GPU transports).
StatusOr<GroupComm> JoinGroup(const TransportInfo& transport, const std::string& key, int nranks,
                              int rank, int device, const GroupOptions& options);

}  // namespace loom::collective
