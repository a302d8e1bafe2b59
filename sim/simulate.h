// The simulator's front: one machine, Loom's plan for it (the ring order and trees the
// communicator would use), and collectives replayed on it for any size and algorithm.
//
// Algorithms: Loom's schedules ring, tree, multi_tree and star (captured from the library's own
// code, trace.h), "hierarchical" (a node-local tree reduce to each node's first device, a ring
// allreduce among those devices, a node-local tree broadcast: Loom's HierarchicalAllReduce), and
// "auto": every applicable one simulated, the fastest reported. NCCL's schedules, as Loom's
// GPU transport runs them natively, for comparison with NCCL's published figures:
//   nccl_ring  one ring per channel, a channel per NIC (one on a single machine), each ring
//              entering and leaving every node through its channel's NIC, the buffer split
//              over the channels, channels running side by side
//   nccl_tree  allreduce: per channel two complementary binary trees over the nodes (each node
//              interior in one, a leaf in the other) carrying half the buffer each, every node
//              a chain of its devices below its tree position (NCCL's double binary tree)
//   nccl       the faster of the two (NCCL's tuner picks per size)
// The allreduce calls Loom's MPI communicator runs inside its signature round
// (communicator.h, SignatureExchangeMode; the round itself is part of the call cost here):
//   exchange        every rank sends its whole buffer to every other and reduces the n-1 it
//                   receives (calls of at most 2 KiB)
//   split_exchange  block r of every rank's buffer to rank r, reduced there, then sent to every
//                   rank: the direct algorithm's two rounds (blocks of at most 2 KiB)
// They join "auto" when SimOptions::mpi_exchange says the ranks are MPI processes.
// The transport's native collectives, on hosts whose spec says what they are (native=pass or
// native=libnbc; they join "auto" there):
//   native          on hosts with native=pass (Loom's in-process transport) one pass over
//                   the ranks' shared memory (InProcessTransport::RunNative):
//                   inputs of at most kInProcessNativeInlineBytes per rank are copied into the
//                   meeting and every rank computes its own output from the copies; larger
//                   calls are cut into blocks of at most kInProcessNativeBlockBytes per
//                   operand (NativeBlockElements), dealt round-robin to the ranks (they claim
//                   them from a shared counter), each a
//                   local copy of what the block reads and writes (an allreduce block reads N
//                   inputs and writes N outputs: a copy of N blocks; the reduction itself runs
//                   on a block held in L1 and is not charged). The ranks' meeting is the
//                   call's fixed cost (EngineOptions::call_us). Outputs of 16 MiB and more
//                   are written with streaming stores: at the memory's rates, without the
//                   read of each written line.
//                   On hosts with native=libnbc (Loom's MPI transport): Open MPI's
//                   MPI_Iallreduce schedules (allreduce only; coll/libnbc): binomial reduce
//                   and broadcast below 4 ranks or 64 KiB, else recursive halving and
//                   doubling; whole messages, after the communicator's signature round.
// and a parameter server's push and pull ("ps", allreduce): one server per node, on the node
// (as MXNet's dist_sync is usually deployed: the server process beside the node's workers,
// reached through the node's first device's links and NIC); every worker pushes shard s of
// its buffer to server s, each server sums the shards (reducing as they arrive) and, once all
// have arrived, sends the sum back to every worker.
//
// Plans: a single machine gets CommPlan::Create over its link matrix (exactly the communicator's
// plan). A cluster's plan follows the nodes: the ring visits each node's devices in the node's
// ring order, node after node; trees are balanced recursive-halving trees over that order (their
// first levels cross nodes, one edge per node per level); multi-trees are not built beyond 64
// devices (Loom runs hierarchical collectives across nodes).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collective/communicator.h"
#include "sim/engine.h"
#include "sim/machine.h"
#include "sim/trace.h"

namespace loom::sim {

struct SimOptions {
  size_t chunk_bytes = size_t{1} << 20;  // the pipeline piece (CommunicatorOptions' default)
  EngineOptions engine;
  // The ranks are processes under Loom's MPI communicator: "auto" also weighs exchange and
  // split_exchange for the allreduce calls that communicator runs inside its signature round.
  bool mpi_exchange = false;
  // Loom's rooted broadcasts (tree, star, ring's chain, multi_tree; hierarchical's node-local
  // step) as they ran before they sent from the root's send buffer: the root first copies send
  // into recv and sends from recv (CallSpec::root_copy_first). For measurements taken with that
  // schedule (bench/sim/records without "schedule": 2).
  bool root_copy_first = false;
  // Loom's schedules run in place (allreduce, reduce, broadcast: send and receive one buffer;
  // a broadcast's root then copies nothing). Not for NCCL's calls nor native ones.
  bool in_place = false;
  // NCCL's calls (nccl_ring, nccl_tree, nccl) as its tuner runs them on A100 machines: calls
  // of at most nccl_ll128_max_bytes run a low-latency protocol (LL / LL128: flags travel with
  // the data) at nccl_ll128_efficiency of the link rate, larger ones Simple at the full rate;
  // every call also pays nccl_launch_us (a kernel launch and its completion). The three values
  // are fitted to Azure's ND A100 v4 all_reduce_perf curve (the launch to its 1-256 KB floor,
  // the switch to where its bandwidth jumps, 128 -> 256 MB, the efficiency to its 64 and 128 MB
  // points); every other published point is a prediction (docs/SIMULATOR.md).
  size_t nccl_ll128_max_bytes = size_t{128} << 20;
  double nccl_ll128_efficiency = 0.75;
  double nccl_launch_us = 15;
};

// The protocol NCCL's calls of `bytes` run under `options` ("LL128" or "Simple") and the share
// of the link rate they reach.
std::pair<std::string, double> NcclProtocol(const SimOptions& options, size_t bytes);

struct CollectiveResult {
  std::string algorithm;
  size_t bytes = 0;
  double time_us = 0;
  double algbw_gbps = 0;  // bytes / time
  double busbw_gbps = 0;  // algbw x nccl-tests' factor: 2(n-1)/n allreduce, (n-1)/n allgather
                          // and reducescatter, 1 reduce and broadcast
  std::string bottleneck;
  double bottleneck_utilization = 0;  // its busy time / the call's time
  size_t transfers = 0;
};

// The names Simulate takes ("auto" last).
std::vector<std::string> SimAlgorithmNames();
// nccl-tests' bus-bandwidth factor for `kind` on n ranks.
double BusFactor(collective::Collective kind, int n);

class Simulator {
 public:
  static StatusOr<Simulator> Create(Machine machine, const SimOptions& options = {});
  // A machine with the plan a communicator already made for it (its ring order, trees and, on a
  // cluster, channels), so that what is replayed is exactly what that communicator runs.
  static StatusOr<Simulator> ForPlan(Machine machine, const collective::CommPlan& plan,
                                     const SimOptions& options = {});

  const Machine& machine() const { return *machine_; }
  const collective::CommPlan& plan() const { return *plan_; }
  const SimOptions& options() const { return options_; }

  // One call of `kind` with `bytes` (nccl-tests' size) by `algorithm` (SimAlgorithmNames).
  StatusOr<CollectiveResult> Simulate(collective::Collective kind, const std::string& algorithm,
                                      size_t bytes, int root = 0) const;
  // The per-rank traces one call replays (for tests and --trace).
  StatusOr<Trace> TraceOf(collective::Collective kind, const std::string& algorithm, size_t bytes,
                          int root = 0) const;

 private:
  Simulator() = default;
  // Create and ForPlan: `given` null plans the machine as the communicator would.
  static StatusOr<Simulator> Build(Machine machine, const SimOptions& options,
                                   const collective::CommPlan* given);
  StatusOr<Trace> Hierarchical(collective::Collective kind, size_t bytes) const;
  // A node-local tree reduce to each node's first device, `middle` among those devices (its
  // ranks: the nodes' first devices in node order, then ranks on `extra_devices`), and a
  // node-local tree broadcast back: the hierarchical allreduce, and MPI clients of servers.
  StatusOr<Trace> AroundNodes(size_t bytes, const Trace& middle,
                              const std::vector<int>& extra_devices) const;
  StatusOr<Trace> NcclRing(collective::Collective kind, size_t bytes, int root) const;
  StatusOr<Trace> NcclTree(collective::Collective kind, size_t bytes) const;
  StatusOr<Trace> ParameterServers(collective::Collective kind, size_t bytes) const;
  StatusOr<Trace> ParameterServersMpi(collective::Collective kind, size_t bytes) const;
  // Where the parameter servers run: the machine's dedicated servers, else each node's first
  // device (one server per node, beside its workers).
  std::vector<int> ServerDevices() const;
  StatusOr<Trace> Exchange(collective::Collective kind, size_t bytes) const;
  StatusOr<Trace> Native(collective::Collective kind, size_t bytes, int root) const;
  // Simulate's "nccl": the faster of nccl_ring and nccl_tree (allreduce; nccl_ring otherwise).
  StatusOr<CollectiveResult> SimulateNccl(collective::Collective kind, size_t bytes,
                                          int root) const;
  // Simulate's "auto": under options_.mpi_exchange the calls Loom's MPI communicator runs in
  // its signature round, otherwise the fastest of Loom's algorithms that run the call.
  StatusOr<CollectiveResult> SimulateAuto(collective::Collective kind, size_t bytes,
                                          int root) const;
  // The machine a call by `algorithm` replays on: a host's at the memory the call touches.
  const Machine& MachineFor(collective::Collective kind, const std::string& algorithm,
                            size_t bytes) const;
  // Channel c's order of one node's devices: the node's ring rotated to start on NIC c.
  std::vector<int> ChannelOrder(int c) const;
  int channels() const { return std::max(1, machine_->nics()); }

  std::shared_ptr<const Machine> machine_;
  std::shared_ptr<const collective::CommPlan> plan_;
  // Hierarchical: one node's plan and the plan of the nodes' leaders.
  std::shared_ptr<const collective::CommPlan> node_plan_, leaders_plan_;
  SimOptions options_;
};

// Sizes from `min` to `max` bytes, each `factor` times the last (nccl-tests' -b -e -f).
StatusOr<std::vector<size_t>> SizeSweep(size_t min, size_t max, double factor);
// Byte sizes: ParseByteSize (base/byte_size.h).

// A table in nccl-tests' layout, one row per result (+ the algorithm and the bottleneck).
std::string FormatTable(const Machine& machine, collective::Collective kind,
                        collective::DataType dtype, const std::vector<CollectiveResult>& rows);

}  // namespace loom::sim
