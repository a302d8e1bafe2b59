// Programs with several blocks: conditional_block runs its sub-block only when its condition
// holds, AppendBackward differentiates through it (a gradient block per sub-block), and the
// gradients equal those of the same program written without control flow, and finite
// differences.
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
using testing::RandomTensor;

Tensor Bool(bool v) {
  Tensor t(proto::BOOL, DDim{1});
  t.mutable_data<bool>(Place::CPU())[0] = v;
  return t;
}

void DeclareStepScopes(BlockDesc* b, const std::string& name) {
  b->Var(name).SetType(proto::VarType::STEP_SCOPES);
}

// Appends the ops of one branch, h = f(x) with f chosen by `relu_branch`:
//   relu branch:  h = relu(x·w1 + b1)      scale branch: h = 0.5 · (x·w1)
void AppendBranch(BlockDesc* b, bool relu_branch, const std::string& prefix) {
  std::string t0 = prefix + "t0", t1 = prefix + "t1";
  DeclareVar(b, t0, DDim{}, proto::FP64);
  b->AppendOp("mul", {{"X", {"x"}}, {"Y", {"w1"}}}, {{"Out", {t0}}});
  if (relu_branch) {
    DeclareVar(b, t1, DDim{}, proto::FP64);
    b->AppendOp("elementwise_add", {{"X", {t0}}, {"Y", {"b1"}}}, {{"Out", {t1}}}, {{"axis", 1}});
    b->AppendOp("relu", {{"X", {t1}}}, {{"Out", {"h"}}});
  } else {
    b->AppendOp("scale", {{"X", {t0}}}, {{"Out", {"h"}}}, {{"scale", 0.5f}});
  }
}

void DeclareCommon(BlockDesc* b) {
  DeclareVar(b, "x", DDim{-1, 4}, proto::FP64).SetStopGradient(true);
  DeclareVar(b, "label", DDim{-1, 1}, proto::INT64).SetStopGradient(true);
  DeclareVar(b, "w1", DDim{4, 5}, proto::FP64, true);
  DeclareVar(b, "b1", DDim{5}, proto::FP64, true);
  DeclareVar(b, "w2", DDim{5, 3}, proto::FP64, true);
  for (const char* n : {"h", "o", "prob", "xent", "loss"}) DeclareVar(b, n, DDim{}, proto::FP64);
}

void AppendHead(BlockDesc* b) {
  b->AppendOp("mul", {{"X", {"h"}}, {"Y", {"w2"}}}, {{"Out", {"o"}}});
  b->AppendOp("softmax_with_cross_entropy", {{"Logits", {"o"}}, {"Label", {"label"}}},
              {{"Softmax", {"prob"}}, {"Loss", {"xent"}}});
  b->AppendOp("mean", {{"X", {"xent"}}}, {{"Out", {"loss"}}});
}

// h = c ? relu(x·w1 + b1) : 0.5·(x·w1), as two conditional_blocks (c and not c) writing h;
// b1 is used by the first branch only.
ProgramDesc CondProgram() {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  DeclareCommon(b);
  DeclareVar(b, "c", DDim{1}, proto::BOOL).SetStopGradient(true);
  DeclareVar(b, "not_c", DDim{1}, proto::BOOL).SetStopGradient(true);
  DeclareStepScopes(b, "scope_true");
  DeclareStepScopes(b, "scope_false");
  BlockDesc* yes = p.AppendBlock(*b);
  AppendBranch(yes, /*relu_branch=*/true, "yes_");
  BlockDesc* no = p.AppendBlock(*b);
  AppendBranch(no, /*relu_branch=*/false, "no_");
  b->AppendOp("conditional_block", {{"Cond", {"c"}}, {"Input", {"x", "w1", "b1"}}},
              {{"Out", {"h"}}, {"Scope", {"scope_true"}}}, {{"sub_block", BlockIndex{1}}});
  b->AppendOp("logical_not", {{"X", {"c"}}}, {{"Out", {"not_c"}}});
  b->AppendOp("conditional_block", {{"Cond", {"not_c"}}, {"Input", {"x", "w1"}}},
              {{"Out", {"h"}}, {"Scope", {"scope_false"}}}, {{"sub_block", BlockIndex{2}}});
  AppendHead(b);
  return p;
}

// The branch written straight into block 0.
ProgramDesc FlatProgram(bool relu_branch) {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  DeclareCommon(b);
  AppendBranch(b, relu_branch, "");
  AppendHead(b);
  return p;
}

struct Fixture {
  Scope scope;
  FeedMap feeds;
  Fixture() {
    *scope.Var("w1")->GetMutable<Tensor>() = RandomTensor(proto::FP64, DDim{4, 5}, 1);
    *scope.Var("b1")->GetMutable<Tensor>() = RandomTensor(proto::FP64, DDim{5}, 2);
    *scope.Var("w2")->GetMutable<Tensor>() = RandomTensor(proto::FP64, DDim{5, 3}, 3);
    feeds = {{"x", RandomTensor(proto::FP64, DDim{6, 4}, 5)}, {"label", Labels(6, 3, 6)}};
  }
};

const std::vector<std::string> kGrads = {"w1@GRAD", "b1@GRAD", "w2@GRAD"};

std::vector<Tensor> RunGrads(const ProgramDesc& train, Fixture* f, const FeedMap& extra,
                             const std::vector<std::string>& fetches) {
  FeedMap feeds = f->feeds;
  for (const auto& [k, v] : extra) feeds[k] = v;
  Executor exe(Place::CPU());
  auto prepared = exe.Prepare(train);
  EXPECT_TRUE(prepared.ok()) << prepared.status().ToString();
  std::vector<Tensor> out;
  Status st = exe.Run(prepared->get(), &f->scope, feeds, fetches, &out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

TEST(ControlFlowTest, ConditionalBlockRunsItsSubBlockOnlyWhenTheConditionHolds) {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  DeclareVar(b, "x", DDim{2, 3}, proto::FP32);
  DeclareVar(b, "c", DDim{-1}, proto::INT32);
  DeclareVar(b, "y", DDim{2, 3}, proto::FP32);
  DeclareStepScopes(b, "s");
  BlockDesc* sub = p.AppendBlock(*b);
  DeclareVar(sub, "t", DDim{2, 3}, proto::FP32);
  sub->AppendOp("relu", {{"X", {"x"}}}, {{"Out", {"t"}}});
  sub->AppendOp("scale", {{"X", {"t"}}}, {{"Out", {"y"}}}, {{"scale", 2.0f}});
  b->AppendOp("fill_constant", {}, {{"Out", {"y"}}},
              {{"shape", std::vector<int64_t>{2, 3}}, {"value", -1.0f}});
  b->AppendOp("conditional_block", {{"Cond", {"c"}}, {"Input", {"x"}}},
              {{"Out", {"y"}}, {"Scope", {"s"}}}, {{"sub_block", BlockIndex{1}}});
  ASSERT_TRUE(VerifyProgram(p).ok()) << VerifyProgram(p).ToString();

  Executor exe(Place::CPU());
  auto prepared = exe.Prepare(p);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  Scope scope;
  Tensor x = RandomTensor(proto::FP32, DDim{2, 3}, 7);
  for (int32_t cond : {1, 0, 5}) {
    Tensor c(proto::INT32, DDim{1});
    c.mutable_data<int32_t>(Place::CPU())[0] = cond;
    std::vector<Tensor> out;
    Status st = exe.Run(prepared->get(), &scope, {{"x", x}, {"c", c}}, {"y"}, &out);
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (int i = 0; i < 6; ++i) {
      float want = cond ? 2.0f * std::max(0.0f, x.data<float>()[i]) : -1.0f;
      EXPECT_EQ(out[0].data<float>()[i], want) << "cond " << cond << " element " << i;
    }
  }
  // The sub-block's temporary lives in the sub-block's own scope, not the caller's.
  EXPECT_EQ(scope.FindVar("t"), nullptr);

  // A condition must hold one element.
  Tensor two(proto::INT32, DDim{2});
  two.mutable_data<int32_t>(Place::CPU())[0] = 1;
  two.mutable_data<int32_t>(Place::CPU())[1] = 1;
  Status st = exe.Run(prepared->get(), &scope, {{"x", x}, {"c", two}}, {"y"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("conditional_block"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'c'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("one element"), std::string::npos) << st.message();
}

TEST(ControlFlowTest, GradientsThroughBranchesEqualTheBranchWrittenFlat) {
  ProgramDesc train = CondProgram();
  auto pairs = AppendBackward(&train, "loss");
  ASSERT_TRUE(pairs.ok()) << pairs.status().ToString();
  Status verified = VerifyProgram(train);
  ASSERT_TRUE(verified.ok()) << verified.ToString();
  // One gradient block per branch, children of the branch blocks.
  ASSERT_EQ(train.NumBlocks(), 5);
  EXPECT_EQ(train.Block(3)->ParentIdx() + train.Block(4)->ParentIdx(), 1 + 2);
  // Every parameter's gradient is finished in block 0 (where the transpiler synchronizes it).
  std::set<std::string> params;
  for (const auto& pg : *pairs) params.insert(pg.param);
  EXPECT_EQ(params, (std::set<std::string>{"w1", "b1", "w2"}));

  for (bool cond : {true, false}) {
    Fixture with_cond, flat;
    ProgramDesc flat_train = FlatProgram(cond);
    ASSERT_TRUE(AppendBackward(&flat_train, "loss").ok());
    std::vector<std::string> flat_grads = {"w1@GRAD", "w2@GRAD"};
    if (cond) flat_grads.push_back("b1@GRAD");
    std::vector<Tensor> got = RunGrads(train, &with_cond, {{"c", Bool(cond)}}, kGrads);
    std::vector<Tensor> want = RunGrads(flat_train, &flat, {}, flat_grads);
    ASSERT_EQ(got.size(), 3u);
    ASSERT_EQ(want.size(), flat_grads.size());
    auto expect_equal = [&](const Tensor& a, const Tensor& b, const std::string& what) {
      ASSERT_EQ(a.dims(), b.dims()) << what;
      for (int64_t i = 0; i < a.numel(); ++i)
        EXPECT_NEAR(a.data<double>()[i], b.data<double>()[i], 1e-12) << what << " [" << i << "]";
    };
    expect_equal(got[0], want[0], "w1@GRAD, cond " + std::to_string(cond));
    expect_equal(got[2], want[1], "w2@GRAD, cond " + std::to_string(cond));
    if (cond) {
      expect_equal(got[1], want[2], "b1@GRAD");
    } else {
      // b1 is used only in the branch not taken: its gradient is zero, with b1's shape.
      ASSERT_EQ(got[1].dims(), DDim({5}));
      for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(got[1].data<double>()[i], 0.0);
    }
  }
}

TEST(ControlFlowTest, GradientsThroughBranchesMatchFiniteDifferences) {
  ProgramDesc forward = CondProgram();
  ProgramDesc train = forward;
  ASSERT_TRUE(AppendBackward(&train, "loss").ok());
  for (bool cond : {true, false}) {
    Fixture f;
    std::vector<Tensor> analytic = RunGrads(train, &f, {{"c", Bool(cond)}}, kGrads);
    ASSERT_EQ(analytic.size(), 3u);
    FeedMap feeds = f.feeds;
    feeds["c"] = Bool(cond);
    Executor exe(Place::CPU());
    auto prepared = exe.Prepare(forward);
    ASSERT_TRUE(prepared.ok());
    auto loss = [&] {
      std::vector<Tensor> out;
      EXPECT_TRUE(exe.Run(prepared->get(), &f.scope, feeds, {"loss"}, &out).ok());
      return out[0].data<double>()[0];
    };
    const double eps = 1e-6;
    for (size_t k = 0; k < kGrads.size(); ++k) {
      std::string param = kGrads[k].substr(0, kGrads[k].find('@'));
      double* p = f.scope.FindVar(param)->GetMutable<Tensor>()->data<double>();
      for (int64_t i = 0; i < analytic[k].numel(); ++i) {
        double keep = p[i];
        p[i] = keep + eps;
        double up = loss();
        p[i] = keep - eps;
        double down = loss();
        p[i] = keep;
        EXPECT_NEAR(analytic[k].data<double>()[i], (up - down) / (2 * eps), 1e-6)
            << param << "[" << i << "], cond " << cond;
      }
    }
  }
}

TEST(ControlFlowTest, AVariableBothWrittenForTheCallerAndReadInsideIsAClearBackwardError) {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  DeclareVar(b, "x", DDim{-1, 4}, proto::FP32).SetStopGradient(true);
  DeclareVar(b, "w", DDim{4, 4}, proto::FP32, true);
  DeclareVar(b, "c", DDim{1}, proto::BOOL).SetStopGradient(true);
  for (const char* n : {"h", "h2", "loss"}) DeclareVar(b, n, DDim{}, proto::FP32);
  DeclareStepScopes(b, "s");
  BlockDesc* sub = p.AppendBlock(*b);
  sub->AppendOp("mul", {{"X", {"x"}}, {"Y", {"w"}}}, {{"Out", {"h"}}});
  sub->AppendOp("relu", {{"X", {"h"}}}, {{"Out", {"h2"}}});
  b->AppendOp("conditional_block", {{"Cond", {"c"}}, {"Input", {"x", "w"}}},
              {{"Out", {"h", "h2"}}, {"Scope", {"s"}}}, {{"sub_block", BlockIndex{1}}});
  DeclareVar(b, "sum", DDim{}, proto::FP32);
  b->AppendOp("elementwise_add", {{"X", {"h"}}, {"Y", {"h2"}}}, {{"Out", {"sum"}}});
  b->AppendOp("mean", {{"X", {"sum"}}}, {{"Out", {"loss"}}});
  auto pairs = AppendBackward(&p, "loss");
  ASSERT_FALSE(pairs.ok());
  EXPECT_NE(pairs.status().message().find("h@GRAD"), std::string::npos) << pairs.status().message();
  EXPECT_NE(pairs.status().message().find("sub-block 1"), std::string::npos)
      << pairs.status().message();
}

TEST(ControlFlowTest, CompareAndLogicalOps) {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  DeclareVar(b, "x", DDim{2, 3}, proto::FP32);
  DeclareVar(b, "y", DDim{3}, proto::FP32);
  for (const char* n : {"lt", "ge", "eq", "ne", "not_lt", "and", "or", "xor"})
    DeclareVar(b, n, DDim{}, proto::BOOL);
  b->AppendOp("less_than", {{"X", {"x"}}, {"Y", {"y"}}}, {{"Out", {"lt"}}});
  b->AppendOp("greater_equal", {{"X", {"x"}}, {"Y", {"y"}}}, {{"Out", {"ge"}}});
  b->AppendOp("equal", {{"X", {"x"}}, {"Y", {"y"}}}, {{"Out", {"eq"}}});
  b->AppendOp("not_equal", {{"X", {"x"}}, {"Y", {"y"}}}, {{"Out", {"ne"}}});
  b->AppendOp("logical_not", {{"X", {"lt"}}}, {{"Out", {"not_lt"}}});
  b->AppendOp("logical_and", {{"X", {"lt"}}, {"Y", {"ne"}}}, {{"Out", {"and"}}});
  b->AppendOp("logical_or", {{"X", {"lt"}}, {"Y", {"eq"}}}, {{"Out", {"or"}}});
  b->AppendOp("logical_xor", {{"X", {"ge"}}, {"Y", {"eq"}}}, {{"Out", {"xor"}}});
  ASSERT_TRUE(VerifyProgram(p).ok()) << VerifyProgram(p).ToString();
  Tensor x(proto::FP32, DDim{2, 3}), y(proto::FP32, DDim{3});
  const float xs[6] = {1, 2, 3, 4, 5, 6}, ys[3] = {2, 2, 7};
  std::copy(xs, xs + 6, x.mutable_data<float>(Place::CPU()));
  std::copy(ys, ys + 3, y.mutable_data<float>(Place::CPU()));
  Executor exe(Place::CPU());
  Scope scope;
  std::vector<Tensor> out;
  std::vector<std::string> names = {"lt", "ge", "eq", "ne", "not_lt", "and", "or", "xor"};
  ASSERT_TRUE(exe.Run(p, &scope, {{"x", x}, {"y", y}}, names, &out).ok());
  for (int i = 0; i < 6; ++i) {
    float a = xs[i], c = ys[i % 3];
    bool lt = a < c, ge = a >= c, eq = a == c, ne = a != c;
    bool want[8] = {lt, ge, eq, ne, !lt, lt && ne, lt || eq, ge != eq};
    for (int k = 0; k < 8; ++k) {
      ASSERT_EQ(out[k].dtype(), proto::BOOL);
      EXPECT_EQ(out[k].data<bool>()[i], want[k]) << names[k] << " [" << i << "]";
    }
  }
  // Mismatched dtypes are refused at shape inference, naming both vars.
  DeclareVar(b, "k", DDim{3}, proto::INT32);
  b->AppendOp("less_than", {{"X", {"x"}}, {"Y", {"k"}}}, {{"Out", {"lt"}}});
  Status st = VerifyProgram(p);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'k'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("int32"), std::string::npos) << st.message();
}

// A write ends the gradient of the value it overwrites: y = x·w; y = 3·y; y = y + 1 (both in
// place); loss = mean(y·y). The gradient flows through each value of y once. (Grad ops that
// need an overwritten value itself, e.g. relu's output, would read the last one: programs
// keep such values in variables of their own, as the Python layers do.)
TEST(ControlFlowTest, OverwrittenVariablesDifferentiateThroughEachValue) {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  DeclareVar(b, "x", DDim{-1, 3}, proto::FP64).SetStopGradient(true);
  DeclareVar(b, "w", DDim{3, 2}, proto::FP64, true);
  for (const char* n : {"y", "sq", "loss"}) DeclareVar(b, n, DDim{}, proto::FP64);
  b->AppendOp("mul", {{"X", {"x"}}, {"Y", {"w"}}}, {{"Out", {"y"}}});
  b->AppendOp("scale", {{"X", {"y"}}}, {{"Out", {"y"}}}, {{"scale", 3.0f}});
  b->AppendOp("scale", {{"X", {"y"}}}, {{"Out", {"y"}}}, {{"bias", 1.0f}});
  b->AppendOp("elementwise_mul", {{"X", {"y"}}, {"Y", {"y"}}}, {{"Out", {"sq"}}});
  b->AppendOp("mean", {{"X", {"sq"}}}, {{"Out", {"loss"}}});
  ProgramDesc forward = p;
  ASSERT_TRUE(AppendBackward(&p, "loss").ok());
  ASSERT_TRUE(VerifyProgram(p).ok()) << VerifyProgram(p).ToString();
  Scope scope;
  Tensor w = RandomTensor(proto::FP64, DDim{3, 2}, 8);
  *scope.Var("w")->GetMutable<Tensor>() = w;
  FeedMap feeds = {{"x", RandomTensor(proto::FP64, DDim{4, 3}, 9)}};
  Executor exe(Place::CPU());
  std::vector<Tensor> grad;
  ASSERT_TRUE(exe.Run(p, &scope, feeds, {"w@GRAD"}, &grad).ok());
  auto loss = [&] {
    std::vector<Tensor> out;
    EXPECT_TRUE(exe.Run(forward, &scope, feeds, {"loss"}, &out).ok());
    return out[0].data<double>()[0];
  };
  double* wp = scope.FindVar("w")->GetMutable<Tensor>()->data<double>();
  bool nonzero = false;
  for (int i = 0; i < 6; ++i) {
    double keep = wp[i];
    wp[i] = keep + 1e-6;
    double up = loss();
    wp[i] = keep - 1e-6;
    double down = loss();
    wp[i] = keep;
    EXPECT_NEAR(grad[0].data<double>()[i], (up - down) / 2e-6, 1e-6) << "w[" << i << "]";
    nonzero |= grad[0].data<double>()[i] != 0;
  }
  EXPECT_TRUE(nonzero);
}

// relu's gradient needs relu's output y, which a later op overwrites: a clear error, not a
// silently wrong gradient.
TEST(ControlFlowTest, AGradientThatNeedsAnOverwrittenValueIsAClearError) {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  DeclareVar(b, "x", DDim{-1, 3}, proto::FP32).SetStopGradient(true);
  DeclareVar(b, "w", DDim{3, 2}, proto::FP32, true);
  for (const char* n : {"t", "y", "loss"}) DeclareVar(b, n, DDim{}, proto::FP32);
  b->AppendOp("mul", {{"X", {"x"}}, {"Y", {"w"}}}, {{"Out", {"t"}}});
  b->AppendOp("relu", {{"X", {"t"}}}, {{"Out", {"y"}}});
  b->AppendOp("scale", {{"X", {"y"}}}, {{"Out", {"y"}}}, {{"scale", 2.0f}});
  b->AppendOp("mean", {{"X", {"y"}}}, {{"Out", {"loss"}}});
  auto pairs = AppendBackward(&p, "loss");
  ASSERT_FALSE(pairs.ok());
  const std::string& m = pairs.status().message();
  EXPECT_NE(m.find("op 'relu' (block 0, #1) reads 'y'"), std::string::npos) << m;
  EXPECT_NE(m.find("op 'scale' (block 0, #2) overwrites afterwards"), std::string::npos) << m;
}

}  // namespace
}  // namespace loom
