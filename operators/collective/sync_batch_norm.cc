// sync_batch_norm: batch_norm whose training statistics cover the batches of every rank of the
// communicator (Fluid's BuildStrategy.sync_batch_norm). The data-parallel compile swaps it in
// for training-mode batch_norm ops; inputs, outputs and attributes are batch_norm's plus Comm
// (and, for the gradient, the rank's sample weight). Per channel, over M = the rows of all
// ranks times H * W:
//   forward:  allreduce of (Σ x, count), then of Σ (x - mean)^2: the full batch's mean and
//             biased variance, exactly as one batch_norm over the concatenated batch;
//   backward: Scale@GRAD = Σ dy * x̂ and Bias@GRAD = Σ dy over this rank's rows (the
//             data-parallel allreduce then weighs them like any gradient); X@GRAD needs the
//             sums of every rank's dy, weighted as the ranks' losses are (Weight = this
//             rank's share w of the batch; 1 when absent):
//             X@GRAD = scale * inv_std * (dy - (S_dy + x̂ * S_dyx̂) / (M * w)),
//             S = the allreduced sums of w * Σ dy and w * Σ dy * x̂.
// With one rank it is batch_norm. CPU kernels; the collectives run on the kernel's thread.
#include <cmath>
#include <vector>

#include "operators/collective/comm.h"
#include "operators/nn/batch_norm_geom.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

using collective::Communicator;

template <typename T>
collective::DataType CollectiveTypeOf() {
  return std::is_same_v<T, double> ? collective::DataType::kFloat64
                                   : collective::DataType::kFloat32;
}

template <typename T>
Status AllReduceSum(const KernelContext& ctx, std::vector<T>* buf) {
  LOOM_ASSIGN_OR_RETURN(Communicator * comm, CommOf(ctx));
  return comm
      ->AllReduce(buf->data(), buf->data(), buf->size(), CollectiveTypeOf<T>(),
                  collective::ReduceOp::kSum)
      .Wait()
      .WithContext(ctx.Where());
}

Status SyncBatchNormInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  if (x.size() < 2 || x.size() > 5)
    return ctx->Error(ctx->DescribeInput("X"), " must have rank 2 to 5 ([N, C] or [N, C, H, W])");
  const int64_t c = x[1];
  for (const char* slot : {"Scale", "Bias", "Mean", "Variance"}) {
    DDim d = ctx->InputDim(slot);
    if (d.size() != 1 || (c >= 0 && d[0] >= 0 && d[0] != c))
      return ctx->Error(ctx->DescribeInput(slot), " must be [C] with C = ", c);
    if (ctx->InputDtype(slot) != ctx->InputDtype("X"))
      return ctx->Error(ctx->DescribeInput(slot), " must have the dtype of X");
  }
  ctx->ShareDimAndDtype("X", "Y");
  for (const char* slot : {"MeanOut", "VarianceOut", "SavedMean", "SavedVariance"}) {
    if (!ctx->HasOutput(slot)) continue;
    ctx->SetOutputDim(slot, DDim{c});
    ctx->SetOutputDtype(slot, ctx->InputDtype("X"));
  }
  return Status::OK();
}

template <typename T>
Status SyncBatchNormKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const BnGeom g = GeomOf(xt.dims());
  const T* x = xt.data<T>();
  const T* scale = ctx.Input("Scale").data<T>();
  const T* bias = ctx.Input("Bias").data<T>();
  const T* mean_in = ctx.Input("Mean").data<T>();
  const T* var_in = ctx.Input("Variance").data<T>();
  const double eps = ctx.Attr<float>("epsilon");
  const double momentum = ctx.Attr<float>("momentum");
  const bool is_test = ctx.Attr<bool>("is_test");
  std::vector<T> mean(g.c), inv_std(g.c);
  if (is_test) {
    for (int64_t ch = 0; ch < g.c; ++ch) {
      mean[ch] = mean_in[ch];
      inv_std[ch] = static_cast<T>(1.0 / std::sqrt(var_in[ch] + eps));
    }
    for (auto [in, out] : {std::pair{mean_in, "MeanOut"}, std::pair{var_in, "VarianceOut"}}) {
      Tensor* t = ctx.OutputOrNull(out);
      if (!t) continue;
      T* o = t->mutable_data<T>(ctx.place());
      if (o != in) std::copy(in, in + g.c, o);
    }
  } else {
    // Σ x per channel and this rank's element count, over every rank.
    std::vector<T> sums(g.c + 1, T(0));
    for (int64_t s = 0; s < g.n; ++s)
      for (int64_t ch = 0; ch < g.c; ++ch) {
        const T* p = x + (s * g.c + ch) * g.inner;
        for (int64_t i = 0; i < g.inner; ++i) sums[ch] += p[i];
      }
    sums[g.c] = static_cast<T>(g.n * g.inner);
    LOOM_RETURN_IF_ERROR(AllReduceSum(ctx, &sums));
    const T m = sums[g.c];
    if (!(m > 0))
      return ctx.Error("training-mode sync_batch_norm needs a non-empty batch over the ranks");
    for (int64_t ch = 0; ch < g.c; ++ch) mean[ch] = sums[ch] / m;
    std::vector<T> sq(g.c, T(0));
    for (int64_t s = 0; s < g.n; ++s)
      for (int64_t ch = 0; ch < g.c; ++ch) {
        const T* p = x + (s * g.c + ch) * g.inner;
        for (int64_t i = 0; i < g.inner; ++i) sq[ch] += (p[i] - mean[ch]) * (p[i] - mean[ch]);
      }
    LOOM_RETURN_IF_ERROR(AllReduceSum(ctx, &sq));
    std::vector<T> var(g.c);
    for (int64_t ch = 0; ch < g.c; ++ch) {
      var[ch] = sq[ch] / m;
      inv_std[ch] = static_cast<T>(1.0 / std::sqrt(var[ch] + eps));
    }
    // The outputs may alias the inputs: element-wise read-then-write.
    if (Tensor* mo = ctx.OutputOrNull("MeanOut")) {
      T* o = mo->mutable_data<T>(ctx.place());
      for (int64_t ch = 0; ch < g.c; ++ch)
        o[ch] = static_cast<T>(momentum * mean_in[ch] + (1.0 - momentum) * mean[ch]);
    }
    if (Tensor* vo = ctx.OutputOrNull("VarianceOut")) {
      T* o = vo->mutable_data<T>(ctx.place());
      for (int64_t ch = 0; ch < g.c; ++ch)
        o[ch] = static_cast<T>(momentum * var_in[ch] + (1.0 - momentum) * var[ch]);
    }
  }
  if (Tensor* sm = ctx.OutputOrNull("SavedMean"))
    std::copy(mean.begin(), mean.end(), sm->mutable_data<T>(ctx.place()));
  if (Tensor* sv = ctx.OutputOrNull("SavedVariance"))
    std::copy(inv_std.begin(), inv_std.end(), sv->mutable_data<T>(ctx.place()));
  T* y = ctx.Output("Y")->mutable_data<T>(ctx.place());
  for (int64_t s = 0; s < g.n; ++s)
    for (int64_t ch = 0; ch < g.c; ++ch) {
      const int64_t off = (s * g.c + ch) * g.inner;
      for (int64_t i = 0; i < g.inner; ++i)
        y[off + i] = (x[off + i] - mean[ch]) * inv_std[ch] * scale[ch] + bias[ch];
    }
  return Status::OK();
}

template <typename T>
Status SyncBatchNormGradKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const BnGeom g = GeomOf(xt.dims());
  const T* x = xt.data<T>();
  const T* scale = ctx.Input("Scale").data<T>();
  const T* mean = ctx.Input("SavedMean").data<T>();
  const T* inv_std = ctx.Input("SavedVariance").data<T>();
  const T* dy = ctx.Input("Y@GRAD").data<T>();
  // Local Σ dy and Σ dy * x̂ per channel, then the element count.
  std::vector<T> local(2 * g.c + 1, T(0));
  for (int64_t s = 0; s < g.n; ++s)
    for (int64_t ch = 0; ch < g.c; ++ch) {
      const int64_t off = (s * g.c + ch) * g.inner;
      for (int64_t i = 0; i < g.inner; ++i) {
        local[ch] += dy[off + i];
        local[g.c + ch] += dy[off + i] * (x[off + i] - mean[ch]) * inv_std[ch];
      }
    }
  if (Tensor* t = ctx.OutputOrNull("Bias@GRAD"))
    std::copy(local.begin(), local.begin() + g.c, t->mutable_data<T>(ctx.place()));
  if (Tensor* t = ctx.OutputOrNull("Scale@GRAD"))
    std::copy(local.begin() + g.c, local.begin() + 2 * g.c, t->mutable_data<T>(ctx.place()));
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  T* dx = dxt->mutable_data<T>(ctx.place());
  if (ctx.Attr<bool>("is_test")) {
    for (int64_t s = 0; s < g.n; ++s)
      for (int64_t ch = 0; ch < g.c; ++ch) {
        const int64_t off = (s * g.c + ch) * g.inner;
        for (int64_t i = 0; i < g.inner; ++i) dx[off + i] = scale[ch] * inv_std[ch] * dy[off + i];
      }
    return Status::OK();
  }
  double w = 1.0;
  if (const Tensor* wt = ctx.InputOrNull("Weight"))
    w = wt->dtype() == proto::FP64 ? wt->data<double>()[0] : wt->data<float>()[0];
  std::vector<T> sums(local);
  for (int64_t k = 0; k < 2 * g.c; ++k) sums[k] = static_cast<T>(sums[k] * w);
  sums[2 * g.c] = static_cast<T>(g.n * g.inner);
  LOOM_RETURN_IF_ERROR(AllReduceSum(ctx, &sums));
  const double m = sums[2 * g.c];
  if (g.n * g.inner > 0 && !(w > 0))
    return ctx.Error("Weight (", w, ") must be positive on a rank with rows");
  for (int64_t s = 0; s < g.n; ++s)
    for (int64_t ch = 0; ch < g.c; ++ch) {
      const int64_t off = (s * g.c + ch) * g.inner;
      const double a = static_cast<double>(scale[ch]) * inv_std[ch];
      for (int64_t i = 0; i < g.inner; ++i) {
        const double xhat = (static_cast<double>(x[off + i]) - mean[ch]) * inv_std[ch];
        dx[off + i] =
            static_cast<T>(a * (dy[off + i] - (sums[ch] + xhat * sums[g.c + ch]) / (m * w)));
      }
    }
  return Status::OK();
}

Status SyncBatchNormGradInferShape(InferShapeContext* ctx) {
  if (ctx->HasOutput("X@GRAD")) ctx->ShareDimAndDtype("X", "X@GRAD");
  for (const char* slot : {"Scale@GRAD", "Bias@GRAD"})
    if (ctx->HasOutput(slot)) {
      ctx->SetOutputDim(slot, ctx->InputDim("Scale"));
      ctx->SetOutputDtype(slot, ctx->InputDtype("Scale"));
    }
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(sync_batch_norm)
    .Doc(
        "batch_norm with the training statistics of the batches of every rank of Comm "
        "(BuildStrategy.sync_batch_norm swaps it in for batch_norm).")
    .Input("X", "input [N, C] or [N, C, H, W]")
    .Input("Scale", "per-channel scale [C]")
    .Input("Bias", "per-channel bias [C]")
    .Input("Mean", "moving mean [C]")
    .Input("Variance", "moving variance [C]")
    .Input("Comm", "the communicator (from comm_init)")
    .Output("Y", "normalized output, same dims as X")
    .Output("MeanOut", "updated moving mean (the Mean variable)")
    .Output("VarianceOut", "updated moving variance (the Variance variable)")
    .Output("SavedMean", "the ranks' batch mean [C]")
    .Output("SavedVariance", "the ranks' batch 1 / sqrt(var + epsilon) [C]")
    .AttrsFrom("batch_norm")
    .KernelDtypeFrom("X")
    .InferShape(SyncBatchNormInferShape)
    .Kernel(Place::kCPU, proto::FP32, SyncBatchNormKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SyncBatchNormKernel<double>);

LOOM_REGISTER_OP(sync_batch_norm_grad)
    .Doc(
        "Gradients of sync_batch_norm: Scale and Bias over this rank's rows, X over every "
        "rank's (the weighted sums of dy allreduced).")
    .Input("X", "forward X")
    .Input("Scale", "forward Scale")
    .Input("SavedMean", "forward SavedMean")
    .Input("SavedVariance", "forward SavedVariance (inverse std)")
    .Input("Y@GRAD", "gradient of Y")
    .Input("Comm", "the communicator (from comm_init)")
    .Input("Weight", "this rank's share of the batch (sample_weight's output)", false, true)
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("Scale@GRAD", "gradient of Scale (this rank's rows)", false, true)
    .Output("Bias@GRAD", "gradient of Bias (this rank's rows)", false, true)
    .AttrsFrom("batch_norm")
    .KernelDtypeFrom("X")
    .InferShape(SyncBatchNormGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, SyncBatchNormGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SyncBatchNormGradKernel<double>);

}  // namespace loom::ops
