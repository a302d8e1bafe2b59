// The algorithm of each collective a transpiler inserts, decided at transpile time so that the
// program and manifest show it: the asked algorithm where it applies to the collective, otherwise
// the collectives library's cost model (collective/selector.h) with the very options the ranks'
// communicators run with on their transport (collective/transport_registry.h) and topology.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "framework/place.h"
#include "collective/communicator.h"
#include "collective/selector.h"
#include "collective/transport_registry.h"
#include "collective/types.h"

namespace loom::transpiler {

struct CollectiveSetup {
  int nranks = 1;
  collective::TransportId transport = collective::TransportId::kInProcess;
  collective::Algorithm algorithm = collective::Algorithm::kAuto;
  std::string topology;            // preset name; empty: uniform
  int tree_max_bytes = -1;         // -1: the transport's measured crossover
};

class AlgorithmChooser {
 public:
  // Errors: an unknown topology; an algorithm the transport cannot run; a topology whose size is
  // not nranks.
  static StatusOr<std::unique_ptr<AlgorithmChooser>> Create(const CollectiveSetup& setup);

  // The algorithm name written on a collective op of `kind` moving `bytes` (never "auto").
  std::string Resolve(collective::Collective kind, int64_t bytes) const;

  const collective::TransportInfo& transport() const { return *transport_; }

 private:
  AlgorithmChooser() = default;
  collective::Algorithm asked_ = collective::Algorithm::kAuto;
  const collective::TransportInfo* transport_ = nullptr;
  std::shared_ptr<const collective::CommPlan> plan_;
  std::unique_ptr<collective::Selector> selector_;
};

// Places, when given, must be one per rank and fit the transport: CUDA places exactly when it is
// a CUDA transport, distinct unless it shares devices.
Status CheckPlacesFit(const std::vector<Place>& places, int nranks,
                      const collective::TransportInfo& transport);

}  // namespace loom::transpiler
