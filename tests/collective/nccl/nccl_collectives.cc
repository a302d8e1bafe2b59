// The NCCL transport on the GPUs of this machine (up to 4, one rank each): native collectives
// on device buffers against a host reference, point-to-point, a mismatch caught by the signature
// exchange, and the schedules refusing device buffers. Skips, saying why, without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <thread>

#include "collective/transport/nccl.h"
#include "tests/collective/test_util.h"
#include "tests/gpu_required.h"

namespace loom::collective {
namespace {

using testing::Compare;
using testing::Expected;
using testing::Input;

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const int gpus = CudaDeviceCount();
    if (gpus == 0)
      LOOM_SKIP_WITHOUT_GPU("no CUDA device visible: the NCCL transport tests need a GPU");
    for (int d = 0; d < std::min(gpus, 4); ++d) devices_.push_back(d);
    auto comms = CreateNcclCommunicators(devices_);
    ASSERT_TRUE(comms.ok()) << comms.status().ToString();
    comms_ = std::move(comms).value();
  }

  // Runs fn(rank, comm) on one thread per rank with that rank's device current.
  void RunRanks(const std::function<void(int, Communicator&)>& fn) {
    std::vector<std::thread> threads;
    for (size_t r = 0; r < comms_.size(); ++r) {
      threads.emplace_back([&, r] {
        cudaSetDevice(devices_[r]);
        fn(static_cast<int>(r), *comms_[r]);
      });
    }
    for (auto& t : threads) t.join();
  }

  int n() const { return static_cast<int>(comms_.size()); }

  std::vector<int> devices_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

// A device copy of a host buffer, freed at scope exit.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) : bytes(bytes) {
    cudaMalloc(&ptr, std::max<size_t>(bytes, 1));
  }
  DeviceBuffer(const std::vector<unsigned char>& host) : DeviceBuffer(host.size()) {
    cudaMemcpy(ptr, host.data(), host.size(), cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  std::vector<unsigned char> Host() const {
    std::vector<unsigned char> out(bytes);
    cudaMemcpy(out.data(), ptr, bytes, cudaMemcpyDeviceToHost);
    return out;
  }
  void* ptr = nullptr;
  size_t bytes;
};

TEST_F(NcclTest, NativeAllReduceMatchesTheReference) {
  RunRanks([&](int rank, Communicator& comm) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, (size_t{1} << 20) + 3}) {
      for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                             DataType::kInt32, DataType::kInt64}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
          DeviceBuffer in(Input(dtype, op, rank, count, 3)), out(in.bytes);
          Status s = comm.AllReduce(in.ptr, out.ptr, count, dtype, op).Wait();
          ASSERT_TRUE(s.ok()) << s.ToString();
          EXPECT_EQ(Compare(dtype, Expected(dtype, op, n(), count, 3), out.Host().data(), count),
                    "")
              << DataTypeName(dtype) << " " << ReduceOpName(op) << " count " << count;
        }
      }
    }
  });
}

TEST_F(NcclTest, RootedGatherScatterAndPointToPoint) {
  RunRanks([&](int rank, Communicator& comm) {
    const size_t count = 4099;
    const DataType dtype = DataType::kFloat32;
    const size_t elem = DataTypeSize(dtype);
    DeviceBuffer in(Input(dtype, ReduceOp::kSum, rank, count, 5)), out(count * elem);
    ASSERT_TRUE(comm.Broadcast(in.ptr, out.ptr, count, dtype, n() - 1).Wait().ok());
    EXPECT_EQ(
        Compare(dtype, Input(dtype, ReduceOp::kSum, n() - 1, count, 5), out.Host().data(), count),
        "");
    ASSERT_TRUE(comm.Reduce(in.ptr, out.ptr, count, dtype, ReduceOp::kSum, 0).Wait().ok());
    if (rank == 0) {
      EXPECT_EQ(
          Compare(dtype, Expected(dtype, ReduceOp::kSum, n(), count, 5), out.Host().data(), count),
          "");
    }
    DeviceBuffer gathered(n() * count * elem);
    ASSERT_TRUE(comm.AllGather(in.ptr, gathered.ptr, count, dtype).Wait().ok());
    const auto host = gathered.Host();
    for (int r = 0; r < n(); ++r) {
      EXPECT_EQ(Compare(dtype, Input(dtype, ReduceOp::kSum, r, count, 5),
                        host.data() + r * count * elem, count),
                "");
    }
    DeviceBuffer rs_in(Input(dtype, ReduceOp::kSum, rank, n() * count, 6)), rs_out(count * elem);
    ASSERT_TRUE(
        comm.ReduceScatter(rs_in.ptr, rs_out.ptr, count, dtype, ReduceOp::kSum).Wait().ok());
    EXPECT_EQ(Compare(dtype, Expected(dtype, ReduceOp::kSum, n(), count, 6, rank * count),
                      rs_out.Host().data(), count),
              "");
    if (n() >= 2) {
      const int next = (rank + 1) % n(), prev = (rank + n() - 1) % n();
      DeviceBuffer got(count * elem);
      if (rank % 2 == 0) {
        comm.Send(in.ptr, count, dtype, next, 7);
        comm.Recv(got.ptr, count, dtype, prev, 7);
      } else {
        comm.Recv(got.ptr, count, dtype, prev, 7);
        comm.Send(in.ptr, count, dtype, next, 7);
      }
      ASSERT_TRUE(comm.WaitAll().ok());
      EXPECT_EQ(
          Compare(dtype, Input(dtype, ReduceOp::kSum, prev, count, 5), got.Host().data(), count),
          "");
    }
    EXPECT_TRUE(comm.Barrier().Wait().ok());
  });
}

TEST_F(NcclTest, SchedulesRefuseDeviceBuffersAndMismatchesAreCaught) {
  RunRanks([&](int rank, Communicator& comm) {
    DeviceBuffer buf(64 * sizeof(float));
    Status ring = comm.AllReduce(buf.ptr, buf.ptr, 16, DataType::kFloat32, ReduceOp::kSum,
                                 CallOptions{Algorithm::kRing})
                      .Wait();
    EXPECT_EQ(ring.code(), StatusCode::kUnimplemented) << ring.ToString();
    EXPECT_NE(ring.message().find("nccl"), std::string::npos) << ring.message();
    if (n() < 2) return;
    Status s =
        comm.AllReduce(buf.ptr, buf.ptr, rank == 1 ? 12 : 10, DataType::kFloat32, ReduceOp::kSum)
            .Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("rank 1 called AllReduce(count=12"), std::string::npos)
        << s.message();
  });
}

TEST(NcclSetup, BadDeviceListsAreRejected) {
  if (CudaDeviceCount() == 0) LOOM_SKIP_WITHOUT_GPU("no CUDA device visible");
  EXPECT_FALSE(CreateNcclTransports({0, 0}).ok());
  EXPECT_FALSE(CreateNcclTransports({CudaDeviceCount()}).ok());
  EXPECT_FALSE(CreateNcclTransports({}).ok());
}

}  // namespace
}  // namespace loom::collective
