// Program editing shared by the transpilers: building ops, inserting them after the ops they
// depend on in one rebuild of the op list, declaring variables, recognizing a transpiled
// program, and removing optimizer ops together with the optimizer state only they use.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "framework/attribute.h"
#include "framework/framework.pb.h"
#include "framework/program_desc.h"

namespace loom::transpiler {

using SlotList = std::vector<std::pair<std::string, std::vector<std::string>>>;

proto::OpDesc MakeOp(const std::string& type, const SlotList& inputs, const SlotList& outputs,
                     const AttributeMap& attrs, int role);

// Ops to insert into a block, keyed by the position of the op they follow (-1: the front); ops
// under one key keep their order. Positions refer to the block as it is before the insertion.
using Insertions = std::map<int, std::vector<proto::OpDesc>>;
void InsertOps(BlockDesc* block, Insertions ops);

// Declares in block a copy of `like` (same name, type, dims, flags).
VarDesc DeclareLike(BlockDesc* block, const VarDesc& like);
// Declares the persistable communicator variable `name`.
VarDesc DeclareCommunicator(BlockDesc* block, const std::string& name);

// Where the program holds an op of a transpiler's output (op_role communication or RPC), as
// "op 'allreduce' (block 0, op 7)"; empty when it holds none.
std::string FindTranspiledOp(const ProgramDesc& program);

// The input a transpiler takes: single-device programs (no op of a transpiler's output in either)
// whose main program has optimizer ops. Errors say which program and what to do.
Status CheckSingleDeviceInput(const ProgramDesc& startup, const ProgramDesc& main);

// A digest (FNV-1a, 16 hex digits) of a program's deterministic serialization and the options
// a transpiler was given: every program of one transpile carries it, and ranks or trainers and
// servers from different transpiles are told apart by it.
std::string ProgramFingerprint(const ProgramDesc& program, const std::string& options);

// Removes every optimize-role op of main's block 0 for which drop(op) holds; the optimizer state
// of the dropped update ops (persistable non-parameter inputs other than the learning rate) is
// removed from both programs, with the startup ops that only initialize it.
void RemoveOptimizerOps(ProgramDesc* main, ProgramDesc* startup,
                        const std::function<bool(const OpDesc&)>& drop);

}  // namespace loom::transpiler
