// The CUDA P2P transport: Loom's schedules (ring, tree, multi_tree, star, direct) on device
// buffers, against the host reference. With one GPU the ranks are virtual devices on it (own
// streams and buffers); with several GPUs one group also spans all of them. Skips, saying why,
// without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <thread>

#include "collective/transport/cuda_p2p.h"
#include "tests/collective/test_util.h"
#include "tests/gpu_required.h"

namespace loom::collective {
namespace {

using testing::Compare;
using testing::Expected;
using testing::Input;

// A device copy of a host buffer on `device`, freed at scope exit.
struct DeviceBuffer {
  DeviceBuffer(int device, size_t bytes) : device(device), bytes(bytes) {
    cudaSetDevice(device);
    cudaMalloc(&ptr, std::max<size_t>(bytes, 1));
    cudaMemset(ptr, 0, std::max<size_t>(bytes, 1));
  }
  DeviceBuffer(int device, const std::vector<unsigned char>& host)
      : DeviceBuffer(device, host.size()) {
    cudaMemcpy(ptr, host.data(), host.size(), cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() {
    cudaSetDevice(device);
    cudaFree(ptr);
  }
  std::vector<unsigned char> Host() const {
    std::vector<unsigned char> out(bytes);
    cudaMemcpy(out.data(), ptr, bytes, cudaMemcpyDeviceToHost);
    return out;
  }
  int device;
  void* ptr = nullptr;
  size_t bytes;
};

std::vector<int> OnOneGpu(int n) { return std::vector<int>(n, 0); }

void RunRanks(const std::vector<int>& devices, std::vector<std::unique_ptr<Communicator>>& comms,
              const std::function<void(int, int, Communicator&)>& fn) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(devices[r]);
      fn(static_cast<int>(r), devices[r], *comms[r]);
    });
  }
  for (auto& t : threads) t.join();
}

std::vector<std::unique_ptr<Communicator>> Make(const std::vector<int>& devices,
                                                size_t chunk_bytes = size_t{1} << 20) {
  CommunicatorOptions options;
  options.pipeline_chunk_bytes = chunk_bytes;
  auto comms = CreateCudaP2PCommunicators(devices, options);
  EXPECT_TRUE(comms.ok()) << comms.status().ToString();
  return comms.ok() ? std::move(comms).value() : std::vector<std::unique_ptr<Communicator>>{};
}

class CudaP2P : public ::testing::TestWithParam<std::tuple<Algorithm, int>> {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) {
      LOOM_SKIP_WITHOUT_GPU("no CUDA device visible: the CUDA P2P transport tests need a GPU");
    }
  }
};

TEST_P(CudaP2P, AllReduceEveryCountDtypeAndOp) {
  const auto [algorithm, n] = GetParam();
  const std::vector<int> devices = OnOneGpu(n);
  auto comms = Make(devices);
  ASSERT_EQ(static_cast<int>(comms.size()), n);
  RunRanks(devices, comms, [&](int rank, int device, Communicator& comm) {
    int salt = 0;
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, (size_t{1} << 20) + 3}) {
      for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                             DataType::kInt32, DataType::kInt64}) {
        for (ReduceOp op :
             {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
          ++salt;
          DeviceBuffer in(device, Input(dtype, op, rank, count, salt));
          DeviceBuffer out(device, in.bytes);
          const bool in_place = salt % 2 == 0;
          DeviceBuffer& dst = in_place ? in : out;
          Status s =
              comm.AllReduce(in.ptr, dst.ptr, count, dtype, op, CallOptions{algorithm}).Wait();
          ASSERT_TRUE(s.ok()) << s.ToString();
          EXPECT_EQ(Compare(dtype, Expected(dtype, op, n, count, salt), dst.Host().data(), count),
                    "")
              << "rank " << rank << " count " << count << " " << DataTypeName(dtype) << " "
              << ReduceOpName(op);
        }
      }
    }
  });
}

TEST_P(CudaP2P, RootedGatherScatterAndManyInFlight) {
  const auto [algorithm, n] = GetParam();
  const std::vector<int> devices = OnOneGpu(n);
  auto comms = Make(devices, 64 << 10);  // small pieces: pipelined steps
  ASSERT_EQ(static_cast<int>(comms.size()), n);
  const CallOptions opts{algorithm};
  RunRanks(devices, comms, [&](int rank, int device, Communicator& comm) {
    const size_t count = 100003;
    const DataType dtype = DataType::kFloat32;
    const size_t bytes = count * DataTypeSize(dtype);
    for (int root = 0; root < n && AlgorithmSupports(algorithm, Collective::kReduce); ++root) {
      DeviceBuffer in(device, Input(dtype, ReduceOp::kAvg, rank, count, root));
      DeviceBuffer out(device, bytes);
      ASSERT_TRUE(
          comm.Reduce(in.ptr, out.ptr, count, dtype, ReduceOp::kAvg, root, opts).Wait().ok());
      if (rank == root) {
        EXPECT_EQ(Compare(dtype, Expected(dtype, ReduceOp::kAvg, n, count, root), out.Host().data(),
                          count),
                  "");
      }
      ASSERT_TRUE(comm.Broadcast(in.ptr, out.ptr, count, dtype, root, opts).Wait().ok());
      EXPECT_EQ(
          Compare(dtype, Input(dtype, ReduceOp::kAvg, root, count, root), out.Host().data(), count),
          "");
    }
    if (AlgorithmSupports(algorithm, Collective::kAllGather)) {
      DeviceBuffer in(device, Input(dtype, ReduceOp::kSum, rank, count, 9));
      DeviceBuffer all(device, n * bytes);
      ASSERT_TRUE(comm.AllGather(in.ptr, all.ptr, count, dtype, opts).Wait().ok());
      const auto host = all.Host();
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(Compare(dtype, Input(dtype, ReduceOp::kSum, r, count, 9), host.data() + r * bytes,
                          count),
                  "");
      }
    }
    if (AlgorithmSupports(algorithm, Collective::kReduceScatter)) {
      DeviceBuffer in(device, Input(dtype, ReduceOp::kSum, rank, n * count, 10));
      DeviceBuffer out(device, bytes);
      ASSERT_TRUE(
          comm.ReduceScatter(in.ptr, out.ptr, count, dtype, ReduceOp::kSum, opts).Wait().ok());
      EXPECT_EQ(Compare(dtype, Expected(dtype, ReduceOp::kSum, n, count, 10, rank * count),
                        out.Host().data(), count),
                "");
    }
    // 50 allreduces in flight before one wait.
    std::vector<std::unique_ptr<DeviceBuffer>> bufs;
    for (int i = 0; i < 50; ++i) {
      bufs.push_back(std::make_unique<DeviceBuffer>(
          device, Input(DataType::kFloat16, ReduceOp::kSum, rank, 1000 + i, 20 + i)));
      comm.AllReduce(bufs[i]->ptr, bufs[i]->ptr, 1000 + i, DataType::kFloat16, ReduceOp::kSum,
                     opts);
    }
    ASSERT_TRUE(comm.WaitAll().ok());
    for (int i = 0; i < 50; ++i) {
      EXPECT_EQ(Compare(DataType::kFloat16,
                        Expected(DataType::kFloat16, ReduceOp::kSum, n, 1000 + i, 20 + i),
                        bufs[i]->Host().data(), 1000 + i),
                "")
          << "call " << i;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Algorithms, CudaP2P,
                         ::testing::Combine(::testing::Values(Algorithm::kRing, Algorithm::kTree,
                                                              Algorithm::kMultiTree,
                                                              Algorithm::kStar, Algorithm::kDirect),
                                            ::testing::Values(1, 2, 3, 4, 5, 8)),
                         [](const ::testing::TestParamInfo<CudaP2P::ParamType>& info) {
                           return std::string(AlgorithmName(std::get<0>(info.param))) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(CudaP2PSetup, EveryGpuOfTheMachineAndPointToPoint) {
  const int gpus = CudaDeviceCount();
  if (gpus == 0) LOOM_SKIP_WITHOUT_GPU("no CUDA device visible");
  // All GPUs, plus a second virtual device on GPU 0 so even one GPU gives two ranks.
  std::vector<int> devices;
  for (int d = 0; d < gpus; ++d) devices.push_back(d);
  devices.push_back(0);
  const int n = static_cast<int>(devices.size());
  auto topology = DetectCudaTopology(devices);
  ASSERT_TRUE(topology.ok()) << topology.status().ToString();
  EXPECT_EQ(topology->weight(0, n - 1), 3) << "two ranks on one GPU share its memory";
  auto comms = Make(devices);
  ASSERT_EQ(static_cast<int>(comms.size()), n);
  RunRanks(devices, comms, [&](int rank, int device, Communicator& comm) {
    const size_t count = 70001;
    const DataType dtype = DataType::kFloat64;
    DeviceBuffer buf(device, Input(dtype, ReduceOp::kSum, rank, count, 4));
    ASSERT_TRUE(comm.AllReduce(buf.ptr, buf.ptr, count, dtype, ReduceOp::kSum).Wait().ok());
    EXPECT_EQ(
        Compare(dtype, Expected(dtype, ReduceOp::kSum, n, count, 4), buf.Host().data(), count), "");
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    DeviceBuffer mine(device, Input(dtype, ReduceOp::kSum, rank, count, 5)), got(device, count * 8);
    // Point-to-point calls run in issue order: alternate who sends first (an odd ring's last
    // rank receives first too, so every send meets a posted receive).
    if (rank % 2 == 0 && rank != n - 1) {
      comm.Send(mine.ptr, count, dtype, next, 1);
      comm.Recv(got.ptr, count, dtype, prev, 1);
    } else {
      comm.Recv(got.ptr, count, dtype, prev, 1);
      comm.Send(mine.ptr, count, dtype, next, 1);
    }
    ASSERT_TRUE(comm.WaitAll().ok());
    EXPECT_EQ(
        Compare(dtype, Input(dtype, ReduceOp::kSum, prev, count, 5), got.Host().data(), count), "");
    // A mismatch is caught before any data moves.
    Status s = comm.AllReduce(buf.ptr, buf.ptr, rank == 1 ? 12 : 10, dtype, ReduceOp::kSum).Wait();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  });
}

TEST(CudaP2PSetup, BadDeviceListsAreRejected) {
  if (CudaDeviceCount() == 0) {
    auto t = CreateCudaP2PTransports({0});
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition) << t.status().ToString();
    LOOM_SKIP_WITHOUT_GPU("no CUDA device visible (checked: creating a group fails cleanly)");
  }
  EXPECT_FALSE(CreateCudaP2PTransports({}).ok());
  EXPECT_FALSE(CreateCudaP2PTransports({CudaDeviceCount()}).ok());
  EXPECT_FALSE(CreateCudaP2PTransports({-1}).ok());
}

}  // namespace
}  // namespace loom::collective
