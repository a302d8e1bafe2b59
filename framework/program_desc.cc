#include "framework/program_desc.h"

#include <algorithm>

namespace loom {

std::string OpRoleToString(int role) {
  if (role == kOpRoleForward) return "forward";
  std::string s;
  auto add = [&](int bit, const char* name) {
    if (role & bit) s += (s.empty() ? "" : "|") + std::string(name);
  };
  add(kOpRoleBackward, "backward");
  add(kOpRoleOptimize, "optimize");
  add(kOpRoleRPC, "rpc");
  add(kOpRoleDist, "dist");
  add(kOpRoleLRSched, "lr_sched");
  add(kOpRoleCommunication, "communication");
  add(kOpRoleLoss, "loss");
  return s.empty() ? StrCat("role(", role, ")") : s;
}

std::string OpLocation(const std::string& type, int block, int index) {
  return StrCat("op '", type, "' (block ", block, ", #", index, ")");
}

// ---------------------------------------------------------------- VarDesc

DDim VarDesc::Dims() const {
  const auto& d = p_->type().tensor().dims();
  return DDim(d.begin(), d.end());
}

void VarDesc::SetDims(const DDim& dims) {
  auto* t = p_->mutable_type()->mutable_tensor();
  if (!t->has_data_type()) t->set_data_type(proto::FP32);
  t->clear_dims();
  for (int64_t d : dims) t->add_dims(d);
}

// ---------------------------------------------------------------- OpDesc

namespace {
using SlotList = google::protobuf::RepeatedPtrField<proto::OpDesc::Var>;

const proto::OpDesc::Var* FindSlot(const SlotList& slots, const std::string& name) {
  for (const auto& s : slots)
    if (s.parameter() == name) return &s;
  return nullptr;
}

void SetSlot(SlotList* slots, const std::string& name, const std::vector<std::string>& vars) {
  proto::OpDesc::Var* slot = nullptr;
  for (auto& s : *slots)
    if (s.parameter() == name) slot = &s;
  if (!slot) {
    slot = slots->Add();
    slot->set_parameter(name);
  }
  slot->clear_arguments();
  for (const auto& v : vars) slot->add_arguments(v);
}

void RemoveSlot(SlotList* slots, const std::string& name) {
  for (int i = 0; i < slots->size(); ++i) {
    if (slots->Get(i).parameter() == name) {
      slots->DeleteSubrange(i, 1);
      return;
    }
  }
}

std::vector<std::string> SlotArgs(const SlotList& slots, const std::string& name) {
  const auto* s = FindSlot(slots, name);
  if (!s) return {};
  return std::vector<std::string>(s->arguments().begin(), s->arguments().end());
}

std::vector<std::string> AllArgs(const SlotList& slots) {
  std::vector<std::string> out;
  for (const auto& s : slots)
    for (const auto& a : s.arguments()) out.push_back(a);
  return out;
}

void RenameIn(SlotList* slots, const std::string& from, const std::string& to) {
  for (auto& s : *slots)
    for (auto& a : *s.mutable_arguments())
      if (a == from) a = to;
}
}  // namespace

std::vector<std::string> OpDesc::Input(const std::string& slot) const {
  return SlotArgs(p_->inputs(), slot);
}
std::vector<std::string> OpDesc::Output(const std::string& slot) const {
  return SlotArgs(p_->outputs(), slot);
}
bool OpDesc::HasInput(const std::string& slot) const {
  const auto* s = FindSlot(p_->inputs(), slot);
  return s && s->arguments_size() > 0;
}
bool OpDesc::HasOutput(const std::string& slot) const {
  const auto* s = FindSlot(p_->outputs(), slot);
  return s && s->arguments_size() > 0;
}
void OpDesc::SetInput(const std::string& slot, const std::vector<std::string>& vars) {
  SetSlot(p_->mutable_inputs(), slot, vars);
}
void OpDesc::SetOutput(const std::string& slot, const std::vector<std::string>& vars) {
  SetSlot(p_->mutable_outputs(), slot, vars);
}
void OpDesc::RemoveInput(const std::string& slot) { RemoveSlot(p_->mutable_inputs(), slot); }
void OpDesc::RemoveOutput(const std::string& slot) { RemoveSlot(p_->mutable_outputs(), slot); }

std::vector<std::string> OpDesc::InputSlots() const {
  std::vector<std::string> out;
  for (const auto& s : p_->inputs()) out.push_back(s.parameter());
  return out;
}
std::vector<std::string> OpDesc::OutputSlots() const {
  std::vector<std::string> out;
  for (const auto& s : p_->outputs()) out.push_back(s.parameter());
  return out;
}
std::vector<std::string> OpDesc::InputArgumentNames() const { return AllArgs(p_->inputs()); }
std::vector<std::string> OpDesc::OutputArgumentNames() const { return AllArgs(p_->outputs()); }
void OpDesc::RenameInput(const std::string& from, const std::string& to) {
  RenameIn(p_->mutable_inputs(), from, to);
}
void OpDesc::RenameOutput(const std::string& from, const std::string& to) {
  RenameIn(p_->mutable_outputs(), from, to);
}

bool OpDesc::HasAttr(const std::string& name) const {
  for (const auto& a : p_->attrs())
    if (a.name() == name) return true;
  return false;
}

StatusOr<Attribute> OpDesc::GetAttr(const std::string& name) const {
  for (const auto& a : p_->attrs())
    if (a.name() == name) return AttrFromProto(a);
  return NotFound("op '", Type(), "' has no attribute '", name, "'");
}

void OpDesc::SetAttr(const std::string& name, const Attribute& value) {
  for (auto& a : *p_->mutable_attrs()) {
    if (a.name() == name) {
      AttrToProto(name, value, &a);
      return;
    }
  }
  AttrToProto(name, value, p_->add_attrs());
}

void OpDesc::RemoveAttr(const std::string& name) {
  auto* attrs = p_->mutable_attrs();
  for (int i = 0; i < attrs->size(); ++i) {
    if (attrs->Get(i).name() == name) {
      attrs->DeleteSubrange(i, 1);
      return;
    }
  }
}

std::vector<std::string> OpDesc::AttrNames() const {
  std::vector<std::string> out;
  for (const auto& a : p_->attrs()) out.push_back(a.name());
  return out;
}

// ---------------------------------------------------------------- BlockDesc

BlockDesc::BlockDesc(ProgramDesc* program, proto::BlockDesc* p) : program_(program), p_(p) {
  Reindex();
}

void BlockDesc::Reindex() {
  index_.clear();
  for (auto& v : *p_->mutable_vars()) index_[v.name()] = &v;
}

BlockDesc* BlockDesc::Parent() const {
  int parent = ParentIdx();
  if (parent < 0 || parent >= program_->NumBlocks() || parent == Idx()) return nullptr;
  return program_->Block(parent);
}

VarDesc BlockDesc::Var(const std::string& name) {
  if (VarDesc v = FindVar(name)) return v;
  proto::VarDesc* v = p_->add_vars();
  v->set_name(name);
  v->mutable_type()->set_type(proto::VarType::DENSE_TENSOR);
  v->mutable_type()->mutable_tensor()->set_data_type(proto::FP32);
  index_[name] = v;
  return VarDesc(v);
}

VarDesc BlockDesc::FindVar(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? VarDesc() : VarDesc(it->second);
}

VarDesc BlockDesc::FindVarRecursive(const std::string& name) const {
  const BlockDesc* b = this;
  for (int depth = 0; b && depth <= program_->NumBlocks(); ++depth, b = b->Parent()) {
    if (VarDesc v = b->FindVar(name)) return v;
  }
  return VarDesc();
}

bool BlockDesc::RemoveVar(const std::string& name) {
  auto* vars = p_->mutable_vars();
  for (int i = 0; i < vars->size(); ++i) {
    if (vars->Get(i).name() == name) {
      vars->DeleteSubrange(i, 1);
      Reindex();
      return true;
    }
  }
  return false;
}

std::vector<VarDesc> BlockDesc::AllVars() const {
  std::vector<VarDesc> out;
  for (auto& v : *p_->mutable_vars()) out.emplace_back(&v);
  return out;
}

OpDesc BlockDesc::Op(int i) const { return OpDesc(p_->mutable_ops(i)); }

OpDesc BlockDesc::AppendOp() { return OpDesc(p_->add_ops()); }

OpDesc BlockDesc::InsertOp(int index) {
  auto* ops = p_->mutable_ops();
  LOOM_CHECK(index >= 0 && index <= ops->size(), "insert position ", index);
  ops->Add();
  for (int i = ops->size() - 1; i > index; --i) ops->SwapElements(i, i - 1);
  return OpDesc(ops->Mutable(index));
}

void BlockDesc::RemoveOp(int index) { p_->mutable_ops()->DeleteSubrange(index, 1); }

OpDesc BlockDesc::AppendOp(
    const std::string& type,
    const std::vector<std::pair<std::string, std::vector<std::string>>>& inputs,
    const std::vector<std::pair<std::string, std::vector<std::string>>>& outputs,
    const AttributeMap& attrs) {
  OpDesc op = AppendOp();
  op.SetType(type);
  for (const auto& [slot, vars] : inputs) op.SetInput(slot, vars);
  for (const auto& [slot, vars] : outputs) op.SetOutput(slot, vars);
  for (const auto& [name, value] : attrs) op.SetAttr(name, value);
  if (!op.HasAttr(kOpRoleAttr)) op.SetRole(kOpRoleForward);
  return op;
}

// ---------------------------------------------------------------- ProgramDesc

ProgramDesc::ProgramDesc() {
  auto* b = proto_.add_blocks();
  b->set_idx(0);
  b->set_parent_idx(-1);
  Rebuild();
}

ProgramDesc::ProgramDesc(const proto::ProgramDesc& proto) : proto_(proto) { Rebuild(); }

ProgramDesc::ProgramDesc(const ProgramDesc& other) : proto_(other.proto_) { Rebuild(); }

ProgramDesc& ProgramDesc::operator=(const ProgramDesc& other) {
  if (this != &other) {
    proto_ = other.proto_;
    Rebuild();
  }
  return *this;
}

void ProgramDesc::Rebuild() {
  blocks_.clear();
  for (auto& b : *proto_.mutable_blocks()) blocks_.push_back(std::make_unique<BlockDesc>(this, &b));
}

BlockDesc* ProgramDesc::AppendBlock(const BlockDesc& parent) {
  auto* b = proto_.add_blocks();
  b->set_idx(proto_.blocks_size() - 1);
  b->set_parent_idx(parent.Idx());
  blocks_.push_back(std::make_unique<BlockDesc>(this, b));
  return blocks_.back().get();
}

}  // namespace loom
