// softmax_with_cross_entropy: Softmax = softmax(Logits) over the last axis; Loss = -log of the
// label's probability (hard labels) or -sum(label * log softmax) (soft labels). Computed in a
// numerically stable way (max subtracted, log-sum-exp).
#include <cmath>

#include "framework/parallel.h"
#include "operators/common.h"
#include "operators/math/vec_math.h"

namespace loom::ops {
namespace {

Status SwceInferShape(InferShapeContext* ctx) {
  DDim logits = ctx->InputDim("Logits"), label = ctx->InputDim("Label");
  int axis = ctx->Attr<int>("axis");
  if (axis != -1 && axis != logits.size() - 1)
    return ctx->Error("only the last axis is supported (axis = -1 or ", logits.size() - 1,
                      "), got ", axis);
  if (logits.size() < 1) return ctx->Error(ctx->DescribeInput("Logits"), " must have rank >= 1");
  bool soft = ctx->Attr<bool>("soft_label");
  DataType ldt = ctx->InputDtype("Label");
  if (label.size() != logits.size())
    return ctx->Error(ctx->DescribeInput("Label"), " must have the rank of ",
                      ctx->DescribeInput("Logits"));
  for (int i = 0; i + 1 < logits.size(); ++i)
    if (logits[i] >= 0 && label[i] >= 0 && logits[i] != label[i])
      return ctx->Error(ctx->DescribeInput("Label"), " and ", ctx->DescribeInput("Logits"),
                        " disagree in dim ", i);
  int64_t last = label[label.size() - 1];
  if (soft) {
    if (ldt != ctx->InputDtype("Logits"))
      return ctx->Error("soft labels must have the dtype of Logits (",
                        DataTypeName(ctx->InputDtype("Logits")), "), got ", DataTypeName(ldt));
    if (last >= 0 && logits[logits.size() - 1] >= 0 && last != logits[logits.size() - 1])
      return ctx->Error("soft ", ctx->DescribeInput("Label"), " must match ",
                        ctx->DescribeInput("Logits"));
  } else {
    if (ldt != proto::INT64 && ldt != proto::INT32)
      return ctx->Error("hard labels must be int64 or int32, ", ctx->DescribeInput("Label"), " is ",
                        DataTypeName(ldt));
    if (last >= 0 && last != 1)
      return ctx->Error("hard ", ctx->DescribeInput("Label"), " must have last dim 1");
  }
  DDim loss = logits;
  loss[loss.size() - 1] = 1;
  ctx->ShareDimAndDtype("Logits", "Softmax");
  ctx->SetOutputDim("Loss", loss);
  ctx->SetOutputDtype("Loss", ctx->InputDtype("Logits"));
  return Status::OK();
}

template <typename T>
int64_t HardLabel(const Tensor& label, int64_t i) {
  return label.dtype() == proto::INT64 ? label.data<int64_t>()[i]
                                       : static_cast<int64_t>(label.data<int32_t>()[i]);
}

template <typename T>
Status SwceKernel(const KernelContext& ctx) {
  const Tensor& logits = ctx.Input("Logits");
  const Tensor& label = ctx.Input("Label");
  int64_t d = logits.dims()[logits.dims().size() - 1];
  int64_t rows = d ? logits.numel() / d : 0;
  bool soft = ctx.Attr<bool>("soft_label");
  int64_t ignore = ctx.Attr<int>("ignore_index");
  const T* x = logits.data<T>();
  T* sm = ctx.Output("Softmax")->mutable_data<T>(ctx.place());
  T* loss = ctx.Output("Loss")->mutable_data<T>(ctx.place());
  // Labels are checked first so that the rows can then be split over threads.
  if (!soft)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t l = HardLabel<T>(label, r);
      if (l != ignore && (l < 0 || l >= d))
        return ctx.Error("label ", l, " of row ", r, " is out of range [0, ", d, ")");
    }
  ParallelFor(rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(d, 1)),
              [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                  const T* xr = x + r * d;
                  T* sr = sm + r * d;
                  T mx, log_sum;
                  SoftmaxRow(xr, sr, d, &mx, &log_sum);
                  if (soft) {
                    const T* lr = label.data<T>() + r * d;
                    T acc = 0;
                    for (int64_t j = 0; j < d; ++j) acc -= lr[j] * (xr[j] - mx - log_sum);
                    loss[r] = acc;
                  } else {
                    int64_t l = HardLabel<T>(label, r);
                    loss[r] = l == ignore ? T(0) : -(xr[l] - mx - log_sum);
                  }
                }
              });
  return Status::OK();
}

// Logits@GRAD = (Softmax - onehot(label)) * Loss@GRAD per row (soft: Softmax - label).
template <typename T>
Status SwceGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("Logits@GRAD");
  if (!dx) return Status::OK();
  const Tensor& sm = ctx.Input("Softmax");
  const Tensor& label = ctx.Input("Label");
  const T* dloss = ctx.Input("Loss@GRAD").data<T>();
  int64_t d = sm.dims()[sm.dims().size() - 1];
  int64_t rows = d ? sm.numel() / d : 0;
  bool soft = ctx.Attr<bool>("soft_label");
  int64_t ignore = ctx.Attr<int>("ignore_index");
  const T* s = sm.data<T>();
  T* o = dx->mutable_data<T>(ctx.place());
  for (int64_t r = 0; r < rows; ++r) {
    const T* sr = s + r * d;
    T* orow = o + r * d;
    T g = dloss[r];
    if (soft) {
      const T* lr = label.data<T>() + r * d;
      T lsum = 0;
      for (int64_t j = 0; j < d; ++j) lsum += lr[j];
      for (int64_t j = 0; j < d; ++j) orow[j] = (sr[j] * lsum - lr[j]) * g;
    } else {
      int64_t l = HardLabel<T>(label, r);
      if (l == ignore) {
        std::fill(orow, orow + d, T(0));
        continue;
      }
      if (l < 0 || l >= d)
        return ctx.Error("label ", l, " of row ", r, " is out of range [0, ", d, ")");
      for (int64_t j = 0; j < d; ++j) orow[j] = sr[j] * g;
      orow[l] -= g;
    }
  }
  return Status::OK();
}

Status SwceGradInferShape(InferShapeContext* ctx) {
  ctx->ShareDimAndDtype("Softmax", "Logits@GRAD");
  return Status::OK();
}

std::vector<proto::OpDesc> SwceGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("softmax_with_cross_entropy_grad");
  op.SetInput("Softmax", fwd.Output("Softmax"));
  op.SetInput("Label", fwd.Input("Label"));
  op.SetInput("Loss@GRAD", {GradVarName(fwd.Output("Loss")[0])});
  op.SetOutput("Logits@GRAD", {GradVarName(fwd.Input("Logits")[0])});
  for (const char* a : {"soft_label", "ignore_index", "axis"}) {
    auto v = fwd.GetAttr(a);
    if (v.ok()) op.SetAttr(a, v.value());
  }
  return {g};
}

}  // namespace

LOOM_REGISTER_OP(softmax_with_cross_entropy)
    .Doc("Softmax over the last axis of Logits and the cross-entropy Loss against Label.")
    .Input("Logits", "unscaled scores [..., D]")
    .Input("Label", "hard labels int64/int32 [..., 1] or soft labels [..., D]")
    .Output("Softmax", "softmax of Logits")
    .Output("Loss", "per-row loss [..., 1]")
    .Attr<bool>("soft_label", false, "Label holds probabilities instead of class indices")
    .Attr<int>("ignore_index", -100, "hard label value whose rows get zero loss and gradient")
    .Attr<int>("axis", -1, "class axis; only the last axis is supported")
    .InferShape(SwceInferShape)
    .GradMaker(SwceGradMaker)
    .KernelDtypeFrom("Logits")
    .Kernel(Place::kCPU, proto::FP32, SwceKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SwceKernel<double>);

LOOM_REGISTER_OP(softmax_with_cross_entropy_grad)
    .Doc("Logits@GRAD = (Softmax - onehot(Label)) * Loss@GRAD.")
    .Input("Softmax", "forward Softmax")
    .Input("Label", "forward Label")
    .Input("Loss@GRAD", "gradient of Loss")
    .Output("Logits@GRAD", "gradient of Logits", false, true)
    .AttrsFrom("softmax_with_cross_entropy")
    .InferShape(SwceGradInferShape)
    .KernelDtypeFrom("Softmax")
    .Kernel(Place::kCPU, proto::FP32, SwceGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SwceGradKernel<double>);

}  // namespace loom::ops
