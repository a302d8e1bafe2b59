// The physical bound for CPU collectives: STREAM-like copy (a = b) and triad (a = b + s * c) over
// arrays far larger than the caches, on 1 and on all hardware threads. Prints
// "RESULT membw_<kernel>_<threads>t <GB/s>", counting bytes read + written (as STREAM).
//
//   collective_membw_bench [megabytes_per_array=256]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

double Run(int threads, size_t n, int kernel) {
  std::vector<double> a(n, 1.0), b(n, 2.0), c(n, 3.0);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t lo = n * t / threads, hi = n * (t + 1) / threads;
        if (kernel == 0) {
          for (size_t i = lo; i < hi; ++i) a[i] = b[i];
        } else {
          for (size_t i = lo; i < hi; ++i) a[i] = b[i] + 3.0 * c[i];
        }
      });
    }
    for (auto& t : pool) t.join();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double bytes = static_cast<double>(n) * sizeof(double) * (kernel == 0 ? 2 : 3);
  if (a[n / 2] < 0) std::printf("impossible\n");  // keeps the stores
  return bytes / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mb = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256;
  const size_t n = mb * (1 << 20) / sizeof(double);
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int threads : {1, all}) {
    std::printf("RESULT membw_copy_%dt %.2f\n", threads, Run(threads, n, 0));
    std::printf("RESULT membw_triad_%dt %.2f\n", threads, Run(threads, n, 1));
    if (all == 1) break;
  }
  return 0;
}
