#include "framework/cpu_threads.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "operators/math/blas.h"

namespace loom {
namespace {

int ThreadsOfThisProcess() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++n;
  }
  return n;
}

// C = A · B on the BLAS library, checked against a plain triple loop.
void ExpectGemmRight(int n) {
  std::vector<float> a(n * n), b(n * n), c(n * n, -1.0f);
  for (int i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>((i * 7) % 13) - 6;
    b[i] = static_cast<float>((i * 5) % 11) - 5;
  }
  ops::Gemm<float>(false, false, n, n, n, a.data(), b.data(), c.data());
  for (int i = 0; i < n; i += 17) {
    for (int j = 0; j < n; j += 13) {
      double want = 0;
      for (int k = 0; k < n; ++k) want += double(a[i * n + k]) * b[k * n + j];
      ASSERT_NEAR(c[i * n + j], want, 1e-3 * (1 + std::fabs(want))) << i << "," << j;
    }
  }
}

TEST(CpuThreads, ReleasedBlasThreadsStopAndTheNextGemmStartsThemAgain) {
  // A GEMM large enough to run on the pool, so that it exists before the release.
  ScopedBlasThreads two(2);
  ExpectGemmRight(384);
  const int before = ThreadsOfThisProcess();
  if (!ReleaseBlasThreads()) GTEST_SKIP() << "this BLAS has no thread pool to stop";
  const int after = ThreadsOfThisProcess();
  // OpenBLAS with 2 threads keeps one pool thread beside the caller (none where it runs on one
  // core or was limited to one thread when it loaded).
  if (BlasThreads() > 1) EXPECT_LT(after, before) << "threads before " << before;
  EXPECT_LE(after, before);
  // Released, BLAS still computes, on a pool started again on demand; twice over.
  ExpectGemmRight(384);
  EXPECT_TRUE(ReleaseBlasThreads());
  ExpectGemmRight(384);
}

}  // namespace
}  // namespace loom
