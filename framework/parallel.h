// CPU parallelism for large kernels. ParallelFor splits [0, n) into contiguous ranges and runs
// them on up to CpuThreads() threads (the calling thread takes part), returning when all are
// done. Ranges must write disjoint memory. Work below 2 * grain items stays on the calling
// thread, so small tensors pay nothing. Worker threads must not call BLAS (OpenBLAS has its own
// threads); kernels run GEMMs on the calling thread and split the loops around them.
//
// The helpers are a process-wide pool of persistent threads (started on first use), so a call
// costs a wake-up, not a thread creation. Calls from several threads at once (data-parallel
// ranks) share the pool; a caller never waits for a range nobody has started, because it takes
// the ranges left over itself. Callable from any thread; nested calls run serially.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

namespace loom {

// Elements per range for memory-bound elementwise loops: below 2x this, one thread is faster
// than waking another.
constexpr int64_t kElementwiseGrain = 65536;

// LOOM_NUM_THREADS when set (>= 1), else the hardware threads, at most 8; within a
// data-parallel rank, at most its share of the cores (ThreadBudget).
int CpuThreads();

namespace internal {
inline thread_local bool in_parallel_region = false;
// Runs body(range(t), range(t + 1)) for t in [0, threads) on the pool and the calling thread.
void RunOnPool(int64_t n, int64_t threads, const std::function<void(int64_t, int64_t)>& body);
}  // namespace internal

template <typename F>
void ParallelFor(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  int64_t threads = std::min<int64_t>(CpuThreads(), n / std::max<int64_t>(grain, 1));
  if (threads <= 1 || internal::in_parallel_region) {
    f(int64_t{0}, n);
    return;
  }
  internal::RunOnPool(n, threads, std::function<void(int64_t, int64_t)>(std::ref(f)));
}

}  // namespace loom
