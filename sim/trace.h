// Traces: what each rank of one collective call does, captured by running Loom's own algorithm
// schedules (collective/algorithms: ring, tree, multi_tree, star) over a transport that moves no
// data but writes down every post, wait, copy and reduction in order. The simulator replays these
// traces over a model of links (engine.h), so what it predicts is the schedule Loom runs, not a
// formula about it. Schedules decide what to send from the rank, the plan and the sizes only
// (never from received data), which is what makes a data-free run faithful.
//
// Traces of several calls compose (Append): a hierarchical allreduce is a node-local reduce, an
// allreduce among the nodes' leaders and a node-local broadcast, each captured on its own group
// and mapped onto the global ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "collective/communicator.h"
#include "collective/types.h"

namespace loom::sim {

struct TraceOp {
  // kFault: `bytes` of fresh memory the rank touches for the first time (the kernel maps it
  // in page by page: a host's fault_us per 4 KiB page, on one of its cores).
  // kReduce: the rank reduces `bytes` of operands in its own memory (two read, one written per
  // element, as a receive that reduces: the in-process native pass), at the reduce rates.
  enum Kind : uint8_t { kSend, kRecv, kRecvReduce, kWait, kCopy, kFinalize, kFault, kReduce };
  Kind kind = kSend;
  int peer = -1;       // kSend / kRecv / kRecvReduce: the other rank (global after Append)
  int handle = -1;     // posts: the handle they create; kWait: the handle waited on
  uint64_t tag = 0;    // posts: matched with the peer's post of the same tag, in order
  uint64_t bytes = 0;  // posts, kCopy, kFinalize, kFault, kReduce
  // The rank's own memory the op touches (0: not recorded): a send's source, a receive's
  // destination, a receive-and-reduce's destination with its local operand in `addr2`, a copy's
  // destination with its source in `addr2`. Addresses are the recording's own (each of the
  // call's buffers at a distance of its own), meaningful per rank: the engine keeps which rank
  // wrote each range last (engine.h, HostProtocol::dirty).
  uint64_t addr = 0, addr2 = 0;
};

// One trace per rank; handles count from 0 per rank.
struct Trace {
  std::vector<std::vector<TraceOp>> ranks;
  std::vector<int> handles;  // per rank: handles created so far
  int parts = 0;             // calls appended so far (Append keeps their tags apart)
  // The machine device each trace rank runs on; empty: trace rank r on device r. Several trace
  // ranks on one device are independent streams sharing its links (NCCL's channels).
  std::vector<int> device;
  // What every rank pays before its first op, on top of EngineOptions::call_us (NCCL's calls:
  // a kernel launch and its completion).
  double start_us = 0;
  int nranks() const { return static_cast<int>(ranks.size()); }
  int device_of(int rank) const { return device.empty() ? rank : device[rank]; }
  size_t ops() const;
  size_t posts() const;
};

struct CallSpec {
  collective::Collective kind = collective::Collective::kAllReduce;
  // nccl-tests' "size": the buffer of allreduce, reduce and broadcast; allgather's output
  // (nranks x each rank's part); reducescatter's input (nranks x each rank's result).
  size_t bytes = 0;
  collective::DataType dtype = collective::DataType::kFloat32;
  int root = 0;  // reduce, broadcast
  // ring, tree, multi_tree or star: Loom's schedules over `plan`.
  collective::Algorithm algorithm = collective::Algorithm::kRing;
  size_t chunk_bytes = size_t{1} << 20;  // CommunicatorOptions::pipeline_chunk_bytes
  // The rooted broadcasts' older order, for records measured then: the root copies its send
  // buffer into recv first and sends from recv (the capture rewrites the root's trace so).
  bool root_copy_first = false;
  // Allreduce, reduce and broadcast in place: every rank's send buffer is its receive buffer.
  bool in_place = false;
};

// Runs the schedule of `call` for every rank of `plan` over a recording transport.
StatusOr<Trace> Capture(const collective::CommPlan& plan, const CallSpec& call);

// The allreduce of Loom's tree engine over one tree (any shape whose every rank has at most one
// partner per level), for every rank of `plan`.
StatusOr<Trace> CaptureTreeAllReduce(const collective::CommPlan& plan, const collective::Tree& tree,
                                     const CallSpec& call);

// Runs `parts` side by side as independent streams: rank r of every part runs on device r (the
// parts' own device maps are composed). Parts must have the same number of ranks.
StatusOr<Trace> Stack(const std::vector<Trace>& parts);

// Appends `part` (a trace over a group of part.nranks() ranks) to `into`: group rank g is global
// rank members[g]; handles are renumbered after the ones `into` already holds and tags are moved
// past every earlier part's so that the parts never match each other's messages. Ranks outside
// the group are untouched.
Status Append(Trace& into, const Trace& part, const std::vector<int>& members);

}  // namespace loom::sim
