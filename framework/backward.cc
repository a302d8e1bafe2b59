#include "framework/backward.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "framework/op_registry.h"
#include "framework/verifier.h"

namespace loom {

namespace {

constexpr const char* kRenameInfix = "@RENAME@";

bool EndsWithGrad(const std::string& s) {
  size_t n = std::char_traits<char>::length(kGradSuffix);
  return s.size() > n && s.compare(s.size() - n, n, kGradSuffix) == 0;
}

std::string ForwardName(const std::string& grad) {
  return grad.substr(0, grad.size() - std::char_traits<char>::length(kGradSuffix));
}

// Builds the backward section of a block: the grad ops of fwd's ops, in reverse, into out.
// For block 0, out is block 0 itself (after the forward ops). For the sub-block of a
// control-flow op (an op with a `sub_block` attribute), out is a new gradient block whose parent
// is the sub-block: the op's gradient runs it in the very scope the sub-block ran in, so it
// reads the forward temporaries there and the gradients of the op's outputs from enclosing
// scopes. The gradients it computes are declared in the sub-block, so they live in that scope
// too (shadowing the enclosing gradients of the op's inputs, which the gradient op copies out)
// and a nested control-flow op's gradient block, run in a scope below, sees them.
class BackwardBuilder {
 public:
  BackwardBuilder(BlockDesc* fwd, BlockDesc* out, std::set<std::string> no_grad,
                  std::unordered_set<std::string> needs_grad = {}, bool loop = false)
      : fwd_(fwd),
        block_(out),
        no_grad_(std::move(no_grad)),
        needs_grad_(std::move(needs_grad)),
        loop_(loop) {
    // Where each variable is written among the forward ops (before any grad op is appended).
    for (int i = 0; i < fwd_->OpSize(); ++i)
      for (const auto& o : fwd_->Op(i).OutputArgumentNames()) writers_[o].push_back(i);
  }

  // The gradient block of a sub-block. seeds: the gradients of the variables the sub-block
  // writes for enclosing blocks. They are only read here: under their own names (they exist
  // outside), or in a loop under "<seed>@SEED", declared in the sub-block, which the grad op
  // fills for each iteration.
  Status BuildSubBlock(const std::vector<std::string>& seeds) {
    for (const auto& s : seeds) {
      std::string read = s;
      if (loop_) {
        read = s + kSeedSuffix;
        DeclareGradVar(s, ForwardName(s));
        DeclareLike(read, s);
      }
      contributions_[s] = {read};
      external_.insert(read);
    }
    for (int i = 0; i < fwd_->OpSize(); ++i) MarkOutputsOf(fwd_->Op(i));
    for (int i = fwd_->OpSize() - 1; i >= 0; --i) LOOM_RETURN_IF_ERROR(ProcessForwardOp(i));
    // Every gradient the block computes ends under its own name, where the grad op reads it: a
    // sum of its pieces, or its one piece renamed back (a piece written after the name was
    // ended has a fresh name).
    for (auto& kv : std::map<std::string, std::vector<std::string>>(contributions_.begin(),
                                                                    contributions_.end())) {
      const std::string& grad = kv.first;
      const auto& pieces = kv.second;
      if (pieces.size() >= 2) {
        FlushSum(grad);
      } else if (pieces.size() == 1 && pieces[0] != grad && !external_.count(pieces[0])) {
        for (int i = block_->OpSize() - 1; i >= 0; --i) {
          OpDesc op = block_->Op(i);
          const auto outs = op.OutputArgumentNames();
          if (std::find(outs.begin(), outs.end(), pieces[0]) == outs.end()) continue;
          op.RenameOutput(pieces[0], grad);
          break;
        }
        DeclareGradVar(grad, ForwardName(grad));
        contributions_[grad] = {grad};
      }
    }
    return Status::OK();
  }

  // Whether the gradient ops written so far produce grad (a gradient block's result).
  bool Produces(const std::string& grad) const {
    auto it = contributions_.find(grad);
    return it != contributions_.end() &&
           !(it->second.size() == 1 && external_.count(it->second[0]));
  }

  StatusOr<std::vector<ParamGrad>> Build(const std::string& loss) {
    VarDesc loss_var = block_->FindVar(loss);
    if (!loss_var) return NotFound("AppendBackward: loss var '", loss, "' is not in block 0");
    if (!IsFloatingPoint(loss_var.Dtype()))
      return InvalidArgument("AppendBackward: loss var '", loss, "' is ",
                             DataTypeName(loss_var.Dtype()), ", must be floating point");
    DDim loss_dims = loss_var.Dims();
    if (loss_dims.known() && loss_dims.numel() != 1)
      return InvalidArgument("AppendBackward: loss var '", loss, "' has dims ",
                             loss_dims.ToString(), ", must hold one element (reduce it with mean)");
    int loss_op = -1;
    for (int i = 0; i < block_->OpSize(); ++i) {
      for (const auto& out : block_->Op(i).OutputArgumentNames())
        if (out == loss) loss_op = i;
    }
    if (loss_op < 0) return NotFound("AppendBackward: no op writes the loss var '", loss, "'");
    OpDesc lop = block_->Op(loss_op);
    lop.SetRole(lop.Role() | kOpRoleLoss);

    MarkVarsNeedingGrad(loss_op);
    if (!needs_grad_.count(loss))
      return InvalidArgument("AppendBackward: loss '", loss,
                             "' does not depend on any trainable variable");

    // Seed: d loss / d loss = 1.
    std::string loss_grad = GradVarName(loss);
    std::vector<int64_t> shape;
    for (int64_t d : loss_dims) shape.push_back(d < 0 ? 1 : d);
    if (shape.empty()) shape.push_back(1);
    proto::OpDesc seed;
    OpDesc s(&seed);
    s.SetType("fill_constant");
    s.SetOutput("Out", {loss_grad});
    s.SetAttr("shape", shape);
    s.SetAttr("value", 1.0f);
    s.SetAttr("dtype", static_cast<int>(loss_var.Dtype()));
    s.SetRole(kOpRoleBackward | kOpRoleLoss);
    const int first_grad_op = block_->OpSize();
    Emit(seed);
    DeclareGradVar(loss_grad, loss);
    contributions_[loss_grad] = {loss_grad};

    for (int i = loss_op; i >= 0; --i) LOOM_RETURN_IF_ERROR(ProcessForwardOp(i));
    for (auto& kv : std::map<std::string, std::vector<std::string>>(contributions_.begin(),
                                                                    contributions_.end()))
      FlushSum(kv.first);
    // Gradients whose type follows their op (an embedding's sparse gradient, a sum of them),
    // in program order, once every gradient is declared.
    for (int i = first_grad_op; i < block_->OpSize(); ++i)
      LOOM_RETURN_IF_ERROR(InferVarTypeAtCompileTime(block_, i));

    // Parameters: persistable float vars with gradients.
    std::vector<ParamGrad> result;
    for (const auto& [grad, writer] : final_writer_order_) {
      std::string param = ForwardName(grad);
      VarDesc pv = block_->FindVarRecursive(param);
      if (!pv || !pv.Persistable()) continue;
      result.push_back(ParamGrad{param, grad});
      OpDesc op = block_->Op(writer);
      auto role_var = op.Attr<std::vector<std::string>>(kOpRoleVarAttr, {});
      role_var.push_back(param);
      role_var.push_back(grad);
      op.SetAttr(kOpRoleVarAttr, role_var);
    }
    return result;
  }

 private:
  bool Trainable(const VarDesc& v) const {
    return v && IsFloatingPoint(v.Dtype()) && !v.StopGradient() && !no_grad_.count(v.Name());
  }

  void MarkVarsNeedingGrad(int last_op) {
    std::unordered_set<std::string> produced;
    for (int i = 0; i <= last_op; ++i)
      for (const auto& o : block_->Op(i).OutputArgumentNames()) produced.insert(o);
    for (const VarDesc& v : block_->AllVars())
      if (Trainable(v) && (v.Persistable() || !produced.count(v.Name())))
        needs_grad_.insert(v.Name());
    for (int i = 0; i <= last_op; ++i) MarkOutputsOf(block_->Op(i));
  }

  // A differentiable op with an input that needs a gradient: its float outputs need one too.
  void MarkOutputsOf(const OpDesc& op) {
    const OpInfo* info = OpRegistry::Global().Find(op.Type());
    if (!info || !info->grad_maker) return;
    bool any = false;
    for (const auto& in : op.InputArgumentNames()) any |= needs_grad_.count(in) > 0;
    if (!any) return;
    for (const auto& out : op.OutputArgumentNames())
      if (Trainable(fwd_->FindVarRecursive(out))) needs_grad_.insert(out);
  }

  Status ProcessForwardOp(int index) {
    OpDesc fwd = fwd_->Op(index);
    bool has_out_grad = false;
    for (const auto& out : fwd.OutputArgumentNames())
      has_out_grad |= contributions_.count(GradVarName(out)) > 0;
    bool wants_in_grad = false;
    for (const auto& in : fwd.InputArgumentNames()) wants_in_grad |= needs_grad_.count(in) > 0;
    // A write ends the gradient of the value it overwrites: contributions made afterwards (by
    // the grad ops of earlier readers, or by this op's own for an input it overwrites in place,
    // such as a while's loop state) belong to the previous value. A conditional_block may
    // leave its outputs as they were, so it ends nothing (its alternatives all read them).
    const OpInfo* fwd_info = OpRegistry::Global().Find(fwd.Type());
    bool conditional = fwd.HasAttr("sub_block") && !(fwd_info && fwd_info->repeats_sub_block);
    // Outside a loop body, writing one element of an array leaves the others: their gradient
    // goes on to the earlier writes (in a loop body, the array's gradient from later
    // iterations comes in as a seed, and the block's own contribution starts afresh).
    const bool element_write = fwd.Type() == "write_to_array" && !loop_;
    if (!conditional && !element_write)
      for (const auto& out : fwd.OutputArgumentNames()) kill_.push_back(GradVarName(out));
    if (!has_out_grad || !wants_in_grad) {
      Kill();
      return Status::OK();
    }
    const OpInfo* info = OpRegistry::Global().Find(fwd.Type());
    std::string where = OpLocation(fwd.Type(), fwd_->Idx(), index);
    if (!info) return NotFound(where, ": unknown op type");
    if (!info->grad_maker)
      return Unimplemented("AppendBackward: ", where,
                           " has no gradient, but the loss depends on its inputs through it; "
                           "mark its inputs stop_gradient or add them to no_grad_set");
    std::vector<proto::OpDesc> grads = info->grad_maker(fwd);
    if (fwd.HasAttr("sub_block")) LOOM_RETURN_IF_ERROR(BuildGradBlock(fwd, where, &grads));
    std::vector<bool> keep(grads.size(), false);
    for (size_t k = 0; k < grads.size(); ++k) {
      bool kept = false;
      LOOM_RETURN_IF_ERROR(PrepareGradOp(&grads[k], where, &kept));
      keep[k] = kept;
      if (kept) LOOM_RETURN_IF_ERROR(CheckValuesStillThere(grads[k], index, where));
    }
    // What the grad ops write now is the gradient of the values before the forward op's
    // writes (for an input it overwrites in place, the old value's).
    Kill();
    for (size_t k = 0; k < grads.size(); ++k)
      if (keep[k]) LOOM_RETURN_IF_ERROR(FinishGradOp(&grads[k], where));
    return Status::OK();
  }

  // A grad op reads the forward values it needs by name after the forward ops ran, so it must
  // not need a value a later forward op overwrote: that would be a silently wrong gradient.
  // In a loop body the variables of enclosing blocks are read from the copy of the loop state
  // the iteration began with, so for them a read after a write in the body is the problem.
  Status CheckValuesStillThere(const proto::OpDesc& g, int index, const std::string& where) {
    OpDesc op(const_cast<proto::OpDesc*>(&g));
    for (const auto& name : op.InputArgumentNames()) {
      if (name == kEmptyVarName || EndsWithGrad(name)) continue;
      auto w = writers_.find(name);
      if (w == writers_.end()) continue;
      bool outer = loop_ && !fwd_->HasVar(name);
      for (int j : w->second) {
        if (outer ? j >= index : j <= index) continue;
        return Unimplemented(
            "AppendBackward: the gradient of ", where, " reads '", name, "', which ",
            OpLocation(fwd_->Op(j).Type(), fwd_->Idx(), j),
            outer ? " overwrites earlier in the loop body (the gradient would see the value "
                    "the iteration began with)"
                  : " overwrites afterwards (the gradient would see the later value)",
            "; write that result to a variable of its own");
      }
    }
    return Status::OK();
  }

  // Ends the gradients queued in kill_ (see ProcessForwardOp). The next contribution to one
  // gets a fresh name: the killing grad op may have read the old one.
  void Kill() {
    for (const auto& g : kill_) {
      if (contributions_.erase(g)) retired_.insert(g);
      first_writer_.erase(g);
    }
    kill_.clear();
  }

  std::string FreshName(const std::string& grad) {
    return StrCat(grad, kRenameInfix, renames_[grad]++);
  }

  // A control-flow op: differentiates its sub-block into a new gradient block, points the grad
  // ops at it and drops the input gradients the block does not compute.
  Status BuildGradBlock(const OpDesc& fwd, const std::string& where,
                        std::vector<proto::OpDesc>* grads) {
    auto attr = fwd.GetAttr("sub_block");
    const BlockIndex* bi = attr.ok() ? std::get_if<BlockIndex>(&attr.value()) : nullptr;
    ProgramDesc* program = fwd_->Program();
    if (!bi || bi->idx <= fwd_->Idx() || bi->idx >= program->NumBlocks())
      return InvalidArgument("AppendBackward: ", where,
                             ": attribute 'sub_block' does not name a sub-block");
    BlockDesc* sub = program->Block(bi->idx);
    const OpInfo* info = OpRegistry::Global().Find(fwd.Type());
    const bool loop = info && info->repeats_sub_block;
    if (loop) {
      // The loop state carries gradients from each iteration to the one before, also when its
      // final value has none (a recurrence's memory that only its outputs leave the loop
      // through): seed those with zeros, so the gradient block reads the state's gradient.
      const auto ins = fwd.InputArgumentNames();
      for (const auto& out : fwd.OutputArgumentNames()) {
        std::string g = GradVarName(out);
        if (contributions_.count(g) || !needs_grad_.count(out) ||
            std::find(ins.begin(), ins.end(), out) == ins.end())
          continue;
        VarDesc v = fwd_->FindVarRecursive(out);
        if (!v || !IsFloatingPoint(v.Dtype())) continue;
        proto::OpDesc zeros;
        OpDesc z(&zeros);
        // an array's zero gradient: an empty array (missing elements read as zeros)
        z.SetType(v.Type() == proto::VarType::LOD_TENSOR_ARRAY ? "empty_array_like"
                                                               : "fill_zeros_like");
        z.SetInput("X", {out});
        z.SetOutput("Out", {g});
        z.SetRole(kOpRoleBackward);
        Emit(zeros);
        DeclareGradVar(g, out);
        contributions_[g] = {g};
      }
    }
    std::vector<std::string> seeds;
    for (const auto& out : fwd.OutputArgumentNames()) {
      std::string g = GradVarName(out);
      if (!contributions_.count(g)) continue;
      FlushSum(g);
      seeds.push_back(g);
    }
    BlockDesc* gblock = program->AppendBlock(*sub);
    BackwardBuilder inner(sub, gblock, no_grad_, needs_grad_, loop);
    Status st = inner.BuildSubBlock(seeds);
    if (!st.ok()) return st;
    for (proto::OpDesc& g : *grads) {
      OpDesc op(&g);
      op.SetAttr("sub_block", BlockIndex{gblock->Idx()});
      for (const auto& slot : op.OutputSlots()) {
        std::vector<std::string> args = op.Output(slot);
        for (auto& a : args)
          if (EndsWithGrad(a) && !inner.Produces(a)) a = kEmptyVarName;
        op.SetOutput(slot, args);
      }
    }
    return Status::OK();
  }

  // A grad op in two steps, so that every grad op of one forward op reads the gradients of its
  // outputs before the forward op's writes end them (Kill): PrepareGradOp drops the outputs
  // nobody needs (*keep: whether any is left) and resolves the inputs, emitting the sums and
  // zero fills they need; FinishGradOp names the outputs and emits the op.
  Status PrepareGradOp(proto::OpDesc* g, const std::string& fwd_where, bool* keep) {
    OpDesc op(g);
    const OpInfo* ginfo = OpRegistry::Global().Find(op.Type());
    if (!ginfo)
      return NotFound("AppendBackward: grad op '", op.Type(), "' of ", fwd_where,
                      " is not registered");
    // Outputs: drop grads nobody needs.
    bool any_output = false;
    for (const auto& slot : op.OutputSlots()) {
      std::vector<std::string> kept;
      for (const auto& name : op.Output(slot)) {
        bool keep =
            name != kEmptyVarName && (!EndsWithGrad(name) || needs_grad_.count(ForwardName(name)));
        kept.push_back(keep ? name : std::string());
        any_output |= keep;
      }
      bool all_empty = true;
      for (const auto& k : kept) all_empty &= k.empty();
      if (all_empty) {
        op.RemoveOutput(slot);
      } else {
        for (auto& k : kept)
          if (k.empty()) k = kEmptyVarName;
        op.SetOutput(slot, kept);
      }
    }
    *keep = any_output;
    if (!any_output) return Status::OK();
    // Inputs: grads that exist are read (summing pending contributions first); missing ones
    // are dropped from dispensable slots or zero-filled.
    for (const auto& slot : op.InputSlots()) {
      std::vector<std::string> args = op.Input(slot);
      const SlotSpec* spec = ginfo->FindInput(slot);
      std::vector<std::string> kept;
      for (const auto& name : args) {
        if (!EndsWithGrad(name)) {
          kept.push_back(name);
          continue;
        }
        if (contributions_.count(name)) {
          FlushSum(name);
          kept.push_back(contributions_[name][0]);  // name, or a loop's seed
        } else if (spec && spec->dispensable) {
          continue;
        } else {
          proto::OpDesc zeros;
          OpDesc z(&zeros);
          z.SetType("fill_zeros_like");
          z.SetInput("X", {ForwardName(name)});
          z.SetOutput("Out", {name});
          z.SetRole(kOpRoleBackward);
          Emit(zeros);
          DeclareGradVar(name, ForwardName(name));
          kept.push_back(name);
        }
      }
      if (kept.empty())
        op.RemoveInput(slot);
      else
        op.SetInput(slot, kept);
    }
    return Status::OK();
  }

  Status FinishGradOp(proto::OpDesc* g, const std::string& fwd_where) {
    OpDesc op(g);
    // Output grads: rename when a gradient gets its second (third, ...) contribution.
    int op_index = block_->OpSize();
    std::vector<std::pair<std::string, std::vector<std::string>>> done;  // slots named so far
    for (const auto& slot : op.OutputSlots()) {
      std::vector<std::string> args = op.Output(slot);
      for (size_t k = 0; k < args.size(); ++k) {
        std::string& name = args[k];
        if (!EndsWithGrad(name)) continue;
        if (external_.count(name))
          return Unimplemented("AppendBackward: ", fwd_where, " adds to the gradient '", name,
                               "', which also flows into sub-block ", fwd_->Idx(),
                               " from outside (a variable the sub-block writes for the "
                               "enclosing block is also read inside it); give it its own "
                               "variable inside the sub-block");
        auto& list = contributions_[name];
        if (!list.empty()) {
          VarDesc fv = fwd_->FindVarRecursive(ForwardName(name));
          if (fv && fv.Type() == proto::VarType::LOD_TENSOR_ARRAY)
            return Unimplemented("AppendBackward: ", fwd_where, " adds to the gradient of array '",
                                 fv.Name(), "', which another op of block ", fwd_->Idx(),
                                 " also reads: array gradients are not summed; read each "
                                 "element once and reuse the tensor");
        }
        if (list.empty() && !retired_.count(name)) {
          list.push_back(name);
          first_writer_[name] = op_index;
        } else {
          if (list.size() == 1 && list[0] == name) {
            std::string renamed = FreshName(name);
            if (first_writer_[name] == op_index) {
              // This op wrote it first (x * x): rename among the outputs named so far.
              for (auto& [s, names] : done) std::replace(names.begin(), names.end(), name, renamed);
              std::replace(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(k), name,
                           renamed);
            } else {
              block_->Op(first_writer_[name]).RenameOutput(name, renamed);
            }
            DeclareGradVar(renamed, ForwardName(name));
            list[0] = renamed;
          }
          std::string renamed = FreshName(name);
          DeclareGradVar(renamed, ForwardName(name));
          list.push_back(renamed);
          name = renamed;
        }
        DeclareGradVar(name, ForwardName(name.substr(0, name.find(kRenameInfix))));
        SetFinalWriter(name.substr(0, name.find(kRenameInfix)), op_index);
      }
      done.emplace_back(slot, args);
    }
    for (const auto& [slot, names] : done) op.SetOutput(slot, names);
    op.RemoveAttr(kOpRoleVarAttr);
    op.SetRole(kOpRoleBackward);
    Emit(*g);
    return Status::OK();
  }

  void FlushSum(const std::string& grad) {
    auto it = contributions_.find(grad);
    if (it == contributions_.end() || it->second.size() < 2) return;
    proto::OpDesc sum;
    OpDesc s(&sum);
    s.SetType("sum");
    s.SetInput("X", it->second);
    s.SetOutput("Out", {grad});
    s.SetRole(kOpRoleBackward);
    SetFinalWriter(grad, block_->OpSize());
    Emit(sum);
    DeclareGradVar(grad, ForwardName(grad));
    it->second = {grad};
  }

  void SetFinalWriter(const std::string& grad, int op_index) {
    for (auto& entry : final_writer_order_) {
      if (entry.first == grad) {
        entry.second = op_index;
        return;
      }
    }
    final_writer_order_.emplace_back(grad, op_index);
  }

  void Emit(const proto::OpDesc& op) { *block_->AppendOp().proto() = op; }

  // Gradients are declared in the forward block (for a sub-block: where its control-flow op's
  // gradient runs the gradient block, so nested gradient blocks see their enclosing gradients).
  // name, declared in the forward block like the variable `like` (resolved from there).
  void DeclareLike(const std::string& name, const std::string& like) {
    if (fwd_->FindVar(name)) return;
    VarDesc f = fwd_->FindVarRecursive(like);
    VarDesc v = fwd_->Var(name);
    if (f) {
      v.SetDtype(f.Dtype());
      v.SetDims(f.Dims());
      if (f.Type() == proto::VarType::LOD_TENSOR_ARRAY) v.SetType(f.Type());
    }
  }

  void DeclareGradVar(const std::string& grad, const std::string& fwd) {
    if (fwd_->FindVar(grad)) return;
    VarDesc f = fwd_->FindVarRecursive(fwd);
    VarDesc g = fwd_->Var(grad);
    if (f) {
      g.SetDtype(f.Dtype());
      g.SetDims(f.Dims());
      // the gradient of an array is an array (lod_array_ops.cc)
      if (f.Type() == proto::VarType::LOD_TENSOR_ARRAY) g.SetType(f.Type());
    }
  }

  BlockDesc* fwd_;    // the block differentiated
  BlockDesc* block_;  // where the grad ops go
  std::set<std::string> no_grad_;
  std::unordered_set<std::string> needs_grad_;
  // Pending contributions per gradient name (one entry = no sum needed).
  std::unordered_map<std::string, std::vector<std::string>> contributions_;
  std::unordered_map<std::string, int> first_writer_;
  // Gradient -> index of the op that finishes it, in order of first production.
  std::vector<std::pair<std::string, int>> final_writer_order_;
  // Gradients that come from enclosing blocks (read-only here).
  std::unordered_set<std::string> external_;
  bool loop_ = false;                        // a sub-block run repeatedly (see backward.h)
  std::vector<std::string> kill_;            // gradients the current forward op's writes end
  std::unordered_set<std::string> retired_;  // gradients ended at least once
  std::unordered_map<std::string, std::vector<int>> writers_;  // forward ops writing each var
  std::unordered_map<std::string, int> renames_;               // renamed contributions per gradient
};

}  // namespace

StatusOr<std::vector<ParamGrad>> AppendBackward(ProgramDesc* program, const std::string& loss,
                                                const std::set<std::string>& no_grad) {
  BackwardBuilder builder(program->GlobalBlock(), program->GlobalBlock(), no_grad);
  return builder.Build(loss);
}

}  // namespace loom
