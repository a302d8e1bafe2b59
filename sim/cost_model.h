// The simulator as the selector's cost model (collective/cost_model.h): auto then picks what
// the simulator predicts for the machine, instead of the selector's alpha-beta formulas.
#pragma once

#include <memory>

#include "collective/cost_model.h"
#include "collective/selector.h"
#include "sim/simulate.h"

namespace loom::sim {

class SimCostModel : public collective::CostModel {
 public:
  explicit SimCostModel(std::shared_ptr<const Simulator> simulator)
      : simulator_(std::move(simulator)) {}
  // Loom's algorithms by name (ring, tree, multi_tree, star); native and auto: -1. Sizes are
  // rounded up to whole fp32 elements (allgather and reducescatter: whole elements per rank).
  double TimeUs(collective::Collective kind, collective::Algorithm algorithm,
                size_t bytes) const override;

 private:
  std::shared_ptr<const Simulator> simulator_;
};

// Makes the simulator the cost model of every selector built from now on that is handed none
// (collective::SetDefaultCostModel): each gets a simulator of its plan's topology
// (Machine::FromTopology) and plan, with the selector's own per-message cost, per-call cost,
// reduction rate and pipeline piece. LOOM_AUTO_COST_MODEL=formulas leaves the formulas in place
// (returns false); any other value but "sim" (the default) is an error.
StatusOr<bool> InstallDefaultCostModel();

}  // namespace loom::sim
