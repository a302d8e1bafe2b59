// add_position_encoding: Out = alpha * X + beta * PE, with the sinusoid position encoding of
// "Attention Is All You Need" in Fluid's layout: for position t and k < D / 2,
// PE[t, k] = sin(t / 10000^(k / (D/2 - 1))) and PE[t, D/2 + k] = the cosine. X is a padded
// [batch, time, D] tensor or a LoD tensor [rows, D] (positions restart at every sequence).
#include <cmath>

#include "operators/common.h"
#include "operators/nn/nn_util.h"
#include "operators/sequence/sequence_util.h"

namespace loom::ops {
namespace {

Status AddPositionEncodingInferShape(InferShapeContext* ctx) {
  const DDim x = ctx->InputDim("X");
  if (x.size() != 2 && x.size() != 3)
    return ctx->Error(ctx->DescribeInput("X"),
                      " must be [batch, time, D] or a LoD tensor [rows, D]");
  const int64_t d = x[x.size() - 1];
  if (d >= 0 && d % 2 != 0)
    return ctx->Error("the encoding size (last dim of ", ctx->DescribeInput("X"),
                      ") must be even, got ", d);
  ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

template <typename T>
Status AddPositionEncodingKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  std::vector<int64_t> off;
  if (xt.dims().size() == 3) {
    for (int64_t b = 0; b <= xt.dims()[0]; ++b) off.push_back(b * xt.dims()[1]);
  } else {
    LOOM_ASSIGN_OR_RETURN(off, SequenceOffsets(ctx, "X"));
  }
  const int64_t d = xt.dims()[xt.dims().size() - 1], half = d / 2;
  const double alpha = ctx.Attr<float>("alpha"), beta = ctx.Attr<float>("beta");
  Tensor* out = ctx.Output("Out");
  out->Resize(xt.dims());
  T* o = out->mutable_data<T>(ctx.place());
  const T* x = xt.data<T>();
  for (size_t s = 0; s + 1 < off.size(); ++s)
    for (int64_t r = off[s]; r < off[s + 1]; ++r) {
      const double pos = static_cast<double>(r - off[s]);
      for (int64_t k = 0; k < half; ++k) {
        const double v =
            half > 1 ? pos / std::pow(10000.0, static_cast<double>(k) / (half - 1)) : pos / 10000.0;
        o[r * d + k] = static_cast<T>(x[r * d + k] * alpha + std::sin(v) * beta);
        o[r * d + half + k] = static_cast<T>(x[r * d + half + k] * alpha + std::cos(v) * beta);
      }
    }
  out->set_lod(xt.lod());
  return Status::OK();
}

// X@GRAD = alpha * Out@GRAD.
template <typename T>
Status AddPositionEncodingGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& g = ctx.Input("Out@GRAD");
  const T alpha = static_cast<T>(ctx.Attr<float>("alpha"));
  dx->Resize(g.dims());
  T* o = dx->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < g.numel(); ++i) o[i] = alpha * g.data<T>()[i];
  dx->set_lod(g.lod());
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(add_position_encoding)
    .Doc(
        "Out = alpha * X + beta * PE: PE[t, k] = sin(t / 10000^(k / (D/2 - 1))) and PE[t, D/2 + "
        "k] = cos(...) for k < D/2, t the position within the sequence (X [batch, time, D] or "
        "a LoD tensor [rows, D]).")
    .Input("X", "[batch, time, D] or a LoD tensor [rows, D], D even")
    .Output("Out", "X's dims and LoD")
    .Attr<float>("alpha", 1.0f, "scale of X")
    .Attr<float>("beta", 1.0f, "scale of the encoding")
    .SetsLoD()
    .InferShape(AddPositionEncodingInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(fwd, {"Out@GRAD"}, {"X"})};
    })
    .Kernel(Place::kCPU, proto::FP32, AddPositionEncodingKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, AddPositionEncodingKernel<double>);

LOOM_REGISTER_OP(add_position_encoding_grad)
    .Doc("X@GRAD = alpha * Out@GRAD.")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("add_position_encoding")
    .SetsLoD()
    .InferShape([](InferShapeContext* ctx) {
      ctx->ShareDimAndDtype("Out@GRAD", "X@GRAD");
      return Status::OK();
    })
    .Kernel(Place::kCPU, proto::FP32, AddPositionEncodingGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, AddPositionEncodingGradKernel<double>);

}  // namespace loom::ops
