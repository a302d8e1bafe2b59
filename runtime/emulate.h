// The emulated cluster of `loom launch --emulate` (base/emulated_cluster.h has its spec): one Linux
// network namespace per node and one "switch" namespace, built with iproute2 and nftables.
//
// Layout (rail-optimized, as multi-NIC clusters are cabled): NIC j of every node plugs into
// bridge br<j> of the switch namespace, and rail j is the subnet 10.77.<j>.0/24, where node i
// has 10.77.<j>.<i+1> on its interface eth<j>. Both directions of every NIC are shaped to the
// spec's rate with tbf (the node side shapes what it sends, the switch side what it receives);
// loss drops that share of the packets each NIC sends (nftables' random numbers). With delay or
// jitter the NICs are TAP devices and the switch is a thread of the launcher (delay_line.h),
// which delays every frame and serializes each node's incoming traffic at the rate; there is no
// switch namespace then. Nothing is routed outside these namespaces, and no address is added
// anywhere else.
//
// Names: the namespaces of launcher PID are "loom-PID-sw" and "loom-PID-n<i>". RemoveStale
// deletes those of launchers that no longer run (one SIGKILLed leaves them behind).
//
// Thread-safety: an EmulatedNetwork is used from one thread. NetnsScope switches the calling
// thread only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/emulated_cluster.h"
#include "base/status.h"
#include "runtime/delay_line.h"

namespace loom::runtime {

// OK when this process may create network namespaces and shape links (CAP_NET_ADMIN and
// CAP_SYS_ADMIN, as root has), else FailedPrecondition saying so.
Status CheckEmulationAllowed();

// Deletes the namespaces of launchers that are gone; returns how many it deleted.
StatusOr<int> RemoveStaleNetworks();

class EmulatedNetwork {
 public:
  // Builds the cluster for launcher `pid` (its names; see above). On failure removes what it
  // made and says which step failed and why.
  static StatusOr<std::unique_ptr<EmulatedNetwork>> Create(const EmulatedCluster& cluster, int pid);
  ~EmulatedNetwork();  // deletes every namespace (and so every interface) it made
  EmulatedNetwork(const EmulatedNetwork&) = delete;
  EmulatedNetwork& operator=(const EmulatedNetwork&) = delete;

  const EmulatedCluster& cluster() const { return cluster_; }
  std::string NodeNetns(int node) const;          // "loom-PID-n<i>"
  std::string NodeNetnsPath(int node) const;      // "/var/run/netns/loom-PID-n<i>"
  std::string SwitchNetns() const;                // "loom-PID-sw"
  static std::string Address(int node, int nic);  // "10.77.<nic>.<node+1>"
  static std::string Interface(int nic);          // "eth<nic>", inside the node's namespace
  static std::string NodeHostname(int node);      // "node<i>": each node's UTS name

 private:
  EmulatedNetwork(const EmulatedCluster& cluster, int pid) : cluster_(cluster), pid_(pid) {}
  Status Build();
  Status BuildBridges();
  Status StartDelayLine();
  Status SetUpNode(int node);
  void Remove();

  EmulatedCluster cluster_;
  int pid_;
  std::vector<std::string> made_;          // namespaces created so far, for Remove
  std::unique_ptr<DelayLine> delay_line_;  // the switch of a cluster with delay or jitter
};

// The node (0-based) each of `count` processes of one role lands on: consecutive blocks, as even
// as they divide (process k goes to node k * nodes / count), so with count == nodes each node gets
// one and with count = 2 * nodes each gets two neighbours.
std::vector<int> PlaceOnNodes(int count, int nodes);

// The node whose rail address `address` is ("10.77.<j>.<i+1>" -> i), or -1.
int NodeOfAddress(const std::string& address);

// While alive, the calling thread is in the network namespace at `path` (sockets it creates
// belong there); the thread's previous namespace comes back on destruction.
class NetnsScope {
 public:
  static StatusOr<std::unique_ptr<NetnsScope>> Enter(const std::string& path);
  ~NetnsScope();
  NetnsScope(const NetnsScope&) = delete;
  NetnsScope& operator=(const NetnsScope&) = delete;

 private:
  explicit NetnsScope(int saved) : saved_(saved) {}
  int saved_;
};

// Runs argv (argv[0] looked up in PATH) with `input` on its stdin and waits at most timeout_s.
// Returns its stdout; a failure (non-zero exit, signal, timeout) names the command and quotes its
// stderr.
StatusOr<std::string> RunTool(const std::vector<std::string>& argv, const std::string& input,
                              double timeout_s = 30);

}  // namespace loom::runtime
