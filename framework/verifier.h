// Compile-time shape inference and the program verifier. Both work on descs only (no tensors),
// so passes and the CLI can check programs without running them.
#pragma once

#include "base/status.h"
#include "framework/program_desc.h"

namespace loom {

// Runs the op's shape inference over its block's VarDescs and writes the inferred dims and
// dtypes into the output VarDescs (creating them if needed). Returns the op's errors, and an
// error when an output var was declared with dims that disagree with the inferred ones.
Status InferShapeAtCompileTime(BlockDesc* block, int op_index);

// Runs only the op's variable-type inference (OpInfo::infer_var_type; e.g. an embedding's
// gradient declared SELECTED_ROWS); backward runs it on every op it appends.
Status InferVarTypeAtCompileTime(BlockDesc* block, int op_index);

// Runs InferShapeAtCompileTime for every op of a block in order.
Status InferShapes(BlockDesc* block);

// Checks a program: block indices and parents; for every op: the type is registered, slots
// are known and required ones present, non-duplicable slots have one var, every var exists in
// the block or an ancestor, attributes have the right types and pass their checks, block
// attributes point at real blocks; then runs compile-time shape inference on a copy. The first
// problem found is returned, naming the op (type, block, index) and the var or attribute.
Status VerifyProgram(const ProgramDesc& program);

}  // namespace loom
