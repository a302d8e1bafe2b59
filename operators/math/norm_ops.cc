// Ops built on L2 norms, Fluid 1.x's: cos_sim (with gradient; the cosine similarity of rows)
// and clip_by_norm (X scaled down to a largest norm).
#include <algorithm>
#include <cmath>

#include "operators/common.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

// ---- cos_sim ----
// Out[i] = <X_i, Y_i> / (|X_i| |Y_i|) over rows; Y may be one row, compared with every X row.
Status CosSimInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X"), y = ctx->InputDim("Y");
  if (x.size() < 2 || y.size() != x.size())
    return ctx->Error(ctx->DescribeInput("X"), " and ", ctx->DescribeInput("Y"),
                      " must have one rank >= 2");
  const int64_t fx = x.numel() < 0 ? -1 : x.numel() / std::max<int64_t>(x[0], 1);
  const int64_t fy = y.numel() < 0 ? -1 : y.numel() / std::max<int64_t>(y[0], 1);
  if (fx >= 0 && fy >= 0 && fx != fy)
    return ctx->Error("rows of ", ctx->DescribeInput("X"), " and ", ctx->DescribeInput("Y"),
                      " differ in width (", fx, " vs ", fy, ")");
  if (x[0] >= 0 && y[0] >= 0 && y[0] != 1 && y[0] != x[0])
    return ctx->Error(ctx->DescribeInput("Y"), " must have one row or as many as ",
                      ctx->DescribeInput("X"));
  ctx->SetOutputDim("Out", DDim({x[0], 1}));
  ctx->SetOutputDim("XNorm", DDim({x[0], 1}));
  ctx->SetOutputDim("YNorm", DDim({y[0], 1}));
  for (const char* s : {"Out", "XNorm", "YNorm"}) ctx->SetOutputDtype(s, ctx->InputDtype("X"));
  return Status::OK();
}

template <typename T>
Status CosSimKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const Tensor& yt = ctx.Input("Y");
  const int64_t rows = xt.dims()[0], yrows = yt.dims()[0];
  const int64_t w = rows > 0 ? xt.numel() / rows : 0;
  const T* x = xt.data<T>();
  const T* y = yt.data<T>();
  T* out = ctx.Output("Out")->mutable_data<T>(ctx.place());
  T* xn = ctx.Output("XNorm")->mutable_data<T>(ctx.place());
  T* yn = ctx.Output("YNorm")->mutable_data<T>(ctx.place());
  for (int64_t r = 0; r < yrows; ++r) {
    T s = 0;
    for (int64_t j = 0; j < w; ++j) s += y[r * w + j] * y[r * w + j];
    yn[r] = std::sqrt(s);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = y + (yrows == 1 ? 0 : r) * w;
    T s = 0, dot = 0;
    for (int64_t j = 0; j < w; ++j) {
      s += x[r * w + j] * x[r * w + j];
      dot += x[r * w + j] * yr[j];
    }
    xn[r] = std::sqrt(s);
    out[r] = dot / (xn[r] * yn[yrows == 1 ? 0 : r]);
  }
  return Status::OK();
}

// d out / d x = y / (|x| |y|) - out x / |x|^2 (and symmetrically for y, summed over the rows
// when Y is one row).
template <typename T>
Status CosSimGradKernel(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  Tensor* dyt = ctx.OutputOrNull("Y@GRAD");
  const Tensor& xt = ctx.Input("X");
  const Tensor& yt = ctx.Input("Y");
  const int64_t rows = xt.dims()[0], yrows = yt.dims()[0];
  const int64_t w = rows > 0 ? xt.numel() / rows : 0;
  const T* x = xt.data<T>();
  const T* y = yt.data<T>();
  const T* out = ctx.Input("Out").data<T>();
  const T* xn = ctx.Input("XNorm").data<T>();
  const T* yn = ctx.Input("YNorm").data<T>();
  const T* g = ctx.Input("Out@GRAD").data<T>();
  T* dx = dxt ? dxt->mutable_data<T>(ctx.place()) : nullptr;
  T* dy = dyt ? dyt->mutable_data<T>(ctx.place()) : nullptr;
  if (dy) std::fill(dy, dy + yt.numel(), T(0));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t yr = yrows == 1 ? 0 : r;
    const T nx = xn[r], ny = yn[yr];
    for (int64_t j = 0; j < w; ++j) {
      const T xv = x[r * w + j], yv = y[yr * w + j];
      if (dx) dx[r * w + j] = g[r] * (yv / (nx * ny) - out[r] * xv / (nx * nx));
      if (dy) dy[yr * w + j] += g[r] * (xv / (nx * ny) - out[r] * yv / (ny * ny));
    }
  }
  return Status::OK();
}

// ---- clip_by_norm ----
// A SelectedRows X: its rows merged, then scaled by the norm of the merged rows (the norm of
// the dense gradient it stands for); Out is a SelectedRows.
template <typename T>
Status ClipByNormKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(bool sparse, ApplyToMergedRows(ctx, [&](Tensor* v) {
                          T* x = v->data<T>();
                          const int64_t n = v->numel();
                          double s = 0;
                          for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
                          const double norm = std::sqrt(s), max_norm = ctx.Attr<float>("max_norm");
                          if (norm > max_norm)
                            for (int64_t i = 0; i < n; ++i)
                              x[i] = x[i] * static_cast<T>(max_norm / norm);
                          return Status::OK();
                        }));
  if (sparse) return Status::OK();
  const Tensor& xt = ctx.Input("X");
  const T* x = xt.data<T>();
  const int64_t n = xt.numel();
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  const double norm = std::sqrt(s), max_norm = ctx.Attr<float>("max_norm");
  const T scale = norm > max_norm ? static_cast<T>(max_norm / norm) : T(1);
  T* o = ctx.Output("Out")->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] * scale;
  return Status::OK();
}

#define LOOM_FLOAT_KERNELS(fn) \
  Kernel(Place::kCPU, proto::FP32, fn<float>).Kernel(Place::kCPU, proto::FP64, fn<double>)

}  // namespace

LOOM_REGISTER_OP(cos_sim)
    .Doc(
        "Out[i] = <X_i, Y_i> / (|X_i| |Y_i|) over rows (Y may be a single row compared with "
        "every row of X); XNorm, YNorm are the row norms.")
    .Input("X", "[N, ...]")
    .Input("Y", "[N or 1, ...]")
    .Output("Out", "[N, 1]")
    .Output("XNorm", "[N, 1]")
    .Output("YNorm", "[N or 1, 1]")
    .InferShape(CosSimInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          nn::MakeGradOp(fwd, {"X", "Y", "Out", "XNorm", "YNorm", "Out@GRAD"}, {"X", "Y"})};
    })
    .LOOM_FLOAT_KERNELS(CosSimKernel);

LOOM_REGISTER_OP(cos_sim_grad)
    .Doc("X@GRAD and Y@GRAD of cos_sim.")
    .Input("X", "forward X")
    .Input("Y", "forward Y")
    .Input("Out", "forward Out")
    .Input("XNorm", "forward XNorm")
    .Input("YNorm", "forward YNorm")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("Y@GRAD", "gradient of Y", false, true)
    .InferShape(GradInferShape)
    .LOOM_FLOAT_KERNELS(CosSimGradKernel);

LOOM_REGISTER_OP(clip_by_norm)
    .Doc(
        "Out = X * max_norm / ||X|| when the L2 norm ||X|| exceeds max_norm, else X (a "
        "SelectedRows X: its merged rows, scaled by their norm)")
    .Input("X", "input")
    .Output("Out", "X scaled to a norm of at most max_norm")
    .Attr<float>("max_norm", 1.0f, "the largest norm kept")
    .InferVarType(SameVarType)
    .InferShape(SameShapeInferShape)
    .LOOM_FLOAT_KERNELS(ClipByNormKernel);

}  // namespace loom::ops
