// Loom's hierarchical allreduce (collective/hierarchical.h) under mpirun: each process runs
// PLACES places (threads over the in-process transport) and its place 0 allreduces across the
// processes over MPI. fp32 sum, 1 MiB..64 MiB; rank 0 prints
// "RESULT hierarchical <bytes> <time_us> <busbw_GBps>" with busbw over every place of the job
// (nccl-tests' definition: bytes / time * 2 (n - 1) / n, n = processes x places).
//
//   mpirun -np 2 collective_hierarchical_bench [places=2] [min_bytes] [max_bytes]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "collective/hierarchical.h"
#include "collective/transport/mpi.h"
#include "collective/world.h"

using namespace loom::collective;

int main(int argc, char** argv) {
  if (!MpiInit(&argc, &argv).ok()) return 1;
  const int places = argc > 1 ? std::atoi(argv[1]) : 2;
  const size_t min_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : size_t{1} << 20;
  const size_t max_bytes = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : size_t{64} << 20;
  auto global = CreateMpiCommunicator();
  auto world = InProcessWorld::Create(places);
  if (!global.ok() || !world.ok()) {
    std::fprintf(stderr, "setup failed\n");
    return 1;
  }
  const int rank = MpiWorldRank(), procs = MpiWorldSize(), n = procs * places;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const size_t count = bytes / sizeof(float);
    std::vector<std::vector<float>> data(places, std::vector<float>(count, 1.0f));
    const int iters = static_cast<int>(std::max(3.0, std::min(100.0, 0.3 / (bytes / 1e9 + 50e-6))));
    double us = 0;
    for (int round = 0; round < 2; ++round) {  // a warm-up round, then the timed one
      MPI_Barrier(MPI_COMM_WORLD);
      auto start = std::chrono::steady_clock::now();
      std::vector<std::thread> threads;
      std::vector<loom::Status> st(places);
      for (int p = 0; p < places; ++p)
        threads.emplace_back([&, p] {
          for (int i = 0; i < (round ? iters : 1) && st[p].ok(); ++i)
            st[p] = HierarchicalAllReduce(world.value()->comm(p), p == 0 ? global->get() : nullptr,
                                          data[p].data(), data[p].data(), count, DataType::kFloat32,
                                          ReduceOp::kSum);
        });
      for (auto& t : threads) t.join();
      for (const auto& s : st)
        if (!s.ok()) {
          std::fprintf(stderr, "rank %d: %s\n", rank, s.message().c_str());
          return 1;
        }
      us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
               .count() /
           (round ? iters : 1);
    }
    MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
      std::printf("RESULT hierarchical %zu %.1f %.3f\n", bytes, us,
                  bytes / (us * 1e3) * 2.0 * (n - 1) / n);
      std::fflush(stdout);
    }
  }
  global->reset();
  world->reset();
  return MpiFinalize().ok() ? 0 : 1;
}
