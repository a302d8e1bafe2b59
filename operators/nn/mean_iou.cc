// mean_iou: the mean intersection over union of a segmentation. Per class c: correct = pixels
// predicted c and labelled c; wrong = pixels predicted c but labelled otherwise plus pixels
// labelled c but predicted otherwise; IoU = correct / (correct + wrong). The mean is over the
// classes that occur (correct + wrong > 0). No gradient.
#include <algorithm>

#include "operators/common.h"

namespace loom::ops {
namespace {

Status MeanIouInferShape(InferShapeContext* ctx) {
  const int classes = ctx->Attr<int>("num_classes");
  if (classes < 1) return ctx->Error("num_classes must be >= 1, got ", classes);
  const DDim p = ctx->InputDim("Predictions"), l = ctx->InputDim("Labels");
  if (p.numel() >= 0 && l.numel() >= 0 && p.numel() != l.numel())
    return ctx->Error(ctx->DescribeInput("Predictions"), " and ", ctx->DescribeInput("Labels"),
                      " must have as many elements");
  if (ctx->InputDtype("Predictions") != ctx->InputDtype("Labels"))
    return ctx->Error(ctx->DescribeInput("Labels"), " must have the dtype of ",
                      ctx->DescribeInput("Predictions"));
  ctx->SetOutputDim("OutMeanIou", DDim({1}));
  ctx->SetOutputDtype("OutMeanIou", proto::FP32);
  for (const char* slot : {"OutWrong", "OutCorrect"}) {
    ctx->SetOutputDim(slot, DDim({classes}));
    ctx->SetOutputDtype(slot, proto::INT32);
  }
  return Status::OK();
}

template <typename T>
Status MeanIouKernel(const KernelContext& ctx) {
  const Tensor& pt = ctx.Input("Predictions");
  const Tensor& lt = ctx.Input("Labels");
  const int64_t classes = ctx.Attr<int>("num_classes");
  if (pt.numel() != lt.numel())
    return ctx.Error("Predictions has ", pt.numel(), " elements but Labels ", lt.numel());
  std::vector<int32_t> wrong(classes, 0), correct(classes, 0);
  const T* p = pt.data<T>();
  const T* l = lt.data<T>();
  for (int64_t i = 0; i < pt.numel(); ++i) {
    for (T v : {p[i], l[i]})
      if (v < 0 || v >= classes)
        return ctx.Error("class ", static_cast<int64_t>(v), " at ", i,
                         " is outside [0, num_classes = ", classes, ")");
    if (p[i] == l[i]) {
      ++correct[p[i]];
    } else {
      ++wrong[p[i]];
      ++wrong[l[i]];
    }
  }
  double sum = 0;
  int valid = 0;
  for (int64_t c = 0; c < classes; ++c) {
    const int32_t denom = wrong[c] + correct[c];
    if (denom == 0) continue;
    ++valid;
    sum += static_cast<double>(correct[c]) / denom;
  }
  Tensor* miou = ctx.Output("OutMeanIou");
  miou->Resize(DDim({1}));
  *miou->mutable_data<float>(ctx.place()) = valid ? static_cast<float>(sum / valid) : 0.0f;
  for (auto [slot, v] : {std::pair{"OutWrong", &wrong}, std::pair{"OutCorrect", &correct}}) {
    Tensor* t = ctx.Output(slot);
    t->Resize(DDim({classes}));
    std::copy(v->begin(), v->end(), t->mutable_data<int32_t>(ctx.place()));
  }
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(mean_iou)
    .Doc(
        "OutMeanIou = the mean over the classes present of correct / (correct + wrong); "
        "OutCorrect[c] = pixels predicted and labelled c; OutWrong[c] = pixels predicted or "
        "labelled c but not both.")
    .Input("Predictions", "int32 / int64 predicted classes")
    .Input("Labels", "int32 / int64 true classes, as many")
    .Output("OutMeanIou", "float32 [1]")
    .Output("OutWrong", "int32 [num_classes]")
    .Output("OutCorrect", "int32 [num_classes]")
    .Attr<int>("num_classes", 1, "the number of classes")
    .InferShape(MeanIouInferShape)
    .Kernel(Place::kCPU, proto::INT32, MeanIouKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, MeanIouKernel<int64_t>);

}  // namespace loom::ops
