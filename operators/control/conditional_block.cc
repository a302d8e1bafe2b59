// conditional_block and its gradient: run a sub-block of the program when a one-element
// condition holds (Fluid's ConditionalBlock with is_scalar_condition).
//
// The sub-block runs in a scope of its own below the op's scope, so its temporaries stay local
// while the variables of enclosing blocks (the op's Input and Out, parameters) are found, read
// and written through the scope chain. That scope is kept in the op's `Scope` output (a
// STEP_SCOPES variable): the gradient op runs the gradient block that AppendBackward built in
// that same scope, where it reads the forward temporaries and where the sub-block's declared
// gradients live (a nested conditional_block's gradient, run in a scope below, reads them), and
// copies each Input's gradient out. When the condition is false the forward op leaves Out untouched
// and the gradient op writes zeros, so a parameter used only in a branch some ranks skip still gets
// a gradient of the right shape on every rank (the transpiler's allreduce needs one).
#include "framework/scope.h"
#include "loom/config.h"
#include "operators/common.h"
#include "operators/control/control_util.h"

namespace loom::ops {
namespace {

// What conditional_block keeps in its Scope output.
struct StepScopes {
  Scope* parent = nullptr;  // the scope the op ran in; step is below it
  Scope* step = nullptr;    // where the sub-block ran (and its gradient block runs)
  bool ran = false;         // whether the last forward run ran the sub-block
};

StatusOr<bool> ReadCondition(const KernelContext& ctx) {
  const Tensor& c = ctx.Input("Cond");
  if (c.numel() != 1)
    return ctx.Error("Cond (var '", ctx.InputVarName("Cond"),
                     "') must hold one element, it has dims ", c.dims().ToString());
  Tensor host;
  const Tensor* h = &c;
  if (!c.place().is_cpu()) {
    ctx.device().Wait();
    TensorCopy(c, Place::CPU(), &host);
    h = &host;
  }
  switch (h->dtype()) {
    case proto::BOOL: return h->data<bool>()[0];
    case proto::INT32: return h->data<int32_t>()[0] != 0;
    case proto::INT64: return h->data<int64_t>()[0] != 0;
    case proto::FP32: return h->data<float>()[0] != 0.0f;
    case proto::FP64: return h->data<double>()[0] != 0.0;
    default:
      return ctx.Error("Cond (var '", ctx.InputVarName("Cond"), "') has dtype ",
                       DataTypeName(h->dtype()), "; expected bool, int32, int64, fp32 or fp64");
  }
}

StepScopes* StepScopesOf(Variable* v) {
  if (!v) return nullptr;
  if (!v->IsInitialized() || v->IsType<StepScopes>()) return v->GetMutable<StepScopes>();
  return nullptr;
}

Status ConditionalBlock(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(bool cond, ReadCondition(ctx));
  StepScopes* ss = StepScopesOf(ctx.OutputVariable("Scope"));
  if (!ss) return ctx.Error("output 'Scope' must be a STEP_SCOPES variable");
  ss->ran = cond;
  if (!cond) return Status::OK();
  Scope* here = ctx.scope();
  if (ss->parent != here || !ss->step) {
    if (ss->parent && ss->step && ss->parent == here) here->DeleteScope(ss->step);
    ss->parent = here;
    ss->step = &here->NewScope();
  }
  return ctx.RunBlock(ctx.Attr<BlockIndex>("sub_block").idx, ss->step);
}

Status ConditionalBlockGrad(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(bool cond, ReadCondition(ctx));
  StepScopes* ss = StepScopesOf(ctx.InputVariable("Scope"));
  if (!ss) return ctx.Error("input 'Scope' must be the forward op's STEP_SCOPES variable");
  if (cond && (!ss->ran || !ss->step))
    return ctx.Error(
        "the condition holds but the forward conditional_block did not run its "
        "sub-block in this scope (the condition changed between the forward op and "
        "its gradient, or the forward op did not run)");
  if (cond) LOOM_RETURN_IF_ERROR(ctx.RunBlock(ctx.Attr<BlockIndex>("sub_block").idx, ss->step));
  for (int i = 0; i < ctx.OutputSize("Input@GRAD"); ++i) {
    Tensor* out = ctx.OutputOrNull("Input@GRAD", i);
    if (!out) continue;
    const Tensor& x = ctx.Input("Input", i);
    // The sub-block declares the gradient of each input it reaches as its own variable, under
    // the input's gradient name (the op's output may be a renamed contribution).
    const Variable* g =
        cond ? ss->step->FindLocalVar(GradVarName(ctx.InputVarName("Input", i))) : nullptr;
    if (g && g->IsType<Tensor>() && g->Get<Tensor>().initialized()) {
      const Tensor& gt = g->Get<Tensor>();
      if (gt.dims() != x.dims())
        return ctx.Error("the gradient block computed dims ", gt.dims().ToString(),
                         " for the gradient of '", ctx.InputVarName("Input", i),
                         "', which has dims ", x.dims().ToString());
      CopyOnPlace(ctx, gt, out);
    } else {
      ZerosOnPlace(ctx, x, out);
    }
  }
  return Status::OK();
}

// conditional_block's gradient: the builder (AppendBackward) sets sub_block to the gradient
// block it made from the forward sub-block and drops the outputs nobody needs.
std::vector<proto::OpDesc> ConditionalBlockGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("conditional_block_grad");
  op.SetInput("Cond", fwd.Input("Cond"));
  op.SetInput("Input", fwd.Input("Input"));
  std::vector<std::string> out_grads, in_grads;
  for (const auto& o : fwd.Output("Out")) out_grads.push_back(GradVarName(o));
  for (const auto& x : fwd.Input("Input")) in_grads.push_back(GradVarName(x));
  op.SetInput("Out@GRAD", out_grads);
  op.SetInput("Scope", fwd.Output("Scope"));
  op.SetOutput("Input@GRAD", in_grads);
  if (auto a = fwd.GetAttr("sub_block"); a.ok()) op.SetAttr("sub_block", a.value());
  return {g};
}

#define LOOM_CONDITION_KERNELS(FN)           \
  .Kernel(Place::kCPU, proto::BOOL, FN)      \
      .Kernel(Place::kCPU, proto::INT32, FN) \
      .Kernel(Place::kCPU, proto::INT64, FN) \
      .Kernel(Place::kCPU, proto::FP32, FN)  \
      .Kernel(Place::kCPU, proto::FP64, FN)

LOOM_REGISTER_OP(conditional_block)
    .Doc(
        "Runs sub_block when Cond (one element: bool, or a number, true when non-zero) holds, "
        "in a scope below the op's; otherwise leaves Out unchanged. Input lists the variables "
        "of enclosing blocks the sub-block reads, Out those it writes.")
    .Input("Cond", "the condition, one element")
    .Input("Input", "variables of enclosing blocks the sub-block reads", /*duplicable=*/true,
           /*dispensable=*/true)
    .Output("Out", "variables of enclosing blocks the sub-block writes", /*duplicable=*/true,
            /*dispensable=*/true)
    .Output("Scope", "STEP_SCOPES variable: the scope the sub-block ran in, for the gradient")
    .RequiredAttr<BlockIndex>("sub_block", "the block to run")
    .GradMaker(ConditionalBlockGradMaker)
    .KernelDtypeFrom("Cond") LOOM_CONDITION_KERNELS(ConditionalBlock);

LOOM_REGISTER_OP(conditional_block_grad)
    .Doc(
        "Gradient of conditional_block: when Cond holds, runs the gradient block in the scope "
        "the forward sub-block ran in and copies out the gradients of Input; otherwise writes "
        "zeros.")
    .Input("Cond", "the forward condition")
    .Input("Input", "the forward Input", /*duplicable=*/true, /*dispensable=*/true)
    .Input("Out@GRAD", "gradients of the forward Out that exist", /*duplicable=*/true,
           /*dispensable=*/true)
    .Input("Scope", "the forward op's STEP_SCOPES variable")
    .Output("Input@GRAD", "gradients of Input", /*duplicable=*/true, /*dispensable=*/true)
    .RequiredAttr<BlockIndex>("sub_block", "the gradient block")
    .InferShape(GradInferShape)
    .KernelDtypeFrom("Cond") LOOM_CONDITION_KERNELS(ConditionalBlockGrad);

#if LOOM_CUDA_ENABLED
#define LOOM_CONDITION_CUDA_KERNELS(OP, FN)   \
  LOOM_REGISTER_KERNEL(OP, kCUDA, BOOL, FN);  \
  LOOM_REGISTER_KERNEL(OP, kCUDA, INT32, FN); \
  LOOM_REGISTER_KERNEL(OP, kCUDA, INT64, FN); \
  LOOM_REGISTER_KERNEL(OP, kCUDA, FP32, FN);  \
  LOOM_REGISTER_KERNEL(OP, kCUDA, FP64, FN)
LOOM_CONDITION_CUDA_KERNELS(conditional_block, ConditionalBlock);
LOOM_CONDITION_CUDA_KERNELS(conditional_block_grad, ConditionalBlockGrad);
#endif

}  // namespace
}  // namespace loom::ops
