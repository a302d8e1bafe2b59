#include "sim/cost_model.h"

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

}  // namespace loom::sim
