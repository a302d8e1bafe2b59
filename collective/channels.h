// Channels: one ring per NIC across the nodes of a cluster topology (Topology::nodes() > 1), the
// buffer of a call striped over them (Algorithm::kChannels), so that a node's traffic to the
// others leaves and enters through every NIC instead of one.
//
// Channel c belongs to the c-th NIC that has devices attached. Its ring visits the nodes in order
// and, within each node, enters through a device of its NIC and leaves through another device of
// that NIC (through a device of the next channel's NIC where the NIC has a single device),
// following a Hamiltonian path of the node's link matrix between the two: the path of the
// strongest weakest link, then the fewest directed links an earlier channel already uses, then
// the most total link weight (an exhaustive search with a step bound; past it, the node's ring
// order broken before the entry device). So the channels' hops between nodes leave every node
// through distinct NICs and enter it through distinct NICs.
//
// Pure functions; safe from any thread.
#pragma once

#include <vector>

#include "base/status.h"
#include "collective/topology.h"

namespace loom::collective {

// The NICs of a node that have devices attached, in order: one channel each. Empty for a single
// machine (Topology::nodes() == 1).
std::vector<int> ChannelNics(const Topology& topology);

// One ring order per channel (ChannelNics), each visiting every device once; empty for a single
// machine.
std::vector<std::vector<int>> BuildChannelRings(const Topology& topology);

// The path one node's devices (local ids) follow from `entry` to `exit`, visiting each once, as
// described above; `used` counts, per directed pair (a * per + b), the channels already using
// that link, and is updated with this path's links.
std::vector<int> ChannelNodePath(const Topology& node, int entry, int exit, std::vector<int>* used);

// Checks channel rings: each a permutation of the devices, and no two channels leaving (or
// entering) a node through the same NIC.
Status ValidateChannelRings(const Topology& topology, const std::vector<std::vector<int>>& rings);

}  // namespace loom::collective
