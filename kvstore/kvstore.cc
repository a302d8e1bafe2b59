#include "kvstore/kvstore.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "base/copy.h"
#include "collective/world.h"
#include "framework/parallel.h"
#include "kvstore/dist.h"

namespace loom::kvstore {
namespace {

std::string Describe(const Tensor& t) {
  return StrCat(DataTypeName(t.dtype()), t.dims().ToString());
}

// out = v[0] + v[1] + ... in one pass over memory (chunk by chunk, each chunk staying in cache),
// also written to every extra. The values are added in list order: the same sum on every run.
template <typename T>
void SumInto(const std::vector<Tensor>& values, T* out, const std::vector<T*>& extra, int64_t n) {
  std::vector<const T*> in;
  for (const auto& v : values) in.push_back(v.data<T>());
  ParallelFor(n, 1 << 16, [&](int64_t begin, int64_t end) {
    constexpr int64_t kChunk = 8192;
    for (int64_t b = begin; b < end; b += kChunk) {
      const int64_t e = std::min(end, b + kChunk);
      CopyBytes(out + b, in[0] + b, static_cast<size_t>(e - b) * sizeof(T));
      for (size_t k = 1; k < in.size(); ++k)
        for (int64_t i = b; i < e; ++i) out[i] += in[k][i];
      for (T* x : extra) CopyBytes(x + b, out + b, static_cast<size_t>(e - b) * sizeof(T));
    }
  });
}

// Every out = src: chunk by chunk over the threads, each chunk read from memory once while it is
// written to every output (a pull's broadcast from the store to the devices' arrays).
void CopyToAll(const Tensor& src, const std::vector<Tensor*>& outs) {
  const auto* from = static_cast<const char*>(src.raw_data());
  std::vector<char*> to;
  for (Tensor* o : outs) to.push_back(static_cast<char*>(o->raw_data()));
  ParallelFor(static_cast<int64_t>(src.nbytes()), 1 << 18, [&](int64_t begin, int64_t end) {
    constexpr int64_t kChunk = 32 << 10;
    for (int64_t b = begin; b < end; b += kChunk) {
      const size_t len = static_cast<size_t>(std::min(end, b + kChunk) - b);
      for (char* t : to) CopyBytes(t + b, from + b, len);
    }
  });
}

template <typename T>
std::vector<T*> Pointers(const std::vector<Tensor*>& ts) {
  std::vector<T*> p;
  for (Tensor* t : ts) p.push_back(t->data<T>());
  return p;
}

class LocalStore final : public InProcessStore {
 public:
  LocalStore() : InProcessStore("local") {}

 protected:
  Status Merge(const std::vector<Tensor>& values, Tensor* merged,
               const std::vector<Tensor*>& extra) override {
    return SumValues(values, merged, extra);
  }
};

}  // namespace

StatusOr<collective::DataType> CollectiveType(DataType t) {
  switch (t) {
    case proto::FP32: return collective::DataType::kFloat32;
    case proto::FP64: return collective::DataType::kFloat64;
    case proto::INT32: return collective::DataType::kInt32;
    case proto::INT64: return collective::DataType::kInt64;
    default:
      return InvalidArgument("a KVStore reduces fp32, fp64, int32 and int64 values, not ",
                             DataTypeName(t));
  }
}

namespace {

// The list entries are the places' tensors: entry r is rank r of an in-process group (one group
// per list length, made on first use), and the allreduce leaves the sum in every rank's output.
// As in MXNet, any list is reduced, whatever the lengths of the key's earlier pushes: the
// stored value is the only state a key keeps between calls, and each call's group is the one
// of its own length, so lengths may change freely (a single array is its own sum).
class DeviceStore final : public InProcessStore {
 public:
  DeviceStore() : InProcessStore("device") {}

 protected:
  Status Merge(const std::vector<Tensor>& values, Tensor* merged,
               const std::vector<Tensor*>& extra) override {
    const int n = static_cast<int>(values.size());
    LOOM_ASSIGN_OR_RETURN(collective::DataType dtype, CollectiveType(merged->dtype()));
    if (n == 1) {
      std::vector<Tensor*> outs = extra;
      outs.push_back(merged);
      CopyToAll(values[0], outs);
      return Status::OK();
    }
    LOOM_ASSIGN_OR_RETURN(collective::InProcessWorld * world, World(n));
    // A pushpull with one output per entry allreduces into the outputs; a push reduces to the
    // store on rank 0 (no other rank needs the sum, so nothing else is written).
    const bool per_rank_outs = static_cast<int>(extra.size()) == n;
    std::vector<Status> st(n);
    std::vector<std::thread> threads;
    const size_t count = static_cast<size_t>(merged->numel());
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        auto& comm = world->comm(r);
        st[r] = per_rank_outs
                    ? comm.AllReduce(values[r].raw_data(), extra[r]->raw_data(), count, dtype,
                                     collective::ReduceOp::kSum)
                          .Wait()
                    : comm.Reduce(values[r].raw_data(), r == 0 ? merged->raw_data() : nullptr,
                                  count, dtype, collective::ReduceOp::kSum, 0)
                          .Wait();
      });
    for (auto& t : threads) t.join();
    for (const auto& s : st) LOOM_RETURN_IF_ERROR(s);
    if (per_rank_outs) {
      CopyBytes(merged->raw_data(), extra[0]->raw_data(), merged->nbytes());
    } else {
      CopyToAll(*merged, extra);
    }
    return Status::OK();
  }

 private:
  StatusOr<collective::InProcessWorld*> World(int n) {
    auto it = worlds_.find(n);
    if (it != worlds_.end()) return it->second.get();
    LOOM_ASSIGN_OR_RETURN(auto world, collective::InProcessWorld::Create(n));
    return (worlds_[n] = std::move(world)).get();
  }

  std::map<int, std::unique_ptr<collective::InProcessWorld>> worlds_;
};

}  // namespace

std::string Key::ToString() const { return is_string ? "'" + name + "'" : std::to_string(id); }

Status SumValues(const std::vector<Tensor>& values, Tensor* merged,
                 const std::vector<Tensor*>& extra) {
  const int64_t n = merged->numel();
  switch (merged->dtype()) {
    case proto::FP32:
      SumInto<float>(values, merged->data<float>(), Pointers<float>(extra), n);
      break;
    case proto::FP64:
      SumInto<double>(values, merged->data<double>(), Pointers<double>(extra), n);
      break;
    case proto::INT32:
      SumInto<int32_t>(values, merged->data<int32_t>(), Pointers<int32_t>(extra), n);
      break;
    case proto::INT64:
      SumInto<int64_t>(values, merged->data<int64_t>(), Pointers<int64_t>(extra), n);
      break;
    default:
      return InvalidArgument("a KVStore sums fp32, fp64, int32 and int64 values, not ",
                             DataTypeName(merged->dtype()));
  }
  return Status::OK();
}

StatusOr<std::unique_ptr<KVStore>> KVStore::Create(const std::string& type) {
  if (type == "local") return std::unique_ptr<KVStore>(new LocalStore());
  if (type == "device") return std::unique_ptr<KVStore>(new DeviceStore());
  if (type.rfind("dist_", 0) == 0 && type != "dist_device_sync") return CreateDistStore(type);
  return InvalidArgument("unknown KVStore type '", type,
                         "' (built: local, device, dist_sync, dist_async, dist_sync_mpi, "
                         "dist_async_mpi)");
}

Status KVStore::PushPull(const Key& key, const std::vector<Tensor>& values,
                         const std::vector<Tensor*>& outs, int priority) {
  LOOM_RETURN_IF_ERROR(Push(key, values, priority));
  return Pull(key, outs, priority);
}

Status KVStore::ClientAllReduce(const Tensor& in, Tensor* out) {
  if (in.dtype() != out->dtype() || in.dims() != out->dims())
    return InvalidArgument("client allreduce: the output is ", Describe(*out), ", the input ",
                           Describe(in));
  if (out->raw_data() != in.raw_data()) CopyBytes(out->raw_data(), in.raw_data(), in.nbytes());
  return Status::OK();
}

Status KVStore::ClientBroadcast(Tensor* t, int root) {
  if (root != 0) return InvalidArgument("broadcast root ", root, " is not a rank of a client of 1");
  return Status::OK();
}

Status KVStore::CheckKeyKind(const Key& key) {
  const int kind = key.is_string ? 1 : 0;
  if (key_kind_ < 0) key_kind_ = kind;
  if (kind != key_kind_)
    return InvalidArgument("this store takes ", key_kind_ ? "string" : "int", " keys; key ",
                           key.ToString(), " is not one (one store takes one kind of key)");
  return Status::OK();
}

Status CheckValue(const Key& key, const Tensor& stored, const Tensor& v, const char* what) {
  if (!v.initialized() || !v.place().is_cpu())
    return InvalidArgument(what, " of key ", key.ToString(), " is not an initialized CPU tensor");
  if (v.dtype() != stored.dtype() || v.dims() != stored.dims())
    return InvalidArgument(what, " of key ", key.ToString(), " is ", Describe(v),
                           ", the key holds ", Describe(stored));
  return Status::OK();
}

Status InProcessStore::Init(const Key& key, const Tensor& value) {
  LOOM_RETURN_IF_ERROR(CheckKeyKind(key));
  if (sparse_.count(key)) return CheckNew(key);
  if (store_.count(key))
    return AlreadyExists("key ", key.ToString(), " is initialized already (as ",
                         Describe(store_[key]), "); a key is initialized once");
  if (!value.initialized() || !value.place().is_cpu())
    return InvalidArgument("init of key ", key.ToString(), ": not an initialized CPU tensor");
  TensorCopy(value, Place::CPU(), &store_[key]);
  return Status::OK();
}

Status InProcessStore::Push(const Key& key, const std::vector<Tensor>& values, int priority) {
  LOOM_RETURN_IF_ERROR(CheckDense(key, "push"));
  LOOM_ASSIGN_OR_RETURN(Tensor * stored, Initialized(store_, key, "push"));
  if (values.empty()) return InvalidArgument("push of key ", key.ToString(), " with no value");
  for (const auto& v : values) LOOM_RETURN_IF_ERROR(CheckValue(key, *stored, v, "a pushed value"));
  if (!updater_) return Merge(values, stored, {});
  merged_.Resize(stored->dims());
  merged_.mutable_data(Place::CPU(), stored->dtype());
  LOOM_RETURN_IF_ERROR(Merge(values, &merged_, {}));
  return updater_->Update(key.ToString(), merged_, static_cast<int>(values.size()), stored);
}

Status InProcessStore::Pull(const Key& key, const std::vector<Tensor*>& outs, int priority) {
  LOOM_RETURN_IF_ERROR(CheckDense(key, "pull"));
  LOOM_ASSIGN_OR_RETURN(Tensor * stored, Initialized(store_, key, "pull"));
  if (outs.empty()) return InvalidArgument("pull of key ", key.ToString(), " into no output");
  for (Tensor* o : outs) LOOM_RETURN_IF_ERROR(CheckValue(key, *stored, *o, "a pull output"));
  CopyToAll(*stored, outs);
  return Status::OK();
}

Status InProcessStore::PushPull(const Key& key, const std::vector<Tensor>& values,
                                const std::vector<Tensor*>& outs, int priority) {
  LOOM_RETURN_IF_ERROR(CheckDense(key, "pushpull"));
  if (updater_) {
    LOOM_RETURN_IF_ERROR(Push(key, values, priority));
    return Pull(key, outs, priority);
  }
  LOOM_ASSIGN_OR_RETURN(Tensor * stored, Initialized(store_, key, "pushpull"));
  if (values.empty()) return InvalidArgument("pushpull of key ", key.ToString(), " with no value");
  for (const auto& v : values) LOOM_RETURN_IF_ERROR(CheckValue(key, *stored, v, "a pushed value"));
  for (Tensor* o : outs) LOOM_RETURN_IF_ERROR(CheckValue(key, *stored, *o, "a pull output"));
  return Merge(values, stored, outs);
}

Status InProcessStore::SetOptimizer(const OptimizerSpec& spec) {
  LOOM_ASSIGN_OR_RETURN(updater_, MakeUpdater(spec));
  LOOM_ASSIGN_OR_RETURN(row_updater_, MakeRowUpdater(spec));
  return Status::OK();
}

Status InProcessStore::CheckDense(const Key& key, const char* op) const {
  if (sparse_.count(key))
    return InvalidArgument(op, " of key ", key.ToString(), ": the key is row_sparse (",
                           sparse_.at(key)->spec().DimsString(),
                           "); push row-sparse arrays and use row_sparse_pull");
  return Status::OK();
}

Status InProcessStore::CheckNew(const Key& key) const {
  if (store_.count(key))
    return AlreadyExists("key ", key.ToString(), " is initialized already (as ",
                         Describe(store_.at(key)), "); a key is initialized once");
  if (sparse_.count(key))
    return AlreadyExists("key ", key.ToString(), " is initialized already (as row_sparse ",
                         sparse_.at(key)->spec().DimsString(), "); a key is initialized once");
  return Status::OK();
}

Status InProcessStore::InitRowSparse(const Key& key, const SelectedRows& value) {
  LOOM_RETURN_IF_ERROR(CheckKeyKind(key));
  LOOM_RETURN_IF_ERROR(CheckNew(key));
  LOOM_ASSIGN_OR_RETURN(SparseTableSpec spec, RowSparseSpecOf(key, value));
  LOOM_ASSIGN_OR_RETURN(SelectedRows merged, MergeRowSparse(key, spec, {value}));
  LOOM_ASSIGN_OR_RETURN(auto table, SparseTable::Create(spec));
  LOOM_RETURN_IF_ERROR(table->Assign(merged.rows.data(), static_cast<int64_t>(merged.rows.size()),
                                     merged.value.raw_data(),
                                     StrCat("init of key ", key.ToString())));
  sparse_[key] = std::move(table);
  return Status::OK();
}

Status InProcessStore::InitSparseTable(const Key& key, const SparseTableSpec& spec) {
  LOOM_RETURN_IF_ERROR(CheckKeyKind(key));
  LOOM_RETURN_IF_ERROR(CheckNew(key));
  LOOM_RETURN_IF_ERROR(CheckSparseTableSpec(key, spec));
  LOOM_ASSIGN_OR_RETURN(sparse_[key], SparseTable::Create(spec));
  return Status::OK();
}

Status InProcessStore::PushRowSparse(const Key& key, const std::vector<SelectedRows>& values,
                                     int priority) {
  if (store_.count(key))
    return InvalidArgument("row-sparse push of key ", key.ToString(), ": the key is dense (",
                           Describe(store_.at(key)), "); push dense arrays");
  LOOM_ASSIGN_OR_RETURN(auto* table, Initialized(sparse_, key, "row-sparse push"));
  SparseTable& t = **table;
  LOOM_ASSIGN_OR_RETURN(SelectedRows merged, MergeRowSparse(key, t.spec(), values));
  const std::string what = StrCat("push of key ", key.ToString());
  const auto n = static_cast<int64_t>(merged.rows.size());
  if (row_updater_)
    return t.Apply(*row_updater_, merged.rows.data(), n, merged.value.raw_data(),
                   static_cast<int>(values.size()), what);
  t.Clear();  // no optimizer: the merged rows are the key's whole value (MXNet's rule)
  return t.Assign(merged.rows.data(), n, merged.value.raw_data(), what);
}

Status InProcessStore::RowSparsePull(const Key& key,
                                     const std::vector<std::vector<int64_t>>& row_ids,
                                     const std::vector<SelectedRows*>& outs, int priority) {
  if (store_.count(key))
    return InvalidArgument("row_sparse_pull of key ", key.ToString(), ": the key is dense (",
                           Describe(store_.at(key)), "); use pull");
  LOOM_ASSIGN_OR_RETURN(auto* table, Initialized(sparse_, key, "row_sparse_pull"));
  SparseTable& t = **table;
  LOOM_RETURN_IF_ERROR(CheckRowSparsePull(key, row_ids, outs));
  const std::string what = StrCat("row_sparse_pull of key ", key.ToString());
  for (size_t i = 0; i < outs.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> ids,
                          UniqueRowIds(key, t.spec(), row_ids[row_ids.size() == 1 ? 0 : i]));
    SelectedRows out = NewRowSparse(t.spec(), std::move(ids));
    LOOM_RETURN_IF_ERROR(t.Lookup(out.rows.data(), static_cast<int64_t>(out.rows.size()),
                                  out.value.raw_data(), what));
    *outs[i] = std::move(out);
  }
  return Status::OK();
}

// ---------------------------------------------------------------------------------------------
// Row-sparse helpers

namespace {
Status NoRowSparse(const std::string& type, const Key& key) {
  return Unimplemented("a ", type, " KVStore does not take row_sparse keys (key ", key.ToString(),
                       ")");
}
}  // namespace

Status KVStore::InitRowSparse(const Key& key, const SelectedRows& value) {
  return NoRowSparse(type_, key);
}

Status KVStore::InitSparseTable(const Key& key, const SparseTableSpec& spec) {
  return NoRowSparse(type_, key);
}

Status KVStore::PushRowSparse(const Key& key, const std::vector<SelectedRows>& values,
                              int priority) {
  return NoRowSparse(type_, key);
}

Status KVStore::RowSparsePull(const Key& key, const std::vector<std::vector<int64_t>>& row_ids,
                              const std::vector<SelectedRows*>& outs, int priority) {
  return NoRowSparse(type_, key);
}

StatusOr<SparseTableSpec> RowSparseSpecOf(const Key& key, const SelectedRows& value) {
  const Tensor& v = value.value;
  if (v.dims().size() < 1)
    return InvalidArgument("init of key ", key.ToString(),
                           ": a row-sparse value needs at least one dim (one per row)");
  SparseTableSpec spec;
  spec.dtype = v.dtype();
  spec.height = value.height;
  for (int i = 1; i < v.dims().size(); ++i) spec.row_dims.push_back(v.dims()[i]);
  spec.init = RowInitializer::Constant(0);
  LOOM_RETURN_IF_ERROR(CheckSparseTableSpec(key, spec));
  return spec;
}

Status CheckSparseTableSpec(const Key& key, const SparseTableSpec& spec) {
  if (spec.height < 1)
    return InvalidArgument("init of key ", key.ToString(),
                           ": a row-sparse key needs a height >= 1, got ", spec.height);
  if (spec.dtype != proto::FP32 && spec.dtype != proto::FP64)
    return InvalidArgument("init of key ", key.ToString(),
                           ": a row-sparse key holds float32 or float64, not ",
                           DataTypeName(spec.dtype));
  for (int64_t d : spec.row_dims)
    if (d < 1)
      return InvalidArgument("init of key ", key.ToString(), ": row dims ",
                             spec.row_dims.ToString(), " must be positive");
  return spec.init.Check();
}

StatusOr<SelectedRows> MergeRowSparse(const Key& key, const SparseTableSpec& spec,
                                      const std::vector<SelectedRows>& values) {
  if (values.empty()) return InvalidArgument("push of key ", key.ToString(), " with no value");
  const int64_t w = spec.width();
  const size_t elem = SizeOf(spec.dtype);
  std::map<int64_t, int64_t> slot;
  for (size_t k = 0; k < values.size(); ++k) {
    const SelectedRows& s = values[k];
    const Tensor& v = s.value;
    const std::string what = StrCat("row-sparse value ", k, " of key ", key.ToString());
    if (v.dims().size() < 1 || v.dims()[0] != static_cast<int64_t>(s.rows.size()))
      return InvalidArgument(what, " has ", s.rows.size(), " row ids but its data is ",
                             v.dims().ToString());
    DDim row_dims;
    for (int i = 1; i < v.dims().size(); ++i) row_dims.push_back(v.dims()[i]);
    if (v.dtype() != spec.dtype || row_dims != spec.row_dims || s.height != spec.height)
      return InvalidArgument(what, " is ", DataTypeName(v.dtype()), " rows ", row_dims.ToString(),
                             " of height ", s.height, "; the key holds ", DataTypeName(spec.dtype),
                             " ", spec.DimsString());
    if (!s.rows.empty() && (!v.initialized() || !v.place().is_cpu()))
      return InvalidArgument(what, ": its data is not an initialized CPU tensor");
    for (size_t i = 0; i < s.rows.size(); ++i) {
      if (s.rows[i] < 0 || s.rows[i] >= spec.height)
        return InvalidArgument(what, ": row id ", s.rows[i], " (entry ", i, ") is outside [0, ",
                               spec.height, ")");
      slot.emplace(s.rows[i], 0);
    }
  }
  int64_t n = 0;
  for (auto& kv : slot) kv.second = n++;
  SelectedRows out;
  out.height = spec.height;
  out.rows.reserve(slot.size());
  for (const auto& kv : slot) out.rows.push_back(kv.first);
  DDim dims({n});
  for (int64_t d : spec.row_dims) dims.push_back(d);
  out.value = Tensor(spec.dtype, dims);
  char* dst = static_cast<char*>(out.value.mutable_data(Place::CPU(), spec.dtype));
  std::memset(dst, 0, static_cast<size_t>(n * w) * elem);
  auto add = [&](auto zero) {
    using T = decltype(zero);
    T* o = reinterpret_cast<T*>(dst);
    for (const SelectedRows& s : values) {  // list order, then row order: the same sum every run
      const T* src = s.value.data<T>();
      for (size_t i = 0; i < s.rows.size(); ++i) {
        T* row = o + slot[s.rows[i]] * w;
        const T* in = src + static_cast<int64_t>(i) * w;
        for (int64_t j = 0; j < w; ++j) row[j] += in[j];
      }
    }
  };
  if (spec.dtype == proto::FP32)
    add(float{});
  else
    add(double{});
  return out;
}

StatusOr<std::vector<int64_t>> UniqueRowIds(const Key& key, const SparseTableSpec& spec,
                                            const std::vector<int64_t>& ids) {
  std::vector<int64_t> out = ids;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (!out.empty() && (out.front() < 0 || out.back() >= spec.height))
    return InvalidArgument("row_sparse_pull of key ", key.ToString(), ": row id ",
                           out.front() < 0 ? out.front() : out.back(), " is outside [0, ",
                           spec.height, ")");
  return out;
}

Status CheckRowSparsePull(const Key& key, const std::vector<std::vector<int64_t>>& row_ids,
                          const std::vector<SelectedRows*>& outs) {
  if (outs.empty())
    return InvalidArgument("row_sparse_pull of key ", key.ToString(), " into no output");
  if (row_ids.size() != 1 && row_ids.size() != outs.size())
    return InvalidArgument("row_sparse_pull of key ", key.ToString(), ": ", row_ids.size(),
                           " row_ids lists for ", outs.size(),
                           " outputs (give one list, or one per output)");
  return Status::OK();
}

SelectedRows NewRowSparse(const SparseTableSpec& spec, std::vector<int64_t> ids) {
  SelectedRows out;
  out.height = spec.height;
  out.rows = std::move(ids);
  DDim dims({static_cast<int64_t>(out.rows.size())});
  for (int64_t d : spec.row_dims) dims.push_back(d);
  out.value = Tensor(spec.dtype, dims);
  out.value.mutable_data(Place::CPU(), spec.dtype);
  return out;
}

}  // namespace loom::kvstore
