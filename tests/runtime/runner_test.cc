// The runner: the one batch split rule, rank feeds, the first fetch over the global batch, the
// training loop's minibatches and errors; one place and ranks as threads train alike.
#include "runtime/runner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "runtime/train.h"
#include "tests/transpiler/test_nets.h"
#include "transpiler/data_parallel.h"

namespace loom::runtime {
namespace {

using transpiler::Mlp;
using transpiler::Net;

Tensor Rows(int64_t rows, int64_t cols, float start = 0) {
  Tensor t(proto::FP32, DDim({rows, cols}));
  float* p = t.mutable_data<float>(Place::CPU());
  for (int64_t i = 0; i < rows * cols; ++i) p[i] = start + static_cast<float>(i);
  return t;
}

TEST(BatchShares, FirstRanksTakeTheRemainder) {
  EXPECT_EQ(BatchShares(10, 3), (std::vector<int64_t>{4, 3, 3}));
  EXPECT_EQ(BatchShares(2, 4), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(BatchShares(0, 2), (std::vector<int64_t>{0, 0}));
}

TEST(RankFeed, SlicesEveryFeedAlikeAndRejectsBadFeeds) {
  FeedMap global = {{"x", Rows(5, 2)}, {"y", Rows(5, 1, 100)}};
  auto r1 = RankFeed(global, 1, 2);
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1.value().at("x").dims()[0], 2);
  EXPECT_FLOAT_EQ(r1.value().at("x").data<float>()[0], 6.0f);  // rows 3, 4
  EXPECT_FLOAT_EQ(r1.value().at("y").data<float>()[0], 103.0f);
  global["y"] = Rows(4, 1);
  EXPECT_NE(RankFeed(global, 0, 2).status().message().find("different numbers of samples"),
            std::string::npos);
  Tensor scalar(proto::FP32, DDim({}));
  scalar.mutable_data<float>(Place::CPU());
  EXPECT_NE(RankFeed({{"s", scalar}}, 0, 2).status().message().find("is a scalar"),
            std::string::npos);
}

TEST(RankFeed, SplitsLoDFeedsByWholeSequences) {
  // 3 sequences of 2, 3 and 1 rows, with one label row per sequence: rank 0 takes sequences
  // 0 and 1 (5 rows), rank 1 sequence 2 (1 row), each with its LoD rebased to 0.
  Tensor words = Rows(6, 1);
  words.set_lod({{0, 2, 5, 6}});
  FeedMap global = {{"words", words}, {"label", Rows(3, 1, 100)}};
  auto r0 = RankFeed(global, 0, 2);
  auto r1 = RankFeed(global, 1, 2);
  ASSERT_TRUE(r0.ok() && r1.ok()) << r0.status().ToString() << r1.status().ToString();
  EXPECT_EQ(r0.value().at("words").dims()[0], 5);
  EXPECT_EQ(r0.value().at("words").lod(), (LoD{{0, 2, 5}}));
  EXPECT_EQ(r0.value().at("label").dims()[0], 2);
  EXPECT_EQ(r1.value().at("words").lod(), (LoD{{0, 1}}));
  EXPECT_FLOAT_EQ(r1.value().at("words").data<float>()[0], 5.0f);  // row 5
  EXPECT_FLOAT_EQ(r1.value().at("label").data<float>()[0], 102.0f);
  // Two levels: sequences of sentences split by the top level.
  Tensor doc = Rows(6, 1);
  doc.set_lod({{0, 1, 3}, {0, 2, 5, 6}});
  auto d1 = RankFeed({{"doc", doc}}, 1, 2);
  ASSERT_TRUE(d1.ok()) << d1.status().ToString();
  EXPECT_EQ(d1.value().at("doc").lod(), (LoD{{0, 2}, {0, 3, 4}}));
  EXPECT_EQ(d1.value().at("doc").dims()[0], 4);
  global["label"] = Rows(6, 1);  // one label per row: no longer one per sequence
  EXPECT_NE(RankFeed(global, 0, 2).status().message().find("different numbers of samples"),
            std::string::npos);
}

TEST(Minibatch, WrapsAroundPastTheEnd) {
  Tensor data = Rows(5, 1);
  Tensor b = Minibatch(data, 3, 4);  // rows 3, 4, 0, 1
  ASSERT_EQ(b.dims()[0], 4);
  EXPECT_EQ(std::vector<float>(b.data<float>(), b.data<float>() + 4),
            (std::vector<float>{3, 4, 0, 1}));
}

std::vector<RankProgram> Ranks(const Net& n, int nranks, const std::string& group) {
  std::vector<RankProgram> ranks(nranks);
  if (nranks == 1) {
    ranks[0].startup = n.startup;
    ranks[0].main = n.main;
    return ranks;
  }
  transpiler::DataParallelConfig c;
  c.nranks = nranks;
  c.group = group;
  auto r = transpiler::TranspileDataParallel(n.startup, n.main, c).value();
  for (int k = 0; k < nranks; ++k) {
    ranks[k].startup = r.startup[k];
    ranks[k].main = r.main[k];
  }
  return ranks;
}

FeedMap Batch(int64_t rows) {
  Tensor x = Rows(rows, 6), label(proto::INT64, DDim({rows, 1}));
  float* xp = x.mutable_data<float>(Place::CPU());
  for (int64_t i = 0; i < rows * 6; ++i) xp[i] = std::sin(0.37f * static_cast<float>(i));
  int64_t* lp = label.mutable_data<int64_t>(Place::CPU());
  for (int64_t i = 0; i < rows; ++i) lp[i] = i % 3;
  return {{"x", x}, {"label", label}};
}

TEST(Runner, TheLossOverTheGlobalBatchEqualsOnePlaces) {
  Net n = Mlp();
  // The loss variable is what the MLP's mean op writes.
  std::string loss_var;
  for (int i = 0; i < n.main.GlobalBlock()->OpSize(); ++i)
    if (n.main.GlobalBlock()->Op(i).Type() == "mean")
      loss_var = n.main.GlobalBlock()->Op(i).Output("Out")[0];
  ASSERT_FALSE(loss_var.empty());
  auto one = Runner::Create(Ranks(n, 1, ""), 0, 1).value();
  auto three = Runner::Create(Ranks(n, 3, "runner-test-loss"), 0, 3).value();
  EXPECT_EQ(three->local_ranks(), 3);
  EXPECT_FALSE(three->multi_process());
  ASSERT_TRUE(one->Startup().ok());
  ASSERT_TRUE(three->Startup().ok());
  for (int step = 0; step < 3; ++step) {
    FeedMap feed = Batch(7);  // shares 3, 2, 2
    ASSERT_TRUE(one->Step(feed, {loss_var}).ok());
    Status st = three->Step(feed, {loss_var});
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(three->fetched(0).size(), 1u);
    double a = one->GlobalFirstValue().value(), b = three->GlobalFirstValue().value();
    EXPECT_NEAR(a, b, 1e-5 * std::max(1.0, std::abs(a))) << "step " << step;
  }
}

TEST(Runner, ClearErrors) {
  Net n = Mlp();
  EXPECT_FALSE(Runner::Create({}, 0, 1).ok());
  EXPECT_NE(Runner::Create(Ranks(n, 1, ""), 1, 1).status().message().find("does not fit"),
            std::string::npos);
  auto two = Runner::Create(Ranks(n, 2, "runner-test-errors"), 0, 2).value();
  ASSERT_TRUE(two->Startup().ok());
  EXPECT_NE(two->Step(Batch(4), {}, FeedSplit::kLocal).message().find("local ranks"),
            std::string::npos);
  // A bad feed fails the step with the rank named; the group is aborted, and the runner says so.
  FeedMap bad = Batch(4);
  bad["x"] = Rows(4, 5);
  Status st = two->Step(bad, {});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank 0"), std::string::npos) << st.message();
  Status after = two->Step(Batch(4), {});
  EXPECT_EQ(after.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(after.message().find("create a new runner"), std::string::npos) << after.message();
}

// A rank that fails aborts the group: the step returns that rank's own error (not its peers'
// Aborted errors, nor a Timeout after the minute-long collective timeout).
TEST(Runner, AFailingRankStopsItsPeersAndReportsTheFirstCause) {
  Net n = Mlp();
  transpiler::DataParallelConfig c;
  c.nranks = 3;
  c.group = "runner-test-abort";
  c.timeout_ms = 60000;
  auto r = transpiler::TranspileDataParallel(n.startup, n.main, c).value();
  std::vector<RankProgram> ranks(3);
  for (int k = 0; k < 3; ++k) {
    ranks[k].startup = r.startup[k];
    ranks[k].main = r.main[k];
  }
  auto runner = Runner::Create(std::move(ranks), 0, 3).value();
  ASSERT_TRUE(runner->Startup().ok());
  FeedMap bad = Batch(6);
  bad["label"].mutable_data<int64_t>(Place::CPU())[5] = 7;  // in rank 2's share
  Status st = runner->Step(bad, {});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("rank 2: "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("out of range"), std::string::npos) << st.message();
}

// Ranks as threads whose learning rates differ (rank 2's startup fills 0.9, the others 0.1):
// startup fails with the variable and the ranks named, before any step; equal rates start.
TEST(Runner, RanksWhosePersistableStateDiffersFailAtStartup) {
  Net n = Mlp();
  for (const bool differ : {true, false}) {
    transpiler::DataParallelConfig c;
    c.nranks = 3;
    c.group = differ ? "runner-test-lr-differs" : "runner-test-lr-same";
    auto r = transpiler::TranspileDataParallel(n.startup, n.main, c).value();
    std::vector<RankProgram> ranks(3);
    int changed = 0;
    for (int k = 0; k < 3; ++k) {
      ranks[k].startup = r.startup[k];
      ranks[k].main = r.main[k];
      BlockDesc* sb = ranks[k].startup.GlobalBlock();
      for (int i = 0; i < sb->OpSize() && differ && k == 2; ++i) {
        OpDesc op = sb->Op(i);
        if (op.Type() != "fill_constant" || op.Output("Out")[0] != "learning_rate_0") continue;
        op.SetAttr("value", 0.9f);
        ++changed;
      }
    }
    ASSERT_EQ(changed, differ ? 1 : 0);
    auto runner = Runner::Create(std::move(ranks), 0, 3).value();
    Status st = runner->Startup();
    if (!differ) {
      EXPECT_TRUE(st.ok()) << st.ToString();
      continue;
    }
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("rank 2 holds another value of persistable variable "
                                "'learning_rate_0' than rank 0 (rank 0: [0.1], rank 2: [0.9])"),
              std::string::npos)
        << st.message();
  }
}

TEST(RankFeed, VariablesWithoutABatchDimGoWholeToEveryRank) {
  FeedMap global = {{"x", Rows(5, 2)}, {"flag", Rows(1, 1, 42)}};
  auto r1 = RankFeed(global, 1, 2, {"flag"});
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_EQ(r1.value().at("x").dims()[0], 2);
  EXPECT_EQ(r1.value().at("flag").dims()[0], 1);
  EXPECT_FLOAT_EQ(r1.value().at("flag").data<float>()[0], 42.0f);
}

TEST(Train, RunsTheLoopAndSavesParameters) {
  Net n = Mlp();
  auto runner = Runner::Create(Ranks(n, 2, "runner-test-train"), 0, 2).value();
  ASSERT_TRUE(runner->Startup().ok());
  FeedMap batch = Batch(9);
  std::vector<FeedData> feeds = {{"x", batch["x"]}, {"label", batch["label"]}};
  TrainOptions o;
  o.iters = 4;
  o.batch = 5;
  o.print_every = 2;
  o.save_params = ::testing::TempDir() + "/loom_runner_test_params";
  char* text = nullptr;
  size_t size = 0;
  o.out = open_memstream(&text, &size);
  Status st = Train(*runner, feeds, o);
  std::fclose(o.out);
  std::string printed(text, size);
  std::free(text);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_NE(printed.find("iter 2/4"), std::string::npos) << printed;
  EXPECT_NE(printed.find("done: 4 iterations"), std::string::npos) << printed;
  EXPECT_NE(printed.find("saved parameters (rank 0)"), std::string::npos) << printed;
  o.batch = 10;  // more than the 9 rows
  EXPECT_NE(Train(*runner, feeds, o).message().find("between 1 and the 9 rows"), std::string::npos);
}

}  // namespace
}  // namespace loom::runtime
