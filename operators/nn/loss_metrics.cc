// Losses and metrics: cross_entropy, square_error_cost, top_k, arg_max, accuracy.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "operators/common.h"

namespace loom::ops {
namespace {

int64_t LabelAt(const Tensor& label, int64_t i) {
  return label.dtype() == proto::INT64 ? label.data<int64_t>()[i]
                                       : static_cast<int64_t>(label.data<int32_t>()[i]);
}

// ---------------------------------------------------------------- cross_entropy

Status CrossEntropyInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X"), label = ctx->InputDim("Label");
  if (x.size() < 1 || label.size() != x.size())
    return ctx->Error(ctx->DescribeInput("Label"), " must have the rank of ",
                      ctx->DescribeInput("X"));
  bool soft = ctx->Attr<bool>("soft_label");
  DataType ldt = ctx->InputDtype("Label");
  if (soft ? ldt != ctx->InputDtype("X") : (ldt != proto::INT64 && ldt != proto::INT32))
    return ctx->Error(
        soft ? "soft labels must have the dtype of X, " : "hard labels must be int64 or int32, ",
        ctx->DescribeInput("Label"), " is ", DataTypeName(ldt));
  int64_t last = label[label.size() - 1];
  if (!soft && last >= 0 && last != 1)
    return ctx->Error("hard ", ctx->DescribeInput("Label"), " must have last dim 1");
  DDim y = x;
  y[y.size() - 1] = 1;
  ctx->SetOutputDim("Y", y);
  ctx->SetOutputDtype("Y", ctx->InputDtype("X"));
  return Status::OK();
}

template <typename T>
Status CrossEntropyKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& label = ctx.Input("Label");
  int64_t d = x.dims()[x.dims().size() - 1], rows = d ? x.numel() / d : 0;
  bool soft = ctx.Attr<bool>("soft_label");
  int64_t ignore = ctx.Attr<int>("ignore_index");
  const T* p = x.data<T>();
  T* y = ctx.Output("Y")->mutable_data<T>(ctx.place());
  for (int64_t r = 0; r < rows; ++r) {
    if (soft) {
      T acc = 0;
      for (int64_t j = 0; j < d; ++j) acc -= label.data<T>()[r * d + j] * std::log(p[r * d + j]);
      y[r] = acc;
      continue;
    }
    int64_t l = LabelAt(label, r);
    if (l == ignore) {
      y[r] = 0;
      continue;
    }
    if (l < 0 || l >= d)
      return ctx.Error("label ", l, " of row ", r, " is out of range [0, ", d, ")");
    y[r] = -std::log(p[r * d + l]);
  }
  return Status::OK();
}

template <typename T>
Status CrossEntropyGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& x = ctx.Input("X");
  const Tensor& label = ctx.Input("Label");
  const T* g = ctx.Input("Y@GRAD").data<T>();
  int64_t d = x.dims()[x.dims().size() - 1], rows = d ? x.numel() / d : 0;
  bool soft = ctx.Attr<bool>("soft_label");
  int64_t ignore = ctx.Attr<int>("ignore_index");
  const T* p = x.data<T>();
  T* o = dx->mutable_data<T>(ctx.place());
  std::fill(o, o + x.numel(), T(0));
  for (int64_t r = 0; r < rows; ++r) {
    if (soft) {
      for (int64_t j = 0; j < d; ++j)
        o[r * d + j] = -g[r] * label.data<T>()[r * d + j] / p[r * d + j];
      continue;
    }
    int64_t l = LabelAt(label, r);
    if (l == ignore) continue;
    if (l < 0 || l >= d)
      return ctx.Error("label ", l, " of row ", r, " is out of range [0, ", d, ")");
    o[r * d + l] = -g[r] / p[r * d + l];
  }
  return Status::OK();
}

std::vector<proto::OpDesc> CrossEntropyGradMaker(const OpDesc& fwd) {
  proto::OpDesc g = MakeDefaultGradOp(fwd);
  OpDesc op(&g);
  op.RemoveInput("Y");
  op.RemoveOutput("Label@GRAD");
  return {g};
}

// ---------------------------------------------------------------- square_error_cost

Status SquareErrorInferShape(InferShapeContext* ctx) {
  if (!DimsCompatible(ctx->InputDim("X"), ctx->InputDim("Y")))
    return ctx->Error(ctx->DescribeInput("X"), " and ", ctx->DescribeInput("Y"),
                      " must have the same dims");
  ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

template <typename T>
Status SquareErrorKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const T* a = x.data<T>();
  const T* b = ctx.Input("Y").data<T>();
  T* o = ctx.Output("Out")->mutable_data<T>(ctx.place());
  for (int64_t i = 0, i_end = x.numel(); i < i_end; ++i) o[i] = (a[i] - b[i]) * (a[i] - b[i]);
  return Status::OK();
}

template <typename T>
Status SquareErrorGradKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const T* a = x.data<T>();
  const T* b = ctx.Input("Y").data<T>();
  const T* g = ctx.Input("Out@GRAD").data<T>();
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  Tensor* dy = ctx.OutputOrNull("Y@GRAD");
  T* ox = dx ? dx->mutable_data<T>(ctx.place()) : nullptr;
  T* oy = dy ? dy->mutable_data<T>(ctx.place()) : nullptr;
  for (int64_t i = 0, i_end = x.numel(); i < i_end; ++i) {
    T v = T(2) * (a[i] - b[i]) * g[i];
    if (ox) ox[i] = v;
    if (oy) oy[i] = -v;
  }
  return Status::OK();
}

std::vector<proto::OpDesc> SquareErrorGradMaker(const OpDesc& fwd) {
  proto::OpDesc g = MakeDefaultGradOp(fwd);
  OpDesc(&g).RemoveInput("Out");
  return {g};
}

// ---------------------------------------------------------------- top_k, arg_max, accuracy

Status TopKInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  int k = ctx->Attr<int>("k");
  if (x.size() < 1) return ctx->Error(ctx->DescribeInput("X"), " must have rank >= 1");
  int64_t d = x[x.size() - 1];
  if (d >= 0 && k > d)
    return ctx->Error("k = ", k, " exceeds the last dim of ", ctx->DescribeInput("X"));
  DDim out = x;
  out[out.size() - 1] = k;
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  ctx->SetOutputDim("Indices", out);
  ctx->SetOutputDtype("Indices", proto::INT64);
  return Status::OK();
}

template <typename T>
Status TopKKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  int64_t d = x.dims()[x.dims().size() - 1], rows = d ? x.numel() / d : 0;
  int k = ctx.Attr<int>("k");
  const T* in = x.data<T>();
  T* out = ctx.Output("Out")->mutable_data<T>(ctx.place());
  int64_t* idx = ctx.Output("Indices")->mutable_data<int64_t>(ctx.place());
  std::vector<int64_t> order(d);
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = in + r * d;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [xr](int64_t a, int64_t b) {
      return xr[a] > xr[b] || (xr[a] == xr[b] && a < b);
    });
    for (int j = 0; j < k; ++j) {
      out[r * k + j] = xr[order[j]];
      idx[r * k + j] = order[j];
    }
  }
  return Status::OK();
}

template <typename T>
Status TopKGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& x = ctx.Input("X");
  const Tensor& idx = ctx.Input("Indices");
  int64_t d = x.dims()[x.dims().size() - 1], rows = d ? x.numel() / d : 0;
  int64_t k = idx.dims()[idx.dims().size() - 1];
  const T* g = ctx.Input("Out@GRAD").data<T>();
  T* o = dx->mutable_data<T>(ctx.place());
  std::fill(o, o + x.numel(), T(0));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) o[r * d + idx.data<int64_t>()[r * k + j]] += g[r * k + j];
  return Status::OK();
}

std::vector<proto::OpDesc> TopKGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("top_k_grad");
  op.SetInput("X", fwd.Input("X"));
  op.SetInput("Indices", fwd.Output("Indices"));
  op.SetInput("Out@GRAD", {GradVarName(fwd.Output("Out")[0])});
  op.SetOutput("X@GRAD", {GradVarName(fwd.Input("X")[0])});
  return {g};
}

Status ArgMaxInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  int axis = ctx->Attr<int>("axis");
  int a = axis < 0 ? axis + x.size() : axis;
  if (a < 0 || a >= x.size())
    return ctx->Error("axis ", axis, " is out of range for ", ctx->DescribeInput("X"));
  DDim out;
  for (int i = 0; i < x.size(); ++i)
    if (i != a) out.push_back(x[i]);
  if (out.size() == 0) out.push_back(1);
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", proto::INT64);
  return Status::OK();
}

template <typename T>
Status ArgMaxKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  int axis = ctx.Attr<int>("axis");
  int a = axis < 0 ? axis + x.dims().size() : axis;
  int64_t pre = x.dims().product(0, a), n = x.dims()[a],
          post = x.dims().product(a + 1, x.dims().size());
  const T* in = x.data<T>();
  int64_t* o = ctx.Output("Out")->mutable_data<int64_t>(ctx.place());
  for (int64_t i = 0; i < pre; ++i)
    for (int64_t k = 0; k < post; ++k) {
      int64_t best = 0;
      for (int64_t j = 1; j < n; ++j)
        if (in[(i * n + j) * post + k] > in[(i * n + best) * post + k]) best = j;
      o[i * post + k] = best;
    }
  return Status::OK();
}

Status AccuracyInferShape(InferShapeContext* ctx) {
  DDim idx = ctx->InputDim("Indices"), label = ctx->InputDim("Label");
  if (idx.size() != 2 || label.size() != 2 || (label[1] >= 0 && label[1] != 1) ||
      (idx[0] >= 0 && label[0] >= 0 && idx[0] != label[0]))
    return ctx->Error(ctx->DescribeInput("Indices"), " must be [N, k] and ",
                      ctx->DescribeInput("Label"), " [N, 1]");
  ctx->SetOutputDim("Accuracy", DDim{1});
  ctx->SetOutputDtype("Accuracy", proto::FP32);
  ctx->SetOutputDim("Correct", DDim{1});
  ctx->SetOutputDtype("Correct", proto::INT32);
  ctx->SetOutputDim("Total", DDim{1});
  ctx->SetOutputDtype("Total", proto::INT32);
  return Status::OK();
}

Status AccuracyKernel(const KernelContext& ctx) {
  const Tensor& idx = ctx.Input("Indices");
  const Tensor& label = ctx.Input("Label");
  int64_t n = idx.dims()[0], k = idx.dims()[1];
  int32_t correct = 0;
  for (int64_t r = 0; r < n; ++r) {
    int64_t l = LabelAt(label, r);
    for (int64_t j = 0; j < k; ++j)
      if (idx.data<int64_t>()[r * k + j] == l) {
        ++correct;
        break;
      }
  }
  ctx.Output("Accuracy")->mutable_data<float>(ctx.place())[0] =
      n ? static_cast<float>(correct) / static_cast<float>(n) : 0.0f;
  ctx.Output("Correct")->mutable_data<int32_t>(ctx.place())[0] = correct;
  ctx.Output("Total")->mutable_data<int32_t>(ctx.place())[0] = static_cast<int32_t>(n);
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(cross_entropy)
    .Doc(
        "Y = -log(X[label]) per row (hard labels) or -sum(Label * log(X)) (soft labels); X holds "
        "probabilities.")
    .Input("X", "probabilities [..., D]")
    .Input("Label", "int64/int32 [..., 1] or soft labels [..., D]")
    .Output("Y", "loss [..., 1]")
    .Attr<bool>("soft_label", false, "Label holds probabilities")
    .Attr<int>("ignore_index", -100, "hard label whose rows get zero loss")
    .InferShape(CrossEntropyInferShape)
    .GradMaker(CrossEntropyGradMaker)
    .KernelDtypeFrom("X")
    .Kernel(Place::kCPU, proto::FP32, CrossEntropyKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, CrossEntropyKernel<double>);

LOOM_REGISTER_OP(cross_entropy_grad)
    .Doc("gradient of cross_entropy")
    .Input("X", "forward X")
    .Input("Label", "forward Label")
    .Input("Y@GRAD", "gradient of Y")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("cross_entropy")
    .InferShape(GradInferShape)
    .KernelDtypeFrom("X")
    .Kernel(Place::kCPU, proto::FP32, CrossEntropyGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, CrossEntropyGradKernel<double>);

LOOM_REGISTER_OP(square_error_cost)
    .Doc("Out = (X - Y)^2 element-wise.")
    .Input("X", "prediction")
    .Input("Y", "target, same dims")
    .Output("Out", "squared error")
    .InferShape(SquareErrorInferShape)
    .GradMaker(SquareErrorGradMaker)
    .Kernel(Place::kCPU, proto::FP32, SquareErrorKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SquareErrorKernel<double>);

LOOM_REGISTER_OP(square_error_cost_grad)
    .Doc("X@GRAD = 2 (X - Y) g, Y@GRAD = -X@GRAD.")
    .Input("X", "forward X")
    .Input("Y", "forward Y")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("Y@GRAD", "gradient of Y", false, true)
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, SquareErrorGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SquareErrorGradKernel<double>);

LOOM_REGISTER_OP(top_k)
    .Doc("The k largest values of the last axis and their indices (ties: lower index first).")
    .Input("X", "input [..., D]")
    .Output("Out", "values [..., k]")
    .Output("Indices", "int64 indices [..., k]")
    .Attr<int>("k", 1, "how many", Positive("k"))
    .InferShape(TopKInferShape)
    .GradMaker(TopKGradMaker)
    .Kernel(Place::kCPU, proto::FP32, TopKKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, TopKKernel<double>)
    .Kernel(Place::kCPU, proto::INT64, TopKKernel<int64_t>);

LOOM_REGISTER_OP(top_k_grad)
    .Doc("X@GRAD scatters Out@GRAD back to the chosen indices.")
    .Input("X", "forward X")
    .Input("Indices", "forward Indices")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, TopKGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, TopKGradKernel<double>);

LOOM_REGISTER_OP(arg_max)
    .Doc("Index of the largest element along axis (first one on ties), int64.")
    .Input("X", "input")
    .Output("Out", "int64 indices; X's dims without axis")
    .Attr<int>("axis", -1, "axis to search (negative counts from the end)")
    .InferShape(ArgMaxInferShape)
    .Kernel(Place::kCPU, proto::FP32, ArgMaxKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, ArgMaxKernel<double>)
    .Kernel(Place::kCPU, proto::INT64, ArgMaxKernel<int64_t>);

LOOM_REGISTER_OP(accuracy)
    .Doc("Fraction of rows whose Label is among the top-k Indices.")
    .Input("Out", "top-k values [N, k] (unused but kept for Fluid compatibility)")
    .Input("Indices", "top-k indices int64 [N, k]")
    .Input("Label", "labels int64/int32 [N, 1]")
    .Output("Accuracy", "float32 [1]")
    .Output("Correct", "int32 [1]")
    .Output("Total", "int32 [1]")
    .InferShape(AccuracyInferShape)
    .KernelDtypeFrom("Indices")
    .Kernel(Place::kCPU, proto::INT64, AccuracyKernel);

}  // namespace loom::ops
