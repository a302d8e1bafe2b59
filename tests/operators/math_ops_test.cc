// The basic math, loss and metric operators (elementwise add, mul, matmul, mean, fill, losses,
// metrics): forward vs reference and numeric gradient checks.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>

#include "framework/verifier.h"
#include "op_test_util.h"
#include "tests/gpu_required.h"

namespace loom::testing {
namespace {

constexpr double kEps64 = 1e-6, kRtol64 = 1e-6, kAtol64 = 1e-8;
constexpr double kEps32 = 1e-2, kRtol32 = 5e-3, kAtol32 = 5e-3;

void ExpectNear(const Tensor& got, const std::vector<double>& want, double tol) {
  std::vector<double> g = Values(got);
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol) << "element " << i;
}

// ---------------------------------------------------------------- mul

std::vector<double> MatMul(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                           int64_t k, int64_t n) {
  std::vector<double> c(m * n, 0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t t = 0; t < k; ++t) c[i * n + j] += a[i * k + t] * b[t * n + j];
  return c;
}

class MulTest : public ::testing::TestWithParam<DataType> {};

TEST_P(MulTest, ForwardAndGrad) {
  DataType dt = GetParam();
  bool f64 = dt == proto::FP64;
  for (int64_t batch : {1, 5}) {
    Tensor x = Random(dt, DDim{batch, 4}, 1), y = Random(dt, DDim{4, 3}, 2);
    OpTest t("mul");
    t.Input("X", x).Input("Y", y).Output("Out");
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out.value()["Out"].dims(), (DDim{batch, 3}));
    ExpectNear(out.value()["Out"], MatMul(Values(x), Values(y), batch, 4, 3), f64 ? 1e-12 : 1e-5);
    EXPECT_EQ(
        t.CheckGrad("Out", f64 ? kEps64 : kEps32, f64 ? kRtol64 : kRtol32, f64 ? kAtol64 : kAtol32),
        "");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MulTest, ::testing::Values(proto::FP32, proto::FP64));

TEST(MulOpTest, FlattensAtNumColDims) {
  Tensor x = Random(proto::FP64, DDim{2, 3, 2, 2}, 3), y = Random(proto::FP64, DDim{4, 5}, 4);
  OpTest t("mul");
  t.Input("X", x).Input("Y", y).Output("Out").Attr("x_num_col_dims", 2);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dims(), (DDim{2, 3, 5}));
  ExpectNear(out.value()["Out"], MatMul(Values(x), Values(y), 6, 4, 5), 1e-12);
  EXPECT_EQ(t.CheckGrad("Out", kEps64, kRtol64, kAtol64), "");
}

TEST(MulOpTest, ZeroRows) {
  OpTest t("mul");
  t.Input("X", Random(proto::FP32, DDim{0, 4}, 1))
      .Input("Y", Random(proto::FP32, DDim{4, 3}, 2))
      .Output("Out");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dims(), (DDim{0, 3}));
}

TEST(MulOpTest, IncompatibleShapesFailAtCompileAndRunTime) {
  OpTest t("mul");
  t.Input("X", Random(proto::FP32, DDim{2, 4}, 1))
      .Input("Y", Random(proto::FP32, DDim{5, 3}, 2))
      .Output("Out");
  Status compile = VerifyProgram(t.BuildProgram());
  ASSERT_FALSE(compile.ok());
  for (const char* f : {"mul", "X_in", "Y_in", "[2, 4]", "[5, 3]"})
    EXPECT_NE(compile.message().find(f), std::string::npos) << compile.message();
  // At run time (declared dims unknown, so only the run can tell).
  ProgramDesc p = t.BuildProgram();
  p.GlobalBlock()->FindVar("X_in").SetDims({-1, -1});
  p.GlobalBlock()->FindVar("Y_in").SetDims({-1, -1});
  Executor exe;
  Scope scope;
  Status run = exe.Run(p, &scope, t.Feeds(), {"Out_out"});
  ASSERT_FALSE(run.ok());
  for (const char* f : {"mul", "block 0, #0", "X_in", "Y_in", "[2, 4]", "[5, 3]"})
    EXPECT_NE(run.message().find(f), std::string::npos) << run.message();
}

TEST(MulOpTest, BadAttribute) {
  OpTest t("mul");
  t.Input("X", Random(proto::FP32, DDim{2, 4}, 1))
      .Input("Y", Random(proto::FP32, DDim{4, 3}, 2))
      .Output("Out")
      .Attr("x_num_col_dims", 0);
  Status st = VerifyProgram(t.BuildProgram());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("x_num_col_dims must be > 0"), std::string::npos) << st.message();
}

// ---------------------------------------------------------------- elementwise_add

struct AddCase {
  DDim x, y;
  int axis;
};

class AddTest : public ::testing::TestWithParam<AddCase> {};

TEST_P(AddTest, BroadcastForwardAndGrad) {
  AddCase c = GetParam();
  Tensor x = Random(proto::FP64, c.x, 5), y = Random(proto::FP64, c.y, 6);
  OpTest t("elementwise_add");
  t.Input("X", x).Input("Y", y).Output("Out").Attr("axis", c.axis);
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  // Reference: index Y by the X coordinates [axis, axis + rank(Y)).
  std::vector<double> xv = Values(x), yv = Values(y), want(xv.size());
  int axis = c.axis < 0 ? c.x.size() - c.y.size() : c.axis;
  int64_t post = 1;
  for (int i = axis + c.y.size(); i < c.x.size(); ++i) post *= c.x[i];
  int64_t n = c.y.numel();
  for (size_t i = 0; i < xv.size(); ++i) want[i] = xv[i] + yv[(i / post) % n];
  ExpectNear(out.value()["Out"], want, 1e-12);
  EXPECT_EQ(t.CheckGrad("Out", kEps64, kRtol64, kAtol64), "");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AddTest,
    ::testing::Values(AddCase{DDim{3, 4}, DDim{3, 4}, -1}, AddCase{DDim{3, 4}, DDim{4}, -1},
                      AddCase{DDim{3, 4}, DDim{4}, 1}, AddCase{DDim{3, 4, 2}, DDim{3}, 0},
                      AddCase{DDim{2, 3, 4}, DDim{3}, 1}, AddCase{DDim{2, 3, 4}, DDim{3, 4}, 1},
                      AddCase{DDim{1, 5}, DDim{5}, 1}, AddCase{DDim{3, 2}, DDim{1}, -1}));

TEST(AddOpTest, TrailingOnesOfYAreTrimmed) {
  OpTest t("elementwise_add");
  t.Input("X", Random(proto::FP64, DDim{2, 3, 4}, 1))
      .Input("Y", Random(proto::FP64, DDim{3, 1}, 2))
      .Output("Out")
      .Attr("axis", 1);
  ASSERT_TRUE(t.Forward().ok());
  EXPECT_EQ(t.CheckGrad("Out", kEps64, kRtol64, kAtol64), "");
}

TEST(AddOpTest, BadBroadcastIsAnError) {
  OpTest t("elementwise_add");
  t.Input("X", Random(proto::FP32, DDim{2, 3}, 1))
      .Input("Y", Random(proto::FP32, DDim{4}, 2))
      .Output("Out");
  Status st = VerifyProgram(t.BuildProgram());
  ASSERT_FALSE(st.ok());
  for (const char* f : {"elementwise_add", "Y_in", "[4]", "[2, 3]"})
    EXPECT_NE(st.message().find(f), std::string::npos) << st.message();
}

// ---------------------------------------------------------------- relu, scale, mean, sum

TEST(ReluOpTest, ForwardAndGrad) {
  // Keep values away from 0, where relu is not differentiable.
  Tensor x = Random(proto::FP64, DDim{4, 5}, 7, 0.1, 1.0);
  double* p = x.data<double>();
  for (int i = 0; i < 20; i += 2) p[i] = -p[i];
  OpTest t("relu");
  t.Input("X", x).Output("Out");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok());
  std::vector<double> want;
  for (double v : Values(x)) want.push_back(v > 0 ? v : 0);
  ExpectNear(out.value()["Out"], want, 0);
  EXPECT_EQ(t.CheckGrad("Out", kEps64, kRtol64, kAtol64), "");
}

TEST(ScaleOpTest, ForwardAndGradBothBiasModes) {
  for (bool after : {true, false}) {
    Tensor x = Random(proto::FP64, DDim{3, 2}, 8);
    OpTest t("scale");
    t.Input("X", x)
        .Output("Out")
        .Attr("scale", 2.5f)
        .Attr("bias", 0.5f)
        .Attr("bias_after_scale", after);
    auto out = t.Forward();
    ASSERT_TRUE(out.ok());
    std::vector<double> want;
    for (double v : Values(x)) want.push_back(after ? 2.5 * v + 0.5 : 2.5 * (v + 0.5));
    ExpectNear(out.value()["Out"], want, 1e-6);
    EXPECT_EQ(t.CheckGrad("Out", kEps64, kRtol64, kAtol64), "");
  }
}

TEST(MeanOpTest, ForwardAndGrad) {
  Tensor x = Random(proto::FP64, DDim{3, 4}, 9);
  OpTest t("mean");
  t.Input("X", x).Output("Out");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok());
  double s = 0;
  for (double v : Values(x)) s += v;
  ExpectNear(out.value()["Out"], {s / 12}, 1e-12);
  EXPECT_EQ(out.value()["Out"].dims(), DDim{1});
  EXPECT_EQ(t.CheckGrad("Out", kEps64, kRtol64, kAtol64), "");
}

TEST(SumOpTest, ThreeInputs) {
  std::vector<Tensor> xs = {Random(proto::FP64, DDim{2, 3}, 1), Random(proto::FP64, DDim{2, 3}, 2),
                            Random(proto::FP64, DDim{2, 3}, 3)};
  OpTest t("sum");
  t.Inputs("X", xs).Output("Out");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> want(6, 0);
  for (const auto& x : xs)
    for (int i = 0; i < 6; ++i) want[i] += Values(x)[i];
  ExpectNear(out.value()["Out"], want, 1e-12);
  OpTest bad("sum");
  bad.Inputs("X", {Random(proto::FP64, DDim{2, 3}, 1), Random(proto::FP64, DDim{3, 2}, 2)})
      .Output("Out");
  Status st = VerifyProgram(bad.BuildProgram());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("X_in1"), std::string::npos) << st.message();
}

// ---------------------------------------------------------------- softmax_with_cross_entropy

TEST(SoftmaxWithCrossEntropyTest, HardLabels) {
  for (DataType dt : {proto::FP64, proto::FP32}) {
    bool f64 = dt == proto::FP64;
    Tensor logits = Random(dt, DDim{4, 5}, 10, -3, 3);
    Tensor label = Ints(DDim{4, 1}, {0, 4, 2, 2});
    OpTest t("softmax_with_cross_entropy");
    t.Input("Logits", logits).Input("Label", label).Output("Softmax").Output("Loss");
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    std::vector<double> lv = Values(logits), want_sm, want_loss;
    for (int r = 0; r < 4; ++r) {
      double mx = -1e300, s = 0;
      for (int j = 0; j < 5; ++j) mx = std::max(mx, lv[r * 5 + j]);
      for (int j = 0; j < 5; ++j) s += std::exp(lv[r * 5 + j] - mx);
      for (int j = 0; j < 5; ++j) want_sm.push_back(std::exp(lv[r * 5 + j] - mx) / s);
      want_loss.push_back(-std::log(want_sm[r * 5 + Values(label)[r]]));
    }
    ExpectNear(out.value()["Softmax"], want_sm, f64 ? 1e-12 : 1e-5);
    ExpectNear(out.value()["Loss"], want_loss, f64 ? 1e-12 : 1e-5);
    EXPECT_EQ(t.CheckGrad("Loss", f64 ? kEps64 : kEps32, f64 ? kRtol64 : kRtol32,
                          f64 ? kAtol64 : kAtol32),
              "");
  }
}

TEST(SoftmaxWithCrossEntropyTest, SoftLabelsAndIgnoreIndex) {
  Tensor logits = Random(proto::FP64, DDim{3, 4}, 11, -2, 2);
  Tensor soft = Random(proto::FP64, DDim{3, 4}, 12, 0, 1);
  double* s = soft.data<double>();
  for (int r = 0; r < 3; ++r) {
    double sum = 0;
    for (int j = 0; j < 4; ++j) sum += s[r * 4 + j];
    for (int j = 0; j < 4; ++j) s[r * 4 + j] /= sum;
  }
  OpTest t("softmax_with_cross_entropy");
  t.Input("Logits", logits)
      .Input("Label", soft, /*no_grad=*/true)
      .Output("Softmax")
      .Output("Loss")
      .Attr("soft_label", true);
  ASSERT_TRUE(t.Forward().ok());
  EXPECT_EQ(t.CheckGrad("Loss", kEps64, kRtol64, kAtol64), "");

  OpTest ig("softmax_with_cross_entropy");
  ig.Input("Logits", logits)
      .Input("Label", Ints(DDim{3, 1}, {1, -100, 3}))
      .Output("Softmax")
      .Output("Loss");
  auto out = ig.Forward();
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(Values(out.value()["Loss"])[1], 0.0);
  EXPECT_EQ(ig.CheckGrad("Loss", kEps64, kRtol64, kAtol64), "");
}

TEST(SoftmaxWithCrossEntropyTest, OutOfRangeLabelIsAnError) {
  OpTest t("softmax_with_cross_entropy");
  t.Input("Logits", Random(proto::FP32, DDim{2, 3}, 1))
      .Input("Label", Ints(DDim{2, 1}, {1, 7}))
      .Output("Softmax")
      .Output("Loss");
  auto out = t.Forward();
  ASSERT_FALSE(out.ok());
  for (const char* f : {"softmax_with_cross_entropy", "label 7", "[0, 3)"})
    EXPECT_NE(out.status().message().find(f), std::string::npos) << out.status().message();
}

// ---------------------------------------------------------------- creation ops and sgd

TEST(FillOpsTest, ConstantAndSeededRandom) {
  OpTest c("fill_constant");
  c.Output("Out")
      .Attr("shape", std::vector<int64_t>{2, 3})
      .Attr("value", 1.5f)
      .Attr("dtype", static_cast<int>(proto::FP64));
  auto out = c.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()["Out"].dtype(), proto::FP64);
  ExpectNear(out.value()["Out"], std::vector<double>(6, 1.5), 0);

  for (const char* type : {"uniform_random", "gaussian_random"}) {
    auto draw = [&](int seed) {
      OpTest r(type);
      r.Output("Out").Attr("shape", std::vector<int64_t>{1000}).Attr("seed", seed);
      return Values(r.Forward().value()["Out"]);
    };
    std::vector<double> a = draw(3), b = draw(3), c2 = draw(4);
    EXPECT_EQ(a, b) << type << ": same seed, same values";
    EXPECT_NE(a, c2) << type;
    double mean = 0;
    for (double v : a) mean += v / a.size();
    EXPECT_NEAR(mean, 0.0, 0.15) << type;
  }
  OpTest bad("fill_constant");
  bad.Output("Out").Attr("shape", std::vector<int64_t>{2, -3});
  ASSERT_FALSE(bad.Forward().ok());
  OpTest bad_dtype("fill_constant");
  bad_dtype.Output("Out").Attr("dtype", 42);
  auto st = bad_dtype.Forward();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("dtype"), std::string::npos);
}

TEST(SgdOpTest, UpdatesInPlace) {
  Tensor param = Random(proto::FP32, DDim{3, 2}, 1), grad = Random(proto::FP32, DDim{3, 2}, 2);
  Tensor lr(proto::FP32, DDim{1});
  lr.mutable_data<float>(Place::CPU())[0] = 0.1f;
  OpTest t("sgd");
  t.Input("Param", param).Input("Grad", grad).Input("LearningRate", lr).Output("ParamOut");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> want;
  for (int i = 0; i < 6; ++i) want.push_back(Values(param)[i] - 0.1 * Values(grad)[i]);
  ExpectNear(out.value()["ParamOut"], want, 1e-6);
  OpTest bad("sgd");
  bad.Input("Param", param)
      .Input("Grad", Random(proto::FP32, DDim{2, 3}, 2))
      .Input("LearningRate", lr)
      .Output("ParamOut");
  Status st = VerifyProgram(bad.BuildProgram());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Grad_in"), std::string::npos) << st.message();
}

TEST(CudaKernelsTest, MatchCpu) {
  if (CudaDeviceCount() == 0)
    LOOM_SKIP_WITHOUT_GPU("no CUDA device: CUDA kernels compiled, not run");
  Tensor x = Random(proto::FP32, DDim{8, 16}, 1), y = Random(proto::FP32, DDim{16, 4}, 2);
  OpTest t("mul");
  t.Input("X", x).Input("Y", y).Output("Out");
  ProgramDesc p = t.BuildProgram();
  std::vector<Tensor> cpu, gpu;
  Scope s1, s2;
  Executor e_cpu(Place::CPU()), e_gpu(Place::CUDA(0));
  ASSERT_TRUE(e_cpu.Run(p, &s1, t.Feeds(), {"Out_out"}, &cpu).ok());
  Status st = e_gpu.Run(p, &s2, t.Feeds(), {"Out_out"}, &gpu);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectNear(gpu[0], Values(cpu[0]), 1e-4);
}

}  // namespace
}  // namespace loom::testing

namespace loom::testing {
namespace {

// ---------------------------------------------------------------- unary and softmax families

struct UnaryCase {
  const char* type;
  double lo, hi;
  double (*ref)(double);
};

class UnaryTest : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(UnaryTest, ForwardAndGrad) {
  UnaryCase c = GetParam();
  Tensor x = Random(proto::FP64, DDim{3, 4}, 21, c.lo, c.hi);
  OpTest t(c.type);
  t.Input("X", x).Output("Out");
  auto out = t.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> want;
  for (double v : Values(x)) want.push_back(c.ref(v));
  std::vector<double> got = Values(out.value()["Out"]);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << c.type;
  EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-8), "") << c.type;
}

INSTANTIATE_TEST_SUITE_P(
    Ops, UnaryTest,
    ::testing::Values(UnaryCase{"sigmoid", -3, 3, [](double x) { return 1 / (1 + std::exp(-x)); }},
                      UnaryCase{"tanh", -2, 2, [](double x) { return std::tanh(x); }},
                      UnaryCase{"exp", -2, 2, [](double x) { return std::exp(x); }},
                      UnaryCase{"log", 0.2, 3, [](double x) { return std::log(x); }},
                      UnaryCase{"sqrt", 0.2, 3, [](double x) { return std::sqrt(x); }},
                      UnaryCase{"square", -2, 2, [](double x) { return x * x; }},
                      UnaryCase{"abs", 0.1, 2, [](double x) { return std::abs(x); }},
                      UnaryCase{
                          "gelu", -3, 3,
                          [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
                      UnaryCase{"floor", -3, 3, [](double x) { return std::floor(x); }},
                      UnaryCase{"ceil", -3, 3, [](double x) { return std::ceil(x); }},
                      UnaryCase{"round", -3, 3, [](double x) { return std::round(x); }},
                      UnaryCase{"cos", -3, 3, [](double x) { return std::cos(x); }},
                      UnaryCase{"sin", -3, 3, [](double x) { return std::sin(x); }},
                      UnaryCase{"reciprocal", 0.3, 3, [](double x) { return 1 / x; }},
                      UnaryCase{"rsqrt", 0.3, 3, [](double x) { return 1 / std::sqrt(x); }},
                      UnaryCase{"softplus", -30, 30,
                                [](double x) { return std::log(1 + std::exp(x)); }},
                      UnaryCase{"softsign", -3, 3,
                                [](double x) { return x / (1 + std::abs(x)); }},
                      // unary_activations.cc, at Fluid's default attributes
                      UnaryCase{"elu", -3, 3,
                                [](double x) { return x > 0 ? x : std::expm1(x); }},
                      UnaryCase{"relu6", -3, 8,
                                [](double x) { return std::min(std::max(x, 0.0), 6.0); }},
                      UnaryCase{"selu", -3, 3,
                                [](double x) {
                                  return static_cast<double>(1.0507009873554804934f) *
                                         (x > 0 ? x
                                                : static_cast<double>(1.6732632423543772848f) *
                                                      std::expm1(x));
                                }},
                      UnaryCase{"hard_sigmoid", -4, 4,
                                [](double x) {
                                  return std::min(
                                      std::max(static_cast<double>(0.2f) * x + 0.5, 0.0), 1.0);
                                }},
                      UnaryCase{"hard_swish", -5, 5,
                                [](double x) {
                                  return x * std::min(std::max(x + 3, 0.0), 6.0) / 6;
                                }},
                      UnaryCase{"swish", -3, 3,
                                [](double x) { return x / (1 + std::exp(-x)); }},
                      UnaryCase{"softshrink", -2, 2,
                                [](double x) {
                                  return x > 0.5 ? x - 0.5 : (x < -0.5 ? x + 0.5 : 0.0);
                                }},
                      UnaryCase{"hard_shrink", -2, 2,
                                [](double x) { return std::abs(x) > 0.5 ? x : 0.0; }},
                      UnaryCase{"tanh_shrink", -2, 2, [](double x) { return x - std::tanh(x); }},
                      UnaryCase{"thresholded_relu", -3, 3,
                                [](double x) { return x > 1 ? x : 0.0; }},
                      UnaryCase{"logsigmoid", -20, 20,
                                [](double x) { return -std::log1p(std::exp(-x)); }},
                      UnaryCase{"sign", -2, 2,
                                [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }},
                      UnaryCase{"erf", -2, 2, [](double x) { return std::erf(x); }},
                      UnaryCase{"acos", -0.9, 0.9, [](double x) { return std::acos(x); }},
                      UnaryCase{"asin", -0.9, 0.9, [](double x) { return std::asin(x); }},
                      UnaryCase{"atan", -3, 3, [](double x) { return std::atan(x); }},
                      UnaryCase{"brelu", -3, 30,
                                [](double x) { return std::min(std::max(x, 0.0), 24.0); }},
                      UnaryCase{"soft_relu", -5, 5,
                                [](double x) { return std::log1p(std::exp(x)); }},
                      UnaryCase{"stanh", -3, 3,
                                [](double x) {
                                  return static_cast<double>(1.7159f) *
                                         std::tanh(static_cast<double>(0.67f) * x);
                                }},
                      UnaryCase{"pow", 0.2, 3, [](double x) { return x; }}),
    [](const ::testing::TestParamInfo<UnaryCase>& info) { return std::string(info.param.type); });

TEST(UnaryOpTest, LeakyReluAndClipAttributes) {
  Tensor x = Random(proto::FP64, DDim{4, 4}, 22, -2, 2);
  OpTest lr("leaky_relu");
  lr.Input("X", x).Output("Out").Attr("alpha", 0.1f);
  auto out = lr.Forward();
  ASSERT_TRUE(out.ok());
  for (size_t i = 0; i < 16; ++i) {
    double v = Values(x)[i];
    EXPECT_NEAR(Values(out.value()["Out"])[i], v > 0 ? v : static_cast<double>(0.1f) * v, 1e-12);
  }
  EXPECT_EQ(lr.CheckGrad("Out", 1e-6, 1e-6, 1e-8), "");
  OpTest clip("clip");
  clip.Input("X", x).Output("Out").Attr("min", -0.5f).Attr("max", 0.7f);
  auto c = clip.Forward();
  ASSERT_TRUE(c.ok());
  for (double v : Values(c.value()["Out"])) EXPECT_TRUE(v >= -0.5 && v <= 0.7 + 1e-7);
  OpTest bad("clip");
  bad.Input("X", x).Output("Out").Attr("min", 1.0f).Attr("max", 0.0f);
  auto st = bad.Forward();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("min"), std::string::npos);
  OpTest missing("clip");
  missing.Input("X", x).Output("Out");
  auto m = missing.Forward();
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("required attribute 'min'"), std::string::npos);
}

TEST(SoftmaxOpTest, SoftmaxAndLogSoftmax) {
  for (const char* type : {"softmax", "log_softmax"}) {
    for (DDim dims : {DDim{1, 5}, DDim{3, 4}, DDim{2, 3, 4}}) {
      Tensor x = Random(proto::FP64, dims, 23, -3, 3);
      OpTest t(type);
      t.Input("X", x).Output("Out");
      auto out = t.Forward();
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      std::vector<double> xv = Values(x), got = Values(out.value()["Out"]);
      int64_t d = dims[dims.size() - 1];
      for (int64_t r = 0; r < x.numel() / d; ++r) {
        double s = 0;
        for (int64_t j = 0; j < d; ++j) s += std::exp(xv[r * d + j]);
        for (int64_t j = 0; j < d; ++j) {
          double p = std::exp(xv[r * d + j]) / s;
          EXPECT_NEAR(got[r * d + j], std::string(type) == "softmax" ? p : std::log(p), 1e-12);
        }
      }
      EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-8), "") << type << dims.ToString();
    }
  }
  // Any axis in [-rank, rank) is accepted (nn_edge_cases_test.cc checks them); beyond is an error.
  OpTest bad("softmax");
  bad.Input("X", Random(proto::FP32, DDim{2, 3}, 1)).Output("Out").Attr("axis", -3);
  ASSERT_FALSE(bad.Forward().ok());
}

}  // namespace
}  // namespace loom::testing

namespace loom::testing {
namespace {

struct BinaryCase {
  const char* type;
  double (*ref)(double, double);
};

class BinaryTest : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(BinaryTest, ForwardAndGradWithBroadcast) {
  BinaryCase c = GetParam();
  for (auto [xd, yd, axis] :
       {std::make_tuple(DDim{3, 4}, DDim{3, 4}, -1), std::make_tuple(DDim{2, 3, 4}, DDim{3}, 1),
        std::make_tuple(DDim{2, 3}, DDim{3}, -1)}) {
    // Positive inputs bounded away from each other keep div, pow and max/min differentiable.
    Tensor x = Random(proto::FP64, xd, 31, 0.5, 1.5);
    Tensor y = Random(proto::FP64, yd, 32, 1.6, 2.5);
    OpTest t(c.type);
    t.Input("X", x).Input("Y", y).Output("Out").Attr("axis", axis);
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    std::vector<double> xv = Values(x), yv = Values(y), got = Values(out.value()["Out"]);
    int ax = axis < 0 ? xd.size() - yd.size() : axis;
    int64_t post = xd.product(ax + yd.size(), xd.size());
    for (size_t i = 0; i < xv.size(); ++i)
      EXPECT_NEAR(got[i], c.ref(xv[i], yv[(i / post) % yd.numel()]), 1e-12) << c.type;
    EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-8), "") << c.type << " " << xd.ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ops, BinaryTest,
    ::testing::Values(
        BinaryCase{"elementwise_sub", [](double a, double b) { return a - b; }},
        BinaryCase{"elementwise_mul", [](double a, double b) { return a * b; }},
        BinaryCase{"elementwise_div", [](double a, double b) { return a / b; }},
        BinaryCase{"elementwise_max", [](double a, double b) { return std::max(a, b); }},
        BinaryCase{"elementwise_min", [](double a, double b) { return std::min(a, b); }},
        BinaryCase{"elementwise_pow", [](double a, double b) { return std::pow(a, b); }}),
    [](const ::testing::TestParamInfo<BinaryCase>& info) { return std::string(info.param.type); });

}  // namespace
}  // namespace loom::testing

namespace loom::testing {
namespace {

// ---------------------------------------------------------------- reductions

TEST(ReduceOpTest, SumMeanMaxOverDims) {
  Tensor x = Random(proto::FP64, DDim{2, 3, 4}, 41);
  std::vector<double> xv = Values(x);
  struct Case {
    std::vector<int> dim;
    bool keep, all;
    DDim out;
  };
  for (const Case& c : {Case{{1}, false, false, DDim{2, 4}}, Case{{-1}, true, false, DDim{2, 3, 1}},
                        Case{{0, 2}, false, false, DDim{3}}, Case{{0}, false, true, DDim{1}}}) {
    for (const char* type : {"reduce_sum", "reduce_mean", "reduce_max"}) {
      OpTest t(type);
      t.Input("X", x)
          .Output("Out")
          .Attr("dim", c.dim)
          .Attr("keep_dim", c.keep)
          .Attr("reduce_all", c.all);
      auto out = t.Forward();
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(out.value()["Out"].dims(), c.out) << type;
      // Reference: for each output element, fold the inputs that map to it.
      std::vector<bool> red(3, c.all);
      for (int d : c.dim) red[d < 0 ? d + 3 : d] = true;
      std::map<std::vector<int>, std::vector<double>> groups;
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j)
          for (int k = 0; k < 4; ++k)
            groups[{red[0] ? 0 : i, red[1] ? 0 : j, red[2] ? 0 : k}].push_back(
                xv[(i * 3 + j) * 4 + k]);
      std::vector<double> got = Values(out.value()["Out"]);
      size_t g = 0;
      for (const auto& [key, vals] : groups) {
        double want = std::string(type) == "reduce_max"
                          ? *std::max_element(vals.begin(), vals.end())
                          : std::accumulate(vals.begin(), vals.end(), 0.0);
        if (std::string(type) == "reduce_mean") want /= vals.size();
        EXPECT_NEAR(got[g++], want, 1e-12) << type;
      }
      EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-8), "") << type;
    }
  }
  OpTest bad("reduce_sum");
  bad.Input("X", x).Output("Out").Attr("dim", std::vector<int>{3});
  auto st = bad.Forward();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("dim 3 is out of range"), std::string::npos);
}

// ---------------------------------------------------------------- losses and metrics

TEST(LossOpTest, CrossEntropyAndSquareError) {
  Tensor probs = Random(proto::FP64, DDim{3, 4}, 42, 0.1, 1.0);
  OpTest ce("cross_entropy");
  ce.Input("X", probs).Input("Label", Ints(DDim{3, 1}, {3, 0, 2})).Output("Y");
  auto out = ce.Forward();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> pv = Values(probs);
  ExpectNear(out.value()["Y"], {-std::log(pv[3]), -std::log(pv[4]), -std::log(pv[10])}, 1e-12);
  EXPECT_EQ(ce.CheckGrad("Y", 1e-7, 1e-6, 1e-8), "");

  Tensor a = Random(proto::FP64, DDim{4, 2}, 43), b = Random(proto::FP64, DDim{4, 2}, 44);
  OpTest se("square_error_cost");
  se.Input("X", a).Input("Y", b).Output("Out");
  auto sq = se.Forward();
  ASSERT_TRUE(sq.ok());
  std::vector<double> want;
  for (int i = 0; i < 8; ++i) want.push_back(std::pow(Values(a)[i] - Values(b)[i], 2));
  ExpectNear(sq.value()["Out"], want, 1e-12);
  EXPECT_EQ(se.CheckGrad("Out", 1e-6, 1e-6, 1e-8), "");
}

TEST(MetricOpTest, TopKArgMaxAccuracy) {
  Tensor x(proto::FP32, DDim{3, 4});
  float* p = x.mutable_data<float>(Place::CPU());
  float vals[] = {0.1f, 0.7f, 0.2f, 0.0f, 0.5f, 0.1f, 0.1f, 0.3f, 0.0f, 0.2f, 0.3f, 0.5f};
  std::copy(vals, vals + 12, p);
  OpTest tk("top_k");
  tk.Input("X", x).Output("Out").Output("Indices").Attr("k", 2);
  auto t = tk.Forward();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(Values(t.value()["Indices"]), (std::vector<double>{1, 2, 0, 3, 3, 2}));
  OpTest am("arg_max");
  am.Input("X", x).Output("Out").Attr("axis", 1);
  EXPECT_EQ(Values(am.Forward().value()["Out"]), (std::vector<double>{1, 0, 3}));
  OpTest acc("accuracy");
  acc.Input("Out", t.value()["Out"])
      .Input("Indices", t.value()["Indices"])
      .Input("Label", Ints(DDim{3, 1}, {2, 1, 3}))
      .Output("Accuracy")
      .Output("Correct")
      .Output("Total");
  auto a = acc.Forward();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_NEAR(Values(a.value()["Accuracy"])[0], 2.0 / 3, 1e-6);
  EXPECT_EQ(Values(a.value()["Correct"])[0], 2);
  EXPECT_EQ(Values(a.value()["Total"])[0], 3);
  OpTest big("top_k");
  big.Input("X", x).Output("Out").Output("Indices").Attr("k", 5);
  EXPECT_FALSE(big.Forward().ok());
}

// ---------------------------------------------------------------- optimizers

TEST(OptimizerOpTest, MomentumMatchesReference) {
  for (bool nesterov : {false, true}) {
    Tensor p = Random(proto::FP64, DDim{5}, 51), g = Random(proto::FP64, DDim{5}, 52),
           v = Random(proto::FP64, DDim{5}, 53);
    Tensor lr(proto::FP64, DDim{1});
    lr.mutable_data<double>(Place::CPU())[0] = 0.1;
    OpTest t("momentum");
    t.Input("Param", p)
        .Input("Grad", g)
        .Input("Velocity", v)
        .Input("LearningRate", lr)
        .Output("ParamOut")
        .Output("VelocityOut")
        .Attr("mu", 0.9f)
        .Attr("use_nesterov", nesterov);
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    std::vector<double> pw, vw;
    double mu = static_cast<double>(0.9f);
    for (int i = 0; i < 5; ++i) {
      double nv = mu * Values(v)[i] + Values(g)[i];
      vw.push_back(nv);
      pw.push_back(Values(p)[i] - 0.1 * (nesterov ? Values(g)[i] + mu * nv : nv));
    }
    ExpectNear(out.value()["ParamOut"], pw, 1e-12);
    ExpectNear(out.value()["VelocityOut"], vw, 1e-12);
  }
}

TEST(OptimizerOpTest, AdamAndAdamWMatchReference) {
  for (const char* type : {"adam", "adamw"}) {
    Tensor p = Random(proto::FP64, DDim{6}, 61), g = Random(proto::FP64, DDim{6}, 62);
    Tensor m1 = Random(proto::FP64, DDim{6}, 63), m2 = Random(proto::FP64, DDim{6}, 64, 0.1, 1);
    auto scalar = [](double v) {
      Tensor t(proto::FP64, DDim{1});
      t.mutable_data<double>(Place::CPU())[0] = v;
      return t;
    };
    double b1 = static_cast<double>(0.9f), b2 = static_cast<double>(0.999f);
    double eps = static_cast<double>(1e-8f), coeff = static_cast<double>(0.01f);
    double b1p = b1 * b1, b2p = b2 * b2, lr = 0.01;
    OpTest t(type);
    t.Input("Param", p)
        .Input("Grad", g)
        .Input("LearningRate", scalar(lr))
        .Input("Moment1", m1)
        .Input("Moment2", m2)
        .Input("Beta1Pow", scalar(b1p))
        .Input("Beta2Pow", scalar(b2p))
        .Output("ParamOut")
        .Output("Moment1Out")
        .Output("Moment2Out")
        .Output("Beta1PowOut")
        .Output("Beta2PowOut");
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    std::vector<double> want;
    double lr_t = lr * std::sqrt(1 - b2p) / (1 - b1p);
    for (int i = 0; i < 6; ++i) {
      double a = b1 * Values(m1)[i] + (1 - b1) * Values(g)[i];
      double b = b2 * Values(m2)[i] + (1 - b2) * Values(g)[i] * Values(g)[i];
      double base = std::string(type) == "adamw" ? Values(p)[i] * (1 - lr * coeff) : Values(p)[i];
      want.push_back(base - lr_t * a / (std::sqrt(b) + eps * std::sqrt(1 - b2p)));
    }
    ExpectNear(out.value()["ParamOut"], want, 1e-12);
    ExpectNear(out.value()["Beta1PowOut"], {b1p * b1}, 1e-15);
    ExpectNear(out.value()["Beta2PowOut"], {b2p * b2}, 1e-15);
  }
}

TEST(OptimizerOpTest, SquaredL2Norm) {
  Tensor x = Random(proto::FP64, DDim{3, 3}, 71);
  OpTest t("squared_l2_norm");
  t.Input("X", x).Output("Out");
  double s = 0;
  for (double v : Values(x)) s += v * v;
  ExpectNear(t.Forward().value()["Out"], {s}, 1e-12);
  EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-8), "");
}

}  // namespace
}  // namespace loom::testing

namespace loom::testing {
namespace {

// Reference batched matmul with transposes, on doubles.
std::vector<double> RefMatmul(const Tensor& x, const Tensor& y, bool tx, bool ty, double alpha,
                              int64_t batch, int64_t m, int64_t k, int64_t n, bool xb, bool yb) {
  std::vector<double> xv = Values(x), yv = Values(y), out(batch * m * n, 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t t = 0; t < k; ++t) {
          double a = xv[(xb ? b * m * k : 0) + (tx ? t * m + i : i * k + t)];
          double c = yv[(yb ? b * k * n : 0) + (ty ? j * k + t : t * n + j)];
          acc += a * c;
        }
        out[(b * m + i) * n + j] = alpha * acc;
      }
  return out;
}

TEST(MatmulOpTest, TransposesBatchesAndAlpha) {
  struct Case {
    DDim x, y;
    bool tx, ty;
    int64_t batch, m, k, n;
    bool xb, yb;
    DDim out;
  };
  for (const Case& c :
       {Case{DDim{3, 4}, DDim{4, 5}, false, false, 1, 3, 4, 5, false, false, DDim{3, 5}},
        Case{DDim{4, 3}, DDim{5, 4}, true, true, 1, 3, 4, 5, false, false, DDim{3, 5}},
        Case{DDim{2, 3, 4}, DDim{2, 4, 5}, false, false, 2, 3, 4, 5, true, true, DDim{2, 3, 5}},
        Case{DDim{2, 4, 3}, DDim{4, 5}, true, false, 2, 3, 4, 5, true, false, DDim{2, 3, 5}},
        Case{DDim{3, 4}, DDim{2, 5, 4}, false, true, 2, 3, 4, 5, false, true, DDim{2, 3, 5}}}) {
    Tensor x = Random(proto::FP64, c.x, 81), y = Random(proto::FP64, c.y, 82);
    OpTest t("matmul");
    t.Input("X", x)
        .Input("Y", y)
        .Output("Out")
        .Attr("transpose_X", c.tx)
        .Attr("transpose_Y", c.ty)
        .Attr("alpha", 0.5f);
    auto out = t.Forward();
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(out.value()["Out"].dims(), c.out);
    std::vector<double> want = RefMatmul(x, y, c.tx, c.ty, 0.5, c.batch, c.m, c.k, c.n, c.xb, c.yb);
    ExpectNear(out.value()["Out"], want, 1e-12);
    EXPECT_EQ(t.CheckGrad("Out", 1e-6, 1e-6, 1e-8), "") << c.x.ToString() << c.y.ToString();
  }
  OpTest bad("matmul");
  bad.Input("X", Random(proto::FP32, DDim{3, 4}, 1))
      .Input("Y", Random(proto::FP32, DDim{5, 2}, 2))
      .Output("Out");
  auto st = bad.Forward();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("inner dims differ"), std::string::npos);
}

}  // namespace
}  // namespace loom::testing
