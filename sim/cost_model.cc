#include "sim/cost_model.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace loom::sim {

using collective::Algorithm;
using collective::Collective;

double SimCostModel::TimeUs(Collective kind, Algorithm algorithm, size_t bytes) const {
  if (algorithm == Algorithm::kAuto || algorithm == Algorithm::kNative) return -1;
  const int n = simulator_->machine().size();
  const bool split = kind == Collective::kAllGather || kind == Collective::kReduceScatter;
  const size_t unit = collective::DataTypeSize(collective::DataType::kFloat32) * (split ? n : 1);
  const size_t rounded = std::max<size_t>(1, (bytes + unit - 1) / unit) * unit;
  StatusOr<CollectiveResult> r =
      simulator_->Simulate(kind, collective::AlgorithmName(algorithm), rounded);
  return r.ok() ? r->time_us : -1;
}

StatusOr<bool> InstallDefaultCostModel() {
  const char* given = std::getenv("LOOM_AUTO_COST_MODEL");
  const std::string choice = given != nullptr && *given != '\0' ? given : "sim";
  if (choice == "formulas") {
    collective::SetDefaultCostModel(nullptr);
    return false;
  }
  if (choice != "sim")
    return InvalidArgument("LOOM_AUTO_COST_MODEL '", choice, "' is neither sim nor formulas");
  collective::SetDefaultCostModel(
      [](const collective::CommPlan& plan,
         const collective::SelectorOptions& o) -> std::shared_ptr<const collective::CostModel> {
        StatusOr<Machine> machine = Machine::FromTopology(plan.topology);
        if (!machine.ok()) return nullptr;  // the formulas, then
        SimOptions options;
        options.chunk_bytes = std::max<size_t>(o.chunk_bytes, 1);
        options.engine.post_us = o.message_us;
        options.engine.call_us = o.call_us;
        options.engine.reduce_gbps = o.reduce_gbps;
        StatusOr<Simulator> sim = Simulator::ForPlan(std::move(machine).value(), plan, options);
        if (!sim.ok()) return nullptr;
        return std::make_shared<SimCostModel>(
            std::make_shared<const Simulator>(std::move(sim).value()));
      });
  return true;
}

}  // namespace loom::sim
