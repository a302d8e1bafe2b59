// Every collective against an independent reference: algorithm x world size x count x dtype x
// operator, in place and out of place, with many calls in flight before one WaitAll.
#include <gtest/gtest.h>

#include <tuple>

#include "tests/collective/test_util.h"

namespace loom::collective {
namespace {

using testing::Compare;
using testing::Expected;
using testing::Input;
using testing::RunRanks;

const std::vector<DataType> kDtypes = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                       DataType::kInt32, DataType::kInt64};
const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin,
                                    ReduceOp::kAvg};
const std::vector<size_t> kSmallCounts = {0, 1, 7, 1023};

std::unique_ptr<InProcessWorld> MakeWorld(int n, size_t chunk_bytes, bool direct = true,
                                          std::optional<Topology> topology = std::nullopt) {
  WorldOptions options;
  options.communicator.pipeline_chunk_bytes = chunk_bytes;
  options.transport.direct_reduce = direct;
  options.topology = std::move(topology);
  auto world = InProcessWorld::Create(n, options);
  EXPECT_TRUE(world.ok()) << world.status().ToString();
  return std::move(world).value();
}

std::string Name(Algorithm a) { return AlgorithmName(a); }

// One allreduce per (count, dtype, op), alternating in place and out of place, all in flight.
void AllReduceEverything(InProcessWorld& world, Algorithm algorithm,
                         const std::vector<size_t>& counts, const std::vector<DataType>& dtypes,
                         const std::vector<ReduceOp>& ops) {
  const int n = world.size();
  RunRanks(world, [&](int rank, Communicator& comm) {
    struct Case {
      size_t count;
      DataType dtype;
      ReduceOp op;
      int salt;
      std::vector<unsigned char> in, out;
    };
    std::vector<Case> cases;
    int salt = 0;
    for (size_t count : counts) {
      for (DataType dtype : dtypes) {
        for (ReduceOp op : ops) {
          Case c{count, dtype, op, salt, Input(dtype, op, rank, count, salt), {}};
          c.out.resize(c.in.size());
          cases.push_back(std::move(c));
          ++salt;
        }
      }
    }
    for (Case& c : cases) {
      const bool in_place = c.salt % 2 == 1;
      void* out = in_place ? c.in.data() : c.out.data();
      comm.AllReduce(c.in.data(), out, c.count, c.dtype, c.op, CallOptions{algorithm});
    }
    ASSERT_TRUE(comm.WaitAll().ok());
    for (Case& c : cases) {
      const bool in_place = c.salt % 2 == 1;
      const void* got = in_place ? c.in.data() : c.out.data();
      EXPECT_EQ(Compare(c.dtype, Expected(c.dtype, c.op, n, c.count, c.salt), got, c.count), "")
          << "rank " << rank << " count " << c.count << " " << DataTypeName(c.dtype) << " "
          << ReduceOpName(c.op) << (in_place ? " in place" : "");
    }
  });
}

class AllReduceMatrix : public ::testing::TestWithParam<std::tuple<Algorithm, int, bool>> {};

TEST_P(AllReduceMatrix, SmallCountsEveryDtypeAndOp) {
  const auto [algorithm, n, direct] = GetParam();
  // Small pieces so that even 1023 elements stream in several pieces.
  auto world = MakeWorld(n, /*chunk_bytes=*/96, direct);
  AllReduceEverything(*world, algorithm, kSmallCounts, kDtypes, kOps);
}

class AllReduceLarge : public ::testing::TestWithParam<std::tuple<Algorithm, int>> {};

TEST_P(AllReduceLarge, TwoToTheTwentyPlusThree) {
  const auto [algorithm, n] = GetParam();
  auto world = MakeWorld(n, size_t{1} << 20);
  AllReduceEverything(*world, algorithm, {(size_t{1} << 20) + 3}, {DataType::kFloat32},
                      {ReduceOp::kSum});
  if (n == 4 || n == 5) {
    AllReduceEverything(*world, algorithm, {(size_t{1} << 20) + 3}, {DataType::kFloat16},
                        {ReduceOp::kAvg});
  }
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, AllReduceLarge,
    ::testing::Combine(::testing::Values(Algorithm::kRing, Algorithm::kTree, Algorithm::kMultiTree,
                                         Algorithm::kStar, Algorithm::kDirect, Algorithm::kNative),
                       ::testing::Values(1, 2, 3, 4, 5, 8)),
    [](const auto& info) {
      return Name(std::get<0>(info.param)) + "_n" + std::to_string(std::get<1>(info.param));
    });

TEST(AllReduce, LargeCountThroughStagedReductions) {
  // The transport's generic receive-then-reduce path (what transports without direct access use).
  auto world = MakeWorld(4, size_t{1} << 18, /*direct=*/false);
  for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kMultiTree, Algorithm::kStar,
                      Algorithm::kDirect}) {
    AllReduceEverything(*world, a, {(size_t{1} << 20) + 3}, {DataType::kFloat32}, {ReduceOp::kSum});
  }
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, AllReduceMatrix,
    ::testing::Combine(::testing::Values(Algorithm::kRing, Algorithm::kTree, Algorithm::kMultiTree,
                                         Algorithm::kStar, Algorithm::kDirect, Algorithm::kNative),
                       ::testing::Values(1, 2, 3, 4, 5, 8), ::testing::Bool()),
    [](const auto& info) {
      return Name(std::get<0>(info.param)) + "_n" + std::to_string(std::get<1>(info.param)) +
             (std::get<2>(info.param) ? "_direct" : "_staged");
    });

TEST(AllReduce, AutoPicksAWorkingAlgorithm) {
  auto world = MakeWorld(3, size_t{1} << 20);
  AllReduceEverything(*world, Algorithm::kAuto, {0, 1, 7, 1023, 100003}, {DataType::kFloat32},
                      {ReduceOp::kSum, ReduceOp::kMax});
}

TEST(AllReduce, TopologyTreesOnP3AndSparseMachines) {
  // p3.16xlarge: real topology trees (NVLink only) and a penalized tree per root.
  auto world = MakeWorld(8, 4096, true, Topology::Preset("p3.16xlarge").value());
  for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kMultiTree}) {
    AllReduceEverything(*world, a, {1, 1023, 65537}, {DataType::kFloat32, DataType::kInt64},
                        {ReduceOp::kSum, ReduceOp::kAvg});
  }
  // A 5-device ring of links admits no depth-3 tree: the plan falls back to chains.
  std::vector<std::vector<int>> w(5, std::vector<int>(5, 0));
  for (int i = 0; i < 5; ++i) w[i][(i + 1) % 5] = w[(i + 1) % 5][i] = 2;
  auto sparse = MakeWorld(5, 4096, true, Topology::FromWeights(w).value());
  for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kMultiTree}) {
    AllReduceEverything(*sparse, a, {1, 1023}, {DataType::kFloat32}, {ReduceOp::kSum});
  }
}

class RootedMatrix : public ::testing::TestWithParam<std::tuple<Algorithm, int>> {};

TEST_P(RootedMatrix, ReduceAndBroadcastFromEveryRoot) {
  const auto [algorithm, n] = GetParam();
  auto world = MakeWorld(n, 4096);
  const std::vector<size_t> counts = {0, 1, 7, 1023, 30001};
  const std::vector<DataType> dtypes = {DataType::kFloat32, DataType::kFloat16, DataType::kInt64};
  const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kAvg};
  RunRanks(*world, [&](int rank, Communicator& comm) {
    struct Case {
      bool reduce;
      int root;
      size_t count;
      DataType dtype;
      ReduceOp op;
      int salt;
      std::vector<unsigned char> in, out;
    };
    std::vector<Case> cases;
    int salt = 0;
    for (int root = 0; root < n; ++root) {
      for (size_t count : counts) {
        for (DataType dtype : dtypes) {
          for (ReduceOp op : ops) {
            for (bool reduce : {true, false}) {
              if (!reduce && op != ReduceOp::kSum) continue;
              Case c{reduce, root, count, dtype, op, salt, Input(dtype, op, rank, count, salt), {}};
              c.out = std::vector<unsigned char>(c.in.size(), 0xAB);
              cases.push_back(std::move(c));
              ++salt;
            }
          }
        }
      }
    }
    for (Case& c : cases) {
      const bool in_place = c.salt % 2 == 1;
      void* out = in_place ? c.in.data() : c.out.data();
      if (c.reduce) {
        comm.Reduce(c.in.data(), out, c.count, c.dtype, c.op, c.root, CallOptions{algorithm});
      } else {
        comm.Broadcast(c.in.data(), out, c.count, c.dtype, c.root, CallOptions{algorithm});
      }
    }
    ASSERT_TRUE(comm.WaitAll().ok());
    for (Case& c : cases) {
      const bool in_place = c.salt % 2 == 1;
      const void* got = in_place ? c.in.data() : c.out.data();
      const std::string what = StrCat(c.reduce ? "reduce" : "broadcast", " rank ", rank, " root ",
                                      c.root, " count ", c.count, " ", DataTypeName(c.dtype), " ",
                                      ReduceOpName(c.op), in_place ? " in place" : "");
      if (c.reduce) {
        if (rank == c.root) {
          EXPECT_EQ(Compare(c.dtype, Expected(c.dtype, c.op, n, c.count, c.salt), got, c.count), "")
              << what;
        } else {
          // Other ranks' buffers are left alone.
          EXPECT_EQ(
              Compare(c.dtype, Input(c.dtype, c.op, rank, c.count, c.salt), c.in.data(), c.count),
              "")
              << what;
        }
      } else {
        EXPECT_EQ(Compare(c.dtype, Input(c.dtype, c.op, c.root, c.count, c.salt), got, c.count), "")
            << what;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, RootedMatrix,
    ::testing::Combine(::testing::Values(Algorithm::kRing, Algorithm::kTree, Algorithm::kMultiTree,
                                         Algorithm::kStar, Algorithm::kNative, Algorithm::kAuto),
                       ::testing::Values(1, 2, 3, 4, 5, 8)),
    [](const auto& info) {
      return Name(std::get<0>(info.param)) + "_n" + std::to_string(std::get<1>(info.param));
    });

class GatherScatterMatrix : public ::testing::TestWithParam<std::tuple<Algorithm, int>> {};

TEST_P(GatherScatterMatrix, AllGatherAndReduceScatter) {
  const auto [algorithm, n] = GetParam();
  auto world = MakeWorld(n, 128);
  const std::vector<size_t> counts = {0, 1, 7, 1023};
  RunRanks(*world, [&](int rank, Communicator& comm) {
    struct Case {
      bool gather;
      size_t count;
      DataType dtype;
      ReduceOp op;
      int salt;
      std::vector<unsigned char> in, out;
    };
    std::vector<Case> cases;
    int salt = 0;
    for (size_t count : counts) {
      for (DataType dtype : kDtypes) {
        for (ReduceOp op : kOps) {
          for (bool gather : {true, false}) {
            if (gather && (op != ReduceOp::kSum || algorithm == Algorithm::kMultiTree)) continue;
            const size_t elem = DataTypeSize(dtype);
            Case c{gather, count, dtype, op, salt, {}, {}};
            if (gather) {
              // The full-size buffer with this rank's block filled (used in place on odd salts).
              c.out = std::vector<unsigned char>(n * count * elem, 0xCD);
              c.in = Input(dtype, op, rank, count, salt, rank * count);
              if (!c.in.empty())  // count 0: no block (and data() may be null)
                std::memcpy(c.out.data() + rank * count * elem, c.in.data(), c.in.size());
            } else {
              c.in = Input(dtype, op, rank, n * count, salt);
              c.out = std::vector<unsigned char>(count * elem, 0xCD);
            }
            cases.push_back(std::move(c));
            ++salt;
          }
        }
      }
    }
    for (Case& c : cases) {
      const bool in_place = c.salt % 2 == 1;
      const size_t elem = DataTypeSize(c.dtype);
      if (c.gather) {
        const void* send = in_place ? c.out.data() + rank * c.count * elem : c.in.data();
        comm.AllGather(send, c.out.data(), c.count, c.dtype, CallOptions{algorithm});
      } else {
        void* recv = in_place ? c.in.data() + rank * c.count * elem : c.out.data();
        comm.ReduceScatter(c.in.data(), recv, c.count, c.dtype, c.op, CallOptions{algorithm});
      }
    }
    ASSERT_TRUE(comm.WaitAll().ok());
    for (Case& c : cases) {
      const bool in_place = c.salt % 2 == 1;
      const size_t elem = DataTypeSize(c.dtype);
      const std::string what =
          StrCat(c.gather ? "allgather" : "reducescatter", " rank ", rank, " count ", c.count, " ",
                 DataTypeName(c.dtype), " ", ReduceOpName(c.op), in_place ? " in place" : "");
      if (c.gather) {
        // Element i of the gathered buffer is rank i / count's value at index i.
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(Compare(c.dtype, Input(c.dtype, c.op, r, c.count, c.salt, r * c.count),
                            c.out.data() + r * c.count * elem, c.count),
                    "")
              << what << " block " << r;
        }
      } else {
        const void* got = in_place ? c.in.data() + rank * c.count * elem : c.out.data();
        EXPECT_EQ(Compare(c.dtype, Expected(c.dtype, c.op, n, c.count, c.salt, rank * c.count), got,
                          c.count),
                  "")
            << what;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, GatherScatterMatrix,
    ::testing::Combine(::testing::Values(Algorithm::kRing, Algorithm::kMultiTree,
                                         Algorithm::kDirect, Algorithm::kNative, Algorithm::kAuto),
                       ::testing::Values(1, 2, 3, 4, 5, 8)),
    [](const auto& info) {
      return Name(std::get<0>(info.param)) + "_n" + std::to_string(std::get<1>(info.param));
    });

TEST(InFlight, FiftyMixedCallsBeforeOneWaitAll) {
  const int n = 4;
  auto world = MakeWorld(n, 512);
  const std::vector<Algorithm> algorithms = {Algorithm::kRing,      Algorithm::kTree,
                                             Algorithm::kMultiTree, Algorithm::kStar,
                                             Algorithm::kDirect,    Algorithm::kAuto};
  RunRanks(*world, [&](int rank, Communicator& comm) {
    std::vector<std::vector<unsigned char>> bufs;
    std::vector<Work> works;
    for (int i = 0; i < 50; ++i) {
      const size_t count = 1 + (i * 977) % 5000;
      bufs.push_back(Input(DataType::kFloat32, ReduceOp::kSum, rank, count, i));
      works.push_back(comm.AllReduce(bufs.back().data(), bufs.back().data(), count,
                                     DataType::kFloat32, ReduceOp::kSum,
                                     CallOptions{algorithms[i % algorithms.size()]}));
    }
    comm.Barrier();
    ASSERT_TRUE(comm.WaitAll().ok());
    for (int i = 0; i < 50; ++i) {
      EXPECT_TRUE(works[i].IsCompleted());
      const size_t count = 1 + (i * 977) % 5000;
      EXPECT_EQ(
          Compare(DataType::kFloat32, Expected(DataType::kFloat32, ReduceOp::kSum, n, count, i),
                  bufs[i].data(), count),
          "")
          << "call " << i << " rank " << rank;
    }
  });
}

TEST(InFlight, ThousandsOfCallsWaitedOneByOne) {
  // Exercises the communicator's bookkeeping of completed calls (no WaitAll at all).
  auto world = MakeWorld(2, 4096);
  RunRanks(*world, [&](int rank, Communicator& comm) {
    for (int i = 0; i < 1100; ++i) {
      int64_t x = rank + i;
      ASSERT_TRUE(
          comm.AllReduce(&x, &x, 1, DataType::kInt64, ReduceOp::kSum, CallOptions{Algorithm::kRing})
              .Wait()
              .ok());
      ASSERT_EQ(x, 2 * i + 1);
    }
  });
}

// Calls on one communicator run in issue order (like NCCL point-to-point outside a group), so a
// ring exchange alternates: even ranks send first, odd ranks receive first.
TEST(PointToPoint, SendRecvAroundARing) {
  const int n = 4;
  auto world = MakeWorld(n, 64);
  RunRanks(*world, [&](int rank, Communicator& comm) {
    const size_t count = 1000;
    auto mine = Input(DataType::kInt32, ReduceOp::kSum, rank, count, 3);
    std::vector<unsigned char> got(mine.size());
    Work send, recv;
    if (rank % 2 == 0) {
      send = comm.Send(mine.data(), count, DataType::kInt32, (rank + 1) % n, 7);
      recv = comm.Recv(got.data(), count, DataType::kInt32, (rank + n - 1) % n, 7);
    } else {
      recv = comm.Recv(got.data(), count, DataType::kInt32, (rank + n - 1) % n, 7);
      send = comm.Send(mine.data(), count, DataType::kInt32, (rank + 1) % n, 7);
    }
    ASSERT_TRUE(send.Wait().ok());
    ASSERT_TRUE(recv.Wait().ok());
    EXPECT_EQ(Compare(DataType::kInt32,
                      Input(DataType::kInt32, ReduceOp::kSum, (rank + n - 1) % n, count, 3),
                      got.data(), count),
              "");
  });
}

}  // namespace
}  // namespace loom::collective
