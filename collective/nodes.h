// Which ranks share a node, and what NICs each node has: what a communicator spanning several
// machines needs beyond its ranks. Each rank describes its own host (DetectLocalHost: its host
// name and its network interfaces with their speeds); the descriptions of all ranks, gathered by
// the transport (DetectMpiNodes in transport/mpi.h), make a NodeMap.
//
// NIC speeds: an emulated cluster's rate when LOOM_EMULATE_SPEC is set (loom launch --emulate
// sets it), else the kernel's (/sys/class/net/IF/speed), else unknown (0).
//
// Thread-safety: plain values and functions.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "collective/topology.h"

namespace loom::collective {

struct NicInfo {
  std::string name;     // "eth0"
  std::string address;  // its IPv4 address
  double gbps = 0;      // bytes per second / 1e9, each direction; 0: unknown
};

struct HostInfo {
  std::string hostname;
  std::vector<NicInfo> nics;  // up, not loopback, with an IPv4 address; in interface order
};

// This process's host.
HostInfo DetectLocalHost();

// One line per host, fields separated by tabs: "hostname\tname,address,gbps\t...". Host names
// and interface names hold no tabs, commas or newlines.
std::string EncodeHost(const HostInfo& host);
StatusOr<HostInfo> DecodeHost(const std::string& text);

struct NodeMap {
  std::vector<int> node_of_rank;        // per rank
  std::vector<std::vector<int>> ranks;  // per node, in rank order
  std::vector<HostInfo> hosts;          // per node (its first rank's description)
  int nodes() const { return static_cast<int>(hosts.size()); }
};

// Groups ranks by host name, nodes numbered in the order their first rank appears.
NodeMap BuildNodeMap(const std::vector<HostInfo>& per_rank);

// The link matrix of the ranks: ranks of one node linked as NVLink-class peers (weight 2: they
// share memory), ranks of different nodes as PCIe-class (weight 1: a network between them), so
// that rings and trees cross each node boundary as rarely as they can. A link between nodes
// whose NIC speeds are known runs at the slower node's NICs together, with kNetworkLatencyUs:
// what the cost model prices.
inline constexpr double kNetworkLatencyUs = 50;
Topology NodeTopology(const NodeMap& map);

// A table: one line per node with its ranks and NICs.
std::string DescribeNodes(const NodeMap& map);

}  // namespace loom::collective
