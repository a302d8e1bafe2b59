// The vectorizable building blocks of operators/math/vec_math.h against plain references.
#include "operators/math/vec_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace loom::ops {
namespace {

TEST(VecMathTest, ExpFMatchesStdExpOverTheSoftmaxRange) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(ExpF(x) - want) / want);
  }
  EXPECT_LT(worst, 1e-6);
  EXPECT_EQ(ExpF(0.0f), 1.0f);
}

TEST(VecMathTest, ExpShiftedClampsHugeNegativesAndKeepsNaN) {
  std::vector<float> x = {0.0f, -1.0f, -1e30f, -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> y(x.size());
  ExpShifted(x.data(), 0.0f, y.data(), static_cast<int64_t>(x.size()));
  EXPECT_FLOAT_EQ(y[0], 1.0f);
  EXPECT_NEAR(y[1], std::exp(-1.0f), 1e-7);
  EXPECT_GE(y[2], 0.0f);
  EXPECT_LT(y[2], 1e-37f);
  EXPECT_LT(y[3], 1e-37f);
  EXPECT_TRUE(std::isnan(y[4]));
}

TEST(VecMathTest, ReductionsMatchSerialSums) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int n : {0, 1, 7, 8, 9, 1000}) {
    std::vector<double> a(n), b(n);
    for (int i = 0; i < n; ++i) a[i] = u(rng), b[i] = u(rng);
    double s = 0, sq = 0, dot = 0, mx = n ? a[0] : 0;
    for (int i = 0; i < n; ++i) {
      s += a[i];
      sq += (a[i] - 0.25) * (a[i] - 0.25);
      dot += a[i] * (b[i] - 0.25);
      mx = std::max(mx, a[i]);
    }
    EXPECT_NEAR(SumOf(a.data(), n), s, 1e-12) << n;
    EXPECT_NEAR(SumSqDiff(a.data(), n, 0.25), sq, 1e-12) << n;
    double gs, gd;
    SumAndDotDiff(a.data(), b.data(), n, 0.25, &gs, &gd);
    EXPECT_NEAR(gs, s, 1e-12) << n;
    EXPECT_NEAR(gd, dot, 1e-12) << n;
    if (n) {
      EXPECT_EQ(MaxOf(a.data(), n), mx) << n;
    }
  }
}

}  // namespace
}  // namespace loom::ops
