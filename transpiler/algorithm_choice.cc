#include "transpiler/algorithm_choice.h"

#include <algorithm>
#include <set>

namespace loom::transpiler {

StatusOr<std::unique_ptr<AlgorithmChooser>> AlgorithmChooser::Create(const CollectiveSetup& setup) {
  std::unique_ptr<AlgorithmChooser> c(new AlgorithmChooser());
  c->asked_ = setup.algorithm;
  c->transport_ = &collective::GetTransport(setup.transport);
  const collective::TransportInfo& t = *c->transport_;
  if (setup.algorithm != collective::Algorithm::kAuto) {
    const collective::Algorithm a = setup.algorithm;
    if (a == collective::Algorithm::kNative && !t.native)
      return InvalidArgument(
          "algorithm 'native' needs a transport with collectives of its own; "
          "the ",
          t.name, " transport offers ring, tree, multi_tree, star, direct and auto");
    if (a != collective::Algorithm::kNative && !t.schedules)
      return InvalidArgument("algorithm '", collective::AlgorithmName(setup.algorithm),
                             "' is one of Loom's schedules; transport ", t.name,
                             " runs its own collectives: use native or auto, or transport "
                             "cuda_p2p for Loom's schedules on the GPUs");
  }
  collective::Topology topology = collective::Topology::Uniform(setup.nranks);
  if (!setup.topology.empty()) {
    LOOM_ASSIGN_OR_RETURN(topology, collective::Topology::Preset(setup.topology));
    if (topology.size() != setup.nranks)
      return InvalidArgument("topology '", setup.topology, "' has ", topology.size(),
                             " devices, asked for ", setup.nranks, " ranks");
  }
  LOOM_ASSIGN_OR_RETURN(c->plan_, collective::CommPlan::Create(topology));
  collective::CommunicatorOptions co = collective::TransportDefaults(t);
  if (setup.tree_max_bytes >= 0) co.auto_tree_max_bytes = setup.tree_max_bytes;
  c->selector_ =
      std::make_unique<collective::Selector>(*c->plan_, collective::SelectorOptionsOf(co));
  return c;
}

std::string AlgorithmChooser::Resolve(collective::Collective kind, int64_t bytes) const {
  // A transport without Loom's schedules (NCCL) runs its own collectives.
  if (!transport_->schedules) return "native";
  if (asked_ == collective::Algorithm::kNative)  // the transport's own (Create: it has one)
    return collective::AlgorithmName(asked_);
  if (asked_ != collective::Algorithm::kAuto && collective::AlgorithmSupports(asked_, kind))
    return collective::AlgorithmName(asked_);
  // The selector picks native collectives only where the transport has them, from its native
  // crossover on (in-process: one pass over shared memory).
  return collective::AlgorithmName(selector_->Choose(
      kind, static_cast<size_t>(std::max<int64_t>(bytes, 0)), 1, transport_->native));
}

Status CheckPlacesFit(const std::vector<Place>& places, int nranks,
                      const collective::TransportInfo& t) {
  if (places.empty()) return Status::OK();
  if (static_cast<int>(places.size()) != nranks)
    return InvalidArgument(places.size(), " places for ", nranks, " ranks");
  const bool gpu_transport = t.device == collective::DeviceKind::kCuda;
  std::set<Place> distinct;
  for (const Place& p : places) {
    const bool cuda = p.is_cuda();
    if (cuda != gpu_transport)
      return InvalidArgument("place '", p.ToString(), "' does not fit transport '", t.name,
                             cuda ? "' (CUDA places meet over transport nccl or cuda_p2p)"
                                  : StrCat("' (transport ", t.name, " needs CUDA places)"));
    // NCCL refuses two ranks on one GPU; the CUDA P2P transport takes a GPU listed several
    // times as virtual devices sharing its memory (how one GPU checks a multi-rank group).
    if (cuda && !t.shared_devices && !distinct.insert(p).second)
      return InvalidArgument("place '", p.ToString(), "' is given twice: transport ", t.name,
                             " needs a GPU of its own for each rank (transport cuda_p2p takes "
                             "a GPU several times)");
  }
  return Status::OK();
}

}  // namespace loom::transpiler
