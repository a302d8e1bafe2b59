#include "collective/groups.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "collective/topology.h"
#include "collective/world.h"
#if LOOM_GROUPS_WITH_MPI
#include "collective/transport/mpi.h"
#endif
#if LOOM_GROUPS_WITH_CUDA
#include "collective/transport/cuda_p2p.h"
#endif
#if LOOM_GROUPS_WITH_NCCL
#include "collective/transport/nccl.h"
#endif

namespace loom::collective {
namespace {

struct PendingGroup {
  std::shared_ptr<InProcessWorld> world;
  std::vector<bool> joined;
  int remaining = 0;
};

std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}

std::map<std::string, PendingGroup>& Registry() {
  static auto* groups = new std::map<std::string, PendingGroup>;
  return *groups;
}

// A device group between its first and its last rank's arrival.
struct PendingDeviceGroup {
  explicit PendingDeviceGroup(int nranks) : devices(nranks, -1) {}
  std::vector<int> devices;  // -1: not arrived
  int arrived = 0;
  bool done = false;
  Status status;
  DeviceGroupComms comms;
  std::condition_variable cv;
};

std::map<std::string, std::shared_ptr<PendingDeviceGroup>>& DeviceRegistry() {
  static auto* groups = new std::map<std::string, std::shared_ptr<PendingDeviceGroup>>;
  return *groups;
}

}  // namespace

StatusOr<GroupComm> JoinDeviceGroup(const std::string& key, int nranks, int rank, int device,
                                    const GroupOptions& options,
                                    const DeviceGroupFactory& factory) {
  if (nranks < 1) return InvalidArgument("group '", key, "': nranks must be >= 1, got ", nranks);
  if (rank < 0 || rank >= nranks)
    return InvalidArgument("group '", key, "': rank ", rank, " is outside [0, ", nranks, ")");
  std::unique_lock<std::mutex> lock(RegistryMutex());
  auto& groups = DeviceRegistry();
  auto it = groups.find(key);
  if (it == groups.end())
    it = groups.emplace(key, std::make_shared<PendingDeviceGroup>(nranks)).first;
  std::shared_ptr<PendingDeviceGroup> g = it->second;
  if (static_cast<int>(g->devices.size()) != nranks)
    return InvalidArgument("group '", key, "' has ", g->devices.size(),
                           " ranks, comm_init of rank ", rank, " asks for ", nranks);
  if (g->devices[rank] >= 0)
    return FailedPrecondition("group '", key, "': rank ", rank,
                              " joined twice before every rank joined once");
  for (int r = 0; r < nranks && !options.shared_devices; ++r) {
    if (g->devices[r] != device) continue;
    // The group cannot form: every rank learns why now, not after the timeout.
    g->status = InvalidArgument("group '", key, "': ranks ", r, " and ", rank, " both use device ",
                                device, "; each rank needs a device of its own");
    g->done = true;
    groups.erase(it);
    g->cv.notify_all();
    return g->status;
  }
  g->devices[rank] = device;
  if (++g->arrived == nranks) {
    groups.erase(key);  // a later group may reuse the name
    lock.unlock();
    StatusOr<DeviceGroupComms> made = factory(g->devices);
    lock.lock();
    g->status = made.ok() ? Status::OK() : made.status();
    if (made.ok()) g->comms = std::move(made).value();
    if (g->status.ok() && static_cast<int>(g->comms.comms.size()) != nranks)
      g->status = Internal("group '", key, "': the factory made ", g->comms.comms.size(),
                           " communicators for ", nranks, " ranks");
    g->done = true;
    g->cv.notify_all();
  } else {
    bool arrived = g->cv.wait_for(lock, std::chrono::milliseconds(options.timeout_ms),
                                  [&g] { return g->done; });
    if (!arrived) {
      std::string missing;
      for (int r = 0; r < nranks; ++r)
        if (g->devices[r] < 0) missing += StrCat(missing.empty() ? "" : ", ", r);
      auto cur = groups.find(key);
      if (cur != groups.end() && cur->second == g) groups.erase(cur);
      g->done = true;
      g->status = Timeout("group '", key, "': rank(s) ", missing, " of ", nranks,
                          " did not call comm_init within ", options.timeout_ms, " ms");
      g->cv.notify_all();
    }
  }
  if (!g->status.ok()) return g->status;
  // Shares ownership of the whole group, points at this rank's communicator.
  return GroupComm(g->comms.owner, g->comms.comms[rank]);
}

namespace {

[[maybe_unused]] CommunicatorOptions DeviceCommOptions(TransportId id,
                                                       const GroupOptions& options) {
  CommunicatorOptions co = TransportDefaults(GetTransport(id));
  co.timeout = std::chrono::milliseconds(options.timeout_ms);
  if (options.tree_max_bytes >= 0) co.auto_tree_max_bytes = options.tree_max_bytes;
  return co;
}

// A device group's communicators, kept alive by its ranks' GroupComms.
[[maybe_unused]] DeviceGroupComms Shared(std::vector<std::unique_ptr<Communicator>> comms) {
  auto owned = std::make_shared<std::vector<std::unique_ptr<Communicator>>>(std::move(comms));
  DeviceGroupComms g;
  for (auto& c : *owned) g.comms.push_back(c.get());
  g.owner = std::move(owned);
  return g;
}

}  // namespace

StatusOr<GroupComm> JoinNcclGroup(const std::string& key, int nranks, int rank, int device,
                                  const GroupOptions& options) {
#if LOOM_GROUPS_WITH_NCCL
  const CommunicatorOptions co = DeviceCommOptions(TransportId::kNccl, options);
  auto factory = [co](const std::vector<int>& devices) -> StatusOr<DeviceGroupComms> {
    LOOM_ASSIGN_OR_RETURN(auto comms, CreateNcclCommunicators(devices, co));
    return Shared(std::move(comms));
  };
  return JoinDeviceGroup(key, nranks, rank, device, options, factory);
#else
  return Unimplemented(
      "transport 'nccl' is not available: Loom was built without CUDA and NCCL "
      "(rank ",
      rank, " of group '", key, "' on device ", device, ")");
#endif
}

StatusOr<GroupComm> JoinCudaP2PGroup(const std::string& key, int nranks, int rank, int device,
                                     const GroupOptions& options) {
#if LOOM_GROUPS_WITH_CUDA
  const CommunicatorOptions co = DeviceCommOptions(TransportId::kCudaP2P, options);
  std::optional<Topology> topology;
  if (!options.topology.empty()) {
    LOOM_ASSIGN_OR_RETURN(Topology t, Topology::Preset(options.topology));
    if (t.size() != nranks)
      return InvalidArgument("group '", key, "': topology '", options.topology, "' has ", t.size(),
                             " devices for ", nranks, " ranks");
    topology = t;
  }
  auto factory = [co, topology](const std::vector<int>& devices) -> StatusOr<DeviceGroupComms> {
    LOOM_ASSIGN_OR_RETURN(auto comms, CreateCudaP2PCommunicators(devices, co, topology));
    return Shared(std::move(comms));
  };
  GroupOptions shared = options;  // a GPU named by several ranks holds virtual devices
  shared.shared_devices = GetTransport(TransportId::kCudaP2P).shared_devices;
  return JoinDeviceGroup(key, nranks, rank, device, shared, factory);
#else
  return Unimplemented("transport 'cuda_p2p' is not available: Loom was built without CUDA (rank ",
                       rank, " of group '", key, "' on device ", device, ")");
#endif
}

StatusOr<GroupComm> JoinInProcessGroup(const std::string& key, int nranks, int rank,
                                       const GroupOptions& options) {
  if (nranks < 1) return InvalidArgument("group '", key, "': nranks must be >= 1, got ", nranks);
  if (rank < 0 || rank >= nranks)
    return InvalidArgument("group '", key, "': rank ", rank, " is outside [0, ", nranks, ")");
  std::lock_guard<std::mutex> lock(RegistryMutex());
  auto& groups = Registry();
  auto it = groups.find(key);
  if (it == groups.end()) {
    WorldOptions wo;
    wo.communicator.timeout = std::chrono::milliseconds(options.timeout_ms);
    if (options.tree_max_bytes >= 0) wo.communicator.auto_tree_max_bytes = options.tree_max_bytes;
    // Every rank of a comm_init group runs its program on a thread of its own
    // (Executor::RunRanks runs a rank's ops on its thread), so a small call issued with nothing
    // in flight may run on the caller's thread instead of being handed to the worker and back
    // (4-byte allreduce, 4 ranks: 18 -> 7 µs; docs/PERF.md).
    wo.communicator.inline_max_bytes = CommunicatorOptions::kInlineDefaultBytes;
    if (!options.topology.empty()) {
      LOOM_ASSIGN_OR_RETURN(Topology topo, Topology::Preset(options.topology));
      if (topo.size() != nranks)
        return InvalidArgument("group '", key, "': topology '", options.topology, "' has ",
                               topo.size(), " devices, the group has ", nranks, " ranks");
      wo.topology = topo;
    }
    LOOM_ASSIGN_OR_RETURN(auto world, InProcessWorld::Create(nranks, wo));
    PendingGroup g;
    g.world = std::shared_ptr<InProcessWorld>(std::move(world));
    g.joined.assign(nranks, false);
    g.remaining = nranks;
    it = groups.emplace(key, std::move(g)).first;
  }
  PendingGroup& g = it->second;
  if (static_cast<int>(g.joined.size()) != nranks)
    return InvalidArgument("group '", key, "' has ", g.joined.size(), " ranks, comm_init of rank ",
                           rank, " asks for ", nranks);
  if (g.joined[rank])
    return FailedPrecondition("group '", key, "': rank ", rank,
                              " joined twice before every rank joined once");
  g.joined[rank] = true;
  GroupComm comm(g.world, &g.world->comm(rank));
  if (--g.remaining == 0) groups.erase(it);
  return comm;
}

StatusOr<GroupComm> JoinMpiWorld(int nranks, int rank, const GroupOptions& options) {
#if LOOM_GROUPS_WITH_MPI
  if (!LaunchedByMpirun())
    return FailedPrecondition(
        "transport 'mpi' needs one process per rank started by mpirun "
        "(e.g. mpirun -np ",
        nranks, " loom run DIR)");
  LOOM_RETURN_IF_ERROR(MpiInit(nullptr, nullptr));
  if (MpiWorldSize() != nranks)
    return FailedPrecondition("the program was transpiled for ", nranks,
                              " ranks, the MPI world has ", MpiWorldSize(),
                              " processes (start it with mpirun -np ", nranks, ")");
  if (MpiWorldRank() != rank)
    return FailedPrecondition("this is the program of rank ", rank,
                              ", but this process is MPI rank ", MpiWorldRank());
  MpiCommunicatorOptions o;
  o.communicator.timeout = std::chrono::milliseconds(options.timeout_ms);
  if (options.tree_max_bytes >= 0) o.communicator.auto_tree_max_bytes = options.tree_max_bytes;
  if (!options.topology.empty()) {
    LOOM_ASSIGN_OR_RETURN(Topology topo, Topology::Preset(options.topology));
    if (topo.size() != nranks)
      return InvalidArgument("topology '", options.topology, "' has ", topo.size(),
                             " devices, the MPI world has ", nranks, " ranks");
    o.topology = topo;
  }
  LOOM_ASSIGN_OR_RETURN(auto comm, CreateMpiCommunicator(o));
  return GroupComm(std::move(comm));
#else
  return Unimplemented(
      "transport 'mpi' is not available: Loom was built without MPI "
      "(install Open MPI, see scripts/install-deps.sh, and rebuild)");
#endif
}

StatusOr<GroupComm> JoinGroup(const TransportInfo& transport, const std::string& key, int nranks,
                              int rank, int device, const GroupOptions& options) {
  switch (transport.id) {
    case TransportId::kInProcess: return JoinInProcessGroup(key, nranks, rank, options);
    case TransportId::kMpi: return JoinMpiWorld(nranks, rank, options);
    case TransportId::kNccl: return JoinNcclGroup(key, nranks, rank, device, options);
    case TransportId::kCudaP2P: return JoinCudaP2PGroup(key, nranks, rank, device, options);
  }
  return Internal("transport '", transport.name, "' has no group to join");
}

}  // namespace loom::collective
