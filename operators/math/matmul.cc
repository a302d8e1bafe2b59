// matmul: Out = alpha * op(X) · op(Y), op = optional transpose of the last two dims, batched
// over leading dims (which must match, or one side has none). 1-D operands act as a row
// (X) or column (Y) vector, as in Fluid.
#include "operators/common.h"
#include "operators/math/blas.h"
#include "operators/math/matmul_geom.h"

namespace loom::ops {
namespace {

Status MatmulInferShape(InferShapeContext* ctx) {
  auto g = PlanMatmul(ctx->InputDim("X"), ctx->InputDim("Y"), ctx->Attr<bool>("transpose_X"),
                      ctx->Attr<bool>("transpose_Y"));
  if (!g.ok())
    return ctx->Error(ctx->DescribeInput("X"), " and ", ctx->DescribeInput("Y"), ": ",
                      g.status().message());
  if (ctx->InputDtype("X") != ctx->InputDtype("Y"))
    return ctx->Error("X is ", DataTypeName(ctx->InputDtype("X")), ", Y is ",
                      DataTypeName(ctx->InputDtype("Y")));
  ctx->SetOutputDim("Out", g.value().out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

template <typename T>
Status MatmulKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  bool tx = ctx.Attr<bool>("transpose_X"), ty = ctx.Attr<bool>("transpose_Y");
  auto g = PlanMatmul(x.dims(), y.dims(), tx, ty);
  if (!g.ok()) return ctx.Error(g.status().message());
  const MatmulGeom& p = g.value();
  T alpha = static_cast<T>(ctx.Attr<float>("alpha"));
  T* o = ctx.Output("Out")->mutable_data<T>(ctx.place());
  for (int64_t b = 0; b < p.batch; ++b)
    Gemm<T>(tx, ty, p.m, p.n, p.k, alpha, x.data<T>() + (p.x_batched ? b * p.m * p.k : 0),
            y.data<T>() + (p.y_batched ? b * p.k * p.n : 0), T(0), o + b * p.m * p.n);
  return Status::OK();
}

// With C = alpha A B (A = op(X), B = op(Y)): dA = alpha dC Bᵀ, dB = alpha Aᵀ dC, mapped back
// through the transposes; a side without batch dims accumulates over the batch.
template <typename T>
Status MatmulGradKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const T* dc = ctx.Input("Out@GRAD").data<T>();
  bool tx = ctx.Attr<bool>("transpose_X"), ty = ctx.Attr<bool>("transpose_Y");
  auto g = PlanMatmul(x.dims(), y.dims(), tx, ty);
  if (!g.ok()) return ctx.Error(g.status().message());
  const MatmulGeom& p = g.value();
  T alpha = static_cast<T>(ctx.Attr<float>("alpha"));
  const T* xv = x.data<T>();
  const T* yv = y.data<T>();
  if (Tensor* dx = ctx.OutputOrNull("X@GRAD")) {
    T* o = dx->mutable_data<T>(ctx.place());
    if (!p.x_batched) std::fill(o, o + dx->numel(), T(0));
    for (int64_t b = 0; b < p.batch; ++b) {
      const T* yb = yv + (p.y_batched ? b * p.k * p.n : 0);
      const T* dcb = dc + b * p.m * p.n;
      T* ob = o + (p.x_batched ? b * p.m * p.k : 0);
      T beta = p.x_batched ? T(0) : T(1);
      // X not transposed: dX[m,k] = dC · op(Y)ᵀ; transposed: dX[k,m] = op(Y) · dCᵀ.
      if (!tx)
        Gemm<T>(false, !ty, p.m, p.k, p.n, alpha, dcb, yb, beta, ob);
      else
        Gemm<T>(ty, true, p.k, p.m, p.n, alpha, yb, dcb, beta, ob);
    }
  }
  if (Tensor* dy = ctx.OutputOrNull("Y@GRAD")) {
    T* o = dy->mutable_data<T>(ctx.place());
    if (!p.y_batched) std::fill(o, o + dy->numel(), T(0));
    for (int64_t b = 0; b < p.batch; ++b) {
      const T* xb = xv + (p.x_batched ? b * p.m * p.k : 0);
      const T* dcb = dc + b * p.m * p.n;
      T* ob = o + (p.y_batched ? b * p.k * p.n : 0);
      T beta = p.y_batched ? T(0) : T(1);
      // Y not transposed: dY[k,n] = op(X)ᵀ · dC; transposed: dY[n,k] = dCᵀ · op(X).
      if (!ty)
        Gemm<T>(!tx, false, p.k, p.n, p.m, alpha, xb, dcb, beta, ob);
      else
        Gemm<T>(true, tx, p.n, p.k, p.m, alpha, dcb, xb, beta, ob);
    }
  }
  return Status::OK();
}

std::vector<proto::OpDesc> MatmulGradMaker(const OpDesc& fwd) {
  proto::OpDesc g = MakeDefaultGradOp(fwd);
  OpDesc(&g).RemoveInput("Out");
  return {g};
}

}  // namespace

LOOM_REGISTER_OP(matmul)
    .Doc(
        "Out = alpha * op(X) · op(Y), op transposing the last two dims when asked; batched over "
        "leading dims.")
    .Input("X", "left operand [..., M, K] (1-D: a row vector)")
    .Input("Y", "right operand [..., K, N] (1-D: a column vector)")
    .Output("Out", "product [..., M, N]")
    .Attr<bool>("transpose_X", false, "transpose the last two dims of X")
    .Attr<bool>("transpose_Y", false, "transpose the last two dims of Y")
    .Attr<float>("alpha", 1.0f, "scale of the product")
    .InferShape(MatmulInferShape)
    .GradMaker(MatmulGradMaker)
    .Kernel(Place::kCPU, proto::FP32, MatmulKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, MatmulKernel<double>);

LOOM_REGISTER_OP(matmul_grad)
    .Doc("gradients of matmul")
    .Input("X", "forward X")
    .Input("Y", "forward Y")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("Y@GRAD", "gradient of Y", false, true)
    .AttrsFrom("matmul")
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, MatmulGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, MatmulGradKernel<double>);

}  // namespace loom::ops
