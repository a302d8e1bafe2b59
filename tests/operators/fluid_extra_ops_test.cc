// Ops Fluid's book models use beside the core set (sigmoid_cross_entropy_with_logits,
// fill_constant_batch_size_like, one_hot, shape, expand, cos_sim, argsort, where_index,
// clip_by_norm) against naive references, with numeric gradient checks where they have
// gradients, and their shape errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "framework/verifier.h"
#include "op_test_util.h"

namespace loom::testing {
namespace {

void ExpectNear(const Tensor& got, const std::vector<double>& want, double tol) {
  std::vector<double> g = Values(got);
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol) << "element " << i;
}

void ExpectError(OpTest& t, std::initializer_list<const char*> parts) {
  Status st = VerifyProgram(t.BuildProgram());
  ASSERT_FALSE(st.ok());
  for (const char* p : parts)
    EXPECT_NE(st.message().find(p), std::string::npos) << "'" << p << "' not in: " << st.message();
}

TEST(SigmoidXentTest, ForwardIgnoreNormalizeAndGrad) {
  Tensor x = Random(proto::FP64, DDim{3, 4}, 1, -3, 3);
  Tensor z = Random(proto::FP64, DDim{3, 4}, 2, 0, 1);
  double* zp = z.mutable_data<double>(Place::CPU());
  zp[5] = -100;  // ignored
  for (bool normalize : {false, true}) {
    OpTest t("sigmoid_cross_entropy_with_logits");
    t.Input("X", x).Input("Label", z, /*no_grad=*/true).Output("Out").Attr("normalize", normalize);
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    std::vector<double> xv = Values(x), zv = Values(z), want;
    for (size_t i = 0; i < xv.size(); ++i) {
      const double p = 1 / (1 + std::exp(-xv[i]));
      want.push_back(zv[i] == -100 ? 0 : -(zv[i] * std::log(p) + (1 - zv[i]) * std::log(1 - p)));
    }
    if (normalize)
      for (double& w : want) w /= 11;
    ExpectNear(out.value()["Out"], want, 1e-12);
    EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
  }
  OpTest bad("sigmoid_cross_entropy_with_logits");
  bad.Input("X", x).Input("Label", Random(proto::FP64, DDim{3, 5}, 3)).Output("Out");
  ExpectError(bad, {"sigmoid_cross_entropy_with_logits", "Label", "dims"});
}

TEST(FillBatchSizeLikeTest, TakesTheBatchDimFromInput) {
  OpTest t("fill_constant_batch_size_like");
  t.Input("Input", Random(proto::FP32, DDim{5, 3}, 4))
      .Output("Out")
      .Attr("shape", std::vector<int64_t>{-1, 7})
      .Attr("value", 2.5f)
      .Attr("dtype", static_cast<int>(proto::FP64));
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dims(), (DDim{5, 7}));
  EXPECT_EQ(out.value()["Out"].dtype(), proto::FP64);
  ExpectNear(out.value()["Out"], std::vector<double>(35, 2.5), 0);
  OpTest bad("fill_constant_batch_size_like");
  bad.Input("Input", Random(proto::FP32, DDim{5, 3}, 4))
      .Output("Out")
      .Attr("shape", std::vector<int64_t>{-1, 7})
      .Attr("output_dim_idx", 2);
  ExpectError(bad, {"output_dim_idx 2"});
}

TEST(OneHotTest, IdsToRowsAndOutOfRange) {
  OpTest t("one_hot");
  t.Input("X", Ints(DDim{3, 1}, {2, 0, 3})).Output("Out").Attr("depth", 4);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ExpectNear(out.value()["Out"], {0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1}, 0);
  OpTest far("one_hot");
  far.Input("X", Ints(DDim{2, 1}, {1, 4})).Output("Out").Attr("depth", 4);
  auto st = far.Forward();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("id 4 at 1 is outside [0, depth = 4)"), std::string::npos)
      << st.status().message();
  far.Attr("allow_out_of_range", true);
  auto zeros = far.Forward();
  ASSERT_TRUE(zeros.ok());
  ExpectNear(zeros.value()["Out"], {0, 1, 0, 0, 0, 0, 0, 0}, 0);
}

TEST(ShapeTest, DimsAsInt32) {
  OpTest t("shape");
  t.Input("Input", Random(proto::FP32, DDim{2, 3, 5}, 5)).Output("Out");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out.value()["Out"].dtype(), proto::INT32);
  ExpectNear(out.value()["Out"], {2, 3, 5}, 0);
}

TEST(ExpandTest, TilesAndSumsTheGradient) {
  Tensor x = Random(proto::FP64, DDim{2, 3}, 6);
  OpTest t("expand");
  t.Input("X", x).Output("Out").Attr("expand_times", std::vector<int>{2, 3});
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dims(), (DDim{4, 9}));
  std::vector<double> xv = Values(x), want;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 9; ++c) want.push_back(xv[(r % 2) * 3 + c % 3]);
  ExpectNear(out.value()["Out"], want, 0);
  EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
  OpTest bad("expand");
  bad.Input("X", x).Output("Out").Attr("expand_times", std::vector<int>{2});
  ExpectError(bad, {"expand_times has 1 entries", "rank 2"});
}

TEST(CosSimTest, RowsAndBroadcastRowWithGrads) {
  Tensor x = Random(proto::FP64, DDim{3, 4}, 7);
  for (int64_t yrows : {3, 1}) {
    Tensor y = Random(proto::FP64, DDim{yrows, 4}, 8);
    OpTest t("cos_sim");
    t.Input("X", x).Input("Y", y).Output("Out").Output("XNorm").Output("YNorm");
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    std::vector<double> xv = Values(x), yv = Values(y), want;
    for (int r = 0; r < 3; ++r) {
      const int yr = yrows == 1 ? 0 : r;
      double dot = 0, nx = 0, ny = 0;
      for (int j = 0; j < 4; ++j) {
        dot += xv[r * 4 + j] * yv[yr * 4 + j];
        nx += xv[r * 4 + j] * xv[r * 4 + j];
        ny += yv[yr * 4 + j] * yv[yr * 4 + j];
      }
      want.push_back(dot / std::sqrt(nx * ny));
    }
    ExpectNear(out.value()["Out"], want, 1e-12);
    EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "") << "Y rows " << yrows;
  }
}

TEST(ArgsortTest, StableBothDirectionsAlongAnAxis) {
  Tensor x(proto::FP64, DDim{2, 4});
  double* p = x.mutable_data<double>(Place::CPU());
  const double v[] = {3, 1, 2, 1, 0, -1, 5, 5};
  std::copy(v, v + 8, p);
  OpTest t("argsort");
  t.Input("X", x).Output("Out").Output("Indices");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ExpectNear(out.value()["Out"], {1, 1, 2, 3, -1, 0, 5, 5}, 0);
  ExpectNear(out.value()["Indices"], {1, 3, 2, 0, 1, 0, 2, 3}, 0);
  OpTest d("argsort");
  d.Input("X", x).Output("Out").Output("Indices").Attr("axis", 0).Attr("descending", true);
  auto down = d.Forward();
  ASSERT_TRUE(down.ok());
  ExpectNear(down.value()["Indices"], {0, 0, 1, 1, 1, 1, 0, 0}, 0);
}

TEST(WhereIndexTest, CoordinatesOfTrueElements) {
  OpTest t("where_index");
  t.Input("Condition", Ints(DDim{2, 3}, {0, 1, 0, 1, 0, 7})).Output("Out");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dims(), (DDim{3, 2}));
  ExpectNear(out.value()["Out"], {0, 1, 1, 0, 1, 2}, 0);
}

TEST(ClipByNormTest, ScalesOnlyAboveTheNorm) {
  Tensor x(proto::FP64, DDim{2});
  double* p = x.mutable_data<double>(Place::CPU());
  p[0] = 3, p[1] = 4;  // norm 5
  for (float max_norm : {10.0f, 2.5f}) {
    OpTest t("clip_by_norm");
    t.Input("X", x).Output("Out").Attr("max_norm", max_norm);
    auto out = t.Forward();
    ASSERT_TRUE(out.ok());
    const double s = max_norm > 5 ? 1 : max_norm / 5.0;
    ExpectNear(out.value()["Out"], {3 * s, 4 * s}, 1e-12);
  }
}

}  // namespace
}  // namespace loom::testing
