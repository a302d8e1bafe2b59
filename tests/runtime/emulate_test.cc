// The emulated cluster of `loom launch --emulate`: where processes land, how addresses map to
// nodes, the tool runner's errors and deadline, and (where this process may make namespaces)
// that a cluster is built as documented and removed without a trace, a dead launcher's included.
#include "runtime/emulate.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace loom::runtime {
namespace {

bool NetnsExists(const std::string& name) {
  struct stat st;
  return stat(("/var/run/netns/" + name).c_str(), &st) == 0;
}

TEST(PlaceOnNodes, ConsecutiveBlocksAsEvenAsTheyDivide) {
  EXPECT_EQ(PlaceOnNodes(4, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(PlaceOnNodes(8, 4), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(PlaceOnNodes(2, 4), (std::vector<int>{0, 2}));
  EXPECT_EQ(PlaceOnNodes(5, 2), (std::vector<int>{0, 0, 0, 1, 1}));
  EXPECT_TRUE(PlaceOnNodes(0, 3).empty());
  for (int nodes = 1; nodes <= 9; ++nodes)
    for (int count = 1; count <= 40; ++count) {
      std::vector<int> at = PlaceOnNodes(count, nodes);
      std::vector<int> per(nodes, 0);
      for (size_t k = 0; k < at.size(); ++k) {
        ASSERT_GE(at[k], 0);
        ASSERT_LT(at[k], nodes);
        if (k > 0) {
          ASSERT_LE(at[k - 1], at[k]) << "blocks are consecutive";
        }
        ++per[at[k]];
      }
      const int least = count / nodes;
      for (int n = 0; n < nodes; ++n) {
        EXPECT_GE(per[n], least) << count << " on " << nodes;
        EXPECT_LE(per[n], least + 1) << count << " on " << nodes;
      }
    }
}

TEST(EmulatedNetworkNames, AddressesMapBackToTheirNode) {
  for (int node : {0, 1, 7, kMaxEmulatedNodes - 1})
    for (int nic : {0, 1, kMaxEmulatedNics - 1})
      EXPECT_EQ(NodeOfAddress(EmulatedNetwork::Address(node, nic)), node);
  EXPECT_EQ(EmulatedNetwork::Address(3, 1), "10.77.1.4");
  for (const char* bad : {"127.0.0.1", "10.77.0.0", "10.77.0.65", "10.77.9.1", "10.77.0.1x",
                          "10.78.0.1", "", "node1"})
    EXPECT_EQ(NodeOfAddress(bad), -1) << bad;
}

TEST(RunTool, ReturnsOutputAndQuotesTheErrorOfAFailure) {
  StatusOr<std::string> out = RunTool({"sh", "-c", "cat; echo done"}, "in\n");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "in\ndone\n");
  StatusOr<std::string> failed = RunTool({"sh", "-c", "echo broken >&2; exit 3"}, "");
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("broken"), std::string::npos)
      << failed.status().ToString();
  EXPECT_NE(failed.status().message().find("sh -c"), std::string::npos);
  StatusOr<std::string> missing = RunTool({"no-such-tool-anywhere"}, "");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
}

TEST(RunTool, AToolThatHangsIsStoppedAtItsDeadline) {
  const auto start = std::chrono::steady_clock::now();
  StatusOr<std::string> out = RunTool({"sleep", "30"}, "", 0.3);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kTimeout) << out.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

// The rest makes real namespaces: only as root (or with CAP_NET_ADMIN and CAP_SYS_ADMIN).
class EmulatedNetworkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status allowed = CheckEmulationAllowed();
    if (!allowed.ok()) GTEST_SKIP() << allowed.ToString();
  }
};

TEST_F(EmulatedNetworkTest, BuildsEveryNodeAndRailAndRemovesThemAll) {
  StatusOr<EmulatedCluster> spec = ParseEmulatedCluster("3x2:100mbit:loss=0.5");
  ASSERT_TRUE(spec.ok());
  std::vector<std::string> names;
  {
    StatusOr<std::unique_ptr<EmulatedNetwork>> net = EmulatedNetwork::Create(*spec, getpid());
    ASSERT_TRUE(net.ok()) << net.status().ToString();
    const EmulatedNetwork& n = **net;
    names = {n.SwitchNetns(), n.NodeNetns(0), n.NodeNetns(1), n.NodeNetns(2)};
    for (const std::string& name : names) EXPECT_TRUE(NetnsExists(name)) << name;
    // Node 1 has both rails' addresses on eth0 and eth1, each shaped, and drops a share.
    StatusOr<std::string> addrs = RunTool({"ip", "-n", n.NodeNetns(1), "-o", "-4", "addr"}, "");
    ASSERT_TRUE(addrs.ok()) << addrs.status().ToString();
    EXPECT_NE(addrs->find("eth0    inet 10.77.0.2/24"), std::string::npos) << *addrs;
    EXPECT_NE(addrs->find("eth1    inet 10.77.1.2/24"), std::string::npos) << *addrs;
    StatusOr<std::string> qdisc = RunTool({"tc", "-n", n.NodeNetns(1), "qdisc", "show"}, "");
    ASSERT_TRUE(qdisc.ok());
    EXPECT_NE(qdisc->find("qdisc tbf"), std::string::npos) << *qdisc;
    EXPECT_NE(qdisc->find("rate 100Mbit"), std::string::npos) << *qdisc;
    StatusOr<std::string> sw = RunTool({"tc", "-n", n.SwitchNetns(), "qdisc", "show"}, "");
    ASSERT_TRUE(sw.ok());
    EXPECT_NE(sw->find("dev n2e1"), std::string::npos) << "the switch side shapes, too: " << *sw;
    StatusOr<std::string> rules =
        RunTool({"ip", "netns", "exec", n.NodeNetns(2), "nft", "list", "ruleset"}, "");
    ASSERT_TRUE(rules.ok()) << rules.status().ToString();
    EXPECT_NE(rules->find("numgen random mod 1000000 < 5000"), std::string::npos) << *rules;
    // A thread can enter a node and come back.
    {
      StatusOr<std::unique_ptr<NetnsScope>> in = NetnsScope::Enter(n.NodeNetnsPath(0));
      ASSERT_TRUE(in.ok()) << in.status().ToString();
      StatusOr<std::string> mine = RunTool({"ip", "-o", "-4", "addr"}, "");
      ASSERT_TRUE(mine.ok());
      EXPECT_NE(mine->find("10.77.1.1/24"), std::string::npos) << *mine;
    }
    StatusOr<std::string> back = RunTool({"ip", "-o", "-4", "addr"}, "");
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->find("10.77."), std::string::npos) << *back;
  }
  for (const std::string& name : names) EXPECT_FALSE(NetnsExists(name)) << name << " remains";
}

TEST_F(EmulatedNetworkTest, ADeadLaunchersNamespacesAreRemovedALiveOnesKept) {
  // A launcher that has exited: its pid, reaped, names no process.
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  waitpid(dead, nullptr, 0);
  const std::string stale = "loom-" + std::to_string(dead) + "-n0";
  const std::string live = "loom-" + std::to_string(getpid()) + "-n0";
  ASSERT_TRUE(RunTool({"ip", "netns", "add", stale}, "").ok());
  ASSERT_TRUE(RunTool({"ip", "netns", "add", live}, "").ok());
  StatusOr<int> removed = RemoveStaleNetworks();
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_GE(*removed, 1);
  EXPECT_FALSE(NetnsExists(stale));
  EXPECT_TRUE(NetnsExists(live));
  ASSERT_TRUE(RunTool({"ip", "netns", "del", live}, "").ok());
}

TEST_F(EmulatedNetworkTest, AFailedBuildSaysWhyAndLeavesNothing) {
  // Another network of the same launcher already holds the names: the second build fails at
  // its first namespace and removes nothing of the first.
  StatusOr<EmulatedCluster> spec = ParseEmulatedCluster("2:1gbit");
  ASSERT_TRUE(spec.ok());
  StatusOr<std::unique_ptr<EmulatedNetwork>> first = EmulatedNetwork::Create(*spec, getpid());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  StatusOr<std::unique_ptr<EmulatedNetwork>> second = EmulatedNetwork::Create(*spec, getpid());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("cannot build the emulated cluster 2x1:1gbit"),
            std::string::npos)
      << second.status().ToString();
  EXPECT_TRUE(NetnsExists((*first)->SwitchNetns()));
}

// A UDP socket bound to address:port inside the node namespace at `netns`.
int UdpSocketIn(const std::string& netns, const std::string& address, int port) {
  StatusOr<std::unique_ptr<NetnsScope>> in = NetnsScope::Enter(netns);
  if (!in.ok()) return -1;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST_F(EmulatedNetworkTest, ADelayedLinkDelaysEveryFrameAndNeverReordersOne) {
  // 20 ms +- 15 ms a frame, through the launcher's switch thread: no switch namespace, TAP NICs.
  StatusOr<EmulatedCluster> spec = ParseEmulatedCluster("2x2:100mbit:delay=20ms:jitter=15ms");
  ASSERT_TRUE(spec.ok());
  StatusOr<std::unique_ptr<EmulatedNetwork>> net = EmulatedNetwork::Create(*spec, getpid());
  ASSERT_TRUE(net.ok()) << net.status().ToString();
  const EmulatedNetwork& n = **net;
  EXPECT_FALSE(NetnsExists(n.SwitchNetns()));
  StatusOr<std::string> link = RunTool({"ip", "-n", n.NodeNetns(1), "-d", "link", "show"}, "");
  ASSERT_TRUE(link.ok());
  EXPECT_NE(link->find("tun type tap"), std::string::npos) << *link;
  // Rail 1: node 0 sends 50 numbered datagrams to node 1, back to back.
  const int rx = UdpSocketIn(n.NodeNetnsPath(1), EmulatedNetwork::Address(1, 1), 9000);
  const int tx = UdpSocketIn(n.NodeNetnsPath(0), EmulatedNetwork::Address(0, 1), 9001);
  ASSERT_GE(rx, 0);
  ASSERT_GE(tx, 0);
  sockaddr_in to = {};
  to.sin_family = AF_INET;
  to.sin_port = htons(9000);
  inet_pton(AF_INET, EmulatedNetwork::Address(1, 1).c_str(), &to.sin_addr);
  constexpr int kCount = 50;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCount; ++i)
    ASSERT_EQ(sendto(tx, &i, sizeof(i), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
              static_cast<ssize_t>(sizeof(i)));
  std::vector<int> got;
  auto first = std::chrono::steady_clock::duration::zero();
  while (static_cast<int>(got.size()) < kCount) {
    pollfd p = {rx, POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 20000), 1) << "datagram " << got.size() << " never came";
    int value = -1;
    ASSERT_EQ(recv(rx, &value, sizeof(value), 0), static_cast<ssize_t>(sizeof(value)));
    if (got.empty()) first = std::chrono::steady_clock::now() - start;
    got.push_back(value);
  }
  // Nothing arrives sooner than the shortest delay a frame can draw (5 ms; the ARP exchange
  // before the first datagram adds two more), and the link kept their order.
  EXPECT_GE(first, std::chrono::milliseconds(5));
  for (int i = 0; i < kCount; ++i) ASSERT_EQ(got[i], i);
  close(rx);
  close(tx);
}

}  // namespace
}  // namespace loom::runtime
