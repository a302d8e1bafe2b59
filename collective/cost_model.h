// CostModel: how long one collective call takes, for the selector behind Algorithm::kAuto. The
// selector's own alpha-beta formulas are the default; a model handed in through
// CommunicatorOptions::cost_model (or SelectorOptions::cost_model) replaces them, so that what
// auto picks is what that model predicts. The simulator (sim/cost_model.h) is one: it replays
// these very schedules over a model of the machine's links. The collective library defines
// only the interface; it depends on no implementation of it.
#pragma once

#include <cstddef>

#include "collective/types.h"

namespace loom::collective {

class CostModel {
 public:
  virtual ~CostModel() = default;
  // Microseconds for one call of `kind` with `bytes` (per rank; allgather and reducescatter:
  // the whole buffer, as nccl-tests count) run by `algorithm`, or a negative number when the
  // model cannot say (the algorithm does not run `kind`, or the model failed). Must be safe to
  // call from several threads at once.
  virtual double TimeUs(Collective kind, Algorithm algorithm, size_t bytes) const = 0;
};

}  // namespace loom::collective
