// Executor: feeds, fetches, scopes, prepared reuse, and error messages naming op and var.
#include <gtest/gtest.h>

#include "executor/executor.h"
#include "test_programs.h"

namespace loom {
namespace {

using testing::DeclareVar;
using testing::RandomTensor;

ProgramDesc ScaleChain(int n) {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  DeclareVar(b, "v0", DDim{-1, 3}, proto::FP32);
  for (int i = 1; i <= n; ++i) {
    DeclareVar(b, "v" + std::to_string(i), DDim{-1, 3}, proto::FP32);
    b->AppendOp("scale", {{"X", {"v" + std::to_string(i - 1)}}},
                {{"Out", {"v" + std::to_string(i)}}}, {{"scale", 2.0f}, {"bias", 1.0f}});
  }
  return p;
}

TEST(ExecutorTest, FeedRunFetch) {
  ProgramDesc p = ScaleChain(3);
  Executor exe;
  Scope scope;
  auto prepared = exe.Prepare(p);
  ASSERT_TRUE(prepared.ok());
  Tensor x = RandomTensor(proto::FP32, DDim{2, 3}, 1);
  std::vector<Tensor> out;
  ASSERT_TRUE(exe.Run(prepared->get(), &scope, {{"v0", x}}, {"v3", "v1"}, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  for (int i = 0; i < 6; ++i) {
    float v = x.data<float>()[i];
    EXPECT_FLOAT_EQ(out[1].data<float>()[i], 2 * v + 1);
    EXPECT_FLOAT_EQ(out[0].data<float>()[i], 2 * (2 * (2 * v + 1) + 1) + 1);
  }
  // Reuse with another batch size.
  Tensor y = RandomTensor(proto::FP32, DDim{5, 3}, 2);
  ASSERT_TRUE(exe.Run(prepared->get(), &scope, {{"v0", y}}, {"v1"}, &out).ok());
  EXPECT_EQ(out[0].dims(), (DDim{5, 3}));
  // Fetched tensors are copies: a later run does not change them.
  float before = out[0].data<float>()[0];
  ASSERT_TRUE(exe.Run(prepared->get(), &scope, {{"v0", x.Slice(0, 1)}}, {}, nullptr).ok());
  EXPECT_EQ(out[0].data<float>()[0], before);
}

TEST(ExecutorTest, TemporariesLiveInAChildScopePersistablesOutside) {
  ProgramDesc p = ScaleChain(1);
  p.GlobalBlock()->FindVar("v1").SetPersistable(true);
  Executor exe;
  Scope scope;
  ASSERT_TRUE(exe.Run(p, &scope, {{"v0", RandomTensor(proto::FP32, DDim{1, 3}, 3)}}).ok());
  EXPECT_NE(scope.FindLocalVar("v1"), nullptr);
  EXPECT_EQ(scope.FindLocalVar("v0"), nullptr);
}

TEST(ExecutorTest, MissingFeedNamesOpAndVar) {
  ProgramDesc p = ScaleChain(2);
  Executor exe;
  Scope scope;
  Status st = exe.Run(p, &scope);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("op 'scale' (block 0, #0)"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'v0'"), std::string::npos) << st.message();
}

TEST(ExecutorTest, UnfedInputIsNotSilentlyReusedFromAnEarlierRun) {
  ProgramDesc p = ScaleChain(1);
  Executor exe;
  Scope scope;
  auto prepared = exe.Prepare(p);
  ASSERT_TRUE(prepared.ok());
  ASSERT_TRUE(exe.Run(prepared->get(), &scope, {{"v0", RandomTensor(proto::FP32, DDim{1, 3}, 1)}}).ok());
  Status st = exe.Run(prepared->get(), &scope, {}, {"v1"}, nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'v0'"), std::string::npos) << st.message();
}

TEST(ExecutorTest, WrongFeedDtypeShapeOrName) {
  ProgramDesc p = ScaleChain(1);
  Executor exe;
  Scope scope;
  Status dtype = exe.Run(p, &scope, {{"v0", RandomTensor(proto::FP64, DDim{2, 3}, 1)}});
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.message().find("float64"), std::string::npos);
  EXPECT_NE(dtype.message().find("float32"), std::string::npos);
  Status shape = exe.Run(p, &scope, {{"v0", RandomTensor(proto::FP32, DDim{2, 4}, 1)}});
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.message().find("[2, 4]"), std::string::npos);
  EXPECT_NE(shape.message().find("[-1, 3]"), std::string::npos);
  Status name = exe.Run(p, &scope, {{"nope", RandomTensor(proto::FP32, DDim{2, 3}, 1)}});
  ASSERT_FALSE(name.ok());
  EXPECT_NE(name.message().find("'nope'"), std::string::npos);
}

TEST(ExecutorTest, FetchingAnUnknownVarFails) {
  ProgramDesc p = ScaleChain(1);
  Executor exe;
  Scope scope;
  std::vector<Tensor> out;
  Status st = exe.Run(p, &scope, {{"v0", RandomTensor(proto::FP32, DDim{1, 3}, 1)}},
                      {"ghost"}, &out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'ghost'"), std::string::npos);
}

TEST(ExecutorTest, PrepareRejectsUnknownOpsAndBadAttrs) {
  ProgramDesc p = ScaleChain(2);
  p.GlobalBlock()->Op(1).SetType("frobnicate");
  Executor exe;
  auto r = exe.Prepare(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("frobnicate"), std::string::npos);
  EXPECT_NE(r.status().message().find("#1"), std::string::npos);
  ProgramDesc q = ScaleChain(1);
  q.GlobalBlock()->Op(0).SetAttr("scale", 2);  // int instead of float
  auto bad = exe.Prepare(q);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'scale' must be float"), std::string::npos);
}

TEST(ExecutorTest, CudaPlaceWithoutDeviceIsAnError) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  Executor exe(Place::CUDA(0));
  auto r = exe.Prepare(ScaleChain(1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cuda:0"), std::string::npos);
}

TEST(ExecutorTest, RunsOnIndependentCpuPlaces) {
  ProgramDesc p = ScaleChain(2);
  Tensor x = RandomTensor(proto::FP32, DDim{4, 3}, 4);
  std::vector<Tensor> a, b;
  Scope s0, s1;
  Executor e0(Place::CPU(0)), e1(Place::CPU(1));
  ASSERT_TRUE(e0.Run(p, &s0, {{"v0", x}}, {"v2"}, &a).ok());
  ASSERT_TRUE(e1.Run(p, &s1, {{"v0", x}}, {"v2"}, &b).ok());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(a[0].data<float>()[i], b[0].data<float>()[i]);
}

}  // namespace
}  // namespace loom
