// nce: noise-contrastive estimation (Fluid's nce op). Each row i of Input [N, D] has its
// num_true labels (Label [N, num_true]) and num_neg_samples classes drawn by the sampler
// (uniform, log_uniform or custom over [0, num_total_classes)); for each of these classes c:
//   o = sigmoid(Input[i] · Weight[c] + Bias[c]),   b = num_neg_samples * Q(c)  (Q: the sampler)
//   cost = -log(o / (o + b)) for a true label,  -log(b / (o + b)) for a sampled one,
// and Cost[i] = SampleWeight[i] * sum of the row's costs. SampleLogits keeps o and
// SampleLabels the classes, so the grad op reuses the forward samples. With a non-zero seed
// the samples are a pure function of the seed (the same on every run); custom_neg_classes
// fixes them outright. is_sparse makes the Weight and Bias gradients SelectedRows of the
// sampled rows.
#include <cmath>
#include <vector>

#include "operators/nn/class_sampler.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

int64_t NumTrue(const DDim& label) { return label.size() == 2 ? label[1] : 1; }

Status NceInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("Input"), label = ctx->InputDim("Label"), w = ctx->InputDim("Weight");
  if (x.size() != 2) return ctx->Error(ctx->DescribeInput("Input"), " must be 2-D [N, D]");
  if (w.size() != 2) return ctx->Error(ctx->DescribeInput("Weight"), " must be 2-D [V, D]");
  if (label.size() != 1 && label.size() != 2)
    return ctx->Error(ctx->DescribeInput("Label"), " must be [N, num_true] or [N]");
  if (ctx->InputDtype("Label") != proto::INT64)
    return ctx->Error(ctx->DescribeInput("Label"), " must be int64");
  if (!IsFloatingPoint(ctx->InputDtype("Input")) ||
      ctx->InputDtype("Weight") != ctx->InputDtype("Input"))
    return ctx->Error(ctx->DescribeInput("Input"), " and ", ctx->DescribeInput("Weight"),
                      " must have one floating-point dtype");
  if (x[0] >= 0 && label[0] >= 0 && x[0] != label[0])
    return ctx->Error(ctx->DescribeInput("Input"), " and ", ctx->DescribeInput("Label"),
                      " must have the same number of rows");
  if (x[1] >= 0 && w[1] >= 0 && x[1] != w[1])
    return ctx->Error(ctx->DescribeInput("Weight"), " must have ", x[1], " columns, the width of ",
                      ctx->DescribeInput("Input"));
  int64_t classes = ctx->Attr<int>("num_total_classes");
  if (w[0] >= 0 && w[0] != classes)
    return ctx->Error(ctx->DescribeInput("Weight"), " must have num_total_classes (", classes,
                      ") rows");
  if (ctx->HasInput("Bias")) {
    DDim b = ctx->InputDim("Bias");
    if (b.numel() >= 0 && b.numel() != classes)
      return ctx->Error(ctx->DescribeInput("Bias"), " must have num_total_classes (", classes,
                        ") values");
  }
  if (ctx->HasInput("SampleWeight")) {
    DDim sw = ctx->InputDim("SampleWeight");
    if (sw.numel() >= 0 && x[0] >= 0 && sw.numel() != x[0])
      return ctx->Error(ctx->DescribeInput("SampleWeight"), " must hold one weight per row (", x[0],
                        ")");
  }
  int sampler = ctx->Attr<int>("sampler");
  if (sampler == ClassSampler::kCustom) {
    if (!ctx->HasInput("CustomDistProbs"))
      return ctx->Error("sampler 2 (custom_dist) needs the input CustomDistProbs");
    DDim p = ctx->InputDim("CustomDistProbs");
    if (!IsFloatingPoint(ctx->InputDtype("CustomDistProbs")))
      return ctx->Error(ctx->DescribeInput("CustomDistProbs"), " must be floating point");
    if (p.numel() >= 0 && p.numel() != classes)
      return ctx->Error(ctx->DescribeInput("CustomDistProbs"), " must hold num_total_classes (",
                        classes, ") probabilities");
  }
  int neg = ctx->Attr<int>("num_neg_samples");
  const auto& fixed = ctx->Attr<std::vector<int>>("custom_neg_classes");
  if (!fixed.empty() && static_cast<int>(fixed.size()) != neg)
    return ctx->Error("custom_neg_classes holds ", fixed.size(), " classes but num_neg_samples is ",
                      neg);
  int64_t cols = NumTrue(label) < 0 ? -1 : NumTrue(label) + neg;
  ctx->SetOutputDim("Cost", DDim{x[0], 1});
  ctx->SetOutputDtype("Cost", ctx->InputDtype("Input"));
  ctx->SetOutputDim("SampleLogits", DDim{x[0], cols});
  ctx->SetOutputDtype("SampleLogits", ctx->InputDtype("Input"));
  ctx->SetOutputDim("SampleLabels", DDim{x[0], cols});
  ctx->SetOutputDtype("SampleLabels", proto::INT64);
  return Status::OK();
}

template <typename T>
ClassSampler MakeSampler(const KernelContext& ctx) {
  int64_t classes = ctx.Attr<int>("num_total_classes");
  auto kind = static_cast<ClassSampler::Kind>(ctx.Attr<int>("sampler"));
  std::vector<double> probs;
  if (kind == ClassSampler::kCustom) {
    const Tensor& p = ctx.Input("CustomDistProbs");  // float32 (as Fluid's) or float64
    if (p.dtype() == proto::FP64)
      probs.assign(p.data<double>(), p.data<double>() + p.numel());
    else
      probs.assign(p.data<float>(), p.data<float>() + p.numel());
  }
  return ClassSampler(kind, classes - 1, ctx.Attr<int>("seed"), std::move(probs));
}

template <typename T>
T RowWeight(const KernelContext& ctx, int64_t row) {
  const Tensor* sw = ctx.InputOrNull("SampleWeight");
  return sw ? sw->data<T>()[row] : T(1);
}

template <typename T>
Status NceKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("Input");
  const Tensor& label = ctx.Input("Label");
  const Tensor& w = ctx.Input("Weight");
  const Tensor* bias = ctx.InputOrNull("Bias");
  const int64_t n = x.dims()[0], d = x.dims()[1];
  const int64_t num_true = NumTrue(label.dims());
  const int64_t neg = ctx.Attr<int>("num_neg_samples");
  const int64_t cols = num_true + neg, classes = ctx.Attr<int>("num_total_classes");
  const auto& fixed = ctx.Attr<std::vector<int>>("custom_neg_classes");
  ClassSampler sampler = MakeSampler<T>(ctx);

  Tensor* labels_t = ctx.Output("SampleLabels");
  labels_t->Resize({n, cols});
  int64_t* labels = labels_t->mutable_data<int64_t>(ctx.place());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      int64_t c = j < num_true    ? label.data<int64_t>()[i * num_true + j]
                  : fixed.empty() ? sampler.Sample()
                                  : fixed[j - num_true];
      if (c < 0 || c >= classes)
        return ctx.Error(j < num_true ? "label " : "negative class ", c, " of row ", i,
                         " is out of range [0, num_total_classes = ", classes, ")");
      labels[i * cols + j] = c;
    }

  Tensor* logits_t = ctx.Output("SampleLogits");
  logits_t->Resize({n, cols});
  T* o = logits_t->mutable_data<T>(ctx.place());
  T* cost = ctx.Output("Cost")->mutable_data<T>(ctx.place());
  const T* xd = x.data<T>();
  const T* wd = w.data<T>();
  for (int64_t i = 0; i < n; ++i) {
    double row_cost = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t c = labels[i * cols + j];
      double z = bias ? static_cast<double>(bias->data<T>()[c]) : 0.0;
      for (int64_t k = 0; k < d; ++k) z += static_cast<double>(xd[i * d + k]) * wd[c * d + k];
      const double oc = 1.0 / (1.0 + std::exp(-z));
      o[i * cols + j] = static_cast<T>(oc);
      const double b = sampler.Probability(c) * neg;
      row_cost += j < num_true ? -std::log(oc / (oc + b)) : -std::log(b / (oc + b));
    }
    cost[i] = static_cast<T>(row_cost) * RowWeight<T>(ctx, i);
  }
  return Status::OK();
}

// d cost / d z for a class with o = sigmoid(z) and b = num_neg_samples * Q(c):
// true label b (o - 1) / (o + b), sampled class o (1 - o) / (o + b).
template <typename T>
Status NceGradKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("Input");
  const Tensor& w = ctx.Input("Weight");
  const Tensor& labels_t = ctx.Input("SampleLabels");
  const T* o = ctx.Input("SampleLogits").data<T>();
  const T* dcost = ctx.Input("Cost@GRAD").data<T>();
  const int64_t n = x.dims()[0], d = x.dims()[1], cols = labels_t.dims()[1];
  const int64_t num_true = NumTrue(ctx.Input("Label").dims());
  const int64_t neg = ctx.Attr<int>("num_neg_samples");
  const int64_t classes = ctx.Attr<int>("num_total_classes");
  const int64_t* labels = labels_t.data<int64_t>();
  ClassSampler sampler = MakeSampler<T>(ctx);  // for Q only: nothing is drawn

  std::vector<T> dz(n * cols);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const double oc = o[i * cols + j], b = sampler.Probability(labels[i * cols + j]) * neg;
      const double g = j < num_true ? b * (oc - 1.0) / (oc + b) : oc * (1.0 - oc) / (oc + b);
      dz[i * cols + j] = static_cast<T>(g) * dcost[i] * RowWeight<T>(ctx, i);
    }
  const T* xd = x.data<T>();
  const T* wd = w.data<T>();
  if (Tensor* dx_t = ctx.OutputOrNull("Input@GRAD")) {
    T* dx = dx_t->mutable_data<T>(ctx.place());
    std::fill(dx, dx + n * d, T(0));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t k = 0; k < d; ++k)
          dx[i * d + k] += dz[i * cols + j] * wd[labels[i * cols + j] * d + k];
  }
  const bool sparse = ctx.Attr<bool>("is_sparse");
  // Weight@GRAD: dz times the row's input at each sampled class (one SelectedRows row per
  // sample when sparse); Bias@GRAD: dz.
  if (sparse) {
    if (SelectedRows* dw = ctx.OutputSelectedRows("Weight@GRAD")) {
      dw->height = classes;
      dw->rows.assign(labels, labels + n * cols);
      dw->value.Resize({n * cols, d});
      T* v = dw->value.template mutable_data<T>(ctx.place());
      for (int64_t s = 0; s < n * cols; ++s)
        for (int64_t k = 0; k < d; ++k) v[s * d + k] = dz[s] * xd[(s / cols) * d + k];
    }
    if (SelectedRows* db = ctx.OutputSelectedRows("Bias@GRAD")) {
      db->height = classes;
      db->rows.assign(labels, labels + n * cols);
      db->value.Resize({n * cols, 1});
      std::copy(dz.begin(), dz.end(), db->value.template mutable_data<T>(ctx.place()));
    }
    return Status::OK();
  }
  if (Tensor* dw_t = ctx.OutputOrNull("Weight@GRAD")) {
    T* dw = dw_t->mutable_data<T>(ctx.place());
    std::fill(dw, dw + dw_t->numel(), T(0));
    for (int64_t s = 0; s < n * cols; ++s)
      for (int64_t k = 0; k < d; ++k) dw[labels[s] * d + k] += dz[s] * xd[(s / cols) * d + k];
  }
  if (Tensor* db_t = ctx.OutputOrNull("Bias@GRAD")) {
    T* db = db_t->mutable_data<T>(ctx.place());
    std::fill(db, db + db_t->numel(), T(0));
    for (int64_t s = 0; s < n * cols; ++s) db[labels[s]] += dz[s];
  }
  return Status::OK();
}

std::vector<proto::OpDesc> NceGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(fwd,
                         {"Input", "Label", "Weight", "Bias", "SampleWeight", "CustomDistProbs",
                          "SampleLogits", "SampleLabels", "Cost@GRAD"},
                         {"Input", "Weight", "Bias"})};
}

Status NceGradInferShape(InferShapeContext* ctx) {
  for (const char* slot : {"Input", "Weight", "Bias"}) {
    std::string grad = GradVarName(slot);
    if (ctx->HasOutput(grad) && ctx->OutputVarName(grad) != kEmptyVarName)
      ctx->ShareDimAndDtype(slot, grad);
  }
  return Status::OK();
}

Status NceGradVarType(InferShapeContext* ctx) {
  auto type =
      ctx->Attr<bool>("is_sparse") ? proto::VarType::SELECTED_ROWS : proto::VarType::DENSE_TENSOR;
  if (ctx->HasOutput("Weight@GRAD")) ctx->SetOutputVarType("Weight@GRAD", type);
  if (ctx->HasOutput("Bias@GRAD")) ctx->SetOutputVarType("Bias@GRAD", type);
  return Status::OK();
}

std::function<Status(const int&)> SamplerCheck() {
  return [](const int& v) {
    return v >= 0 && v <= 2 ? Status::OK()
                            : InvalidArgument(
                                  "must be 0 (uniform), 1 (log_uniform) or 2 "
                                  "(custom_dist), got ",
                                  v);
  };
}

}  // namespace

LOOM_REGISTER_OP(nce)
    .Doc(
        "Noise-contrastive estimation: per row, a logistic loss of its true labels against "
        "num_neg_samples sampled classes, corrected by the sampler's probabilities.")
    .Input("Input", "input features [N, D]")
    .Input("Label", "int64 true classes [N, num_true]")
    .Input("Weight", "class weights [num_total_classes, D]")
    .Input("Bias", "class biases [num_total_classes, 1]", false, true)
    .Input("SampleWeight", "per-row weights of the cost [N] or [N, 1]", false, true)
    .Input("CustomDistProbs", "the custom sampler's class probabilities [num_total_classes]", false,
           true)
    .Output("Cost", "the cost per row [N, 1]")
    .Output("SampleLogits", "sigmoid of the logit of each true and sampled class [N, C]")
    .Output("SampleLabels", "int64 true and sampled classes [N, C], C = num_true + negatives")
    .RequiredAttr<int>("num_total_classes", "the number of classes", Positive("num_total_classes"))
    .Attr<int>("num_neg_samples", 10, "negative classes sampled per row",
               Positive("num_neg_samples"))
    .Attr<int>("seed", 0, "random seed of the sampler; 0 draws a fresh one on every run")
    .Attr<int>("sampler", 0, "0 uniform, 1 log_uniform, 2 custom (CustomDistProbs)", SamplerCheck())
    .Attr<bool>("is_sparse", false, "the Weight and Bias gradients are SelectedRows")
    .Attr<bool>("remote_prefetch", false, "accepted (Fluid's distributed prefetch)")
    .Attr<std::vector<int>>("custom_neg_classes", std::vector<int>{},
                            "fixed negative classes (num_neg_samples of them) instead of sampled")
    .KernelDtypeFrom("Input")
    .InferShape(NceInferShape)
    .GradMaker(NceGradMaker)
    .Kernel(Place::kCPU, proto::FP32, NceKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, NceKernel<double>);

LOOM_REGISTER_OP(nce_grad)
    .Doc("Gradients of nce for Input, Weight and Bias over the forward samples.")
    .Input("Input", "forward Input")
    .Input("Label", "forward Label")
    .Input("Weight", "forward Weight")
    .Input("Bias", "forward Bias", false, true)
    .Input("SampleWeight", "forward SampleWeight", false, true)
    .Input("CustomDistProbs", "forward CustomDistProbs", false, true)
    .Input("SampleLogits", "forward SampleLogits")
    .Input("SampleLabels", "forward SampleLabels")
    .Input("Cost@GRAD", "gradient of Cost")
    .Output("Input@GRAD", "gradient of Input", false, true)
    .Output("Weight@GRAD", "gradient of Weight", false, true)
    .Output("Bias@GRAD", "gradient of Bias", false, true)
    .AttrsFrom("nce")
    .KernelDtypeFrom("Input")
    .InferVarType(NceGradVarType)
    .InferShape(NceGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, NceGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, NceGradKernel<double>);

}  // namespace loom::ops
