#include "kvstore/kvstore.h"

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
  if (store_.count(key))
    return AlreadyExists("key ", key.ToString(), " is initialized already (as ",
                         Describe(store_[key]), "); a key is initialized once");
  if (!value.initialized() || !value.place().is_cpu())
    return InvalidArgument("init of key ", key.ToString(), ": not an initialized CPU tensor");
  TensorCopy(value, Place::CPU(), &store_[key]);
  return Status::OK();
}

Status InProcessStore::Push(const Key& key, const std::vector<Tensor>& values, int priority) {
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
  LOOM_ASSIGN_OR_RETURN(Tensor * stored, Initialized(store_, key, "pull"));
  if (outs.empty()) return InvalidArgument("pull of key ", key.ToString(), " into no output");
  for (Tensor* o : outs) LOOM_RETURN_IF_ERROR(CheckValue(key, *stored, *o, "a pull output"));
  CopyToAll(*stored, outs);
  return Status::OK();
}

Status InProcessStore::PushPull(const Key& key, const std::vector<Tensor>& values,
                                const std::vector<Tensor*>& outs, int priority) {
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
  return Status::OK();
}

}  // namespace loom::kvstore
