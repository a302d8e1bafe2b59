#include "collective/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace loom::collective {
namespace {

TEST(Half, EveryBitPatternRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << h;
      continue;
    }
    EXPECT_EQ(FloatToHalf(f), h) << "bits " << h;
  }
}

TEST(Half, KnownValuesAndRounding) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // rounds to infinity
  EXPECT_EQ(FloatToHalf(1e-8f), 0x0000);     // below half the smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1.0).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
}

template <typename T>
std::vector<T> ReduceBoth(DataType dtype, ReduceOp op, std::vector<T> a, const std::vector<T>& b) {
  std::vector<T> out(a.size());
  Reduce(Reduction{dtype, op}, out.data(), a.data(), b.data(), a.size());
  // In place gives the same.
  Reduce(Reduction{dtype, op}, a.data(), a.data(), b.data(), a.size());
  EXPECT_EQ(a, out);
  return out;
}

TEST(Reduce, EveryOpOnEveryType) {
  EXPECT_EQ(ReduceBoth<float>(DataType::kFloat32, ReduceOp::kSum, {1, 2, -3}, {4, 5, 6}),
            (std::vector<float>{5, 7, 3}));
  EXPECT_EQ(ReduceBoth<double>(DataType::kFloat64, ReduceOp::kProd, {1, 2, -3}, {4, 5, 6}),
            (std::vector<double>{4, 10, -18}));
  EXPECT_EQ(ReduceBoth<int32_t>(DataType::kInt32, ReduceOp::kMax, {1, 7, -3}, {4, 5, -6}),
            (std::vector<int32_t>{4, 7, -3}));
  EXPECT_EQ(ReduceBoth<int64_t>(DataType::kInt64, ReduceOp::kMin, {1, 7, -3}, {4, 5, -6}),
            (std::vector<int64_t>{1, 5, -6}));
  EXPECT_EQ(ReduceBoth<int32_t>(DataType::kInt32, ReduceOp::kAvg, {1, 7, -3}, {4, 5, -6}),
            (std::vector<int32_t>{5, 12, -9}));  // avg reduces like sum
  // Integer overflow wraps instead of being undefined.
  EXPECT_EQ(ReduceBoth<int32_t>(DataType::kInt32, ReduceOp::kSum,
                                {std::numeric_limits<int32_t>::max()}, {1}),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min()}));
  const std::vector<uint16_t> a = {FloatToHalf(1.5f), FloatToHalf(-2.0f)};
  const std::vector<uint16_t> b = {FloatToHalf(2.0f), FloatToHalf(0.25f)};
  EXPECT_EQ(ReduceBoth<uint16_t>(DataType::kFloat16, ReduceOp::kSum, a, b),
            (std::vector<uint16_t>{FloatToHalf(3.5f), FloatToHalf(-1.75f)}));
  EXPECT_EQ(ReduceBoth<uint16_t>(DataType::kFloat16, ReduceOp::kMax, a, b),
            (std::vector<uint16_t>{FloatToHalf(2.0f), FloatToHalf(0.25f)}));
}

TEST(Reduce, LongHalfBuffersCrossBlockBoundaries) {
  std::vector<uint16_t> a(1000), b(1000), out(1000);
  for (int i = 0; i < 1000; ++i) {
    a[i] = FloatToHalf(static_cast<float>(i % 50));
    b[i] = FloatToHalf(static_cast<float>(i % 7));
  }
  Reduce(Reduction{DataType::kFloat16, ReduceOp::kSum}, out.data(), a.data(), b.data(), 1000);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(HalfToFloat(out[i]), static_cast<float>(i % 50 + i % 7));
}

TEST(Finalize, AvgDividesOthersDoNothing) {
  std::vector<float> f = {6, 3};
  Finalize(Reduction{DataType::kFloat32, ReduceOp::kAvg}, f.data(), 2, 4);
  EXPECT_EQ(f, (std::vector<float>{1.5f, 0.75f}));
  std::vector<int64_t> i = {7, -7};
  Finalize(Reduction{DataType::kInt64, ReduceOp::kAvg}, i.data(), 2, 2);
  EXPECT_EQ(i, (std::vector<int64_t>{3, -3}));  // truncates toward zero
  Finalize(Reduction{DataType::kInt64, ReduceOp::kSum}, i.data(), 2, 2);
  EXPECT_EQ(i, (std::vector<int64_t>{3, -3}));
  std::vector<uint16_t> h = {FloatToHalf(3.0f)};
  Finalize(Reduction{DataType::kFloat16, ReduceOp::kAvg}, h.data(), 1, 2);
  EXPECT_EQ(HalfToFloat(h[0]), 1.5f);
}

TEST(Types, NamesRoundTrip) {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kTree, Algorithm::kMultiTree,
                      Algorithm::kStar, Algorithm::kNative}) {
    auto parsed = ParseAlgorithm(AlgorithmName(a));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, a);
  }
  EXPECT_EQ(ParseAlgorithm("rings").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DataTypeSize(DataType::kFloat16), 2u);
}

}  // namespace
}  // namespace loom::collective
