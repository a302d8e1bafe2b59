// Executor: feeds, fetches, scopes, prepared reuse, and error messages naming op and var.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "executor/executor.h"
#include "framework/op_registry.h"
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
  ASSERT_TRUE(
      exe.Run(prepared->get(), &scope, {{"v0", RandomTensor(proto::FP32, DDim{1, 3}, 1)}}).ok());
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
  Status st =
      exe.Run(p, &scope, {{"v0", RandomTensor(proto::FP32, DDim{1, 3}, 1)}}, {"ghost"}, &out);
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

// ---- dependency scheduling ----
// test_gated_copy copies X to Out on a thread that finishes only when the gate opens (or after
// 2 s); test_log copies X to Out, appends its tag to a log and, with open_gate, opens the gate.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::vector<std::string> log;
};
Gate& TheGate() {
  static Gate g;
  return g;
}

Status GatedCopy(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  out->Resize(x.dims());
  float* dst = out->mutable_data<float>(Place::CPU());
  const float* src = x.data<float>();
  int64_t n = x.numel();
  auto done = std::make_shared<std::atomic<bool>>(false);
  auto worker = std::make_shared<std::thread>([=] {
    Gate& g = TheGate();
    std::unique_lock<std::mutex> lock(g.mu);
    g.cv.wait_for(lock, std::chrono::seconds(2), [&] { return g.open; });
    g.log.push_back(g.open ? "copy after gate" : "copy timed out");
    std::copy(src, src + n, dst);
    done->store(true);
  });
  ctx.SetAsync(
      [worker](AsyncSpan*) {
        worker->join();
        return Status::OK();
      },
      [done] { return done->load(); });
  return Status::OK();
}

Status LogCopy(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  out->Resize(x.dims());
  std::copy(x.data<float>(), x.data<float>() + x.numel(), out->mutable_data<float>(Place::CPU()));
  Gate& g = TheGate();
  std::lock_guard<std::mutex> lock(g.mu);
  g.log.push_back(ctx.Attr<std::string>("tag"));
  if (ctx.Attr<bool>("open_gate")) {
    g.open = true;
    g.cv.notify_all();
  }
  return Status::OK();
}

LOOM_REGISTER_OP(test_gated_copy)
    .Doc("test: copies X to Out asynchronously once the gate opens")
    .Input("X", "")
    .Input("Comm", "", false, /*dispensable=*/true)
    .Output("Out", "")
    .Kernel(Place::kCPU, proto::FP32, GatedCopy);
LOOM_REGISTER_OP(test_log)
    .Doc("test: copies X to Out and logs its tag")
    .Input("X", "")
    .Input("Comm", "", false, /*dispensable=*/true)
    .Output("Out", "")
    .Attr<std::string>("tag", "", "")
    .Attr<bool>("open_gate", false, "")
    .Kernel(Place::kCPU, proto::FP32, LogCopy);

LOOM_REGISTER_OP(test_ordered_log)
    .Ordered()
    .Doc("test: test_log registered Ordered() (an op with effects outside the scope)")
    .Input("X", "")
    .Output("Out", "")
    .Attr<std::string>("tag", "", "")
    .Attr<bool>("open_gate", false, "")
    .Kernel(Place::kCPU, proto::FP32, LogCopy);

std::vector<std::string> RunGated(const ProgramDesc& p, Scope* scope, std::vector<Tensor>* out) {
  Gate& g = TheGate();
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.open = false;
    g.log.clear();
  }
  Executor exe;
  Tensor a = RandomTensor(proto::FP32, DDim{2, 3}, 7);
  Status st = exe.Run(p, scope, {{"a", a}}, {"c", "d"}, out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  for (int i = 0; i < 6 && out->size() == 2; ++i) {
    EXPECT_EQ((*out)[0].data<float>()[i], a.data<float>()[i]);
    EXPECT_EQ((*out)[1].data<float>()[i], a.data<float>()[i]);
  }
  std::lock_guard<std::mutex> lock(g.mu);
  return g.log;
}

// a -> gated_copy -> b -> log("dependent") -> c ; a -> log("independent", opens gate) -> d
ProgramDesc GatedProgram(bool share_comm) {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  for (const char* v : {"a", "b", "c", "d"}) DeclareVar(b, v, DDim{-1, 3}, proto::FP32);
  using Slots = std::vector<std::pair<std::string, std::vector<std::string>>>;
  Slots comm;
  if (share_comm) {
    b->Var("comm").SetType(proto::VarType::COMMUNICATOR);
    b->Var("comm").SetPersistable(true);
    comm = {{"Comm", {"comm"}}};
  }
  auto with = [&](Slots in) {
    in.insert(in.end(), comm.begin(), comm.end());
    return in;
  };
  b->AppendOp("test_gated_copy", with(Slots{{"X", {"a"}}}), {{"Out", {"b"}}}, {});
  b->AppendOp("test_log", {{"X", {"b"}}}, {{"Out", {"c"}}}, {{"tag", std::string("dependent")}});
  b->AppendOp("test_log", with(Slots{{"X", {"a"}}}), {{"Out", {"d"}}},
              {{"tag", std::string("independent")}, {"open_gate", true}});
  return p;
}

TEST(ExecutorScheduleTest, IndependentOpsRunWhileACallIsInFlight) {
  // The op reading b waits for the running copy; the op that does not need it runs first and
  // opens the gate. In program order the copy would time out first.
  Scope scope;
  std::vector<Tensor> out;
  std::vector<std::string> log = RunGated(GatedProgram(false), &scope, &out);
  EXPECT_EQ(log, (std::vector<std::string>{"independent", "copy after gate", "dependent"}));
}

TEST(ExecutorScheduleTest, OpsSharingACommunicatorKeepProgramOrder) {
  // Same program, but both async-capable ops name one communicator: the second may not pass the
  // first (ranks must issue collectives in the same order), so the copy times out first.
  Scope scope;
  scope.Var("comm")->GetMutable<int>();
  std::vector<Tensor> out;
  std::vector<std::string> log = RunGated(GatedProgram(true), &scope, &out);
  EXPECT_EQ(log, (std::vector<std::string>{"copy timed out", "dependent", "independent"}));
}

TEST(ExecutorScheduleTest, OrderedOpsKeepProgramOrderAmongThemselves) {
  // As GatedProgram(false), with the two logging ops registered Ordered() (a trainer's send of a
  // gradient an allreduce is still writing, then its barrier): the second may not pass the
  // first, which waits for the copy, so the copy times out first.
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  for (const char* v : {"a", "b", "c", "d"}) DeclareVar(b, v, DDim{-1, 3}, proto::FP32);
  b->AppendOp("test_gated_copy", {{"X", {"a"}}}, {{"Out", {"b"}}}, {});
  b->AppendOp("test_ordered_log", {{"X", {"b"}}}, {{"Out", {"c"}}},
              {{"tag", std::string("dependent")}});
  b->AppendOp("test_ordered_log", {{"X", {"a"}}}, {{"Out", {"d"}}},
              {{"tag", std::string("independent")}, {"open_gate", true}});
  Scope scope;
  std::vector<Tensor> out;
  std::vector<std::string> log = RunGated(p, &scope, &out);
  EXPECT_EQ(log, (std::vector<std::string>{"copy timed out", "dependent", "independent"}));
}

TEST(ExecutorScheduleTest, WithoutRunningCallsTheOrderIsProgramOrder) {
  // Ops that do not depend on each other still run in program order when nothing is in flight.
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  for (const char* v : {"a", "c", "d"}) DeclareVar(b, v, DDim{-1, 3}, proto::FP32);
  b->AppendOp("test_log", {{"X", {"a"}}}, {{"Out", {"d"}}}, {{"tag", std::string("first")}});
  b->AppendOp("test_log", {{"X", {"a"}}}, {{"Out", {"c"}}}, {{"tag", std::string("second")}});
  Scope scope;
  std::vector<Tensor> out;
  std::vector<std::string> log = RunGated(p, &scope, &out);
  EXPECT_EQ(log, (std::vector<std::string>{"first", "second"}));
}

TEST(ExecutorScheduleTest, WriteAfterReadWaitsForTheReader) {
  // gated_copy reads a; a later op overwrites a: it must wait for the copy to finish reading.
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  for (const char* v : {"a", "b", "c", "d"}) DeclareVar(b, v, DDim{-1, 3}, proto::FP32);
  b->AppendOp("test_gated_copy", {{"X", {"a"}}}, {{"Out", {"b"}}}, {});
  b->AppendOp("test_log", {{"X", {"d"}}}, {{"Out", {"a"}}}, {{"tag", std::string("overwrite")}});
  b->AppendOp("test_log", {{"X", {"b"}}}, {{"Out", {"c"}}},
              {{"tag", std::string("read copy")}, {"open_gate", true}});
  Gate& g = TheGate();
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.open = false;
    g.log.clear();
  }
  Tensor a = RandomTensor(proto::FP32, DDim{2, 3}, 8), d = RandomTensor(proto::FP32, DDim{2, 3}, 9);
  Tensor a0 = RandomTensor(proto::FP32, DDim{2, 3}, 8);  // a's values (the feed's memory is reused)
  Scope scope;
  std::vector<Tensor> out;
  Executor exe;
  ASSERT_TRUE(exe.Run(p, &scope, {{"a", a}, {"d", d}}, {"b", "a"}, &out).ok());
  EXPECT_EQ(g.log, (std::vector<std::string>{"copy timed out", "overwrite", "read copy"}));
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(out[0].data<float>()[i], a0.data<float>()[i]);  // the copy saw the old a
    EXPECT_EQ(out[1].data<float>()[i], d.data<float>()[i]);
  }
}

}  // namespace
}  // namespace loom
