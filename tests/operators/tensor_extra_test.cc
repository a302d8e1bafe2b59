// arg_min, cumsum, reverse, range, linspace, eye, diag, reduce_prod, reduce_all and reduce_any
// against hand-worked values, with gradient checks where they have gradients.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace loom::testing {
namespace {

Tensor Fill(DataType dt, DDim dims, std::vector<double> v) {
  Tensor t(dt, dims);
  if (dt == proto::FP64) {
    double* p = t.mutable_data<double>(Place::CPU());
    std::copy(v.begin(), v.end(), p);
  } else if (dt == proto::BOOL) {
    bool* p = t.mutable_data<bool>(Place::CPU());
    for (size_t i = 0; i < v.size(); ++i) p[i] = v[i] != 0;
  }
  return t;
}

std::vector<double> Forward1(OpTest& t, const char* out) {
  auto r = t.Forward();
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? Values(r.value()[out]) : std::vector<double>{};
}

TEST(TensorExtraTest, ArgMinCumsumReverse) {
  Tensor x = Fill(proto::FP64, DDim{2, 3}, {3, 1, 2, 0, 5, -1});
  OpTest am("arg_min");
  am.Input("X", x).Output("Out").Attr("axis", 1);
  EXPECT_EQ(Forward1(am, "Out"), (std::vector<double>{1, 2}));
  OpTest cs("cumsum");
  cs.Input("X", x).Output("Out").Attr("axis", 1);
  EXPECT_EQ(Forward1(cs, "Out"), (std::vector<double>{3, 4, 6, 0, 5, 4}));
  EXPECT_EQ(cs.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
  OpTest ex("cumsum");
  ex.Input("X", x).Output("Out").Attr("axis", 0).Attr("exclusive", true).Attr("reverse", true);
  EXPECT_EQ(Forward1(ex, "Out"), (std::vector<double>{0, 5, -1, 0, 0, 0}));
  EXPECT_EQ(ex.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
  OpTest rv("reverse");
  rv.Input("X", x).Output("Out").Attr("axis", std::vector<int>{0, 1});
  EXPECT_EQ(Forward1(rv, "Out"), (std::vector<double>{-1, 5, 0, 2, 1, 3}));
  EXPECT_EQ(rv.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");
}

TEST(TensorExtraTest, RangeLinspaceEyeDiag) {
  OpTest r("range");
  r.Input("Start", Fill(proto::FP64, DDim{1}, {1}))
      .Input("End", Fill(proto::FP64, DDim{1}, {2}))
      .Input("Step", Fill(proto::FP64, DDim{1}, {0.25}))
      .Output("Out");
  EXPECT_EQ(Forward1(r, "Out"), (std::vector<double>{1, 1.25, 1.5, 1.75}));
  OpTest l("linspace");
  l.Input("Start", Fill(proto::FP64, DDim{1}, {0}))
      .Input("Stop", Fill(proto::FP64, DDim{1}, {1}))
      .Input("Num", Ints(DDim{1}, {5}))
      .Output("Out");
  EXPECT_EQ(Forward1(l, "Out"), (std::vector<double>{0, 0.25, 0.5, 0.75, 1}));
  OpTest e("eye");
  e.Output("Out").Attr("num_rows", int64_t{2}).Attr("num_columns", int64_t{3});
  EXPECT_EQ(Forward1(e, "Out"), (std::vector<double>{1, 0, 0, 0, 1, 0}));
  OpTest d("diag");
  d.Input("Diagonal", Fill(proto::FP64, DDim{2}, {4, 5})).Output("Out");
  EXPECT_EQ(Forward1(d, "Out"), (std::vector<double>{4, 0, 0, 5}));
}

TEST(TensorExtraTest, ReduceProdAllAny) {
  Tensor x = Fill(proto::FP64, DDim{2, 3}, {2, 0, 3, 1, 4, 5});
  OpTest p("reduce_prod");
  p.Input("X", x).Output("Out").Attr("dim", std::vector<int>{1});
  EXPECT_EQ(Forward1(p, "Out"), (std::vector<double>{0, 20}));
  EXPECT_EQ(p.CheckGrad("Out", 1e-6, 1e-6, 1e-9), "");  // exact with a zero in a row
  Tensor b = Fill(proto::BOOL, DDim{2, 2}, {1, 0, 1, 1});
  OpTest all("reduce_all");
  all.Input("X", b).Output("Out").Attr("dim", std::vector<int>{1});
  EXPECT_EQ(Forward1(all, "Out"), (std::vector<double>{0, 1}));
  OpTest any("reduce_any");
  any.Input("X", b).Output("Out").Attr("reduce_all", true);
  EXPECT_EQ(Forward1(any, "Out"), (std::vector<double>{1}));
}

}  // namespace
}  // namespace loom::testing
