// average_accumulates: the running sums behind ModelAverage (Fluid's op of that name), and
// dpsgd: differentially private SGD (Fluid's DpsgdOptimizer).
//
// average_accumulates adds Param to sum_1 each step. Every kMaxNumAccumulates updates sum_1
// moves into sum_2, so that no sum grows over too many terms. When the window is full
// (num_accumulates >= min_average_window and >= min(max_average_window, num_updates *
// average_window)) sum_1 + sum_2 move into sum_3, which then holds the window just closed, and
// the window restarts. The average applied is (sum_1 + sum_2 + sum_3) / (num_accumulates +
// old_num_accumulates): the current window and the previous one.
//
// dpsgd: the gradient is clipped to L2 norm `clip`, then noise N(0, sigma^2) per element,
// divided by batch_size, is added: ParamOut = Param - LearningRate * (Grad / max(1, |Grad| /
// clip) + noise / batch_size). The noise of a step is a pure function of `seed` and the step
// counter Step (a persistable int64 the op increments), so the same seed trains the same way
// in every run.
#include <cmath>
#include <random>

#include "operators/common.h"
#include "operators/optimizers/optimizer_checks.h"

namespace loom::ops {
namespace {

constexpr int64_t kMaxNumAccumulates = 16384;

Status AverageAccumulatesInferShape(InferShapeContext* ctx) {
  for (const char* s : {"in_sum_1", "in_sum_2", "in_sum_3"})
    LOOM_RETURN_IF_ERROR(CheckLikeParam(ctx, s, "param"));
  for (const char* s : {"in_num_accumulates", "in_old_num_accumulates", "in_num_updates"}) {
    DDim d = ctx->InputDim(s);
    if (d.known() && d.numel() != 1)
      return ctx->Error(ctx->DescribeInput(s), " must hold one element");
    if (ctx->InputDtype(s) != proto::INT64)
      return ctx->Error(ctx->DescribeInput(s), " must be int64, got ",
                        DataTypeName(ctx->InputDtype(s)));
  }
  if (ctx->Attr<float>("average_window") < 0)
    return ctx->Error("average_window must be >= 0, got ", ctx->Attr<float>("average_window"));
  if (ctx->Attr<int64_t>("min_average_window") <= 0 ||
      ctx->Attr<int64_t>("max_average_window") < ctx->Attr<int64_t>("min_average_window"))
    return ctx->Error("need 0 < min_average_window <= max_average_window, got ",
                      ctx->Attr<int64_t>("min_average_window"), " and ",
                      ctx->Attr<int64_t>("max_average_window"));
  for (const char* s : {"out_sum_1", "out_sum_2", "out_sum_3"}) ctx->ShareDimAndDtype("param", s);
  ctx->ShareDimAndDtype("in_num_accumulates", "out_num_accumulates");
  ctx->ShareDimAndDtype("in_old_num_accumulates", "out_old_num_accumulates");
  ctx->ShareDimAndDtype("in_num_updates", "out_num_updates");
  return Status::OK();
}

template <typename T>
Status AverageAccumulatesKernel(const KernelContext& ctx) {
  const Tensor& param = ctx.Input("param");
  const int64_t n = param.numel();
  int64_t num_updates = ctx.Input("in_num_updates").data<int64_t>()[0] + 1;
  int64_t num_acc = ctx.Input("in_num_accumulates").data<int64_t>()[0] + 1;
  int64_t old_num_acc = ctx.Input("in_old_num_accumulates").data<int64_t>()[0];
  // Read every input before writing: the outputs are usually the inputs' variables.
  const T* p = param.data<T>();
  std::vector<T> s1(ctx.Input("in_sum_1").data<T>(), ctx.Input("in_sum_1").data<T>() + n);
  std::vector<T> s2(ctx.Input("in_sum_2").data<T>(), ctx.Input("in_sum_2").data<T>() + n);
  std::vector<T> s3(ctx.Input("in_sum_3").data<T>(), ctx.Input("in_sum_3").data<T>() + n);
  for (int64_t i = 0; i < n; ++i) s1[i] += p[i];
  if (num_updates % kMaxNumAccumulates == 0) {
    for (int64_t i = 0; i < n; ++i) {
      s2[i] += s1[i];
      s1[i] = T(0);
    }
  }
  const double window = ctx.Attr<float>("average_window");
  const int64_t min_w = ctx.Attr<int64_t>("min_average_window");
  const int64_t max_w = ctx.Attr<int64_t>("max_average_window");
  if (num_acc >= min_w &&
      static_cast<double>(num_acc) >=
          std::min(static_cast<double>(max_w), static_cast<double>(num_updates) * window)) {
    for (int64_t i = 0; i < n; ++i) {
      s3[i] = s1[i] + s2[i];
      s1[i] = s2[i] = T(0);
    }
    old_num_acc = num_acc;
    num_acc = 0;
  }
  auto put = [&](const char* slot, const std::vector<T>& v) {
    Tensor* o = ctx.Output(slot);
    o->Resize(param.dims());
    std::copy(v.begin(), v.end(), o->mutable_data<T>(ctx.place()));
  };
  put("out_sum_1", s1);
  put("out_sum_2", s2);
  put("out_sum_3", s3);
  auto put_count = [&](const char* slot, int64_t v) {
    Tensor* o = ctx.Output(slot);
    o->Resize(DDim({1}));
    o->mutable_data<int64_t>(ctx.place())[0] = v;
  };
  put_count("out_num_updates", num_updates);
  put_count("out_num_accumulates", num_acc);
  put_count("out_old_num_accumulates", old_num_acc);
  return Status::OK();
}

Status DpsgdInferShape(InferShapeContext* ctx) {
  LOOM_RETURN_IF_ERROR(CheckLikeParam(ctx, "Grad", "Param"));
  LOOM_RETURN_IF_ERROR(CheckScalarOfParam(ctx, "LearningRate"));
  if (!(ctx->Attr<float>("clip") > 0))
    return ctx->Error("clip must be > 0, got ", ctx->Attr<float>("clip"));
  if (!(ctx->Attr<float>("batch_size") > 0))
    return ctx->Error("batch_size must be > 0, got ", ctx->Attr<float>("batch_size"));
  if (!(ctx->Attr<float>("sigma") >= 0))
    return ctx->Error("sigma must be >= 0, got ", ctx->Attr<float>("sigma"));
  ctx->ShareDimAndDtype("Param", "ParamOut");
  if (ctx->HasInput("Step")) {
    if (ctx->InputDtype("Step") != proto::INT64)
      return ctx->Error(ctx->DescribeInput("Step"), " must be int64");
    ctx->ShareDimAndDtype("Step", "StepOut");
  }
  return Status::OK();
}

template <typename T>
Status DpsgdKernel(const KernelContext& ctx) {
  const Tensor& param = ctx.Input("Param");
  UpdateGrad<T> grad;
  LOOM_RETURN_IF_ERROR(grad.Read(ctx, param, /*densify=*/true));
  const T lr = ctx.Input("LearningRate").data<T>()[0];
  const int64_t n = param.numel();
  const T* p = param.data<T>();
  std::vector<T> g(n);
  grad.ForEach(n, [&](int64_t i, T v) { g[i] = v; });
  double sq = 0;
  for (T v : g) sq += static_cast<double>(v) * v;
  const double norm = std::sqrt(sq), clip = ctx.Attr<float>("clip");
  const T scale = static_cast<T>(norm > clip ? norm / clip : 1.0);
  const T sigma = ctx.Attr<float>("sigma"), batch = ctx.Attr<float>("batch_size");
  T* out = ctx.Output("ParamOut")->mutable_data<T>(ctx.place());
  // The step's noise: a pure function of (seed, step); Step counts the updates so far.
  int64_t step = 0;
  if (const Tensor* st = ctx.InputOrNull("Step")) step = st->data<int64_t>()[0];
  const int seed = ctx.Attr<int>("seed");
  std::seed_seq seq{static_cast<uint64_t>(seed != 0 ? seed : std::random_device{}()),
                    static_cast<uint64_t>(step)};
  std::mt19937_64 rng(seq);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    const T noise = sigma == T(0) ? T(0) : static_cast<T>(sigma * normal(rng));
    out[i] = p[i] - lr * (g[i] / scale + noise / batch);
  }
  if (Tensor* so = ctx.OutputOrNull("StepOut")) {
    so->Resize(DDim({1}));
    so->mutable_data<int64_t>(ctx.place())[0] = step + 1;
  }
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(average_accumulates)
    .Doc("The running parameter sums of ModelAverage (see the file's comment).")
    .Input("param", "the parameter")
    .Input("in_sum_1", "sum of the current window's recent values")
    .Input("in_sum_2", "sum of the current window's older values")
    .Input("in_sum_3", "sum of the previous window")
    .Input("in_num_accumulates", "values in the current window, int64 [1]")
    .Input("in_old_num_accumulates", "values in the previous window, int64 [1]")
    .Input("in_num_updates", "updates so far, int64 [1]")
    .Output("out_sum_1", "in_sum_1 updated")
    .Output("out_sum_2", "in_sum_2 updated")
    .Output("out_sum_3", "in_sum_3 updated")
    .Output("out_num_accumulates", "in_num_accumulates updated")
    .Output("out_old_num_accumulates", "in_old_num_accumulates updated")
    .Output("out_num_updates", "in_num_updates updated")
    .Attr<float>("average_window", 0.f, "window length as a fraction of the updates so far")
    .Attr<int64_t>("max_average_window", 10000, "the longest window")
    .Attr<int64_t>("min_average_window", 10000, "the shortest window")
    .InferShape(AverageAccumulatesInferShape)
    .Kernel(Place::kCPU, proto::FP32, AverageAccumulatesKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, AverageAccumulatesKernel<double>);

LOOM_REGISTER_OP(dpsgd)
    .Doc(
        "Differentially private SGD: ParamOut = Param - LearningRate * (Grad / max(1, |Grad| / "
        "clip) + N(0, sigma^2) / batch_size), noise drawn per element.")
    .Input("Param", "parameter")
    .Input("Grad", "its gradient")
    .Input("LearningRate", "learning rate, one element")
    .Input("Step", "updates so far, int64 [1]: the noise's step", false, true)
    .Output("ParamOut", "updated parameter (usually the Param var itself)")
    .Output("StepOut", "Step + 1 (usually the Step var itself)", false, true)
    .Attr<float>("clip", 10.f, "the L2 norm the gradient is clipped to")
    .Attr<float>("batch_size", 16.f, "the noise is divided by it")
    .Attr<float>("sigma", 1.f, "standard deviation of the noise")
    .Attr<int>("seed", 0, "noise seed; 0 draws a fresh one")
    .InferShape(DpsgdInferShape)
    .Kernel(Place::kCPU, proto::FP32, DpsgdKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, DpsgdKernel<double>);

}  // namespace loom::ops
