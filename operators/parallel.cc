#include "operators/parallel.h"

#include <cstdlib>

#include "framework/cpu_threads.h"

namespace loom::ops {

int DefaultThreads();

int CpuThreads() {
  // A data-parallel rank sharing the cores with other ranks uses only its share of them.
  if (int budget = ThreadBudget(); budget > 0) return std::min(budget, DefaultThreads());
  return DefaultThreads();
}

int DefaultThreads() {
  static const int threads = [] {
    if (const char* env = std::getenv("LOOM_NUM_THREADS")) {
      int v = std::atoi(env);
      if (v >= 1) return v;
    }
    unsigned hw = std::thread::hardware_concurrency();
    return static_cast<int>(std::clamp(hw, 1u, 8u));
  }();
  return threads;
}

}  // namespace loom::ops
