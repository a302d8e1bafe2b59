// In-process allreduce over 4 ranks (one benchmark thread per rank), per algorithm and message
// size, reported with nccl-tests conventions: algbw = bytes / time, busbw = algbw * 2 (N - 1) / N.
//
//   collective_allreduce_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "collective/world.h"

namespace loom::collective {
namespace {

constexpr int kRanks = 4;

// Google Benchmark runs every thread for the same number of iterations and lines the threads up
// when the timed loop starts and ends, so each thread can drive one rank. Thread 0 owns the world.
std::unique_ptr<InProcessWorld> g_world;

void BM_AllReduce(benchmark::State& state, Algorithm algorithm) {
  const int rank = state.thread_index();
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / sizeof(float);
  if (rank == 0) g_world = InProcessWorld::Create(kRanks).value();
  std::vector<float> buf(count, 1.0f);
  for (auto _ : state) {
    Status s = g_world->comm(rank)
                   .AllReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum,
                              CallOptions{algorithm})
                   .Wait();
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
  }
  // Every rank reports its bytes: Google Benchmark sums counters over threads and divides rates
  // by the threads' summed time, so the per-rank rate comes out right.
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  const double factor = 2.0 * (kRanks - 1) / kRanks;
  state.counters["busbw_GBps"] = benchmark::Counter(
      static_cast<double>(bytes) * factor * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  if (rank == 0) g_world.reset();
}

#define LOOM_ALLREDUCE_BENCH(name, algorithm)      \
  BENCHMARK_CAPTURE(BM_AllReduce, name, algorithm) \
      ->RangeMultiplier(4)                         \
      ->Range(4 << 10, 64 << 20)                   \
      ->Threads(kRanks)                            \
      ->UseRealTime()                              \
      ->Unit(benchmark::kMicrosecond)

LOOM_ALLREDUCE_BENCH(ring, Algorithm::kRing);
LOOM_ALLREDUCE_BENCH(tree, Algorithm::kTree);
LOOM_ALLREDUCE_BENCH(multi_tree, Algorithm::kMultiTree);
LOOM_ALLREDUCE_BENCH(star, Algorithm::kStar);

}  // namespace
}  // namespace loom::collective

BENCHMARK_MAIN();
