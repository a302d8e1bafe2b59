// sampling_id: draws one id per row of X [batch, width] (each row a distribution): with r
// uniform in [min, max), the first j whose cumulative sum X[i, 0..j] exceeds r (the last id
// when none does). No gradient.
#include <random>

#include "operators/common.h"

namespace loom::ops {
namespace {

Status SamplingIdInferShape(InferShapeContext* ctx) {
  const DDim x = ctx->InputDim("X");
  if (x.size() != 2) return ctx->Error(ctx->DescribeInput("X"), " must be [batch, width]");
  if (ctx->Attr<float>("min") >= ctx->Attr<float>("max"))
    return ctx->Error("min (", ctx->Attr<float>("min"), ") must be below max (",
                      ctx->Attr<float>("max"), ")");
  ctx->SetOutputDim("Out", DDim({x[0]}));
  ctx->SetOutputDtype("Out", proto::INT64);
  return Status::OK();
}

template <typename T>
Status SamplingIdKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int64_t batch = x.dims()[0], width = x.dims()[1];
  const int seed = ctx.Attr<int>("seed");
  std::mt19937_64 rng(seed != 0 ? static_cast<uint64_t>(seed) : std::random_device{}());
  std::uniform_real_distribution<double> dist(ctx.Attr<float>("min"), ctx.Attr<float>("max"));
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({batch}));
  int64_t* o = out->mutable_data<int64_t>(ctx.place());
  const T* p = x.data<T>();
  for (int64_t i = 0; i < batch; ++i) {
    double r = dist(rng);
    o[i] = width - 1;
    for (int64_t j = 0; j < width; ++j) {
      r -= static_cast<double>(p[i * width + j]);
      if (r < 0) {
        o[i] = j;
        break;
      }
    }
  }
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(sampling_id)
    .Doc(
        "Out[i] = the first j with X[i, 0] + ... + X[i, j] > r, r ~ U[min, max) per row (the "
        "last id when none): one id drawn from each row's distribution.")
    .Input("X", "[batch, width] probabilities")
    .Output("Out", "int64 [batch] ids")
    .Attr<float>("min", 0.0f, "lower bound of r")
    .Attr<float>("max", 1.0f, "upper bound of r")
    .Attr<int>("seed", 0, "random seed; 0 draws a fresh one")
    .InferShape(SamplingIdInferShape)
    .Kernel(Place::kCPU, proto::FP32, SamplingIdKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SamplingIdKernel<double>);

}  // namespace loom::ops
