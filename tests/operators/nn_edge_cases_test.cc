// Edge cases of the NN and reduction operators: softmax over a non-last
// axis, conv2d over several sample chunks (wide batched GEMMs), top_k's gradient, reductions
// over a middle axis / batch 1 / zero-size dims, soft-label cross_entropy, batch 1 batch_norm,
// concat with an empty input, and attribute errors that must name the op and the attribute.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "framework/verifier.h"
#include "op_test_util.h"

namespace loom::testing {
namespace {

void ExpectError(const Status& st, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(st.ok());
  for (const char* p : parts)
    EXPECT_NE(st.message().find(p), std::string::npos) << "'" << p << "' not in: " << st.message();
}

// Values pairwise >= 0.01 apart in random order (no ties for top_k / max, even after a nudge).
Tensor Distinct(DataType dt, DDim dims, uint32_t seed) {
  Tensor t = Random(dt, dims, seed);
  std::vector<int64_t> order(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = 0.01 * static_cast<double>(order[i]) - 0.005 * t.numel();
    if (dt == proto::FP64)
      t.data<double>()[i] = v;
    else
      t.data<float>()[i] = static_cast<float>(v);
  }
  return t;
}

TEST(SoftmaxAxisTest, EveryAxisForwardAndGrad) {
  const DDim dims{2, 3, 4};
  Tensor x = Random(proto::FP64, dims, 7, -2, 2);
  std::vector<double> xv = Values(x);
  for (int axis : {0, 1, 2, -2}) {
    int a = axis < 0 ? axis + 3 : axis;
    int64_t pre = dims.product(0, a), d = dims[a], post = dims.product(a + 1, 3);
    for (const char* type : {"softmax", "log_softmax"}) {
      OpTest t(type);
      t.Input("X", x).Output("Out").Attr("axis", axis);
      auto out = t.Forward();
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      std::vector<double> got = Values(out.value()["Out"]);
      for (int64_t i = 0; i < pre; ++i)
        for (int64_t k = 0; k < post; ++k) {
          double s = 0;
          for (int64_t j = 0; j < d; ++j) s += std::exp(xv[(i * d + j) * post + k]);
          for (int64_t j = 0; j < d; ++j) {
            int64_t e = (i * d + j) * post + k;
            double want =
                std::string(type) == "softmax" ? std::exp(xv[e]) / s : xv[e] - std::log(s);
            EXPECT_NEAR(got[e], want, 1e-12) << type << " axis " << axis << " at " << e;
          }
        }
      EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-8), "") << type << " axis " << axis;
    }
  }
  OpTest fp32("softmax");
  fp32.Input("X", Random(proto::FP32, DDim{1, 5, 3}, 8)).Output("Out").Attr("axis", 1);
  EXPECT_EQ(fp32.CheckGrad("Out", 1e-2, 5e-3, 5e-4), "");
}

TEST(SoftmaxAxisTest, AxisOutOfRangeNamesOpAndAxis) {
  OpTest t("softmax");
  t.Input("X", Random(proto::FP32, DDim{2, 3}, 1)).Output("Out").Attr("axis", 2);
  ExpectError(VerifyProgram(t.BuildProgram()), {"softmax", "axis 2", "out of range", "X_in"});
}

// Naive convolution for the reference (fp64, NCHW, groups, dilation, zero padding).
std::vector<double> ConvRef(const Tensor& x, const Tensor& f, int pad, int dil, int groups) {
  DDim xd = x.dims(), fd = f.dims();
  int64_t n = xd[0], c = xd[1], h = xd[2], w = xd[3], m = fd[0], kh = fd[2], kw = fd[3];
  int64_t ho = h + 2 * pad - dil * (kh - 1), wo = w + 2 * pad - dil * (kw - 1);
  int64_t cg = c / groups, mg = m / groups;
  std::vector<double> xv = Values(x), fv = Values(f), out(n * m * ho * wo, 0.0);
  for (int64_t s = 0; s < n; ++s)
    for (int64_t o = 0; o < m; ++o)
      for (int64_t ci = 0; ci < cg; ++ci)
        for (int64_t i = 0; i < kh; ++i)
          for (int64_t j = 0; j < kw; ++j) {
            double wt = fv[((o * cg + ci) * kh + i) * kw + j];
            int64_t ch = (o / mg) * cg + ci;
            for (int64_t oh = 0; oh < ho; ++oh) {
              int64_t ih = oh - pad + i * dil;
              if (ih < 0 || ih >= h) continue;
              for (int64_t ow = 0; ow < wo; ++ow) {
                int64_t iw = ow - pad + j * dil;
                if (iw < 0 || iw >= w) continue;
                out[((s * m + o) * ho + oh) * wo + ow] += wt * xv[((s * c + ch) * h + ih) * w + iw];
              }
            }
          }
  return out;
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Images big enough that the kernels lower one sample per chunk (3 chunks), and a size with
// two samples in the first chunk and one in the last. Elementwise
// finite differences would take too long here; conv is linear in each operand, so
// <Input, Input@GRAD> and <Filter, Filter@GRAD> must both equal loss = <W, Output>.
TEST(ConvChunkTest, SeveralChunksMatchNaiveConvAndBilinearIdentity) {
  struct Case {
    int64_t c, m, hw;
    int pad, dil, groups;
  };
  for (Case cs : {Case{8, 4, 110, 2, 1, 1}, Case{8, 4, 150, 3, 2, 2}, Case{8, 4, 45, 2, 1, 1}}) {
    Tensor x = Random(proto::FP64, DDim{3, cs.c, cs.hw, cs.hw}, 11);
    Tensor f = Random(proto::FP64, DDim{cs.m, cs.c / cs.groups, 5, 5}, 12);
    OpTest t("conv2d");
    t.Input("Input", x)
        .Input("Filter", f)
        .Output("Output")
        .Attr("paddings", std::vector<int>{cs.pad, cs.pad})
        .Attr("dilations", std::vector<int>{cs.dil, cs.dil})
        .Attr("groups", cs.groups);
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    std::vector<double> got = Values(out.value()["Output"]);
    std::vector<double> want = ConvRef(x, f, cs.pad, cs.dil, cs.groups);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
    EXPECT_LT(worst, 1e-9);
    Tensor w = Random(proto::FP64, out.value()["Output"].dims(), 13);
    auto grads = t.AnalyticGrads("Output", w);
    ASSERT_TRUE(grads.ok()) << grads.status().ToString();
    double loss = Dot(Values(w), got);
    EXPECT_NEAR(Dot(Values(x), Values(grads.value()[0])), loss, 1e-8 * std::abs(loss));
    EXPECT_NEAR(Dot(Values(f), Values(grads.value()[1])), loss, 1e-8 * std::abs(loss));
  }
}

TEST(ConvChunkTest, BatchOneAndZeroBatch) {
  OpTest one("conv2d");
  one.Input("Input", Random(proto::FP64, DDim{1, 4, 5, 5}, 3))
      .Input("Filter", Random(proto::FP64, DDim{4, 2, 3, 3}, 4))
      .Output("Output")
      .Attr("groups", 2)
      .Attr("strides", std::vector<int>{2, 1})
      .Attr("paddings", std::vector<int>{1, 0});
  EXPECT_EQ(one.CheckGrad("Output", 1e-6, 1e-6, 1e-8), "");
  OpTest zero("conv2d");
  zero.Input("Input", Random(proto::FP32, DDim{0, 2, 5, 5}, 3))
      .Input("Filter", Random(proto::FP32, DDim{3, 2, 3, 3}, 4))
      .Output("Output");
  auto out = zero.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Output"].dims(), (DDim{0, 3, 3, 3}));
  EXPECT_EQ(zero.CheckGrad("Output", 1e-2, 5e-3, 5e-4), "");
}

TEST(TopKTest, GradientFlowsToTheSelectedEntries) {
  OpTest t("top_k");
  t.Input("X", Distinct(proto::FP64, DDim{3, 5}, 21)).Output("Out").Output("Indices").Attr("k", 2);
  EXPECT_EQ(t.CheckGrad("Out", 1e-4, 1e-6, 1e-8), "");
  OpTest f32("top_k");
  f32.Input("X", Distinct(proto::FP32, DDim{1, 6}, 22))
      .Output("Out")
      .Output("Indices")
      .Attr("k", 6);
  EXPECT_EQ(f32.CheckGrad("Out", 1e-3, 5e-3, 5e-4), "");
}

TEST(TopKTest, KLargerThanTheLastDimIsAnError) {
  OpTest t("top_k");
  t.Input("X", Random(proto::FP32, DDim{2, 3}, 1)).Output("Out").Output("Indices").Attr("k", 4);
  Status st = VerifyProgram(t.BuildProgram());
  if (st.ok()) st = t.Forward().status();
  ExpectError(st, {"top_k", "4"});
}

TEST(ReduceCasesTest, MiddleAxisKeepDimBatchOneAndFp32Grads) {
  for (const char* type : {"reduce_sum", "reduce_mean", "reduce_max"}) {
    OpTest mid(type);
    mid.Input("X", Distinct(proto::FP64, DDim{2, 3, 4}, 5))
        .Output("Out")
        .Attr("dim", std::vector<int>{1})
        .Attr("keep_dim", true);
    auto out = mid.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out.value()["Out"].dims(), (DDim{2, 1, 4})) << type;
    EXPECT_EQ(mid.CheckGrad("Out", 1e-4, 1e-6, 1e-8), "") << type;
    OpTest one(type);
    one.Input("X", Distinct(proto::FP32, DDim{1, 4}, 6))
        .Output("Out")
        .Attr("dim", std::vector<int>{-1});
    EXPECT_EQ(one.CheckGrad("Out", 1e-3, 5e-3, 5e-4), "") << type;
    OpTest all(type);
    all.Input("X", Distinct(proto::FP64, DDim{2, 2, 3}, 7)).Output("Out").Attr("reduce_all", true);
    EXPECT_EQ(all.CheckGrad("Out", 1e-4, 1e-6, 1e-8), "") << type;
  }
}

TEST(ReduceCasesTest, ZeroSizeKeptDimAndBadDim) {
  OpTest z("reduce_sum");
  z.Input("X", Random(proto::FP64, DDim{0, 3}, 1)).Output("Out").Attr("dim", std::vector<int>{1});
  auto out = z.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dims(), (DDim{0}));
  OpTest bad("reduce_mean");
  bad.Input("X", Random(proto::FP64, DDim{2, 3}, 1)).Output("Out").Attr("dim", std::vector<int>{2});
  ExpectError(VerifyProgram(bad.BuildProgram()), {"reduce_mean", "dim"});
}

TEST(CrossEntropyCasesTest, SoftLabelGradientAndBatchOne) {
  Tensor p = Random(proto::FP64, DDim{3, 4}, 31, 0.1, 0.9);
  Tensor label = Random(proto::FP64, DDim{3, 4}, 32, 0, 1);
  OpTest soft("cross_entropy");
  soft.Input("X", p).Input("Label", label, /*no_grad=*/true).Output("Y").Attr("soft_label", true);
  auto out = soft.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> pv = Values(p), lv = Values(label), y = Values(out.value()["Y"]);
  for (int r = 0; r < 3; ++r) {
    double want = 0;
    for (int j = 0; j < 4; ++j) want -= lv[r * 4 + j] * std::log(pv[r * 4 + j]);
    EXPECT_NEAR(y[r], want, 1e-12);
  }
  EXPECT_EQ(soft.CheckGrad("Y", 1e-6, 1e-6, 1e-8), "");
  OpTest hard("cross_entropy");
  hard.Input("X", Random(proto::FP32, DDim{1, 5}, 33, 0.1, 0.9))
      .Input("Label", Ints(DDim{1, 1}, {3}))
      .Output("Y");
  EXPECT_EQ(hard.CheckGrad("Y", 1e-3, 5e-3, 5e-4), "");
}

TEST(BatchNormCasesTest, BatchOneTrainingGrad) {
  OpTest t("batch_norm");
  t.Input("X", Random(proto::FP64, DDim{1, 2, 3, 3}, 41, -2, 2))
      .Input("Scale", Random(proto::FP64, DDim{2}, 42, 0.5, 1.5))
      .Input("Bias", Random(proto::FP64, DDim{2}, 43))
      .Input("Mean", Random(proto::FP64, DDim{2}, 44), true)
      .Input("Variance", Random(proto::FP64, DDim{2}, 45, 0.5, 1.5), true)
      .Output("Y")
      .Output("MeanOut")
      .Output("VarianceOut")
      .Output("SavedMean")
      .Output("SavedVariance");
  EXPECT_EQ(t.CheckGrad("Y", 1e-6, 1e-5, 1e-8), "");
}

TEST(ConcatCasesTest, MiddleAxisWithAnEmptyInput) {
  OpTest t("concat");
  t.Inputs("X", {Random(proto::FP64, DDim{2, 3, 2}, 51), Random(proto::FP64, DDim{2, 0, 2}, 52),
                 Random(proto::FP64, DDim{2, 1, 2}, 53)})
      .Output("Out")
      .Attr("axis", 1);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dims(), (DDim{2, 4, 2}));
  EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-8), "");
}

TEST(AttrErrorTest, BadAttributesNameOpAndAttribute) {
  OpTest am("arg_max");
  am.Input("X", Random(proto::FP32, DDim{2, 3}, 1)).Output("Out").Attr("axis", 5);
  ExpectError(VerifyProgram(am.BuildProgram()), {"arg_max", "axis"});
  OpTest pool("pool2d");
  pool.Input("X", Random(proto::FP32, DDim{1, 1, 4, 4}, 1))
      .Output("Out")
      .Attr("ksize", std::vector<int>{2});
  ExpectError(VerifyProgram(pool.BuildProgram()), {"pool2d", "ksize"});
  OpTest conv("conv2d");
  conv.Input("Input", Random(proto::FP32, DDim{1, 2, 4, 4}, 1))
      .Input("Filter", Random(proto::FP32, DDim{2, 2, 3, 3}, 2))
      .Output("Output")
      .Attr("dilations", std::vector<int>{0, 1});
  ExpectError(VerifyProgram(conv.BuildProgram()), {"conv2d", "dilations"});
  OpTest drop("dropout");
  drop.Input("X", Random(proto::FP32, DDim{2, 3}, 1))
      .Output("Out")
      .Output("Mask")
      .Attr("dropout_prob", 1.5f);
  ExpectError(VerifyProgram(drop.BuildProgram()), {"dropout", "dropout_prob"});
}

}  // namespace
}  // namespace loom::testing

namespace loom::testing {
namespace {

// Larger odd shapes: the contiguous fast paths (all dims, leading, trailing, middle runs, with
// size-1 dims) and the general indexer (split runs) against a float64 reference.
TEST(ReduceCasesTest, ContiguousAndSplitRunsMatchAReference) {
  const DDim dims{3, 1, 37, 5};
  Tensor x = Random(proto::FP64, dims, 77, -1, 1);
  std::vector<double> xv = Values(x);
  for (std::vector<int> dim : std::vector<std::vector<int>>{
           {0, 1, 2, 3}, {0}, {2, 3}, {3}, {1, 2}, {2}, {0, 2}, {0, 3}, {1}}) {
    std::vector<bool> red(4, false);
    for (int d : dim) red[d] = true;
    for (const char* type : {"reduce_sum", "reduce_mean", "reduce_max"}) {
      OpTest t(type);
      t.Input("X", x).Output("Out").Attr("dim", dim).Attr("keep_dim", true);
      auto out = t.Forward();
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      const Tensor& o = out.value()["Out"];
      std::map<int64_t, std::vector<double>> groups;
      for (int64_t a = 0; a < 3; ++a)
        for (int64_t c = 0; c < 37; ++c)
          for (int64_t d = 0; d < 5; ++d) {
            int64_t oa = red[0] ? 0 : a, oc = red[2] ? 0 : c, od = red[3] ? 0 : d;
            int64_t key = (oa * (red[2] ? 1 : 37) + oc) * (red[3] ? 1 : 5) + od;
            groups[key].push_back(xv[(a * 37 + c) * 5 + d]);
          }
      ASSERT_EQ(o.numel(), static_cast<int64_t>(groups.size())) << type;
      for (const auto& [key, vals] : groups) {
        double want = std::string(type) == "reduce_max"
                          ? *std::max_element(vals.begin(), vals.end())
                          : std::accumulate(vals.begin(), vals.end(), 0.0);
        if (std::string(type) == "reduce_mean") want /= vals.size();
        EXPECT_NEAR(o.data<double>()[key], want, 1e-12) << type << " key " << key;
      }
      if (dim.size() < 4) {
        EXPECT_EQ(t.CheckGrad("Out", 1e-4, 1e-6, 1e-8), "") << type;
      }
    }
  }
}

}  // namespace
}  // namespace loom::testing
