// sum (n-ary elementwise sum, used by backward to accumulate gradients) and mean.
#include "operators/common.h"

namespace loom::ops {
namespace {

Status SumInferShape(InferShapeContext* ctx) {
  int n = ctx->InputSize("X");
  if (n == 0) return ctx->Error("needs at least one input in slot 'X'");
  DDim first = ctx->InputDim("X", 0);
  for (int i = 1; i < n; ++i) {
    DDim d = ctx->InputDim("X", i);
    if (!DimsCompatible(first, d))
      return ctx->Error("input 'X' #", i, " (var '", ctx->InputVarName("X", i), "') has dims ",
                        d.ToString(), ", input #0 (var '", ctx->InputVarName("X", 0), "') has ",
                        first.ToString());
    if (ctx->InputDtype("X", i) != ctx->InputDtype("X", 0))
      return ctx->Error("input 'X' #", i, " (var '", ctx->InputVarName("X", i), "') is ",
                        DataTypeName(ctx->InputDtype("X", i)), ", input #0 (var '",
                        ctx->InputVarName("X", 0), "') is ", DataTypeName(ctx->InputDtype("X", 0)));
  }
  ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

template <typename T>
void SumCompute(const std::vector<const T*>& ins, int64_t n, T* out) {
  // out may alias an input: accumulate into a local first pass over input 0.
  if (ins.size() == 1) {
    if (out != ins[0]) std::copy(ins[0], ins[0] + n, out);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    T acc = ins[0][i];
    for (size_t k = 1; k < ins.size(); ++k) acc += ins[k][i];
    out[i] = acc;
  }
}

template <typename T>
Status SumKernel(const KernelContext& ctx) {
  int n = ctx.InputSize("X");
  std::vector<const T*> ins;
  for (int i = 0; i < n; ++i) ins.push_back(ctx.Input("X", i).data<T>());
  Tensor* out = ctx.Output("Out");
  // Allocating Out may replace an aliased input's buffer only when its size changes, which the
  // shape check above rules out.
  SumCompute<T>(ins, out->numel(), out->mutable_data<T>(ctx.place()));
  return Status::OK();
}

// d(X[0] + X[1] + ...)/dX[i] = 1: each input's gradient is a copy of Out@GRAD (a scale by 1).
std::vector<proto::OpDesc> SumGradMaker(const OpDesc& fwd) {
  std::vector<proto::OpDesc> grads;
  std::string dout = GradVarName(fwd.Output("Out")[0]);
  for (const std::string& x : fwd.Input("X")) {
    proto::OpDesc g;
    OpDesc op(&g);
    op.SetType("scale");
    op.SetInput("X", {dout});
    op.SetOutput("Out", {GradVarName(x)});
    op.SetAttr("scale", 1.0f);
    grads.push_back(std::move(g));
  }
  return grads;
}

Status MeanInferShape(InferShapeContext* ctx) {
  ctx->SetOutputDim("Out", DDim{1});
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

template <typename T>
Status MeanKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const T* in = x.data<T>();
  int64_t n = x.numel();
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(in[i]);
  ctx.Output("Out")->mutable_data<T>(ctx.place())[0] = static_cast<T>(n ? acc / n : 0.0);
  return Status::OK();
}

template <typename T>
Status MeanGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (!dx) return Status::OK();
  int64_t n = dx->numel();
  T g = ctx.Input(GradVarName("Out")).data<T>()[0] / static_cast<T>(n ? n : 1);
  T* o = dx->mutable_data<T>(ctx.place());
  std::fill(o, o + n, g);
  return Status::OK();
}

std::vector<proto::OpDesc> MeanGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("mean_grad");
  op.SetInput("X", fwd.Input("X"));
  op.SetInput(GradVarName("Out"), {GradVarName(fwd.Output("Out")[0])});
  op.SetOutput(GradVarName("X"), {GradVarName(fwd.Input("X")[0])});
  return {g};
}

}  // namespace

LOOM_REGISTER_OP(sum)
    .Doc("Out = X[0] + X[1] + ... (all inputs have the same dims and dtype).")
    .Input("X", "tensors to add", /*duplicable=*/true)
    .Output("Out", "their sum (may be one of the inputs)")
    .InferShape(SumInferShape)
    .GradMaker(SumGradMaker)
    .Kernel(Place::kCPU, proto::FP32, SumKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SumKernel<double>)
    .Kernel(Place::kCPU, proto::INT32, SumKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, SumKernel<int64_t>);

LOOM_REGISTER_OP(mean)
    .Doc("Out = mean of all elements of X, dims [1].")
    .Input("X", "input tensor")
    .Output("Out", "the mean, dims [1]")
    .InferShape(MeanInferShape)
    .GradMaker(MeanGradMaker)
    .Kernel(Place::kCPU, proto::FP32, MeanKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, MeanKernel<double>);

LOOM_REGISTER_OP(mean_grad)
    .Doc("X@GRAD = Out@GRAD / numel(X) everywhere.")
    .Input("X", "forward input (for its dims)")
    .Input("Out@GRAD", "gradient of the mean")
    .Output("X@GRAD", "gradient of X", false, true)
    .InferShape(GradInferShape)
    .KernelDtypeFrom("Out@GRAD")
    .Kernel(Place::kCPU, proto::FP32, MeanGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, MeanGradKernel<double>);

}  // namespace loom::ops
