// Gloo's ring and halving-doubling allreduce as a peer for Loom's in-process numbers: N ranks as
// threads of one process, each with its own Gloo context, connected over Gloo's TCP transport on
// the loopback interface through an in-memory HashStore. fp32 sum in place, sizes 4 KiB..64 MiB.
// Prints one line per (algorithm, size): "RESULT gloo_<algo> <bytes> <time_us> <busbw_GBps>",
// busbw = bytes / time * 2 (N - 1) / N as nccl-tests.
//
//   collective_gloo_bench [ranks=4] [min_bytes=4096] [max_bytes=67108864]
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Iterations for about 0.3 s of work at an assumed 1 GB/s, at least 3 and at most 200.
int Iterations(size_t bytes) {
  const double guess = 0.3 / (static_cast<double>(bytes) / 1e9 + 50e-6);
  return static_cast<int>(std::max(3.0, std::min(200.0, guess)));
}

template <typename Algo>
double TimeUs(const std::shared_ptr<gloo::Context>& ctx, float* data, int count, int iters,
              std::barrier<>& sync) {
  Algo algo(ctx, std::vector<float*>{data}, count);
  algo.run();  // warm-up (and buffer registration)
  sync.arrive_and_wait();
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) algo.run();
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;
  sync.arrive_and_wait();
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 4;
  const size_t min_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 4096;
  const size_t max_bytes = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : size_t{64} << 20;
  gloo::rendezvous::HashStore store;
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  std::barrier<> sync(n);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, n);
      ctx->connectFullMesh(store, device);
      for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
        const int count = static_cast<int>(bytes / sizeof(float));
        std::vector<float> data(count, 1.0f);
        const int iters = Iterations(bytes);
        const double ring =
            TimeUs<gloo::AllreduceRing<float>>(ctx, data.data(), count, iters, sync);
        const double hd =
            TimeUs<gloo::AllreduceHalvingDoubling<float>>(ctx, data.data(), count, iters, sync);
        if (rank == 0) {
          const double factor = 2.0 * (n - 1) / n;
          std::printf("RESULT gloo_ring %zu %.1f %.3f\n", bytes, ring,
                      bytes / (ring * 1e3) * factor);
          std::printf("RESULT gloo_halving_doubling %zu %.1f %.3f\n", bytes, hd,
                      bytes / (hd * 1e3) * factor);
          std::fflush(stdout);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return 0;
}
