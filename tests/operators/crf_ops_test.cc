// linear_chain_crf against brute-force enumeration of every tag sequence, its gradients
// numerically; crf_decoding against the brute-force best path; chunk_eval on worked examples.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "op_test_util.h"

namespace loom::testing {
namespace {

// score(y) of one sequence (Emission rows b..b+len, Transition [D + 2, D]).
double Score(const std::vector<double>& e, const std::vector<double>& w, int64_t d, int64_t b,
             const std::vector<int64_t>& y) {
  double s = w[y[0]] + w[d + y.back()];
  for (size_t t = 0; t < y.size(); ++t) {
    s += e[(b + t) * d + y[t]];
    if (t > 0) s += w[2 * d + y[t - 1] * d + y[t]];
  }
  return s;
}

void ForEachPath(int64_t len, int64_t d, const std::function<void(std::vector<int64_t>&)>& f) {
  std::vector<int64_t> y(len, 0);
  while (true) {
    f(y);
    int64_t i = len - 1;
    while (i >= 0 && ++y[i] == d) y[i--] = 0;
    if (i < 0) return;
  }
}

TEST(CrfTest, NegativeLogLikelihoodMatchesEnumerationAndGradsCheck) {
  const int64_t d = 3;
  Tensor e = Random(proto::FP64, DDim{6, d}, 71);
  e.set_lod({{0, 2, 6}});
  Tensor w = Random(proto::FP64, DDim{d + 2, d}, 72);
  Tensor y = Ints(DDim{6, 1}, {0, 2, 1, 1, 0, 2});
  y.set_lod(e.lod());
  OpTest t("linear_chain_crf");
  t.Input("Emission", e).Input("Transition", w).Input("Label", y, true);
  t.Output("Alpha").Output("EmissionExps").Output("TransitionExps").Output("LogLikelihood");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> ev = Values(e), wv = Values(w), got = Values(out.value()["LogLikelihood"]);
  const std::vector<int64_t> off = {0, 2, 6}, yv = {0, 2, 1, 1, 0, 2};
  for (int s = 0; s < 2; ++s) {
    const int64_t b = off[s], len = off[s + 1] - b;
    double z = 0;
    ForEachPath(len, d, [&](std::vector<int64_t>& p) { z += std::exp(Score(ev, wv, d, b, p)); });
    std::vector<int64_t> gold(yv.begin() + b, yv.begin() + b + len);
    EXPECT_NEAR(got[s], std::log(z) - Score(ev, wv, d, b, gold), 1e-10) << "sequence " << s;
  }
  EXPECT_EQ(t.CheckGrad("LogLikelihood", 1e-6, 1e-6, 1e-9), "");
}

TEST(CrfTest, DecodingFindsTheBestPathAndMarksItAgainstLabels) {
  const int64_t d = 3;
  Tensor e = Random(proto::FP64, DDim{7, d}, 73);
  e.set_lod({{0, 3, 7}});
  Tensor w = Random(proto::FP64, DDim{d + 2, d}, 74);
  OpTest t("crf_decoding");
  t.Input("Emission", e).Input("Transition", w).Output("ViterbiPath");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> ev = Values(e), wv = Values(w), got = Values(out.value()["ViterbiPath"]);
  const std::vector<int64_t> off = {0, 3, 7};
  std::vector<int64_t> best_all;
  for (int s = 0; s < 2; ++s) {
    const int64_t b = off[s], len = off[s + 1] - b;
    std::vector<int64_t> best;
    double best_score = -1e300;
    ForEachPath(len, d, [&](std::vector<int64_t>& p) {
      const double sc = Score(ev, wv, d, b, p);
      if (sc > best_score) best_score = sc, best = p;
    });
    for (int64_t t2 = 0; t2 < len; ++t2) EXPECT_EQ(got[b + t2], best[t2]) << "row " << b + t2;
    best_all.insert(best_all.end(), best.begin(), best.end());
  }
  std::vector<int64_t> label = best_all;
  label[1] = (label[1] + 1) % d;  // one wrong tag
  Tensor lt = Ints(DDim{7, 1}, label);
  OpTest m("crf_decoding");
  m.Input("Emission", e).Input("Transition", w).Input("Label", lt).Output("ViterbiPath");
  auto marks = m.Forward();
  ASSERT_TRUE(marks.ok());
  std::vector<double> want(7, 1);
  want[1] = 0;
  EXPECT_EQ(Values(marks.value()["ViterbiPath"]), want);
}

TEST(ChunkEvalTest, IobChunksPrecisionRecallF1) {
  // 2 chunk types, IOB: tags B-0 = 0, I-0 = 1, B-1 = 2, I-1 = 3, O = 4.
  // Label:     [B-0 I-0 O B-1] [B-1 I-1 I-1]  -> chunks (0,2,t0) (3,4,t1) | (0,3,t1)
  // Inference: [B-0 I-0 O B-0] [B-1 I-1 O  ]  -> chunks (0,2,t0) (3,4,t0) | (0,2,t1)
  Tensor lab = Ints(DDim{7, 1}, {0, 1, 4, 2, 2, 3, 3});
  lab.set_lod({{0, 4, 7}});
  Tensor inf = Ints(DDim{7, 1}, {0, 1, 4, 0, 2, 3, 4});
  OpTest t("chunk_eval");
  t.Input("Inference", inf).Input("Label", lab);
  for (const char* s :
       {"Precision", "Recall", "F1-Score", "NumInferChunks", "NumLabelChunks", "NumCorrectChunks"})
    t.Output(s);
  t.Attr("num_chunk_types", 2).Attr("chunk_scheme", std::string("IOB"));
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(Values(out.value()["NumInferChunks"])[0], 3);
  EXPECT_EQ(Values(out.value()["NumLabelChunks"])[0], 3);
  EXPECT_EQ(Values(out.value()["NumCorrectChunks"])[0], 1);
  EXPECT_NEAR(Values(out.value()["F1-Score"])[0], 1.0 / 3, 1e-6);
  t.Attr("excluded_chunk_types", std::vector<int>{1});
  auto ex = t.Forward();
  ASSERT_TRUE(ex.ok());
  EXPECT_EQ(Values(ex.value()["NumInferChunks"])[0], 2);  // type 1 chunks not counted
  EXPECT_EQ(Values(ex.value()["NumLabelChunks"])[0], 1);
}

}  // namespace
}  // namespace loom::testing
