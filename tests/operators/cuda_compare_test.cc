// CUDA kernels against the CPU ones: forward outputs and gradients of the unary family, and the
// momentum / adam / adamw updates. Skips (with the reason) where no CUDA device is present; the
// CUDA kernels are still compiled and registered by every build that has the toolkit.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/device_context.h"
#include "op_test_util.h"

namespace loom::testing {
namespace {

void ExpectClose(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  std::vector<double> x = Values(a), y = Values(b);
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(x[i], y[i], tol * (1 + std::abs(y[i]))) << what << " [" << i << "]";
}

struct UnaryCase {
  const char* type;
  double lo, hi;
  AttributeMap attrs;
};

TEST(CudaCompareTest, UnaryForwardAndGradsMatchCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: CUDA kernels compiled, not run";
  std::vector<UnaryCase> cases = {
      {"sigmoid", -3, 3, {}},   {"tanh", -2, 2, {}},    {"exp", -2, 2, {}},
      {"log", 0.1, 2, {}},      {"sqrt", 0.1, 2, {}},   {"square", -2, 2, {}},
      {"abs", -2, 2, {}},       {"gelu", -3, 3, {}},
      {"leaky_relu", -2, 2, {{"alpha", 0.1f}}},
      {"clip", -2, 2, {{"min", -0.5f}, {"max", 0.7f}}}};
  for (DataType dt : {proto::FP32, proto::FP64}) {
    const double tol = dt == proto::FP32 ? 1e-5 : 1e-12;
    for (const auto& c : cases) {
      OpTest t(c.type);
      t.Input("X", Random(dt, DDim{7, 33}, 5, c.lo, c.hi)).Output("Out");
      for (const auto& [k, v] : c.attrs) t.Attr(k, v);
      Tensor w = Random(dt, DDim{7, 33}, 6, 0.5, 1.5);
      auto cpu = t.Forward();
      auto cpu_g = t.AnalyticGrads("Out", w);
      t.OnPlace(Place::CUDA(0));
      auto gpu = t.Forward();
      auto gpu_g = t.AnalyticGrads("Out", w);
      ASSERT_TRUE(cpu.ok() && gpu.ok()) << c.type << ": " << gpu.status().ToString();
      ASSERT_TRUE(cpu_g.ok() && gpu_g.ok()) << c.type << ": " << gpu_g.status().ToString();
      ExpectClose(gpu.value()["Out"], cpu.value()["Out"], tol, c.type);
      ExpectClose(gpu_g.value()[0], cpu_g.value()[0], tol, std::string(c.type) + "_grad");
    }
  }
}

Tensor Scalar(DataType dt, double v) {
  Tensor t(dt, DDim{1});
  if (dt == proto::FP64) t.mutable_data<double>(Place::CPU())[0] = v;
  else t.mutable_data<float>(Place::CPU())[0] = static_cast<float>(v);
  return t;
}

TEST(CudaCompareTest, OptimizerUpdatesMatchCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: CUDA kernels compiled, not run";
  for (DataType dt : {proto::FP32, proto::FP64}) {
    const double tol = dt == proto::FP32 ? 1e-5 : 1e-12;
    const DDim dims{1000};
    for (bool nesterov : {false, true}) {
      OpTest t("momentum");
      t.Input("Param", Random(dt, dims, 1)).Input("Grad", Random(dt, dims, 2))
          .Input("Velocity", Random(dt, dims, 3)).Input("LearningRate", Scalar(dt, 0.1))
          .Output("ParamOut").Output("VelocityOut").Attr("mu", 0.9f)
          .Attr("use_nesterov", nesterov);
      auto cpu = t.Forward();
      auto gpu = t.OnPlace(Place::CUDA(0)).Forward();
      ASSERT_TRUE(cpu.ok() && gpu.ok()) << gpu.status().ToString();
      for (const char* s : {"ParamOut", "VelocityOut"})
        ExpectClose(gpu.value()[s], cpu.value()[s], tol, s);
    }
    for (const char* type : {"adam", "adamw"}) {
      OpTest t(type);
      t.Input("Param", Random(dt, dims, 1)).Input("Grad", Random(dt, dims, 2))
          .Input("LearningRate", Scalar(dt, 0.01)).Input("Moment1", Random(dt, dims, 3))
          .Input("Moment2", Random(dt, dims, 4, 0, 1)).Input("Beta1Pow", Scalar(dt, 0.81))
          .Input("Beta2Pow", Scalar(dt, 0.998))
          .Output("ParamOut").Output("Moment1Out").Output("Moment2Out").Output("Beta1PowOut")
          .Output("Beta2PowOut");
      auto cpu = t.Forward();
      auto gpu = t.OnPlace(Place::CUDA(0)).Forward();
      ASSERT_TRUE(cpu.ok() && gpu.ok()) << type << ": " << gpu.status().ToString();
      for (const char* s : {"ParamOut", "Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut"})
        ExpectClose(gpu.value()[s], cpu.value()[s], tol, std::string(type) + " " + s);
    }
  }
}

}  // namespace
}  // namespace loom::testing
