#include "collective/topology.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "collective/tree_builder.h"

namespace loom::collective {
namespace {

TEST(Topology, PresetsHaveTheDocumentedShape) {
  const std::pair<const char*, int> sizes[] = {
      {"p3.16xlarge", 8}, {"dgx1-p100", 8}, {"dgx2", 16}, {"mesh4", 4}, {"pcie8", 8}};
  for (const auto& [name, n] : sizes) {
    auto t = Topology::Preset(name);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().ToString();
    EXPECT_EQ(t->size(), n) << name;
    EXPECT_EQ(t->name(), name);
    EXPECT_TRUE(t->IsConnected()) << name;
  }
  EXPECT_EQ(Topology::PresetNames().size(), 5u);
  EXPECT_EQ(Topology::Preset("p4d").status().code(), StatusCode::kInvalidArgument);
  auto p3 = Topology::Preset("p3.16xlarge").value();
  EXPECT_EQ(p3.weight(0, 3), 3);
  EXPECT_EQ(p3.weight(0, 1), 2);
  EXPECT_EQ(p3.weight(0, 5), 1);
  EXPECT_GT(p3.link(0, 3).bandwidth_gbps, p3.link(0, 1).bandwidth_gbps);
  EXPECT_GT(p3.link(0, 1).bandwidth_gbps, p3.link(0, 5).bandwidth_gbps);
  auto pcie = Topology::Preset("pcie8").value();
  auto dgx2 = Topology::Preset("dgx2").value();
  for (int a = 0; a < 8; ++a) {
    for (int b = 0; b < 8; ++b) EXPECT_EQ(pcie.weight(a, b), a == b ? 0 : 1);
  }
  EXPECT_EQ(dgx2.weight(3, 12), dgx2.weight(0, 1));
}

TEST(Topology, PresetsMatchTheReferenceFiles) {
  for (const char* name : {"p3.16xlarge", "dgx1-p100"}) {
    auto file = Topology::FromFile(std::string(LOOM_COLLECTIVE_TOPOLOGY_DIR) + "/" + name + ".txt");
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto preset = Topology::Preset(name).value();
    ASSERT_EQ(file->size(), preset.size());
    for (int a = 0; a < preset.size(); ++a) {
      for (int b = 0; b < preset.size(); ++b) EXPECT_EQ(file->weight(a, b), preset.weight(a, b));
    }
  }
}

TEST(Topology, ToStringParsesBack) {
  auto p3 = Topology::Preset("p3.16xlarge").value();
  auto again = Topology::Parse(p3.ToString());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  for (int a = 0; a < 8; ++a) {
    for (int b = 0; b < 8; ++b) EXPECT_EQ(again->weight(a, b), p3.weight(a, b));
  }
}

TEST(Topology, ParseErrorsSayWhere) {
  auto expect_error = [](const std::string& text, const std::string& needle) {
    auto t = Topology::Parse(text);
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().message();
  };
  expect_error("", "no device count");
  expect_error("# only a comment\n", "no device count");
  expect_error("2\n0 1\n", "expected 2 matrix rows, found 1");
  expect_error("2\n0 1\n1 0\n1 0\n", "line 4: more than 2 matrix rows");
  expect_error("2\n0 1 1\n1 0\n", "line 2: row has 3 weights, expected 2");
  expect_error("2\n0 x\n1 0\n", "line 2: 'x' is not an integer");
  expect_error("2\n0 2\n1 0\n", "not symmetric");
  expect_error("2\n0 7\n7 0\n", "expected 0..3");
  expect_error("2\n1 1\n1 0\n", "diagonal");
  expect_error("0\n", "outside 1..64");
  expect_error("2 2\n", "device count alone");
  EXPECT_EQ(Topology::FromFile("/nonexistent/topology.txt").status().code(), StatusCode::kIOError);
}

TEST(Topology, JsonFilesGiveWeightsBandwidthAndLatency) {
  // The p3.16xlarge matrix as JSON gives the same weights as the preset.
  const Topology p3 = Topology::Preset("p3.16xlarge").value();
  std::string rows;
  for (int a = 0; a < 8; ++a) {
    rows += a ? ", [" : "[";
    for (int b = 0; b < 8; ++b) rows += (b ? ", " : "") + std::to_string(p3.weight(a, b));
    rows += "]";
  }
  auto same = Topology::ParseJson("{\"name\": \"p3 as json\", \"weights\": [" + rows + "]}");
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(same->name(), "p3 as json");
  for (int a = 0; a < 8; ++a) {
    for (int b = 0; b < 8; ++b) {
      EXPECT_EQ(same->weight(a, b), p3.weight(a, b));
      EXPECT_EQ(same->link(a, b).bandwidth_gbps, p3.link(a, b).bandwidth_gbps);
    }
  }
  // Measured bandwidth and latency replace the weight class's defaults.
  auto custom = Topology::ParseJson(R"({"weights": [[0, 2, 1], [2, 0, 0], [1, 0, 0]],
      "bandwidth_gbps": [[0, 48.5, 12], [48.5, 0, 0], [12, 0, 0]],
      "latency_us": [[0, 1.5, 7], [1.5, 0, 0], [7, 0, 0]]})");
  ASSERT_TRUE(custom.ok()) << custom.status().ToString();
  EXPECT_EQ(custom->weight(0, 1), 2);
  EXPECT_EQ(custom->weight(1, 2), 0);
  EXPECT_DOUBLE_EQ(custom->link(1, 0).bandwidth_gbps, 48.5);
  EXPECT_DOUBLE_EQ(custom->link(0, 2).bandwidth_gbps, 12);
  EXPECT_DOUBLE_EQ(custom->link(2, 0).latency_us, 7);
  EXPECT_TRUE(custom->IsConnected());

  auto expect_error = [](const std::string& text, const std::string& needle) {
    auto t = Topology::ParseJson(text);
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().message();
  };
  expect_error("{\"weights\": [[0, 1], [1, 0]", "not valid JSON");
  expect_error("[[0]]", "must be a JSON object");
  expect_error("{}", "missing \"weights\"");
  expect_error("{\"weights\": [[0, 1], [1, 0]], \"speed\": 3}", "unknown key \"speed\"");
  expect_error("{\"weights\": [[0, 1], [1]]}", "\"weights\" row 1 must be an array of 2 numbers");
  expect_error("{\"weights\": [[0, 1.5], [1.5, 0]]}", "entry (0,1) is 1.5, expected an integer");
  expect_error("{\"weights\": [[0, 2], [1, 0]]}", "not symmetric");
  expect_error("{\"weights\": [[0, 1], [1, 0]], \"bandwidth_gbps\": [[0, 5], [6, 0]]}",
               "\"bandwidth_gbps\" is not symmetric");
  expect_error("{\"weights\": [[0, 1], [1, 0]], \"bandwidth_gbps\": [[0, 0], [0, 0]]}",
               "\"bandwidth_gbps\" entry (0,1) is 0, expected > 0");
  expect_error("{\"weights\": [[0, 1], [1, 0]], \"latency_us\": [[0]]}",
               "\"latency_us\" has 1 rows, expected 2");
  expect_error("{\"name\": 7, \"weights\": [[0]]}", "\"name\" must be a string");
}

TEST(Topology, FromFileReadsEitherFormat) {
  const std::string dir = ::testing::TempDir();
  const std::string json = dir + "/loom_topology_test.json";
  {
    std::ofstream out(json);
    out << "\n  {\"name\": \"two gpus\", \"weights\": [[0, 3], [3, 0]]}\n";
  }
  auto t = Topology::FromFile(json);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->name(), "two gpus");
  EXPECT_EQ(t->weight(0, 1), 3);
  {
    std::ofstream out(json);
    out << "{\"weights\": [[0, 3], [2, 0]]}";
  }
  auto bad = Topology::FromFile(json);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(json), std::string::npos) << bad.status().message();
}

TEST(RingOrder, FollowsDoubleNvlinkOnP3AndNvlinkOnDgx1) {
  for (const char* name : {"p3.16xlarge", "dgx1-p100"}) {
    auto t = Topology::Preset(name).value();
    std::vector<int> order = BuildRingOrder(t);
    std::vector<int> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < t.size(); ++i) EXPECT_EQ(sorted[i], i);
    for (int i = 0; i < t.size(); ++i) {
      EXPECT_GE(t.weight(order[i], order[(i + 1) % t.size()]), 2) << name << " position " << i;
    }
  }
  // p3.16xlarge has a ring of double NVLinks only.
  auto p3 = Topology::Preset("p3.16xlarge").value();
  std::vector<int> order = BuildRingOrder(p3);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(p3.weight(order[i], order[(i + 1) % 8]), 3);
  EXPECT_EQ(BuildRingOrder(Topology::Uniform(5)), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(BuildRingOrder(Topology::Uniform(1)), (std::vector<int>{0}));
}

}  // namespace
}  // namespace loom::collective
