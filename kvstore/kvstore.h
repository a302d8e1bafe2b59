// KVStore: MXNet's key-value store API over Loom tensors. Keys are ints or strings (a store takes
// one kind); a value is pushed as a list of tensors (one per device, summed first) and pulled
// into a list of tensors. Without an optimizer a push replaces the stored value with the merged
// sum (MXNet's behaviour, not a running total); with one, the stored value is updated by it.
//
//   local   the list is summed on the CPU, in one pass over memory
//   device  the list entries are the places' tensors: summed with Loom's collectives over an
//           in-process group of one rank per entry (ring / tree as the selector picks), and
//           pulled to every entry
//
// Row-sparse keys (MXNet's row_sparse storage type) hold a SparseTable (sparse_table.h): a key
// is dense or row-sparse from its init on, and each kind of call refuses the other kind. A push
// of SelectedRows (one per device) merges them (rows summed, the union of ids) and then either
// updates only the touched rows with the optimizer (MXNet's lazy update) or, without one, makes
// the merged rows the key's whole value (every other row back to its initial value). A
// row-sparse pull returns, per output, the unique ascending rows its row ids ask for. The
// distributed stores shard a key's rows over the servers by SparseTable::ShardOf.
//
// Optimizers come as typed descriptions (a name and numeric hyper-parameters) checked against a
// registry (updater.h), never as code.
//
// Thread safety: one thread uses a store at a time.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "collective/types.h"
#include "framework/selected_rows.h"
#include "framework/tensor.h"
#include "kvstore/sparse_table.h"
#include "kvstore/updater.h"

namespace loom::kvstore {

struct Key {
  bool is_string = false;
  int64_t id = 0;
  std::string name;
  static Key Int(int64_t id) { return Key{false, id, ""}; }
  static Key Str(std::string name) { return Key{true, 0, std::move(name)}; }
  std::string ToString() const;
  bool operator<(const Key& o) const {
    return is_string != o.is_string ? is_string < o.is_string
                                    : (is_string ? name < o.name : id < o.id);
  }
};

class KVStore {
 public:
  // "local", "device", or (in a process `loom launch` started) "dist_sync" / "dist_async".
  static StatusOr<std::unique_ptr<KVStore>> Create(const std::string& type);
  virtual ~KVStore() = default;

  const std::string& type() const { return type_; }
  virtual int rank() const { return 0; }
  virtual int num_workers() const { return 1; }

  // A key is initialized once; its dtype and dims are fixed from then on.
  virtual Status Init(const Key& key, const Tensor& value) = 0;
  // values: one or more tensors of the key's dtype and dims (summed first).
  virtual Status Push(const Key& key, const std::vector<Tensor>& values, int priority) = 0;
  // Copies the stored value into every out (each of the key's dtype and dims).
  virtual Status Pull(const Key& key, const std::vector<Tensor*>& outs, int priority) = 0;
  // Push, then pull (the in-process stores fuse the two into one pass).
  virtual Status PushPull(const Key& key, const std::vector<Tensor>& values,
                          const std::vector<Tensor*>& outs, int priority);
  virtual Status SetOptimizer(const OptimizerSpec& spec) = 0;

  // A row-sparse key whose value is `value` made dense: [height, ...] with value's rows (summed
  // where an id repeats) and zeros elsewhere.
  virtual Status InitRowSparse(const Key& key, const SelectedRows& value);
  // A row-sparse key of spec.height rows (>= 1, up to 2^63 - 1) whose rows start as spec.init
  // makes them; nothing is allocated until a row is touched.
  virtual Status InitSparseTable(const Key& key, const SparseTableSpec& spec);
  // values: one or more SelectedRows of the key's dtype and row dims, ids in [0, height).
  virtual Status PushRowSparse(const Key& key, const std::vector<SelectedRows>& values,
                               int priority);
  // outs[i] = the unique ascending rows of row_ids[i] (ids may repeat, in any order); one
  // row_ids list for every out, or one per out.
  virtual Status RowSparsePull(const Key& key, const std::vector<std::vector<int64_t>>& row_ids,
                               const std::vector<SelectedRows*>& outs, int priority);

  virtual Status Barrier() { return Status::OK(); }
  // Tells the servers this worker is done (distributed stores; no-op otherwise).
  virtual Status Close() { return Status::OK(); }

  // The worker's MPI client (dist_*_mpi): its rank and size, and collectives over its workers.
  // Outside those types a client of one (allreduce and broadcast copy).
  virtual int client_rank() const { return 0; }
  virtual int client_size() const { return 1; }
  virtual Status ClientAllReduce(const Tensor& in, Tensor* out);
  virtual Status ClientBroadcast(Tensor* t, int root);

 protected:
  explicit KVStore(std::string type) : type_(std::move(type)) {}
  // One kind of key per store.
  Status CheckKeyKind(const Key& key);
  // The entry of an initialized key in a store's per-key map; `op` names the call in the error.
  template <typename Map>
  StatusOr<typename Map::mapped_type*> Initialized(Map& map, const Key& key, const char* op) {
    LOOM_RETURN_IF_ERROR(CheckKeyKind(key));
    auto it = map.find(key);
    if (it == map.end())
      return NotFound(op, " of key ", key.ToString(),
                      ", which was never initialized (init it first)");
    return &it->second;
  }

 private:
  std::string type_;
  int key_kind_ = -1;  // -1: no key yet, 0: int keys, 1: string keys
};

// The stores of one process (local, device): the values live here.
class InProcessStore : public KVStore {
 public:
  Status Init(const Key& key, const Tensor& value) override;
  Status Push(const Key& key, const std::vector<Tensor>& values, int priority) override;
  Status Pull(const Key& key, const std::vector<Tensor*>& outs, int priority) override;
  // Push then pull, fused: the merged value is written to the store and the outs in one pass
  // when there is no optimizer.
  Status PushPull(const Key& key, const std::vector<Tensor>& values,
                  const std::vector<Tensor*>& outs, int priority) override;
  Status SetOptimizer(const OptimizerSpec& spec) override;
  Status InitRowSparse(const Key& key, const SelectedRows& value) override;
  Status InitSparseTable(const Key& key, const SparseTableSpec& spec) override;
  Status PushRowSparse(const Key& key, const std::vector<SelectedRows>& values,
                       int priority) override;
  Status RowSparsePull(const Key& key, const std::vector<std::vector<int64_t>>& row_ids,
                       const std::vector<SelectedRows*>& outs, int priority) override;

 protected:
  explicit InProcessStore(std::string type) : KVStore(std::move(type)) {}
  // An error when the key is row-sparse (a dense call of a sparse key) or already initialized.
  Status CheckDense(const Key& key, const char* op) const;
  Status CheckNew(const Key& key) const;
  // merged = sum of values; also written to every extra out when given.
  virtual Status Merge(const std::vector<Tensor>& values, Tensor* merged,
                       const std::vector<Tensor*>& extra) = 0;

 private:
  std::map<Key, Tensor> store_;
  std::unique_ptr<Updater> updater_;
  std::unique_ptr<RowUpdater> row_updater_;
  Tensor merged_;  // scratch for pushes with an optimizer
  std::map<Key, std::unique_ptr<SparseTable>> sparse_;
};

// The checks every store makes of a value against its key's: an initialized CPU tensor of the
// key's dtype and dims.
Status CheckValue(const Key& key, const Tensor& want, const Tensor& v, const char* what);

// The collectives' name of a dtype (fp32, fp64, int32, int64).
StatusOr<collective::DataType> CollectiveType(DataType t);

// out = sum of values (same dtype and dims), in one pass over memory; also written to extras.
Status SumValues(const std::vector<Tensor>& values, Tensor* out, const std::vector<Tensor*>& extra);

// Row-sparse helpers shared by the stores.
//
// The spec of a key InitRowSparse makes from its value (dtype, height, row dims, zeros).
StatusOr<SparseTableSpec> RowSparseSpecOf(const Key& key, const SelectedRows& value);
// A sparse table's spec as a KVStore takes it: height >= 1.
Status CheckSparseTableSpec(const Key& key, const SparseTableSpec& spec);
// Checks every value against the key's spec (CPU, dtype, row dims, height, ids in range) and
// merges them: rows summed in list order, ids unique and ascending.
StatusOr<SelectedRows> MergeRowSparse(const Key& key, const SparseTableSpec& spec,
                                      const std::vector<SelectedRows>& values);
// The ids of a pull, unique and ascending, checked against the key's height.
StatusOr<std::vector<int64_t>> UniqueRowIds(const Key& key, const SparseTableSpec& spec,
                                            const std::vector<int64_t>& ids);
// Checks a pull's arguments: outs non-empty, row_ids one list or one per out.
Status CheckRowSparsePull(const Key& key, const std::vector<std::vector<int64_t>>& row_ids,
                          const std::vector<SelectedRows*>& outs);
// out = rows `ids` of the key, value [ids.size()] + row dims, filled by `fill(ids, n, dst)`.
SelectedRows NewRowSparse(const SparseTableSpec& spec, std::vector<int64_t> ids);

}  // namespace loom::kvstore
