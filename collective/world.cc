#include "collective/world.h"

namespace loom::collective {

StatusOr<std::unique_ptr<InProcessWorld>> InProcessWorld::Create(int nranks,
                                                                 const WorldOptions& options) {
  LOOM_ENFORCE(nranks >= 1 && nranks <= kMaxWorldSize, "world size ", nranks, " is outside 1..",
               kMaxWorldSize);
  const Topology topology = options.topology ? *options.topology : Topology::Uniform(nranks);
  LOOM_ENFORCE(topology.size() == nranks, "topology '", topology.name(), "' has ", topology.size(),
               " devices for ", nranks, " ranks");
  LOOM_ENFORCE(options.communicator.timeout.count() > 0, "timeout must be positive");
  LOOM_ENFORCE(options.communicator.pipeline_chunk_bytes > 0, "pipeline chunk must be positive");
  std::unique_ptr<InProcessWorld> world(new InProcessWorld());
  LOOM_ASSIGN_OR_RETURN(world->plan_, CommPlan::Create(topology, options.tree_link_penalty));
  for (auto& transport : CreateInProcessTransports(nranks, options.transport)) {
    world->comms_.push_back(
        std::make_unique<Communicator>(std::move(transport), world->plan_, options.communicator));
  }
  return world;
}

}  // namespace loom::collective
