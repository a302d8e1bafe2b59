// The selector behind Algorithm::kAuto: estimates grow with size, the allreduce choice crosses
// from the tree to a bandwidth algorithm once and never back, the crossover option and a forced
// algorithm are obeyed, and the communicator runs what the selector chose.
#include "collective/selector.h"

#include <gtest/gtest.h>

#include <atomic>

#include "collective/transport_registry.h"
#include "tests/collective/test_util.h"

namespace loom::collective {
namespace {

std::shared_ptr<const CommPlan> Plan(const Topology& t) { return CommPlan::Create(t).value(); }

const auto& kKinds = kCollectives;

TEST(Selector, EstimatesGrowWithSizeForEveryAlgorithm) {
  for (const Topology& t : {Topology::Uniform(4), Topology::Preset("p3.16xlarge").value()}) {
    Selector selector(*Plan(t));
    for (Collective kind : kKinds) {
      std::vector<Estimate> previous = selector.Estimates(kind, 1);
      ASSERT_FALSE(previous.empty()) << CollectiveName(kind);
      for (size_t bytes = 4; bytes <= (size_t{256} << 20); bytes *= 4) {
        std::vector<Estimate> now = selector.Estimates(kind, bytes);
        ASSERT_EQ(now.size(), previous.size());
        for (size_t i = 0; i < now.size(); ++i) {
          EXPECT_GE(now[i].time_us, previous[i].time_us)
              << CollectiveName(kind) << " " << AlgorithmName(now[i].algorithm) << " at " << bytes
              << " bytes on " << t.name();
        }
        previous = now;
      }
    }
  }
}

// Once auto leaves the tree for a bandwidth algorithm it never returns to it at larger sizes.
void ExpectMonotoneCrossover(const Selector& selector, int nranks) {
  bool left_tree = false;
  for (size_t bytes = 1; bytes <= (size_t{1} << 30); bytes *= 2) {
    const Algorithm a = selector.Choose(Collective::kAllReduce, bytes);
    if (a != Algorithm::kTree) left_tree = true;
    if (left_tree) {
      EXPECT_NE(a, Algorithm::kTree) << bytes << " bytes, " << nranks << " ranks";
    }
  }
  EXPECT_TRUE(left_tree) << nranks << " ranks: large messages should not use the single tree";
}

TEST(Selector, AllReduceCrossoverIsMonotoneWithAndWithoutTheBound) {
  for (int n : {2, 3, 4, 8, 16}) {
    const auto plan = Plan(Topology::Uniform(n));
    ExpectMonotoneCrossover(Selector(*plan), n);
    SelectorOptions model_only;
    model_only.tree_max_bytes = -1;
    ExpectMonotoneCrossover(Selector(*plan, model_only), n);
    // Small messages take the latency-optimal tree; the cost model agrees at 4 bytes once the
    // tree has fewer steps than the ring (depth ceil(log2 n) < n - 1, i.e. n >= 4).
    if (n >= 4) {
      EXPECT_EQ(Selector(*plan, model_only).Choose(Collective::kAllReduce, 4), Algorithm::kTree);
    }
  }
}

TEST(Selector, CrossoverOptionMovesTheSwitchPoint) {
  const auto plan = Plan(Topology::Uniform(4));
  for (long long bound : {0LL, 1LL << 10, 1LL << 16, 1LL << 22}) {
    SelectorOptions options;
    options.tree_max_bytes = bound;
    Selector selector(*plan, options);
    if (bound > 0) {
      EXPECT_EQ(selector.Choose(Collective::kAllReduce, bound), Algorithm::kTree) << bound;
    }
    EXPECT_NE(selector.Choose(Collective::kAllReduce, bound + 1), Algorithm::kTree) << bound;
  }
}

TEST(Selector, ForcedAlgorithmIsRespectedWhereSupported) {
  const auto plan = Plan(Topology::Uniform(4));
  for (Algorithm forced :
       {Algorithm::kRing, Algorithm::kTree, Algorithm::kMultiTree, Algorithm::kStar}) {
    SelectorOptions options;
    options.force = forced;
    Selector selector(*plan, options);
    for (size_t bytes : {size_t{4}, size_t{1} << 20, size_t{1} << 28}) {
      EXPECT_EQ(selector.Choose(Collective::kAllReduce, bytes), forced);
      // AllGather only has the ring: a forced algorithm it lacks falls back to the model.
      EXPECT_EQ(selector.Choose(Collective::kAllGather, bytes), Algorithm::kRing);
    }
  }
}

TEST(Selector, ChoiceIsAlwaysSupportedAndTableListsIt) {
  const auto plan = Plan(Topology::Preset("dgx1-p100").value());
  Selector selector(*plan);
  for (Collective kind : kKinds) {
    for (size_t bytes = 1; bytes <= (size_t{1} << 28); bytes *= 8) {
      const Algorithm a = selector.Choose(kind, bytes, /*inflight=*/3);
      EXPECT_TRUE(AlgorithmSupports(a, kind)) << CollectiveName(kind) << " " << AlgorithmName(a);
    }
    const std::string table = selector.Table(kind, 4 << 10, 64 << 20);
    EXPECT_NE(table.find("ring"), std::string::npos) << table;
    EXPECT_NE(table.find("67108864"), std::string::npos) << table;
  }
}

// The table never contradicts itself: auto's column is the fastest estimate of its row, or the
// row names the rule that decided instead and a footnote says why.
TEST(Selector, TableNamesTheRuleWhereAutoIsNotTheFastestEstimate) {
  for (long long tree_max : {-1LL, 2LL << 20, 1LL << 30}) {
    for (const char* preset : {"p3.16xlarge", "dgx1-p100"}) {
      const auto plan = Plan(Topology::Preset(preset).value());
      SelectorOptions o;
      o.use_default_cost_model = false;  // the formulas: no simulator in this library
      o.tree_max_bytes = tree_max;
      Selector selector(*plan, o);
      const std::string table = selector.Table(Collective::kAllReduce, 4 << 10, 64 << 20);
      int overridden = 0;
      for (size_t bytes = 4 << 10; bytes <= (64u << 20); bytes *= 4) {
        const auto estimates = selector.Estimates(Collective::kAllReduce, bytes);
        const Estimate* fastest = &estimates[0];
        for (const Estimate& e : estimates)
          if (e.time_us < fastest->time_us) fastest = &e;
        const Algorithm chosen = selector.Choose(Collective::kAllReduce, bytes);
        const std::string row = table.substr(table.find(StrCat(bytes, " ")));
        const std::string line = row.substr(0, row.find('\n'));
        if (chosen == fastest->algorithm) {
          EXPECT_EQ(line.find("fastest estimate"), std::string::npos) << line;
          continue;
        }
        ++overridden;
        EXPECT_GE(tree_max, 0) << "without a crossover auto follows the estimates: " << line;
        EXPECT_NE(line.find(StrCat("fastest estimate ", AlgorithmName(fastest->algorithm))),
                  std::string::npos)
            << line;
        const std::string rule =
            static_cast<long long>(bytes) <= tree_max ? "crossover" : "above crossover";
        EXPECT_NE(line.find("(" + rule + ";"), std::string::npos) << line;
        EXPECT_NE(table.find("\n# " + rule + ": "), std::string::npos) << table;
      }
      if (overridden == 0) EXPECT_EQ(table.find("\n# "), std::string::npos) << table;
      // Forcing the tree up to 1 GiB contradicts the model's bandwidth algorithms at 64 MiB.
      if (tree_max == (1LL << 30)) EXPECT_GT(overridden, 0) << table;
    }
  }
}

TEST(Selector, InflightLowersThePerCallEstimate) {
  const auto plan = Plan(Topology::Uniform(4));
  Selector selector(*plan);
  const auto one = selector.Estimates(Collective::kAllReduce, 1024, 1);
  const auto many = selector.Estimates(Collective::kAllReduce, 1024, 16);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_LT(many[i].time_us, one[i].time_us);
}

// The measured crossovers: ranks of one process (one shared memory) take the tree at every
// size; communicators between processes keep the 2 MiB crossover, above which the cost model
// picks a bandwidth algorithm.
TEST(Selector, MeasuredCrossoverDependsOnTheTransport) {
  EXPECT_EQ(WorldOptions().communicator.auto_tree_max_bytes, kInProcessAutoTreeMaxBytes);
  EXPECT_EQ(CommunicatorOptions().auto_tree_max_bytes, kLinkAutoTreeMaxBytes);
  const auto plan = Plan(Topology::Uniform(4));
  SelectorOptions in_process, link;
  in_process.tree_max_bytes = kInProcessAutoTreeMaxBytes;
  link.tree_max_bytes = kLinkAutoTreeMaxBytes;
  for (size_t bytes : {size_t{4}, size_t{1} << 20, size_t{64} << 20, size_t{1} << 30}) {
    EXPECT_EQ(Selector(*plan, in_process).Choose(Collective::kAllReduce, bytes), Algorithm::kTree)
        << bytes;
  }
  EXPECT_EQ(Selector(*plan, link).Choose(Collective::kAllReduce, 1 << 20), Algorithm::kTree);
  EXPECT_NE(Selector(*plan, link).Choose(Collective::kAllReduce, 64 << 20), Algorithm::kTree);
  auto world = InProcessWorld::Create(4).value();
  EXPECT_EQ(world->comm(0).options().auto_tree_max_bytes, kInProcessAutoTreeMaxBytes);
}

// With a rank's sends and receives overlapping (MPI), a tree rank's time is the larger of the
// two, so the multi-tree's bandwidth matches the ring's with fewer steps: above MPI's crossover
// auto takes it; without the overlap the ring stays the choice for large messages.
TEST(Selector, OverlappedTransfersFavourTheMultiTreeAboveTheCrossover) {
  const auto plan = Plan(Topology::Uniform(4));
  SelectorOptions o;
  o.tree_max_bytes = kMpiAutoTreeMaxBytes;
  o.chunk_bytes = 256 << 10;
  EXPECT_EQ(Selector(*plan, o).Choose(Collective::kAllReduce, 64 << 20), Algorithm::kRing);
  o.overlapped_transfers = true;
  const Selector mpi(*plan, o);
  EXPECT_EQ(mpi.Choose(Collective::kAllReduce, 256 << 10), Algorithm::kTree);
  for (size_t bytes : {size_t{1} << 20, size_t{4} << 20, size_t{64} << 20})
    EXPECT_EQ(mpi.Choose(Collective::kAllReduce, bytes), Algorithm::kMultiTree) << bytes;
}

// In-process worlds run the transport's native collectives (one pass over shared memory) at
// every size; a native crossover sends smaller calls to the schedules, for every collective,
// and nothing goes native where the transport has no native collective.
TEST(Selector, NativeFromItsCrossoverWhereTheTransportHasIt) {
  EXPECT_EQ(WorldOptions().communicator.auto_native_min_bytes, kInProcessAutoNativeMinBytes);
  EXPECT_LT(CommunicatorOptions().auto_native_min_bytes, 0);
  const auto plan = Plan(Topology::Uniform(4));
  SelectorOptions o;
  o.tree_max_bytes = kInProcessAutoTreeMaxBytes;
  o.native_min_bytes = kInProcessAutoNativeMinBytes;
  const Selector in_process(*plan, o);
  for (Collective kind : kKinds) {
    EXPECT_EQ(in_process.Choose(kind, 4), Algorithm::kNative) << CollectiveName(kind);
    EXPECT_EQ(in_process.Choose(kind, size_t{64} << 20), Algorithm::kNative);
    EXPECT_NE(in_process.Choose(kind, size_t{64} << 20, 1, /*native_available=*/false),
              Algorithm::kNative);
  }
  o.native_min_bytes = 256 << 10;
  const Selector crossover(*plan, o);
  const size_t at = 256 << 10;
  for (Collective kind : kKinds) {
    EXPECT_NE(crossover.Choose(kind, at - 1), Algorithm::kNative) << CollectiveName(kind);
    EXPECT_EQ(crossover.Choose(kind, at), Algorithm::kNative) << CollectiveName(kind);
  }
  EXPECT_EQ(crossover.Choose(Collective::kAllReduce, 4096), Algorithm::kTree);
  // A forced algorithm still wins.
  o.force = Algorithm::kRing;
  EXPECT_EQ(Selector(*plan, o).Choose(Collective::kAllReduce, size_t{64} << 20), Algorithm::kRing);
}

// Over MPI, auto runs Open MPI's own collective in a window of sizes where it led the
// schedules, the tree below it and the cost model's choice above.
TEST(Selector, MpiRunsNativeInItsWindow) {
  const CommunicatorOptions mpi_options = TransportDefaults(GetTransport(TransportId::kMpi));
  EXPECT_EQ(mpi_options.auto_native_min_bytes, kMpiAutoNativeMinBytes);
  EXPECT_EQ(mpi_options.auto_native_max_bytes, kMpiAutoNativeMaxBytes);
  const auto plan = Plan(Topology::Uniform(4));
  const Selector mpi(*plan, SelectorOptionsOf(mpi_options));
  const size_t lo = kMpiAutoNativeMinBytes, hi = kMpiAutoNativeMaxBytes;
  // Below the window the star (4 ranks: its root receives from 3), the tree in larger groups.
  EXPECT_EQ(mpi.Choose(Collective::kAllReduce, lo - 1), Algorithm::kStar);
  const Selector mpi8(*Plan(Topology::Uniform(8)), SelectorOptionsOf(mpi_options));
  EXPECT_EQ(mpi8.Choose(Collective::kAllReduce, lo - 1), Algorithm::kTree);
  // Allreduce runs the direct algorithm from 128 KiB to 16 MiB (ahead of the native call, and
  // whether or not the transport has one); other collectives run native in the window.
  const size_t dlo = kMpiAutoDirectMinBytes, dhi = kMpiAutoDirectMaxBytes;
  for (size_t bytes : {dlo, hi, dhi})
    EXPECT_EQ(mpi.Choose(Collective::kAllReduce, bytes), Algorithm::kDirect) << bytes;
  EXPECT_EQ(mpi.Choose(Collective::kAllReduce, dlo, 1, /*native_available=*/false),
            Algorithm::kDirect);
  EXPECT_EQ(mpi.Choose(Collective::kAllReduce, dhi + 1), Algorithm::kMultiTree);
  for (size_t bytes : {lo, size_t{256} << 10, hi}) {
    EXPECT_EQ(mpi.Choose(Collective::kReduce, bytes), Algorithm::kNative) << bytes;
    EXPECT_EQ(mpi.Choose(Collective::kBroadcast, bytes), Algorithm::kNative) << bytes;
  }
  EXPECT_NE(mpi.Choose(Collective::kReduce, hi + 1), Algorithm::kNative);
  // Forced, direct runs where it exists.
  SelectorOptions forced = SelectorOptionsOf(mpi_options);
  forced.force = Algorithm::kDirect;
  EXPECT_EQ(Selector(*plan, forced).Choose(Collective::kAllGather, 4096), Algorithm::kDirect);
  EXPECT_NE(mpi.Choose(Collective::kReduce, lo - 1), Algorithm::kNative);
}

TEST(Selector, CommunicatorAutoRunsCorrectlyAcrossTheCrossover) {
  WorldOptions options;
  options.communicator.auto_tree_max_bytes = 1 << 10;
  options.communicator.auto_native_min_bytes = 64 << 10;  // native from 16384 floats
  auto world = InProcessWorld::Create(4, options).value();
  testing::RunRanks(*world, [&](int rank, Communicator& comm) {
    for (size_t count :
         {size_t{3}, size_t{256}, size_t{257}, size_t{16383}, size_t{16384}, size_t{100000}}) {
      auto buf = testing::Input(DataType::kFloat32, ReduceOp::kSum, rank, count, 1);
      Status s =
          comm.AllReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum).Wait();
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(testing::Compare(DataType::kFloat32,
                                 testing::Expected(DataType::kFloat32, ReduceOp::kSum, 4, count, 1),
                                 buf.data(), count),
                "");
    }
  });
}

}  // namespace
}  // namespace loom::collective

namespace loom::collective {
namespace {

// A model that makes one algorithm the cheapest at every size.
class FavourModel : public CostModel {
 public:
  explicit FavourModel(Algorithm favourite) : favourite_(favourite) {}
  double TimeUs(Collective, Algorithm a, size_t bytes) const override {
    ++calls;
    if (bytes & (bytes - 1)) return -2;  // the selector asks for power-of-two buckets only
    return a == favourite_ ? 1.0 : 100.0;
  }
  mutable std::atomic<int> calls{0};

 private:
  Algorithm favourite_;
};

TEST(SelectorCostModel, ItsEstimatesReplaceTheFormulasAndAreCachedPerBucket) {
  StatusOr<std::shared_ptr<const CommPlan>> plan = CommPlan::Create(Topology::Uniform(4));
  ASSERT_TRUE(plan.ok());
  auto model = std::make_shared<FavourModel>(Algorithm::kStar);
  SelectorOptions options;
  options.tree_max_bytes = -1;  // the model alone decides
  options.cost_model = model;
  const Selector selector(**plan, options);
  for (size_t bytes : {size_t{100}, size_t{4096}, size_t{3} << 20}) {
    EXPECT_EQ(selector.Choose(Collective::kAllReduce, bytes, 1, false), Algorithm::kStar) << bytes;
  }
  const int after_first = model->calls;
  EXPECT_EQ(selector.Choose(Collective::kAllReduce, 4000, 1, false), Algorithm::kStar);  // 4 KiB
  EXPECT_EQ(model->calls, after_first);  // same bucket: cached
  // The crossover still applies in front of the model, as native does.
  SelectorOptions crossover = options;
  crossover.tree_max_bytes = 1 << 20;
  EXPECT_EQ(Selector(**plan, crossover).Choose(Collective::kAllReduce, 4096, 1, false),
            Algorithm::kTree);
  // Where the model cannot say (negative), the formulas answer, and they know tree has no
  // allgather.
  class Unsure : public CostModel {
   public:
    double TimeUs(Collective, Algorithm, size_t) const override { return -1; }
  };
  SelectorOptions u;
  u.cost_model = std::make_shared<Unsure>();
  const std::vector<Estimate> e = Selector(**plan, u).Estimates(Collective::kAllGather, 4096);
  const std::vector<Estimate> f = Selector(**plan).Estimates(Collective::kAllGather, 4096);
  ASSERT_EQ(e.size(), f.size());
  ASSERT_FALSE(e.empty());
  for (size_t i = 0; i < e.size(); ++i) {
    EXPECT_EQ(e[i].algorithm, f[i].algorithm);
    EXPECT_DOUBLE_EQ(e[i].time_us, f[i].time_us);
    EXPECT_NE(e[i].algorithm, Algorithm::kTree);
  }
}

}  // namespace
}  // namespace loom::collective
