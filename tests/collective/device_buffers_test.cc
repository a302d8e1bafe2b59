// The schedules never touch call buffers themselves, which is what lets the same ring/tree code
// run on GPU buffers (the CUDA P2P transport). Here the in-process transport runs over a
// RankMemory whose buffers the host cannot dereference: every buffer address a rank hands to its
// communicator (and every scratch buffer) carries a tag in bits the CPU refuses (a non-canonical
// x86-64 address), so a schedule that memcpy'd, reduced or divided a call buffer itself would
// crash the test. The memory also checks that each operation names the ranks the buffers belong
// to (the CUDA transport picks GPUs and streams by them). Every algorithm and collective is
// compared with the host reference.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <tuple>

#include "tests/collective/test_util.h"

namespace loom::collective {
namespace {

using testing::Compare;
using testing::Expected;
using testing::Input;

constexpr uintptr_t kDeviceBit = uintptr_t{1} << 62;
constexpr int kRankShift = 54;
constexpr uintptr_t kRankMask = uintptr_t{0xff} << kRankShift;

bool Tagged(const void* p) { return (reinterpret_cast<uintptr_t>(p) & kDeviceBit) != 0; }
int OwnerOf(const void* p) {
  return static_cast<int>((reinterpret_cast<uintptr_t>(p) & kRankMask) >> kRankShift);
}
template <typename T>
T* Untag(T* p) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) & ~(kDeviceBit | kRankMask));
}
void* Tag(void* p, int rank) {
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) | kDeviceBit |
                                 (static_cast<uintptr_t>(rank) << kRankShift));
}

// Host memory behind tagged addresses. Untagged addresses (the communicator's signatures, which
// live in host scratch) pass through as they are.
class TaggedMemory final : public RankMemory {
 public:
  const char* name() const override { return "tagged"; }

  Status Copy(int performer, int dst_rank, void* dst, int src_rank, const void* src,
              size_t bytes) override {
    Check(dst, dst_rank, "copy destination");
    Check(src, src_rank, "copy source");
    if (Tagged(dst) || Tagged(src)) ++device_ops;
    return host_->Copy(performer, dst_rank, Untag(dst), src_rank, Untag(src), bytes);
  }
  Status Reduce(int performer, const Reduction& reduction, int dst_rank, void* dst,
                const void* local, int src_rank, const void* remote, size_t count) override {
    Check(dst, dst_rank, "reduction destination");
    Check(local, dst_rank, "reduction's local operand");
    Check(remote, src_rank, "reduction's remote operand");
    ++device_ops;
    return host_->Reduce(performer, reduction, dst_rank, Untag(dst), Untag(local), src_rank,
                         Untag(remote), count);
  }
  Status Finalize(int rank, const Reduction& reduction, void* buf, size_t count,
                  int nranks) override {
    Check(buf, rank, "finalized buffer");
    ++device_ops;
    return host_->Finalize(rank, reduction, Untag(buf), count, nranks);
  }
  std::shared_ptr<void> Allocate(int rank, size_t bytes) override {
    std::shared_ptr<void> inner = host_->Allocate(rank, bytes);
    return std::shared_ptr<void>(Tag(inner.get(), rank), [inner](void*) {});
  }

  std::string errors() {
    std::lock_guard<std::mutex> lock(mu_);
    return errors_;
  }
  std::atomic<long> device_ops{0};

 private:
  void Check(const void* p, int rank, const char* what) {
    if (!Tagged(p) || OwnerOf(p) == rank) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (++error_count_ > 3) return;  // the first few tell the story
    errors_ += std::string(what) + " belongs to rank " + std::to_string(OwnerOf(p)) +
               " but the operation named rank " + std::to_string(rank) + "\n";
  }

  std::shared_ptr<RankMemory> host_ = HostRankMemory();
  std::mutex mu_;
  std::string errors_;
  int error_count_ = 0;
};

struct TaggedGroup {
  TaggedGroup(int n, size_t chunk_bytes) : memory(std::make_shared<TaggedMemory>()) {
    auto plan = CommPlan::Create(Topology::Uniform(n));
    EXPECT_TRUE(plan.ok());
    CommunicatorOptions options;
    options.pipeline_chunk_bytes = chunk_bytes;
    for (auto& t : CreateInProcessTransports(n, {}, memory)) {
      comms.push_back(std::make_unique<Communicator>(std::move(t), plan.value(), options));
    }
  }
  void Run(const std::function<void(int, Communicator&)>& fn) {
    std::vector<std::thread> threads;
    for (size_t r = 0; r < comms.size(); ++r) {
      threads.emplace_back([&, r] { fn(static_cast<int>(r), *comms[r]); });
    }
    for (auto& t : threads) t.join();
  }
  std::shared_ptr<TaggedMemory> memory;
  std::vector<std::unique_ptr<Communicator>> comms;
};

class TaggedBuffers : public ::testing::TestWithParam<std::tuple<Algorithm, int>> {};

TEST_P(TaggedBuffers, EveryCollectiveMovesDataOnlyThroughTheTransport) {
  const auto [algorithm, n] = GetParam();
  // Small pieces, so the larger counts pipeline through several pieces per step.
  TaggedGroup group(n, 512);
  const CallOptions opts{algorithm};
  group.Run([&](int rank, Communicator& comm) {
    int salt = 0;
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, size_t{4099}}) {
      for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                             DataType::kInt32, DataType::kInt64}) {
        for (ReduceOp op :
             {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
          ++salt;
          std::vector<unsigned char> in = Input(dtype, op, rank, count, salt);
          std::vector<unsigned char> out(in.size());
          const bool in_place = salt % 2 == 0;
          void* dst = in_place ? in.data() : out.data();
          ASSERT_TRUE(comm.AllReduce(Tag(in.data(), rank), Tag(dst, rank), count, dtype, op, opts)
                          .Wait()
                          .ok());
          EXPECT_EQ(Compare(dtype, Expected(dtype, op, n, count, salt), dst, count), "")
              << "allreduce rank " << rank << " count " << count << " " << DataTypeName(dtype)
              << " " << ReduceOpName(op);
        }
      }
    }
    const size_t count = 3001;
    const DataType dtype = DataType::kFloat32;
    const size_t bytes = count * DataTypeSize(dtype);
    for (int root = 0; root < n && AlgorithmSupports(algorithm, Collective::kReduce); ++root) {
      ++salt;
      std::vector<unsigned char> in = Input(dtype, ReduceOp::kAvg, rank, count, salt);
      std::vector<unsigned char> out(bytes, 0xab);
      ASSERT_TRUE(comm.Reduce(Tag(in.data(), rank), Tag(out.data(), rank), count, dtype,
                              ReduceOp::kAvg, root, opts)
                      .Wait()
                      .ok());
      if (rank == root) {
        EXPECT_EQ(
            Compare(dtype, Expected(dtype, ReduceOp::kAvg, n, count, salt), out.data(), count), "")
            << "reduce to " << root;
      } else {
        EXPECT_EQ(out, std::vector<unsigned char>(bytes, 0xab)) << "a non-root's recv changed";
      }
      ASSERT_TRUE(
          comm.Broadcast(Tag(in.data(), rank), Tag(out.data(), rank), count, dtype, root, opts)
              .Wait()
              .ok());
      EXPECT_EQ(Compare(dtype, Input(dtype, ReduceOp::kAvg, root, count, salt), out.data(), count),
                "")
          << "broadcast from " << root;
    }
    if (AlgorithmSupports(algorithm, Collective::kAllGather)) {
      std::vector<unsigned char> in = Input(dtype, ReduceOp::kSum, rank, count, 77);
      std::vector<unsigned char> all(n * bytes);
      ASSERT_TRUE(comm.AllGather(Tag(in.data(), rank), Tag(all.data(), rank), count, dtype, opts)
                      .Wait()
                      .ok());
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(Compare(dtype, Input(dtype, ReduceOp::kSum, r, count, 77), all.data() + r * bytes,
                          count),
                  "")
            << "allgather block " << r;
      }
    }
    if (AlgorithmSupports(algorithm, Collective::kReduceScatter)) {
      std::vector<unsigned char> in = Input(dtype, ReduceOp::kAvg, rank, n * count, 78);
      std::vector<unsigned char> out(bytes);
      ASSERT_TRUE(comm.ReduceScatter(Tag(in.data(), rank), Tag(out.data(), rank), count, dtype,
                                     ReduceOp::kAvg, opts)
                      .Wait()
                      .ok());
      EXPECT_EQ(Compare(dtype, Expected(dtype, ReduceOp::kAvg, n, count, 78, rank * count),
                        out.data(), count),
                "");
    }
  });
  EXPECT_EQ(group.memory->errors(), "");
  if (n > 1) {
    EXPECT_GT(group.memory->device_ops.load(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, TaggedBuffers,
                         ::testing::Combine(::testing::Values(Algorithm::kRing, Algorithm::kTree,
                                                              Algorithm::kMultiTree,
                                                              Algorithm::kStar, Algorithm::kDirect),
                                            ::testing::Values(1, 2, 3, 5)),
                         [](const ::testing::TestParamInfo<TaggedBuffers::ParamType>& info) {
                           return std::string(AlgorithmName(std::get<0>(info.param))) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(TaggedBuffers, PointToPointAndManyCallsInFlight) {
  TaggedGroup group(4, 1024);
  group.Run([&](int rank, Communicator& comm) {
    const int n = 4;
    const size_t count = 2049;
    const DataType dtype = DataType::kFloat64;
    std::vector<std::vector<unsigned char>> bufs;
    for (int i = 0; i < 40; ++i) bufs.push_back(Input(dtype, ReduceOp::kSum, rank, count, i));
    for (int i = 0; i < 40; ++i) {
      const Algorithm a = static_cast<Algorithm>(1 + i % 4);  // ring, tree, multi_tree, star
      comm.AllReduce(Tag(bufs[i].data(), rank), Tag(bufs[i].data(), rank), count, dtype,
                     ReduceOp::kSum, CallOptions{a});
    }
    ASSERT_TRUE(comm.WaitAll().ok());
    for (int i = 0; i < 40; ++i) {
      EXPECT_EQ(Compare(dtype, Expected(dtype, ReduceOp::kSum, n, count, i), bufs[i].data(), count),
                "")
          << "call " << i;
    }
    std::vector<unsigned char> mine = Input(dtype, ReduceOp::kSum, rank, count, 90);
    std::vector<unsigned char> got(mine.size());
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    // Point-to-point calls run in issue order: alternate who sends first.
    if (rank % 2 == 0) {
      comm.Send(Tag(mine.data(), rank), count, dtype, next, 3);
      comm.Recv(Tag(got.data(), rank), count, dtype, prev, 3);
    } else {
      comm.Recv(Tag(got.data(), rank), count, dtype, prev, 3);
      comm.Send(Tag(mine.data(), rank), count, dtype, next, 3);
    }
    ASSERT_TRUE(comm.WaitAll().ok());
    EXPECT_EQ(Compare(dtype, Input(dtype, ReduceOp::kSum, prev, count, 90), got.data(), count), "");
  });
  EXPECT_EQ(group.memory->errors(), "");
}

}  // namespace
}  // namespace loom::collective
