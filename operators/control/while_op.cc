// while and its gradient: run a sub-block for as long as a one-element bool condition holds
// (Fluid's While; Python's layers.while_loop). The sub-block updates the condition and the
// variables it carries from one iteration to the next by writing them in the enclosing block.
//
// Training runs each iteration in a scope of its own below the op's (kept in the StepScopes
// output) and, after the iteration, leaves there a copy of every carried variable (an input
// that the block also writes) as it was when the iteration began: that is what the
// iteration's gradient reads. while_grad runs the one-iteration gradient block AppendBackward
// built in those scopes, last iteration first: each iteration's carried gradients become the
// seeds ("O@GRAD@SEED") of the iteration before, the gradients of the other inputs
// (parameters) are summed over the iterations, and the first iteration's carried gradients
// are the gradients of the values the loop started from. With is_test one scope serves every
// iteration and nothing is kept.
#include <algorithm>
#include <map>
#include <set>

#include "framework/backward.h"
#include "framework/scope.h"
#include "framework/tensor_array.h"
#include "loom/config.h"
#include "operators/common.h"
#include "operators/control/control_util.h"

namespace loom::ops {
namespace {

// What while keeps in its StepScopes output.
struct WhileSteps {
  Scope* parent = nullptr;    // the scope the op ran in; the steps are below it
  std::vector<Scope*> steps;  // one per iteration, in order
};

StatusOr<bool> ReadBool(const KernelContext& ctx, const std::string& slot) {
  const Tensor& c = ctx.Input(slot);
  if (c.numel() != 1 || c.dtype() != proto::BOOL)
    return ctx.Error(slot, " (var '", ctx.InputVarName(slot),
                     "') must be a one-element bool, it is ", DataTypeName(c.dtype()),
                     c.dims().ToString());
  if (c.place().is_cpu()) return c.data<bool>()[0];
  ctx.device().Wait();
  Tensor host;
  TensorCopy(c, Place::CPU(), &host);
  return host.data<bool>()[0];
}

WhileSteps* StepsOf(Variable* v) {
  if (!v) return nullptr;
  if (!v->IsInitialized() || v->IsType<WhileSteps>()) return v->GetMutable<WhileSteps>();
  return nullptr;
}

std::vector<std::string> SlotNames(const KernelContext& ctx, const std::string& slot) {
  std::vector<std::string> names;
  for (int i = 0; i < ctx.InputSize(slot); ++i) names.push_back(ctx.InputVarName(slot, i));
  return names;
}

void DropSteps(WhileSteps* ws) {
  ws->parent->DeleteScopes(ws->steps);
  ws->steps.clear();
}

Status While(const KernelContext& ctx) {
  WhileSteps* ws = StepsOf(ctx.OutputVariable("StepScopes"));
  if (!ws) return ctx.Error("output 'StepScopes' must be a STEP_SCOPES variable");
  Scope* here = ctx.scope();
  if (ws->parent == here) DropSteps(ws);
  ws->steps.clear();  // steps of another scope belong to it
  ws->parent = here;
  const int block = ctx.Attr<BlockIndex>("sub_block").idx;
  const bool is_test = ctx.Attr<bool>("is_test");
  const int64_t max_iterations = ctx.Attr<int64_t>("max_iterations");
  // Carried: read and written by the block.
  std::vector<std::string> carried;
  const std::vector<std::string> xs = SlotNames(ctx, "X");
  for (int i = 0; i < ctx.OutputSize("Out"); ++i) {
    std::string o = ctx.OutputVarName("Out", i);
    if (std::find(xs.begin(), xs.end(), o) != xs.end()) carried.push_back(o);
  }
  Scope* test_scope = nullptr;
  Status st;
  for (int64_t t = 0;; ++t) {
    StatusOr<bool> cond = ReadBool(ctx, "Condition");
    if (!cond.ok()) {
      st = cond.status();
      break;
    }
    if (!cond.value()) break;
    if (t >= max_iterations) {
      st = ctx.Error("the condition '", ctx.InputVarName("Condition"), "' still holds after ",
                     max_iterations, " iterations (attribute max_iterations)");
      break;
    }
    if (is_test) {
      if (!test_scope) test_scope = &here->NewScope();
      st = ctx.RunBlock(block, test_scope);
      if (!st.ok()) break;
      continue;
    }
    Scope* step = &here->NewScope();
    ws->steps.push_back(step);
    // The carried values this iteration starts from: the block overwrites them.
    if (!ctx.place().is_cpu()) ctx.device().Wait();
    std::vector<std::pair<std::string, Tensor>> start;
    for (const auto& name : carried) {
      const Variable* v = here->FindVar(name);
      if (!v || !v->IsType<Tensor>() || !v->Get<Tensor>().initialized()) continue;
      Tensor copy;
      TensorCopy(v->Get<Tensor>(), v->Get<Tensor>().place(), &copy);
      start.emplace_back(name, std::move(copy));
    }
    st = ctx.RunBlock(block, step);
    if (!st.ok()) break;
    for (auto& [name, value] : start) *step->Var(name)->GetMutable<Tensor>() = std::move(value);
  }
  if (test_scope) here->DeleteScope(test_scope);
  return st;
}

const Tensor* LocalTensor(Scope* s, const std::string& name) {
  const Variable* v = s->FindLocalVar(name);
  return v && v->IsType<Tensor>() && v->Get<Tensor>().initialized() ? &v->Get<Tensor>() : nullptr;
}

Status WhileGrad(const KernelContext& ctx) {
  WhileSteps* ws = StepsOf(ctx.InputVariable("StepScopes"));
  if (!ws || ws->parent != ctx.scope())
    return ctx.Error(
        "input 'StepScopes' holds no iterations of the forward while in this scope "
        "(run the forward op first; with is_test it keeps none)");
  const int block = ctx.Attr<BlockIndex>("sub_block").idx;
  const auto& carried_list = ctx.Attr<std::vector<std::string>>("carried");
  const std::set<std::string> carried(carried_list.begin(), carried_list.end());
  const std::vector<std::string> xs = SlotNames(ctx, "X");
  const int steps = static_cast<int>(ws->steps.size());

  // The gradients flowing into the last iteration's outputs, by output name; the gradient
  // block reads them under "<name>@GRAD@SEED".
  std::map<std::string, Tensor> seeds;
  // Arrays: one gradient array threads through the iterations, last first: each iteration's
  // gradient block starts from what the later ones left (reads of element t add into it,
  // writes of element t read it), so an array read or written in the loop needs no per-step
  // copies. array_seeds: the gradients of the arrays the loop writes.
  std::map<std::string, TensorArray> array_seeds, array_grads;
  for (int i = 0; i < ctx.InputSize("Out@GRAD"); ++i) {
    std::string g = ctx.InputVarName("Out@GRAD", i);
    size_t at = g.rfind(kGradSuffix);
    if (at == std::string::npos) return ctx.Error("Out@GRAD entry '", g, "' is not a gradient");
    const Variable* gv = ctx.InputVariable("Out@GRAD", i);
    if (gv && gv->IsType<TensorArray>()) {
      array_seeds[g.substr(0, at)] = gv->Get<TensorArray>();
      continue;
    }
    seeds[g.substr(0, at)] = ctx.Input("Out@GRAD", i);
  }
  std::set<std::string> array_xs;
  for (int i = 0; i < static_cast<int>(xs.size()); ++i) {
    const Variable* v = ctx.InputVariable("X", i);
    if (v && v->IsType<TensorArray>()) array_xs.insert(xs[i]);
  }
  for (const auto& x : array_xs)
    if (array_seeds.count(x)) array_grads[x] = array_seeds[x];
  auto mutable_array = [](Variable* v) {
    if (!v->IsType<TensorArray>()) v->Clear();  // an empty tensor the shape pass made
    return v->GetMutable<TensorArray>();
  };
  std::map<std::string, Tensor> sums;       // non-carried inputs: summed over the iterations
  std::map<std::string, Tensor> carried_g;  // carried inputs: the gradient of iteration t's start
  for (int t = steps - 1; t >= 0; --t) {
    Scope* s = ws->steps[t];
    for (const auto& [name, value] : seeds) {
      Tensor* seed = s->Var(GradVarName(name) + kSeedSuffix)->GetMutable<Tensor>();
      if (t == steps - 1) {
        *seed = value;  // shares the enclosing gradient (only read)
      } else if (carried.count(name) && carried_g.count(name)) {
        *seed = carried_g[name];
      } else {
        ZerosOnPlace(ctx, value, seed);  // overwritten later: no gradient reaches it
      }
    }
    for (const auto& [name, value] : array_seeds) {
      auto it = array_grads.find(name);
      *mutable_array(s->Var(GradVarName(name) + kSeedSuffix)) =
          it != array_grads.end() ? it->second : value;
    }
    for (const auto& [name, value] : array_grads) *mutable_array(s->Var(GradVarName(name))) = value;
    LOOM_RETURN_IF_ERROR(ctx.RunBlock(block, s));
    for (const auto& x : array_xs) {
      const Variable* g = s->FindLocalVar(GradVarName(x));
      if (g && g->IsType<TensorArray>()) array_grads[x] = g->Get<TensorArray>();
    }
    carried_g.clear();
    for (const auto& x : xs) {
      const Tensor* g = LocalTensor(s, GradVarName(x));
      if (!g) continue;
      if (carried.count(x)) {
        carried_g[x] = *g;  // the block reruns in another scope: this one keeps the buffer
      } else if (sums.count(x)) {
        LOOM_RETURN_IF_ERROR(AddOnPlace(ctx, *g, &sums[x]));
      } else {
        CopyOnPlace(ctx, *g, &sums[x]);
      }
    }
  }
  for (int i = 0; i < ctx.OutputSize("X@GRAD"); ++i) {
    const std::string& x = xs.at(i);
    if (array_xs.count(x)) {
      if (Variable* v = ctx.OutputVariable("X@GRAD", i)) *mutable_array(v) = array_grads[x];
      continue;
    }
    Tensor* out = ctx.OutputOrNull("X@GRAD", i);
    if (!out) continue;
    const Tensor* value = nullptr;
    if (carried.count(x)) {
      if (carried_g.count(x))
        value = &carried_g[x];
      else if (steps == 0 && seeds.count(x))
        value = &seeds[x];  // no iteration: identity
    } else if (sums.count(x)) {
      value = &sums[x];
    }
    if (value) {
      CopyOnPlace(ctx, *value, out);
    } else {
      ZerosOnPlace(ctx, ctx.Input("X", i), out);
    }
  }
  return Status::OK();
}

// while's gradient: AppendBackward sets sub_block to the one-iteration gradient block and
// drops the input gradients nobody needs.
std::vector<proto::OpDesc> WhileGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("while_grad");
  op.SetInput("X", fwd.Input("X"));
  std::vector<std::string> out_grads, in_grads;
  for (const auto& o : fwd.Output("Out")) out_grads.push_back(GradVarName(o));
  for (const auto& x : fwd.Input("X")) in_grads.push_back(GradVarName(x));
  op.SetInput("Out@GRAD", out_grads);
  op.SetInput("StepScopes", fwd.Output("StepScopes"));
  op.SetOutput("X@GRAD", in_grads);
  if (auto v = fwd.GetAttr("sub_block"); v.ok()) op.SetAttr("sub_block", v.value());
  std::vector<std::string> carried;
  const auto xs = fwd.Input("X");
  for (const auto& o : fwd.Output("Out"))
    if (std::find(xs.begin(), xs.end(), o) != xs.end()) carried.push_back(o);
  op.SetAttr("carried", carried);
  return {g};
}

LOOM_REGISTER_OP(while)
    .Doc(
        "Runs sub_block while Condition (a one-element bool the block updates) holds. X lists "
        "the variables of enclosing blocks the block reads, Out those it writes; those in both "
        "are the loop state (each iteration starts from the previous one's values).")
    .Input("X", "variables of enclosing blocks the sub-block reads", /*duplicable=*/true,
           /*dispensable=*/true)
    .Input("Condition", "one-element bool; the loop runs while it holds")
    .Output("Out", "variables of enclosing blocks the sub-block writes", /*duplicable=*/true,
            /*dispensable=*/true)
    .Output("StepScopes", "STEP_SCOPES variable: one scope per iteration, for the gradient")
    .RequiredAttr<BlockIndex>("sub_block", "the loop body")
    .Attr<bool>("is_test", false, "inference: keep no iterations for a gradient")
    .Attr<int64_t>("max_iterations", 1000000,
                   "an error, not a hang, when the condition still holds after this many")
    .GradMaker(WhileGradMaker)
    .RepeatsSubBlock()
    .KernelDtypeFrom("Condition")
    .Kernel(Place::kCPU, proto::BOOL, While);

LOOM_REGISTER_OP(while_grad)
    .Doc(
        "Gradient of while: runs the one-iteration gradient block in each iteration's scope, "
        "last first, passing the carried gradients back and summing the others.")
    .Input("X", "the forward X", /*duplicable=*/true, /*dispensable=*/true)
    .Input("Out@GRAD", "gradients of the forward Out that exist", /*duplicable=*/true,
           /*dispensable=*/true)
    .Input("StepScopes", "the forward op's STEP_SCOPES variable")
    .Output("X@GRAD", "gradients of X", /*duplicable=*/true, /*dispensable=*/true)
    .RequiredAttr<BlockIndex>("sub_block", "the one-iteration gradient block")
    .Attr<std::vector<std::string>>("carried", {},
                                    "the forward's loop state: names in both X and Out")
    .InferShape(GradInferShape)
    .KernelDtypeFrom("StepScopes")
    .Kernel(Place::kCPU, proto::FP32, WhileGrad);

#if LOOM_CUDA_ENABLED
LOOM_REGISTER_KERNEL(while, kCUDA, BOOL, While);
LOOM_REGISTER_KERNEL(while_grad, kCUDA, FP32, WhileGrad);
#endif

}  // namespace
}  // namespace loom::ops
