// An inference model's copy of a distributed lookup table (io.save_inference_model of a
// parameter-server trainer's program): the rows the servers had touched, merged from their
// shards into one SelectedRows, and the initializer that makes every other row. The
// lookup_sparse_table op serves ids from it: a saved row, or the row the servers would have
// made on first touch (the same value for the same id, kvstore/sparse_table.h).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "framework/selected_rows.h"
#include "kvstore/sparse_table.h"

namespace loom::ops {

// The merge of shard files (LOOMSPTB, one per server; disjoint ids, one spec): ids ascending,
// height 2^63 - 1 (any id). Errors name the file whose spec or ids disagree.
struct MergedTable {
  SelectedRows rows;
  kvstore::RowInitializer init;
};
StatusOr<MergedTable> MergeTableShards(const std::vector<std::string>& paths);

// The lookup_sparse_table op's `row_initializer` attribute: "kind a b seed", the numbers
// printed so that they read back exactly; and its parse.
std::string InitializerAttr(const kvstore::RowInitializer& init);
StatusOr<kvstore::RowInitializer> ParseInitializerAttr(const std::string& attr);

}  // namespace loom::ops
