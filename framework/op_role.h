// Op roles: a bitmask attribute on every op saying which phase of training it belongs to.
// Passes find gradients and optimizer ops through op_role / op_role_var, never through names.
#pragma once

#include <string>

namespace loom {

enum OpRole : int {
  kOpRoleForward = 0x0,
  kOpRoleBackward = 0x1,
  kOpRoleOptimize = 0x2,
  kOpRoleRPC = 0x4,
  kOpRoleDist = 0x8,
  kOpRoleLRSched = 0x10,
  kOpRoleCommunication = 0x20,
  kOpRoleLoss = 0x100,
};

inline constexpr const char* kOpRoleAttr = "op_role";
// Pairs [param0, grad0, param1, grad1, ...] on backward and optimizer ops.
inline constexpr const char* kOpRoleVarAttr = "op_role_var";
inline constexpr const char* kGradSuffix = "@GRAD";
// Placeholder for an output slot entry nobody needs (e.g. the grad of a frozen input).
inline constexpr const char* kEmptyVarName = "@EMPTY@";

inline std::string GradVarName(const std::string& name) { return name + kGradSuffix; }
std::string OpRoleToString(int role);

}  // namespace loom
