// cvm (continuous_value_model): the show / click columns of CTR features. X [batch, D] starts
// with a show and a click count; with use_cvm, Y = X with those two columns replaced by
// log(show + 1) and log(click + 1) - log(show + 1); without, Y = X without them. As Fluid's,
// the gradient of the two columns is CVM itself (the show and click the sparse table
// accumulates), the other columns take Y@GRAD.
#include <cmath>

#include "operators/common.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

Status CvmInferShape(InferShapeContext* ctx) {
  const DDim x = ctx->InputDim("X"), cvm = ctx->InputDim("CVM");
  if (x.size() != 2 || (x[1] >= 0 && x[1] < 2))
    return ctx->Error(ctx->DescribeInput("X"), " must be [batch, D] with D >= 2");
  if (cvm.size() != 2 || (cvm[1] >= 0 && cvm[1] != 2))
    return ctx->Error(ctx->DescribeInput("CVM"), " must be [batch, 2] (show, click)");
  const bool use = ctx->Attr<bool>("use_cvm");
  ctx->SetOutputDim("Y", DDim({x[0], use || x[1] < 0 ? x[1] : x[1] - 2}));
  ctx->SetOutputDtype("Y", ctx->InputDtype("X"));
  return Status::OK();
}

template <typename T>
Status CvmKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const int64_t batch = xt.dims()[0], d = xt.dims()[1];
  const bool use = ctx.Attr<bool>("use_cvm");
  const int64_t w = use ? d : d - 2;
  Tensor* yt = ctx.Output("Y");
  yt->Resize(DDim({batch, w}));
  T* y = yt->mutable_data<T>(ctx.place());
  const T* x = xt.data<T>();
  for (int64_t i = 0; i < batch; ++i) {
    const T* row = x + i * d;
    T* o = y + i * w;
    if (use) {
      for (int64_t j = 2; j < d; ++j) o[j] = row[j];
      o[0] = std::log(row[0] + T(1));
      o[1] = std::log(row[1] + T(1)) - o[0];
    } else {
      for (int64_t j = 2; j < d; ++j) o[j - 2] = row[j];
    }
  }
  return Status::OK();
}

template <typename T>
Status CvmGradKernel(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  const Tensor& xt = ctx.Input("X");
  const int64_t batch = xt.dims()[0], d = xt.dims()[1];
  const bool use = ctx.Attr<bool>("use_cvm");
  const int64_t w = use ? d : d - 2;
  const T* g = ctx.Input("Y@GRAD").data<T>();
  const T* cvm = ctx.Input("CVM").data<T>();
  dxt->Resize(xt.dims());
  T* dx = dxt->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < batch; ++i) {
    dx[i * d] = cvm[i * 2];
    dx[i * d + 1] = cvm[i * 2 + 1];
    for (int64_t j = 2; j < d; ++j) dx[i * d + j] = g[i * w + (use ? j : j - 2)];
  }
  dxt->set_lod(xt.lod());
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(cvm)
    .Doc(
        "Y = X with its show / click columns as log(show + 1), log(click + 1) - log(show + 1) "
        "(use_cvm), or X without them. X@GRAD of those columns is CVM.")
    .Input("X", "[batch, D], columns 0 and 1 the show and click counts")
    .Input("CVM", "[batch, 2] show and click")
    .Output("Y", "[batch, D] (use_cvm) or [batch, D - 2]")
    .Attr<bool>("use_cvm", true, "keep the two columns, as logs")
    .InferShape(CvmInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(fwd, {"X", "CVM", "Y@GRAD"}, {"X"})};
    })
    .Kernel(Place::kCPU, proto::FP32, CvmKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, CvmKernel<double>);

LOOM_REGISTER_OP(cvm_grad)
    .Doc("X@GRAD = Y@GRAD on the feature columns, CVM on the show / click columns.")
    .Input("X", "forward X")
    .Input("CVM", "forward CVM")
    .Input("Y@GRAD", "gradient of Y")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("cvm")
    .SetsLoD()
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, CvmGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, CvmGradKernel<double>);

}  // namespace loom::ops
