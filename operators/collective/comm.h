// The communicator a program's collective ops share. `comm_init` puts a CommHandle into a scope
// variable of type COMMUNICATOR; `allreduce`, `reduce`, `broadcast`, ... take that variable as
// their "Comm" input. In-process groups (N ranks as N threads of one process: the CPU analog of
// one multi-GPU machine) meet through a process-wide registry keyed by the group's name, so the
// ranks' startup programs can each run `comm_init` on their own thread.
// Thread-safety: JoinInProcessGroup may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collective/communicator.h"
#include "collective/transport_registry.h"
#include "collective/types.h"
#include "framework/op_registry.h"
#include "loom/config.h"

namespace loom::ops {

struct CommHandle {
  std::shared_ptr<void> owner;  // keeps the group (and its peers' transports) alive
  collective::Communicator* comm = nullptr;
};

struct GroupOptions {
  int timeout_ms = 30000;
  std::string topology;  // preset name; empty: all ranks linked alike
  // Algorithm auto's allreduce tree/ring crossover; < 0: the transport's measured default
  // (collective/communicator.h).
  long long tree_max_bytes = -1;
  // Ranks may name the same device (virtual devices sharing a GPU: the CUDA P2P transport).
  // Otherwise two ranks on one device fail the group (NCCL needs a GPU per rank).
  bool shared_devices = false;
};

// Rank `rank` of the in-process group `key` of nranks ranks. The first rank to arrive creates
// the group; it is forgotten by the registry once every rank has joined, so a later group may
// reuse the name.
StatusOr<CommHandle> JoinInProcessGroup(const std::string& key, int nranks, int rank,
                                        const GroupOptions& options);

// Rank `rank` of nranks over MPI_COMM_WORLD: one process per rank, started by mpirun. MPI is
// initialized here when the caller has not done it (whoever initialized it finalizes it, after
// every communicator is gone: collective::MpiFinalize). Fails when the world's size or this
// process's rank differ from what the program was transpiled for, and when Loom was built
// without MPI.
StatusOr<CommHandle> JoinMpiWorld(int nranks, int rank, const GroupOptions& options);

// The communicators of a group whose ranks are created together, one per device.
struct DeviceGroupComms {
  std::shared_ptr<void> owner;                   // keeps them alive
  std::vector<collective::Communicator*> comms;  // comms[r] is rank r's
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
StatusOr<CommHandle> JoinDeviceGroup(const std::string& key, int nranks, int rank, int device,
                                     const GroupOptions& options,
                                     const DeviceGroupFactory& factory);

// JoinDeviceGroup with NCCL communicators (comm_init on CUDA places, transport "nccl"): the
// ranks' CUDA devices as one NCCL clique. Unimplemented when Loom was built without NCCL.
StatusOr<CommHandle> JoinNcclGroup(const std::string& key, int nranks, int rank, int device,
                                   const GroupOptions& options);

// JoinDeviceGroup with CUDA P2P communicators (comm_init on CUDA places, transport "cuda_p2p"):
// Loom's own schedules (ring, tree, multi_tree, star) on the ranks' GPUs, with peer copies and
// reduction kernels; the trees follow options.topology, or the links the CUDA runtime reports
// when it is empty. Unimplemented when Loom was built without CUDA.
StatusOr<CommHandle> JoinCudaP2PGroup(const std::string& key, int nranks, int rank, int device,
                                      const GroupOptions& options);

// comm_init's one dispatch from a registered transport to the group its rank joins:
// JoinInProcessGroup, JoinMpiWorld, JoinNcclGroup or JoinCudaP2PGroup (device: the rank's CUDA
// device, for the GPU transports).
StatusOr<CommHandle> JoinGroup(const collective::TransportInfo& transport, const std::string& key,
                               int nranks, int rank, int device, const GroupOptions& options);

#if LOOM_CUDA_ENABLED
// x[0, n) *= w on the kernel's CUDA stream (fp32, fp64 or fp16 data).
Status ScaleOnDevice(const KernelContext& ctx, void* x, int64_t n, DataType dtype, double w);
#endif

// The communicator a variable holds (comm_init's output); null when it holds none.
collective::Communicator* CommunicatorIn(const Variable* v);

// The communicator held by the kernel's "Comm" input.
StatusOr<collective::Communicator*> CommOf(const KernelContext& ctx);

StatusOr<collective::DataType> CollectiveDtype(DataType dtype, const std::string& where);
StatusOr<collective::ReduceOp> ParseReduceOp(const std::string& name, const std::string& where);

// Attribute checks shared by the collective ops.
std::function<Status(const std::string&)> ValidReduceType();
std::function<Status(const std::string&)> ValidAlgorithm();

}  // namespace loom::ops
