#include "transpiler/program_edit.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "framework/op_role.h"
#include "transpiler/gradients.h"

namespace loom::transpiler {

proto::OpDesc MakeOp(const std::string& type, const SlotList& inputs, const SlotList& outputs,
                     const AttributeMap& attrs, int role) {
  proto::OpDesc p;
  OpDesc op(&p);
  op.SetType(type);
  for (const auto& [slot, vars] : inputs) op.SetInput(slot, vars);
  for (const auto& [slot, vars] : outputs) op.SetOutput(slot, vars);
  for (const auto& [name, value] : attrs) op.SetAttr(name, value);
  op.SetRole(role);
  return p;
}

void InsertOps(BlockDesc* block, Insertions ops) {
  google::protobuf::RepeatedPtrField<proto::OpDesc> list;
  for (auto& p : ops[-1]) *list.Add() = std::move(p);
  for (int i = 0; i < block->OpSize(); ++i) {
    *list.Add() = *block->Op(i).proto();
    if (auto it = ops.find(i); it != ops.end())
      for (auto& p : it->second) *list.Add() = std::move(p);
  }
  block->proto()->mutable_ops()->Swap(&list);
}

VarDesc DeclareLike(BlockDesc* block, const VarDesc& like) {
  VarDesc v = block->Var(like.Name());
  v.proto()->CopyFrom(*like.proto());
  return v;
}

VarDesc DeclareCommunicator(BlockDesc* block, const std::string& name) {
  VarDesc v = block->Var(name);
  v.SetType(proto::VarType::COMMUNICATOR);
  v.SetPersistable(true);
  v.SetStopGradient(true);
  return v;
}

std::string FindTranspiledOp(const ProgramDesc& program) {
  for (int b = 0; b < program.NumBlocks(); ++b) {
    const BlockDesc* block = program.Block(b);
    for (int i = 0; i < block->OpSize(); ++i) {
      OpDesc op = block->Op(i);
      if (op.Role() & (kOpRoleCommunication | kOpRoleRPC)) return OpLocation(op.Type(), b, i);
    }
  }
  return "";
}

Status CheckSingleDeviceInput(const ProgramDesc& startup, const ProgramDesc& main) {
  for (const ProgramDesc* prog : {&startup, &main}) {
    std::string where = FindTranspiledOp(*prog);
    if (!where.empty())
      return FailedPrecondition("the ", prog == &main ? "main" : "startup",
                                " program is already transpiled (it has ", where,
                                "); transpile the single-device program");
  }
  const BlockDesc* block = main.GlobalBlock();
  for (int i = 0; i < block->OpSize(); ++i)
    if (IsUpdateOp(block->Op(i))) return Status::OK();
  return InvalidArgument(
      "the main program has no optimizer ops (op_role optimize with Param and Grad inputs): "
      "call optimizer.minimize(loss) before transpiling");
}

std::string ProgramFingerprint(const ProgramDesc& program, const std::string& options) {
  std::string bytes;
  google::protobuf::io::StringOutputStream stream(&bytes);
  {
    google::protobuf::io::CodedOutputStream out(&stream);
    out.SetSerializationDeterministic(true);
    program.proto().SerializeToCodedStream(&out);
  }
  bytes += options;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : bytes) h = (h ^ ch) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

void RemoveOptimizerOps(ProgramDesc* main, ProgramDesc* startup,
                        const std::function<bool(const OpDesc&)>& drop) {
  BlockDesc* mb = main->GlobalBlock();
  BlockDesc* sb = startup->GlobalBlock();
  std::set<std::string> state;
  for (int i = mb->OpSize() - 1; i >= 0; --i) {
    OpDesc op = mb->Op(i);
    if (!(op.Role() & kOpRoleOptimize) || !drop(op)) continue;
    if (IsUpdateOp(op)) {
      for (const auto& slot : op.InputSlots()) {
        if (slot == "Param" || slot == "Grad" || slot == "LearningRate") continue;
        for (const auto& v : op.Input(slot)) {
          VarDesc d = mb->FindVar(v);
          if (d && d.Persistable() && !d.IsParameter()) state.insert(v);
        }
      }
    }
    mb->RemoveOp(i);
  }
  for (const auto& v : state) {
    mb->RemoveVar(v);
    for (int i = sb->OpSize() - 1; i >= 0; --i) {
      auto outs = sb->Op(i).OutputArgumentNames();
      bool only_state = !outs.empty() && std::all_of(outs.begin(), outs.end(),
                                                     [&](auto& o) { return state.count(o) > 0; });
      if (only_state) sb->RemoveOp(i);
    }
    sb->RemoveVar(v);
  }
}

}  // namespace loom::transpiler
