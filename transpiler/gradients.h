// Gradient analysis, shared by the transpilers: which parameters the optimizer updates, with
// which gradient, where backward produces it, and which optimize-role ops serve which parameter.
// Everything is read from op roles and op_role_var (the (param, grad) pairs backward and the
// optimizers write on their ops), never from variable-name conventions or stored op indices: an
// index found here is valid only until the block is edited.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "framework/data_type.h"
#include "framework/program_desc.h"

namespace loom::transpiler {

// A parameter some optimizer op updates, and the gradient it updates it with.
struct OptimizedParam {
  std::string param;
  std::string grad;
  DataType dtype = proto::FP32;
  int64_t bytes = 0;
};

struct GradientAnalysis {
  std::vector<OptimizedParam> params;  // in the order of their update ops
  std::vector<std::string> frozen;     // parameters no optimizer op updates
  // The input whose dim 0 counts a rank's samples: the first batch-shaped variable ([-1, ...],
  // not persistable) the program reads before writing it; empty when there is none.
  std::string batch_var;

  const OptimizedParam* Find(const std::string& param) const;
};

// Optimize-role ops with a Param and a Grad input (sgd, momentum, adam, ...).
bool IsUpdateOp(const OpDesc& op);

// The (param, grad) an update op applies: its op_role_var pair, else its Param/Grad inputs.
std::pair<std::string, std::string> UpdatedPair(const OpDesc& op);

// Pairs every updated parameter of block 0 with its gradient; errors name the op when a
// parameter is updated twice, has no gradient backward writes, has dynamic dims, or has its
// gradient written inside a sub-block.
StatusOr<GradientAnalysis> AnalyzeGradients(const ProgramDesc& main);

// Block 0 positions, valid until the block is edited (-1: none).
int FindUpdateOp(const BlockDesc& block, const std::string& param);
// The last backward-role op before position `end` (default: all) writing grad.
int LastGradWriter(const BlockDesc& block, const std::string& grad, int end = -1);

// The parameters an optimize-role op serves, from its op_role_var (one entry per pair).
std::vector<std::string> ServedParams(const OpDesc& op);

// Writes on every optimize-role op of block 0 the parameter it serves, as op_role_var: an
// update op its own pair, any other op the pair of the one parameter whose variables (param,
// gradient, or temporaries of ops serving it) it reads or writes. An op combining several
// parameters is allowed only when it is a `sum` of per-parameter terms (the squared norms of
// clipping by global norm): its op_role_var then lists one pair per X input, in order, so that
// each owner can add its own terms. Returns whether any op changed.
StatusOr<bool> TagOptimizerOps(ProgramDesc* main, const GradientAnalysis& grads);

// Makes every sparse gradient (SelectedRows: embeddings with is_sparse) of a program dense:
// the gradient ops write dense tensors and the variable types that follow them (sums, scales,
// merges) are inferred again. The transpilers exchange gradients as dense tensors; the
// updates give the same parameters either way. Returns whether anything changed. The
// gradients of the tables in `keep` (lookup_table_grad ops whose W is one of them) stay sparse.
StatusOr<bool> DensifySparseGradients(ProgramDesc* main, const std::set<std::string>& keep = {});

// A `sum` tagged by TagOptimizerOps as combining the terms of several parameters.
bool IsPartialSum(const OpDesc& op);

}  // namespace loom::transpiler
