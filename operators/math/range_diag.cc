// Ops that build a tensor from a few numbers: range, linspace (evenly spaced values), eye and
// diag (diagonal matrices).
#include <algorithm>
#include <cmath>

#include "operators/common.h"

namespace loom::ops {
namespace {

// ---- range / linspace / eye / diag ----
template <typename T>
Status RangeKernel(const KernelContext& ctx) {
  const T start = ctx.Input("Start").data<T>()[0], end = ctx.Input("End").data<T>()[0];
  const T step = ctx.Input("Step").data<T>()[0];
  if (step == T(0)) return ctx.Error("Step is 0");
  const double n = std::ceil(static_cast<double>(end - start) / static_cast<double>(step));
  const int64_t count = n > 0 ? static_cast<int64_t>(n) : 0;
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({count}));
  T* o = out->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < count; ++i) o[i] = start + static_cast<T>(i) * step;
  return Status::OK();
}

template <typename T>
Status LinspaceKernel(const KernelContext& ctx) {
  const T start = ctx.Input("Start").data<T>()[0], stop = ctx.Input("Stop").data<T>()[0];
  const Tensor& nt = ctx.Input("Num");
  const int64_t num = nt.dtype() == proto::INT64 ? nt.data<int64_t>()[0] : nt.data<int32_t>()[0];
  if (num < 1) return ctx.Error("Num must be >= 1, got ", num);
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({num}));
  T* o = out->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < num; ++i)
    o[i] = num == 1 ? start
                    : static_cast<T>(start + (stop - start) * static_cast<double>(i) /
                                                 static_cast<double>(num - 1));
  return Status::OK();
}

Status EyeKernel(const KernelContext& ctx) {
  const int64_t rows = ctx.Attr<int64_t>("num_rows");
  int64_t cols = ctx.Attr<int64_t>("num_columns");
  if (cols < 0) cols = rows;
  if (rows < 0) return ctx.Error("num_rows must be >= 0");
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({rows, cols}));
  auto fill = [&](auto* o) {
    using T = std::remove_pointer_t<decltype(o)>;
    for (int64_t i = 0; i < rows * cols; ++i) o[i] = T(0);
    for (int64_t i = 0; i < std::min(rows, cols); ++i) o[i * cols + i] = T(1);
    return Status::OK();
  };
  switch (static_cast<DataType>(ctx.Attr<int>("dtype"))) {
    case proto::FP32: return fill(out->mutable_data<float>(ctx.place()));
    case proto::FP64: return fill(out->mutable_data<double>(ctx.place()));
    case proto::INT32: return fill(out->mutable_data<int32_t>(ctx.place()));
    case proto::INT64: return fill(out->mutable_data<int64_t>(ctx.place()));
    default: return ctx.Error("dtype is not float or int");
  }
}

template <typename T>
Status DiagKernel(const KernelContext& ctx) {
  const Tensor& d = ctx.Input("Diagonal");
  const int64_t n = d.numel();
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({n, n}));
  T* o = out->mutable_data<T>(ctx.place());
  std::fill(o, o + n * n, T(0));
  for (int64_t i = 0; i < n; ++i) o[i * n + i] = d.data<T>()[i];
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(range)
    .Doc("Out = start, start + step, ... up to (not including) end.")
    .Input("Start", "one element")
    .Input("End", "one element")
    .Input("Step", "one element")
    .Output("Out", "the values")
    .InferShape([](InferShapeContext* ctx) {
      ctx->SetOutputDim("Out", DDim({-1}));
      ctx->SetOutputDtype("Out", ctx->InputDtype("Start"));
      return Status::OK();
    })
    .Kernel(Place::kCPU, proto::FP32, RangeKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, RangeKernel<double>)
    .Kernel(Place::kCPU, proto::INT32, RangeKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, RangeKernel<int64_t>);

LOOM_REGISTER_OP(linspace)
    .Doc("Out = Num values evenly spaced from Start to Stop (both included).")
    .Input("Start", "one element")
    .Input("Stop", "one element")
    .Input("Num", "one int element")
    .Output("Out", "the values")
    .InferShape([](InferShapeContext* ctx) {
      ctx->SetOutputDim("Out", DDim({-1}));
      ctx->SetOutputDtype("Out", ctx->InputDtype("Start"));
      return Status::OK();
    })
    .Kernel(Place::kCPU, proto::FP32, LinspaceKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, LinspaceKernel<double>);

LOOM_REGISTER_OP(eye)
    .Doc("Out = the num_rows x num_columns identity (num_columns < 0: square).")
    .Output("Out", "the matrix")
    .Attr<int64_t>("num_rows", 1, "rows")
    .Attr<int64_t>("num_columns", -1, "columns; < 0: num_rows")
    .Attr<int>("dtype", proto::FP32, "DataType code of Out", ValidDtype())
    .InferShape([](InferShapeContext* ctx) {
      const int64_t r = ctx->Attr<int64_t>("num_rows"), c = ctx->Attr<int64_t>("num_columns");
      if (r < 0) return ctx->Error("num_rows must be >= 0, got ", r);
      ctx->SetOutputDim("Out", DDim({r, c < 0 ? r : c}));
      ctx->SetOutputDtype("Out", static_cast<DataType>(ctx->Attr<int>("dtype")));
      return Status::OK();
    })
    .Kernel(Place::kCPU, proto::FP32, EyeKernel)
    .Kernel(Place::kCPU, proto::FP64, EyeKernel)
    .Kernel(Place::kCPU, proto::INT32, EyeKernel)
    .Kernel(Place::kCPU, proto::INT64, EyeKernel);

LOOM_REGISTER_OP(diag)
    .Doc("Out = the square matrix with Diagonal on its diagonal.")
    .Input("Diagonal", "a vector")
    .Output("Out", "[n, n]")
    .InferShape([](InferShapeContext* ctx) {
      const int64_t n = ctx->InputDim("Diagonal").numel();
      ctx->SetOutputDim("Out", DDim({n, n}));
      ctx->SetOutputDtype("Out", ctx->InputDtype("Diagonal"));
      return Status::OK();
    })
    .Kernel(Place::kCPU, proto::FP32, DiagKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, DiagKernel<double>)
    .Kernel(Place::kCPU, proto::INT64, DiagKernel<int64_t>);

}  // namespace loom::ops
