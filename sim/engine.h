// The replay engine: runs every rank's trace (trace.h) against a machine (machine.h) in simulated
// time, event by event.
//
//  - A rank runs its ops in order on its own clock. Posting a message costs it `post_us` (the
//    software cost of one send or receive); a wait blocks it until that transfer ends; a copy or
//    the final scaling of a reduction costs bytes / copy_gbps or reduce_gbps.
//  - A send and the receive with the same (sender, receiver, tag) match in posting order. The
//    transfer starts when both are posted plus the route's latency (rendezvous: the receiver's
//    buffer is ready) and then streams its bytes over every resource of the route.
//  - Sharing: a transfer's rate is the smallest, over the resources it crosses, of the
//    resource's bandwidth x `efficiency` divided by the number of transfers crossing it at that
//    moment (equal shares, not redistributed max-min: a flow held back elsewhere leaves its
//    share unused; stated in docs/SIMULATOR.md). Rates change whenever a transfer starts or ends
//    on a shared resource. A receive that reduces also crosses the receiver's reduction engine
//    (reduce_gbps) so that reductions overlap the transfers that feed them, as Loom's receive-
//    and-reduce does.
//  - On a host (Machine::host) the route's latency is a waiting rank's wake-up and takes one of
//    the host's cores for that long: wake-ups beyond the core count queue for a core. Where the
//    receiver copies (MPI) on no more ranks than cores, messages ready before a wake-up of their
//    rank under way ends ride on it (one poll finds them all); in-process, and where processes
//    outnumber the cores, every request wakes its rank. There a copy also holds a core for as
//    long as it takes alone: wake-ups and handshakes queue behind copies.
//  - On a host whose machine gives an exchange latency (HostProtocol::exchange_us), a message
//    whose receiving rank posted a send in the same batch of posts (no wait between: a ring
//    step, every rank sending and receiving at once) pays that instead of the route's latency.
//  - A host transfer is copied by the receiver's CPU, or by the CPU of the rank whose post made
//    the match where the machine says so (Machine::matcher_copies: Loom's in-process transport).
//  - A message larger than the machine's eager_bytes() also pays its rendezvous_us() (MPI's
//    handshake before large messages), and every message what the machine's message_us() gives
//    its size (a host's measured cost of small messages beyond their latency and rates).
//  - On a host whose machine prices them (HostProtocol::dirty), a copy whose source or
//    destination another rank's core wrote last (the traces carry the buffers; the engine keeps
//    each range's last writer) pays the machine's extra per byte on top of its share, and the
//    call is replayed twice, the second (reported) starting from the writers the first left: a
//    call timed in a loop over the same buffers. Messages no larger than the machine's
//    fragment_bytes() (copied through the transport's own buffers) are not priced so.
//  - On a host (Machine::host) with no copy_gbps given, a rank's local copy is a transfer to
//    itself through its own CPU and the shared cores, so that copies running at once share the
//    memory's rate as transfers do.
//  - Every resource accumulates its work (each transfer's bytes at the rate that kind of
//    transfer runs on it alone); the busiest is reported as the bottleneck.
// A trace whose ranks wait for messages nobody sends ends in an error naming the rank, the
// handle and the peer, never a hang.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "sim/machine.h"
#include "sim/trace.h"

namespace loom::sim {

struct EngineOptions {
  double call_us = 0;       // per call, before a rank's first op (the communicator's hand-off)
  double post_us = 1.0;     // per posted message, on the posting rank's clock
  double reduce_gbps = 0;   // per rank; 0: reductions cost nothing
  double copy_gbps = 0;     // per rank, local copies; 0: free
  double efficiency = 1.0;  // share of a resource's bandwidth a stream of transfers reaches
};

struct Replay {
  double time_us = 0;               // when the last rank finished
  std::vector<double> rank_end_us;  // per rank
  size_t transfers = 0;
  int bottleneck = -1;  // index into the machine's resources (or a reduction engine)
  std::string bottleneck_name;
  double bottleneck_busy_us = 0;  // its work: each transfer's bytes at its rate there alone
};

StatusOr<Replay> ReplayTrace(const Machine& machine, const Trace& trace,
                             const EngineOptions& options);

}  // namespace loom::sim
