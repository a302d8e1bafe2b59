// InProcessWorld: N communicators in one process over the in-process transport, one per simulated
// device (rank r = device r of the topology). Each rank is driven from its own thread; the world
// owns the communicators and must outlive every call issued on them.
//
//   auto world = InProcessWorld::Create(4).value();
//   // on thread r:
//   world->comm(r).AllReduce(in, out, n, DataType::kFloat32, ReduceOp::kSum).Wait();
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "collective/communicator.h"
#include "collective/transport/inprocess.h"
#include "collective/transport_registry.h"

namespace loom::collective {

struct WorldOptions {
  // auto_tree_max_bytes and auto_native_min_bytes: the in-process crossovers unless set
  // (communicator.h).
  CommunicatorOptions communicator = TransportDefaults(GetTransport(TransportId::kInProcess));
  // The machine the ranks stand for; default: nranks devices, all linked alike.
  std::optional<Topology> topology;
  double tree_link_penalty = 0.7;
  InProcessTransportOptions transport;
};

class InProcessWorld {
 public:
  static StatusOr<std::unique_ptr<InProcessWorld>> Create(int nranks,
                                                          const WorldOptions& options = {});
  int size() const { return static_cast<int>(comms_.size()); }
  Communicator& comm(int rank) { return *comms_.at(rank); }
  const CommPlan& plan() const { return *plan_; }

 private:
  InProcessWorld() = default;
  std::shared_ptr<const CommPlan> plan_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

}  // namespace loom::collective
