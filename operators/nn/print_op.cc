// print (Fluid's Print layer): Out = In (the same buffer), and the tensor is written to stderr
// (message, name, dtype, dims, LoD and the first `summarize` values) the first `first_n` times
// the op runs (-1: every time). Its gradient passes Out@GRAD through, printing it too when
// print_phase is "backward" or "both".
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>

#include "operators/common.h"

namespace loom::ops {
namespace {

std::string Describe(const KernelContext& ctx, const Tensor& t, const std::string& name) {
  std::ostringstream os;
  const std::string& message = ctx.Attr<std::string>("message");
  if (!message.empty()) os << message << "\t";
  if (ctx.Attr<bool>("print_tensor_name")) os << "Tensor[" << name << "]";
  os << "\n";
  if (ctx.Attr<bool>("print_tensor_shape")) os << "\tshape: " << t.dims().ToString() << "\n";
  if (ctx.Attr<bool>("print_tensor_type")) os << "\tdtype: " << DataTypeName(t.dtype()) << "\n";
  if (ctx.Attr<bool>("print_tensor_lod") && t.has_lod())
    os << "\tlod: " << LoDToString(t.lod()) << "\n";
  const int summarize = ctx.Attr<int>("summarize");
  os << "\tdata: " << TensorSummary(t, summarize < 0 ? static_cast<int>(t.numel()) : summarize)
     << "\n";
  return os.str();
}

// How many times each op instance printed (keyed by the op's place in its program).
bool ShouldPrint(const KernelContext& ctx) {
  const int first_n = ctx.Attr<int>("first_n");
  if (first_n < 0) return true;
  static std::mutex mu;
  static std::map<std::string, int>* counts = new std::map<std::string, int>();
  std::lock_guard<std::mutex> lock(mu);
  return (*counts)[ctx.Where()]++ < first_n;
}

Status PrintKernel(const KernelContext& ctx) {
  const Tensor& in = ctx.Input("In");
  *ctx.Output("Out") = in;
  const std::string& phase = ctx.Attr<std::string>("print_phase");
  if ((phase == "forward" || phase == "both") && ShouldPrint(ctx)) {
    const std::string text = Describe(ctx, in, ctx.InputVarName("In"));
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  }
  return Status::OK();
}

Status PrintGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("In@GRAD");
  if (!dx) return Status::OK();
  const Tensor& g = ctx.Input("Out@GRAD");
  *dx = g;
  const std::string& phase = ctx.Attr<std::string>("print_phase");
  if ((phase == "backward" || phase == "both") && ShouldPrint(ctx)) {
    const std::string text = Describe(ctx, g, ctx.InputVarName("Out@GRAD"));
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  }
  return Status::OK();
}

Status PrintInferShape(InferShapeContext* ctx) {
  const std::string& phase = ctx->Attr<std::string>("print_phase");
  if (phase != "forward" && phase != "backward" && phase != "both")
    return ctx->Error("print_phase '", phase, "' is not forward, backward or both");
  ctx->ShareDimAndDtype("In", "Out");
  return Status::OK();
}

#define LOOM_PRINT_KERNELS(fn)               \
  Kernel(Place::kCPU, proto::FP32, fn)       \
      .Kernel(Place::kCPU, proto::FP64, fn)  \
      .Kernel(Place::kCPU, proto::INT32, fn) \
      .Kernel(Place::kCPU, proto::INT64, fn) \
      .Kernel(Place::kCPU, proto::BOOL, fn)

}  // namespace

LOOM_REGISTER_OP(print)
    .Ordered()
    .Doc("Out = In; In is written to stderr (see operators/nn/print_op.cc).")
    .Input("In", "the tensor to print")
    .Output("Out", "In, unchanged")
    .Attr<int>("first_n", -1, "print only the first first_n runs; -1: every run")
    .Attr<std::string>("message", "", "printed before the tensor")
    .Attr<int>("summarize", 20, "values printed; -1: all")
    .Attr<bool>("print_tensor_name", true, "print the variable's name")
    .Attr<bool>("print_tensor_type", true, "print the dtype")
    .Attr<bool>("print_tensor_shape", true, "print the dims")
    .Attr<bool>("print_tensor_lod", true, "print the LoD")
    .Attr<std::string>("print_phase", "both", "forward, backward or both")
    .Attr<bool>("is_forward", true, "accepted (Fluid's)")
    .SetsLoD()
    .InferShape(PrintInferShape)
    .GradMaker([](const OpDesc& fwd) {
      proto::OpDesc g = MakeDefaultGradOp(fwd);
      return std::vector<proto::OpDesc>{g};
    })
    .LOOM_PRINT_KERNELS(PrintKernel);

LOOM_REGISTER_OP(print_grad)
    .Ordered()
    .Doc("In@GRAD = Out@GRAD, printed in the backward phase.")
    .Input("In", "forward In")
    .Input("Out", "forward Out")
    .Input("Out@GRAD", "gradient of Out")
    .Output("In@GRAD", "gradient of In", false, true)
    .AttrsFrom("print")
    .SetsLoD()
    .InferShape([](InferShapeContext* ctx) {
      if (ctx->OutputSize("In@GRAD") > 0) {
        ctx->SetOutputDim("In@GRAD", ctx->InputDim("Out@GRAD"));
        ctx->SetOutputDtype("In@GRAD", ctx->InputDtype("Out@GRAD"));
      }
      return Status::OK();
    })
    .LOOM_PRINT_KERNELS(PrintGradKernel);

}  // namespace loom::ops
