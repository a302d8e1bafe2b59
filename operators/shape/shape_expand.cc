// shape (a tensor's dims as an int32 tensor) and expand (tiling, with gradient), Fluid 1.x's.
#include <algorithm>
#include <vector>

#include "operators/common.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

// ---- shape ----
Status ShapeInferShape(InferShapeContext* ctx) {
  ctx->SetOutputDim("Out", DDim({static_cast<int64_t>(ctx->InputDim("Input").size())}));
  ctx->SetOutputDtype("Out", proto::INT32);
  return Status::OK();
}

Status ShapeKernel(const KernelContext& ctx) {
  const DDim& d = ctx.Input("Input").dims();
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({static_cast<int64_t>(d.size())}));
  int32_t* o = out->mutable_data<int32_t>(Place::CPU());
  for (int i = 0; i < d.size(); ++i) o[i] = static_cast<int32_t>(d[i]);
  return Status::OK();
}

// ---- expand ----
Status ExpandInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  const auto& times = ctx->Attr<std::vector<int>>("expand_times");
  if (static_cast<int>(times.size()) != x.size())
    return ctx->Error("expand_times has ", times.size(), " entries, ", ctx->DescribeInput("X"),
                      " has rank ", x.size());
  DDim out = x;
  for (int i = 0; i < x.size(); ++i) {
    if (times[i] < 1) return ctx->Error("expand_times[", i, "] = ", times[i], " is not >= 1");
    if (x[i] >= 0) out[i] = x[i] * times[i];
  }
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

// Visits every (output index, input index) pair of a tiling of in (dims) by times.
template <typename F>
void ForEachTiled(const DDim& in, const std::vector<int>& times, F f) {
  const int rank = in.size();
  std::vector<int64_t> out_dims(rank), idx(rank, 0);
  int64_t total = 1;
  for (int i = 0; i < rank; ++i) total *= (out_dims[i] = in[i] * times[i]);
  for (int64_t o = 0; o < total; ++o) {
    int64_t src = 0;
    for (int i = 0; i < rank; ++i) src = src * in[i] + idx[i] % in[i];
    f(o, src);
    for (int i = rank - 1; i >= 0; --i) {
      if (++idx[i] < out_dims[i]) break;
      idx[i] = 0;
    }
  }
}

template <typename T>
Status ExpandKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const auto& times = ctx.Attr<std::vector<int>>("expand_times");
  const T* in = x.data<T>();
  T* out = ctx.Output("Out")->mutable_data<T>(ctx.place());
  ForEachTiled(x.dims(), times, [&](int64_t o, int64_t i) { out[o] = in[i]; });
  return Status::OK();
}

template <typename T>
Status ExpandGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& x = ctx.Input("X");
  const T* g = ctx.Input("Out@GRAD").data<T>();
  T* o = dx->mutable_data<T>(ctx.place());
  std::fill(o, o + x.numel(), T(0));
  ForEachTiled(x.dims(), ctx.Attr<std::vector<int>>("expand_times"),
               [&](int64_t out, int64_t in) { o[in] += g[out]; });
  return Status::OK();
}

#define LOOM_FLOAT_KERNELS(fn) \
  Kernel(Place::kCPU, proto::FP32, fn<float>).Kernel(Place::kCPU, proto::FP64, fn<double>)

}  // namespace

LOOM_REGISTER_OP(shape)
    .Doc("Out = the dims of Input (int32).")
    .Input("Input", "any tensor")
    .Output("Out", "its dims")
    .InferShape(ShapeInferShape)
    .Kernel(Place::kCPU, proto::FP32, ShapeKernel)
    .Kernel(Place::kCPU, proto::FP64, ShapeKernel)
    .Kernel(Place::kCPU, proto::INT32, ShapeKernel)
    .Kernel(Place::kCPU, proto::INT64, ShapeKernel)
    .Kernel(Place::kCPU, proto::BOOL, ShapeKernel);

LOOM_REGISTER_OP(expand)
    .Doc("Out = X tiled expand_times[i] times along each dim i.")
    .Input("X", "the tensor to tile")
    .Output("Out", "dims X.dims * expand_times")
    .Attr<std::vector<int>>("expand_times", {}, "repeats per dim (one per dim of X)")
    .InferShape(ExpandInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(fwd, {"X", "Out@GRAD"}, {"X"})};
    })
    .LOOM_FLOAT_KERNELS(ExpandKernel)
    .Kernel(Place::kCPU, proto::INT32, ExpandKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, ExpandKernel<int64_t>);

LOOM_REGISTER_OP(expand_grad)
    .Doc("X@GRAD = the sum of Out@GRAD over the tiles.")
    .Input("X", "forward X")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("expand")
    .InferShape(GradInferShape)
    .LOOM_FLOAT_KERNELS(ExpandGradKernel);

}  // namespace loom::ops
