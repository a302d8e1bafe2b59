// batch_norm over the channel axis (1) of NCHW data ([N, C] or [N, C, d1, ...]).
// Training: normalizes with the batch statistics, returns them in SavedMean and SavedVariance
// (the latter as 1 / sqrt(var + epsilon)) and updates the moving statistics:
// MeanOut = momentum * Mean + (1 - momentum) * batch_mean (likewise the biased batch variance).
// MeanOut / VarianceOut are normally the same variables as Mean / Variance (updated in place).
// Inference (is_test): normalizes with Mean and Variance and leaves them unchanged.
#include <cmath>
#include <vector>

#include "framework/parallel.h"
#include "operators/math/vec_math.h"
#include "operators/nn/batch_norm_geom.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

Status BatchNormInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  if (x.size() < 2 || x.size() > 5)
    return ctx->Error(ctx->DescribeInput("X"), " must have rank 2 to 5 ([N, C] or [N, C, H, W])");
  DataType dt = ctx->InputDtype("X");
  int64_t c = x[1];
  for (const char* slot : {"Scale", "Bias", "Mean", "Variance"}) {
    DDim d = ctx->InputDim(slot);
    if (d.size() != 1) return ctx->Error(ctx->DescribeInput(slot), " must be 1-D [C]");
    if (c >= 0 && d[0] >= 0 && d[0] != c)
      return ctx->Error(ctx->DescribeInput(slot), " must have one entry per channel of ",
                        ctx->DescribeInput("X"), " (", c, ")");
    if (ctx->InputDtype(slot) != dt)
      return ctx->Error(ctx->DescribeInput(slot), " is ", DataTypeName(ctx->InputDtype(slot)),
                        " but ", ctx->DescribeInput("X"), " is ", DataTypeName(dt));
  }
  ctx->ShareDimAndDtype("X", "Y");
  for (const char* slot : {"MeanOut", "VarianceOut", "SavedMean", "SavedVariance"}) {
    if (!ctx->HasOutput(slot)) continue;
    ctx->SetOutputDim(slot, DDim{c});
    ctx->SetOutputDtype(slot, dt);
  }
  return Status::OK();
}

template <typename T>
Status BatchNormKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  BnGeom g = GeomOf(xt.dims());
  const T* x = xt.data<T>();
  const T* scale = ctx.Input("Scale").data<T>();
  const T* bias = ctx.Input("Bias").data<T>();
  const T* mean_in = ctx.Input("Mean").data<T>();
  const T* var_in = ctx.Input("Variance").data<T>();
  const T eps = static_cast<T>(ctx.Attr<float>("epsilon"));
  const T momentum = static_cast<T>(ctx.Attr<float>("momentum"));
  const bool is_test = ctx.Attr<bool>("is_test");
  const int64_t count = g.n * g.inner;

  // Statistics used for normalization.
  std::vector<T> mean(g.c), inv_std(g.c);
  if (is_test) {
    for (int64_t ch = 0; ch < g.c; ++ch) {
      mean[ch] = mean_in[ch];
      inv_std[ch] = T(1) / std::sqrt(var_in[ch] + eps);
    }
  } else {
    if (count == 0)
      return ctx.Error("training-mode batch_norm needs a non-empty batch, X has dims ",
                       xt.dims().ToString());
    std::vector<T> var(g.c);
    ParallelFor(g.c, 1, [&](int64_t begin, int64_t end) {
      for (int64_t ch = begin; ch < end; ++ch) {
        T sum = 0;
        for (int64_t s = 0; s < g.n; ++s) sum += SumOf(x + (s * g.c + ch) * g.inner, g.inner);
        const T mu = sum / static_cast<T>(count);
        T sq = 0;
        for (int64_t s = 0; s < g.n; ++s)
          sq += SumSqDiff(x + (s * g.c + ch) * g.inner, g.inner, mu);
        mean[ch] = mu;
        var[ch] = sq / static_cast<T>(count);
        inv_std[ch] = T(1) / std::sqrt(var[ch] + eps);
      }
    });
    // Moving statistics (the outputs may alias the inputs: element-wise read-then-write).
    if (Tensor* mo = ctx.OutputOrNull("MeanOut")) {
      T* m = mo->mutable_data<T>(ctx.place());
      for (int64_t ch = 0; ch < g.c; ++ch)
        m[ch] = momentum * mean_in[ch] + (T(1) - momentum) * mean[ch];
    }
    if (Tensor* vo = ctx.OutputOrNull("VarianceOut")) {
      T* v = vo->mutable_data<T>(ctx.place());
      for (int64_t ch = 0; ch < g.c; ++ch)
        v[ch] = momentum * var_in[ch] + (T(1) - momentum) * var[ch];
    }
  }
  if (is_test) {
    // Moving statistics pass through unchanged (a copy unless they alias the inputs).
    for (auto [in, out] : {std::pair{mean_in, "MeanOut"}, std::pair{var_in, "VarianceOut"}}) {
      Tensor* t = ctx.OutputOrNull(out);
      if (!t) continue;
      T* o = t->mutable_data<T>(ctx.place());
      if (o != in) std::copy(in, in + g.c, o);
    }
  }
  if (Tensor* sm = ctx.OutputOrNull("SavedMean"))
    std::copy(mean.begin(), mean.end(), sm->mutable_data<T>(ctx.place()));
  if (Tensor* sv = ctx.OutputOrNull("SavedVariance"))
    std::copy(inv_std.begin(), inv_std.end(), sv->mutable_data<T>(ctx.place()));

  T* y = ctx.Output("Y")->mutable_data<T>(ctx.place());
  ParallelFor(g.n * g.c, std::max<int64_t>(1, 16384 / std::max<int64_t>(g.inner, 1)),
              [&](int64_t begin, int64_t end) {
                for (int64_t sc = begin; sc < end; ++sc) {
                  const int64_t ch = sc % g.c, off = sc * g.inner;
                  const T a = scale[ch] * inv_std[ch];
                  const T b = bias[ch] - mean[ch] * a;
                  for (int64_t i = 0; i < g.inner; ++i) y[off + i] = x[off + i] * a + b;
                }
              });
  return Status::OK();
}

// With x̂ = (x - mean) * inv_std and m = N * inner elements per channel:
// Bias@GRAD = Σ dy, Scale@GRAD = Σ dy * x̂,
// X@GRAD = scale * inv_std * (dy - (Bias@GRAD + x̂ * Scale@GRAD) / m) in training;
// X@GRAD = scale * inv_std * dy with is_test (the statistics are constants then).
template <typename T>
Status BatchNormGradKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  BnGeom g = GeomOf(xt.dims());
  const T* x = xt.data<T>();
  const T* scale = ctx.Input("Scale").data<T>();
  const T* mean = ctx.Input("SavedMean").data<T>();
  const T* inv_std = ctx.Input("SavedVariance").data<T>();
  const T* dy = ctx.Input("Y@GRAD").data<T>();
  const bool is_test = ctx.Attr<bool>("is_test");
  const int64_t count = g.n * g.inner;

  std::vector<T> dbias(g.c, T(0)), dscale(g.c, T(0));
  ParallelFor(g.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t ch = begin; ch < end; ++ch) {
      T sb = 0, ss = 0;
      for (int64_t s = 0; s < g.n; ++s) {
        const int64_t off = (s * g.c + ch) * g.inner;
        T b, d;
        SumAndDotDiff(dy + off, x + off, g.inner, mean[ch], &b, &d);
        sb += b;
        ss += d;
      }
      dbias[ch] = sb;
      dscale[ch] = ss * inv_std[ch];
    }
  });
  if (Tensor* t = ctx.OutputOrNull("Bias@GRAD"))
    std::copy(dbias.begin(), dbias.end(), t->mutable_data<T>(ctx.place()));
  if (Tensor* t = ctx.OutputOrNull("Scale@GRAD"))
    std::copy(dscale.begin(), dscale.end(), t->mutable_data<T>(ctx.place()));
  if (Tensor* t = ctx.OutputOrNull("X@GRAD")) {
    T* dx = t->mutable_data<T>(ctx.place());
    const T inv_m = T(1) / static_cast<T>(std::max<int64_t>(count, 1));
    ParallelFor(g.n * g.c, std::max<int64_t>(1, 16384 / std::max<int64_t>(g.inner, 1)),
                [&](int64_t begin, int64_t end) {
                  for (int64_t sc = begin; sc < end; ++sc) {
                    const int64_t ch = sc % g.c, off = sc * g.inner;
                    const T a = scale[ch] * inv_std[ch];
                    if (is_test) {
                      for (int64_t i = 0; i < g.inner; ++i) dx[off + i] = a * dy[off + i];
                      continue;
                    }
                    // dx = a * dy - a * inv_m * (dbias + (x - mean) * inv_std * dscale) = a*dy +
                    // k*x + c
                    const T kx = -a * inv_m * inv_std[ch] * dscale[ch];
                    const T c0 = -a * inv_m * dbias[ch] - kx * mean[ch];
                    for (int64_t i = 0; i < g.inner; ++i)
                      dx[off + i] = a * dy[off + i] + kx * x[off + i] + c0;
                  }
                });
  }
  return Status::OK();
}

Status BatchNormGradInferShape(InferShapeContext* ctx) {
  if (ctx->HasOutput("X@GRAD")) ctx->ShareDimAndDtype("X", "X@GRAD");
  if (ctx->HasOutput("Scale@GRAD")) ctx->ShareDimAndDtype("Scale", "Scale@GRAD");
  if (ctx->HasOutput("Bias@GRAD")) {
    ctx->SetOutputDim("Bias@GRAD", ctx->InputDim("Scale"));
    ctx->SetOutputDtype("Bias@GRAD", ctx->InputDtype("Scale"));
  }
  return Status::OK();
}

std::vector<proto::OpDesc> BatchNormGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(fwd, {"X", "Scale", "SavedMean", "SavedVariance", "Y@GRAD"},
                         {"X", "Scale", "Bias"})};
}

std::function<Status(const std::string&)> NchwOnly() {
  return [](const std::string& v) {
    return v == "NCHW" ? Status::OK()
                       : InvalidArgument("layout '", v, "' is not supported; only 'NCHW' is");
  };
}

}  // namespace

LOOM_REGISTER_OP(batch_norm)
    .Doc(
        "Y = (X - mean) / sqrt(var + epsilon) * Scale + Bias per channel (axis 1). Training "
        "uses the batch statistics and updates the moving Mean / Variance with momentum; "
        "is_test uses the moving statistics.")
    .Input("X", "input [N, C] or [N, C, H, W]")
    .Input("Scale", "per-channel scale [C]")
    .Input("Bias", "per-channel bias [C]")
    .Input("Mean", "moving mean [C]")
    .Input("Variance", "moving variance [C]")
    .Output("Y", "normalized output, same dims as X")
    .Output("MeanOut", "updated moving mean (the Mean variable, updated in place)")
    .Output("VarianceOut", "updated moving variance (the Variance variable, updated in place)")
    .Output("SavedMean", "batch mean [C] (the moving mean with is_test)")
    .Output("SavedVariance", "batch 1 / sqrt(var + epsilon) [C], for the gradient")
    .Attr<float>("momentum", 0.9f, "weight of the old moving statistics", nn::FloatIn(0, 1))
    .Attr<float>("epsilon", 1e-5f, "added to the variance", nn::PositiveFloat())
    .Attr<bool>("is_test", false, "normalize with the moving statistics and leave them unchanged")
    .Attr<std::string>("data_layout", "NCHW", "only 'NCHW'", NchwOnly())
    .InferShape(BatchNormInferShape)
    .GradMaker(BatchNormGradMaker)
    .Kernel(Place::kCPU, proto::FP32, BatchNormKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, BatchNormKernel<double>);

LOOM_REGISTER_OP(batch_norm_grad)
    .Doc("X@GRAD, Scale@GRAD and Bias@GRAD of batch_norm from Y@GRAD.")
    .Input("X", "forward X")
    .Input("Scale", "forward Scale")
    .Input("SavedMean", "forward SavedMean")
    .Input("SavedVariance", "forward SavedVariance (inverse std)")
    .Input("Y@GRAD", "gradient of Y")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("Scale@GRAD", "gradient of Scale", false, true)
    .Output("Bias@GRAD", "gradient of Bias", false, true)
    .AttrsFrom("batch_norm")
    .InferShape(BatchNormGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, BatchNormGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, BatchNormGradKernel<double>);

}  // namespace loom::ops
