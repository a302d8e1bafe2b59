// Channels and rails across the nodes of a cluster topology: the channel rings (one per NIC) are
// valid and cross between nodes on distinct NICs, the striped schedules compute what the plain
// ring computes on in-process ranks, and the selector prices the NICs so that auto stripes a
// large allreduce over them on a cluster while a single machine keeps its choices.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "collective/channels.h"
#include "collective/selector.h"
#include "tests/collective/test_util.h"

namespace loom::collective {
namespace {

using testing::Compare;
using testing::Expected;
using testing::Input;
using testing::RunRanks;

Topology ClusterOf(const std::string& node, int nodes, int nics) {
  StatusOr<Topology> t =
      Topology::Cluster(Topology::Preset(node).value(), nodes, nics, Link{1, 12.5, 10});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

TEST(Topology, ClustersKnowTheirNodesAndNics) {
  const Topology t = ClusterOf("p3.16xlarge", 4, 4);
  EXPECT_EQ(t.size(), 32);
  EXPECT_EQ(t.nodes(), 4);
  EXPECT_EQ(t.devices_per_node(), 8);
  EXPECT_EQ(t.node_of(19), 2);
  EXPECT_EQ(t.nic_of(19), 1);  // local device 3 of 8 on 4 NICs
  EXPECT_EQ(t.weight(8, 11), Topology::Preset("p3.16xlarge")->weight(0, 3));
  EXPECT_EQ(t.link(0, 8).bandwidth_gbps, 12.5);
  EXPECT_EQ(t.NodeTopology().ToString().substr(t.NodeTopology().ToString().find('\n')),
            Topology::Preset("p3.16xlarge")
                ->ToString()
                .substr(Topology::Preset("p3.16xlarge")->ToString().find('\n')));
  const Topology one = Topology::Preset("mesh4").value();
  EXPECT_EQ(one.nodes(), 1);
  EXPECT_EQ(one.nics(), 0);

  StatusOr<Topology> json = Topology::ParseJson(
      R"({"weights": [[0,3,1,1],[3,0,1,1],[1,1,0,3],[1,1,3,0]], "nodes": 2, "nics": 2})");
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  EXPECT_EQ(json->nodes(), 2);
  EXPECT_EQ(json->nic_of(3), 1);
  EXPECT_FALSE(Topology::ParseJson(R"({"weights": [[0,1,1],[1,0,1],[1,1,0]], "nodes": 2})").ok());
  EXPECT_FALSE(Topology::Cluster(Topology::Preset("mesh4").value(), 2, 0, Link{1, 1, 1}).ok());
}

TEST(ChannelRings, EveryDeviceOnceAndDistinctNicsBetweenNodes) {
  struct Case {
    const char* node;
    int nodes, nics, channels;
  };
  for (const Case& c : {Case{"p3.16xlarge", 4, 4, 4}, Case{"p3.16xlarge", 2, 8, 8},
                        Case{"p3.16xlarge", 3, 1, 1}, Case{"mesh4", 3, 2, 2},
                        Case{"mesh4", 2, 4, 4}, Case{"dgx2", 2, 8, 8}, Case{"pcie8", 2, 2, 2}}) {
    SCOPED_TRACE(std::string(c.node) + " x" + std::to_string(c.nodes) + ", " +
                 std::to_string(c.nics) + " NICs");
    const Topology t = ClusterOf(c.node, c.nodes, c.nics);
    const std::vector<std::vector<int>> rings = BuildChannelRings(t);
    ASSERT_EQ(static_cast<int>(rings.size()), c.channels);
    EXPECT_TRUE(ValidateChannelRings(t, rings).ok()) << ValidateChannelRings(t, rings).ToString();
    const int per = t.devices_per_node();
    for (int k = 0; k < c.channels; ++k) {
      std::set<int> seen(rings[k].begin(), rings[k].end());
      EXPECT_EQ(static_cast<int>(seen.size()), t.size());
      // Channel k enters every node through its own NIC (and, where the NIC has two devices or
      // more, leaves through it too).
      for (int i = 0; i < t.size(); ++i) {
        const int a = rings[k][i], b = rings[k][(i + 1) % t.size()];
        if (t.node_of(a) == t.node_of(b)) continue;
        EXPECT_EQ(t.nic_of(b), k);
        if (per / c.nics >= 2) EXPECT_EQ(t.nic_of(a), k);
      }
    }
  }
  EXPECT_TRUE(BuildChannelRings(Topology::Preset("p3.16xlarge").value()).empty());
}

TEST(ChannelRings, FollowNvLinksWithinADgx1AndSpreadOverThem) {
  const Topology t = ClusterOf("p3.16xlarge", 2, 4);
  const std::vector<std::vector<int>> rings = BuildChannelRings(t);
  ASSERT_EQ(rings.size(), 4u);
  std::map<std::pair<int, int>, int> uses;
  for (const std::vector<int>& ring : rings) {
    for (int i = 0; i + 1 < 8; ++i) {  // node 0's path
      EXPECT_GE(t.weight(ring[i], ring[i + 1]), 2) << ring[i] << "-" << ring[i + 1];
      ++uses[{ring[i], ring[i + 1]}];
    }
  }
  for (const auto& [link, n] : uses) EXPECT_LE(n, 2) << link.first << "->" << link.second;
}

TEST(ChannelRings, ValidationNamesTwoChannelsOnOneNic) {
  const Topology t = ClusterOf("mesh4", 2, 2);
  std::vector<std::vector<int>> rings = BuildChannelRings(t);
  ASSERT_EQ(rings.size(), 2u);
  rings[1] = rings[0];
  const Status s = ValidateChannelRings(t, rings);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("NIC"), std::string::npos) << s.ToString();
  rings[1].pop_back();
  EXPECT_FALSE(ValidateChannelRings(t, rings).ok());
}

std::unique_ptr<InProcessWorld> ClusterWorld(const Topology& t, size_t chunk_bytes) {
  WorldOptions options;
  options.communicator.pipeline_chunk_bytes = chunk_bytes;
  options.topology = t;
  auto world = InProcessWorld::Create(t.size(), options);
  EXPECT_TRUE(world.ok()) << world.status().ToString();
  return std::move(world).value();
}

// Rank r's float64 input: fractions, so that sums in another order differ in the last bits.
std::vector<double> Fractions(int rank, size_t count) {
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = std::sin(0.37 * rank + 0.011 * i) / (1 + rank % 3);
  return v;
}

TEST(Channels, Float64AllReduceEqualsTheReference) {
  for (const Topology& t : {ClusterOf("mesh4", 3, 2), ClusterOf("p3.16xlarge", 2, 4)}) {
    auto world = ClusterWorld(t, 256);
    ASSERT_EQ(world->plan().channels.size(), static_cast<size_t>(t.nics()));
    const int n = world->size();
    for (Algorithm a : {Algorithm::kChannels, Algorithm::kRails}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, size_t{5003}}) {
        SCOPED_TRACE(StrCat(t.name(), " ", AlgorithmName(a), " count ", count));
        std::vector<double> want(count, 0.0);
        for (int r = 0; r < n; ++r) {
          const std::vector<double> in = Fractions(r, count);
          for (size_t i = 0; i < count; ++i) want[i] += in[i];
        }
        RunRanks(*world, [&](int rank, Communicator& comm) {
          const std::vector<double> in = Fractions(rank, count);
          std::vector<double> out(count, -1.0);
          Status s = comm.AllReduce(in.data(), out.data(), count, DataType::kFloat64,
                                    ReduceOp::kSum, CallOptions{a})
                         .Wait();
          ASSERT_TRUE(s.ok()) << s.ToString();
          for (size_t i = 0; i < count; ++i)
            ASSERT_NEAR(out[i], want[i], 1e-12 * std::max(1.0, std::abs(want[i]))) << i;
        });
      }
    }
  }
}

TEST(Channels, StripedAllGatherReduceScatterAndAverageAreExact) {
  const Topology t = ClusterOf("mesh4", 2, 2);
  auto world = ClusterWorld(t, 64);
  const int n = world->size();
  for (size_t count : {size_t{1}, size_t{5}, size_t{333}}) {
    RunRanks(*world, [&](int rank, Communicator& comm) {
      const DataType dt = DataType::kInt64;
      const auto in = Input(dt, ReduceOp::kSum, rank, count, 1);
      std::vector<unsigned char> gathered(in.size() * n);
      ASSERT_TRUE(
          comm.AllGather(in.data(), gathered.data(), count, dt, CallOptions{Algorithm::kChannels})
              .Wait()
              .ok());
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(Compare(dt, Input(dt, ReduceOp::kSum, r, count, 1),
                          gathered.data() + r * in.size(), count),
                  "");
      }
      const auto big = Input(dt, ReduceOp::kSum, rank, count * n, 2);
      std::vector<unsigned char> mine(in.size());
      ASSERT_TRUE(comm.ReduceScatter(big.data(), mine.data(), count, dt, ReduceOp::kSum,
                                     CallOptions{Algorithm::kChannels})
                      .Wait()
                      .ok());
      EXPECT_EQ(
          Compare(dt, Expected(dt, ReduceOp::kSum, n, count, 2, rank * count), mine.data(), count),
          "");
      const DataType f = DataType::kFloat32;
      const auto x = Input(f, ReduceOp::kAvg, rank, count, 3);
      std::vector<unsigned char> avg(x.size());
      ASSERT_TRUE(comm.AllReduce(x.data(), avg.data(), count, f, ReduceOp::kAvg,
                                 CallOptions{Algorithm::kRails})
                      .Wait()
                      .ok());
      EXPECT_EQ(Compare(f, Expected(f, ReduceOp::kAvg, n, count, 3), avg.data(), count), "");
    });
  }
}

TEST(Selector, PricesNicsAndStripesLargeAllReducesOverThemOnAClusterOnly) {
  SelectorOptions options;
  options.use_default_cost_model = false;
  const Topology t = ClusterOf("p3.16xlarge", 2, 4);
  const Selector cluster(*CommPlan::Create(t).value(), options);
  const Algorithm chosen = cluster.Choose(Collective::kAllReduce, 64 << 20, 1, false);
  EXPECT_TRUE(chosen == Algorithm::kChannels || chosen == Algorithm::kRails)
      << AlgorithmName(chosen);
  double ring = -1, channels = -1;
  for (const Estimate& e : cluster.Estimates(Collective::kAllReduce, 64 << 20)) {
    if (e.algorithm == Algorithm::kRing) ring = e.time_us;
    if (e.algorithm == Algorithm::kChannels) channels = e.time_us;
  }
  // Four NICs carry the channels' bytes, one the ring's (both reduce the same bytes).
  EXPECT_GT(ring, 1.5 * channels);
  const Selector one(*CommPlan::Create(Topology::Preset("p3.16xlarge").value()).value(), options);
  for (const Estimate& e : one.Estimates(Collective::kAllReduce, 64 << 20)) {
    EXPECT_NE(e.algorithm, Algorithm::kChannels);
    EXPECT_NE(e.algorithm, Algorithm::kRails);
  }
}

}  // namespace
}  // namespace loom::collective
