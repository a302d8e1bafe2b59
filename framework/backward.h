// AppendBackward: adds the gradient ops of a loss to a program's global block.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "framework/program_desc.h"

namespace loom {

struct ParamGrad {
  std::string param;
  std::string grad;
};

// Appends to block 0: a fill_constant seeding loss@GRAD with 1 (role backward|loss), then the
// grad ops of every forward op on a path from a trainable variable to the loss, in reverse
// order, made by the ops' registered grad makers. Gradients are named "X@GRAD"; a variable
// used by several ops gets one "X@GRAD@RENAME@k" per use, summed by a `sum` op before the
// gradient is read. Gradients of variables that are stop_gradient, non-float, or in no_grad are
// never computed; missing gradients of unused outputs are zero-filled (fill_zeros_like) unless
// the grad op marks the slot dispensable. Grad ops get op_role = backward; the op that finishes
// a parameter's gradient also gets op_role_var = [param, grad]. The loss's producer gets the
// loss role. Returns the (parameter, gradient) pairs in the order the gradients become ready.
//
// Control-flow ops (a `sub_block` attribute) get a gradient block built from their sub-block
// (see backward.cc). For ops that run the sub-block repeatedly (OpInfo::repeats_sub_block:
// while), the gradient block is one iteration's: the gradient of each variable the op writes
// for the enclosing block is read under the seed name "O@GRAD@SEED" (the grad op supplies the
// enclosing gradient for the last iteration and the next iteration's input gradient for the
// others), and a write inside the block ends the gradient of the value it overwrites, so
// "X@GRAD" is the gradient of the value X had when the iteration began.
inline constexpr const char* kSeedSuffix = "@SEED";
StatusOr<std::vector<ParamGrad>> AppendBackward(ProgramDesc* program, const std::string& loss,
                                                const std::set<std::string>& no_grad = {});

}  // namespace loom
