// SparseTable: the rows of a row-sparse parameter that a server (or an in-process KVStore) holds,
// keyed by int64 id, each row `width` elements of fp32 or fp64. A row exists once it is touched:
// the first Lookup, Assign or Apply of an id creates it with the table's initializer, seeded from
// (seed, id) only, so an id gets the same initial row whatever the number of servers sharding
// the table and whatever order ids are touched in. This is the server state of MXNet's
// row_sparse KVStore keys and of Fluid's distributed lookup tables (the rows of a table live on
// the servers, sharded by ShardOf).
//
//   initializers  constant(value), uniform(low, high), gaussian(mean, std): element j of row id
//                 is computed from a counter-based hash (splitmix64) of (seed, id, j), in double
//                 precision, then cast to the table's dtype
//   ids           any int64 when height is -1; else [0, height)
//   optimizers    RowUpdater (updater.h) per touched row: MXNet's lazy update (rows not pushed
//                 keep their value and state)
//
// A table is saved as its touched rows, with their optimizer state and the updater's scalars
// (docs/FORMATS.md, "Sparse tables"), so a resumed table continues exactly. Thread safety: every
// method may be called from any thread (one mutex).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "framework/tensor.h"
#include "kvstore/updater.h"

namespace loom::kvstore {

struct RowInitializer {
  enum class Kind { kConstant = 0, kUniform = 1, kGaussian = 2 };
  Kind kind = Kind::kConstant;
  double a = 0;  // constant: the value; uniform: low; gaussian: mean
  double b = 0;  // uniform: high; gaussian: std
  uint64_t seed = 0;

  static RowInitializer Constant(double value) { return {Kind::kConstant, value, 0, 0}; }
  static RowInitializer Uniform(double low, double high, uint64_t seed) {
    return {Kind::kUniform, low, high, seed};
  }
  static RowInitializer Gaussian(double mean, double std, uint64_t seed) {
    return {Kind::kGaussian, mean, std, seed};
  }
  // "constant", "uniform" or "gaussian" with its two numbers, checked (finite, low <= high,
  // std >= 0); errors name the initializer.
  static StatusOr<RowInitializer> FromName(const std::string& name, double a, double b,
                                           uint64_t seed);
  const char* name() const;
  Status Check() const;
  std::string ToString() const;
};

// What a row-sparse key or table is: its dtype, height (-1: any int64 id) and the dims of one row.
struct SparseTableSpec {
  DataType dtype = proto::FP32;
  int64_t height = -1;
  DDim row_dims;
  RowInitializer init;

  int64_t width() const;
  // [height] + row_dims ("[*, 64]" when any id is accepted).
  std::string DimsString() const;
};

// The scope variable a parameter server (listen_and_serv) takes distributed table `table`
// from when it starts: a std::shared_ptr<SparseTable> that load_persistables loaded from the
// server's checkpoint.
inline std::string LoadedTableVar(const std::string& table) {
  return "@LOOM_LOADED_TABLE@" + table;
}

class SparseTable {
 public:
  // An error when the dtype is not fp32/fp64, a row dim is not positive, height < -1, or the
  // initializer is invalid.
  static StatusOr<std::unique_ptr<SparseTable>> Create(const SparseTableSpec& spec);

  // The server of `num_servers` (>= 1) holding id: splitmix64(id) mod num_servers. Stable across
  // processes, platforms and versions (FORMATS.md); spreads consecutive ids evenly.
  static int ShardOf(int64_t id, int num_servers);

  const SparseTableSpec& spec() const { return spec_; }
  DataType dtype() const { return spec_.dtype; }
  int64_t width() const { return width_; }
  // Rows touched so far.
  int64_t Size() const;

  // out[i] = row ids[i], n rows of width() elements each (ids may repeat); missing rows are
  // created. `what` names the caller in errors (an id out of range).
  Status Lookup(const int64_t* ids, int64_t n, void* out, const std::string& what);
  // Rows ids[i] = values[i] (creating them; a repeated id: the last one wins).
  Status Assign(const int64_t* ids, int64_t n, const void* values, const std::string& what);
  // Rows ids[i] updated by `updater` with grads[i] (the sum of `parts` pushes); ids must be
  // unique (a merged SelectedRows).
  Status Apply(const RowUpdater& updater, const int64_t* ids, int64_t n, const void* grads,
               int parts, const std::string& what);
  // Forgets every row (and its optimizer state): each goes back to its initial value.
  void Clear();
  // The touched ids, ascending.
  std::vector<int64_t> Ids() const;

  // Named numbers an updater keeps for the whole table (Adam's beta powers), saved with it.
  void SetScalar(const std::string& name, double value);
  bool GetScalar(const std::string& name, double* value) const;
  // This table takes other's rows, optimizer state and scalars (other is left empty); both
  // must have the same dtype and row width.
  Status TakeRowsOf(SparseTable* other);

  // Writes the touched rows, their optimizer state and the scalars atomically (temp file +
  // rename). Load reads this and version 1 files (rows only).
  Status Save(const std::string& path) const;
  static StatusOr<std::unique_ptr<SparseTable>> Load(const std::string& path);

  // Element j of id's initial row (as a double), for tests and documentation.
  static double InitialValue(const RowInitializer& init, int64_t id, int64_t j);

 private:
  explicit SparseTable(SparseTableSpec spec);
  Status CheckIds(const int64_t* ids, int64_t n, const std::string& what) const;
  // The row's offset in data_ (in rows), created on first touch. Caller holds mu_.
  int64_t Row(int64_t id);
  char* RowData(int64_t row) { return data_.data() + row * row_bytes_; }

  SparseTableSpec spec_;
  int64_t width_;
  size_t row_bytes_;
  mutable std::mutex mu_;
  std::unordered_map<int64_t, int64_t> rows_;  // id -> row
  std::vector<char> data_;                     // rows_.size() rows of row_bytes_
  std::vector<char> state_;                    // optimizer state, state_slots rows per row
  int state_slots_ = 0;
  std::map<std::string, double> scalars_;
};

}  // namespace loom::kvstore
