// sample_logits: the sampling half of Fluid's sampled_softmax_with_cross_entropy. For Logits
// [N, K] and true classes Labels [N, T] it picks C = T + num_samples classes per row: the row's
// T labels, then num_samples distinct classes drawn once for the whole batch by the
// log-uniform sampler over [0, K - 1) (Fluid's LogUniformSampler(K - 1); unique sampling
// redraws repeats) or taken from CustomizedSamples. Outputs, per row and picked class c:
//   Samples = c,  Probabilities = Q(c)  (with unique sampling, the chance that c was drawn in
//   the `tries` draws made: 1 - (1 - q(c))^tries, or q(c) * num_samples if no draw repeated),
//   SampledLogits = Logits[row, c] - log Q(c), less 1e20 where a sampled class is one of the
//   row's labels and remove_accidental_hits is set,
//   SampledLabels = 0 .. T - 1 (the columns of the true classes).
// Infinities are clamped to +-1e20 as in Fluid. The gradient scatter-adds SampledLogits@GRAD
// into Logits@GRAD at Samples.
#include <cmath>
#include <set>
#include <unordered_set>
#include <vector>

#include "operators/nn/class_sampler.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

constexpr double kApproxInf = 1e20;

Status SampleLogitsInferShape(InferShapeContext* ctx) {
  DDim logits = ctx->InputDim("Logits"), labels = ctx->InputDim("Labels");
  if (logits.size() != 2) return ctx->Error(ctx->DescribeInput("Logits"), " must be 2-D [N, K]");
  if (labels.size() != 2)
    return ctx->Error(ctx->DescribeInput("Labels"), " must be 2-D [N, num_true]");
  if (!IsFloatingPoint(ctx->InputDtype("Logits")))
    return ctx->Error(ctx->DescribeInput("Logits"), " must be floating point");
  if (ctx->InputDtype("Labels") != proto::INT64)
    return ctx->Error(ctx->DescribeInput("Labels"), " must be int64");
  if (logits[0] >= 0 && labels[0] >= 0 && logits[0] != labels[0])
    return ctx->Error(ctx->DescribeInput("Logits"), " and ", ctx->DescribeInput("Labels"),
                      " must have the same number of rows");
  const int64_t s = ctx->Attr<int>("num_samples");
  const int64_t cols = labels[1] < 0 ? -1 : labels[1] + s;
  if (ctx->Attr<bool>("use_customized_samples")) {
    if (!ctx->HasInput("CustomizedSamples") || !ctx->HasInput("CustomizedProbabilities"))
      return ctx->Error(
          "use_customized_samples needs CustomizedSamples and CustomizedProbabilities");
    DDim cs = ctx->InputDim("CustomizedSamples"), cp = ctx->InputDim("CustomizedProbabilities");
    if (cs.size() != 2 || (cs[1] >= 0 && cols >= 0 && cs[1] != cols) || !(cs == cp))
      return ctx->Error(ctx->DescribeInput("CustomizedSamples"), " and ",
                        ctx->DescribeInput("CustomizedProbabilities"), " must both be [N, ", cols,
                        "] (num_true + num_samples columns)");
    if (ctx->InputDtype("CustomizedSamples") != proto::INT64)
      return ctx->Error(ctx->DescribeInput("CustomizedSamples"), " must be int64");
    if (ctx->InputDtype("CustomizedProbabilities") != ctx->InputDtype("Logits"))
      return ctx->Error(ctx->DescribeInput("CustomizedProbabilities"),
                        " must have the dtype of Logits");
  } else if (logits[1] >= 0 && s > logits[1] - 1) {
    return ctx->Error("num_samples (", s, ") must be at most ", logits[1] - 1,
                      ": the sampler draws distinct classes of [0, ", logits[1] - 1, ")");
  }
  DataType dt = ctx->InputDtype("Logits");
  ctx->SetOutputDim("Samples", DDim{logits[0], cols});
  ctx->SetOutputDtype("Samples", proto::INT64);
  ctx->SetOutputDim("Probabilities", DDim{logits[0], cols});
  ctx->SetOutputDtype("Probabilities", dt);
  ctx->SetOutputDim("SampledLogits", DDim{logits[0], cols});
  ctx->SetOutputDtype("SampledLogits", dt);
  ctx->SetOutputDim("SampledLabels", DDim{logits[0], labels[1]});
  ctx->SetOutputDtype("SampledLabels", proto::INT64);
  return Status::OK();
}

double Tolerable(double x) {
  if (std::isinf(x)) return x > 0 ? kApproxInf : -kApproxInf;
  return x;
}

// Fluid's unique sampling: labels first, then distinct draws shared by every row.
template <typename T>
void DrawSamples(const KernelContext& ctx, int64_t n, int64_t k, int64_t t, int64_t* samples,
                 T* probs) {
  const int64_t s = ctx.Attr<int>("num_samples"), cols = t + s;
  const int64_t* labels = ctx.Input("Labels").data<int64_t>();
  ClassSampler sampler(ClassSampler::kLogUniform, k - 1, ctx.Attr<int>("seed"));
  std::vector<double> q(n * cols);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < t; ++j) {
      samples[i * cols + j] = labels[i * t + j];
      q[i * cols + j] = sampler.Probability(labels[i * t + j]);
    }
  std::unordered_set<int64_t> drawn;
  int64_t tries = 0;
  for (int64_t j = t; j < cols;) {
    ++tries;
    const int64_t c = sampler.Sample();
    if (!drawn.insert(c).second) continue;
    for (int64_t i = 0; i < n; ++i) {
      samples[i * cols + j] = c;
      q[i * cols + j] = sampler.Probability(c);
    }
    ++j;
  }
  for (int64_t m = 0; m < n * cols; ++m)
    probs[m] = static_cast<T>(tries == s ? q[m] * s : -std::expm1(tries * std::log1p(-q[m])));
}

template <typename T>
Status SampleLogitsKernel(const KernelContext& ctx) {
  const Tensor& logits_t = ctx.Input("Logits");
  const Tensor& labels_t = ctx.Input("Labels");
  const int64_t n = logits_t.dims()[0], k = logits_t.dims()[1], t = labels_t.dims()[1];
  const int64_t cols = t + ctx.Attr<int>("num_samples");
  const int64_t* labels = labels_t.data<int64_t>();
  for (int64_t m = 0; m < n * t; ++m)
    if (labels[m] < 0 || labels[m] >= k)
      return ctx.Error("label ", labels[m], " of row ", m / t, " is out of range [0, ", k, ")");
  Tensor* samples_t = ctx.Output("Samples");
  Tensor* probs_t = ctx.Output("Probabilities");
  samples_t->Resize({n, cols});
  probs_t->Resize({n, cols});
  int64_t* samples = samples_t->mutable_data<int64_t>(ctx.place());
  T* probs = probs_t->mutable_data<T>(ctx.place());
  if (ctx.Attr<bool>("use_customized_samples")) {
    const Tensor& cs = ctx.Input("CustomizedSamples");
    const Tensor& cp = ctx.Input("CustomizedProbabilities");
    if (cs.dims()[0] != n || cs.dims()[1] != cols)
      return ctx.Error("CustomizedSamples has dims ", cs.dims().ToString(), ", expected [", n, ", ",
                       cols, "]");
    std::copy(cs.data<int64_t>(), cs.data<int64_t>() + n * cols, samples);
    std::copy(cp.data<T>(), cp.data<T>() + n * cols, probs);
    for (int64_t m = 0; m < n * cols; ++m)
      if (samples[m] < 0 || samples[m] >= k)
        return ctx.Error("CustomizedSamples[", m / cols, ", ", m % cols, "] = ", samples[m],
                         " is out of range [0, ", k, ")");
  } else {
    // Distinct draws from [0, K - 1): more than K - 1 of them would never end.
    if (cols - t > k - 1)
      return ctx.Error("num_samples (", cols - t, ") must be at most ", k - 1, " for Logits of ", k,
                       " classes");
    DrawSamples<T>(ctx, n, k, t, samples, probs);
  }
  const bool remove_hits = ctx.Attr<bool>("remove_accidental_hits");
  const T* logits = logits_t.data<T>();
  Tensor* out_t = ctx.Output("SampledLogits");
  out_t->Resize({n, cols});
  T* out = out_t->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < n; ++i) {
    std::set<int64_t> row_labels(labels + i * t, labels + (i + 1) * t);
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t m = i * cols + j;
      double v = logits[i * k + samples[m]];
      if (remove_hits && j >= t && row_labels.count(samples[m])) v -= kApproxInf;
      out[m] = static_cast<T>(Tolerable(v - Tolerable(std::log(static_cast<double>(probs[m])))));
    }
  }
  Tensor* sl_t = ctx.Output("SampledLabels");
  sl_t->Resize({n, t});
  int64_t* sl = sl_t->mutable_data<int64_t>(ctx.place());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < t; ++j) sl[i * t + j] = j;
  return Status::OK();
}

template <typename T>
Status SampleLogitsGradKernel(const KernelContext& ctx) {
  Tensor* dl_t = ctx.OutputOrNull("Logits@GRAD");
  if (!dl_t) return Status::OK();
  const Tensor& samples_t = ctx.Input("Samples");
  const int64_t n = samples_t.dims()[0], cols = samples_t.dims()[1];
  const int64_t k = ctx.Input("Logits").dims()[1];
  const int64_t* samples = samples_t.data<int64_t>();
  const T* g = ctx.Input("SampledLogits@GRAD").data<T>();
  T* dl = dl_t->mutable_data<T>(ctx.place());
  std::fill(dl, dl + n * k, T(0));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < cols; ++j) dl[i * k + samples[i * cols + j]] += g[i * cols + j];
  return Status::OK();
}

std::vector<proto::OpDesc> SampleLogitsGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(fwd, {"Logits", "Samples", "SampledLogits@GRAD"}, {"Logits"})};
}

Status SampleLogitsGradInferShape(InferShapeContext* ctx) {
  if (ctx->HasOutput("Logits@GRAD")) ctx->ShareDimAndDtype("Logits", "Logits@GRAD");
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(sample_logits)
    .Doc(
        "Picks each row's true classes and num_samples log-uniformly sampled classes (or "
        "customized ones) and their logits less log Q: the input of a sampled softmax.")
    .Input("Logits", "logits [N, K]")
    .Input("Labels", "int64 true classes [N, num_true]")
    .Input("CustomizedSamples", "int64 classes [N, num_true + num_samples]", false, true)
    .Input("CustomizedProbabilities", "their probabilities [N, num_true + num_samples]", false,
           true)
    .Output("Samples", "int64 picked classes [N, num_true + num_samples]")
    .Output("Probabilities", "Q of each picked class")
    .Output("SampledLogits", "Logits at the picked classes less log Q")
    .Output("SampledLabels", "int64 columns of the true classes [N, num_true]: 0 .. num_true-1")
    .Attr<bool>("use_customized_samples", false, "take CustomizedSamples instead of sampling")
    .Attr<bool>("uniq", true, "the sampled classes are distinct (Fluid always sets it)")
    .Attr<bool>("remove_accidental_hits", true,
                "a sampled class that is one of the row's labels gets its logit lowered by 1e20")
    .Attr<int>("num_samples", 1, "classes sampled per batch", Positive("num_samples"))
    .Attr<int>("seed", 0, "random seed of the sampler; 0 draws a fresh one on every run")
    .KernelDtypeFrom("Logits")
    .InferShape(SampleLogitsInferShape)
    .GradMaker(SampleLogitsGradMaker)
    .Kernel(Place::kCPU, proto::FP32, SampleLogitsKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SampleLogitsKernel<double>);

LOOM_REGISTER_OP(sample_logits_grad)
    .Doc("Logits@GRAD: SampledLogits@GRAD scatter-added at Samples (zero elsewhere).")
    .Input("Logits", "forward Logits (for its dims)")
    .Input("Samples", "forward Samples")
    .Input("SampledLogits@GRAD", "gradient of SampledLogits")
    .Output("Logits@GRAD", "gradient of Logits", false, true)
    .AttrsFrom("sample_logits")
    .KernelDtypeFrom("Logits")
    .InferShape(SampleLogitsGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, SampleLogitsGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SampleLogitsGradKernel<double>);

}  // namespace loom::ops
