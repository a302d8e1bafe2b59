#include "transpiler/gradients.h"

#include <map>
#include <set>

#include "framework/op_role.h"
#include "framework/verifier.h"

namespace loom::transpiler {
namespace {

bool Writes(const OpDesc& op, const std::string& var) {
  for (const auto& v : op.OutputArgumentNames())
    if (v == var) return true;
  return false;
}

std::vector<std::string> RoleVar(const OpDesc& op) {
  return op.Attr<std::vector<std::string>>(kOpRoleVarAttr, {});
}

// The index of the nearest block, from `block` up, that declares `name` (-1: none).
int DeclaringBlock(const BlockDesc* block, const std::string& name) {
  for (const BlockDesc* b = block; b; b = b->Parent())
    if (b->HasVar(name)) return b->Idx();
  return -1;
}

// A sub-block (control flow) may compute the gradient as its own variable (a gradient block
// does; its control-flow op copies it out in block 0, where it is synchronized), but one that
// writes block 0's gradient itself would update it unsynchronized.
Status CheckNotWrittenInSubBlocks(const ProgramDesc& main, const OptimizedParam& p) {
  for (int b = 1; b < main.NumBlocks(); ++b) {
    const BlockDesc* sub = main.Block(b);
    if (DeclaringBlock(sub, p.grad) > 0) continue;
    for (int j = 0; j < sub->OpSize(); ++j)
      if (Writes(sub->Op(j), p.grad))
        return Unimplemented("parameter '", p.param, "': its gradient '", p.grad,
                             "' of block 0 is written inside sub-block ", b, " (",
                             OpLocation(sub->Op(j).Type(), b, j),
                             "); the transpiler synchronizes gradients of block 0 only");
  }
  return Status::OK();
}

std::string FindBatchVar(const BlockDesc& block) {
  std::set<std::string> written;
  for (int i = 0; i < block.OpSize(); ++i) {
    OpDesc op = block.Op(i);
    for (const auto& name : op.InputArgumentNames()) {
      VarDesc v = block.FindVar(name);
      if (!written.count(name) && v && !v.Persistable() &&
          v.Type() == proto::VarType::DENSE_TENSOR && v.Dims().size() > 0 && v.Dims()[0] < 0)
        return name;
    }
    for (const auto& name : op.OutputArgumentNames()) written.insert(name);
  }
  return "";
}

}  // namespace

const OptimizedParam* GradientAnalysis::Find(const std::string& param) const {
  for (const auto& p : params)
    if (p.param == param) return &p;
  return nullptr;
}

bool IsUpdateOp(const OpDesc& op) {
  return (op.Role() & kOpRoleOptimize) && op.HasInput("Param") && op.HasInput("Grad") &&
         !op.Input("Param").empty();
}

std::pair<std::string, std::string> UpdatedPair(const OpDesc& op) {
  auto rv = RoleVar(op);
  if (rv.size() == 2) return {rv[0], rv[1]};
  auto grad = op.Input("Grad");
  return {op.Input("Param")[0], grad.empty() ? GradVarName(op.Input("Param")[0]) : grad[0]};
}

int FindUpdateOp(const BlockDesc& block, const std::string& param) {
  for (int i = 0; i < block.OpSize(); ++i) {
    OpDesc op = block.Op(i);
    if (IsUpdateOp(op) && UpdatedPair(op).first == param) return i;
  }
  return -1;
}

int LastGradWriter(const BlockDesc& block, const std::string& grad, int end) {
  int last = -1;
  if (end < 0) end = block.OpSize();
  for (int i = 0; i < end; ++i) {
    OpDesc op = block.Op(i);
    if ((op.Role() & kOpRoleBackward) && Writes(op, grad)) last = i;
  }
  return last;
}

StatusOr<bool> DensifySparseGradients(ProgramDesc* main, const std::set<std::string>& keep) {
  bool changed = false;
  for (int b = 0; b < main->NumBlocks(); ++b) {
    BlockDesc* block = main->Block(b);
    for (int i = 0; i < block->OpSize(); ++i) {
      OpDesc op = block->Op(i);
      if (op.Type() != "lookup_table_grad" || !op.Attr<bool>("is_sparse", false)) continue;
      if (op.HasInput("W") && keep.count(op.Input("W")[0])) continue;
      op.SetAttr("is_sparse", false);
      changed = true;
    }
  }
  if (!changed) return false;
  for (int b = 0; b < main->NumBlocks(); ++b) {
    BlockDesc* block = main->Block(b);
    for (int i = 0; i < block->OpSize(); ++i)
      LOOM_RETURN_IF_ERROR(InferVarTypeAtCompileTime(block, i));
  }
  return true;
}

StatusOr<GradientAnalysis> AnalyzeGradients(const ProgramDesc& main) {
  GradientAnalysis out;
  const BlockDesc* block = main.GlobalBlock();
  std::set<std::string> seen;
  for (int i = 0; i < block->OpSize(); ++i) {
    OpDesc op = block->Op(i);
    if (!IsUpdateOp(op)) continue;
    OptimizedParam p;
    std::tie(p.param, p.grad) = UpdatedPair(op);
    if (!seen.insert(p.param).second)
      return InvalidArgument("parameter '", p.param, "' is updated by more than one optimizer op (",
                             OpLocation(op.Type(), 0, i), " is the second)");
    LOOM_RETURN_IF_ERROR(CheckNotWrittenInSubBlocks(main, p));
    if (LastGradWriter(*block, p.grad, i) < 0)
      return InvalidArgument("parameter '", p.param, "': ", OpLocation(op.Type(), 0, i),
                             " updates it but no backward op writes its gradient '", p.grad,
                             "' (is the loss on a branch that does not use it?)");
    VarDesc v = block->FindVar(p.param);
    if (!v) return NotFound("parameter '", p.param, "' has no VarDesc in block 0");
    DDim d = v.Dims();
    if (d.numel() < 0)
      return InvalidArgument("parameter '", p.param, "' has dims ", d.ToString(),
                             ": parameters need static dims");
    p.dtype = v.Dtype();
    p.bytes = d.numel() * static_cast<int64_t>(SizeOf(p.dtype));
    out.params.push_back(p);
  }
  for (const VarDesc& v : block->AllVars())
    if (v.IsParameter() && !seen.count(v.Name())) out.frozen.push_back(v.Name());
  out.batch_var = FindBatchVar(*block);
  return out;
}

std::vector<std::string> ServedParams(const OpDesc& op) {
  auto rv = RoleVar(op);
  std::vector<std::string> params;
  for (size_t i = 0; i + 1 < rv.size(); i += 2) params.push_back(rv[i]);
  return params;
}

bool IsPartialSum(const OpDesc& op) {
  if (op.Type() != "sum" || !(op.Role() & kOpRoleOptimize)) return false;
  auto served = ServedParams(op);
  return std::set<std::string>(served.begin(), served.end()).size() > 1;
}

StatusOr<bool> TagOptimizerOps(ProgramDesc* main, const GradientAnalysis& grads) {
  BlockDesc* block = main->GlobalBlock();
  std::map<std::string, const OptimizedParam*> of_var;  // param, grad and temporaries
  for (const auto& p : grads.params) of_var[p.param] = of_var[p.grad] = &p;
  bool changed = false;
  auto tag = [&](OpDesc& op, const std::vector<std::string>& pairs) {
    if (RoleVar(op) == pairs) return;
    op.SetAttr(kOpRoleVarAttr, pairs);
    changed = true;
  };
  for (int i = 0; i < block->OpSize(); ++i) {
    OpDesc op = block->Op(i);
    if (!(op.Role() & kOpRoleOptimize)) continue;
    std::set<const OptimizedParam*> served;
    auto ins = op.InputArgumentNames();
    auto outs = op.OutputArgumentNames();
    if (IsUpdateOp(op)) {
      served.insert(grads.Find(UpdatedPair(op).first));
    } else {
      for (const auto* names : {&ins, &outs})
        for (const auto& n : *names)
          if (auto it = of_var.find(n); it != of_var.end()) served.insert(it->second);
    }
    if (served.empty()) {
      // Serves no parameter: a stale pair would bind it to one (SplitPerRank).
      if (op.HasAttr(kOpRoleVarAttr)) {
        op.RemoveAttr(kOpRoleVarAttr);
        changed = true;
      }
      continue;
    }
    if (served.size() == 1) {
      const OptimizedParam* p = *served.begin();
      tag(op, {p->param, p->grad});
      for (const auto& n : outs) of_var.emplace(n, p);  // a temporary of this parameter
      continue;
    }
    // A sum of per-parameter terms (not raw parameters or gradients) can be split by owner.
    std::vector<std::string> pairs;
    if (op.Type() == "sum" && outs.size() == 1 && !of_var.count(outs[0])) {
      for (const auto& n : op.Input("X")) {
        auto it = of_var.find(n);
        if (it == of_var.end() || n == it->second->param || n == it->second->grad) {
          pairs.clear();
          break;
        }
        pairs.push_back(it->second->param);
        pairs.push_back(it->second->grad);
      }
    }
    if (pairs.empty()) {
      std::string list;
      for (const auto& p : grads.params)
        if (served.count(&p)) list += (list.empty() ? "'" : ", '") + p.param + "'";
      return InvalidArgument(OpLocation(op.Type(), 0, i), " combines the gradients of ", list,
                             ", which owner mode updates on different ranks; only a sum of "
                             "per-parameter terms (clipping by global norm) can be split; use "
                             "mode allreduce");
    }
    tag(op, pairs);  // its output serves every parameter
  }
  return changed;
}

}  // namespace loom::transpiler
