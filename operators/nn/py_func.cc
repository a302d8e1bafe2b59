// py_func (Fluid's): runs a registered Python callable as an op. Forward: Out = f(X...). Its
// gradient is another py_func calling the backward callable with the forward inputs, outputs
// and output gradients (minus the skipped ones), writing the inputs' gradients.
#include "operators/nn/py_func.h"

#include <mutex>

#include "operators/common.h"

namespace loom::ops {
namespace {

std::mutex& RunnerMu() {
  static std::mutex mu;
  return mu;
}

PyFuncRunner& Runner() {
  static PyFuncRunner* runner = new PyFuncRunner();
  return *runner;
}

Status PyFuncKernel(const KernelContext& ctx) {
  PyFuncRunner runner;
  {
    std::lock_guard<std::mutex> lock(RunnerMu());
    runner = Runner();
  }
  if (!runner)
    return ctx.Error(
        "py_func calls Python, and this process has no Python (run the program "
        "from Python, not the loom CLI)");
  const int id = ctx.Attr<int>("forward_callable_id");
  std::vector<Tensor> ins;
  for (int i = 0; i < ctx.InputSize("X"); ++i) ins.push_back(ctx.Input("X", i));
  std::vector<Tensor> outs(static_cast<size_t>(ctx.OutputSize("Out")));
  Status st = runner(id, ins, &outs);
  if (!st.ok()) return st.WithContext(ctx.Where());
  if (static_cast<int>(outs.size()) != ctx.OutputSize("Out"))
    return ctx.Error("the callable returned ", outs.size(), " values for ", ctx.OutputSize("Out"),
                     " outputs");
  for (int i = 0; i < ctx.OutputSize("Out"); ++i) {
    if (Tensor* o = ctx.OutputOrNull("Out", i)) *o = std::move(outs[static_cast<size_t>(i)]);
  }
  return Status::OK();
}

// Out's dims and dtype are the output variables' own declarations (py_func's caller made them).
Status PyFuncInferShape(InferShapeContext* ctx) {
  if (ctx->Attr<int>("forward_callable_id") < 0)
    return ctx->Error("forward_callable_id is not set");
  return Status::OK();
}

std::vector<proto::OpDesc> PyFuncGradMaker(const OpDesc& fwd) {
  if (fwd.Attr<int>("backward_callable_id", -1) < 0) return {};
  const auto skip = fwd.Attr<std::vector<std::string>>("backward_skip_vars", {});
  auto skipped = [&](const std::string& v) {
    return std::find(skip.begin(), skip.end(), v) != skip.end();
  };
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("py_func");
  std::vector<std::string> ins, outs;
  for (const auto& v : fwd.Input("X"))
    if (!skipped(v)) ins.push_back(v);
  for (const auto& v : fwd.Output("Out"))
    if (!skipped(v)) ins.push_back(v);
  for (const auto& v : fwd.Output("Out")) ins.push_back(GradVarName(v));
  for (const auto& v : fwd.Input("X")) outs.push_back(GradVarName(v));
  op.SetInput("X", ins);
  op.SetOutput("Out", outs);
  op.SetAttr("forward_callable_id", fwd.Attr<int>("backward_callable_id", -1));
  op.SetAttr("backward_callable_id", -1);
  return {g};
}

#define LOOM_PY_FUNC_KERNELS(fn)             \
  Kernel(Place::kCPU, proto::FP32, fn)       \
      .Kernel(Place::kCPU, proto::FP64, fn)  \
      .Kernel(Place::kCPU, proto::INT32, fn) \
      .Kernel(Place::kCPU, proto::INT64, fn) \
      .Kernel(Place::kCPU, proto::BOOL, fn)

}  // namespace

void SetPyFuncRunner(PyFuncRunner runner) {
  std::lock_guard<std::mutex> lock(RunnerMu());
  Runner() = std::move(runner);
}

LOOM_REGISTER_OP(py_func)
    .Ordered()
    .Doc(
        "Out = the registered Python callable forward_callable_id applied to X (numpy arrays "
        "in, numpy arrays out); its gradient calls backward_callable_id.")
    .Input("X", "inputs", /*duplicable=*/true, /*dispensable=*/true)
    .Output("Out", "outputs (declared by the caller with their dims and dtypes)", true, true)
    .Attr<int>("forward_callable_id", -1, "the callable run forward")
    .Attr<int>("backward_callable_id", -1, "the callable of the gradient; -1: none")
    .Attr<std::vector<std::string>>("backward_skip_vars", {},
                                    "forward variables the backward callable does not get")
    .InferShape(PyFuncInferShape)
    .GradMaker(PyFuncGradMaker)
    .LOOM_PY_FUNC_KERNELS(PyFuncKernel);

}  // namespace loom::ops
