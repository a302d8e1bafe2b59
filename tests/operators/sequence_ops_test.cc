// Sequence ops over LoD tensors against naive references, with numeric gradient checks, and the
// LoD they give their outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "op_test_util.h"

namespace loom::testing {
namespace {

void ExpectNear(const Tensor& got, const std::vector<double>& want, double tol) {
  std::vector<double> g = Values(got);
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol) << "element " << i;
}

// Rows 0..6 in sequences of 3, 0 (empty), 1 and 3 rows, 2 columns.
Tensor SeqInput(uint32_t seed) {
  Tensor x = Random(proto::FP64, DDim{7, 2}, seed);
  x.set_lod({{0, 3, 3, 4, 7}});
  return x;
}

TEST(SequencePoolTest, EveryPoolTypeAndGrad) {
  Tensor x = SeqInput(1);
  std::vector<double> v = Values(x);
  const std::vector<int64_t> off = {0, 3, 3, 4, 7};
  for (const char* type : {"SUM", "AVERAGE", "SQRT", "MAX", "LAST", "FIRST"}) {
    OpTest t("sequence_pool");
    t.Input("X", x).Output("Out").Attr("pooltype", std::string(type)).Attr("pad_value", 0.5f);
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    std::vector<double> want;
    const std::string ty = type;
    for (size_t s = 0; s + 1 < off.size(); ++s) {
      const int64_t b = off[s], e = off[s + 1], n = e - b;
      for (int j = 0; j < 2; ++j) {
        if (n == 0) {
          want.push_back(0.5);
          continue;
        }
        double acc = ty == "MAX" ? -1e300 : 0;
        for (int64_t r = b; r < e; ++r)
          acc = ty == "MAX" ? std::max(acc, v[r * 2 + j]) : acc + v[r * 2 + j];
        if (ty == "AVERAGE") acc /= n;
        if (ty == "SQRT") acc /= std::sqrt(static_cast<double>(n));
        if (ty == "LAST") acc = v[(e - 1) * 2 + j];
        if (ty == "FIRST") acc = v[b * 2 + j];
        want.push_back(acc);
      }
    }
    ExpectNear(out.value()["Out"], want, 1e-12);
    EXPECT_EQ(out.value()["Out"].dims(), (DDim{4, 2})) << type;
    EXPECT_FALSE(out.value()["Out"].has_lod()) << type;  // one level pooled away
    EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "") << type;
  }
}

TEST(SequencePoolTest, KeepsTheUpperLevelAndNeedsALoD) {
  Tensor x = Random(proto::FP64, DDim{5, 1}, 2);
  x.set_lod({{0, 2, 3}, {0, 1, 3, 5}});  // 2 groups of (2, 1) sentences of words
  OpTest t("sequence_pool");
  t.Input("X", x).Output("Out").Attr("pooltype", std::string("SUM"));
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].lod(), (LoD{{0, 2, 3}}));
  OpTest plain("sequence_pool");
  plain.Input("X", Random(proto::FP64, DDim{5, 1}, 2)).Output("Out");
  auto bad = plain.Forward();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("has no LoD"), std::string::npos) << bad.status().message();
}

TEST(SequenceSoftmaxTest, PerSequenceAndGrad) {
  Tensor x = Random(proto::FP64, DDim{6, 1}, 3);
  x.set_lod({{0, 2, 6}});
  OpTest t("sequence_softmax");
  t.Input("X", x).Output("Out");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> v = Values(x), want;
  for (auto [b, e] : {std::pair<int, int>{0, 2}, {2, 6}}) {
    double sum = 0;
    for (int i = b; i < e; ++i) sum += std::exp(v[i]);
    for (int i = b; i < e; ++i) want.push_back(std::exp(v[i]) / sum);
  }
  ExpectNear(out.value()["Out"], want, 1e-12);
  EXPECT_EQ(out.value()["Out"].lod(), x.lod());
  EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
}

TEST(SequencePadTest, PadUnpadRoundTripAndGrads) {
  Tensor x = SeqInput(4);
  Tensor pad(proto::FP64, DDim{1});
  pad.mutable_data<double>(Place::CPU())[0] = -7;
  OpTest t("sequence_pad");
  t.Input("X", x).Input("PadValue", pad, true).Output("Out").Output("Length");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dims(), (DDim{4, 3, 2}));
  ExpectNear(out.value()["Length"], {3, 0, 1, 3}, 0);
  std::vector<double> p = Values(out.value()["Out"]);
  EXPECT_EQ(p[1 * 6], -7);  // the empty sequence is all padding
  EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
  OpTest u("sequence_unpad");
  u.Input("X", out.value()["Out"]).Input("Length", out.value()["Length"], true).Output("Out");
  auto back = u.Forward();
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectNear(back.value()["Out"], Values(x), 0);
  EXPECT_EQ(back.value()["Out"].lod(), x.lod());
  EXPECT_EQ(u.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
}

TEST(SequenceConvTest, ContextWithinSequencesAndGrads) {
  Tensor x = SeqInput(6);                         // D = 2
  Tensor f = Random(proto::FP64, DDim{6, 3}, 7);  // contextLength 3 * D 2 -> 3 filters
  OpTest t("sequence_conv");
  t.Input("X", x)
      .Input("Filter", f)
      .Output("Out")
      .Attr("contextLength", 3)
      .Attr("contextStart", -1);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const std::vector<int64_t> off = {0, 3, 3, 4, 7};
  std::vector<double> xv = Values(x), fv = Values(f), want;
  for (size_t s = 0; s + 1 < off.size(); ++s)
    for (int64_t r = off[s]; r < off[s + 1]; ++r)
      for (int m = 0; m < 3; ++m) {
        double acc = 0;
        for (int k = 0; k < 3; ++k) {
          const int64_t src = r - 1 + k;
          if (src < off[s] || src >= off[s + 1]) continue;
          for (int j = 0; j < 2; ++j) acc += xv[src * 2 + j] * fv[(k * 2 + j) * 3 + m];
        }
        want.push_back(acc);
      }
  ExpectNear(out.value()["Out"], want, 1e-12);
  EXPECT_EQ(out.value()["Out"].lod(), x.lod());
  EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
}

TEST(SequenceMaskTest, LengthsToMask) {
  OpTest t("sequence_mask");
  t.Input("X", Ints(DDim{3}, {2, 0, 3}))
      .Output("Y")
      .Attr("out_dtype", static_cast<int>(proto::FP32));
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Y"].dims(), (DDim{3, 3}));
  ExpectNear(out.value()["Y"], {1, 1, 0, 0, 0, 0, 1, 1, 1}, 0);
}

TEST(LoDPropagationTest, SameRowOutputsTakeTheInputsLoD) {
  Tensor x = SeqInput(5);
  OpTest t("scale");
  t.Input("X", x).Output("Out").Attr("scale", 2.0f);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].lod(), x.lod());
  OpTest r("reduce_sum");
  r.Input("X", x).Output("Out").Attr("dim", std::vector<int>{0});
  auto red = r.Forward();
  ASSERT_TRUE(red.ok()) << red.status().ToString();
  EXPECT_FALSE(red.value()["Out"].has_lod());  // one row: no sequences left
}

}  // namespace
}  // namespace loom::testing

namespace loom::testing {
namespace {

double Sig(double x) { return 1 / (1 + std::exp(-x)); }

// A straightforward LSTM in double: gates [c~, i, f, o], peepholes W_ic, W_fc, W_oc.
std::vector<double> LstmRef(const std::vector<double>& x, const std::vector<int64_t>& off,
                            const std::vector<double>& w, const std::vector<double>& b,
                            const std::vector<double>& h0, const std::vector<double>& c0, int64_t d,
                            bool peep, bool reverse) {
  std::vector<double> hidden(x.size() / 4, 0);
  for (size_t s = 0; s + 1 < off.size(); ++s) {
    std::vector<double> h(h0.begin() + s * d, h0.begin() + (s + 1) * d);
    std::vector<double> c(c0.begin() + s * d, c0.begin() + (s + 1) * d);
    const int64_t n = off[s + 1] - off[s];
    for (int64_t k = 0; k < n; ++k) {
      const int64_t r = reverse ? off[s + 1] - 1 - k : off[s] + k;
      std::vector<double> pre(4 * d);
      for (int64_t j = 0; j < 4 * d; ++j) {
        pre[j] = x[r * 4 * d + j] + b[j];
        for (int64_t q = 0; q < d; ++q) pre[j] += h[q] * w[q * 4 * d + j];
      }
      for (int64_t j = 0; j < d; ++j) {
        const double cand = std::tanh(pre[j]);
        const double ig = Sig(pre[d + j] + (peep ? b[4 * d + j] * c[j] : 0));
        const double fg = Sig(pre[2 * d + j] + (peep ? b[5 * d + j] * c[j] : 0));
        c[j] = fg * c[j] + ig * cand;
        const double og = Sig(pre[3 * d + j] + (peep ? b[6 * d + j] * c[j] : 0));
        h[j] = og * std::tanh(c[j]);
        hidden[r * d + j] = h[j];
      }
    }
  }
  return hidden;
}

TEST(LstmTest, ForwardMatchesAReferenceAndGradsCheck) {
  const int64_t d = 3;
  for (bool peep : {true, false})
    for (bool reverse : {false, true})
      for (bool init : {false, true}) {
        Tensor x = Random(proto::FP64, DDim{6, 4 * d}, 31);
        x.set_lod({{0, 2, 6}});
        Tensor w = Random(proto::FP64, DDim{d, 4 * d}, 32);
        Tensor b = Random(proto::FP64, DDim{1, (peep ? 7 : 4) * d}, 33);
        Tensor h0 = Random(proto::FP64, DDim{2, d}, 34), c0 = Random(proto::FP64, DDim{2, d}, 35);
        OpTest t("lstm");
        t.Input("Input", x).Input("Weight", w).Input("Bias", b);
        if (init) t.Input("H0", h0).Input("C0", c0);
        t.Output("Hidden").Output("Cell").Output("BatchGate").Output("BatchCellPreAct");
        t.Attr("use_peepholes", peep).Attr("is_reverse", reverse);
        auto out = t.Forward();
        ASSERT_TRUE(out.ok()) << out.status().ToString();
        std::vector<double> zeros(2 * d, 0);
        auto want = LstmRef(Values(x), {0, 2, 6}, Values(w), Values(b), init ? Values(h0) : zeros,
                            init ? Values(c0) : zeros, d, peep, reverse);
        ExpectNear(out.value()["Hidden"], want, 1e-12);
        EXPECT_EQ(out.value()["Hidden"].lod(), x.lod());
        EXPECT_EQ(t.CheckGrad("Hidden", 1e-6, 1e-6, 1e-9), "")
            << "peepholes " << peep << " reverse " << reverse << " init " << init;
      }
}

}  // namespace
}  // namespace loom::testing

namespace loom::testing {
namespace {

double Sg(double x) { return 1 / (1 + std::exp(-x)); }

// A GRU in double: Weight's memory is the D x 2D gate block, then the D x D candidate block.
std::vector<double> GruRef(const std::vector<double>& x, const std::vector<int64_t>& off,
                           const std::vector<double>& w, const std::vector<double>& b,
                           const std::vector<double>& h0, int64_t d, bool reverse, bool origin) {
  std::vector<double> out(x.size() / 3, 0);
  for (size_t s = 0; s + 1 < off.size(); ++s) {
    std::vector<double> h(h0.begin() + s * d, h0.begin() + (s + 1) * d);
    for (int64_t k = 0; k < off[s + 1] - off[s]; ++k) {
      const int64_t r = reverse ? off[s + 1] - 1 - k : off[s] + k;
      std::vector<double> u(d), rg(d), c(d);
      for (int64_t j = 0; j < d; ++j) {
        double pu = x[r * 3 * d + j] + b[j], pr = x[r * 3 * d + d + j] + b[d + j];
        for (int64_t q = 0; q < d; ++q) {
          pu += h[q] * w[q * 2 * d + j];
          pr += h[q] * w[q * 2 * d + d + j];
        }
        u[j] = Sg(pu);
        rg[j] = Sg(pr);
      }
      for (int64_t j = 0; j < d; ++j) {
        double pc = x[r * 3 * d + 2 * d + j] + b[2 * d + j];
        for (int64_t q = 0; q < d; ++q) pc += rg[q] * h[q] * w[2 * d * d + q * d + j];
        c[j] = std::tanh(pc);
      }
      for (int64_t j = 0; j < d; ++j) {
        h[j] = origin ? u[j] * h[j] + (1 - u[j]) * c[j] : (1 - u[j]) * h[j] + u[j] * c[j];
        out[r * d + j] = h[j];
      }
    }
  }
  return out;
}

TEST(GruTest, SequencesMatchAReferenceAndGradsCheck) {
  const int64_t d = 3;
  for (bool reverse : {false, true})
    for (bool origin : {false, true})
      for (bool init : {false, true}) {
        Tensor x = Random(proto::FP64, DDim{6, 3 * d}, 41);
        x.set_lod({{0, 4, 6}});
        Tensor w = Random(proto::FP64, DDim{d, 3 * d}, 42);
        Tensor b = Random(proto::FP64, DDim{1, 3 * d}, 43);
        Tensor h0 = Random(proto::FP64, DDim{2, d}, 44);
        OpTest t("gru");
        t.Input("Input", x).Input("Weight", w).Input("Bias", b);
        if (init) t.Input("H0", h0);
        t.Output("Hidden").Output("BatchGate").Output("BatchResetHiddenPrev");
        t.Attr("is_reverse", reverse).Attr("origin_mode", origin);
        auto out = t.Forward();
        ASSERT_TRUE(out.ok()) << out.status().ToString();
        std::vector<double> zeros(2 * d, 0);
        ExpectNear(out.value()["Hidden"],
                   GruRef(Values(x), {0, 4, 6}, Values(w), Values(b), init ? Values(h0) : zeros, d,
                          reverse, origin),
                   1e-12);
        EXPECT_EQ(t.CheckGrad("Hidden", 1e-6, 1e-6, 1e-9), "")
            << "reverse " << reverse << " origin " << origin << " init " << init;
      }
}

TEST(GruTest, UnitIsOneStepOfTheRecurrence) {
  const int64_t d = 2;
  Tensor x = Random(proto::FP64, DDim{3, 3 * d}, 51);
  Tensor hp = Random(proto::FP64, DDim{3, d}, 52);
  Tensor w = Random(proto::FP64, DDim{d, 3 * d}, 53);
  Tensor b = Random(proto::FP64, DDim{1, 3 * d}, 54);
  OpTest t("gru_unit");
  t.Input("Input", x).Input("HiddenPrev", hp).Input("Weight", w).Input("Bias", b);
  t.Output("Gate").Output("ResetHiddenPrev").Output("Hidden");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ExpectNear(out.value()["Hidden"],
             GruRef(Values(x), {0, 1, 2, 3}, Values(w), Values(b), Values(hp), d, false, false),
             1e-12);
  EXPECT_EQ(t.CheckGrad("Hidden", 1e-6, 1e-6, 1e-9), "");
}

TEST(LstmUnitTest, OneStepAndGrads) {
  const int64_t d = 3;
  Tensor x = Random(proto::FP64, DDim{2, 4 * d}, 61);
  Tensor cp = Random(proto::FP64, DDim{2, d}, 62);
  OpTest t("lstm_unit");
  t.Input("X", x).Input("C_prev", cp).Output("C").Output("H").Attr("forget_bias", 0.5f);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> xv = Values(x), cv = Values(cp), want_h;
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < d; ++j) {
      const double* xr = xv.data() + r * 4 * d;
      const double c = Sg(xr[d + j] + 0.5) * cv[r * d + j] + Sg(xr[j]) * std::tanh(xr[3 * d + j]);
      want_h.push_back(Sg(xr[2 * d + j]) * std::tanh(c));
    }
  ExpectNear(out.value()["H"], want_h, 1e-12);
  EXPECT_EQ(t.CheckGrad("H", 1e-6, 1e-6, 1e-9), "");
  EXPECT_EQ(t.CheckGrad("C", 1e-6, 1e-6, 1e-9), "");
}

}  // namespace
}  // namespace loom::testing
