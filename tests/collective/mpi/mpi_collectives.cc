// The collectives over the MPI transport, one rank per process (run under mpirun -np 2, 3, 4):
// every algorithm (ring, tree, multi_tree, star, native) x counts x dtypes x operators against an
// independent local reference, many calls in flight before one WaitAll; reduce, broadcast,
// allgather, reducescatter, barrier and send/recv; a mismatch and a timeout.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "collective/selector.h"
#include "collective/transport/mpi.h"
#include "collective/transport_registry.h"
#include "tests/collective/test_util.h"

namespace loom::collective {
namespace {

using testing::Compare;
using testing::Expected;
using testing::Input;

// tagged: the signature round sends signatures as MPI tags (the default) or inside the messages.
// shared_memory: ranks of one node meet in shared memory (the default, unless LOOM_MPI_SHM=0;
// ctest runs the binary both ways), or exchange their signatures over MPI.
std::unique_ptr<Communicator> MakeComm(int timeout_ms = 60000, bool tagged = true,
                                       bool shared_memory = true) {
  MpiCommunicatorOptions options;
  options.communicator.timeout = std::chrono::milliseconds(timeout_ms);
  options.communicator.tagged_signatures = tagged;
  options.shared_memory = shared_memory;
  auto comm = CreateMpiCommunicator(options);
  EXPECT_TRUE(comm.ok()) << comm.status().ToString();
  return std::move(comm).value();
}

// kAuto runs the small calls (up to 2 KiB) inside the signature exchange.
const Algorithm kAlgorithms[] = {Algorithm::kRing, Algorithm::kTree,   Algorithm::kMultiTree,
                                 Algorithm::kStar, Algorithm::kDirect, Algorithm::kNative,
                                 Algorithm::kAuto};
const DataType kDtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                            DataType::kInt64, DataType::kFloat16};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin,
                         ReduceOp::kAvg};
constexpr size_t kLarge = (size_t{1} << 20) + 3;

// One issued call whose result is checked after WaitAll.
struct Pending {
  std::string what;
  std::vector<unsigned char> in, out, want;
  DataType dtype;
  size_t count;
};

class MpiCollectives : public ::testing::TestWithParam<Algorithm> {};

TEST_P(MpiCollectives, AllReduceEveryDtypeOpAndCountInFlightAtOnce) {
  const Algorithm algorithm = GetParam();
  auto comm = MakeComm();
  const int rank = comm->rank(), n = comm->nranks();
  std::vector<std::unique_ptr<Pending>> calls;
  int salt = 0;
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, kLarge}) {
    for (DataType dtype : kDtypes) {
      for (ReduceOp op : kOps) {
        // The large count runs sum and max only: the operators' kernels are the same code at
        // every size, and the small counts cover them all.
        if (count == kLarge && op != ReduceOp::kSum && op != ReduceOp::kMax) continue;
        ++salt;
        auto p = std::make_unique<Pending>();
        p->what = StrCat(AlgorithmName(algorithm), " count=", count, " ", DataTypeName(dtype), " ",
                         ReduceOpName(op));
        p->dtype = dtype;
        p->count = count;
        p->in = Input(dtype, op, rank, count, salt);
        p->want = Expected(dtype, op, n, count, salt);
        const bool in_place = salt % 2 == 0;
        if (!in_place) p->out.assign(p->in.size(), 0xAB);
        void* out = in_place ? p->in.data() : p->out.data();
        comm->AllReduce(p->in.data(), out, count, dtype, op, CallOptions{algorithm});
        if (in_place) p->out.clear();
        calls.push_back(std::move(p));
      }
    }
  }
  Status s = comm->WaitAll();
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (const auto& p : calls) {
    const void* got = p->out.empty() ? p->in.data() : p->out.data();
    EXPECT_EQ(Compare(p->dtype, p->want, got, p->count), "") << p->what << " on rank " << rank;
  }
}

TEST_P(MpiCollectives, ReduceAndBroadcastFromEveryRoot) {
  const Algorithm algorithm = GetParam();
  // (native and auto run every collective; of the schedules, direct has no rooted ones)
  if (algorithm == Algorithm::kDirect) GTEST_SKIP() << "direct has no reduce or broadcast";
  auto comm = MakeComm();
  const int rank = comm->rank(), n = comm->nranks();
  std::vector<std::unique_ptr<Pending>> reduces, broadcasts;
  int salt = 100;
  for (int root = 0; root < n; ++root) {
    for (size_t count : {size_t{0}, size_t{7}, size_t{1023}, kLarge}) {
      for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64}) {
        // The large count (pipelined pieces) from one root and in fp32 only keeps the run short.
        if (count == kLarge && (root != n - 1 || dtype != DataType::kFloat32)) continue;
        ++salt;
        auto r = std::make_unique<Pending>();
        r->what = StrCat("Reduce root=", root, " count=", count, " ", DataTypeName(dtype));
        r->dtype = dtype;
        r->count = count;
        r->in = Input(dtype, ReduceOp::kSum, rank, count, salt);
        r->out.assign(r->in.size(), 0);
        r->want = rank == root ? Expected(dtype, ReduceOp::kSum, n, count, salt)
                               : std::vector<unsigned char>(r->in.size(), 0);  // untouched
        comm->Reduce(r->in.data(), r->out.data(), count, dtype, ReduceOp::kSum, root,
                     CallOptions{algorithm});
        reduces.push_back(std::move(r));

        auto b = std::make_unique<Pending>();
        b->what = StrCat("Broadcast root=", root, " count=", count, " ", DataTypeName(dtype));
        b->dtype = dtype;
        b->count = count;
        b->in = Input(dtype, ReduceOp::kSum, root, count, salt);
        b->want = b->in;
        b->out.assign(b->in.size(), 0);
        comm->Broadcast(rank == root ? b->in.data() : nullptr, b->out.data(), count, dtype, root,
                        CallOptions{algorithm});
        broadcasts.push_back(std::move(b));
      }
    }
  }
  Status s = comm->WaitAll();
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (const auto* list : {&reduces, &broadcasts}) {
    for (const auto& p : *list) {
      EXPECT_EQ(Compare(p->dtype, p->want, p->out.data(), p->count), "")
          << AlgorithmName(algorithm) << " " << p->what << " on rank " << rank;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, MpiCollectives, ::testing::ValuesIn(kAlgorithms),
                         [](const auto& info) { return std::string(AlgorithmName(info.param)); });

TEST(MpiCollectives, AllGatherAndReduceScatterInAndOutOfPlace) {
  auto comm = MakeComm();
  const int rank = comm->rank(), n = comm->nranks();
  for (Algorithm algorithm :
       {Algorithm::kRing, Algorithm::kNative, Algorithm::kMultiTree, Algorithm::kDirect}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, kLarge}) {
      for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt32}) {
        if (count == kLarge && dtype != DataType::kFloat32) continue;
        const size_t elem = DataTypeSize(dtype);
        const std::string what = StrCat(AlgorithmName(algorithm), " count=", count, " ",
                                        DataTypeName(dtype), " on rank ", rank);
        // ReduceScatter: block `rank` of the reduction of every rank's nranks * count elements.
        std::vector<unsigned char> rs_in = Input(dtype, ReduceOp::kSum, rank, n * count, 7);
        std::vector<unsigned char> rs_inplace = rs_in, rs_out(count * elem);
        const std::vector<unsigned char> rs_want =
            Expected(dtype, ReduceOp::kSum, n, count, 7, rank * count);
        Work rs = comm->ReduceScatter(rs_in.data(), rs_out.data(), count, dtype, ReduceOp::kSum,
                                      CallOptions{algorithm});
        Work rs2 = comm->ReduceScatter(rs_inplace.data(), rs_inplace.data() + rank * count * elem,
                                       count, dtype, ReduceOp::kSum, CallOptions{algorithm});
        // AllGather (ring and native only).
        std::vector<unsigned char> ag_in = Input(dtype, ReduceOp::kSum, rank, count, 9);
        std::vector<unsigned char> ag_out(n * count * elem), ag_inplace(n * count * elem);
        if (!ag_in.empty())
          std::memcpy(ag_inplace.data() + rank * count * elem, ag_in.data(), ag_in.size());
        std::vector<unsigned char> ag_want;
        for (int r = 0; r < n; ++r) {
          auto block = Input(dtype, ReduceOp::kSum, r, count, 9);
          ag_want.insert(ag_want.end(), block.begin(), block.end());
        }
        const bool gather = algorithm != Algorithm::kMultiTree;
        if (gather) {
          comm->AllGather(ag_in.data(), ag_out.data(), count, dtype, CallOptions{algorithm});
          comm->AllGather(ag_inplace.data() + rank * count * elem, ag_inplace.data(), count, dtype,
                          CallOptions{algorithm});
        }
        Status s = comm->WaitAll();
        ASSERT_TRUE(s.ok()) << what << ": " << s.ToString();
        EXPECT_EQ(Compare(dtype, rs_want, rs_out.data(), count), "") << "ReduceScatter " << what;
        EXPECT_EQ(Compare(dtype, rs_want, rs_inplace.data() + rank * count * elem, count), "")
            << "in-place ReduceScatter " << what;
        if (gather) {
          EXPECT_EQ(Compare(dtype, ag_want, ag_out.data(), n * count), "") << "AllGather " << what;
          EXPECT_EQ(Compare(dtype, ag_want, ag_inplace.data(), n * count), "")
              << "in-place AllGather " << what;
        }
      }
    }
  }
}

TEST(MpiCollectives, BarrierAndSendRecvAroundTheRing) {
  auto comm = MakeComm();
  const int rank = comm->rank(), n = comm->nranks();
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  for (size_t count : {size_t{0}, size_t{1}, size_t{1023}, kLarge}) {
    std::vector<int64_t> out(count), in(count, -1);
    for (size_t i = 0; i < count; ++i) out[i] = rank * 1000003 + static_cast<int64_t>(i);
    // Alternate the order so the ordered point-to-point calls cannot deadlock.
    for (int tag : {3, 1 << 30}) {
      if (rank % 2 == 0) {
        comm->Send(out.data(), count, DataType::kInt64, next, tag);
        comm->Recv(in.data(), count, DataType::kInt64, prev, tag);
      } else {
        comm->Recv(in.data(), count, DataType::kInt64, prev, tag);
        comm->Send(out.data(), count, DataType::kInt64, next, tag);
      }
      comm->Barrier();
      Status s = comm->WaitAll();
      ASSERT_TRUE(s.ok()) << s.ToString();
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(in[i], prev * 1000003 + static_cast<int64_t>(i)) << "element " << i;
      }
    }
  }
}

// The signature round with signatures as tags and with signatures inside the messages (the
// latter what transports without a tagged channel run): the same results and the same errors.
class MpiSignatures : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(TagsAndPackets, MpiSignatures, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "tags" : "packets"; });

TEST(MpiSignatureTags, OpenMpiOffersTheTaggedChannel) {
  auto transport = CreateMpiTransport();
  ASSERT_TRUE(transport.ok()) << transport.status().ToString();
  EXPECT_GE((*transport)->signature_tag_max(), (1u << 24) - 1);
}

TEST_P(MpiSignatures, CountMismatchNamesBothRanksAndKeepsTheCommunicatorUsable) {
  auto comm = MakeComm(60000, GetParam(), /*shared_memory=*/false);
  const int rank = comm->rank(), n = comm->nranks();
  std::vector<float> buf(16, 1.0f);
  const size_t count = rank == 1 ? 12 : 10;
  Status s = comm->AllReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum,
                             CallOptions{Algorithm::kRing})
                 .Wait();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("rank 0 called AllReduce(count=10, dtype=fp32, op=sum"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("rank 1 called AllReduce(count=12, dtype=fp32, op=sum"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(buf[0], 1.0f);
  Status next =
      comm->AllReduce(buf.data(), buf.data(), 4, DataType::kFloat32, ReduceOp::kSum).Wait();
  EXPECT_TRUE(next.ok()) << next.ToString();
  EXPECT_EQ(buf[3], static_cast<float>(n));
}

// A small auto call travels with its signature: a mismatch in it, or against a call that
// does not fit the exchange, is still named on every rank, and nothing is written.
TEST_P(MpiSignatures, MismatchOfCallsInsideTheSignatureExchange) {
  auto comm = MakeComm(60000, GetParam(), /*shared_memory=*/false);
  const int rank = comm->rank(), n = comm->nranks();
  for (size_t other : {size_t{12}, size_t{1000}}) {
    std::vector<float> buf(1000, 1.0f);
    const size_t count = rank == 1 ? other : 10;
    Status s =
        comm->AllReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum).Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("rank 0 called AllReduce(count=10, dtype=fp32, op=sum, "
                               "algorithm=auto (in the signature exchange))"),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find(StrCat("rank 1 called AllReduce(count=", other)), std::string::npos)
        << s.message();
    EXPECT_EQ(buf[0], 1.0f);
  }
  // Same count, another operator: the messages have the same length, only the signatures
  // (tags) differ.
  {
    std::vector<float> buf(64, 1.0f);
    const ReduceOp op = rank == 1 ? ReduceOp::kMax : ReduceOp::kSum;
    Status s = comm->AllReduce(buf.data(), buf.data(), 64, DataType::kFloat32, op).Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("rank 1 called AllReduce(count=64, dtype=fp32, op=max"),
              std::string::npos)
        << s.message();
    EXPECT_EQ(std::count(buf.begin(), buf.end(), 1.0f), 64) << "rank " << rank;
  }
  // The group stays in step: a broadcast and a reduce in the exchange.
  std::vector<double> b(3, rank == 2 % n ? 7.5 : 0.0);
  ASSERT_TRUE(comm->Broadcast(b.data(), b.data(), 3, DataType::kFloat64, 2 % n).Wait().ok());
  EXPECT_EQ(b[2], 7.5);
  int64_t one = rank + 1, sum = -1;
  ASSERT_TRUE(comm->Reduce(&one, &sum, 1, DataType::kInt64, ReduceOp::kSum, 0).Wait().ok());
  EXPECT_EQ(sum, rank == 0 ? static_cast<int64_t>(n) * (n + 1) / 2 : -1) << "rank " << rank;
}

// An auto allreduce whose blocks (count / n elements) fit the exchange travels split in it:
// block r of every rank's data goes to rank r with the signatures, rank r reduces it and sends
// it to every rank. From 128 KiB auto runs the direct algorithm: the same two rounds after the
// signature round, each block a message of its own. Exact for counts that do not divide evenly,
// in and out of place, with the average; a mismatch against either is named on every rank and
// nothing is written.
TEST_P(MpiSignatures, SplitExchangeAndDirectAllReduce) {
  auto comm = MakeComm(60000, GetParam(), /*shared_memory=*/false);
  const int rank = comm->rank(), n = comm->nranks();
  const DataType dtype = DataType::kFloat64;  // 256 elements fill one 2 KiB block
  const size_t full = 256 * static_cast<size_t>(n);
  const auto mode = [&](Collective kind, size_t count) {
    return SignatureExchangeMode(kind, count, dtype, n);
  };
  ASSERT_EQ(mode(Collective::kAllReduce, 256), InExchange::kWhole);
  ASSERT_EQ(mode(Collective::kAllReduce, 257), InExchange::kSplit);
  ASSERT_EQ(mode(Collective::kAllReduce, full), InExchange::kSplit);
  ASSERT_EQ(mode(Collective::kAllReduce, full + 1), InExchange::kNo);
  ASSERT_EQ(mode(Collective::kReduce, 257), InExchange::kNo);
  const Selector selector(comm->plan(), SelectorOptionsOf(comm->options()));
  const size_t k128 = size_t{128} << 10;
  EXPECT_EQ(selector.Choose(Collective::kAllReduce, k128), Algorithm::kDirect);
  EXPECT_EQ(selector.Choose(Collective::kAllReduce, size_t{16} << 20), Algorithm::kDirect);
  EXPECT_NE(selector.Choose(Collective::kAllReduce, k128 - 8), Algorithm::kDirect);
  EXPECT_NE(selector.Choose(Collective::kAllReduce, (size_t{16} << 20) + 8), Algorithm::kDirect);
  EXPECT_NE(selector.Choose(Collective::kReduce, k128), Algorithm::kDirect);
  int salt = 300;
  for (size_t count : {size_t{257}, full - 1, full, size_t{1} << 14, (size_t{1} << 15) + 3}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      for (bool in_place : {false, true}) {
        ++salt;
        std::vector<unsigned char> in = testing::Input(dtype, op, rank, count, salt);
        std::vector<unsigned char> out(in.size(), 0xAB);
        void* dst = in_place ? in.data() : out.data();
        Status s = comm->AllReduce(in.data(), dst, count, dtype, op).Wait();
        ASSERT_TRUE(s.ok()) << s.ToString();
        EXPECT_EQ(Compare(dtype, Expected(dtype, op, n, count, salt), dst, count), "")
            << "count=" << count << " " << ReduceOpName(op) << (in_place ? " in place" : "")
            << " on rank " << rank;
      }
    }
  }
  // Every rank holds the same bits (each element reduced by one rank), also where fp32 sums
  // depend on the order.
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f / static_cast<float>(1 + i + 7 * rank);
  ASSERT_TRUE(comm->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum)
                  .Wait()
                  .ok());
  std::vector<float> root = x;
  ASSERT_TRUE(comm->Broadcast(root.data(), root.data(), root.size(), DataType::kFloat32, 0,
                              CallOptions{Algorithm::kRing})
                  .Wait()
                  .ok());
  EXPECT_EQ(std::memcmp(root.data(), x.data(), x.size() * sizeof(float)), 0) << "rank " << rank;
  if (n < 2) return;
  // Mismatches: split against split, direct and a call outside the exchange; direct against
  // direct (blocks of other sizes) and split.
  struct Case {
    size_t mine, other;
    const char* how;
  };
  for (const Case& c : {Case{400, 300, "auto (split in the signature exchange)"},
                        Case{400, 1 << 15, "auto (split in the signature exchange)"},
                        Case{400, full + 1, "auto (split in the signature exchange)"},
                        Case{1 << 15, 40000, "direct"}, Case{1 << 15, 400, "direct"}}) {
    std::vector<double> buf(1 << 16, 1.0);
    const size_t count = rank == 1 ? c.other : c.mine;
    Status s = comm->AllReduce(buf.data(), buf.data(), count, dtype, ReduceOp::kSum).Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(StrCat("rank 0 called AllReduce(count=", c.mine,
                                      ", dtype=fp64, op=sum, algorithm=", c.how, ")")),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find(StrCat("rank 1 called AllReduce(count=", c.other)),
              std::string::npos)
        << s.message();
    EXPECT_EQ(std::count(buf.begin(), buf.end(), 1.0), static_cast<long>(buf.size()))
        << "rank " << rank << " wrote into its buffer";
  }
  // The group stays in step.
  double one = 1.0;
  ASSERT_TRUE(comm->AllReduce(&one, &one, 1, DataType::kFloat64, ReduceOp::kSum).Wait().ok());
  EXPECT_EQ(one, static_cast<double>(n));
}

// Calls above the inline bound queue for the worker; a Wait on one the worker has not started
// runs it, and the calls before it, on the waiting thread, in issue order: results exact
// whoever ran them, with a second thread waiting at the same time, and a communicator destroyed
// while a thread still waits on its last call.
TEST(MpiCollectives, WaitRunsQueuedCallsOnTheWaitingThread) {
  const size_t count = (size_t{256} << 10) / sizeof(double);  // 256 KiB: direct, not inline
  for (int round = 0; round < 3; ++round) {
    auto comm = MakeComm();
    const int rank = comm->rank(), n = comm->nranks();
    std::vector<std::vector<double>> bufs(6, std::vector<double>(count));
    std::vector<Work> works;
    for (size_t k = 0; k < bufs.size(); ++k) {
      for (size_t i = 0; i < count; i += 997) bufs[k][i] = static_cast<double>(rank + k + i);
      works.push_back(comm->AllReduce(bufs[k].data(), bufs[k].data(), count, DataType::kFloat64,
                                      ReduceOp::kSum));
    }
    Status other;
    std::thread waiter([&] { other = works[2].Wait(); });
    Status last = works.back().Wait();
    waiter.join();
    ASSERT_TRUE(last.ok()) << last.ToString();
    ASSERT_TRUE(other.ok()) << other.ToString();
    for (size_t k = 0; k < bufs.size(); ++k) {
      ASSERT_TRUE(works[k].IsCompleted()) << k;
      for (size_t i = 0; i < count; i += 997) {
        const double want = static_cast<double>(n) * static_cast<double>(k + i) + n * (n - 1) / 2.0;
        ASSERT_EQ(bufs[k][i], want) << "call " << k << " element " << i << " on rank " << rank;
      }
    }
    ASSERT_TRUE(comm->WaitAll().ok());
    // Destroyed with calls queued and a thread waiting on the last one.
    for (size_t k = 0; k < 3; ++k) {
      works[k] = comm->AllReduce(bufs[k].data(), bufs[k].data(), count, DataType::kFloat64,
                                 ReduceOp::kSum);
    }
    std::thread late([w = works[2], round] {
      if (round == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      EXPECT_TRUE(w.Wait().ok());
    });
    comm.reset();
    late.join();
    EXPECT_TRUE(works[0].IsCompleted() && works[1].IsCompleted() && works[2].IsCompleted());
  }
}

bool SharedMemoryOn() {
  const char* env = std::getenv("LOOM_MPI_SHM");
  return env == nullptr || std::strcmp(env, "0") != 0;
}

// Ranks of one node meet in shared memory: the transport says so, auto runs the native
// collectives at every size, and a mismatch is still named on every rank with nothing written,
// whether the calls would run from copies in the meeting or in blocks across the processes.
TEST(MpiSharedMemory, RanksOfOneNodeMeetInSharedMemory) {
  auto comm = MakeComm();
  const int rank = comm->rank(), n = comm->nranks();
  if (!SharedMemoryOn()) {
    EXPECT_STREQ(comm->transport().name(), "mpi");
    GTEST_SKIP() << "LOOM_MPI_SHM=0";
  }
  ASSERT_STREQ(comm->transport().name(), "mpi+shm");
  ASSERT_TRUE(comm->transport().meets_with_signatures());
  const Selector selector(comm->plan(), SelectorOptionsOf(comm->options()));
  for (size_t bytes : {size_t{4}, size_t{64} << 10, size_t{16} << 20})
    EXPECT_EQ(selector.Choose(Collective::kAllReduce, bytes), Algorithm::kNative) << bytes;
  for (size_t mine : {size_t{10}, size_t{100000}}) {
    std::vector<float> buf(200000, 1.0f);
    const size_t count = rank == 1 ? mine + 2 : mine;
    Status s =
        comm->AllReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum).Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(StrCat("rank 0 called AllReduce(count=", mine)), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find(StrCat("rank 1 called AllReduce(count=", mine + 2)),
              std::string::npos)
        << s.message();
    EXPECT_EQ(std::count(buf.begin(), buf.end(), 1.0f), static_cast<long>(buf.size()))
        << "rank " << rank << " wrote into its buffer";
  }
  // The group stays in step, and a schedule over MPI's point-to-point messages runs beside the
  // native calls.
  std::vector<double> big((size_t{1} << 20) + 5, rank + 1.0);
  ASSERT_TRUE(
      comm->AllReduce(big.data(), big.data(), big.size(), DataType::kFloat64, ReduceOp::kSum)
          .Wait()
          .ok());
  EXPECT_EQ(big.back(), n * (n + 1) / 2.0);
  ASSERT_TRUE(comm->AllReduce(big.data(), big.data(), 1000, DataType::kFloat64, ReduceOp::kSum,
                              CallOptions{Algorithm::kRing})
                  .Wait()
                  .ok());
  EXPECT_EQ(big[999], n * n * (n + 1) / 2.0);
}

// Small auto allreduce by recursive doubling (CommunicatorOptions::doubling_exchange, which
// ranks on several nodes get): exact for every dtype, operator and count up to 2 KiB, in and
// out of place; a mismatch is named on every rank with nothing written; the group goes on.
TEST(MpiDoubling, SmallAllReduceIsExactAndAMismatchIsNamed) {
  MpiCommunicatorOptions options;
  options.communicator.timeout = std::chrono::milliseconds(60000);
  options.communicator.doubling_exchange = true;
  options.shared_memory = false;
  auto made = CreateMpiCommunicator(options);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  auto comm = std::move(made).value();
  const int rank = comm->rank(), n = comm->nranks();
  if (n < 4) GTEST_SKIP() << "doubling runs from 4 ranks";
  ASSERT_EQ(SignatureExchangeMode(Collective::kAllReduce, 256, DataType::kFloat64, n, true),
            InExchange::kDoubling);
  int salt = 900;
  for (DataType dtype : kDtypes) {
    for (ReduceOp op : kOps) {
      for (size_t count : {size_t{1}, size_t{7}, 2048 / DataTypeSize(dtype)}) {
        for (bool in_place : {false, true}) {
          ++salt;
          std::vector<unsigned char> in = Input(dtype, op, rank, count, salt);
          std::vector<unsigned char> out(in.size(), 0xAB);
          void* dst = in_place ? in.data() : out.data();
          Status s = comm->AllReduce(in.data(), dst, count, dtype, op).Wait();
          ASSERT_TRUE(s.ok()) << s.ToString();
          const std::string diff = Compare(dtype, Expected(dtype, op, n, count, salt), dst, count);
          ASSERT_EQ(diff, "") << DataTypeName(dtype) << " " << ReduceOpName(op) << " " << count;
        }
      }
    }
  }
  std::vector<float> buf(64, 1.0f);
  const size_t count = rank == n - 1 ? 12 : 10;
  Status s =
      comm->AllReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum).Wait();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("rank 0 called AllReduce(count=10, dtype=fp32, op=sum, "
                             "algorithm=auto (recursive doubling with the signatures))"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find(StrCat("rank ", n - 1, " called AllReduce(count=12")),
            std::string::npos)
      << s.message();
  EXPECT_EQ(std::count(buf.begin(), buf.end(), 1.0f), 64) << "rank " << rank;
  double one = 1.0;
  ASSERT_TRUE(comm->AllReduce(&one, &one, 1, DataType::kFloat64, ReduceOp::kSum).Wait().ok());
  EXPECT_EQ(one, static_cast<double>(n));
}

TEST(MpiErrors, RankThatNeverCallsEndsInTimeout) {
  auto comm = MakeComm(/*timeout_ms=*/500);
  const int rank = comm->rank(), n = comm->nranks();
  std::vector<double> buf(1 << 16, 1.0);
  if (rank != n - 1) {
    // Direct first: its first sends leave beside the signature round, to a rank that never
    // receives them; the call still ends in the timeout and lets them go.
    for (Algorithm algorithm : {Algorithm::kDirect, Algorithm::kRing, Algorithm::kNative}) {
      Status s = comm->AllReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat64,
                                 ReduceOp::kSum, CallOptions{algorithm})
                     .Wait();
      // The first call times out; the others find the communicator unusable.
      EXPECT_TRUE(s.code() == StatusCode::kTimeout || s.code() == StatusCode::kFailedPrecondition)
          << s.ToString();
      if (algorithm == Algorithm::kDirect) {
        EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
        EXPECT_NE(s.message().find("no progress within 500 ms"), std::string::npos) << s.message();
        // Over shared memory the meeting names the rank and its process.
        EXPECT_NE(s.message().find(SharedMemoryOn() ? StrCat("rank ", n - 1, " (pid ")
                                                    : StrCat("rank ", n - 1)),
                  std::string::npos)
            << s.message();
      }
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace loom::collective
