// AppendBackward: structure of the generated ops and a whole-program numeric gradient check.
#include <gtest/gtest.h>

#include <cmath>

#include "executor/executor.h"
#include "framework/backward.h"
#include "framework/verifier.h"
#include "test_programs.h"

namespace loom {
namespace {

using testing::DeclareVar;
using testing::Labels;
using testing::MlpProgram;
using testing::RandomTensor;

// Loss of program p with parameters from scope, fetched as double.
double RunLoss(Executor& exe, PreparedBlock* prepared, Scope* scope, const FeedMap& feeds) {
  std::vector<Tensor> out;
  Status st = exe.Run(prepared, scope, feeds, {"loss"}, &out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out[0].dtype() == proto::FP64 ? out[0].data<double>()[0] : out[0].data<float>()[0];
}

TEST(BackwardTest, MlpGradientsMatchFiniteDifferences) {
  ProgramDesc forward = MlpProgram(proto::FP64);
  ProgramDesc train = forward;
  auto pairs = AppendBackward(&train, "loss");
  ASSERT_TRUE(pairs.ok()) << pairs.status().ToString();
  Status verified = VerifyProgram(train);
  ASSERT_TRUE(verified.ok()) << verified.ToString();
  ASSERT_EQ(pairs->size(), 4u);
  // Gradients become ready in reverse order of use: b2, w2 first, w1 last.
  EXPECT_EQ(pairs->front().param, "b2");
  EXPECT_EQ(pairs->back().param, "w1");

  Scope scope;
  std::map<std::string, Tensor> params = {{"w1", RandomTensor(proto::FP64, DDim{4, 5}, 1)},
                                          {"b1", RandomTensor(proto::FP64, DDim{5}, 2)},
                                          {"w2", RandomTensor(proto::FP64, DDim{5, 3}, 3)},
                                          {"b2", RandomTensor(proto::FP64, DDim{3}, 4)}};
  for (auto& [name, t] : params) *scope.Var(name)->GetMutable<Tensor>() = t;
  FeedMap feeds = {{"x", RandomTensor(proto::FP64, DDim{6, 4}, 5)}, {"label", Labels(6, 3, 6)}};

  Executor exe(Place::CPU());
  auto fwd = exe.Prepare(forward);
  auto bwd = exe.Prepare(train);
  ASSERT_TRUE(fwd.ok() && bwd.ok());
  std::vector<std::string> grads;
  for (const auto& pg : *pairs) grads.push_back(pg.grad);
  std::vector<Tensor> analytic;
  ASSERT_TRUE(exe.Run(bwd->get(), &scope, feeds, grads, &analytic).ok());

  const double eps = 1e-6;
  for (size_t k = 0; k < pairs->size(); ++k) {
    Tensor* param = scope.FindVar((*pairs)[k].param)->GetMutable<Tensor>();
    double* p = param->data<double>();
    for (int64_t i = 0; i < param->numel(); ++i) {
      double saved = p[i];
      p[i] = saved + eps;
      double up = RunLoss(exe, fwd->get(), &scope, feeds);
      p[i] = saved - eps;
      double down = RunLoss(exe, fwd->get(), &scope, feeds);
      p[i] = saved;
      double numeric = (up - down) / (2 * eps);
      double got = analytic[k].data<double>()[i];
      EXPECT_NEAR(got, numeric, 1e-6 + 1e-5 * std::abs(numeric))
          << (*pairs)[k].grad << "[" << i << "]";
    }
  }
}

TEST(BackwardTest, SetsRolesAndRoleVars) {
  ProgramDesc p = MlpProgram(proto::FP32);
  int forward_ops = p.GlobalBlock()->OpSize();
  auto pairs = AppendBackward(&p, "loss");
  ASSERT_TRUE(pairs.ok()) << pairs.status().ToString();
  BlockDesc* b = p.GlobalBlock();
  EXPECT_TRUE(b->Op(forward_ops - 1).Role() & kOpRoleLoss);  // mean produced the loss
  OpDesc seed = b->Op(forward_ops);
  EXPECT_EQ(seed.Type(), "fill_constant");
  EXPECT_EQ(seed.Role(), kOpRoleBackward | kOpRoleLoss);
  std::map<std::string, std::string> role_vars;
  for (int i = forward_ops; i < b->OpSize(); ++i) {
    OpDesc op = b->Op(i);
    EXPECT_TRUE(op.Role() & kOpRoleBackward) << op.Type();
    auto rv = op.Attr<std::vector<std::string>>(kOpRoleVarAttr, {});
    ASSERT_EQ(rv.size() % 2, 0u);
    for (size_t j = 0; j < rv.size(); j += 2) role_vars[rv[j]] = rv[j + 1];
  }
  EXPECT_EQ(role_vars.size(), 4u);
  for (const auto& pg : *pairs) EXPECT_EQ(role_vars[pg.param], pg.grad);
  // Data and labels are stop_gradient: no gradient is computed for them.
  EXPECT_FALSE(b->HasVar("x@GRAD"));
  EXPECT_FALSE(b->HasVar("label@GRAD"));
}

TEST(BackwardTest, VarUsedTwiceGetsSummedGradient) {
  // loss = mean(scale(w, 2) + scale(w, 3)) -> d loss / d w = 5 / n for every element.
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  DeclareVar(b, "w", DDim{4}, proto::FP64, true);
  for (const char* n : {"a", "c", "s", "loss"}) DeclareVar(b, n, DDim{}, proto::FP64);
  b->AppendOp("scale", {{"X", {"w"}}}, {{"Out", {"a"}}}, {{"scale", 2.0f}});
  b->AppendOp("scale", {{"X", {"w"}}}, {{"Out", {"c"}}}, {{"scale", 3.0f}});
  b->AppendOp("elementwise_add", {{"X", {"a"}}, {"Y", {"c"}}}, {{"Out", {"s"}}});
  b->AppendOp("mean", {{"X", {"s"}}}, {{"Out", {"loss"}}});
  ASSERT_TRUE(InferShapes(b).ok());
  auto pairs = AppendBackward(&p, "loss");
  ASSERT_TRUE(pairs.ok()) << pairs.status().ToString();
  int sums = 0;
  for (int i = 0; i < b->OpSize(); ++i) sums += b->Op(i).Type() == "sum";
  EXPECT_EQ(sums, 1);
  EXPECT_TRUE(b->HasVar("w@GRAD@RENAME@0"));
  EXPECT_TRUE(b->HasVar("w@GRAD@RENAME@1"));
  ASSERT_TRUE(VerifyProgram(p).ok()) << VerifyProgram(p).ToString();

  Scope scope;
  *scope.Var("w")->GetMutable<Tensor>() = RandomTensor(proto::FP64, DDim{4}, 9);
  Executor exe;
  std::vector<Tensor> out;
  Status st = exe.Run(p, &scope, {}, {"w@GRAD"}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[0].data<double>()[i], 5.0 / 4, 1e-12);
}

TEST(BackwardTest, NoGradSetFreezesParameters) {
  ProgramDesc p = MlpProgram(proto::FP32);
  auto pairs = AppendBackward(&p, "loss", {"w1", "b1"});
  ASSERT_TRUE(pairs.ok());
  std::set<std::string> params;
  for (const auto& pg : *pairs) params.insert(pg.param);
  EXPECT_EQ(params, (std::set<std::string>{"w2", "b2"}));
  // Nothing upstream of the frozen layer needs a gradient, so its grad ops are pruned.
  EXPECT_FALSE(p.GlobalBlock()->HasVar("w1@GRAD"));
  EXPECT_FALSE(p.GlobalBlock()->HasVar("h0@GRAD"));
}

TEST(BackwardTest, ClearErrors) {
  ProgramDesc p = MlpProgram(proto::FP32);
  auto missing = AppendBackward(&p, "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos);
  ProgramDesc q = MlpProgram(proto::FP32);
  ASSERT_TRUE(InferShapes(q.GlobalBlock()).ok());
  q.GlobalBlock()->FindVar("b1").SetDims({5});
  q.GlobalBlock()->FindVar("h2").SetDims({2, 5});
  auto not_scalar = AppendBackward(&q, "h2");
  ASSERT_FALSE(not_scalar.ok());
  EXPECT_NE(not_scalar.status().message().find("one element"), std::string::npos);
  auto int_loss = AppendBackward(&q, "label");
  ASSERT_FALSE(int_loss.ok());
  EXPECT_NE(int_loss.status().message().find("floating point"), std::string::npos);
}

// One grad op writing two contributions to one gradient (x * x): both kept and summed.
TEST(BackwardTest, AnOpReadingOneVariableTwiceGetsBothContributions) {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  DeclareVar(b, "x", DDim{2, 3}, proto::FP64, true);
  for (const char* n : {"sq", "loss"}) DeclareVar(b, n, DDim{}, proto::FP64);
  b->AppendOp("elementwise_mul", {{"X", {"x"}}, {"Y", {"x"}}}, {{"Out", {"sq"}}});
  b->AppendOp("mean", {{"X", {"sq"}}}, {{"Out", {"loss"}}});
  ASSERT_TRUE(AppendBackward(&p, "loss").ok());
  ASSERT_TRUE(VerifyProgram(p).ok()) << VerifyProgram(p).ToString();
  Scope scope;
  Tensor x = RandomTensor(proto::FP64, DDim{2, 3}, 3);
  *scope.Var("x")->GetMutable<Tensor>() = x;
  Executor exe(Place::CPU());
  std::vector<Tensor> g;
  ASSERT_TRUE(exe.Run(p, &scope, {}, {"x@GRAD"}, &g).ok());
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(g[0].data<double>()[i], 2 * x.data<double>()[i] / 6, 1e-12) << i;
}

}  // namespace
}  // namespace loom
