// cast (element type conversion) and assign (copy). Their gradients are the same ops applied
// to Out@GRAD: cast back to the input dtype, and a plain copy.
#include "base/copy.h"
#include "operators/shape/shape_util.h"

namespace loom::ops {
namespace {

bool CastSupported(int dtype) {
  return dtype == proto::FP32 || dtype == proto::FP64 || dtype == proto::INT32 ||
         dtype == proto::INT64 || dtype == proto::BOOL;
}

Status CastInferShape(InferShapeContext* ctx) {
  int in_dtype = ctx->Attr<int>("in_dtype"), out_dtype = ctx->Attr<int>("out_dtype");
  DataType x = ctx->InputDtype("X");
  if (static_cast<int>(x) != in_dtype)
    return ctx->Error(ctx->DescribeInput("X"), " is ", DataTypeName(x),
                      " but attribute 'in_dtype' says ",
                      DataTypeName(static_cast<DataType>(in_dtype)));
  if (!CastSupported(out_dtype))
    return ctx->Error("cannot cast to ", DataTypeName(static_cast<DataType>(out_dtype)),
                      " (supported: float32, float64, int32, int64, bool)");
  ctx->SetOutputDim("Out", ctx->InputDim("X"));
  ctx->SetOutputDtype("Out", static_cast<DataType>(out_dtype));
  return Status::OK();
}

template <typename In, typename Out>
void CastCompute(const Tensor& x, Tensor* out, const Place& place) {
  const In* in = x.data<In>();
  Out* o = out->mutable_data<Out>(place);
  for (int64_t i = 0, i_end = x.numel(); i < i_end; ++i) o[i] = static_cast<Out>(in[i]);
}

template <typename In>
Status CastKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  switch (ctx.Attr<int>("out_dtype")) {
    case proto::FP32: CastCompute<In, float>(x, out, ctx.place()); break;
    case proto::FP64: CastCompute<In, double>(x, out, ctx.place()); break;
    case proto::INT32: CastCompute<In, int32_t>(x, out, ctx.place()); break;
    case proto::INT64: CastCompute<In, int64_t>(x, out, ctx.place()); break;
    case proto::BOOL: CastCompute<In, bool>(x, out, ctx.place()); break;
    default: return ctx.Error("unsupported out_dtype ", ctx.Attr<int>("out_dtype"));
  }
  return Status::OK();
}

std::vector<proto::OpDesc> CastGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("cast");
  op.SetInput("X", {GradVarName(fwd.Output("Out")[0])});
  op.SetOutput("Out", {GradVarName(fwd.Input("X")[0])});
  op.SetAttr("in_dtype", fwd.Attr<int>("out_dtype", proto::FP32));
  op.SetAttr("out_dtype", fwd.Attr<int>("in_dtype", proto::FP32));
  return {g};
}

template <typename T>
void AssignCompute(const Tensor& x, Tensor* out, const Place& place) {
  T* o = out->mutable_data<T>(place);
  if (x.numel() > 0) CopyBytes(o, x.data<T>(), static_cast<size_t>(x.numel()) * sizeof(T));
}

template <typename T>
Status AssignKernel(const KernelContext& ctx) {
  AssignCompute<T>(ctx.Input("X"), ctx.Output("Out"), ctx.place());
  return Status::OK();
}

std::vector<proto::OpDesc> AssignGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("assign");
  op.SetInput("X", {GradVarName(fwd.Output("Out")[0])});
  op.SetOutput("Out", {GradVarName(fwd.Input("X")[0])});
  return {g};
}

}  // namespace

LOOM_REGISTER_OP(cast)
    .Doc(
        "Out = X converted element-wise from in_dtype to out_dtype (C++ conversion rules: "
        "floats truncate toward zero when cast to integers).")
    .Input("X", "input of dtype in_dtype")
    .Output("Out", "X as out_dtype, same dims")
    .RequiredAttr<int>("in_dtype", "DataType code of X", ValidDtype())
    .RequiredAttr<int>("out_dtype", "DataType code of Out", ValidDtype())
    .InferShape(CastInferShape)
    .GradMaker(CastGradMaker)
    .LOOM_SHAPE_KERNELS_ALL(CastKernel)
    .Kernel(Place::kCPU, proto::BOOL, CastKernel<bool>);

LOOM_REGISTER_OP(assign)
    .Doc("Out = a copy of X.")
    .Input("X", "input")
    .Output("Out", "copy of X")
    .InferShape(SameShapeInferShape)
    .GradMaker(AssignGradMaker)
    .LOOM_SHAPE_KERNELS_ALL(AssignKernel)
    .Kernel(Place::kCPU, proto::BOOL, AssignKernel<bool>);

}  // namespace loom::ops
