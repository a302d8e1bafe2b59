// The direct fp32 conv2d kernels (operators/nn/conv2d_direct.h): output, input gradient and
// filter gradient against a float64 reference over geometries that reach every path (tile
// tails, channel padding, several channel blocks, groups, strides, dilations, kernel widths
// with and without an unrolled kernel, input-gradient padding), and the conv2d op itself with
// the direct kernels against the same op with LOOM_CONV_ALGO=im2col.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "op_test_util.h"
#include "operators/nn/conv2d_direct.h"

namespace loom::testing {
namespace {

using ops::ConvGeom;

struct Case {
  int64_t n, c, h, w, m, kh, kw;
  int64_t sh, sw, ph, pw, dh, dw, groups;
};

ConvGeom Geom(const Case& k) {
  ConvGeom g{};
  g.n = k.n, g.c = k.c, g.h = k.h, g.w = k.w, g.m = k.m, g.kh = k.kh, g.kw = k.kw;
  g.sh = k.sh, g.sw = k.sw, g.ph = k.ph, g.pw = k.pw, g.dh = k.dh, g.dw = k.dw;
  g.groups = k.groups, g.cg = k.c / k.groups, g.mg = k.m / k.groups;
  g.ho = ops::ConvOutSize(k.h, k.kh, k.ph, k.sh, k.dh);
  g.wo = ops::ConvOutSize(k.w, k.kw, k.pw, k.sw, k.dw);
  return g;
}

std::vector<float> Rand(int64_t size, uint32_t seed) {
  std::vector<float> v(size);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : v) x = u(rng);
  return v;
}

// out, dx and dw of loss = sum(out * dout) in float64, straight from the definition.
struct Ref {
  std::vector<double> out, dx, dw;
};
Ref Reference(const ConvGeom& g, const std::vector<float>& x, const std::vector<float>& w,
              const std::vector<float>& dout) {
  Ref r{std::vector<double>(g.n * g.m * g.P()), std::vector<double>(x.size()),
        std::vector<double>(w.size())};
  for (int64_t s = 0; s < g.n; ++s)
    for (int64_t o = 0; o < g.m; ++o)
      for (int64_t y = 0; y < g.ho; ++y)
        for (int64_t z = 0; z < g.wo; ++z) {
          const int64_t oi = ((s * g.m + o) * g.ho + y) * g.wo + z;
          double acc = 0;
          for (int64_t ci = 0; ci < g.cg; ++ci)
            for (int64_t i = 0; i < g.kh; ++i)
              for (int64_t j = 0; j < g.kw; ++j) {
                int64_t iy = y * g.sh - g.ph + i * g.dh, iz = z * g.sw - g.pw + j * g.dw;
                if (iy < 0 || iy >= g.h || iz < 0 || iz >= g.w) continue;
                int64_t xi = ((s * g.c + (o / g.mg) * g.cg + ci) * g.h + iy) * g.w + iz;
                int64_t wi = ((o * g.cg + ci) * g.kh + i) * g.kw + j;
                acc += double(x[xi]) * w[wi];
                r.dx[xi] += double(dout[oi]) * w[wi];
                r.dw[wi] += double(dout[oi]) * x[xi];
              }
          r.out[oi] = acc;
        }
  return r;
}

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1;
  for (double v : want) scale = std::max(scale, std::abs(v));
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i)
    if (!(std::abs(got[i] - want[i]) <= 2e-5 * scale)) {
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << ", want " << want[i];
      ++bad;
    }
}

std::string Describe(const Case& k) {
  return "x [" + std::to_string(k.n) + ", " + std::to_string(k.c) + ", " + std::to_string(k.h) +
         ", " + std::to_string(k.w) + "], w [" + std::to_string(k.m) + ", " +
         std::to_string(k.c / k.groups) + ", " + std::to_string(k.kh) + ", " +
         std::to_string(k.kw) + "], stride " + std::to_string(k.sh) + "x" + std::to_string(k.sw) +
         ", pad " + std::to_string(k.ph) + "x" + std::to_string(k.pw) + ", dilation " +
         std::to_string(k.dh) + "x" + std::to_string(k.dw) + ", groups " + std::to_string(k.groups);
}

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      // n, c, h, w, m, kh, kw, sh, sw, ph, pw, dh, dw, groups
      {2, 32, 14, 14, 64, 5, 5, 1, 1, 2, 2, 1, 1, 1},  // the CNN's second layer, 4 blocks
      {3, 1, 9, 11, 32, 5, 5, 1, 1, 2, 2, 1, 1, 1},    // first layer shape: 25 taps
      {1, 16, 7, 6, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1},    // 24 = one full block + half a block
      {2, 12, 5, 8, 12, 3, 2, 1, 1, 0, 1, 1, 1, 1},    // 12 channels: 4 padding lanes
      {2, 32, 8, 9, 32, 3, 3, 2, 2, 1, 1, 1, 1, 2},    // stride 2, groups 2 of 16
      {1, 16, 10, 9, 16, 3, 3, 1, 1, 2, 1, 2, 2, 1},   // dilation 2: the generic kernel
      {2, 16, 9, 12, 16, 7, 7, 1, 1, 3, 3, 1, 1, 1},   // 7x7
      {1, 16, 6, 13, 16, 2, 8, 1, 1, 0, 4, 1, 1, 1},   // width 8: the generic kernel
      {2, 16, 5, 5, 16, 1, 1, 1, 1, 0, 0, 1, 1, 1},    // 1x1
      {1, 16, 6, 6, 16, 3, 3, 1, 1, 3, 3, 1, 1, 1},    // padding 3 > kernel extent - 1
      {2, 16, 8, 7, 16, 3, 3, 2, 1, 0, 0, 1, 1, 1},    // stride 2 along H only
  };
  return cases;
}

TEST(ConvDirectTest, KernelsMatchFloat64Reference) {
  if (!ops::conv_direct::SupportedFilterGrad(Geom(Cases()[0])))
    GTEST_SKIP() << "this CPU has no AVX2/FMA (or LOOM_CONV_ALGO=im2col): the direct kernels "
                    "are not used";
  int checked_dx = 0;
  for (const Case& k : Cases()) {
    SCOPED_TRACE(Describe(k));
    ConvGeom g = Geom(k);
    ASSERT_GT(g.ho, 0);
    ASSERT_GT(g.wo, 0);
    ASSERT_TRUE(ops::conv_direct::SupportedForward(g));
    ASSERT_TRUE(ops::conv_direct::SupportedFilterGrad(g));
    auto x = Rand(g.n * g.c * g.h * g.w, 1), w = Rand(g.m * g.cg * g.kh * g.kw, 2);
    auto dout = Rand(g.n * g.m * g.P(), 3);
    Ref ref = Reference(g, x, w, dout);
    std::vector<float> out(ref.out.size(), -7.0f), dw(w.size(), -7.0f);
    ops::conv_direct::Forward(g, x.data(), w.data(), out.data());
    ExpectClose(out, ref.out, "Output");
    ops::conv_direct::FilterGrad(g, x.data(), dout.data(), dw.data());
    ExpectClose(dw, ref.dw, "Filter@GRAD");
    // Input@GRAD takes the direct kernel only at stride 1 with the padding inside the kernel.
    bool dx_direct = g.sh == 1 && g.sw == 1 && g.ph <= (g.kh - 1) * g.dh &&
                     g.pw <= (g.kw - 1) * g.dw && g.cg >= 12;
    EXPECT_EQ(ops::conv_direct::SupportedInputGrad(g), dx_direct);
    if (!dx_direct) continue;
    std::vector<float> dx(x.size(), -7.0f);
    ops::conv_direct::InputGrad(g, dout.data(), w.data(), dx.data());
    ExpectClose(dx, ref.dx, "Input@GRAD");
    ++checked_dx;
  }
  EXPECT_GE(checked_dx, 7);
}

TEST(ConvDirectTest, FewChannelsStayOnIm2col) {
  Case k{2, 3, 8, 8, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_FALSE(ops::conv_direct::SupportedForward(Geom(k)));  // 3 of 16 lanes used
  EXPECT_FALSE(ops::conv_direct::SupportedInputGrad(Geom(k)));
  k.m = 8;  // half a tile
  EXPECT_FALSE(ops::conv_direct::SupportedFilterGrad(Geom(k)));
}

// Restores LOOM_CONV_ALGO when a test ends.
class ScopedConvAlgo {
 public:
  explicit ScopedConvAlgo(const char* value) {
    if (const char* old = std::getenv("LOOM_CONV_ALGO")) old_ = old, had_ = true;
    setenv("LOOM_CONV_ALGO", value, 1);
  }
  ~ScopedConvAlgo() {
    if (had_) {
      setenv("LOOM_CONV_ALGO", old_.c_str(), 1);
    } else {
      unsetenv("LOOM_CONV_ALGO");
    }
  }

 private:
  std::string old_;
  bool had_ = false;
};

// The op's output and both gradients: direct kernels (default) vs im2col + GEMM.
TEST(ConvDirectTest, OpMatchesIm2colPath) {
  for (const Case& k : {Cases()[0], Cases()[4], Cases()[5]}) {
    SCOPED_TRACE(Describe(k));
    auto run = [&](const char* algo) {
      ScopedConvAlgo env(algo);
      OpTest t("conv2d");
      t.Input("Input", Random(proto::FP32, DDim{k.n, k.c, k.h, k.w}, 5))
          .Input("Filter", Random(proto::FP32, DDim{k.m, k.c / k.groups, k.kh, k.kw}, 6))
          .Output("Output")
          .Attr("strides", std::vector<int>{int(k.sh), int(k.sw)})
          .Attr("paddings", std::vector<int>{int(k.ph), int(k.pw)})
          .Attr("dilations", std::vector<int>{int(k.dh), int(k.dw)})
          .Attr("groups", int(k.groups));
      auto out = t.Forward();
      EXPECT_TRUE(out.ok()) << out.status().ToString();
      std::vector<std::vector<double>> all{Values(out.value()["Output"])};
      Tensor seed = Random(proto::FP32, out.value()["Output"].dims(), 7);
      auto grads = t.AnalyticGrads("Output", seed);
      EXPECT_TRUE(grads.ok()) << grads.status().ToString();
      for (const Tensor& gr : grads.value()) all.push_back(Values(gr));
      return all;
    };
    auto direct = run("auto"), im2col = run("im2col");
    ASSERT_EQ(direct.size(), 3u);
    ASSERT_EQ(im2col.size(), 3u);
    for (size_t v = 0; v < direct.size(); ++v) {
      ASSERT_EQ(direct[v].size(), im2col[v].size());
      double scale = 1;
      for (double e : im2col[v]) scale = std::max(scale, std::abs(e));
      for (size_t i = 0; i < direct[v].size(); ++i)
        ASSERT_NEAR(direct[v][i], im2col[v][i], 2e-5 * scale) << "tensor " << v << " elem " << i;
    }
  }
}

}  // namespace
}  // namespace loom::testing
