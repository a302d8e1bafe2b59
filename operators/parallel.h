// CPU parallelism for large kernels. ParallelFor splits [0, n) into contiguous ranges and runs
// them on up to CpuThreads() threads (the calling thread takes the first range), returning when
// all are done. Ranges must write disjoint memory. Work below 2 * grain items stays on the
// calling thread, so small tensors pay nothing. Worker threads must not call BLAS (OpenBLAS has
// its own threads); kernels run GEMMs on the calling thread and split the loops around them.
// Callable from any thread; nested calls run serially.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace loom::ops {

// LOOM_NUM_THREADS when set (>= 1), else the hardware threads, at most 8.
int CpuThreads();

namespace internal {
inline thread_local bool in_parallel_region = false;
}

template <typename F>
void ParallelFor(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  int64_t threads = std::min<int64_t>(CpuThreads(), n / std::max<int64_t>(grain, 1));
  if (threads <= 1 || internal::in_parallel_region) {
    f(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  auto range = [n, threads](int64_t t) { return n * t / threads; };
  for (int64_t t = 1; t < threads; ++t)
    workers.emplace_back([&f, &range, t] {
      internal::in_parallel_region = true;
      f(range(t), range(t + 1));
    });
  internal::in_parallel_region = true;
  f(int64_t{0}, range(1));
  internal::in_parallel_region = false;
  for (auto& w : workers) w.join();
}

}  // namespace loom::ops
