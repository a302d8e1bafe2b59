#include "operators/parallel.h"

#include <cstdlib>

namespace loom::ops {

int CpuThreads() {
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
