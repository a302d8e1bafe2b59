// Attribute, dtype and compile-time shape checks of single ops: the gradient of sum, attribute
// checks of the random ops, sgd's learning-rate dtype, relu_grad reading Out, unknown dims at
// compile time and higher-rank softmax_with_cross_entropy.
#include <gtest/gtest.h>

#include "framework/backward.h"
#include "framework/verifier.h"
#include "op_test_util.h"

namespace loom::testing {
namespace {

constexpr double kEps64 = 1e-6, kRtol64 = 1e-6, kAtol64 = 1e-8;

void ExpectContains(const Status& st, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(st.ok());
  for (const char* p : parts)
    EXPECT_NE(st.message().find(p), std::string::npos) << "no '" << p << "' in " << st.message();
}

TEST(SumGradTest, EveryInputGetsOutGrad) {
  OpTest t("sum");
  t.Inputs("X", {Random(proto::FP64, DDim{2, 3}, 1), Random(proto::FP64, DDim{2, 3}, 2),
                 Random(proto::FP64, DDim{2, 3}, 3)})
      .Output("Out");
  EXPECT_EQ(t.CheckGrad("Out", kEps64, kRtol64, kAtol64), "");
}

TEST(SumGradTest, SameVarTwiceAccumulates) {
  // Out = x + x + y: d/dx = 2, d/dy = 1.
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  for (const char* name : {"x", "y"}) {
    VarDesc v = b->Var(name);
    v.SetDtype(proto::FP64);
    v.SetDims({2, 2});
  }
  b->Var("out");
  b->Var("loss");
  b->AppendOp("sum", {{"X", {"x", "x", "y"}}}, {{"Out", {"out"}}});
  b->AppendOp("mean", {{"X", {"out"}}}, {{"Out", {"loss"}}});
  ASSERT_TRUE(InferShapes(b).ok());
  auto pg = AppendBackward(&p, "loss");
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  ASSERT_TRUE(VerifyProgram(p).ok());
  Executor exe;
  Scope scope;
  std::vector<Tensor> out;
  Status st = exe.Run(
      p, &scope,
      {{"x", Random(proto::FP64, DDim{2, 2}, 1)}, {"y", Random(proto::FP64, DDim{2, 2}, 2)}},
      {"x@GRAD", "y@GRAD"}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (double v : Values(out[0])) EXPECT_NEAR(v, 2.0 / 4, 1e-12);
  for (double v : Values(out[1])) EXPECT_NEAR(v, 1.0 / 4, 1e-12);
}

TEST(DtypeErrorTest, MessagesNameTheVars) {
  OpTest mul("mul");
  mul.Input("X", Random(proto::FP32, DDim{2, 4}, 1))
      .Input("Y", Random(proto::FP64, DDim{4, 3}, 2))
      .Output("Out");
  ExpectContains(VerifyProgram(mul.BuildProgram()), {"mul", "X_in", "Y_in", "float32", "float64"});

  OpTest sum("sum");
  sum.Inputs("X", {Random(proto::FP32, DDim{3}, 1), Random(proto::FP64, DDim{3}, 2)}).Output("Out");
  ExpectContains(VerifyProgram(sum.BuildProgram()),
                 {"sum", "X_in0", "X_in1", "float32", "float64"});
}

TEST(RandomAttrTest, RangeAndStdAreChecked) {
  OpTest u("uniform_random");
  u.Output("Out").Attr("min", 1.0f).Attr("max", -1.0f);
  ExpectContains(VerifyProgram(u.BuildProgram()), {"uniform_random", "min", "max"});

  OpTest g("gaussian_random");
  g.Output("Out").Attr("std", -1.0f);
  ExpectContains(VerifyProgram(g.BuildProgram()), {"gaussian_random", "std"});

  OpTest zero("gaussian_random");
  zero.Output("Out")
      .Attr("shape", std::vector<int64_t>{5})
      .Attr("std", 0.0f)
      .Attr("mean", 2.0f)
      .Attr("seed", 1);
  auto out = zero.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(Values(out.value()["Out"]), std::vector<double>(5, 2.0));
}

TEST(SgdDtypeTest, LearningRateMustMatchParam) {
  Tensor lr(proto::FP32, DDim{1});
  lr.mutable_data<float>(Place::CPU())[0] = 0.1f;
  OpTest t("sgd");
  t.Input("Param", Random(proto::FP64, DDim{2, 2}, 1))
      .Input("Grad", Random(proto::FP64, DDim{2, 2}, 2))
      .Input("LearningRate", lr)
      .Output("ParamOut");
  ExpectContains(VerifyProgram(t.BuildProgram()), {"sgd", "LearningRate_in", "Param"});
  // At run time too, rather than a failed dtype check inside the kernel.
  ExpectContains(t.Forward().status(), {"sgd", "LearningRate_in"});
}

TEST(ReluGradTest, ReadsOutNotX) {
  OpTest t("relu");
  t.Input("X", Random(proto::FP32, DDim{2, 2}, 1)).Output("Out");
  ProgramDesc p = t.BuildProgram();
  BlockDesc* b = p.GlobalBlock();
  b->Var("loss");
  b->AppendOp("mean", {{"X", {"Out_out"}}}, {{"Out", {"loss"}}});
  ASSERT_TRUE(InferShapes(b).ok());
  ASSERT_TRUE(AppendBackward(&p, "loss").ok());
  int found = 0;
  for (int i = 0; i < b->OpSize(); ++i) {
    OpDesc op = b->Op(i);
    if (op.Type() != "relu_grad") continue;
    ++found;
    EXPECT_FALSE(op.HasInput("X"));
    EXPECT_EQ(op.Input("Out"), std::vector<std::string>{"Out_out"});
    EXPECT_EQ(op.Output("X@GRAD"), std::vector<std::string>{"X_in@GRAD"});
  }
  EXPECT_EQ(found, 1);
}

TEST(CompileTimeDimsTest, UnknownBatchPassesAndPropagates) {
  OpTest mul("mul");
  mul.Input("X", Random(proto::FP32, DDim{2, 4}, 1))
      .Input("Y", Random(proto::FP32, DDim{4, 3}, 2))
      .Output("Out");
  ProgramDesc p = mul.BuildProgram();
  p.GlobalBlock()->FindVar("X_in").SetDims({-1, 4});
  ASSERT_TRUE(VerifyProgram(p).ok());
  ASSERT_TRUE(InferShapes(p.GlobalBlock()).ok());
  EXPECT_EQ(p.GlobalBlock()->FindVar("Out_out").Dims(), (DDim{-1, 3}));

  OpTest swce("softmax_with_cross_entropy");
  swce.Input("Logits", Random(proto::FP32, DDim{2, 5}, 1))
      .Input("Label", Ints(DDim{2, 1}, {0, 1}))
      .Output("Softmax")
      .Output("Loss");
  p = swce.BuildProgram();
  p.GlobalBlock()->FindVar("Logits_in").SetDims({-1, 5});
  p.GlobalBlock()->FindVar("Label_in").SetDims({-1, 1});
  ASSERT_TRUE(VerifyProgram(p).ok());
  ASSERT_TRUE(InferShapes(p.GlobalBlock()).ok());
  EXPECT_EQ(p.GlobalBlock()->FindVar("Loss_out").Dims(), (DDim{-1, 1}));
}

TEST(SwceRankTest, ThreeDimLogits) {
  OpTest t("softmax_with_cross_entropy");
  t.Input("Logits", Random(proto::FP64, DDim{2, 3, 4}, 1, -2, 2))
      .Input("Label", Ints(DDim{2, 3, 1}, {0, 1, 2, 3, 0, 1}))
      .Output("Softmax")
      .Output("Loss");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Loss"].dims(), (DDim{2, 3, 1}));
  EXPECT_EQ(t.CheckGrad("Loss", kEps64, kRtol64, kAtol64), "");
}

}  // namespace
}  // namespace loom::testing
