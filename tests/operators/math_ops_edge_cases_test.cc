// Edge cases of the basic math operators: every dtype of the creation ops, fp32 gradient checks,
// batch size 1 and zero-size batches, in-place sum and sgd, int32 labels, attribute errors, and
// the CUDA kernels against the CPU ones (skipped without a device).
#include <gtest/gtest.h>

#include <cmath>

#include "framework/verifier.h"
#include "op_test_util.h"
#include "tests/gpu_required.h"

namespace loom::testing {
namespace {

constexpr double kEps64 = 1e-6, kRtol64 = 1e-6, kAtol64 = 1e-8;
constexpr double kEps32 = 1e-2, kRtol32 = 5e-3, kAtol32 = 5e-3;

std::string CheckGradFor(OpTest& t, const std::string& out, DataType dt) {
  return dt == proto::FP64 ? t.CheckGrad(out, kEps64, kRtol64, kAtol64)
                           : t.CheckGrad(out, kEps32, kRtol32, kAtol32);
}

void ExpectContains(const std::string& text, std::initializer_list<const char*> parts) {
  for (const char* p : parts) EXPECT_NE(text.find(p), std::string::npos) << text;
}

Tensor Int32s(DDim dims, std::vector<int32_t> values) {
  Tensor t(proto::INT32, dims);
  int32_t* p = t.mutable_data<int32_t>(Place::CPU());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = values[i];
  return t;
}

// ---------------------------------------------------------------- creation ops

TEST(FillConstantCasesTest, EveryCpuDtype) {
  for (DataType dt : {proto::FP32, proto::FP64, proto::INT32, proto::INT64, proto::BOOL}) {
    OpTest t("fill_constant");
    t.Output("Out")
        .Attr("shape", std::vector<int64_t>{2, 2})
        .Attr("value", 1.0f)
        .Attr("dtype", static_cast<int>(dt));
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << DataTypeName(dt) << ": " << out.status().ToString();
    EXPECT_EQ(out.value()["Out"].dtype(), dt);
    EXPECT_EQ(out.value()["Out"].dims(), (DDim{2, 2}));
    EXPECT_EQ(Values(out.value()["Out"]), std::vector<double>(4, 1.0)) << DataTypeName(dt);
  }
}

TEST(FillConstantCasesTest, DefaultShapeAndZeroSize) {
  OpTest t("fill_constant");
  t.Output("Out").Attr("value", -2.5f);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dims(), DDim{1});
  EXPECT_EQ(Values(out.value()["Out"]), std::vector<double>{-2.5});

  OpTest empty("fill_constant");
  empty.Output("Out").Attr("shape", std::vector<int64_t>{0, 3});
  out = empty.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dims(), (DDim{0, 3}));
}

TEST(FillZerosLikeCasesTest, KeepsDimsAndDtype) {
  for (DataType dt : {proto::FP32, proto::FP64}) {
    OpTest t("fill_zeros_like");
    t.Input("X", Random(dt, DDim{3, 2}, 1)).Output("Out");
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out.value()["Out"].dtype(), dt);
    EXPECT_EQ(out.value()["Out"].dims(), (DDim{3, 2}));
    EXPECT_EQ(Values(out.value()["Out"]), std::vector<double>(6, 0.0));
  }
  OpTest ints("fill_zeros_like");
  ints.Input("X", Ints(DDim{4}, {1, 2, 3, 4})).Output("Out");
  auto out = ints.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dtype(), proto::INT64);
  EXPECT_EQ(Values(out.value()["Out"]), std::vector<double>(4, 0.0));
}

std::vector<double> Draw(const char* type, DataType dt, int seed, const char* a, float av,
                         const char* b, float bv) {
  OpTest r(type);
  r.Output("Out")
      .Attr("shape", std::vector<int64_t>{40, 50})
      .Attr("seed", seed)
      .Attr("dtype", static_cast<int>(dt))
      .Attr(a, av)
      .Attr(b, bv);
  auto out = r.Forward();
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  if (!out.ok()) return {};
  EXPECT_EQ(out.value()["Out"].dtype(), dt);
  EXPECT_EQ(out.value()["Out"].dims(), (DDim{40, 50}));
  return Values(out.value()["Out"]);
}

TEST(RandomOpsCasesTest, UniformRangeAndSeedPerDtype) {
  for (DataType dt : {proto::FP32, proto::FP64}) {
    std::vector<double> a = Draw("uniform_random", dt, 11, "min", 2.0f, "max", 3.0f);
    ASSERT_EQ(a.size(), 2000u);
    EXPECT_EQ(a, Draw("uniform_random", dt, 11, "min", 2.0f, "max", 3.0f));
    EXPECT_NE(a, Draw("uniform_random", dt, 12, "min", 2.0f, "max", 3.0f));
    double mean = 0;
    for (double v : a) {
      EXPECT_GE(v, 2.0);
      EXPECT_LE(v, 3.0);
      mean += v / a.size();
    }
    EXPECT_NEAR(mean, 2.5, 0.05);
  }
}

TEST(RandomOpsCasesTest, GaussianMomentsAndSeedPerDtype) {
  for (DataType dt : {proto::FP32, proto::FP64}) {
    std::vector<double> a = Draw("gaussian_random", dt, 5, "mean", 4.0f, "std", 0.5f);
    ASSERT_EQ(a.size(), 2000u);
    EXPECT_EQ(a, Draw("gaussian_random", dt, 5, "mean", 4.0f, "std", 0.5f));
    double mean = 0, var = 0;
    for (double v : a) mean += v / a.size();
    for (double v : a) var += (v - mean) * (v - mean) / a.size();
    EXPECT_NEAR(mean, 4.0, 0.05);
    EXPECT_NEAR(std::sqrt(var), 0.5, 0.05);
  }
}

// ---------------------------------------------------------------- mul

TEST(MulCasesTest, YNumColDimsAndFp32Grad) {
  for (DataType dt : {proto::FP64, proto::FP32}) {
    // X [2, 3, 4] at 2 -> [6, 4]; Y [2, 2, 5] at 2 -> [4, 5]; Out [2, 3, 5].
    OpTest t("mul");
    t.Input("X", Random(dt, DDim{2, 3, 4}, 1))
        .Input("Y", Random(dt, DDim{2, 2, 5}, 2))
        .Output("Out")
        .Attr("x_num_col_dims", 2)
        .Attr("y_num_col_dims", 2);
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out.value()["Out"].dims(), (DDim{2, 3, 5}));
    EXPECT_EQ(CheckGradFor(t, "Out", dt), "") << DataTypeName(dt);
  }
}

TEST(MulCasesTest, ZeroRowsGradIsZero) {
  OpTest t("mul");
  t.Input("X", Random(proto::FP64, DDim{0, 4}, 1))
      .Input("Y", Random(proto::FP64, DDim{4, 3}, 2))
      .Output("Out");
  EXPECT_EQ(t.CheckGrad("Out", kEps64, kRtol64, kAtol64), "");
}

TEST(MulCasesTest, DtypeMismatchAndRankErrors) {
  OpTest t("mul");
  t.Input("X", Random(proto::FP32, DDim{2, 4}, 1))
      .Input("Y", Random(proto::FP64, DDim{4, 3}, 2))
      .Output("Out");
  Status st = VerifyProgram(t.BuildProgram());
  ASSERT_FALSE(st.ok());
  ExpectContains(st.message(), {"mul", "X_in", "Y_in", "float32", "float64"});

  OpTest rank("mul");
  rank.Input("X", Random(proto::FP32, DDim{2, 4}, 1))
      .Input("Y", Random(proto::FP32, DDim{4, 3}, 2))
      .Output("Out")
      .Attr("x_num_col_dims", 2);
  st = VerifyProgram(rank.BuildProgram());
  ASSERT_FALSE(st.ok());
  ExpectContains(st.message(), {"mul", "x_num_col_dims", "X_in", "[2, 4]"});
}

// ---------------------------------------------------------------- elementwise_add

TEST(AddCasesTest, Fp32GradWithBroadcast) {
  for (int axis : {0, 1}) {
    DDim y = axis == 0 ? DDim{3} : DDim{4};
    OpTest t("elementwise_add");
    t.Input("X", Random(proto::FP32, DDim{3, 4, 2}, 1))
        .Input("Y", Random(proto::FP32, y, 2))
        .Output("Out")
        .Attr("axis", axis);
    ASSERT_TRUE(t.Forward().ok());
    EXPECT_EQ(CheckGradFor(t, "Out", proto::FP32), "") << "axis " << axis;
  }
}

TEST(AddCasesTest, BatchOneAndZeroSizeBatch) {
  for (int64_t batch : {1, 0}) {
    Tensor x = Random(proto::FP64, DDim{batch, 4}, 3), y = Random(proto::FP64, DDim{4}, 4);
    OpTest t("elementwise_add");
    t.Input("X", x).Input("Y", y).Output("Out");
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out.value()["Out"].dims(), (DDim{batch, 4}));
    std::vector<double> xv = Values(x), yv = Values(y), want;
    for (size_t i = 0; i < xv.size(); ++i) want.push_back(xv[i] + yv[i % 4]);
    EXPECT_EQ(Values(out.value()["Out"]), want);
    // With batch 0, Y@GRAD is a sum over no rows: zeros.
    EXPECT_EQ(t.CheckGrad("Out", kEps64, kRtol64, kAtol64), "") << "batch " << batch;
  }
}

TEST(AddCasesTest, DtypeMismatchIsAnError) {
  OpTest t("elementwise_add");
  t.Input("X", Random(proto::FP32, DDim{2, 3}, 1))
      .Input("Y", Random(proto::FP64, DDim{3}, 2))
      .Output("Out");
  Status st = VerifyProgram(t.BuildProgram());
  ASSERT_FALSE(st.ok());
  ExpectContains(st.message(), {"elementwise_add", "X_in", "Y_in"});
}

// ---------------------------------------------------------------- relu, mean

TEST(ReluCasesTest, Fp32GradAndZeroSize) {
  Tensor x = Random(proto::FP32, DDim{3, 4}, 5, 0.2, 1.0);
  float* p = x.data<float>();
  for (int i = 1; i < 12; i += 3) p[i] = -p[i];
  OpTest t("relu");
  t.Input("X", x).Output("Out");
  EXPECT_EQ(CheckGradFor(t, "Out", proto::FP32), "");

  OpTest empty("relu");
  empty.Input("X", Random(proto::FP32, DDim{0, 4}, 1)).Output("Out");
  auto out = empty.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dims(), (DDim{0, 4}));
}

TEST(MeanCasesTest, Fp32AndBatchOne) {
  for (DataType dt : {proto::FP32, proto::FP64}) {
    Tensor x = Random(dt, DDim{1, 7}, 6);
    OpTest t("mean");
    t.Input("X", x).Output("Out");
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    double s = 0;
    for (double v : Values(x)) s += v / 7;
    EXPECT_NEAR(Values(out.value()["Out"])[0], s, 1e-6);
    EXPECT_EQ(CheckGradFor(t, "Out", dt), "") << DataTypeName(dt);
  }
}

// ---------------------------------------------------------------- sum

TEST(SumCasesTest, OutputAliasesAnInput) {
  // x0 = x0 + x1 + x2, as backward writes accumulated gradients.
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  FeedMap feeds;
  std::vector<double> want(6, 0);
  for (int i = 0; i < 3; ++i) {
    std::string name = StrCat("x", i);
    VarDesc v = b->Var(name);
    v.SetDtype(proto::FP32);
    v.SetDims({2, 3});
    feeds[name] = Random(proto::FP32, DDim{2, 3}, 20 + i);
    std::vector<double> xv = Values(feeds[name]);
    for (int k = 0; k < 6; ++k) want[k] += xv[k];
  }
  b->AppendOp("sum", {{"X", {"x0", "x1", "x2"}}}, {{"Out", {"x0"}}});
  ASSERT_TRUE(VerifyProgram(p).ok());
  Executor exe;
  Scope scope;
  std::vector<Tensor> out;
  Status st = exe.Run(p, &scope, feeds, {"x0"}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::vector<double> got = Values(out[0]);
  for (int k = 0; k < 6; ++k) EXPECT_NEAR(got[k], want[k], 1e-6);
}

TEST(SumCasesTest, SingleInputIntsAndDtypeMismatch) {
  OpTest one("sum");
  one.Inputs("X", {Ints(DDim{3}, {4, 5, 6})}).Output("Out");
  auto out = one.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(Values(out.value()["Out"]), (std::vector<double>{4, 5, 6}));

  OpTest ints("sum");
  ints.Inputs("X", {Ints(DDim{3}, {1, 2, 3}), Ints(DDim{3}, {10, 20, 30}),
                    Ints(DDim{3}, {100, 200, 300})})
      .Output("Out");
  out = ints.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(Values(out.value()["Out"]), (std::vector<double>{111, 222, 333}));

  OpTest bad("sum");
  bad.Inputs("X", {Random(proto::FP32, DDim{3}, 1), Random(proto::FP64, DDim{3}, 2)}).Output("Out");
  Status st = VerifyProgram(bad.BuildProgram());
  ASSERT_FALSE(st.ok());
  ExpectContains(st.message(), {"sum", "X_in1", "float32", "float64"});
}

// ---------------------------------------------------------------- softmax_with_cross_entropy

TEST(SwceCasesTest, Int32LabelsMatchInt64) {
  Tensor logits = Random(proto::FP64, DDim{3, 4}, 7, -2, 2);
  OpTest a("softmax_with_cross_entropy"), b("softmax_with_cross_entropy");
  a.Input("Logits", logits)
      .Input("Label", Ints(DDim{3, 1}, {3, 0, 1}))
      .Output("Softmax")
      .Output("Loss");
  b.Input("Logits", logits)
      .Input("Label", Int32s(DDim{3, 1}, {3, 0, 1}))
      .Output("Softmax")
      .Output("Loss");
  auto ra = a.Forward(), rb = b.Forward();
  ASSERT_TRUE(ra.ok()) << ra.status().ToString();
  ASSERT_TRUE(rb.ok()) << rb.status().ToString();
  EXPECT_EQ(Values(ra.value()["Loss"]), Values(rb.value()["Loss"]));
  EXPECT_EQ(b.CheckGrad("Loss", kEps64, kRtol64, kAtol64), "");
}

TEST(SwceCasesTest, BatchOneZeroBatchAndLargeLogits) {
  // Batch 1 with logits far beyond exp's range: the max is subtracted first.
  Tensor big(proto::FP32, DDim{1, 3});
  float* p = big.mutable_data<float>(Place::CPU());
  p[0] = 1000.f, p[1] = 999.f, p[2] = -1000.f;
  OpTest t("softmax_with_cross_entropy");
  t.Input("Logits", big).Input("Label", Ints(DDim{1, 1}, {1})).Output("Softmax").Output("Loss");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  double want = std::log(1 + std::exp(1.0));  // -log(e^-1 / (1 + e^-1))
  EXPECT_NEAR(Values(out.value()["Loss"])[0], want, 1e-5);
  for (double v : Values(out.value()["Softmax"])) EXPECT_TRUE(std::isfinite(v));

  OpTest empty("softmax_with_cross_entropy");
  empty.Input("Logits", Random(proto::FP32, DDim{0, 5}, 1))
      .Input("Label", Ints(DDim{0, 1}, {}))
      .Output("Softmax")
      .Output("Loss");
  out = empty.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Loss"].dims(), (DDim{0, 1}));
  EXPECT_EQ(out.value()["Softmax"].dims(), (DDim{0, 5}));
}

TEST(SwceCasesTest, Fp32SoftLabelGrad) {
  Tensor soft = Random(proto::FP32, DDim{2, 5}, 8, 0, 1);
  OpTest t("softmax_with_cross_entropy");
  t.Input("Logits", Random(proto::FP32, DDim{2, 5}, 9))
      .Input("Label", soft, /*no_grad=*/true)
      .Output("Softmax")
      .Output("Loss")
      .Attr("soft_label", true);
  EXPECT_EQ(CheckGradFor(t, "Loss", proto::FP32), "");
}

TEST(SwceCasesTest, BadAttributesAndLabels) {
  auto op = [](Tensor label) {
    OpTest t("softmax_with_cross_entropy");
    t.Input("Logits", Random(proto::FP32, DDim{2, 3}, 1))
        .Input("Label", std::move(label))
        .Output("Softmax")
        .Output("Loss");
    return t;
  };
  OpTest axis = op(Ints(DDim{2, 1}, {0, 1}));
  axis.Attr("axis", 0);
  Status st = VerifyProgram(axis.BuildProgram());
  ASSERT_FALSE(st.ok());
  ExpectContains(st.message(), {"softmax_with_cross_entropy", "axis"});

  st = VerifyProgram(op(Ints(DDim{2, 3}, {0, 1, 2, 0, 1, 2})).BuildProgram());
  ASSERT_FALSE(st.ok());
  ExpectContains(st.message(), {"softmax_with_cross_entropy", "Label_in", "[2, 3]"});

  st = VerifyProgram(op(Random(proto::FP32, DDim{2, 1}, 2)).BuildProgram());
  ASSERT_FALSE(st.ok());
  ExpectContains(st.message(), {"softmax_with_cross_entropy", "int64"});

  auto neg = op(Ints(DDim{2, 1}, {-3, 0})).Forward();
  ASSERT_FALSE(neg.ok());
  ExpectContains(neg.status().message(), {"softmax_with_cross_entropy", "label -3"});
}

// ---------------------------------------------------------------- sgd

TEST(SgdCasesTest, InPlaceOverTwoSteps) {
  for (DataType dt : {proto::FP32, proto::FP64}) {
    ProgramDesc p;
    BlockDesc* b = p.GlobalBlock();
    VarDesc w = b->Var("w");
    w.SetDtype(dt);
    w.SetDims({4, 3});
    w.SetPersistable(true);
    for (const char* name : {"g", "lr"}) {
      VarDesc v = b->Var(name);
      v.SetDtype(dt);
      v.SetDims(std::string(name) == "g" ? DDim{4, 3} : DDim{1});
    }
    b->AppendOp("sgd", {{"Param", {"w"}}, {"Grad", {"g"}}, {"LearningRate", {"lr"}}},
                {{"ParamOut", {"w"}}});
    ASSERT_TRUE(VerifyProgram(p).ok());

    Scope scope;
    Tensor w0 = Random(dt, DDim{4, 3}, 30);
    std::vector<double> w0v = Values(w0);
    TensorCopy(w0, Place::CPU(), scope.Var("w")->GetMutable<Tensor>());
    Tensor g = Random(dt, DDim{4, 3}, 31);
    Tensor lr = Random(dt, DDim{1}, 32, 0.1, 0.2);
    double lrv = Values(lr)[0];
    std::vector<double> gv = Values(g);
    Executor exe;
    auto prepared = exe.Prepare(p);
    ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
    for (int step = 0; step < 2; ++step) {
      Status st = exe.Run(prepared.value().get(), &scope, {{"g", g}, {"lr", lr}});
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
    std::vector<double> got = Values(scope.FindVar("w")->Get<Tensor>());
    for (int i = 0; i < 12; ++i)
      EXPECT_NEAR(got[i], w0v[i] - 2 * lrv * gv[i], dt == proto::FP64 ? 1e-12 : 1e-5);
  }
}

TEST(SgdCasesTest, LearningRateMustHoldOneElement) {
  Tensor lr(proto::FP32, DDim{2});
  lr.mutable_data<float>(Place::CPU());
  OpTest t("sgd");
  t.Input("Param", Random(proto::FP32, DDim{3}, 1))
      .Input("Grad", Random(proto::FP32, DDim{3}, 2))
      .Input("LearningRate", lr)
      .Output("ParamOut");
  Status st = VerifyProgram(t.BuildProgram());
  ASSERT_FALSE(st.ok());
  ExpectContains(st.message(), {"sgd", "LearningRate_in", "[2]"});
}

// ---------------------------------------------------------------- CUDA vs CPU

// Runs t on the CPU and on the GPU and compares every output; then checks the gradients of
// out_slot on the GPU against finite differences (fp64).
void CompareWithCpu(OpTest t, const std::vector<std::string>& outs, const std::string& grad_of) {
  auto cpu = t.Forward();
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  t.OnPlace(Place::CUDA(0));
  auto gpu = t.Forward();
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  for (const auto& o : outs) {
    std::vector<double> c = Values(cpu.value()[o]), g = Values(gpu.value()[o]);
    ASSERT_EQ(c.size(), g.size()) << o;
    for (size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(g[i], c[i], 1e-9) << o << "[" << i << "]";
  }
  if (!grad_of.empty()) {
    EXPECT_EQ(t.CheckGrad(grad_of, kEps64, kRtol64, kAtol64), "");
  }
}

TEST(CudaCasesTest, StarterKernelsMatchCpu) {
  if (CudaDeviceCount() == 0)
    LOOM_SKIP_WITHOUT_GPU("no CUDA device: CUDA kernels compiled, not run");
  const DataType f = proto::FP64;
  {
    OpTest t("mul");
    t.Input("X", Random(f, DDim{5, 2, 3}, 1))
        .Input("Y", Random(f, DDim{6, 4}, 2))
        .Output("Out")
        .Attr("x_num_col_dims", 1);
    CompareWithCpu(t, {"Out"}, "Out");
  }
  for (auto [x, y, axis] : {std::tuple{DDim{3, 4}, DDim{3, 4}, -1},
                            {DDim{3, 4, 2}, DDim{3}, 0},
                            {DDim{2, 3, 4}, DDim{3, 4}, 1},
                            {DDim{2, 3, 4}, DDim{4}, -1}}) {
    OpTest t("elementwise_add");
    t.Input("X", Random(f, x, 3)).Input("Y", Random(f, y, 4)).Output("Out").Attr("axis", axis);
    CompareWithCpu(t, {"Out"}, "Out");
  }
  {
    Tensor x = Random(f, DDim{4, 5}, 5, 0.1, 1.0);
    for (int i = 0; i < 20; i += 3) x.data<double>()[i] *= -1;
    OpTest t("relu");
    t.Input("X", x).Output("Out");
    CompareWithCpu(t, {"Out"}, "Out");
  }
  {
    OpTest t("mean");
    t.Input("X", Random(f, DDim{300, 7}, 6)).Output("Out");
    CompareWithCpu(t, {"Out"}, "");
  }
  {
    OpTest t("scale");
    t.Input("X", Random(f, DDim{3, 3}, 7))
        .Output("Out")
        .Attr("scale", 2.0f)
        .Attr("bias", 1.0f)
        .Attr("bias_after_scale", false);
    CompareWithCpu(t, {"Out"}, "Out");
  }
  {
    OpTest t("sum");
    t.Inputs("X", {Random(f, DDim{4, 4}, 8), Random(f, DDim{4, 4}, 9), Random(f, DDim{4, 4}, 10)})
        .Output("Out");
    CompareWithCpu(t, {"Out"}, "");
  }
  {
    OpTest t("softmax_with_cross_entropy");
    t.Input("Logits", Random(f, DDim{6, 300}, 11, -3, 3))
        .Input("Label", Ints(DDim{6, 1}, {0, 299, 5, -100, 17, 150}))
        .Output("Softmax")
        .Output("Loss");
    CompareWithCpu(t, {"Softmax", "Loss"}, "Loss");
    OpTest bad("softmax_with_cross_entropy");
    bad.Input("Logits", Random(f, DDim{2, 3}, 1))
        .Input("Label", Ints(DDim{2, 1}, {0, 3}))
        .Output("Softmax")
        .Output("Loss")
        .OnPlace(Place::CUDA(0));
    auto r = bad.Forward();
    ASSERT_FALSE(r.ok());
    ExpectContains(r.status().message(), {"softmax_with_cross_entropy", "label 3"});
  }
  {
    OpTest t("softmax_with_cross_entropy");
    t.Input("Logits", Random(f, DDim{3, 4}, 12))
        .Input("Label", Random(f, DDim{3, 4}, 13, 0, 1), /*no_grad=*/true)
        .Output("Softmax")
        .Output("Loss")
        .Attr("soft_label", true);
    CompareWithCpu(t, {"Softmax", "Loss"}, "Loss");
  }
  {
    Tensor lr(f, DDim{1});
    lr.mutable_data<double>(Place::CPU())[0] = 0.25;
    OpTest t("sgd");
    t.Input("Param", Random(f, DDim{5}, 14))
        .Input("Grad", Random(f, DDim{5}, 15))
        .Input("LearningRate", lr)
        .Output("ParamOut");
    CompareWithCpu(t, {"ParamOut"}, "");
  }
  for (DataType dt : {proto::FP32, proto::FP64, proto::INT64}) {
    OpTest t("fill_constant");
    t.Output("Out")
        .Attr("shape", std::vector<int64_t>{3, 5})
        .Attr("value", 3.0f)
        .Attr("dtype", static_cast<int>(dt));
    CompareWithCpu(t, {"Out"}, "");
  }
  for (const char* type : {"uniform_random", "gaussian_random"}) {
    auto draw = [&](int seed) {
      OpTest r(type);
      r.Output("Out")
          .Attr("shape", std::vector<int64_t>{4000})
          .Attr("seed", seed)
          .OnPlace(Place::CUDA(0));
      auto out = r.Forward();
      EXPECT_TRUE(out.ok()) << out.status().ToString();
      return out.ok() ? Values(out.value()["Out"]) : std::vector<double>{};
    };
    std::vector<double> a = draw(9);
    ASSERT_EQ(a.size(), 4000u) << type;
    EXPECT_EQ(a, draw(9)) << type;
    EXPECT_NE(a, draw(10)) << type;
    double mean = 0;
    for (double v : a) mean += v / a.size();
    EXPECT_NEAR(mean, 0.0, 0.1) << type;
  }
}

}  // namespace
}  // namespace loom::testing
