// Errors instead of hangs: mismatched calls, ranks that never call, unsupported algorithms and
// bad arguments.
#include <gtest/gtest.h>

#include "collective/transport/inprocess.h"
#include "tests/collective/test_util.h"

namespace loom::collective {
namespace {

using testing::RunRanks;

std::unique_ptr<InProcessWorld> MakeWorld(int n, int timeout_ms = 200) {
  WorldOptions options;
  options.communicator.timeout = std::chrono::milliseconds(timeout_ms);
  return InProcessWorld::Create(n, options).value();
}

TEST(Mismatch, CountDifferenceNamesBothRanksAndKeepsTheGroupUsable) {
  auto world = MakeWorld(3, 30000);
  RunRanks(*world, [&](int rank, Communicator& comm) {
    std::vector<float> buf(16, 1.0f);
    const size_t count = rank == 2 ? 12 : 10;
    Status s = comm.AllReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum,
                              CallOptions{Algorithm::kRing})
                   .Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("rank 0 called AllReduce(count=10, dtype=fp32, op=sum, "
                               "algorithm=ring)"),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("rank 2 called AllReduce(count=12, dtype=fp32, op=sum"),
              std::string::npos)
        << s.message();
    EXPECT_EQ(buf[0], 1.0f);  // nothing moved
    // The next call works.
    std::vector<float> ok(5, 1.0f);
    Status next =
        comm.AllReduce(ok.data(), ok.data(), ok.size(), DataType::kFloat32, ReduceOp::kSum).Wait();
    EXPECT_TRUE(next.ok()) << next.ToString();
    EXPECT_EQ(ok[4], 3.0f);
  });
}

TEST(Mismatch, DtypeOpRootAndAlgorithmDifferences) {
  auto world = MakeWorld(4, 30000);
  RunRanks(*world, [&](int rank, Communicator& comm) {
    std::vector<double> buf(8, 1.0);
    const bool odd = rank == 3;
    Work dtype = comm.AllReduce(buf.data(), buf.data(), 4,
                                odd ? DataType::kInt64 : DataType::kFloat64, ReduceOp::kSum);
    Work op = comm.AllReduce(buf.data(), buf.data(), 4, DataType::kFloat64,
                             odd ? ReduceOp::kMax : ReduceOp::kSum);
    Work root = comm.Broadcast(buf.data(), buf.data(), 4, DataType::kFloat64, odd ? 1 : 0);
    Work algo = comm.AllReduce(buf.data(), buf.data(), 4, DataType::kFloat64, ReduceOp::kSum,
                               CallOptions{odd ? Algorithm::kTree : Algorithm::kRing});
    Work kind = odd ? comm.Reduce(buf.data(), buf.data(), 4, DataType::kFloat64, ReduceOp::kSum, 0)
                    : comm.AllReduce(buf.data(), buf.data(), 4, DataType::kFloat64, ReduceOp::kSum);
    const std::pair<Work*, const char*> checks[] = {
        {&dtype, "rank 3 called AllReduce(count=4, dtype=int64"},
        {&op, "op=max"},
        {&root, "rank 3 called Broadcast(count=4, dtype=fp64, root=1"},
        {&algo, "algorithm=tree"},
        {&kind, "rank 3 called Reduce("}};
    for (const auto& [work, needle] : checks) {
      Status s = work->Wait();
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
      EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
      EXPECT_NE(s.message().find("rank 0 called"), std::string::npos) << s.message();
    }
    EXPECT_TRUE(comm.Barrier().Wait().ok());
  });
}

TEST(Mismatch, PointToPointCountDifference) {
  auto world = MakeWorld(2, 30000);
  RunRanks(*world, [&](int rank, Communicator& comm) {
    std::vector<int32_t> buf(10, rank);
    Status s = rank == 0 ? comm.Send(buf.data(), 10, DataType::kInt32, 1, 4).Wait()
                         : comm.Recv(buf.data(), 8, DataType::kInt32, 0, 4).Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("rank 0 sends count=10 dtype=int32 but rank 1 receives count=8"),
              std::string::npos)
        << s.message();
  });
}

TEST(Timeout, RankThatNeverCallsEndsInTimeoutNotAHang) {
  auto world = MakeWorld(3);
  RunRanks(*world, [&](int rank, Communicator& comm) {
    if (rank == 2) return;  // never calls
    std::vector<float> buf(1000, 1.0f);
    Status s =
        comm.AllReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum)
            .Wait();
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
    EXPECT_NE(s.message().find("no progress within 200 ms"), std::string::npos) << s.message();
    // The group is out of step now: later calls fail at once.
    Status later = comm.Barrier().Wait();
    EXPECT_EQ(later.code(), StatusCode::kFailedPrecondition) << later.ToString();
  });
}

// A rank that fails aborts the group: its peers' pending and later calls end with Aborted,
// naming it, long before the (one minute) timeout, whichever algorithm they were running.
TEST(Abort, AFailedRankEndsEveryPeersCallsAtOnce) {
  for (Algorithm algo : {Algorithm::kRing, Algorithm::kTree, Algorithm::kNative}) {
    auto world = MakeWorld(3, 60000);
    RunRanks(*world, [&](int rank, Communicator& comm) {
      std::vector<float> buf(100000, 1.0f);
      if (rank == 1) {
        EXPECT_TRUE(comm.Abort(InvalidArgument("label 7 is out of range")));
        return;
      }
      CallOptions o;
      o.algorithm = algo;
      Status s =
          comm.AllReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum, o)
              .Wait();
      EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
      EXPECT_NE(s.message().find("rank 1 of the group failed: label 7 is out of range"),
                std::string::npos)
          << s.message();
      Status later = comm.Barrier().Wait();
      EXPECT_EQ(later.code(), StatusCode::kAborted) << later.ToString();
    });
  }
}

// A rank that went on to its next step after an error meets the others' calls of the step
// before: the signatures say so at once, naming both steps.
TEST(Mismatch, CallsOfDifferentTrainingStepsAreAnError) {
  auto world = MakeWorld(2, 60000);
  RunRanks(*world, [&](int rank, Communicator& comm) {
    std::vector<float> buf(8, 1.0f);
    comm.set_step(rank == 0 ? 5 : 6);
    Status s =
        comm.AllReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum)
            .Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("rank 0 is in step 5, rank 1 in step 6"), std::string::npos)
        << s.message();
  });
}

TEST(Timeout, PeerBusyWithSomethingElseCancelsCleanly) {
  // Rank 1 sends point-to-point while the others run an allreduce: ranks 0 and 2 time out waiting
  // for rank 1, rank 1 times out waiting for rank 0; every posted transfer is withdrawn.
  for (Algorithm a :
       {Algorithm::kRing, Algorithm::kTree, Algorithm::kMultiTree, Algorithm::kStar}) {
    auto world = MakeWorld(3, 100);
    RunRanks(*world, [&](int rank, Communicator& comm) {
      if (rank == 1) {
        std::vector<float> other(64, 0.0f);
        Status s = comm.Send(other.data(), other.size(), DataType::kFloat32, 0, 1).Wait();
        EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
        return;
      }
      std::vector<float> buf(100000, 1.0f);
      Status s = comm.AllReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32,
                                ReduceOp::kSum, CallOptions{a})
                     .Wait();
      EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
    });
  }
}

TEST(Timeout, SendWithoutMatchingRecv) {
  auto world = MakeWorld(2);
  RunRanks(*world, [&](int rank, Communicator& comm) {
    if (rank == 1) return;
    int32_t x = 5;
    Status s = comm.Send(&x, 1, DataType::kInt32, 1, 0).Wait();
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.ToString();
  });
}

TEST(Arguments, UnsupportedAlgorithmsAreUnimplemented) {
  auto world = MakeWorld(2, 30000);
  RunRanks(*world, [&](int rank, Communicator& comm) {
    std::vector<float> buf(8, 1.0f), out(16);
    Status tree_gather =
        comm.AllGather(buf.data(), out.data(), 8, DataType::kFloat32, CallOptions{Algorithm::kTree})
            .Wait();
    EXPECT_EQ(tree_gather.code(), StatusCode::kUnimplemented) << tree_gather.ToString();
    // Rejected calls consume no sequence number: the group is still in step.
    EXPECT_TRUE(
        comm.AllReduce(buf.data(), buf.data(), 8, DataType::kFloat32, ReduceOp::kSum).Wait().ok());
    EXPECT_EQ(buf[0], 2.0f);
  });
}

TEST(Arguments, BadRootPeerTagAndNullBuffers) {
  auto world = MakeWorld(2, 30000);
  Communicator& comm = world->comm(0);
  float x = 0;
  EXPECT_EQ(comm.Broadcast(&x, &x, 1, DataType::kFloat32, 2).Wait().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Reduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum, -1).Wait().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Send(&x, 1, DataType::kFloat32, 0, 1).Wait().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Send(&x, 1, DataType::kFloat32, 1, -3).Wait().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.AllReduce(nullptr, &x, 1, DataType::kFloat32, ReduceOp::kSum).Wait().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm.WaitAll().code() == StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm.WaitAll().ok());  // the failures were reported once
}

TEST(Arguments, WorldRejectsBadOptions) {
  EXPECT_FALSE(InProcessWorld::Create(0).ok());
  WorldOptions options;
  options.topology = Topology::Preset("mesh4").value();
  EXPECT_EQ(InProcessWorld::Create(3, options).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(InProcessWorld::Create(4, options).ok());
}

TEST(Work, WaitWithShortTimeoutLeavesTheCallRunning) {
  auto world = MakeWorld(2, 30000);
  std::vector<float> a(4, 1.0f), b(4, 2.0f);
  Work w0 = world->comm(0).AllReduce(a.data(), a.data(), 4, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(w0.Wait(std::chrono::milliseconds(1)).code(), StatusCode::kTimeout);
  EXPECT_FALSE(w0.IsCompleted());
  Work w1 = world->comm(1).AllReduce(b.data(), b.data(), 4, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_TRUE(w0.Wait().ok());
  EXPECT_TRUE(w1.Wait().ok());
  EXPECT_EQ(a[3], 3.0f);
  EXPECT_EQ(b[0], 3.0f);
}

}  // namespace
}  // namespace loom::collective

namespace loom::collective {
namespace {

TEST(NativeInProcess, ARankThatNeverCallsEndsInTimeoutAndALateOneTouchesNothing) {
  auto transports = CreateInProcessTransports(2);
  std::vector<float> a(64, 1.0f), b(64, 2.0f);
  NativeCollective call;
  call.count = a.size();
  call.send = call.recv = a.data();
  const auto start = Clock::now();
  Status early = transports[0]->RunNative(call, start + std::chrono::milliseconds(100));
  EXPECT_EQ(early.code(), StatusCode::kTimeout) << early.ToString();
  EXPECT_NE(early.message().find("only 1 of 2 ranks arrived"), std::string::npos)
      << early.message();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  // Rank 1 comes late to the same call: it must not reduce into rank 0's buffer, which its
  // owner has already taken back.
  call.send = call.recv = b.data();
  Status late = transports[1]->RunNative(call, Clock::now() + std::chrono::seconds(5));
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition) << late.ToString();
  EXPECT_EQ(a, std::vector<float>(64, 1.0f));
  EXPECT_EQ(b, std::vector<float>(64, 2.0f));
}

// The native pass's cut: blocks of at most 16 KiB, cut smaller (in whole lines) only so that
// every worker (a rank that runs at once with the others) gets one.
TEST(NativeInProcess, SmallCallsAreCutSoThatEveryWorkerGetsABlock) {
  for (int n = 1; n <= 9; ++n) {
    for (size_t elem : {size_t{2}, size_t{4}, size_t{8}}) {
      for (int parts : {1, n}) {
        const int workers = std::min(n, 2 + parts % 3);
        for (size_t count : {size_t{1}, size_t{7}, size_t{600}, size_t{2048}, size_t{4096},
                             size_t{4097}, size_t{20000}, size_t{1} << 20}) {
          const size_t block = NativeBlockElements(count, elem, parts, workers);
          ASSERT_GE(block, 1u);
          ASSERT_LE(block * elem, kInProcessNativeBlockBytes);
          const size_t per_part = (count + block - 1) / block;
          const size_t blocks = per_part * parts;
          const bool whole = block * elem == kInProcessNativeBlockBytes;
          // A smaller block only where full ones would leave a rank idle, in whole lines.
          if (!whole) {
            EXPECT_LT(
                ((count * elem + kInProcessNativeBlockBytes - 1) / kInProcessNativeBlockBytes) *
                    parts,
                static_cast<size_t>(workers))
                << count << " x " << elem << " B, " << parts << " parts, " << n << " ranks";
            EXPECT_EQ(block * elem % 64, 0u);
          }
          // Every worker gets work wherever the call has a line for each.
          if (count * elem * parts >= 64 * static_cast<size_t>(workers)) {
            EXPECT_GE(blocks, static_cast<size_t>(workers));
          }
        }
      }
    }
  }
}

// Small native calls run from copies in the meeting slot, larger ones on the ranks' buffers; many
// consecutive calls of both kinds (more than the slots a group reuses) each give the exact
// result of every collective, in place and not.
TEST(NativeInProcess, CallsOnBothSidesOfTheCopyThresholdAreExact) {
  constexpr int n = 3;
  auto world = MakeWorld(n, 30000);
  // Per-rank input sizes around 1 KiB (the copy threshold, kInProcessNativeInlineBytes) in
  // doubles; 512 and 2000 are less than one 16 KiB block, cut for the ranks that run at once,
  // 10000 five blocks.
  static_assert(kInProcessNativeInlineBytes == 128 * sizeof(double), "threshold moved");
  const std::vector<size_t> counts = {1, 127, 128, 129, 512, 2000, 10000};
  RunRanks(*world, [&](int rank, Communicator& comm) {
    const CallOptions native{Algorithm::kNative};
    auto value = [](int r, size_t i, int call) { return double((r + 1) * 1000 + i % 97 + call); };
    int call = 0;
    for (size_t count : counts) {
      for (bool in_place : {false, true}) {
        ++call;
        // allreduce (sum, then avg)
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
          std::vector<double> in(count), out(count, -1);
          for (size_t i = 0; i < count; ++i) in[i] = value(rank, i, call);
          double* dst = in_place ? in.data() : out.data();
          ASSERT_TRUE(
              comm.AllReduce(in.data(), dst, count, DataType::kFloat64, op, native).Wait().ok());
          for (size_t i = 0; i < count; ++i) {
            double want = op == ReduceOp::kMax ? value(n - 1, i, call) : 0;
            if (op != ReduceOp::kMax)
              for (int r = 0; r < n; ++r) want += value(r, i, call);
            if (op == ReduceOp::kAvg) want /= n;
            ASSERT_EQ(dst[i], want) << "allreduce count " << count << " element " << i;
          }
        }
        // reduce to root 1: only the root's output changes
        {
          std::vector<double> in(count), out(count, -1);
          for (size_t i = 0; i < count; ++i) in[i] = value(rank, i, call);
          ASSERT_TRUE(comm.Reduce(in.data(), out.data(), count, DataType::kFloat64, ReduceOp::kSum,
                                  1, native)
                          .Wait()
                          .ok());
          for (size_t i = 0; i < count; ++i) {
            double want = 0;
            for (int r = 0; r < n; ++r) want += value(r, i, call);
            ASSERT_EQ(out[i], rank == 1 ? want : -1) << "reduce count " << count;
          }
        }
        // broadcast from root 2
        {
          std::vector<double> buf(count);
          for (size_t i = 0; i < count; ++i) buf[i] = value(rank, i, call);
          std::vector<double> out(count, -1);
          double* dst = in_place ? buf.data() : out.data();
          ASSERT_TRUE(
              comm.Broadcast(buf.data(), dst, count, DataType::kFloat64, 2, native).Wait().ok());
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(dst[i], value(2, i, call)) << "broadcast count " << count;
        }
        // allgather and reducescatter (in place: the rank's part of the whole buffer)
        {
          std::vector<double> all(count * n, -1), mine(count);
          for (size_t i = 0; i < count; ++i) mine[i] = value(rank, i, call);
          const double* src = mine.data();
          if (in_place) {
            std::copy(mine.begin(), mine.end(), all.begin() + rank * count);
            src = all.data() + rank * count;
          }
          ASSERT_TRUE(
              comm.AllGather(src, all.data(), count, DataType::kFloat64, native).Wait().ok());
          for (int r = 0; r < n; ++r)
            for (size_t i = 0; i < count; ++i)
              ASSERT_EQ(all[r * count + i], value(r, i, call)) << "allgather count " << count;
          std::vector<double> whole(count * n), part(count, -1);
          for (size_t i = 0; i < whole.size(); ++i) whole[i] = value(rank, i, call);
          double* dst = in_place ? whole.data() + rank * count : part.data();
          ASSERT_TRUE(comm.ReduceScatter(whole.data(), dst, count, DataType::kFloat64,
                                         ReduceOp::kSum, native)
                          .Wait()
                          .ok());
          for (size_t i = 0; i < count; ++i) {
            double want = 0;
            for (int r = 0; r < n; ++r) want += value(r, rank * count + i, call);
            ASSERT_EQ(dst[i], want) << "reducescatter count " << count;
          }
        }
      }
    }
  });
}

// A mismatch between a call small enough to run from copies and a larger one is named on every
// rank, touches no buffer, and the group goes on.
TEST(NativeInProcess, AMismatchAcrossTheCopyThresholdIsNamedAndTouchesNothing) {
  auto world = MakeWorld(2, 30000);
  RunRanks(*world, [&](int rank, Communicator& comm) {
    const size_t count = rank == 0 ? 4 : 4096;
    std::vector<float> in(4096, float(rank + 1)), out(4096, -1.0f);
    Status s = comm.AllReduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum,
                              CallOptions{Algorithm::kNative})
                   .Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("rank 0 called AllReduce(count=4,"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("rank 1 called AllReduce(count=4096,"), std::string::npos)
        << s.message();
    EXPECT_EQ(out, std::vector<float>(4096, -1.0f));
    Status next = comm.AllReduce(in.data(), out.data(), 3, DataType::kFloat32, ReduceOp::kSum,
                                 CallOptions{Algorithm::kNative})
                      .Wait();
    EXPECT_TRUE(next.ok()) << next.ToString();
    EXPECT_EQ(out[2], 3.0f);
  });
}

TEST(NativeInProcess, NotOfferedOverMemoryThatIsNotTheHosts) {
  class Opaque final : public RankMemory {
   public:
    const char* name() const override { return "opaque"; }
    Status Copy(int, int, void*, int, const void*, size_t) override { return Status::OK(); }
    Status Reduce(int, const Reduction&, int, void*, const void*, int, const void*,
                  size_t) override {
      return Status::OK();
    }
    Status Finalize(int, const Reduction&, void*, size_t, int) override { return Status::OK(); }
    std::shared_ptr<void> Allocate(int, size_t) override { return nullptr; }
  };
  auto transports = CreateInProcessTransports(2, {}, std::make_shared<Opaque>());
  EXPECT_FALSE(transports[0]->SupportsNative(Collective::kAllReduce, DataType::kFloat32));
  EXPECT_TRUE(
      CreateInProcessTransports(2)[0]->SupportsNative(Collective::kAllReduce, DataType::kFloat32));
}

// Schedules' scratch comes back to its transport and serves the next call it fits: no fresh
// (zeroed, faulted-in) allocation per call. A reused buffer still holds what the last call left
// (a fresh one is zeroed), which is how this test tells them apart. At most two buffers and
// 256 MiB wait idle, the largest kept; a buffer may outlive its transport.
TEST(Scratch, BuffersAreReusedByLaterCallsTheyFitAndTheIdleOnesBounded) {
  auto transports = CreateInProcessTransports(1);
  Transport& t = *transports[0];
  auto mark = [](const std::shared_ptr<void>& b, char v) { static_cast<char*>(b.get())[0] = v; };
  auto marked = [](const std::shared_ptr<void>& b) { return static_cast<char*>(b.get())[0]; };
  std::shared_ptr<void> a = t.ScratchBuffer(1 << 20);
  ASSERT_NE(a, nullptr);
  mark(a, 7);
  void* first = a.get();
  a.reset();
  std::shared_ptr<void> b = t.ScratchBuffer(512 << 10);  // fits the idle 1 MiB buffer
  EXPECT_EQ(b.get(), first);
  EXPECT_EQ(marked(b), 7);
  std::shared_ptr<void> c = t.ScratchBuffer(512 << 10);  // the idle one is taken: a fresh one
  EXPECT_EQ(marked(c), 0);
  b.reset();
  c.reset();
  // Three returned (2 MiB, 1 MiB, 1 MiB after the two above): two stay, the largest.
  std::shared_ptr<void> x = t.ScratchBuffer(2 << 20), y = t.ScratchBuffer(1 << 20),
                        z = t.ScratchBuffer(1 << 20);
  mark(x, 1);
  mark(y, 2);
  mark(z, 3);
  x.reset();
  y.reset();
  z.reset();
  std::vector<std::shared_ptr<void>> again;
  int reused = 0;
  bool got_big = false;
  for (int i = 0; i < 3; ++i) {
    again.push_back(t.ScratchBuffer(1 << 20));
    reused += marked(again.back()) != 0;
    got_big = got_big || marked(again.back()) == 1;
  }
  EXPECT_EQ(reused, 2);
  EXPECT_TRUE(got_big);
  again.clear();
  // Larger than what may wait idle: freed, never pooled; outliving the transport is fine.
  std::shared_ptr<void> huge = t.ScratchBuffer(Transport::kIdleScratchBytes + 1);
  ASSERT_NE(huge, nullptr);
  mark(huge, 9);
  huge.reset();
  huge = t.ScratchBuffer(Transport::kIdleScratchBytes + 1);
  EXPECT_EQ(marked(huge), 0);
  transports.clear();
  huge.reset();
}

// Host memory (HostRankMemory) that records which rank's thread moved each transfer.
class RecordingMemory final : public RankMemory {
 public:
  const char* name() const override { return "recording"; }
  bool host() const override { return true; }
  Status Copy(int performer, int dst_rank, void* dst, int src_rank, const void* src,
              size_t bytes) override {
    performers.push_back(performer);
    return host_->Copy(performer, dst_rank, dst, src_rank, src, bytes);
  }
  Status Reduce(int performer, const Reduction& reduction, int dst_rank, void* dst,
                const void* local, int src_rank, const void* remote, size_t count) override {
    performers.push_back(performer);
    return host_->Reduce(performer, reduction, dst_rank, dst, local, src_rank, remote, count);
  }
  Status Finalize(int rank, const Reduction& r, void* buf, size_t count, int nranks) override {
    return host_->Finalize(rank, r, buf, count, nranks);
  }
  std::shared_ptr<void> Allocate(int rank, size_t bytes) override {
    return host_->Allocate(rank, bytes);
  }
  std::vector<int> performers;  // read after the threads that wrote it are joined

 private:
  std::shared_ptr<RankMemory> host_ = HostRankMemory();
};

Deadline Soon() { return Clock::now() + std::chrono::seconds(10); }

// Large transfers (handoff_bytes and up) are moved by the receiver when it waits, on its own
// thread, whichever side posted first: a send that finds its receive posted hands the transfer
// over, and a receive that finds its send queued takes it without copying inside the post (so
// the rank's next posts, its own sends, are not held behind one). A small one whoever made the
// match moves at once.
TEST(InProcessHandoff, TheReceiverMovesLargeTransfersAndTheMatcherSmallOnes) {
  for (const bool receive_first : {true, false}) {
    for (size_t bytes : {size_t{64}, size_t{1} << 20}) {
      auto memory = std::make_shared<RecordingMemory>();
      InProcessTransportOptions options;
      options.handoff_bytes = 4096;
      auto t = CreateInProcessTransports(2, options, memory);
      std::vector<char> src(bytes, 'x'), dst(bytes, 0);
      std::unique_ptr<Request> recv, send;
      if (receive_first) recv = t[1]->Recv(0, 7, dst.data(), bytes);
      send = t[0]->Send(1, 7, src.data(), bytes);
      if (!receive_first) recv = t[1]->Recv(0, 7, dst.data(), bytes);
      const int matcher = receive_first ? 0 : 1;
      EXPECT_EQ(memory->performers, bytes >= 4096 ? std::vector<int>{} : std::vector<int>{matcher})
          << receive_first << " " << bytes;
      // The receiver waits first (here, before the sender ever waits).
      ASSERT_TRUE(recv->Wait(Soon()).ok());
      ASSERT_TRUE(send->Wait(Soon()).ok());
      EXPECT_EQ(dst, src) << bytes;
      EXPECT_EQ(memory->performers, std::vector<int>{bytes >= 4096 ? 1 : matcher})
          << receive_first << " " << bytes;
    }
  }
}

// The sender of a transfer a receive took without moving waits first: after its spin it moves the
// transfer itself, whether the receive took it before the sender began waiting or while it slept.
TEST(InProcessHandoff, ASenderMovesATransferItsReceiveTookButHasNotStarted) {
  for (const bool receive_first : {true, false}) {
    auto memory = std::make_shared<RecordingMemory>();
    InProcessTransportOptions options;
    options.handoff_bytes = 0;
    auto t = CreateInProcessTransports(2, options, memory);
    std::vector<char> src(5000, 'z'), dst(5000, 0);
    auto send = t[0]->Send(1, 4, src.data(), src.size());
    std::unique_ptr<Request> recv;
    if (receive_first) recv = t[1]->Recv(0, 4, dst.data(), dst.size());
    std::thread late;
    if (!receive_first) {
      late = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        recv = t[1]->Recv(0, 4, dst.data(), dst.size());
      });
    }
    Status sent = send->Wait(Soon());
    if (late.joinable()) late.join();
    ASSERT_TRUE(sent.ok()) << sent.ToString();
    EXPECT_EQ(dst, src) << receive_first;
    EXPECT_EQ(memory->performers, std::vector<int>{0}) << receive_first;
    ASSERT_TRUE(recv->Wait(Soon()).ok());
  }
}

// Two ranks post a receive and a send to each other (or a send and then a receive: the receives
// find the sends queued and take them without moving) and then each waits for its send first: a
// handed transfer the receiver has not started, the waiting sender moves itself (no deadlock),
// with the reduction and the data exact.
TEST(InProcessHandoff, SendersThatWaitFirstMoveTheirTransfersThemselves) {
  for (const bool send_first : {false, true}) {
    InProcessTransportOptions options;
    options.handoff_bytes = 0;
    auto t = CreateInProcessTransports(2, options);
    constexpr size_t n = 1 << 16;
    std::vector<std::vector<double>> in(2, std::vector<double>(n)), out(2, std::vector<double>(n));
    for (int r = 0; r < 2; ++r)
      for (size_t i = 0; i < n; ++i) in[r][i] = double(r * 1000 + i % 101);
    std::vector<Status> status(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        std::unique_ptr<Request> send;
        if (send_first) send = t[r]->Send(1 - r, 3, in[r].data(), n * sizeof(double));
        auto recv = t[r]->RecvReduce(1 - r, 3, out[r].data(), in[r].data(), n * sizeof(double),
                                     Reduction{DataType::kFloat64, ReduceOp::kSum});
        if (!send_first) send = t[r]->Send(1 - r, 3, in[r].data(), n * sizeof(double));
        status[r] = send->Wait(Soon());
        if (status[r].ok()) status[r] = recv->Wait(Soon());
      });
    }
    for (auto& th : threads) th.join();
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(status[r].ok()) << send_first << r << ": " << status[r].ToString();
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(out[r][i], double(1000 + 2 * (i % 101))) << send_first << r << i;
    }
  }
}

// A handed transfer still moves when its receive is cancelled (the buffers are the caller's
// until Cancel returns); one whose request is dropped unwaited moves nothing and its sender
// gets an error instead of waiting for ever. Either side may have posted first (a receive that
// finds its send queued takes the transfer without moving it).
TEST(InProcessHandoff, CancelMovesAHandedTransferAndADroppedRequestFailsItsPeer) {
  for (const bool send_first : {false, true}) {
    InProcessTransportOptions options;
    options.handoff_bytes = 0;
    auto t = CreateInProcessTransports(2, options);
    // Posts a receive into `dst` and a send of `src` on `tag`, in this round's order.
    const auto pair = [&](uint64_t tag, std::vector<char>& dst, const std::vector<char>& src) {
      std::pair<std::unique_ptr<Request>, std::unique_ptr<Request>> p;
      if (send_first) p.second = t[0]->Send(1, tag, src.data(), src.size());
      p.first = t[1]->Recv(0, tag, dst.data(), dst.size());
      if (!send_first) p.second = t[0]->Send(1, tag, src.data(), src.size());
      return p;
    };
    std::vector<char> src(1000, 'y'), dst(1000, 0);
    auto [recv, send] = pair(1, dst, src);
    recv->Cancel();
    EXPECT_EQ(dst, src) << send_first;
    EXPECT_TRUE(send->Wait(Soon()).ok()) << send_first;

    std::vector<char> lost(1000, 0);
    auto [dropped, orphan] = pair(2, lost, src);
    dropped.reset();
    Status s = orphan->Wait(Soon());
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << send_first << s.ToString();
    EXPECT_NE(s.message().find("dropped"), std::string::npos) << s.message();
    EXPECT_EQ(lost, std::vector<char>(1000, 0)) << send_first;
  }
}

}  // namespace
}  // namespace loom::collective
