// ParseEmulatedCluster: `loom launch --emulate`'s spec into types, every malformed field an error
// naming it, and the text form round-tripping.
#include "base/emulated_cluster.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace loom {
namespace {

TEST(EmulatedCluster, TheIssuesExampleAndEveryField) {
  StatusOr<EmulatedCluster> c = ParseEmulatedCluster("4x2:1gbit:delay=100us");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->nodes, 4);
  EXPECT_EQ(c->nics, 2);
  EXPECT_EQ(c->rate_bps, 1000000000u);
  EXPECT_DOUBLE_EQ(c->delay_us, 100);
  EXPECT_DOUBLE_EQ(c->jitter_us, 0);
  EXPECT_DOUBLE_EQ(c->loss_percent, 0);

  c = ParseEmulatedCluster("8:100Mb:delay=2ms:jitter=500us:loss=0.5%");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->nodes, 8);
  EXPECT_EQ(c->nics, 1);  // one NIC unless given
  EXPECT_EQ(c->rate_bps, 100000000u);
  EXPECT_DOUBLE_EQ(c->delay_us, 2000);
  EXPECT_DOUBLE_EQ(c->jitter_us, 500);
  EXPECT_DOUBLE_EQ(c->loss_percent, 0.5);
  EXPECT_DOUBLE_EQ(ParseEmulatedCluster("2:10kbit:loss=1")->loss_percent, 1);
  EXPECT_EQ(ParseEmulatedCluster("2x8:2.5gbit")->rate_bps, 2500000000u);
}

TEST(EmulatedCluster, TheTextFormRoundTrips) {
  for (const std::string spec :
       {"4x2:1gbit:delay=100us", "1x1:10mbit", "64x8:4tbit:delay=1000us:jitter=10us:loss=0.25%",
        "3x1:1500kbit:loss=2%", "2x3:1001bit"}) {
    StatusOr<EmulatedCluster> c = ParseEmulatedCluster(spec);
    ASSERT_TRUE(c.ok()) << spec << ": " << c.status().ToString();
    EXPECT_EQ(ToString(*c), spec);
    StatusOr<EmulatedCluster> again = ParseEmulatedCluster(ToString(*c));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->nodes, c->nodes);
    EXPECT_EQ(again->nics, c->nics);
    EXPECT_EQ(again->rate_bps, c->rate_bps);
    EXPECT_DOUBLE_EQ(again->delay_us, c->delay_us);
    EXPECT_DOUBLE_EQ(again->jitter_us, c->jitter_us);
    EXPECT_DOUBLE_EQ(again->loss_percent, c->loss_percent);
  }
}

TEST(EmulatedCluster, EveryMalformedFieldIsAnErrorNamingIt) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "expected NODES[xNICS]:RATE"},
      {"4", "expected NODES[xNICS]:RATE"},
      {"0:1gbit", "nodes '0' must be a whole number in 1..64"},
      {"65:1gbit", "nodes '65' must be a whole number in 1..64"},
      {"four:1gbit", "nodes 'four'"},
      {"4x0:1gbit", "nics '0' must be a whole number in 1..8"},
      {"4x:1gbit", "nics ''"},
      {"4x9:1gbit", "nics '9'"},
      {"4:1gbyte", "rate '1gbyte'"},
      {"4:fast", "rate 'fast'"},
      {"4:1bit", "rate '1bit' must be a rate from 1kbit to 4tbit"},
      {"4:5tbit", "rate '5tbit'"},
      {"4:1gbit:delay=100", "delay '100' must be a time"},
      {"4:1gbit:delay=-1us", "delay '-1us'"},
      {"4:1gbit:delay=11s", "delay '11s'"},
      {"4:1gbit:loss=101%", "loss '101%' must be a percentage from 0 to 100"},
      {"4:1gbit:loss=0.5x", "loss '0.5x'"},
      {"4:1gbit:jitter=10us", "jitter needs a delay at least as large"},
      {"4:1gbit:delay=5us:jitter=10us", "jitter needs a delay at least as large"},
      {"4:1gbit:burst=10", "unknown field 'burst' (delay, loss or jitter)"},
      {"4:1gbit:delay", "'delay' is not KEY=VALUE"},
      {"4:1gbit:delay=", "'delay=' is not KEY=VALUE"},
  };
  for (const auto& [spec, why] : bad) {
    StatusOr<EmulatedCluster> c = ParseEmulatedCluster(spec);
    ASSERT_FALSE(c.ok()) << spec;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << spec;
    EXPECT_NE(c.status().message().find(why), std::string::npos)
        << spec << ": " << c.status().ToString();
    EXPECT_NE(c.status().message().find("--emulate '" + spec + "'"), std::string::npos)
        << c.status().ToString();
  }
}

}  // namespace
}  // namespace loom
