// The rows side of a parameter server (listen_and_serv.cc): a shard of a distributed lookup
// table and the arithmetic applied to it, and the weighted merge of several trainers' gradient
// rows. Each optimizer is the op's own arithmetic row by row, in the table's dtype (sgd.cc,
// adaptive.cc, momentum_adam.cc), so a row updated here equals the same row updated by the op
// on one device with a SelectedRows gradient. Called from the server's one thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "framework/selected_rows.h"
#include "kvstore/sparse_table.h"

namespace loom::ops {

// This server's shard of a distributed lookup table: the rows of the ids ShardOf gives it,
// made on first touch, updated by sgd, adagrad or lazy adam with the learning rate in
// variable `lr`.
struct TableShard {
  std::string name, lr;
  std::string optimizer;  // sgd | adagrad | adam (lazy)
  float epsilon = 0;
  float beta1 = 0, beta2 = 0;
  double beta1_pow = 0, beta2_pow = 0;  // adam: beta^t, advanced once per update
  std::unique_ptr<kvstore::SparseTable> rows;
  std::map<int, SelectedRows> received;  // sync: trainer -> this step's rows (merged)
};

// sum over parts of w * rows (each part's ids unique, its value [n, width] of `dtype`), one
// row per id, ids ascending, height 2^63 - 1; each id's row starts from its first part's w * g
// and adds the later parts in order, as the dense path's weighted sum does. fp32 / fp64 only.
StatusOr<SelectedRows> WeightedRows(
    const std::vector<std::pair<double, const SelectedRows*>>& parts, int64_t width,
    DataType dtype);

// Updates the rows of `grad` (merged: unique ids) of shard t with its optimizer at learning
// rate lr; adam's beta powers advance even when grad has no rows (the op runs every step).
Status ApplyTableRows(TableShard& t, double lr, const SelectedRows& grad);

}  // namespace loom::ops
