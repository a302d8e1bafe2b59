// Wrappers for building, editing and reading program descs. ProgramDesc owns the proto;
// BlockDesc is owned by its ProgramDesc (pointer stable while the program lives); OpDesc and
// VarDesc are cheap views over proto messages (valid while their block does not remove them).
// Not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "framework/attribute.h"
#include "framework/data_type.h"
#include "framework/ddim.h"
#include "framework/framework.pb.h"
#include "framework/op_role.h"

namespace loom {

class ProgramDesc;

class VarDesc {
 public:
  VarDesc() = default;
  explicit VarDesc(proto::VarDesc* p) : p_(p) {}
  explicit operator bool() const { return p_ != nullptr; }

  const std::string& Name() const { return p_->name(); }
  proto::VarType::Type Type() const { return p_->type().type(); }
  void SetType(proto::VarType::Type t) { p_->mutable_type()->set_type(t); }
  DataType Dtype() const { return p_->type().tensor().data_type(); }
  void SetDtype(DataType t) { p_->mutable_type()->mutable_tensor()->set_data_type(t); }
  DDim Dims() const;
  void SetDims(const DDim& dims);
  int LoDLevel() const { return p_->type().tensor().lod_level(); }
  void SetLoDLevel(int level) {
    auto* t = p_->mutable_type()->mutable_tensor();
    if (!t->has_data_type()) t->set_data_type(proto::FP32);
    t->set_lod_level(level);
  }
  bool Persistable() const { return p_->persistable(); }
  void SetPersistable(bool v) { p_->set_persistable(v); }
  bool StopGradient() const { return p_->stop_gradient(); }
  void SetStopGradient(bool v) { p_->set_stop_gradient(v); }
  bool IsParameter() const { return p_->is_parameter(); }
  void SetIsParameter(bool v) { p_->set_is_parameter(v); }
  proto::VarDesc* proto() const { return p_; }

 private:
  proto::VarDesc* p_ = nullptr;
};

class OpDesc {
 public:
  OpDesc() = default;
  explicit OpDesc(proto::OpDesc* p) : p_(p) {}
  explicit operator bool() const { return p_ != nullptr; }

  const std::string& Type() const { return p_->type(); }
  void SetType(const std::string& t) { p_->set_type(t); }

  // Variables bound to a slot (empty when the slot is absent).
  std::vector<std::string> Input(const std::string& slot) const;
  std::vector<std::string> Output(const std::string& slot) const;
  bool HasInput(const std::string& slot) const;
  bool HasOutput(const std::string& slot) const;
  void SetInput(const std::string& slot, const std::vector<std::string>& vars);
  void SetOutput(const std::string& slot, const std::vector<std::string>& vars);
  void RemoveInput(const std::string& slot);
  void RemoveOutput(const std::string& slot);
  std::vector<std::string> InputSlots() const;
  std::vector<std::string> OutputSlots() const;
  // Every variable the op reads / writes, in slot order.
  std::vector<std::string> InputArgumentNames() const;
  std::vector<std::string> OutputArgumentNames() const;
  void RenameInput(const std::string& from, const std::string& to);
  void RenameOutput(const std::string& from, const std::string& to);

  bool HasAttr(const std::string& name) const;
  // The attribute, or nullptr-equivalent status when absent / malformed.
  StatusOr<Attribute> GetAttr(const std::string& name) const;
  template <typename T>
  T Attr(const std::string& name, T fallback) const {
    auto a = GetAttr(name);
    if (!a.ok()) return fallback;
    const T* v = std::get_if<T>(&a.value());
    return v ? *v : fallback;
  }
  void SetAttr(const std::string& name, const Attribute& value);
  void RemoveAttr(const std::string& name);
  std::vector<std::string> AttrNames() const;
  int Role() const { return Attr<int>(kOpRoleAttr, kOpRoleForward); }
  void SetRole(int role) { SetAttr(kOpRoleAttr, role); }

  proto::OpDesc* proto() const { return p_; }

 private:
  proto::OpDesc* p_ = nullptr;
};

class BlockDesc {
 public:
  BlockDesc(ProgramDesc* program, proto::BlockDesc* p);

  int Idx() const { return p_->idx(); }
  int ParentIdx() const { return p_->parent_idx(); }
  ProgramDesc* Program() const { return program_; }
  BlockDesc* Parent() const;

  // Finds name in this block, creating a float32 dense tensor var when absent.
  VarDesc Var(const std::string& name);
  VarDesc FindVar(const std::string& name) const;           // this block only
  VarDesc FindVarRecursive(const std::string& name) const;  // this block and its ancestors
  bool HasVar(const std::string& name) const { return static_cast<bool>(FindVar(name)); }
  bool RemoveVar(const std::string& name);
  std::vector<VarDesc> AllVars() const;

  int OpSize() const { return p_->ops_size(); }
  OpDesc Op(int i) const;
  OpDesc AppendOp();
  OpDesc InsertOp(int index);  // the new op gets position index
  void RemoveOp(int index);
  // Appends an op with the given slots and attributes (op_role defaults to forward).
  OpDesc AppendOp(const std::string& type,
                  const std::vector<std::pair<std::string, std::vector<std::string>>>& inputs,
                  const std::vector<std::pair<std::string, std::vector<std::string>>>& outputs,
                  const AttributeMap& attrs = {});

  proto::BlockDesc* proto() const { return p_; }
  // Rebuilds the name index after the proto was edited directly.
  void Reindex();

 private:
  ProgramDesc* program_;
  proto::BlockDesc* p_;
  std::unordered_map<std::string, proto::VarDesc*> index_;
};

class ProgramDesc {
 public:
  ProgramDesc();  // one empty global block
  explicit ProgramDesc(const proto::ProgramDesc& proto);
  ProgramDesc(const ProgramDesc& other);
  ProgramDesc& operator=(const ProgramDesc& other);

  int NumBlocks() const { return static_cast<int>(blocks_.size()); }
  BlockDesc* Block(int i) const { return blocks_.at(i).get(); }
  BlockDesc* GlobalBlock() const { return Block(0); }
  BlockDesc* AppendBlock(const BlockDesc& parent);

  const proto::ProgramDesc& proto() const { return proto_; }
  // Direct edits must be followed by Rebuild().
  proto::ProgramDesc* mutable_proto() { return &proto_; }
  void Rebuild();

 private:
  proto::ProgramDesc proto_;
  std::vector<std::unique_ptr<BlockDesc>> blocks_;
};

// "op 'mul' (block 0, #3)": how errors name an op.
std::string OpLocation(const std::string& type, int block, int index);

}  // namespace loom
