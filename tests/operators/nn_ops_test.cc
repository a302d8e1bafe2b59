// Forward vs naive references and numeric gradient checks of the CNN, normalization, dropout
// and embedding operators: conv2d, pool2d, batch_norm, layer_norm, dropout, lookup_table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "framework/verifier.h"
#include "op_test_util.h"

namespace loom::testing {
namespace {

constexpr double kEps64 = 1e-6, kRtol64 = 1e-5, kAtol64 = 1e-7;
constexpr double kEps32 = 1e-2, kRtol32 = 5e-3, kAtol32 = 5e-3;

void ExpectNear(const Tensor& got, const std::vector<double>& want, double tol) {
  std::vector<double> g = Values(got);
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol) << "element " << i;
}

void ExpectContains(const Status& st, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(st.ok());
  for (const char* p : parts)
    EXPECT_NE(st.message().find(p), std::string::npos) << "'" << p << "' not in: " << st.message();
}

// Values that are pairwise at least 0.01 apart (no ties for max pooling, even after a
// finite-difference nudge), in random order.
Tensor Distinct(DDim dims, uint32_t seed) {
  Tensor t(proto::FP64, dims);
  std::vector<int64_t> order(t.numel());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  double* p = t.mutable_data<double>(Place::CPU());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = 0.02 * static_cast<double>(order[i]) - 1.0;
  return t;
}

// ---------------------------------------------------------------- conv2d

struct ConvCase {
  DDim input, filter;
  std::vector<int> strides, paddings, dilations;
  int groups;
};

std::vector<double> ConvRef(const ConvCase& c, const std::vector<double>& x,
                            const std::vector<double>& w, int64_t ho, int64_t wo) {
  int64_t n = c.input[0], ch = c.input[1], h = c.input[2], wd = c.input[3];
  int64_t m = c.filter[0], cg = c.filter[1], kh = c.filter[2], kw = c.filter[3];
  int64_t mg = m / c.groups;
  std::vector<double> out(n * m * ho * wo, 0);
  for (int64_t s = 0; s < n; ++s)
    for (int64_t oc = 0; oc < m; ++oc)
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow) {
          double acc = 0;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                int64_t y = oh * c.strides[0] - c.paddings[0] + i * c.dilations[0];
                int64_t xx = ow * c.strides[1] - c.paddings[1] + j * c.dilations[1];
                if (y < 0 || y >= h || xx < 0 || xx >= wd) continue;
                int64_t in_c = (oc / mg) * cg + ic;
                acc +=
                    w[((oc * cg + ic) * kh + i) * kw + j] * x[((s * ch + in_c) * h + y) * wd + xx];
              }
          out[((s * m + oc) * ho + oh) * wo + ow] = acc;
        }
  return out;
}

void RunConvCase(const ConvCase& c, DataType dt, bool check_grad) {
  bool f64 = dt == proto::FP64;
  Tensor x = Random(dt, c.input, 11), w = Random(dt, c.filter, 12);
  OpTest t("conv2d");
  t.Input("Input", x)
      .Input("Filter", w)
      .Output("Output")
      .Attr("strides", c.strides)
      .Attr("paddings", c.paddings)
      .Attr("dilations", c.dilations)
      .Attr("groups", c.groups);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  int64_t ho =
      (c.input[2] + 2 * c.paddings[0] - (c.dilations[0] * (c.filter[2] - 1) + 1)) / c.strides[0] +
      1;
  int64_t wo =
      (c.input[3] + 2 * c.paddings[1] - (c.dilations[1] * (c.filter[3] - 1) + 1)) / c.strides[1] +
      1;
  EXPECT_EQ(out.value()["Output"].dims(), (DDim{c.input[0], c.filter[0], ho, wo}));
  ExpectNear(out.value()["Output"], ConvRef(c, Values(x), Values(w), ho, wo), f64 ? 1e-12 : 1e-4);
  if (check_grad) {
    EXPECT_EQ(t.CheckGrad("Output", f64 ? kEps64 : kEps32, f64 ? kRtol64 : kRtol32,
                          f64 ? kAtol64 : kAtol32),
              "");
  }
}

TEST(ConvTest, StridePaddingDilationGroupsForwardAndGrad) {
  RunConvCase({DDim{1, 4, 7, 7}, DDim{6, 2, 3, 3}, {2, 2}, {1, 1}, {2, 2}, 2}, proto::FP64, true);
}

TEST(ConvTest, AsymmetricAttrsBatchForwardAndGrad) {
  RunConvCase({DDim{2, 3, 6, 5}, DDim{2, 3, 2, 3}, {1, 2}, {0, 2}, {2, 1}, 1}, proto::FP64, true);
}

TEST(ConvTest, OneByOneFastPathForwardAndGrad) {
  RunConvCase({DDim{2, 4, 3, 3}, DDim{4, 2, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 2}, proto::FP64, true);
}

TEST(ConvTest, Fp32ForwardAndGrad) {
  RunConvCase({DDim{2, 2, 5, 5}, DDim{3, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1}, proto::FP32, true);
  RunConvCase({DDim{3, 6, 9, 8}, DDim{6, 2, 3, 3}, {2, 1}, {1, 0}, {1, 2}, 3}, proto::FP32, false);
}

// conv2d_transpose: every input pixel scatters its filter into the output.
struct ConvTCase {
  DDim input, filter;  // [N, Cin, H, W], [Cin, Cout / groups, kh, kw]
  std::vector<int> strides, paddings, dilations, output_size;
  int groups;
};

void RunConvTransposeCase(const ConvTCase& c, DataType dt, bool check_grad) {
  const bool f64 = dt == proto::FP64;
  Tensor x = Random(dt, c.input, 13), w = Random(dt, c.filter, 14);
  OpTest t("conv2d_transpose");
  t.Input("Input", x)
      .Input("Filter", w)
      .Output("Output")
      .Attr("strides", c.strides)
      .Attr("paddings", c.paddings)
      .Attr("dilations", c.dilations)
      .Attr("output_size", c.output_size)
      .Attr("groups", c.groups);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const int64_t n = c.input[0], ci = c.input[1], h = c.input[2], wd = c.input[3];
  const int64_t cog = c.filter[1], kh = c.filter[2], kw = c.filter[3];
  const int64_t co = cog * c.groups, cig = ci / c.groups;
  int64_t size[2];
  for (int a = 0; a < 2; ++a)
    size[a] = c.output_size.empty() ? (c.input[2 + a] - 1) * c.strides[a] - 2 * c.paddings[a] +
                                          c.dilations[a] * (c.filter[2 + a] - 1) + 1
                                    : c.output_size[a];
  const int64_t ho = size[0], wo = size[1];
  EXPECT_EQ(out.value()["Output"].dims(), (DDim{n, co, ho, wo}));
  std::vector<double> xv = Values(x), wv = Values(w), want(n * co * ho * wo, 0);
  for (int64_t s = 0; s < n; ++s)
    for (int64_t ic = 0; ic < ci; ++ic)
      for (int64_t ih = 0; ih < h; ++ih)
        for (int64_t iw = 0; iw < wd; ++iw)
          for (int64_t oc = 0; oc < cog; ++oc)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t oh = ih * c.strides[0] - c.paddings[0] + i * c.dilations[0];
                const int64_t ow = iw * c.strides[1] - c.paddings[1] + j * c.dilations[1];
                if (oh < 0 || oh >= ho || ow < 0 || ow >= wo) continue;
                const int64_t out_c = (ic / cig) * cog + oc;
                want[((s * co + out_c) * ho + oh) * wo + ow] +=
                    xv[((s * ci + ic) * h + ih) * wd + iw] *
                    wv[((ic * cog + oc) * kh + i) * kw + j];
              }
  ExpectNear(out.value()["Output"], want, f64 ? 1e-12 : 1e-4);
  if (check_grad)
    EXPECT_EQ(t.CheckGrad("Output", f64 ? kEps64 : kEps32, f64 ? kRtol64 : kRtol32,
                          f64 ? kAtol64 : kAtol32),
              "");
}

TEST(ConvTransposeTest, StridePaddingDilationGroupsForwardAndGrad) {
  RunConvTransposeCase({DDim{2, 4, 3, 4}, DDim{4, 3, 3, 2}, {2, 1}, {1, 0}, {1, 2}, {}, 2},
                       proto::FP64, true);
}

TEST(ConvTransposeTest, OutputSizeAndFp32) {
  // output_size one more than the smallest (allowed up to stride - 1 more).
  RunConvTransposeCase({DDim{1, 2, 3, 3}, DDim{2, 2, 4, 4}, {2, 2}, {1, 1}, {1, 1}, {7, 7}, 1},
                       proto::FP64, true);
  RunConvTransposeCase({DDim{2, 16, 4, 4}, DDim{16, 8, 4, 4}, {2, 2}, {1, 1}, {1, 1}, {}, 1},
                       proto::FP32, true);
}

TEST(ConvTransposeTest, BadShapesNameTheInputs) {
  OpTest t("conv2d_transpose");
  t.Input("Input", Random(proto::FP64, DDim{1, 3, 4, 4}, 1))
      .Input("Filter", Random(proto::FP64, DDim{2, 2, 3, 3}, 2))
      .Output("Output");
  ExpectContains(VerifyProgram(t.BuildProgram()),
                 {"conv2d_transpose", "channel mismatch", "Input_in", "Filter_in"});
  OpTest o("conv2d_transpose");
  o.Input("Input", Random(proto::FP64, DDim{1, 2, 4, 4}, 1))
      .Input("Filter", Random(proto::FP64, DDim{2, 2, 3, 3}, 2))
      .Output("Output")
      .Attr("strides", std::vector<int>{2, 2})
      .Attr("output_size", std::vector<int>{12, 9});
  ExpectContains(VerifyProgram(o.BuildProgram()), {"output_size[0] = 12", "[9, 11)"});
}

TEST(ConvTest, InfersShapeWithUnknownBatch) {
  OpTest t("conv2d");
  t.Input("Input", Random(proto::FP32, DDim{1, 4, 7, 7}, 1))
      .Input("Filter", Random(proto::FP32, DDim{6, 2, 3, 3}, 2))
      .Output("Output")
      .Attr("strides", std::vector<int>{2, 2})
      .Attr("paddings", std::vector<int>{1, 1})
      .Attr("groups", 2);
  ProgramDesc p = t.BuildProgram();
  p.GlobalBlock()->FindVar("Input_in").SetDims({-1, 4, 7, 7});
  ASSERT_TRUE(InferShapes(p.GlobalBlock()).ok());
  EXPECT_EQ(p.GlobalBlock()->FindVar("Output_out").Dims(), (DDim{-1, 6, 4, 4}));
}

TEST(ConvTest, ChannelMismatchIsAClearError) {
  OpTest t("conv2d");
  t.Input("Input", Random(proto::FP32, DDim{1, 3, 5, 5}, 1))
      .Input("Filter", Random(proto::FP32, DDim{2, 2, 3, 3}, 2))
      .Output("Output");
  ExpectContains(VerifyProgram(t.BuildProgram()),
                 {"conv2d", "channel", "Input_in", "Filter_in", "[1, 3, 5, 5]", "[2, 2, 3, 3]"});
  // Channels not divisible by groups.
  OpTest g("conv2d");
  g.Input("Input", Random(proto::FP32, DDim{1, 3, 5, 5}, 1))
      .Input("Filter", Random(proto::FP32, DDim{2, 1, 3, 3}, 2))
      .Output("Output")
      .Attr("groups", 2);
  ExpectContains(VerifyProgram(g.BuildProgram()), {"conv2d", "groups", "Input_in"});
}

TEST(ConvTest, EmptyOutputAndBadAttrsAreErrors) {
  OpTest t("conv2d");
  t.Input("Input", Random(proto::FP32, DDim{1, 1, 3, 3}, 1))
      .Input("Filter", Random(proto::FP32, DDim{1, 1, 3, 3}, 2))
      .Output("Output")
      .Attr("dilations", std::vector<int>{2, 2});
  ExpectContains(VerifyProgram(t.BuildProgram()), {"conv2d", "empty", "Input_in", "dilation"});
  OpTest s("conv2d");
  s.Input("Input", Random(proto::FP32, DDim{1, 1, 3, 3}, 1))
      .Input("Filter", Random(proto::FP32, DDim{1, 1, 3, 3}, 2))
      .Output("Output")
      .Attr("strides", std::vector<int>{1});
  ExpectContains(VerifyProgram(s.BuildProgram()), {"conv2d", "strides", "2 values"});
}

// ---------------------------------------------------------------- pool2d

struct PoolCase {
  std::string type;
  DDim x;
  std::vector<int> ksize, strides, paddings;
  bool global, ceil_mode, exclusive;
};

std::vector<double> PoolRef(const PoolCase& c, const std::vector<double>& x, int64_t ho,
                            int64_t wo) {
  int64_t planes = c.x[0] * c.x[1], h = c.x[2], w = c.x[3];
  int64_t kh = c.global ? h : c.ksize[0], kw = c.global ? w : c.ksize[1];
  int64_t sh = c.global ? 1 : c.strides[0], sw = c.global ? 1 : c.strides[1];
  int64_t ph = c.global ? 0 : c.paddings[0], pw = c.global ? 0 : c.paddings[1];
  std::vector<double> out;
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oh = 0; oh < ho; ++oh)
      for (int64_t ow = 0; ow < wo; ++ow) {
        double mx = -1e300, sum = 0;
        int64_t inside = 0;
        for (int64_t i = 0; i < kh; ++i)
          for (int64_t j = 0; j < kw; ++j) {
            int64_t y = oh * sh - ph + i, xx = ow * sw - pw + j;
            if (y < 0 || y >= h || xx < 0 || xx >= w) continue;
            double v = x[(pl * h + y) * w + xx];
            mx = std::max(mx, v);
            sum += v;
            ++inside;
          }
        if (c.type == "max")
          out.push_back(mx);
        else
          out.push_back(sum / static_cast<double>(c.exclusive ? inside : kh * kw));
      }
  return out;
}

class PoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(PoolTest, ForwardAndGrad) {
  const PoolCase& c = GetParam();
  Tensor x = Distinct(c.x, 21);
  OpTest t("pool2d");
  t.Input("X", x)
      .Output("Out")
      .Attr("pooling_type", c.type)
      .Attr("ksize", c.ksize)
      .Attr("strides", c.strides)
      .Attr("paddings", c.paddings)
      .Attr("global_pooling", c.global)
      .Attr("ceil_mode", c.ceil_mode)
      .Attr("exclusive", c.exclusive);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  int64_t ho = 1, wo = 1;
  if (!c.global) {
    auto size = [&](int64_t in, int a) {
      int64_t span = in + 2 * c.paddings[a] - c.ksize[a];
      return (c.ceil_mode ? (span + c.strides[a] - 1) / c.strides[a] : span / c.strides[a]) + 1;
    };
    ho = size(c.x[2], 0), wo = size(c.x[3], 1);
  }
  EXPECT_EQ(out.value()["Out"].dims(), (DDim{c.x[0], c.x[1], ho, wo}));
  ExpectNear(out.value()["Out"], PoolRef(c, Values(x), ho, wo), 1e-12);
  EXPECT_EQ(t.CheckGrad("Out", kEps64, kRtol64, kAtol64), "");
}

INSTANTIATE_TEST_SUITE_P(
    Pool2D, PoolTest,
    ::testing::Values(
        PoolCase{"max", DDim{2, 2, 7, 7}, {3, 3}, {2, 2}, {1, 1}, false, false, true},
        PoolCase{"avg", DDim{2, 2, 7, 7}, {3, 3}, {2, 2}, {1, 1}, false, false, true},
        PoolCase{"avg", DDim{2, 2, 7, 7}, {3, 3}, {2, 2}, {1, 1}, false, false, false},
        PoolCase{"max", DDim{1, 3, 6, 5}, {2, 3}, {1, 2}, {0, 1}, false, false, true},
        PoolCase{"max", DDim{2, 3, 4, 5}, {-1, -1}, {1, 1}, {0, 0}, true, false, true},
        PoolCase{"avg", DDim{2, 3, 4, 5}, {1, 1}, {1, 1}, {0, 0}, true, false, true},
        PoolCase{"max", DDim{1, 2, 5, 5}, {2, 2}, {2, 2}, {0, 0}, false, true, true},
        PoolCase{"avg", DDim{1, 2, 6, 6}, {3, 3}, {2, 2}, {0, 0}, false, true, true},
        PoolCase{"avg", DDim{1, 2, 6, 6}, {3, 3}, {2, 2}, {1, 1}, false, true, false},
        // 2x2 at stride 2 (the fast path), with an odd row / column left out of every window.
        PoolCase{"max", DDim{2, 3, 5, 7}, {2, 2}, {2, 2}, {0, 0}, false, false, true},
        PoolCase{"avg", DDim{2, 3, 6, 5}, {2, 2}, {2, 2}, {0, 0}, false, false, false},
        PoolCase{"avg", DDim{1, 2, 4, 4}, {2, 2}, {2, 2}, {0, 0}, false, true, true}));

// Max pooling skips NaNs the same way on the 2x2 path as on the general one: a window's
// result is the largest of its numbers wherever the NaN sits.
TEST(PoolOpTest, TwoByTwoMaxSkipsNaNLikeTheGeneralPath) {
  const double nan = std::nan("");
  Tensor x(proto::FP64, DDim{1, 1, 2, 6});
  double* p = x.mutable_data<double>(Place::CPU());
  const double rows[2][6] = {{nan, 1, 1, nan, nan, nan}, {2, 3, 2, 3, nan, 5}};
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 6; ++c) p[r * 6 + c] = rows[r][c];
  for (int k : {2, 3}) {  // ksize 3 with stride 2 over rows 0-1 takes the general path
    OpTest t("pool2d");
    t.Input("X", x)
        .Output("Out")
        .Attr("ksize", std::vector<int>{2, k})
        .Attr("strides", std::vector<int>{2, 2});
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    std::vector<double> got = Values(out.value()["Out"]);
    if (k == 2) {
      EXPECT_EQ(got, (std::vector<double>{3, 3, 5}));
    } else {  // windows of width 3 at columns 0 and 2: {nan,1,1,2,3,2} and {1,nan,nan,2,3,nan}
      EXPECT_EQ(got, (std::vector<double>{3, 3}));
    }
  }
}

// Inputs large enough to be split over threads (planes in several ranges), for the 2x2 path
// and the general window path: forward against the reference, gradient against the rule
// (max: the whole output gradient to the window's maximum; avg: an equal share to each).
TEST(PoolOpTest, LargeInputsForwardAndGrad) {
  for (const PoolCase& c :
       {PoolCase{"max", DDim{4, 24, 30, 30}, {2, 2}, {2, 2}, {0, 0}, false, false, true},
        PoolCase{"avg", DDim{4, 24, 30, 30}, {2, 2}, {2, 2}, {0, 0}, false, false, true},
        PoolCase{"max", DDim{4, 24, 30, 30}, {3, 3}, {3, 3}, {0, 0}, false, false, true}}) {
    SCOPED_TRACE(c.type + " k" + std::to_string(c.ksize[0]));
    Tensor x = Distinct(c.x, 8);
    OpTest t("pool2d");
    t.Input("X", x)
        .Output("Out")
        .Attr("pooling_type", c.type)
        .Attr("ksize", c.ksize)
        .Attr("strides", c.strides);
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const int64_t k = c.ksize[0], ho = 30 / k, wo = 30 / k;
    ExpectNear(out.value()["Out"], PoolRef(c, Values(x), ho, wo), 1e-12);
    Tensor seed = Random(proto::FP64, out.value()["Out"].dims(), 9);
    auto grads = t.AnalyticGrads("Out", seed);
    ASSERT_TRUE(grads.ok()) << grads.status().ToString();
    std::vector<double> xv = Values(x), sv = Values(seed), want(xv.size(), 0.0);
    for (int64_t pl = 0; pl < 4 * 24; ++pl)
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow) {
          const double gv = sv[(pl * ho + oh) * wo + ow];
          int64_t best = -1;
          for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < k; ++j) {
              int64_t at = (pl * 30 + oh * k + i) * 30 + ow * k + j;
              if (c.type == "avg")
                want[at] += gv / double(k * k);
              else if (best < 0 || xv[at] > xv[best])
                best = at;
            }
          if (best >= 0) want[best] += gv;
        }
    ExpectNear(grads.value()[0], want, 1e-12);
  }
}

TEST(PoolOpTest, Fp32Forward) {
  PoolCase c{"max", DDim{2, 2, 6, 6}, {2, 2}, {2, 2}, {0, 0}, false, false, true};
  Tensor x64 = Distinct(c.x, 3);
  Tensor x(proto::FP32, c.x);
  std::vector<double> v = Values(x64);
  for (int64_t i = 0; i < x.numel(); ++i)
    x.mutable_data<float>(Place::CPU())[i] = static_cast<float>(v[i]);
  OpTest t("pool2d");
  t.Input("X", x).Output("Out").Attr("ksize", c.ksize).Attr("strides", c.strides);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ExpectNear(out.value()["Out"], PoolRef(c, Values(x), 3, 3), 0);
  EXPECT_EQ(t.CheckGrad("Out", kEps32, kRtol32, kAtol32), "");
}

// Compile-time shape inference over unknown (-1) dims.
DDim InferredDims(OpTest& t, const std::string& in_var, DDim declared, const std::string& out_var) {
  ProgramDesc p = t.BuildProgram();
  p.GlobalBlock()->FindVar(in_var).SetDims(declared);
  Status st = InferShapes(p.GlobalBlock());
  EXPECT_TRUE(st.ok()) << st.ToString();
  return p.GlobalBlock()->FindVar(out_var).Dims();
}

TEST(PoolOpTest, InfersShapeWithUnknownDims) {
  OpTest t("pool2d");
  t.Input("X", Random(proto::FP32, DDim{2, 2, 7, 7}, 1))
      .Output("Out")
      .Attr("ksize", std::vector<int>{3, 3})
      .Attr("strides", std::vector<int>{2, 2})
      .Attr("paddings", std::vector<int>{1, 1});
  EXPECT_EQ(InferredDims(t, "X_in", DDim{-1, 2, -1, 7}, "Out_out"), (DDim{-1, 2, -1, 4}));
  t.Attr("global_pooling", true);
  EXPECT_EQ(InferredDims(t, "X_in", DDim{-1, 2, -1, -1}, "Out_out"), (DDim{-1, 2, 1, 1}));
}

TEST(PoolOpTest, BadPoolingTypeIsAClearError) {
  OpTest t("pool2d");
  t.Input("X", Random(proto::FP32, DDim{1, 1, 4, 4}, 1))
      .Output("Out")
      .Attr("pooling_type", std::string("min"))
      .Attr("ksize", std::vector<int>{2, 2});
  ExpectContains(VerifyProgram(t.BuildProgram()),
                 {"pool2d", "pooling_type", "'min'", "'max'", "'avg'"});
}

TEST(PoolOpTest, WindowLargerThanInputIsAnError) {
  OpTest t("pool2d");
  t.Input("X", Random(proto::FP32, DDim{1, 1, 2, 2}, 1))
      .Output("Out")
      .Attr("ksize", std::vector<int>{3, 3});
  ExpectContains(VerifyProgram(t.BuildProgram()), {"pool2d", "empty", "X_in", "[1, 1, 2, 2]"});
}

// ---------------------------------------------------------------- batch_norm

struct BnRef {
  std::vector<double> y, mean, var;  // var: biased batch variance
};

BnRef BatchNormRef(const DDim& dims, const std::vector<double>& x, const std::vector<double>& sc,
                   const std::vector<double>& b, double eps) {
  int64_t n = dims[0], c = dims[1], inner = dims.product(2, dims.size());
  BnRef r{std::vector<double>(x.size()), std::vector<double>(c, 0), std::vector<double>(c, 0)};
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t s = 0; s < n; ++s)
      for (int64_t i = 0; i < inner; ++i) r.mean[ch] += x[(s * c + ch) * inner + i];
    r.mean[ch] /= static_cast<double>(n * inner);
    for (int64_t s = 0; s < n; ++s)
      for (int64_t i = 0; i < inner; ++i) {
        double d = x[(s * c + ch) * inner + i] - r.mean[ch];
        r.var[ch] += d * d;
      }
    r.var[ch] /= static_cast<double>(n * inner);
    for (int64_t s = 0; s < n; ++s)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t k = (s * c + ch) * inner + i;
        r.y[k] = (x[k] - r.mean[ch]) / std::sqrt(r.var[ch] + eps) * sc[ch] + b[ch];
      }
  }
  return r;
}

OpTest BatchNormOp(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& mean,
                   const Tensor& var) {
  OpTest t("batch_norm");
  t.Input("X", x)
      .Input("Scale", scale)
      .Input("Bias", bias)
      .Input("Mean", mean, /*no_grad=*/true)
      .Input("Variance", var, /*no_grad=*/true)
      .Output("Y")
      .Output("MeanOut")
      .Output("VarianceOut")
      .Output("SavedMean")
      .Output("SavedVariance");
  return t;
}

TEST(BatchNormTest, TrainForwardMovingStatsAndGrad) {
  for (DDim dims : {DDim{2, 3, 2, 2}, DDim{5, 3}}) {
    Tensor x = Random(proto::FP64, dims, 31, -2, 2), scale = Random(proto::FP64, DDim{3}, 32);
    Tensor bias = Random(proto::FP64, DDim{3}, 33), mean = Random(proto::FP64, DDim{3}, 34);
    Tensor var = Random(proto::FP64, DDim{3}, 35, 0.5, 2);
    OpTest t = BatchNormOp(x, scale, bias, mean, var);
    t.Attr("momentum", 0.8f).Attr("epsilon", 1e-3f);
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    auto& o = out.value();
    BnRef ref = BatchNormRef(dims, Values(x), Values(scale), Values(bias), 1e-3);
    ExpectNear(o["Y"], ref.y, 1e-9);
    std::vector<double> want_mean, want_var, inv_std;
    std::vector<double> m0 = Values(mean), v0 = Values(var);
    const double mom = static_cast<double>(0.8f);
    for (int c = 0; c < 3; ++c) {
      want_mean.push_back(mom * m0[c] + (1 - mom) * ref.mean[c]);
      want_var.push_back(mom * v0[c] + (1 - mom) * ref.var[c]);
      inv_std.push_back(1 / std::sqrt(ref.var[c] + 1e-3));
    }
    ExpectNear(o["MeanOut"], want_mean, 1e-12);
    ExpectNear(o["VarianceOut"], want_var, 1e-12);
    ExpectNear(o["SavedMean"], ref.mean, 1e-12);
    ExpectNear(o["SavedVariance"], inv_std, 1e-7);
    EXPECT_EQ(t.CheckGrad("Y", kEps64, kRtol64, kAtol64), "") << dims.ToString();
  }
}

TEST(BatchNormTest, Fp32TrainForwardAndGrad) {
  Tensor x = Random(proto::FP32, DDim{4, 2, 3, 3}, 41, -2, 2);
  OpTest t =
      BatchNormOp(x, Random(proto::FP32, DDim{2}, 42), Random(proto::FP32, DDim{2}, 43),
                  Random(proto::FP32, DDim{2}, 44), Random(proto::FP32, DDim{2}, 45, 0.5, 2));
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(t.CheckGrad("Y", kEps32, 2e-2, 2e-2), "");
}

TEST(BatchNormTest, TestModeUsesMovingStats) {
  DDim dims{2, 3, 2, 2};
  Tensor x = Random(proto::FP64, dims, 51), scale = Random(proto::FP64, DDim{3}, 52);
  Tensor bias = Random(proto::FP64, DDim{3}, 53), mean = Random(proto::FP64, DDim{3}, 54);
  Tensor var = Random(proto::FP64, DDim{3}, 55, 0.5, 2);
  OpTest t = BatchNormOp(x, scale, bias, mean, var);
  t.Attr("is_test", true);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> xv = Values(x), sv = Values(scale), bv = Values(bias), mv = Values(mean),
                      vv = Values(var), want;
  for (size_t k = 0; k < xv.size(); ++k) {
    size_t c = (k / 4) % 3;
    want.push_back((xv[k] - mv[c]) / std::sqrt(vv[c] + 1e-5) * sv[c] + bv[c]);
  }
  ExpectNear(out.value()["Y"], want, 1e-9);
  ExpectNear(out.value()["MeanOut"], mv, 0);
  ExpectNear(out.value()["VarianceOut"], vv, 0);
  // With fixed statistics the op is affine in X, Scale and Bias.
  EXPECT_EQ(t.CheckGrad("Y", kEps64, kRtol64, kAtol64), "");
}

TEST(BatchNormTest, MovingStatsUpdateInPlace) {
  Tensor x = Random(proto::FP64, DDim{4, 2}, 61);
  Tensor mean = Random(proto::FP64, DDim{2}, 62), var = Random(proto::FP64, DDim{2}, 63, 0.5, 2);
  OpTest t =
      BatchNormOp(x, Random(proto::FP64, DDim{2}, 64), Random(proto::FP64, DDim{2}, 65), mean, var);
  ProgramDesc p = t.BuildProgram();
  BlockDesc* b = p.GlobalBlock();
  b->Op(0).SetOutput("MeanOut", {"Mean_in"});
  b->Op(0).SetOutput("VarianceOut", {"Variance_in"});
  b->FindVar("Mean_in").SetPersistable(true);
  b->FindVar("Variance_in").SetPersistable(true);
  ASSERT_TRUE(VerifyProgram(p).ok()) << VerifyProgram(p).ToString();
  Scope scope;
  TensorCopy(mean, Place::CPU(), scope.Var("Mean_in")->GetMutable<Tensor>());
  TensorCopy(var, Place::CPU(), scope.Var("Variance_in")->GetMutable<Tensor>());
  FeedMap feeds = t.Feeds();
  feeds.erase("Mean_in");
  feeds.erase("Variance_in");
  Executor exe;
  BnRef ref = BatchNormRef(DDim{4, 2}, Values(x), {1, 1}, {0, 0}, 1e-5);
  std::vector<double> m = Values(mean), v = Values(var);
  for (int step = 0; step < 2; ++step) {
    std::vector<Tensor> fetched;
    Status st = exe.Run(p, &scope, feeds, {"Mean_in", "Variance_in"}, &fetched);
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (int c = 0; c < 2; ++c) {
      // The momentum attribute is a float: 0.9f, not 0.9.
      const double mom = static_cast<double>(0.9f);
      m[c] = mom * m[c] + (1 - mom) * ref.mean[c];
      v[c] = mom * v[c] + (1 - mom) * ref.var[c];
    }
    ExpectNear(fetched[0], m, 1e-12);
    ExpectNear(fetched[1], v, 1e-12);
  }
}

TEST(BatchNormTest, InfersShapeWithUnknownDims) {
  Tensor c3 = Random(proto::FP32, DDim{3}, 2);
  OpTest t = BatchNormOp(Random(proto::FP32, DDim{2, 3, 4, 4}, 1), c3, c3, c3, c3);
  EXPECT_EQ(InferredDims(t, "X_in", DDim{-1, 3, -1, -1}, "Y_out"), (DDim{-1, 3, -1, -1}));
  EXPECT_EQ(InferredDims(t, "X_in", DDim{-1, 3, -1, -1}, "SavedMean_out"), DDim{3});
}

TEST(BatchNormTest, RejectsOtherLayoutsAndBadShapes) {
  Tensor x = Random(proto::FP32, DDim{2, 3, 2, 2}, 1);
  Tensor c3 = Random(proto::FP32, DDim{3}, 2), c4 = Random(proto::FP32, DDim{4}, 3);
  OpTest t = BatchNormOp(x, c3, c3, c3, c3);
  t.Attr("data_layout", std::string("NHWC"));
  ExpectContains(VerifyProgram(t.BuildProgram()), {"batch_norm", "data_layout", "NHWC", "NCHW"});
  OpTest u = BatchNormOp(x, c4, c3, c3, c3);
  ExpectContains(VerifyProgram(u.BuildProgram()), {"batch_norm", "Scale_in", "[4]", "X_in"});
}

// ---------------------------------------------------------------- layer_norm

TEST(LayerNormTest, ForwardAndGrad) {
  DDim dims{2, 3, 4};
  for (int axis : {1, 2}) {
    for (bool affine : {true, false}) {
      int64_t left = dims.product(0, axis), right = dims.product(axis, 3);
      Tensor x = Random(proto::FP64, dims, 71, -2, 2);
      Tensor scale = Random(proto::FP64, DDim{right}, 72);
      Tensor bias = Random(proto::FP64, DDim{right}, 73);
      OpTest t("layer_norm");
      t.Input("X", x);
      if (affine) t.Input("Scale", scale).Input("Bias", bias);
      t.Output("Y")
          .Output("Mean")
          .Output("Variance")
          .Attr("begin_norm_axis", axis)
          .Attr("epsilon", 1e-4f);
      auto out = t.Forward();
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      std::vector<double> xv = Values(x), sv = Values(scale), bv = Values(bias), y, mean, var;
      for (int64_t r = 0; r < left; ++r) {
        double mu = 0, sq = 0;
        for (int64_t j = 0; j < right; ++j) mu += xv[r * right + j];
        mu /= static_cast<double>(right);
        for (int64_t j = 0; j < right; ++j) sq += std::pow(xv[r * right + j] - mu, 2);
        double v = sq / static_cast<double>(right);
        for (int64_t j = 0; j < right; ++j) {
          double n = (xv[r * right + j] - mu) / std::sqrt(v + 1e-4);
          y.push_back(affine ? n * sv[j] + bv[j] : n);
        }
        mean.push_back(mu);
        var.push_back(v);
      }
      EXPECT_EQ(out.value()["Mean"].dims(), DDim{left});
      ExpectNear(out.value()["Y"], y, 1e-9);
      ExpectNear(out.value()["Mean"], mean, 1e-12);
      ExpectNear(out.value()["Variance"], var, 1e-12);
      EXPECT_EQ(t.CheckGrad("Y", kEps64, kRtol64, kAtol64), "")
          << "axis " << axis << " affine " << affine;
    }
  }
}

TEST(LayerNormTest, Fp32Grad) {
  OpTest t("layer_norm");
  t.Input("X", Random(proto::FP32, DDim{3, 5}, 81, -2, 2))
      .Input("Scale", Random(proto::FP32, DDim{5}, 82))
      .Input("Bias", Random(proto::FP32, DDim{5}, 83))
      .Output("Y")
      .Output("Mean")
      .Output("Variance");
  EXPECT_EQ(t.CheckGrad("Y", kEps32, 2e-2, 2e-2), "");
}

TEST(LayerNormTest, InfersShapeWithUnknownDims) {
  OpTest t("layer_norm");
  t.Input("X", Random(proto::FP32, DDim{2, 3, 4}, 1))
      .Output("Y")
      .Output("Mean")
      .Output("Variance")
      .Attr("begin_norm_axis", 2);
  EXPECT_EQ(InferredDims(t, "X_in", DDim{-1, 3, 4}, "Y_out"), (DDim{-1, 3, 4}));
  EXPECT_EQ(InferredDims(t, "X_in", DDim{-1, 3, 4}, "Mean_out"), DDim{-1});
}

TEST(LayerNormTest, BadScaleSizeAndAxisAreErrors) {
  OpTest t("layer_norm");
  t.Input("X", Random(proto::FP32, DDim{2, 3, 4}, 1))
      .Input("Scale", Random(proto::FP32, DDim{4}, 2))
      .Output("Y")
      .Output("Mean")
      .Output("Variance");
  ExpectContains(VerifyProgram(t.BuildProgram()), {"layer_norm", "Scale_in", "12", "X_in"});
  OpTest a("layer_norm");
  a.Input("X", Random(proto::FP32, DDim{2, 3}, 1))
      .Output("Y")
      .Output("Mean")
      .Output("Variance")
      .Attr("begin_norm_axis", 2);
  ExpectContains(VerifyProgram(a.BuildProgram()), {"layer_norm", "begin_norm_axis", "X_in"});
}

// ---------------------------------------------------------------- dropout

OpTest DropoutOp(const Tensor& x, float p, int seed, const std::string& impl, bool is_test) {
  OpTest t("dropout");
  t.Input("X", x)
      .Output("Out")
      .Output("Mask")
      .Attr("dropout_prob", p)
      .Attr("seed", seed)
      .Attr("dropout_implementation", impl)
      .Attr("is_test", is_test);
  return t;
}

TEST(DropoutTest, MaskStatisticsAndScaling) {
  Tensor x = Random(proto::FP32, DDim{200, 100}, 91, 0.5, 1.5);
  std::vector<double> xv = Values(x);
  for (const char* impl : {"downgrade_in_infer", "upscale_in_train"}) {
    auto out = DropoutOp(x, 0.3f, 7, impl, false).Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    std::vector<double> o = Values(out.value()["Out"]), m = Values(out.value()["Mask"]);
    EXPECT_EQ(out.value()["Mask"].dims(), x.dims());
    EXPECT_EQ(out.value()["Mask"].dtype(), proto::FP32);
    double scale = std::string(impl) == "upscale_in_train" ? 1 / 0.7 : 1;
    int64_t dropped = 0;
    for (size_t i = 0; i < o.size(); ++i) {
      ASSERT_TRUE(m[i] == 0 || m[i] == 1) << m[i];
      dropped += m[i] == 0;
      ASSERT_NEAR(o[i], xv[i] * m[i] * scale, 1e-5);
    }
    double frac = static_cast<double>(dropped) / static_cast<double>(o.size());
    EXPECT_NEAR(frac, 0.3, 0.02) << impl;  // about 6 standard deviations
  }
}

TEST(DropoutTest, SeedMakesTheMaskReproducible) {
  Tensor x = Random(proto::FP64, DDim{50, 20}, 92);
  auto mask = [&](int seed) {
    auto out = DropoutOp(x, 0.5f, seed, "downgrade_in_infer", false).Forward();
    EXPECT_TRUE(out.ok());
    return Values(out.value()["Mask"]);
  };
  EXPECT_EQ(mask(5), mask(5));
  EXPECT_NE(mask(5), mask(6));
  EXPECT_NE(mask(0), mask(0));  // seed 0: a fresh stream every run
}

TEST(DropoutTest, IsTestScalesOrPassesThrough) {
  Tensor x = Random(proto::FP64, DDim{4, 5}, 93);
  std::vector<double> xv = Values(x), scaled;
  for (double v : xv) scaled.push_back(v * 0.75);
  auto down = DropoutOp(x, 0.25f, 0, "downgrade_in_infer", true).Forward();
  ASSERT_TRUE(down.ok()) << down.status().ToString();
  ExpectNear(down.value()["Out"], scaled, 1e-12);
  auto up = DropoutOp(x, 0.25f, 0, "upscale_in_train", true).Forward();
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  ExpectNear(up.value()["Out"], xv, 0);
}

TEST(DropoutTest, GradIsMaskTimesOutGrad) {
  Tensor x = Random(proto::FP64, DDim{6, 7}, 94);
  for (const char* impl : {"downgrade_in_infer", "upscale_in_train"})
    EXPECT_EQ(DropoutOp(x, 0.4f, 3, impl, false).CheckGrad("Out", kEps64, kRtol64, kAtol64), "")
        << impl;
  // The grad op itself: X@GRAD = Mask * Out@GRAD.
  Tensor mask(proto::FP64, DDim{2, 3});
  std::vector<double> mv = {1, 0, 0, 1, 1, 0};
  std::copy(mv.begin(), mv.end(), mask.mutable_data<double>(Place::CPU()));
  Tensor g = Random(proto::FP64, DDim{2, 3}, 95);
  OpTest t("dropout_grad");
  t.Input("Mask", mask).Input("Out@GRAD", g).Output("X@GRAD").Attr("dropout_prob", 0.4f);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> gv = Values(g), want;
  for (size_t i = 0; i < gv.size(); ++i) want.push_back(gv[i] * mv[i]);
  ExpectNear(out.value()["X@GRAD"], want, 0);
}

TEST(DropoutTest, BadImplementationIsAnError) {
  OpTest t = DropoutOp(Random(proto::FP32, DDim{2, 2}, 1), 0.5f, 0, "always", false);
  ExpectContains(VerifyProgram(t.BuildProgram()),
                 {"dropout", "dropout_implementation", "'always'", "upscale_in_train"});
}

// ---------------------------------------------------------------- lookup_table

TEST(LookupTableTest, ForwardPaddingRowsAndGrad) {
  Tensor w = Random(proto::FP64, DDim{5, 3}, 101);
  std::vector<int64_t> ids = {1, 3, 1, 4, 2, 1};
  OpTest t("lookup_table");
  t.Input("W", w).Input("Ids", Ints(DDim{6, 1}, ids)).Output("Out").Attr("padding_idx", 2);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dims(), (DDim{6, 3}));
  std::vector<double> wv = Values(w), want;
  for (int64_t id : ids)
    for (int j = 0; j < 3; ++j) want.push_back(id == 2 ? 0 : wv[id * 3 + j]);
  ExpectNear(out.value()["Out"], want, 0);
  EXPECT_EQ(t.CheckGrad("Out", kEps64, kRtol64, kAtol64), "");
}

TEST(LookupTableTest, GradScatterAddsRepeatedIds) {
  Tensor w = Random(proto::FP64, DDim{5, 2}, 102);
  std::vector<int64_t> ids = {1, 3, 1, 4, 2, 1};
  Tensor g = Random(proto::FP64, DDim{6, 2}, 103);
  OpTest t("lookup_table_grad");
  t.Input("W", w)
      .Input("Ids", Ints(DDim{6, 1}, ids))
      .Input("Out@GRAD", g)
      .Output("W@GRAD")
      .Attr("padding_idx", 2);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> gv = Values(g), want(10, 0);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] != 2)
      for (int j = 0; j < 2; ++j) want[ids[i] * 2 + j] += gv[i * 2 + j];
  ExpectNear(out.value()["W@GRAD"], want, 1e-15);
  EXPECT_EQ(Values(out.value()["W@GRAD"])[0], 0);  // id 0 never looked up
}

TEST(LookupTableTest, OneDimIdsFp32) {
  Tensor w = Random(proto::FP32, DDim{4, 3}, 104);
  OpTest t("lookup_table");
  t.Input("W", w).Input("Ids", Ints(DDim{3}, {3, 0, 3})).Output("Out");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dims(), (DDim{3, 3}));
  std::vector<double> wv = Values(w), want;
  for (int id : {3, 0, 3})
    for (int j = 0; j < 3; ++j) want.push_back(wv[id * 3 + j]);
  ExpectNear(out.value()["Out"], want, 0);
  EXPECT_EQ(t.CheckGrad("Out", kEps32, kRtol32, kAtol32), "");
}

TEST(LookupTableTest, InfersShapeWithUnknownBatch) {
  OpTest t("lookup_table");
  t.Input("W", Random(proto::FP32, DDim{5, 4}, 1))
      .Input("Ids", Ints(DDim{3, 1}, {0, 1, 2}))
      .Output("Out");
  EXPECT_EQ(InferredDims(t, "Ids_in", DDim{-1, 1}, "Out_out"), (DDim{-1, 4}));
  EXPECT_EQ(InferredDims(t, "Ids_in", DDim{-1}, "Out_out"), (DDim{-1, 4}));
}

TEST(LookupTableTest, IdOutOfRangeIsAClearError) {
  OpTest t("lookup_table");
  t.Input("W", Random(proto::FP32, DDim{5, 2}, 1))
      .Input("Ids", Ints(DDim{3, 1}, {0, 7, 1}))
      .Output("Out");
  auto out = t.Forward();
  ASSERT_FALSE(out.ok());
  ExpectContains(out.status(), {"lookup_table", "id 7", "position 1", "[0, 5)"});
  OpTest neg("lookup_table");
  neg.Input("W", Random(proto::FP32, DDim{5, 2}, 1))
      .Input("Ids", Ints(DDim{2}, {-1, 1}))
      .Output("Out");
  ExpectContains(neg.Forward().status(), {"lookup_table", "id -1"});
}

TEST(LookupTableTest, BadIdsDtypeAndPaddingIdx) {
  OpTest t("lookup_table");
  t.Input("W", Random(proto::FP32, DDim{5, 2}, 1))
      .Input("Ids", Random(proto::FP32, DDim{3, 1}, 2))
      .Output("Out");
  ExpectContains(VerifyProgram(t.BuildProgram()), {"lookup_table", "Ids_in", "int64"});
  OpTest p("lookup_table");
  p.Input("W", Random(proto::FP32, DDim{5, 2}, 1))
      .Input("Ids", Ints(DDim{3, 1}, {0, 1, 2}))
      .Output("Out")
      .Attr("padding_idx", 5);
  ExpectContains(VerifyProgram(p.BuildProgram()), {"lookup_table", "padding_idx", "W_in"});
}

}  // namespace
}  // namespace loom::testing
