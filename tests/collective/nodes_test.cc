// NodeMap: ranks grouped by host, host descriptions round-tripping through their text form, and
// the link matrix that keeps each node's ranks together.
#include "collective/nodes.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace loom::collective {
namespace {

HostInfo Host(const std::string& name, int nics) {
  HostInfo h;
  h.hostname = name;
  for (int j = 0; j < nics; ++j)
    h.nics.push_back(
        NicInfo{"eth" + std::to_string(j), "10.77." + std::to_string(j) + ".1", 0.125 * (j + 1)});
  return h;
}

TEST(Nodes, HostDescriptionsRoundTripAndBadOnesAreErrors) {
  const HostInfo h = Host("node3", 2);
  StatusOr<HostInfo> back = DecodeHost(EncodeHost(h));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->hostname, "node3");
  ASSERT_EQ(back->nics.size(), 2u);
  EXPECT_EQ(back->nics[1].name, "eth1");
  EXPECT_EQ(back->nics[1].address, "10.77.1.1");
  EXPECT_DOUBLE_EQ(back->nics[1].gbps, 0.25);
  EXPECT_TRUE(DecodeHost("lonely").ok());
  for (const char* bad :
       {"", "\teth0,1.2.3.4,1", "h\teth0,1.2.3.4", "h\teth0,1.2.3.4,fast", "h\teth0,1.2.3.4,-1"})
    EXPECT_FALSE(DecodeHost(bad).ok()) << bad;
}

TEST(Nodes, RanksAreGroupedByHostInOrderOfFirstAppearance) {
  const NodeMap map =
      BuildNodeMap({Host("b", 1), Host("b", 1), Host("a", 2), Host("b", 1), Host("c", 0)});
  ASSERT_EQ(map.nodes(), 3);
  EXPECT_EQ(map.node_of_rank, (std::vector<int>{0, 0, 1, 0, 2}));
  EXPECT_EQ(map.ranks[0], (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(map.hosts[1].hostname, "a");
  EXPECT_EQ(map.hosts[1].nics.size(), 2u);
  const Topology t = NodeTopology(map);
  ASSERT_EQ(t.size(), 5);
  EXPECT_EQ(t.weight(0, 3), 2);  // one node: shared memory
  EXPECT_EQ(t.weight(0, 2), 1);  // a network between them
  EXPECT_EQ(t.weight(2, 4), 1);
  const std::string table = DescribeNodes(map);
  EXPECT_NE(table.find("5 ranks on 3 nodes"), std::string::npos) << table;
  EXPECT_NE(table.find("0  b  0,1,3  eth0=10.77.0.1@1Gb"), std::string::npos) << table;
  EXPECT_NE(table.find("2  c  4  -"), std::string::npos) << table;
}

TEST(Nodes, TheLocalHostHasANameAndItsEmulatedNicsTheirRate) {
  setenv("LOOM_EMULATE_SPEC", "2x2:10gbit", 1);
  const HostInfo h = DetectLocalHost();
  unsetenv("LOOM_EMULATE_SPEC");
  EXPECT_FALSE(h.hostname.empty());
  for (const NicInfo& n : h.nics) {
    EXPECT_NE(n.name, "lo");
    EXPECT_DOUBLE_EQ(n.gbps, 1.25) << n.name;
  }
}

}  // namespace
}  // namespace loom::collective
