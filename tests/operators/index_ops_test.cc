// gather_nd, scatter, unique and the batch-size-like random ops against hand-worked values,
// with gradient checks for gather_nd and scatter.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace loom::testing {
namespace {

std::vector<double> Out(OpTest& t, const char* slot) {
  auto r = t.Forward();
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? Values(r.value()[slot]) : std::vector<double>{};
}

TEST(IndexOpsTest, GatherNdPicksSlicesAndScattersGradients) {
  Tensor x = Random(proto::FP64, DDim{3, 2, 2}, 1);
  std::vector<double> v = Values(x);
  OpTest t("gather_nd");
  t.Input("X", x).Input("Index", Ints(DDim{2, 2}, {2, 1, 0, 0})).Output("Out");
  // slices x[2, 1, :] and x[0, 0, :]
  EXPECT_EQ(Out(t, "Out"), (std::vector<double>{v[10], v[11], v[0], v[1]}));
  EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
  OpTest bad("gather_nd");
  bad.Input("X", x).Input("Index", Ints(DDim{1, 2}, {3, 0})).Output("Out");
  auto st = bad.Forward();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("outside dim 0"), std::string::npos);
}

TEST(IndexOpsTest, ScatterOverwritesOrSumsRows) {
  Tensor x = Random(proto::FP64, DDim{3, 2}, 2);
  Tensor up = Random(proto::FP64, DDim{3, 2}, 3);
  std::vector<double> xv = Values(x), uv = Values(up);
  OpTest t("scatter");
  t.Input("X", x).Input("Ids", Ints(DDim{3}, {2, 0, 2})).Input("Updates", up).Output("Out");
  EXPECT_EQ(Out(t, "Out"), (std::vector<double>{uv[2], uv[3], xv[2], xv[3], uv[4], uv[5]}));
  EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
  OpTest s("scatter");
  s.Input("X", x).Input("Ids", Ints(DDim{3}, {2, 0, 2})).Input("Updates", up).Output("Out");
  s.Attr("overwrite", false);
  EXPECT_EQ(Out(s, "Out"),
            (std::vector<double>{uv[2], uv[3], xv[2], xv[3], uv[0] + uv[4], uv[1] + uv[5]}));
  EXPECT_EQ(s.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
}

TEST(IndexOpsTest, UniqueAndRandomLike) {
  OpTest u("unique");
  u.Input("X", Ints(DDim{6}, {2, 3, 3, 1, 5, 3})).Output("Out").Output("Index");
  auto r = u.Forward();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Values(r.value()["Out"]), (std::vector<double>{2, 3, 1, 5}));
  EXPECT_EQ(Values(r.value()["Index"]), (std::vector<double>{0, 1, 1, 2, 3, 1}));
  OpTest g("uniform_random_batch_size_like");
  g.Input("Input", Random(proto::FP32, DDim{5, 2}, 4))
      .Output("Out")
      .Attr("shape", std::vector<int64_t>{-1, 3})
      .Attr("min", 2.0f)
      .Attr("max", 3.0f)
      .Attr("seed", 7);
  auto gr = g.Forward();
  ASSERT_TRUE(gr.ok()) << gr.status().ToString();
  EXPECT_EQ(gr.value()["Out"].dims(), (DDim{5, 3}));
  for (double v : Values(gr.value()["Out"])) EXPECT_TRUE(v >= 2 && v < 3) << v;
}

TEST(IndexOpsTest, GatherTreeFollowsParentsBackFromEachFinalBeam) {
  // time 3, batch 1, beam 2. Both final beams extend beam 1 of step 1 (token 4), which
  // extends beam 0 of step 0 (token 1): the paths are 1, 4, 5 and 1, 4, 6.
  OpTest t("gather_tree");
  t.Input("Ids", Ints(DDim{3, 1, 2}, {1, 2, 3, 4, 5, 6}))
      .Input("Parents", Ints(DDim{3, 1, 2}, {0, 0, 1, 0, 1, 1}))
      .Output("Out");
  EXPECT_EQ(Out(t, "Out"), (std::vector<double>{1, 1, 4, 4, 5, 6}));
  OpTest bad("gather_tree");
  bad.Input("Ids", Ints(DDim{2, 1, 2}, {1, 2, 3, 4}))
      .Input("Parents", Ints(DDim{2, 1, 2}, {0, 0, 2, 0}))
      .Output("Out");
  auto st = bad.Forward();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("outside [0, beam = 2)"), std::string::npos)
      << st.status().ToString();
}

}  // namespace
}  // namespace loom::testing
