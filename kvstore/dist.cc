#include "kvstore/dist.h"

#include "base/interrupt.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <set>

#include "base/copy.h"
#include "base/job_env.h"
#include "loom/config.h"
#include "rpc/client.h"
#include "rpc/server.h"
#include "rpc/sparse_rows.h"
#if LOOM_MPI_ENABLED
#include "collective/communicator.h"
#include "collective/transport/mpi.h"
#endif

namespace loom::kvstore {
namespace {

using Clock = std::chrono::steady_clock;

// A count the launcher must have set (`value` is JobEnv's, < min when unset).
StatusOr<int> Launched(const char* name, int value, int min) {
  if (value < min)
    return FailedPrecondition(name, " is not set to a number >= ", min,
                              " (start the job with `loom launch`)");
  return value;
}

uint64_t Fnv(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// A tensor holding a received payload (its buffer when aligned, else a copy).
Tensor FromPayload(DataType dtype, const DDim& dims, zmq::message_t payload) {
  Tensor t(dtype, dims);
  if (payload.size() == 0 || reinterpret_cast<uintptr_t>(payload.data()) % 8 != 0) {
    void* dst = t.mutable_data(Place::CPU(), dtype);
    if (payload.size()) CopyBytes(dst, payload.data(), payload.size());
    return t;
  }
  auto* msg = new zmq::message_t(std::move(payload));
  t.ShareBuffer(std::make_shared<Allocation>(Place::CPU(), msg->data(), msg->size(),
                                             [msg](void*) { delete msg; }),
                0, Place::CPU());
  return t;
}

std::string Fingerprint(const std::string& type) { return "kvstore:" + type; }

// ---------------------------------------------------------------------------------------------
// Worker

struct Shard {
  int server;
  int64_t begin, end;  // elements of the flattened value
  std::string name;
};

struct KeyMeta {
  DataType dtype;
  DDim dims;
  std::vector<Shard> shards;
  int64_t pushes = 0;
};

// A row-sparse key: its rows live on every server, each id on server ShardOf(id, servers).
struct SparseMeta {
  SparseTableSpec spec;
  std::string name;  // the table's name on every server
  int64_t pushes = 0;
};

// The header fields of a row-sparse message of `n` rows of key `m`.
rpc::Header SparseHeader(rpc::Header::Kind kind, const SparseMeta& m, int64_t n) {
  rpc::Header h;
  h.set_kind(kind);
  h.set_name(m.name);
  h.set_height(m.spec.height);
  h.add_dims(n);
  if (kind == rpc::Header::SPARSE_GET) {
    h.set_dtype(rpc::kInt64Dtype);
    h.set_nbytes(n * 8);
    return h;
  }
  h.set_dtype(static_cast<int>(m.spec.dtype));
  for (int64_t d : m.spec.row_dims) h.add_dims(d);
  h.set_nbytes(n * m.spec.width() * static_cast<int64_t>(SizeOf(m.spec.dtype)));
  return h;
}

// The rows of `s` (merged: unique ids) that each of `servers` holds: (ids, value) per server.
std::vector<SelectedRows> SplitByServer(const SelectedRows& s, const SparseTableSpec& spec,
                                        int servers) {
  std::vector<std::vector<size_t>> pick(static_cast<size_t>(servers));
  for (size_t i = 0; i < s.rows.size(); ++i)
    pick[static_cast<size_t>(SparseTable::ShardOf(s.rows[i], servers))].push_back(i);
  const size_t row_bytes = static_cast<size_t>(spec.width()) * SizeOf(spec.dtype);
  std::vector<SelectedRows> out;
  for (int v = 0; v < servers; ++v) {
    std::vector<int64_t> ids;
    for (size_t i : pick[static_cast<size_t>(v)]) ids.push_back(s.rows[i]);
    SelectedRows part = NewRowSparse(spec, std::move(ids));
    char* dst = static_cast<char*>(part.value.raw_data());
    const char* src = static_cast<const char*>(s.value.raw_data());
    for (size_t k = 0; k < pick[static_cast<size_t>(v)].size(); ++k)
      CopyBytes(dst + k * row_bytes, src + pick[static_cast<size_t>(v)][k] * row_bytes, row_bytes);
    out.push_back(std::move(part));
  }
  return out;
}

// The two frames of a row-sparse value (its ids, its rows), kept alive until sent.
std::vector<rpc::Payload> SparsePayloads(const SelectedRows& s) {
  auto ids = std::make_shared<const std::vector<int64_t>>(s.rows);
  return {rpc::RowIdsPayload(ids),
          {s.value.raw_data(), s.value.nbytes(), std::shared_ptr<const void>(s.value.holder())}};
}

// out[i] = the rows of `all` (ascending unique ids, values) that ids[i] names.
Status PickRows(const SelectedRows& all, const SparseTableSpec& spec,
                const std::vector<std::vector<int64_t>>& ids,
                const std::vector<SelectedRows*>& outs) {
  const size_t row_bytes = static_cast<size_t>(spec.width()) * SizeOf(spec.dtype);
  for (size_t i = 0; i < outs.size(); ++i) {
    SelectedRows out = NewRowSparse(spec, ids[ids.size() == 1 ? 0 : i]);
    char* dst = static_cast<char*>(out.value.raw_data());
    const char* src = static_cast<const char*>(all.value.raw_data());
    for (size_t k = 0; k < out.rows.size(); ++k) {
      auto it = std::lower_bound(all.rows.begin(), all.rows.end(), out.rows[k]);
      if (it == all.rows.end() || *it != out.rows[k])
        return Internal("row ", out.rows[k], " missing from a row-sparse pull");
      CopyBytes(dst + k * row_bytes, src + (it - all.rows.begin()) * row_bytes, row_bytes);
    }
    *outs[i] = std::move(out);
  }
  return Status::OK();
}

// The unique ascending ids of every list, each list checked, and their union.
StatusOr<std::vector<int64_t>> PullIds(const Key& key, const SparseTableSpec& spec,
                                       const std::vector<std::vector<int64_t>>& row_ids,
                                       std::vector<std::vector<int64_t>>* unique) {
  std::vector<int64_t> all;
  for (const auto& ids : row_ids) {
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> u, UniqueRowIds(key, spec, ids));
    all.insert(all.end(), u.begin(), u.end());
    unique->push_back(std::move(u));
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

class DistStore final : public KVStore {
 public:
  DistStore(std::string type, int rank, int workers, std::unique_ptr<rpc::Client> client,
            int64_t bound)
      : KVStore(std::move(type)),
        rank_(rank),
        workers_(workers),
        client_(std::move(client)),
        bound_(bound) {}
  ~DistStore() override { (void)Close(); }

  int rank() const override { return rank_; }
  int num_workers() const override { return workers_; }

  Status Init(const Key& key, const Tensor& value) override {
    LOOM_RETURN_IF_ERROR(CheckKeyKind(key));
    if (meta_.count(key) || sparse_.count(key))
      return AlreadyExists("key ", key.ToString(),
                           " is initialized already; a key is "
                           "initialized once");
    if (!value.initialized() || !value.place().is_cpu())
      return InvalidArgument("init of key ", key.ToString(), ": not an initialized CPU tensor");
    KeyMeta m{value.dtype(), value.dims(), Shards(key, value.numel()), 0};
    if (rank_ == 0) {  // rank 0's value wins (MXNet's rule); the others wait at the barrier
      std::vector<rpc::Client::Ticket> tickets;
      for (const auto& s : m.shards) {
        rpc::Header h = ShardHeader(rpc::Header::INIT, s, m.dtype);
        rpc::Payload p = Slice(value, s);
        tickets.push_back(client_->Post(s.server, h, &p));
      }
      LOOM_RETURN_IF_ERROR(client_->WaitAll(tickets).status());
    }
    meta_[key] = std::move(m);
    return Barrier();
  }

  Status Push(const Key& key, const std::vector<Tensor>& values, int priority) override {
    LOOM_RETURN_IF_ERROR(CheckDense(key, "push"));
    LOOM_ASSIGN_OR_RETURN(KeyMeta * m, Initialized(meta_, key, "push"));
    if (values.empty()) return InvalidArgument("push of key ", key.ToString(), " with no value");
    Tensor want(m->dtype, m->dims);
    want.mutable_data(Place::CPU(), m->dtype);
    for (const auto& v : values) LOOM_RETURN_IF_ERROR(CheckValue(key, want, v, "a pushed value"));
    // A fresh buffer per push: ZeroMQ sends from it after this returns.
    LOOM_RETURN_IF_ERROR(SumValues(values, &want, {}));
    ++m->pushes;
    for (const auto& s : m->shards) {
      rpc::Header h = ShardHeader(rpc::Header::SEND, s, m->dtype);
      h.set_step(m->pushes);
      rpc::Payload p = Slice(want, s);
      client_->PostOneWay(s.server, h, &p, priority);  // answered only when refused
    }
    return Status::OK();
  }

  Status Pull(const Key& key, const std::vector<Tensor*>& outs, int priority) override {
    LOOM_RETURN_IF_ERROR(CheckDense(key, "pull"));
    LOOM_ASSIGN_OR_RETURN(KeyMeta * m, Initialized(meta_, key, "pull"));
    if (outs.empty()) return InvalidArgument("pull of key ", key.ToString(), " into no output");
    Tensor want(m->dtype, m->dims);
    want.mutable_data(Place::CPU(), m->dtype);
    for (Tensor* o : outs) LOOM_RETURN_IF_ERROR(CheckValue(key, want, *o, "a pull output"));
    std::map<int, std::vector<const Shard*>> by_server;
    for (const auto& s : m->shards) by_server[s.server].push_back(&s);
    std::vector<std::pair<int, rpc::Client::Ticket>> tickets;
    for (const auto& [server, shards] : by_server) {
      rpc::Header h;
      h.set_kind(rpc::Header::GET);
      h.set_step(m->pushes);  // sync: after the merge of this worker's pushes
      for (const Shard* s : shards) h.add_tensors()->set_name(s->name);
      tickets.push_back({server, client_->Post(server, h)});
    }
    std::vector<rpc::Client::Ticket> waits;
    for (const auto& st : tickets) waits.push_back(st.second);
    // Every shard, or the first failure (not a later one it caused).
    LOOM_ASSIGN_OR_RETURN(std::vector<rpc::Reply> replies, client_->WaitAll(waits));
    const size_t elem = SizeOf(m->dtype);
    char* dst = static_cast<char*>(outs[0]->raw_data());
    for (size_t k = 0; k < tickets.size(); ++k) {
      const int server = tickets[k].first;
      const rpc::Reply& r = replies[k];
      const auto& shards = by_server[server];
      if (r.payloads.size() != shards.size())
        return Internal("server ", client_->endpoints()[server], " answered ", r.payloads.size(),
                        " shards for ", shards.size());
      for (size_t i = 0; i < shards.size(); ++i) {
        const Shard& s = *shards[i];
        if (r.payloads[i].size() != static_cast<size_t>(s.end - s.begin) * elem)
          return Internal("shard '", s.name, "' came back with a bad size");
        CopyBytes(dst + s.begin * elem, r.payloads[i].data(), r.payloads[i].size());
      }
    }
    for (size_t i = 1; i < outs.size(); ++i)
      CopyBytes(outs[i]->raw_data(), outs[0]->raw_data(), outs[0]->nbytes());
    return Status::OK();
  }

  Status SetOptimizer(const OptimizerSpec& spec) override {
    LOOM_RETURN_IF_ERROR(MakeUpdater(spec).status());  // the registry's checks, here too
    if (rank_ == 0) {
      rpc::Header h;
      h.set_kind(rpc::Header::OPTIMIZER);
      h.set_text(spec.name);
      for (const auto& [k, v] : spec.params) (*h.mutable_params())[k] = v;
      LOOM_RETURN_IF_ERROR(client_->CallAll(h));
    }
    return Barrier();
  }

  Status InitRowSparse(const Key& key, const SelectedRows& value) override {
    LOOM_RETURN_IF_ERROR(CheckKeyKind(key));
    LOOM_RETURN_IF_ERROR(CheckNew(key));
    LOOM_ASSIGN_OR_RETURN(SparseTableSpec spec, RowSparseSpecOf(key, value));
    LOOM_ASSIGN_OR_RETURN(SelectedRows merged, MergeRowSparse(key, spec, {value}));
    return InitSparse(key, spec, merged);
  }

  Status InitSparseTable(const Key& key, const SparseTableSpec& spec) override {
    LOOM_RETURN_IF_ERROR(CheckKeyKind(key));
    LOOM_RETURN_IF_ERROR(CheckNew(key));
    LOOM_RETURN_IF_ERROR(CheckSparseTableSpec(key, spec));
    return InitSparse(key, spec, NewRowSparse(spec, {}));
  }

  Status PushRowSparse(const Key& key, const std::vector<SelectedRows>& values,
                       int priority) override {
    LOOM_ASSIGN_OR_RETURN(SparseMeta * m, SparseKey(key, "row-sparse push"));
    LOOM_ASSIGN_OR_RETURN(SelectedRows merged, MergeRowSparse(key, m->spec, values));
    ++m->pushes;
    // Every server gets a push, empty or not: a sync round needs every worker's push.
    const auto parts = SplitByServer(merged, m->spec, servers());
    for (int v = 0; v < servers(); ++v) {
      rpc::Header h = SparseHeader(rpc::Header::SPARSE_PUSH, *m,
                                   static_cast<int64_t>(parts[static_cast<size_t>(v)].rows.size()));
      h.set_step(m->pushes);
      client_->PostOneWay(v, h, SparsePayloads(parts[static_cast<size_t>(v)]), priority);
    }
    return Status::OK();
  }

  Status RowSparsePull(const Key& key, const std::vector<std::vector<int64_t>>& row_ids,
                       const std::vector<SelectedRows*>& outs, int priority) override {
    LOOM_ASSIGN_OR_RETURN(SparseMeta * m, SparseKey(key, "row_sparse_pull"));
    LOOM_RETURN_IF_ERROR(CheckRowSparsePull(key, row_ids, outs));
    std::vector<std::vector<int64_t>> unique;
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> all, PullIds(key, m->spec, row_ids, &unique));
    SelectedRows got;
    LOOM_RETURN_IF_ERROR(PullRows(key, *m, all, &got));
    return PickRows(got, m->spec, unique, outs);
  }

  // Every server answers once every worker still working has reached this barrier; as a
  // server takes a worker's messages in order, each server has then taken every push sent
  // before it.
  Status Barrier() override {
    rpc::Header h;
    h.set_kind(rpc::Header::FETCH_BARRIER);  // a worker barrier
    h.set_step(++barriers_);
    return client_->CallAll(h);
  }

  Status Close() override {
    if (closed_) return Status::OK();
    closed_ = true;
    rpc::Header h;
    h.set_kind(rpc::Header::COMPLETE);
    return client_->CallAll(h);
  }

 private:
  std::vector<Shard> Shards(const Key& key, int64_t numel) const {
    const int servers = static_cast<int>(client_->endpoints().size());
    const std::string base = (key.is_string ? "s:" + key.name : "i:" + std::to_string(key.id));
    std::vector<Shard> out;
    if (numel <= bound_ || servers == 1) {
      out.push_back({static_cast<int>(Fnv(base) % servers), 0, numel, base + "#0"});
      return out;
    }
    for (int s = 0; s < servers; ++s) {
      const int64_t b = numel * s / servers, e = numel * (s + 1) / servers;
      out.push_back({s, b, e, base + "#" + std::to_string(s)});
    }
    return out;
  }

  int servers() const { return static_cast<int>(client_->endpoints().size()); }

  Status CheckNew(const Key& key) const {
    if (meta_.count(key) || sparse_.count(key))
      return AlreadyExists("key ", key.ToString(),
                           " is initialized already; a key is initialized once");
    return Status::OK();
  }

  Status CheckDense(const Key& key, const char* op) const {
    if (sparse_.count(key))
      return InvalidArgument(op, " of key ", key.ToString(), ": the key is row_sparse (",
                             sparse_.at(key).spec.DimsString(),
                             "); push row-sparse arrays and use row_sparse_pull");
    return Status::OK();
  }

  StatusOr<SparseMeta*> SparseKey(const Key& key, const char* op) {
    if (meta_.count(key))
      return InvalidArgument(op, " of key ", key.ToString(), ": the key is dense (",
                             DataTypeName(meta_.at(key).dtype), meta_.at(key).dims.ToString(),
                             "); use push and pull");
    return Initialized(sparse_, key, op);
  }

  // Rank 0 creates the key's table on every server with its share of `rows`; then a barrier.
  Status InitSparse(const Key& key, const SparseTableSpec& spec, const SelectedRows& rows) {
    SparseMeta m{spec, key.is_string ? "s:" + key.name : "i:" + std::to_string(key.id), 0};
    if (rank_ == 0) {
      const auto parts = SplitByServer(rows, spec, servers());
      std::vector<rpc::Client::Ticket> tickets;
      for (int v = 0; v < servers(); ++v) {
        const SelectedRows& part = parts[static_cast<size_t>(v)];
        rpc::Header h =
            SparseHeader(rpc::Header::SPARSE_INIT, m, static_cast<int64_t>(part.rows.size()));
        h.set_text(spec.init.name());
        (*h.mutable_params())["a"] = spec.init.a;
        (*h.mutable_params())["b"] = spec.init.b;
        h.set_seed(spec.init.seed);
        tickets.push_back(client_->Post(v, h, SparsePayloads(part)));
      }
      LOOM_RETURN_IF_ERROR(client_->WaitAll(tickets).status());
    }
    sparse_[key] = std::move(m);
    return Barrier();
  }

  // Rows `ids` (unique, ascending) of a row-sparse key from the servers holding them.
  Status PullRows(const Key& key, const SparseMeta& m, const std::vector<int64_t>& ids,
                  SelectedRows* out) {
    std::vector<std::vector<int64_t>> per(static_cast<size_t>(servers()));
    for (int64_t id : ids)
      per[static_cast<size_t>(SparseTable::ShardOf(id, servers()))].push_back(id);
    std::vector<int> asked;
    std::vector<rpc::Client::Ticket> tickets;
    for (int v = 0; v < servers(); ++v) {
      auto& mine = per[static_cast<size_t>(v)];
      if (mine.empty()) continue;
      rpc::Header h = SparseHeader(rpc::Header::SPARSE_GET, m, static_cast<int64_t>(mine.size()));
      h.set_step(m.pushes);  // sync: after the merge of this worker's pushes
      auto keep = std::make_shared<const std::vector<int64_t>>(mine);
      tickets.push_back(client_->Post(v, h, std::vector<rpc::Payload>{rpc::RowIdsPayload(keep)}));
      asked.push_back(v);
    }
    LOOM_ASSIGN_OR_RETURN(std::vector<rpc::Reply> replies, client_->WaitAll(tickets));
    *out = NewRowSparse(m.spec, ids);
    const size_t row_bytes = static_cast<size_t>(m.spec.width()) * SizeOf(m.spec.dtype);
    for (size_t k = 0; k < asked.size(); ++k) {
      const auto& mine = per[static_cast<size_t>(asked[k])];
      Status st = rpc::CheckSparseReply(replies[k].header, replies[k].payloads, mine,
                                        static_cast<int>(m.spec.dtype), m.spec.width());
      if (!st.ok())
        return st.WithContext(StrCat("row_sparse_pull of key ", key.ToString(), " from server ",
                                     client_->endpoints()[static_cast<size_t>(asked[k])]));
    }
    // Each server's rows are ascending, as are the ids: merge them back in id order.
    std::vector<size_t> next(asked.size(), 0);
    char* dst = static_cast<char*>(out->value.raw_data());
    std::map<int, size_t> slot;
    for (size_t k = 0; k < asked.size(); ++k) slot[asked[k]] = k;
    for (size_t i = 0; i < ids.size(); ++i) {
      const size_t k = slot[SparseTable::ShardOf(ids[i], servers())];
      CopyBytes(dst + i * row_bytes,
                static_cast<const char*>(replies[k].payloads[1].data()) + next[k]++ * row_bytes,
                row_bytes);
    }
    return Status::OK();
  }

  static rpc::Header ShardHeader(rpc::Header::Kind kind, const Shard& s, DataType dtype) {
    rpc::Header h;
    h.set_kind(kind);
    h.set_name(s.name);
    h.set_dtype(static_cast<int>(dtype));
    h.add_dims(s.end - s.begin);
    h.set_nbytes((s.end - s.begin) * static_cast<int64_t>(SizeOf(dtype)));
    return h;
  }

  static rpc::Payload Slice(const Tensor& t, const Shard& s) {
    const size_t elem = SizeOf(t.dtype());
    return {static_cast<const char*>(t.raw_data()) + s.begin * elem,
            static_cast<size_t>(s.end - s.begin) * elem, std::shared_ptr<const void>(t.holder())};
  }

  int rank_, workers_;
  std::unique_ptr<rpc::Client> client_;
  int64_t bound_;
  std::map<Key, KeyMeta> meta_;
  std::map<Key, SparseMeta> sparse_;
  int64_t barriers_ = 0;
  bool closed_ = false;
};

// ---------------------------------------------------------------------------------------------
// Server

struct Entry {
  Tensor value;
  int64_t version = 0;  // merged rounds applied
  // sync: each worker's pushes not merged yet, oldest first (the k-th push of every worker is
  // merged in round k)
  std::map<int, std::deque<zmq::message_t>> pending;
};

// A row-sparse key's shard of rows on this server.
struct SparseEntry {
  std::unique_ptr<SparseTable> table;
  int64_t version = 0;
  std::map<int, std::deque<SelectedRows>> pending;  // sync: as Entry's
};

class KVServer {
 public:
  KVServer(bool sync, int workers, std::string name, rpc::Options options)
      : sync_(sync), workers_(workers), name_(std::move(name)), options_(std::move(options)) {}

  Status Serve(std::unique_ptr<rpc::Server> server) {
    server_ = std::move(server);
    started_ = Clock::now();
    while (Live().size() > 0) {
      if (InterruptRequested())
        return Interrupted(StrCat("kvstore ", name_, " served its workers"));
      for (auto& r : server_->Poll(std::chrono::milliseconds(100))) LOOM_RETURN_IF_ERROR(Handle(r));
      LOOM_RETURN_IF_ERROR(CheckWorkers());
    }
    std::fprintf(stderr, "loom kvstore %s: every worker closed; %zu keys served (%zu row-sparse)\n",
                 name_.c_str(), entries_.size() + sparse_.size(), sparse_.size());
    return Status::OK();
  }

 private:
  std::set<int> Live() const {
    std::set<int> live;
    for (int w = 0; w < workers_; ++w)
      if (!closed_.count(w) && !dead_.count(w)) live.insert(w);
    return live;
  }

  Status Handle(rpc::Request& r) {
    const int w = r.trainer_id;
    if (closed_.count(w) || dead_.count(w)) {
      server_->ReplyError(r, FailedPrecondition("worker ", w, " already closed"));
      return Status::OK();
    }
    Status st;
    switch (r.header.kind()) {
      case rpc::Header::INIT: st = OnInit(r); break;
      case rpc::Header::SEND: st = OnPush(r); break;
      case rpc::Header::GET: OnGet(r); return Status::OK();
      case rpc::Header::SPARSE_INIT: st = OnSparseInit(r); break;
      case rpc::Header::SPARSE_PUSH: st = OnSparsePush(r); break;
      case rpc::Header::SPARSE_GET:
        if (!sparse_.count(r.header.name())) {
          server_->ReplyError(r, NotFound("no row-sparse key '", r.header.name(), "' on ", name_));
          return Status::OK();
        }
        gets_.push_back(std::move(r));
        AnswerWaiters();
        return Status::OK();
      case rpc::Header::OPTIMIZER: {
        const OptimizerSpec spec{r.header.text(),
                                 {r.header.params().begin(), r.header.params().end()}};
        auto u = MakeUpdater(spec);
        auto ru = MakeRowUpdater(spec);
        if (u.ok() && ru.ok()) {
          updater_ = std::move(*u);
          row_updater_ = std::move(*ru);
        }
        st = u.status();
        if (st.ok()) server_->Reply(r, {});
        break;
      }
      case rpc::Header::FETCH_BARRIER:
        barrier_[w] = r.header.step();
        barrier_waiters_.push_back(std::move(r));
        AnswerWaiters();
        return Status::OK();
      case rpc::Header::COMPLETE:
        closed_.insert(w);
        server_->EndSession(w);
        server_->Reply(r, {});
        return Progress();
      default:
        st = InvalidArgument("a kvstore server does not take ", rpc::KindName(r.header.kind()));
    }
    if (!st.ok()) {
      std::fprintf(stderr, "loom kvstore %s: refused a message from worker %d: %s\n", name_.c_str(),
                   w, st.message().c_str());
      server_->ReplyError(r, st);
    }
    return Status::OK();
  }

  StatusOr<Entry*> Find(const std::string& key, const rpc::Header& h) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return NotFound("no key shard '", key, "' on ", name_);
    const Tensor& v = it->second.value;
    if (h.dtype() != static_cast<int>(v.dtype()) || h.dims_size() != 1 || h.dims(0) != v.numel())
      return InvalidArgument("key shard '", key, "' holds ", DataTypeName(v.dtype()), "[",
                             v.numel(), "]; the message is of another dtype or size");
    return &it->second;
  }

  Status OnInit(rpc::Request& r) {
    if (r.header.dims_size() != 1)
      return InvalidArgument("key shard '", r.header.name(), "' must be flat (one dim)");
    if (entries_.count(r.header.name()))
      return AlreadyExists("key shard '", r.header.name(), "' is initialized already");
    DataType dtype = static_cast<DataType>(r.header.dtype());
    Tensor value(dtype, DDim({r.header.dims(0)}));
    void* dst = value.mutable_data(Place::CPU(), dtype);
    if (value.nbytes()) CopyBytes(dst, r.payloads[0].data(), value.nbytes());
    entries_[r.header.name()].value = std::move(value);
    server_->Reply(r, {});
    return Status::OK();
  }

  Status OnPush(rpc::Request& r) {
    LOOM_ASSIGN_OR_RETURN(Entry * e, Find(r.header.name(), r.header));
    if (!sync_) {
      Tensor g = FromPayload(e->value.dtype(), e->value.dims(), std::move(r.payloads[0]));
      return Apply(r.header.name(), e, g, 1);
    }
    auto& queue = e->pending[r.trainer_id];
    const int64_t expected = e->version + 1 + static_cast<int64_t>(queue.size());
    if (r.header.step() != expected)
      return FailedPrecondition("push ", r.header.step(), " of key shard '", r.header.name(),
                                "' from worker ", r.trainer_id, ", expected push ", expected);
    queue.push_back(std::move(r.payloads[0]));
    return Progress();
  }

  Status OnSparseInit(rpc::Request& r) {
    const rpc::Header& h = r.header;
    if (sparse_.count(h.name()) || entries_.count(h.name()))
      return AlreadyExists("key '", h.name(), "' is initialized already on ", name_);
    SparseTableSpec spec;
    spec.dtype = static_cast<DataType>(h.dtype());
    spec.height = h.height();
    for (int i = 1; i < h.dims_size(); ++i) spec.row_dims.push_back(h.dims(i));
    auto param = [&](const char* k) {
      auto it = h.params().find(k);
      return it == h.params().end() ? 0.0 : it->second;
    };
    LOOM_ASSIGN_OR_RETURN(spec.init,
                          RowInitializer::FromName(h.text(), param("a"), param("b"), h.seed()));
    LOOM_ASSIGN_OR_RETURN(auto table, SparseTable::Create(spec));
    LOOM_ASSIGN_OR_RETURN(SelectedRows rows, ReceivedRows(r, spec));
    LOOM_RETURN_IF_ERROR(table->Assign(rows.rows.data(), static_cast<int64_t>(rows.rows.size()),
                                       rows.value.raw_data(), "init of '" + h.name() + "'"));
    sparse_[h.name()].table = std::move(table);
    server_->Reply(r, {});
    return Status::OK();
  }

  // The SelectedRows of a SPARSE_INIT / SPARSE_PUSH (Decode checked its frames and ids), checked
  // against the key's spec.
  StatusOr<SelectedRows> ReceivedRows(rpc::Request& r, const SparseTableSpec& spec) {
    const rpc::Header& h = r.header;
    DDim row_dims;
    for (int i = 1; i < h.dims_size(); ++i) row_dims.push_back(h.dims(i));
    if (h.dtype() != static_cast<int>(spec.dtype) || row_dims != spec.row_dims ||
        h.height() != spec.height)
      return InvalidArgument("row-sparse key '", h.name(), "' holds ", DataTypeName(spec.dtype),
                             " ", spec.DimsString(), "; the message is of another dtype or shape");
    SelectedRows s;
    s.height = spec.height;
    s.rows = rpc::ReadRowIds(r.payloads[0].data(), r.payloads[0].size());
    DDim dims({static_cast<int64_t>(s.rows.size())});
    for (int64_t d : row_dims) dims.push_back(d);
    s.value = FromPayload(spec.dtype, dims, std::move(r.payloads[1]));
    return s;
  }

  Status OnSparsePush(rpc::Request& r) {
    auto it = sparse_.find(r.header.name());
    if (it == sparse_.end())
      return NotFound("no row-sparse key '", r.header.name(), "' on ", name_);
    SparseEntry& e = it->second;
    LOOM_ASSIGN_OR_RETURN(SelectedRows rows, ReceivedRows(r, e.table->spec()));
    if (!sync_) return ApplySparse(it->first, &e, {std::move(rows)});
    auto& queue = e.pending[r.trainer_id];
    const int64_t expected = e.version + 1 + static_cast<int64_t>(queue.size());
    if (r.header.step() != expected)
      return FailedPrecondition("row-sparse push ", r.header.step(), " of key '", r.header.name(),
                                "' from worker ", r.trainer_id, ", expected push ", expected);
    queue.push_back(std::move(rows));
    return Progress();
  }

  // Merges the pushes (rows summed in worker order), then the optimizer updates the touched
  // rows, or without one the merged rows become the shard's whole value.
  Status ApplySparse(const std::string& name, SparseEntry* e,
                     const std::vector<SelectedRows>& parts) {
    SparseTable& t = *e->table;
    LOOM_ASSIGN_OR_RETURN(SelectedRows merged, MergeRowSparse(Key::Str(name), t.spec(), parts));
    const std::string what = StrCat("push of '", name, "' on ", name_);
    const auto n = static_cast<int64_t>(merged.rows.size());
    if (row_updater_) {
      LOOM_RETURN_IF_ERROR(t.Apply(*row_updater_, merged.rows.data(), n, merged.value.raw_data(),
                                   static_cast<int>(parts.size()), what));
    } else {
      t.Clear();
      LOOM_RETURN_IF_ERROR(t.Assign(merged.rows.data(), n, merged.value.raw_data(), what));
    }
    ++e->version;
    return Status::OK();
  }

  // Merges every shard whose live workers have all pushed, then answers what waited for it.
  Status Progress() {
    if (sync_) {
      const std::set<int> live = Live();
      for (auto& [key, e] : entries_) {
        for (;;) {  // every round whose pushes have all arrived
          bool all = !live.empty();
          for (int w : live) all = all && !e.pending[w].empty();
          if (!all) break;
          std::vector<Tensor> parts;
          for (int w : live) {  // worker order: the same sum on every run
            parts.push_back(
                FromPayload(e.value.dtype(), e.value.dims(), std::move(e.pending[w].front())));
            e.pending[w].pop_front();
          }
          Tensor merged(e.value.dtype(), e.value.dims());
          merged.mutable_data(Place::CPU(), e.value.dtype());
          LOOM_RETURN_IF_ERROR(SumValues(parts, &merged, {}));
          LOOM_RETURN_IF_ERROR(Apply(key, &e, merged, static_cast<int>(parts.size())));
        }
      }
      for (auto& [key, e] : sparse_) {
        for (;;) {
          bool all = !live.empty();
          for (int w : live) all = all && !e.pending[w].empty();
          if (!all) break;
          std::vector<SelectedRows> parts;
          for (int w : live) {
            parts.push_back(std::move(e.pending[w].front()));
            e.pending[w].pop_front();
          }
          LOOM_RETURN_IF_ERROR(ApplySparse(key, &e, parts));
        }
      }
    }
    AnswerWaiters();
    return Status::OK();
  }

  Status Apply(const std::string& key, Entry* e, const Tensor& merged, int parts) {
    if (updater_) {
      LOOM_RETURN_IF_ERROR(updater_->Update(key, merged, parts, &e->value));
    } else {  // no optimizer: the merged sum replaces the value (MXNet's rule)
      CopyBytes(e->value.raw_data(), merged.raw_data(), merged.nbytes());
    }
    ++e->version;
    return Status::OK();
  }

  void OnGet(rpc::Request& r) {
    for (const auto& t : r.header.tensors())
      if (!entries_.count(t.name())) {
        server_->ReplyError(r, NotFound("no key shard '", t.name(), "' on ", name_));
        return;
      }
    gets_.push_back(std::move(r));
    AnswerWaiters();
  }

  bool Ready(const rpc::Request& r) const {
    if (!sync_) return true;
    if (r.header.kind() == rpc::Header::SPARSE_GET)
      return sparse_.at(r.header.name()).version >= r.header.step();
    for (const auto& t : r.header.tensors())
      if (entries_.at(t.name()).version < r.header.step()) return false;
    return true;
  }

  void Reply(const rpc::Request& r) {
    if (r.header.kind() == rpc::Header::SPARSE_GET) return ReplySparse(r);
    rpc::Header h;
    std::vector<rpc::Payload> payloads;
    for (const auto& t : r.header.tensors()) {
      const Tensor& v = entries_.at(t.name()).value;
      auto* meta = h.add_tensors();
      meta->set_name(t.name());
      meta->set_dtype(static_cast<int>(v.dtype()));
      meta->add_dims(v.numel());
      meta->set_nbytes(static_cast<int64_t>(v.nbytes()));
      payloads.push_back({v.raw_data(), v.nbytes(), nullptr});  // copied: values change any time
    }
    server_->Reply(r, std::move(h), payloads);
  }

  // The rows a SPARSE_GET asks for (created on first touch): tensors "rows" and "value".
  void ReplySparse(const rpc::Request& r) {
    SparseTable& t = *sparse_.at(r.header.name()).table;
    auto ids = std::make_shared<const std::vector<int64_t>>(
        rpc::ReadRowIds(r.payloads[0].data(), r.payloads[0].size()));
    SelectedRows rows = NewRowSparse(t.spec(), *ids);
    Status st = t.Lookup(ids->data(), static_cast<int64_t>(ids->size()), rows.value.raw_data(),
                         StrCat("row_sparse_pull of '", r.header.name(), "' on ", name_));
    if (!st.ok()) return server_->ReplyError(r, st);
    rpc::Header h;
    auto* meta = h.add_tensors();
    meta->set_name("rows");
    meta->set_dtype(rpc::kInt64Dtype);
    meta->add_dims(static_cast<int64_t>(ids->size()));
    meta->set_nbytes(static_cast<int64_t>(ids->size() * 8));
    meta = h.add_tensors();
    meta->set_name("value");
    meta->set_dtype(static_cast<int>(rows.value.dtype()));
    for (int64_t d : rows.value.dims()) meta->add_dims(d);
    meta->set_nbytes(static_cast<int64_t>(rows.value.nbytes()));
    server_->Reply(r, std::move(h),
                   {rpc::RowIdsPayload(ids),
                    {rows.value.raw_data(), rows.value.nbytes(),
                     std::shared_ptr<const void>(rows.value.holder())}});
  }

  void AnswerWaiters() {
    std::vector<rpc::Request> keep;
    for (auto& r : gets_) {
      if (Ready(r))
        Reply(r);
      else
        keep.push_back(std::move(r));
    }
    gets_.swap(keep);
    keep.clear();
    const std::set<int> live = Live();
    for (auto& r : barrier_waiters_) {
      bool all = true;
      for (int w : live) all = all && barrier_[w] >= r.header.step();
      if (all)
        server_->Reply(r, {});
      else
        keep.push_back(std::move(r));
    }
    barrier_waiters_.swap(keep);
  }

  Status CheckWorkers() {
    const auto now = Clock::now();
    for (int w : Live()) {
      auto heard = server_->LastHeard(w);
      if (!heard) {
        if (now - started_ > options_.connect_timeout)
          return Fail(Timeout(name_, ": worker ", w, " never connected within ",
                              options_.connect_timeout.count(), " ms"));
        continue;
      }
      if (now - *heard <= options_.timeout) continue;
      Status why = Timeout(name_, ": worker ", w, " sent nothing for ", options_.timeout.count(),
                           " ms (LOOM_PS_TIMEOUT_MS): it died or hangs");
      if (sync_) return Fail(why);
      std::fprintf(stderr, "loom kvstore %s (async): %s; serving the others\n", name_.c_str(),
                   why.message().c_str());
      dead_.insert(w);
    }
    return Progress();
  }

  Status Fail(const Status& why) {
    for (auto& r : gets_) server_->ReplyError(r, why);
    for (auto& r : barrier_waiters_) server_->ReplyError(r, why);
    gets_.clear();
    barrier_waiters_.clear();
    std::fprintf(stderr, "loom kvstore %s: %s\n", name_.c_str(), why.message().c_str());
    return why;
  }

  bool sync_;
  int workers_;
  std::string name_;
  rpc::Options options_;
  std::unique_ptr<rpc::Server> server_;
  std::unique_ptr<Updater> updater_;
  std::unique_ptr<RowUpdater> row_updater_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, SparseEntry> sparse_;
  std::set<int> closed_, dead_;
  std::map<int, int64_t> barrier_;
  std::vector<rpc::Request> gets_, barrier_waiters_;
  Clock::time_point started_;
};

Status CheckType(const std::string& type) {
  if (type != "dist_sync" && type != "dist_async" && type != "dist_sync_mpi" &&
      type != "dist_async_mpi")
    return InvalidArgument(
        "a distributed KVStore is dist_sync, dist_async, dist_sync_mpi or "
        "dist_async_mpi, not '",
        type, "'");
  return Status::OK();
}

bool IsMpiType(const std::string& type) {
  return type.size() > 4 && type.substr(type.size() - 4) == "_mpi";
}
bool IsSyncType(const std::string& type) { return type.rfind("dist_sync", 0) == 0; }

}  // namespace

StatusOr<std::string> LaunchRole() {
  LOOM_ASSIGN_OR_RETURN(JobEnv job, ReadJobEnv());
  if (job.role == JobRole::kServer) return std::string("server");
  if (job.role == JobRole::kTrainer) return std::string("worker");
  return std::string();
}

namespace {

// A store connected to the servers as peer `rank` of `workers` (a worker, or a client's rank 0).
StatusOr<std::unique_ptr<DistStore>> ConnectDistStore(const JobEnv& job, const std::string& type,
                                                      int rank, int workers) {
  const std::vector<std::string>& servers = job.server_endpoints;
  if (servers.empty())
    return FailedPrecondition("a ", type,
                              " KVStore needs servers: PADDLE_PSERVER_ENDPOINTS is "
                              "empty (loom launch --servers S with S >= 1)");
  int64_t bound = 1000000;  // MXNet's MXNET_KVSTORE_BIGARRAY_BOUND default
  if (const char* v = std::getenv("LOOM_KVSTORE_BIGARRAY_BOUND"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    bound = std::strtoll(v, &end, 10);
    if (*end != '\0' || bound < 1)
      return InvalidArgument("LOOM_KVSTORE_BIGARRAY_BOUND='", v, "' is not a number >= 1");
  }
  LOOM_ASSIGN_OR_RETURN(rpc::Options options, rpc::OptionsFromEnv());
  LOOM_ASSIGN_OR_RETURN(auto client,
                        rpc::Client::Connect(servers, rank, Fingerprint(type), options));
  return std::make_unique<DistStore>(type, rank, workers, std::move(client), bound);
}

#if LOOM_MPI_ENABLED
// A worker of an MPI client (MXNET-MPI): the client's workers are one MPI world. A push is
// summed inside the client (an allreduce over MPI), and the client's rank 0 pushes the sum to the
// servers as one peer; a pull is rank 0's, broadcast in the client. The servers see the clients.
class MpiClientStore final : public KVStore {
 public:
  MpiClientStore(std::string type, int rank, int workers,
                 std::unique_ptr<collective::Communicator> comm, std::unique_ptr<KVStore> leader,
                 bool replicated)
      : KVStore(std::move(type)),
        rank_(rank),
        workers_(workers),
        comm_(std::move(comm)),
        leader_(std::move(leader)),
        replicated_(replicated) {}
  ~MpiClientStore() override { (void)Close(); }

  int rank() const override { return rank_; }
  int num_workers() const override { return workers_; }
  int client_rank() const override { return comm_->rank(); }
  int client_size() const override { return comm_->nranks(); }

  Status Init(const Key& key, const Tensor& value) override {
    LOOM_RETURN_IF_ERROR(CheckKeyKind(key));
    if (meta_.count(key) || sparse_.count(key))
      return AlreadyExists("key ", key.ToString(), " is initialized already");
    if (!value.initialized() || !value.place().is_cpu())
      return InvalidArgument("init of key ", key.ToString(), ": not an initialized CPU tensor");
    meta_[key] = Tensor(value.dtype(), value.dims());
    meta_[key].mutable_data(Place::CPU(), value.dtype());
    if (replicated_) {  // every rank keeps the value: rank 0's, broadcast
      Tensor v;
      TensorCopy(value, Place::CPU(), &v);
      LOOM_RETURN_IF_ERROR(ClientBroadcast(&v, 0));
      LOOM_RETURN_IF_ERROR(leader_->Init(key, v));
    } else if (leader_) {
      LOOM_RETURN_IF_ERROR(leader_->Init(key, value));
    }
    return comm_->Barrier().Wait();
  }

  Status InitRowSparse(const Key& key, const SelectedRows& value) override {
    LOOM_RETURN_IF_ERROR(CheckKeyKind(key));
    if (meta_.count(key) || sparse_.count(key))
      return AlreadyExists("key ", key.ToString(), " is initialized already");
    LOOM_ASSIGN_OR_RETURN(SparseTableSpec spec, RowSparseSpecOf(key, value));
    LOOM_ASSIGN_OR_RETURN(SelectedRows merged, MergeRowSparse(key, spec, {value}));
    if (replicated_) {  // every rank keeps the value: rank 0's, broadcast
      LOOM_RETURN_IF_ERROR(BroadcastRows(&merged, spec, 0));
      LOOM_RETURN_IF_ERROR(leader_->InitRowSparse(key, merged));
    } else if (leader_) {
      LOOM_RETURN_IF_ERROR(leader_->InitRowSparse(key, merged));
    }
    sparse_[key] = spec;
    return comm_->Barrier().Wait();
  }

  Status InitSparseTable(const Key& key, const SparseTableSpec& spec) override {
    LOOM_RETURN_IF_ERROR(CheckKeyKind(key));
    if (meta_.count(key) || sparse_.count(key))
      return AlreadyExists("key ", key.ToString(), " is initialized already");
    LOOM_RETURN_IF_ERROR(CheckSparseTableSpec(key, spec));
    if (leader_) LOOM_RETURN_IF_ERROR(leader_->InitSparseTable(key, spec));
    sparse_[key] = spec;
    return comm_->Barrier().Wait();
  }

  // The client's pushes are gathered on every rank (rank order), and rank 0 pushes them as one
  // list (its store merges them); without servers every rank's store takes the same list.
  Status PushRowSparse(const Key& key, const std::vector<SelectedRows>& values,
                       int priority) override {
    if (meta_.count(key))
      return InvalidArgument("row-sparse push of key ", key.ToString(), ": the key is dense");
    LOOM_ASSIGN_OR_RETURN(SparseTableSpec * spec, Initialized(sparse_, key, "row-sparse push"));
    LOOM_ASSIGN_OR_RETURN(SelectedRows merged, MergeRowSparse(key, *spec, values));
    std::vector<SelectedRows> parts;
    for (int r = 0; r < comm_->nranks(); ++r) {
      SelectedRows part = r == comm_->rank() ? merged : SelectedRows{};
      LOOM_RETURN_IF_ERROR(BroadcastRows(&part, *spec, r));
      parts.push_back(std::move(part));
    }
    return leader_ ? leader_->PushRowSparse(key, parts, priority) : Status::OK();
  }

  // Rank 0 pulls the union of the client's ids and broadcasts the rows; each rank keeps its own.
  Status RowSparsePull(const Key& key, const std::vector<std::vector<int64_t>>& row_ids,
                       const std::vector<SelectedRows*>& outs, int priority) override {
    if (meta_.count(key))
      return InvalidArgument("row_sparse_pull of key ", key.ToString(), ": the key is dense");
    LOOM_ASSIGN_OR_RETURN(SparseTableSpec * spec, Initialized(sparse_, key, "row_sparse_pull"));
    LOOM_RETURN_IF_ERROR(CheckRowSparsePull(key, row_ids, outs));
    if (replicated_) return leader_->RowSparsePull(key, row_ids, outs, priority);
    std::vector<std::vector<int64_t>> unique;
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> mine, PullIds(key, *spec, row_ids, &unique));
    std::vector<int64_t> all;
    for (int r = 0; r < comm_->nranks(); ++r) {
      SelectedRows ids = NewRowSparse(*spec, r == comm_->rank() ? mine : std::vector<int64_t>{});
      LOOM_RETURN_IF_ERROR(BroadcastRows(&ids, *spec, r, /*ids_only=*/true));
      all.insert(all.end(), ids.rows.begin(), ids.rows.end());
    }
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    SelectedRows got = NewRowSparse(*spec, all);
    if (leader_) LOOM_RETURN_IF_ERROR(leader_->RowSparsePull(key, {all}, {&got}, priority));
    LOOM_RETURN_IF_ERROR(BroadcastRows(&got, *spec, 0));
    return PickRows(got, *spec, unique, outs);
  }

  Status Push(const Key& key, const std::vector<Tensor>& values, int priority) override {
    if (sparse_.count(key))
      return InvalidArgument("push of key ", key.ToString(),
                             ": the key is row_sparse; push row-sparse arrays");
    LOOM_ASSIGN_OR_RETURN(Tensor * sum, Initialized(meta_, key, "push"));
    if (values.empty()) return InvalidArgument("push of key ", key.ToString(), " with no value");
    for (const auto& v : values) LOOM_RETURN_IF_ERROR(CheckValue(key, *sum, v, "a pushed value"));
    LOOM_RETURN_IF_ERROR(SumValues(values, sum, {}));
    LOOM_RETURN_IF_ERROR(ClientAllReduce(*sum, sum));
    return leader_ ? leader_->Push(key, {*sum}, priority) : Status::OK();
  }

  Status Pull(const Key& key, const std::vector<Tensor*>& outs, int priority) override {
    if (sparse_.count(key))
      return InvalidArgument("pull of key ", key.ToString(),
                             ": the key is row_sparse; use row_sparse_pull");
    LOOM_ASSIGN_OR_RETURN(Tensor * value, Initialized(meta_, key, "pull"));
    if (outs.empty()) return InvalidArgument("pull of key ", key.ToString(), " into no output");
    for (Tensor* o : outs) LOOM_RETURN_IF_ERROR(CheckValue(key, *value, *o, "a pull output"));
    if (leader_) LOOM_RETURN_IF_ERROR(leader_->Pull(key, {value}, priority));
    if (!replicated_) LOOM_RETURN_IF_ERROR(ClientBroadcast(value, 0));
    for (Tensor* o : outs) CopyBytes(o->raw_data(), value->raw_data(), value->nbytes());
    return Status::OK();
  }

  Status SetOptimizer(const OptimizerSpec& spec) override {
    LOOM_RETURN_IF_ERROR(MakeUpdater(spec).status());
    if (leader_) LOOM_RETURN_IF_ERROR(leader_->SetOptimizer(spec));
    return comm_->Barrier().Wait();
  }

  Status Barrier() override {
    LOOM_RETURN_IF_ERROR(comm_->Barrier().Wait());
    if (leader_) LOOM_RETURN_IF_ERROR(leader_->Barrier());
    return comm_->Barrier().Wait();
  }

  Status Close() override {
    if (closed_) return Status::OK();
    closed_ = true;
    return leader_ ? leader_->Close() : Status::OK();
  }

  Status ClientAllReduce(const Tensor& in, Tensor* out) override {
    LOOM_ASSIGN_OR_RETURN(collective::DataType dtype, CollectiveType(in.dtype()));
    return comm_
        ->AllReduce(in.raw_data(), out->raw_data(), static_cast<size_t>(in.numel()), dtype,
                    collective::ReduceOp::kSum)
        .Wait();
  }

  Status ClientBroadcast(Tensor* t, int root) override {
    LOOM_ASSIGN_OR_RETURN(collective::DataType dtype, CollectiveType(t->dtype()));
    if (root < 0 || root >= comm_->nranks())
      return InvalidArgument("broadcast root ", root, " is not a rank of a client of ",
                             comm_->nranks());
    return comm_
        ->Broadcast(t->raw_data(), t->raw_data(), static_cast<size_t>(t->numel()), dtype, root)
        .Wait();
  }

 private:
  // Rank root's rows (ids, and unless ids_only the values) into every rank's *s.
  Status BroadcastRows(SelectedRows* s, const SparseTableSpec& spec, int root,
                       bool ids_only = false) {
    int64_t n = static_cast<int64_t>(s->rows.size());
    LOOM_RETURN_IF_ERROR(comm_->Broadcast(&n, &n, 1, collective::DataType::kInt64, root).Wait());
    if (comm_->rank() != root) {
      *s = NewRowSparse(spec, std::vector<int64_t>(static_cast<size_t>(n)));
      s->height = spec.height;
    }
    if (n == 0) return Status::OK();
    LOOM_RETURN_IF_ERROR(comm_
                             ->Broadcast(s->rows.data(), s->rows.data(), static_cast<size_t>(n),
                                         collective::DataType::kInt64, root)
                             .Wait());
    if (ids_only) return Status::OK();
    LOOM_ASSIGN_OR_RETURN(collective::DataType dtype, CollectiveType(spec.dtype));
    return comm_
        ->Broadcast(s->value.raw_data(), s->value.raw_data(), static_cast<size_t>(s->value.numel()),
                    dtype, root)
        .Wait();
  }

  int rank_, workers_;
  std::unique_ptr<collective::Communicator> comm_;
  // The client's rank 0: its connection to the servers. Without servers (pure MPI) every rank's
  // local store, kept identical: the same pushes (summed over the client) on every rank.
  std::unique_ptr<KVStore> leader_;
  bool replicated_;
  std::map<Key, Tensor> meta_;             // each key's dtype and dims, and a buffer of them
  std::map<Key, SparseTableSpec> sparse_;  // the row-sparse keys
  bool closed_ = false;
};
#endif

StatusOr<std::unique_ptr<KVStore>> CreateMpiClientStore(const JobEnv& job, const std::string& type,
                                                        int rank, int workers) {
#if LOOM_MPI_ENABLED
  if (!collective::LaunchedByMpirun())
    return FailedPrecondition("a ", type,
                              " KVStore's workers are MPI clients: start the job with "
                              "`loom launch --workers N --servers S --clients C -- ...`");
  LOOM_RETURN_IF_ERROR(collective::MpiInit(nullptr, nullptr));
  LOOM_ASSIGN_OR_RETURN(int client, Launched("LOOM_CLIENT_ID", job.client_id, 0));
  LOOM_ASSIGN_OR_RETURN(int clients, Launched("LOOM_NUM_CLIENTS", job.clients, 1));
  LOOM_ASSIGN_OR_RETURN(auto comm, collective::CreateMpiCommunicator());
  std::unique_ptr<KVStore> leader;
  const bool pure_mpi = job.server_endpoints.empty();
  if (pure_mpi) {  // --servers 0: one client is the whole job, and pushpull is the allreduce
    if (clients != 1)
      return FailedPrecondition("a ", type,
                                " KVStore without servers needs one client of every "
                                "worker (loom launch --servers 0 --clients 1), not ",
                                clients);
    LOOM_ASSIGN_OR_RETURN(leader, KVStore::Create("local"));
  } else if (comm->rank() == 0) {
    LOOM_ASSIGN_OR_RETURN(auto store, ConnectDistStore(job, type, client, clients));
    leader = std::move(store);
  }
  return std::unique_ptr<KVStore>(
      new MpiClientStore(type, rank, workers, std::move(comm), std::move(leader), pure_mpi));
#else
  return Unimplemented("a ", type,
                       " KVStore needs MPI: Loom was built without it (install Open "
                       "MPI, see scripts/install-deps.sh, and rebuild)");
#endif
}

}  // namespace

StatusOr<std::unique_ptr<KVStore>> CreateDistStore(const std::string& type) {
  LOOM_RETURN_IF_ERROR(CheckType(type));
  LOOM_ASSIGN_OR_RETURN(JobEnv job, ReadJobEnv());
  if (job.role != JobRole::kTrainer)
    return FailedPrecondition("a ", type,
                              " KVStore is made by the workers of a job started with "
                              "`loom launch --workers N --servers S",
                              IsMpiType(type) ? " --clients C" : "",
                              " -- python3 train.py` (this process has no "
                              "PADDLE_TRAINING_ROLE=TRAINER)");
  LOOM_ASSIGN_OR_RETURN(int rank, Launched("PADDLE_TRAINER_ID", job.trainer_id, 0));
  LOOM_ASSIGN_OR_RETURN(int workers, Launched("PADDLE_TRAINERS_NUM", job.trainers, 1));
  if (IsMpiType(type)) return CreateMpiClientStore(job, type, rank, workers);
  LOOM_ASSIGN_OR_RETURN(auto store, ConnectDistStore(job, type, rank, workers));
  return std::unique_ptr<KVStore>(std::move(store));
}

Status RunKVServer(const std::string& type) {
  LOOM_RETURN_IF_ERROR(CheckType(type));
  LOOM_ASSIGN_OR_RETURN(JobEnv job, ReadJobEnv());
  if (job.role != JobRole::kServer)
    return FailedPrecondition("this process is not a server of a launched job");
  // With MPI clients the servers' peers are the clients (each one's rank 0), not the workers.
  LOOM_ASSIGN_OR_RETURN(int workers, IsMpiType(type)
                                         ? Launched("LOOM_NUM_CLIENTS", job.clients, 1)
                                         : Launched("PADDLE_TRAINERS_NUM", job.trainers, 1));
  const std::string& endpoint = job.current_endpoint;
  LOOM_ASSIGN_OR_RETURN(rpc::Options options, rpc::OptionsFromEnv());
  rpc::ServerOptions so;
  so.rpc = options;
  so.trainers = workers;
  so.fingerprint = Fingerprint(type);
  so.name = StrCat("server ", job.server_id, " (", endpoint, ")");
  LOOM_ASSIGN_OR_RETURN(auto server, rpc::Server::Bind(endpoint, so));
  KVServer s(IsSyncType(type), workers, so.name, options);
  return s.Serve(std::move(server));
}

}  // namespace loom::kvstore
