#include "framework/verifier.h"

#include <algorithm>
#include <set>

#include "framework/op_registry.h"

namespace loom {

namespace {

// InferShapeContext over the VarDescs of one block.
class CompileTimeContext final : public InferShapeContext {
 public:
  CompileTimeContext(BlockDesc* block, OpDesc op, const AttributeMap* attrs, std::string where)
      : block_(block), op_(op), attrs_(attrs), where_(std::move(where)) {}

  bool IsRuntime() const override { return false; }
  const std::string& OpType() const override { return op_.Type(); }
  const AttributeMap& Attrs() const override { return *attrs_; }
  int InputSize(const std::string& slot) const override {
    return static_cast<int>(op_.Input(slot).size());
  }
  int OutputSize(const std::string& slot) const override {
    return static_cast<int>(op_.Output(slot).size());
  }
  std::string InputVarName(const std::string& slot, int i) const override {
    auto v = op_.Input(slot);
    return i < static_cast<int>(v.size()) ? v[i] : std::string();
  }
  std::string OutputVarName(const std::string& slot, int i) const override {
    auto v = op_.Output(slot);
    return i < static_cast<int>(v.size()) ? v[i] : std::string();
  }
  DDim InputDim(const std::string& slot, int i) const override {
    VarDesc v = block_->FindVarRecursive(InputVarName(slot, i));
    return v ? v.Dims() : DDim();
  }
  DataType InputDtype(const std::string& slot, int i) const override {
    VarDesc v = block_->FindVarRecursive(InputVarName(slot, i));
    return v ? v.Dtype() : proto::FP32;
  }
  void SetOutputDim(const std::string& slot, const DDim& dims, int i) override {
    std::string name = OutputVarName(slot, i);
    if (name.empty() || name == kEmptyVarName) return;
    VarDesc v = block_->FindVarRecursive(name);
    if (!v) v = block_->Var(name);
    DDim declared = v.Dims();
    if (conflict_.ok() && declared.size() > 0 && !DimsCompatible(declared, dims)) {
      conflict_ =
          InvalidArgument(where_, ": output '", slot, "' var '", name, "' is declared with dims ",
                          declared.ToString(), " but the op produces ", dims.ToString());
    }
    // Keep the more specific of the declared and inferred dims.
    if (declared.size() == dims.size()) {
      DDim merged = dims;
      for (int k = 0; k < dims.size(); ++k)
        if (merged[k] < 0) merged[k] = declared[k];
      v.SetDims(merged);
    } else {
      v.SetDims(dims);
    }
  }
  void SetOutputDtype(const std::string& slot, DataType dtype, int i) override {
    std::string name = OutputVarName(slot, i);
    if (name.empty() || name == kEmptyVarName) return;
    VarDesc v = block_->FindVarRecursive(name);
    if (!v) v = block_->Var(name);
    v.SetDtype(dtype);
  }
  proto::VarType::Type InputVarType(const std::string& slot, int i) const override {
    VarDesc v = block_->FindVarRecursive(InputVarName(slot, i));
    return v && v.Type() == proto::VarType::SELECTED_ROWS ? proto::VarType::SELECTED_ROWS
                                                          : proto::VarType::DENSE_TENSOR;
  }
  void SetOutputVarType(const std::string& slot, proto::VarType::Type type, int i) override {
    std::string name = OutputVarName(slot, i);
    if (name.empty() || name == kEmptyVarName) return;
    VarDesc v = block_->FindVarRecursive(name);
    if (!v) v = block_->Var(name);
    v.SetType(type);
  }
  std::string Where() const override { return where_; }
  const Status& conflict() const { return conflict_; }

 private:
  BlockDesc* block_;
  OpDesc op_;
  const AttributeMap* attrs_;
  std::string where_;
  Status conflict_;
};

Status CheckSlots(const OpInfo& info, const BlockDesc& block, const OpDesc& op,
                  const std::string& where, bool inputs) {
  const char* kind = inputs ? "input" : "output";
  const auto& specs = inputs ? info.inputs : info.outputs;
  const auto& slots = inputs ? op.proto()->inputs() : op.proto()->outputs();
  for (const auto& s : slots) {
    const SlotSpec* spec = inputs ? info.FindInput(s.parameter()) : info.FindOutput(s.parameter());
    if (!spec) {
      std::string known;
      for (const auto& k : specs) known += (known.empty() ? "" : ", ") + k.name;
      return InvalidArgument(where, ": unknown ", kind, " slot '", s.parameter(), "' (op '",
                             info.type, "' has ", kind, "s: ", known.empty() ? "none" : known, ")");
    }
    if (!spec->duplicable && s.arguments_size() > 1)
      return InvalidArgument(where, ": ", kind, " slot '", s.parameter(), "' takes one var, got ",
                             s.arguments_size());
    for (const auto& var : s.arguments()) {
      if (var.empty())
        return InvalidArgument(where, ": ", kind, " slot '", s.parameter(), "' names an empty var");
      if (var == kEmptyVarName) continue;
      if (!block.FindVarRecursive(var))
        return NotFound(where, ": ", kind, " '", s.parameter(), "' var '", var,
                        "' is not declared in block ", block.Idx(), " or its parents");
    }
  }
  for (const auto& spec : specs) {
    if (spec.dispensable) continue;
    bool present = inputs ? op.HasInput(spec.name) : op.HasOutput(spec.name);
    if (!present)
      return InvalidArgument(where, ": required ", kind, " slot '", spec.name, "' is missing");
  }
  return Status::OK();
}

}  // namespace

namespace {

Status InferBlock(BlockDesc* block, std::set<int>* done);

// done: the blocks this pass has inferred (each sub-block once, however many ops name it).
Status InferOp(BlockDesc* block, int op_index, std::set<int>* done) {
  OpDesc op = block->Op(op_index);
  std::string where = OpLocation(op.Type(), block->Idx(), op_index);
  const OpInfo* info = OpRegistry::Global().Find(op.Type());
  if (!info) return NotFound(where, ": unknown op type '", op.Type(), "'");
  LOOM_ASSIGN_OR_RETURN(AttributeMap attrs, info->ResolveAttrs(op, where));
  // A control-flow op's sub-blocks first: they give the dims of the variables it writes for
  // the ops after it.
  for (const auto& [name, value] : attrs) {
    const auto* bi = std::get_if<BlockIndex>(&value);
    ProgramDesc* program = block->Program();
    if (bi && bi->idx > block->Idx() && bi->idx < program->NumBlocks())
      LOOM_RETURN_IF_ERROR(InferBlock(program->Block(bi->idx), done));
  }
  if (!info->infer_shape && !info->infer_var_type) return Status::OK();
  CompileTimeContext ctx(block, op, &attrs, where);
  if (info->infer_var_type) LOOM_RETURN_IF_ERROR(info->infer_var_type(&ctx));
  if (!info->infer_shape) return Status::OK();
  LOOM_RETURN_IF_ERROR(info->infer_shape(&ctx));
  return ctx.conflict();
}

Status InferBlock(BlockDesc* block, std::set<int>* done) {
  if (!done->insert(block->Idx()).second) return Status::OK();
  for (int i = 0; i < block->OpSize(); ++i) LOOM_RETURN_IF_ERROR(InferOp(block, i, done));
  return Status::OK();
}

}  // namespace

Status InferShapeAtCompileTime(BlockDesc* block, int op_index) {
  std::set<int> done;
  return InferOp(block, op_index, &done);
}

Status InferVarTypeAtCompileTime(BlockDesc* block, int op_index) {
  OpDesc op = block->Op(op_index);
  const OpInfo* info = OpRegistry::Global().Find(op.Type());
  if (!info || !info->infer_var_type) return Status::OK();
  std::string where = OpLocation(op.Type(), block->Idx(), op_index);
  LOOM_ASSIGN_OR_RETURN(AttributeMap attrs, info->ResolveAttrs(op, where));
  CompileTimeContext ctx(block, op, &attrs, where);
  return info->infer_var_type(&ctx);
}

Status InferShapes(BlockDesc* block) {
  std::set<int> done;
  return InferBlock(block, &done);
}

Status VerifyProgram(const ProgramDesc& program) {
  const auto& proto = program.proto();
  if (proto.blocks_size() == 0) return InvalidArgument("program has no blocks");
  for (int b = 0; b < proto.blocks_size(); ++b) {
    const auto& block = proto.blocks(b);
    if (block.idx() != b)
      return InvalidArgument("block at position ", b, " says its index is ", block.idx());
    if (b == 0 ? block.parent_idx() != -1 : (block.parent_idx() < 0 || block.parent_idx() >= b))
      return InvalidArgument(
          "block ", b, " has invalid parent index ", block.parent_idx(),
          b == 0 ? " (the global block's parent must be -1)" : " (must name an earlier block)");
    std::unordered_map<std::string, int> seen;
    for (const auto& v : block.vars()) {
      if (v.name().empty()) return InvalidArgument("block ", b, ": a var has an empty name");
      if (seen[v.name()]++)
        return InvalidArgument("block ", b, ": var '", v.name(), "' is declared twice");
      if ((v.type().type() == proto::VarType::DENSE_TENSOR ||
           v.type().type() == proto::VarType::SELECTED_ROWS) &&
          v.type().has_tensor()) {
        if (!proto::DataType_IsValid(v.type().tensor().data_type()))
          return InvalidArgument("block ", b, ": var '", v.name(), "' has an invalid dtype");
        for (int64_t d : v.type().tensor().dims())
          if (d < -1)
            return InvalidArgument("block ", b, ": var '", v.name(), "' has invalid dim ", d);
        if (v.type().tensor().dims_size() > DDim::kMaxRank)
          return InvalidArgument("block ", b, ": var '", v.name(), "' has rank ",
                                 v.type().tensor().dims_size(), " (max ", DDim::kMaxRank, ")");
      }
    }
  }
  for (int b = 0; b < program.NumBlocks(); ++b) {
    const BlockDesc& block = *program.Block(b);
    for (int i = 0; i < block.OpSize(); ++i) {
      OpDesc op = block.Op(i);
      std::string where = OpLocation(op.Type(), b, i);
      const OpInfo* info = OpRegistry::Global().Find(op.Type());
      if (!info) return NotFound(where, ": unknown op type '", op.Type(), "'");
      LOOM_RETURN_IF_ERROR(CheckSlots(*info, block, op, where, /*inputs=*/true));
      LOOM_RETURN_IF_ERROR(CheckSlots(*info, block, op, where, /*inputs=*/false));
      LOOM_ASSIGN_OR_RETURN(AttributeMap attrs, info->ResolveAttrs(op, where));
      for (const auto& [name, value] : attrs) {
        std::vector<int> named;
        if (const auto* bi = std::get_if<BlockIndex>(&value)) named.push_back(bi->idx);
        if (std::find(info->sub_block_list_attrs.begin(), info->sub_block_list_attrs.end(), name) !=
            info->sub_block_list_attrs.end())
          named = std::get<std::vector<int>>(value);
        for (int idx : named)
          if (idx <= b || idx >= program.NumBlocks())
            return InvalidArgument(where, ": attribute '", name, "' names block ", idx,
                                   ", which is not a sub-block of this program");
      }
    }
  }
  ProgramDesc copy(program);
  std::set<int> done;
  for (int b = 0; b < copy.NumBlocks(); ++b) LOOM_RETURN_IF_ERROR(InferBlock(copy.Block(b), &done));
  return Status::OK();
}

}  // namespace loom
