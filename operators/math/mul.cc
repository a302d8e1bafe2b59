// mul: the fully-connected matmul. X is flattened to 2-D at x_num_col_dims, Y at
// y_num_col_dims; Out = X2 · Y2 reshaped to X.dims[:x_num_col_dims] + Y.dims[y_num_col_dims:].
#include "operators/common.h"
#include "operators/math/blas.h"
#include "operators/math/mul_geom.h"

namespace loom::ops {

namespace {

Status MulInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X"), y = ctx->InputDim("Y");
  int xc = ctx->Attr<int>("x_num_col_dims"), yc = ctx->Attr<int>("y_num_col_dims");
  if (xc >= x.size())
    return ctx->Error("x_num_col_dims (", xc, ") must be below the rank of ",
                      ctx->DescribeInput("X"));
  if (yc >= y.size())
    return ctx->Error("y_num_col_dims (", yc, ") must be below the rank of ",
                      ctx->DescribeInput("Y"));
  int64_t k_x = x.product(xc, x.size()), k_y = y.product(0, yc);
  if (k_x >= 0 && k_y >= 0 && k_x != k_y)
    return ctx->Error(ctx->DescribeInput("X"), " and ", ctx->DescribeInput("Y"),
                      " are incompatible: X flattened at ", xc, " has ", k_x,
                      " columns but Y flattened at ", yc, " has ", k_y, " rows");
  if (ctx->InputDtype("X") != ctx->InputDtype("Y"))
    return ctx->Error("X (var '", ctx->InputVarName("X"), "') is ",
                      DataTypeName(ctx->InputDtype("X")), " but Y (var '", ctx->InputVarName("Y"),
                      "') is ", DataTypeName(ctx->InputDtype("Y")));
  DDim out;
  for (int i = 0; i < xc; ++i) out.push_back(x[i]);
  for (int i = yc; i < y.size(); ++i) out.push_back(y[i]);
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

template <typename T>
Status MulKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const auto [x2, y2] = MakeMulGeom(ctx, x.dims(), y.dims());
  Gemm<T>(false, false, x2[0], y2[1], x2[1], x.data<T>(), y.data<T>(),
          ctx.Output("Out")->mutable_data<T>(ctx.place()));
  return Status::OK();
}

// dX = dOut · Yᵀ, dY = Xᵀ · dOut.
template <typename T>
Status MulGradKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const Tensor& dout = ctx.Input("Out@GRAD");
  const auto [x2, y2] = MakeMulGeom(ctx, x.dims(), y.dims());
  if (Tensor* dx = ctx.OutputOrNull("X@GRAD"))
    Gemm<T>(false, true, x2[0], x2[1], y2[1], dout.data<T>(), y.data<T>(),
            dx->mutable_data<T>(ctx.place()));
  if (Tensor* dy = ctx.OutputOrNull("Y@GRAD"))
    Gemm<T>(true, false, y2[0], y2[1], x2[0], x.data<T>(), dout.data<T>(),
            dy->mutable_data<T>(ctx.place()));
  return Status::OK();
}

std::vector<proto::OpDesc> MulGradMaker(const OpDesc& fwd) {
  proto::OpDesc g = MakeDefaultGradOp(fwd);
  OpDesc(&g).RemoveInput("Out");
  return {g};
}

}  // namespace

LOOM_REGISTER_OP(mul)
    .Doc("Out = flatten(X, x_num_col_dims) · flatten(Y, y_num_col_dims) (fully-connected matmul).")
    .Input("X", "left operand")
    .Input("Y", "right operand (e.g. the weight)")
    .Output("Out", "the product, dims X.dims[:x_num_col_dims] + Y.dims[y_num_col_dims:]")
    .Attr<int>("x_num_col_dims", 1, "X's dims before this index form the rows",
               Positive("x_num_col_dims"))
    .Attr<int>("y_num_col_dims", 1, "Y's dims before this index form the rows",
               Positive("y_num_col_dims"))
    .InferShape(MulInferShape)
    .GradMaker(MulGradMaker)
    .Kernel(Place::kCPU, proto::FP32, MulKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, MulKernel<double>);

LOOM_REGISTER_OP(mul_grad)
    .Doc("X@GRAD = Out@GRAD · Yᵀ, Y@GRAD = Xᵀ · Out@GRAD (in the flattened 2-D views).")
    .Input("X", "forward X")
    .Input("Y", "forward Y")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("Y@GRAD", "gradient of Y", false, true)
    .AttrsFrom("mul")
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, MulGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, MulGradKernel<double>);

}  // namespace loom::ops
