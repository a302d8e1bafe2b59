// Selector: the alpha-beta cost model behind Algorithm::kAuto. For one collective of `bytes`
// bytes per rank over a CommPlan it estimates the time of ring, tree, multi_tree and star (and,
// on a cluster topology, channels and rails) from the topology's links (latency per hop,
// bandwidth of the weakest link each algorithm uses; on a cluster the ring's and the channels'
// busiest resource, where every NIC direction of a node is one that all hops through it share),
// a per-message software cost and a reduction bandwidth, and picks the cheapest supported one.
//
//   time = hops * link_latency + messages * message_us + bytes_on_busiest_link / link_bandwidth
//          + bytes_reduced_by_busiest_rank / reduce_bandwidth
//
// Like MXNet's MXNET_KVSTORE_TREE_ARRAY_BOUND, the small-message crossover is an option:
// allreduce messages up to `tree_max_bytes` take the single tree (latency-optimal) and larger
// ones the cheapest of the other algorithms by the model; the default comes from the in-process
// benchmark (docs/COLLECTIVES.md). A negative crossover lets the model decide alone. `force`
// overrides everything (e.g. the CLI's --algo).
//
// Calls in flight run one after another on the communicator's worker thread, so `inflight` only
// spreads the per-call wake-up of the worker over the queued calls; it changes the estimates but
// not today's ranking. Immutable after construction; safe from any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collective/communicator.h"
#include "collective/cost_model.h"
#include "collective/types.h"

namespace loom::collective {

struct SelectorOptions {
  // Allreduce up to this many bytes per rank uses the tree; < 0: the cost model decides alone.
  long long tree_max_bytes = 2 << 20;
  // ... or the star, in groups of at most this many ranks (CommunicatorOptions::
  // auto_star_max_ranks).
  int star_max_ranks = 0;
  // Allreduce from direct_min_bytes (negative: never) to direct_max_bytes (negative: no bound)
  // runs the direct algorithm (CommunicatorOptions::auto_direct_min_bytes, ..._max_bytes).
  long long direct_min_bytes = -1;
  long long direct_max_bytes = -1;
  // Every collective of at least this many bytes runs the transport's native implementation
  // (kNative), when the caller says the transport has one; < 0: never. In-process worlds set
  // kInProcessAutoNativeMinBytes (one pass over shared memory moves the least data).
  long long native_min_bytes = -1;
  // ... up to this many bytes (inclusive); < 0: no upper bound (MPI: a window where Open MPI's
  // own collective leads the schedules).
  long long native_max_bytes = -1;
  // Anything but kAuto is returned as is for every collective that supports it.
  Algorithm force = Algorithm::kAuto;
  // Software cost of one posted message (post, match, wake-up), microseconds.
  double message_us = 2.0;
  // Per-call cost paid once per batch of queued calls (worker wake-up), microseconds.
  double call_us = 10.0;
  // Element-wise reduction throughput of one rank, GB/s.
  double reduce_gbps = 8.0;
  // The communicator's pipeline piece (CommunicatorOptions::pipeline_chunk_bytes).
  size_t chunk_bytes = size_t{1} << 20;
  // Whether one rank's sends and receives proceed at the same time (MPI's non-blocking
  // transfers; CommunicatorOptions::overlapped_transfers): then a tree rank's time is the larger
  // of what it sends and receives, not their sum, and the star's root meets all its peers in
  // one round trip.
  bool overlapped_transfers = false;
  // When set, every estimate comes from this model (e.g. the simulator) instead of the formulas
  // above, evaluated at the size rounded up to a power of two and cached per (collective,
  // algorithm, size bucket); the crossovers (tree_max_bytes, native_min_bytes) still apply.
  std::shared_ptr<const CostModel> cost_model;
  // With cost_model null: whether the installed default (SetDefaultCostModel) decides instead
  // of the formulas (CommunicatorOptions::default_cost_model).
  bool use_default_cost_model = true;
};

// The cost model a selector uses when its options hand in none (SelectorOptions::cost_model
// null and use_default_cost_model set): built per selector (so per communicator) from its plan
// and options. The collective library installs none, so its selectors use the formulas; a
// program that links the simulator installs it (sim::InstallDefaultCostModel: the loom CLI and
// the Python module do), so that auto asks the simulator. Returning null keeps the formulas.
using CostModelFactory = std::function<std::shared_ptr<const CostModel>(
    const CommPlan& plan, const SelectorOptions& options)>;
// Installs `factory` for selectors built from now on (an empty one: the formulas again).
void SetDefaultCostModel(CostModelFactory factory);
// What the installed factory builds for (plan, options); null when none is installed.
std::shared_ptr<const CostModel> DefaultCostModel(const CommPlan& plan,
                                                  const SelectorOptions& options);

struct Estimate {
  Algorithm algorithm;
  double time_us;
};

class Selector {
 public:
  Selector(const CommPlan& plan, const SelectorOptions& options = {});

  // Estimated time of one call (µs) for each algorithm that supports the collective.
  std::vector<Estimate> Estimates(Collective kind, size_t bytes, int inflight = 1) const;
  // The algorithm kAuto runs (never kAuto; kNative only from native_min_bytes to
  // native_max_bytes, and only when `native_available`).
  Algorithm Choose(Collective kind, size_t bytes, int inflight = 1,
                   bool native_available = true) const;
  // A table: one row per size from `min_bytes` to `max_bytes` (x4), estimated µs per algorithm
  // and the choice. Where a rule made the choice differ from the fastest estimate, the row
  // says "(RULE; fastest estimate ALGO)" and a footnote "# RULE: ..." says why that rule
  // decides (the measured crossover, a forced algorithm, the direct or native window).
  std::string Table(Collective kind, size_t min_bytes, size_t max_bytes, int inflight = 1) const;

  // The rules Choose applies before (or on top of) the estimates, in its order.
  enum class Rule {
    kNone = 0,
    kForce = 1,                 // options.force
    kDirect = 2,                // the direct window
    kNative = 3,                // the native window
    kTreeBelowCrossover = 4,    // allreduce up to tree_max_bytes: the tree (or star)
    kNoTreeAboveCrossover = 5,  // allreduce above it: never the tree
  };

  const SelectorOptions& options() const { return options_; }

 private:
  // The algorithm a rule decides (kAuto: the estimates decide) and which rule applies
  // (kNoTreeAboveCrossover comes with kAuto: it only removes the tree from the estimates).
  Algorithm ChooseByRule(Collective kind, size_t bytes, int inflight, bool native_available,
                         Rule* rule) const;
  double Time(Collective kind, Algorithm algorithm, size_t bytes, int inflight) const;
  // Time's parts: the cost model's time (cached per power-of-two bucket; < 0 when there is no
  // model or it cannot say), and the formulas' transfer time per kind (< 0: no such schedule).
  double ModelTime(Collective kind, Algorithm algorithm, size_t bytes) const;
  double AllReduceTime(Algorithm algorithm, double s) const;
  double RootedTime(Algorithm algorithm, double s, bool reduces) const;
  double GatherScatterTime(Algorithm algorithm, double s, bool reduces) const;
  double Pieces(double bytes) const;  // pipeline pieces of `bytes`
  double Overlap() const;             // a tree rank's sends and receives: 0.5 overlapped, else 1

  int n_;
  SelectorOptions options_;
  // Weakest link (bandwidth GB/s) and slowest hop (µs) of the ring, the trees and the multi-trees.
  double ring_gbps_, ring_us_, tree_gbps_, tree_us_, multi_gbps_, multi_us_, star_gbps_, star_us_;
  // Channel rings (CommPlan::channels; 0 on a single machine) and their rate with every node's
  // NICs and links priced as shared resources.
  int channels_ = 0, nodes_ = 1;
  double channels_gbps_ = 0;
  int depth_;
  // Cost-model estimates per (collective, algorithm, size bucket), shared by copies.
  struct Cache;
  std::shared_ptr<Cache> cache_;
};

}  // namespace loom::collective
