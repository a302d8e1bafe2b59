// sequence_expand / expand_as / reshape / concat / slice / enumerate and lod_reset against
// hand-worked references, with numeric gradient checks and their output LoDs.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace loom::testing {
namespace {

void ExpectNear(const Tensor& got, const std::vector<double>& want, double tol) {
  std::vector<double> g = Values(got);
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol) << "element " << i;
}

Tensor WithLoD(Tensor t, LoD lod) {
  t.set_lod(std::move(lod));
  return t;
}

TEST(SequenceExpandTest, RowsAndSequencesRepeatByYsLevel) {
  Tensor y = WithLoD(Random(proto::FP64, DDim{5, 1}, 1), {{0, 2, 2, 5}});
  // X without LoD: row i repeated |sequence i of Y| times (2, 0, 3).
  Tensor x = Random(proto::FP64, DDim{3, 2}, 2);
  OpTest t("sequence_expand");
  t.Input("X", x).Input("Y", y, true).Output("Out");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> xv = Values(x), want;
  for (int r : {0, 0, 2, 2, 2})
    for (int j = 0; j < 2; ++j) want.push_back(xv[r * 2 + j]);
  ExpectNear(out.value()["Out"], want, 0);
  EXPECT_EQ(out.value()["Out"].lod(), (LoD{{0, 2, 2, 5}}));
  EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
  // X with LoD: its sequences ([0, 1) and [1, 3)) repeated 1 and 2 times.
  Tensor y2 = WithLoD(Random(proto::FP64, DDim{3, 1}, 3), {{0, 1, 3}});
  Tensor x2 = WithLoD(Random(proto::FP64, DDim{3, 1}, 4), {{0, 1, 3}});
  OpTest s("sequence_expand");
  s.Input("X", x2).Input("Y", y2, true).Output("Out");
  auto o2 = s.Forward();
  ASSERT_TRUE(o2.ok()) << o2.status().ToString();
  std::vector<double> v2 = Values(x2);
  ExpectNear(o2.value()["Out"], {v2[0], v2[1], v2[2], v2[1], v2[2]}, 0);
  EXPECT_EQ(o2.value()["Out"].lod(), (LoD{{0, 1, 3, 5}}));
  EXPECT_EQ(s.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
}

TEST(SequenceExpandTest, ExpandAsTakesYsLoD) {
  Tensor y = WithLoD(Random(proto::FP64, DDim{4, 1}, 5), {{0, 3, 4}});
  Tensor x = Random(proto::FP64, DDim{2, 1}, 6);
  OpTest t("sequence_expand_as");
  t.Input("X", x).Input("Y", y, true).Output("Out");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> v = Values(x);
  ExpectNear(out.value()["Out"], {v[0], v[0], v[0], v[1]}, 0);
  EXPECT_EQ(out.value()["Out"].lod(), y.lod());
  EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
}

TEST(SequenceReshapeConcatSliceTest, LayoutsAndGrads) {
  Tensor x = WithLoD(Random(proto::FP64, DDim{5, 2}, 7), {{0, 2, 5}});
  OpTest r("sequence_reshape");
  r.Input("X", x).Output("Out").Attr("new_dim", 1);
  auto ro = r.Forward();
  ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  EXPECT_EQ(ro.value()["Out"].dims(), (DDim{10, 1}));
  EXPECT_EQ(ro.value()["Out"].lod(), (LoD{{0, 4, 10}}));
  ExpectNear(ro.value()["Out"], Values(x), 0);
  EXPECT_EQ(r.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
  OpTest bad("sequence_reshape");
  bad.Input("X", x).Output("Out").Attr("new_dim", 3);
  EXPECT_FALSE(bad.Forward().ok());  // 4 values do not make rows of 3

  Tensor a = WithLoD(Random(proto::FP64, DDim{3, 2}, 8), {{0, 1, 3}});
  OpTest c("sequence_concat");
  c.Inputs("X", {x, a}).Output("Out");
  auto co = c.Forward();
  ASSERT_TRUE(co.ok()) << co.status().ToString();
  std::vector<double> xv = Values(x), av = Values(a), want;
  auto rows = [&](const std::vector<double>& v, int b, int e) {
    for (int i = b * 2; i < e * 2; ++i) want.push_back(v[i]);
  };
  rows(xv, 0, 2), rows(av, 0, 1), rows(xv, 2, 5), rows(av, 1, 3);
  ExpectNear(co.value()["Out"], want, 0);
  EXPECT_EQ(co.value()["Out"].lod(), (LoD{{0, 3, 8}}));
  EXPECT_EQ(c.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");

  OpTest sl("sequence_slice");
  sl.Input("X", x)
      .Input("Offset", Ints(DDim{2, 1}, {1, 0}))
      .Input("Length", Ints(DDim{2, 1}, {1, 2}));
  sl.Output("Out");
  auto so = sl.Forward();
  ASSERT_TRUE(so.ok()) << so.status().ToString();
  want.clear();
  rows(xv, 1, 2), rows(xv, 2, 4);
  ExpectNear(so.value()["Out"], want, 0);
  EXPECT_EQ(so.value()["Out"].lod(), (LoD{{0, 1, 3}}));
  EXPECT_EQ(sl.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
}

TEST(SequenceEnumerateTest, WindowsPadPastTheEnd) {
  Tensor ids = WithLoD(Ints(DDim{5, 1}, {1, 2, 3, 4, 5}), {{0, 3, 5}});
  OpTest t("sequence_enumerate");
  t.Input("X", ids).Output("Out").Attr("win_size", 2).Attr("pad_value", 0);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ExpectNear(out.value()["Out"], {1, 2, 2, 3, 3, 0, 4, 5, 5, 0}, 0);
}

TEST(LodResetTest, TargetOrYsLoD) {
  Tensor x = Random(proto::FP64, DDim{4, 1}, 9);
  OpTest t("lod_reset");
  t.Input("X", x).Output("Out").Attr("target_lod", std::vector<int>{0, 1, 4});
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].lod(), (LoD{{0, 1, 4}}));
  EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
  OpTest bad("lod_reset");
  bad.Input("X", x).Output("Out").Attr("target_lod", std::vector<int>{0, 5});
  auto st = bad.Forward();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("ends at 5 but the tensor has 4 rows"), std::string::npos)
      << st.status().message();
}

}  // namespace
}  // namespace loom::testing
