// listen_and_serv: a parameter server (Fluid's op of the same name). It binds its endpoint and
// serves the trainers of one transpile until every one of them has closed (exe.close()):
// SEND, BARRIER and FETCH_BARRIER come one way: they are answered only when refused.
//   SEND           a gradient block; sync mode keeps it until the step's barrier, async mode
//                  applies it at once by running that block's optimize sub-block
//   BARRIER        the trainer sent its step (with its sample count); sync mode runs the step
//                  when every trainer still training has: grad = sum over trainers of
//                  samples_t / samples * grad_t (the gradient of the union of their batches), then
//                  the learning-rate block once, then every optimize block; async mode runs the
//                  learning-rate block (it counts every trainer's steps)
//   GET            parameter blocks, answered in one reply; sync mode answers once the asked
//                  step's update is done
//   FETCH_BARRIER  the trainer has the step's parameters (taken; one way)
//   SPARSE_PUSH    gradient rows (one way), merged per trainer; sync mode keeps them until the
//                  step, then uses the sum over trainers of samples_t / samples * rows_t. Of a
//                  distributed lookup table (the ids this server holds): applied with sgd,
//                  adagrad or lazy adam (state per row) after the learning-rate block. Of a
//                  gradient block (an is_sparse table's; ids re-based to the block): the block's
//                  optimize sub-block runs with that SelectedRows as its gradient. Async mode
//                  applies them at once
//   SPARSE_GET     rows of a distributed table (made on first touch from the table's
//                  initializer, seeded per id), answered as GET is (sync: after `step`)
//   CHECKPOINT     saves the server's persistables to DIR/pserver_<id> (atomically), and each
//                  distributed table's touched rows to DIR/pserver_<id>/<table>.sptb
//   COMPLETE       the trainer is done; sync mode computes later steps from the others
// Sync mode takes a trainer's gradients and barrier of a step after the pending one (it may be
// a step ahead of this server: nothing holds it back on a server that owns none of its blocks)
// when that step comes, in the trainer's order; its GETs are answered meanwhile.
// When every trainer has closed, the server writes the gradient blocks it applied from each
// trainer into the variable kUpdatesVar (INT64 [Fanin]; sync mode counts a trainer's block in
// every step it contributed to) of the scope it runs in, so that a caller that made the variable
// in its scope beforehand can check that none was lost.
// A trainer silent for LOOM_PS_TIMEOUT_MS is dead: sync mode ends with an error naming it (and
// sends that error to every trainer waiting here); async mode logs it and serves the rest. A
// trainer that never shows up within LOOM_PS_CONNECT_TIMEOUT_MS ends the server likewise.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "base/copy.h"
#include "base/interrupt.h"
#include "framework/file_util.h"
#include "framework/selected_rows.h"
#include "framework/serialization.h"
#include "kvstore/sparse_table.h"
#include "operators/common.h"
#include "operators/distributed/table_rows.h"
#include "rpc/ps_client.h"
#include "rpc/server.h"
#include "rpc/sparse_rows.h"

namespace loom::ops {
namespace {

using StrList = std::vector<std::string>;
using Table = TableShard;
using Clock = std::chrono::steady_clock;

struct Block {
  std::string param, grad;
  int optimize_block = -1;
  Tensor* param_tensor = nullptr;
  std::map<int, zmq::message_t> received;  // sync: trainer -> this step's gradient
  // Sync: trainer -> this step's gradient rows (merged), for a parameter whose gradient is a
  // SelectedRows (an is_sparse embedding): pushed as rows of the block, re-based.
  std::map<int, SelectedRows> sparse_received;
};

class ParamServer {
 public:
  ParamServer(const KernelContext& ctx) : ctx_(ctx) {}
  Status Init();
  Status Serve();

 private:
  Status Handle(rpc::Request& r);
  // Sync: whether r belongs to a step after the pending one (or a message of its trainer
  // waits already), so that it must wait until the step is done.
  bool Later(const rpc::Request& r);
  // Sync: handles the messages that waited for the steps now done, in each trainer's order.
  Status HandleDeferred();
  Status OnSend(rpc::Request& r);
  Status OnBarrier(rpc::Request& r);
  void OnGet(rpc::Request& r);
  // Distributed tables: a trainer's gradient rows, and a prefetch of rows.
  Status OnSparsePush(rpc::Request& r);
  Status OnSparseBlock(rpc::Request& r, Block& b);
  void OnSparseGet(rpc::Request& r);
  void ReplyRows(const rpc::Request& r);
  // The rows of r (Decode checked its frames), merged, checked against table t and this shard.
  StatusOr<SelectedRows> ReadRows(const rpc::Request& r, const Table& t) const;
  // Sync: table t's rows of the step, sum over trainers of samples_t / samples * rows_t (the
  // dense path's weights), then the optimizer on them.
  Status ApplyStep(Table& t, const std::set<int>& live, int64_t total);
  // Sync: block b's gradient = the same weighted sum of the trainers' rows, as a SelectedRows.
  Status MergeSparseBlock(Block& b, const std::set<int>& live, int64_t total);
  Status ApplyRows(Table& t, const SelectedRows& grad);
  // A table load_persistables left in the scope (kvstore::LoadedTableVar) becomes t's rows.
  Status TakeLoadedTable(Table* t);
  Status TryStep();
  Status RunStep();
  void AnswerWaiters();
  Status CheckTrainers();
  Status Checkpoint(const std::string& dir);
  Status Fail(const Status& why);
  // Refuses a message: counts it, logs it naming the trainer, and replies with the error; the
  // server goes on serving.
  Status Refuse(rpc::Request& r, const Status& why);
  void ReplyBlocks(const rpc::Request& r);
  std::set<int> Live() const;
  std::string Name() const { return name_; }

  const KernelContext& ctx_;
  std::unique_ptr<rpc::Server> server_;
  std::string name_;
  bool sync_ = true;
  int trainers_ = 1;
  rpc::Options options_;
  std::vector<Block> blocks_;
  std::map<std::string, int> by_param_, by_grad_;
  std::vector<Table> tables_;
  std::map<std::string, int> by_table_;
  int shard_ = 0, shards_ = 1;  // this server's index among the servers
  std::vector<int> lr_blocks_;
  Scope* scope_ = nullptr;
  int64_t step_done_ = 0;    // sync: the steps run
  int64_t async_steps_ = 0;  // async: the trainers' steps (barriers), all together
  std::set<int> closed_, dead_;
  std::map<int, int64_t> barrier_, samples_;
  std::optional<Clock::time_point> step_begun_;  // sync: when the pending step's first barrier came
  std::vector<rpc::Request> gets_;               // sync: GETs of a step not done yet
  // Sync: each trainer's messages of a later step than the pending one, in arrival order. A
  // trainer's gradients and barrier of step s+1 may reach this server before another
  // trainer's barrier of step s does: nothing holds a trainer back on a server that owns none
  // of its blocks (its recv asks others), and servers are reached over separate connections.
  std::map<int, std::deque<rpc::Request>> deferred_;
  Clock::time_point started_;
  int64_t refused_ = 0;           // gradients refused here (the transport counts its own refusals)
  std::vector<int64_t> applied_;  // gradient blocks applied, per trainer
};

// Where a server leaves the gradient blocks it applied per trainer.
constexpr const char* kUpdatesVar = "@LOOM_PS_UPDATES@";

Tensor* ScopeTensor(Scope* scope, const std::string& name) {
  Variable* v = scope->FindVar(name);
  return (v ? v : scope->Var(name))->GetMutable<Tensor>();
}

// A gradient block's variable as a dense tensor (it may hold a SelectedRows of an earlier
// sparse push).
Tensor* DenseGrad(Scope* scope, const std::string& name) {
  Variable* v = scope->FindVar(name);
  if (!v) v = scope->Var(name);
  if (v->IsInitialized() && !v->IsType<Tensor>()) v->Clear();
  return v->GetMutable<Tensor>();
}

void SetSparseGrad(Scope* scope, const std::string& name, SelectedRows rows) {
  Variable* v = scope->FindVar(name);
  if (!v) v = scope->Var(name);
  if (v->IsInitialized() && !v->IsType<SelectedRows>()) v->Clear();
  *v->GetMutable<SelectedRows>() = std::move(rows);
}

// The rows a SPARSE_PUSH carries (Decode checked its frames and that its ids lie in [0,
// height)), merged (one row per id, ascending), checked to be `dtype` rows of `row_dims`
// whose ids lie in [0, height).
StatusOr<SelectedRows> PushedRows(const rpc::Request& r, DataType dtype, int64_t height,
                                  const std::vector<int64_t>& row_dims, const std::string& what) {
  const rpc::Header& h = r.header;
  std::vector<int64_t> got(h.dims().begin() + 1, h.dims().end());
  if (h.dtype() != static_cast<int>(dtype) || got != row_dims || h.height() != height)
    return InvalidArgument(
        "rows of ", what, " of dtype ", DataTypeName(static_cast<DataType>(h.dtype())),
        ", row dims ", DDim(got).ToString(), " and height ", h.height(), "; it is ",
        DataTypeName(dtype), " rows of ", DDim(row_dims).ToString(), " and height ", height);
  SelectedRows in;
  in.height = height;
  in.rows = rpc::ReadRowIds(r.payloads[0].data(), r.payloads[0].size());
  std::vector<int64_t> dims{static_cast<int64_t>(in.rows.size())};
  dims.insert(dims.end(), row_dims.begin(), row_dims.end());
  in.value = Tensor(dtype, DDim(dims));
  void* dst = in.value.mutable_data(Place::CPU(), dtype);
  if (r.payloads[1].size()) CopyBytes(dst, r.payloads[1].data(), r.payloads[1].size());
  SelectedRows merged;
  LOOM_RETURN_IF_ERROR(MergeRows(in, &merged));
  return merged;
}

Status ParamServer::TakeLoadedTable(Table* t) {
  Variable* v = scope_->FindVar(kvstore::LoadedTableVar(t->name));
  if (!v || !v->IsType<std::shared_ptr<kvstore::SparseTable>>()) return Status::OK();
  std::shared_ptr<kvstore::SparseTable> loaded =
      std::move(*v->GetMutable<std::shared_ptr<kvstore::SparseTable>>());
  v->Clear();
  if (!loaded) return Status::OK();
  const auto& want = t->rows->spec();
  const auto& got = loaded->spec();
  if (got.dtype != want.dtype || got.width() != want.width() ||
      got.init.ToString() != want.init.ToString())
    return ctx_.Error("the checkpoint of table '", t->name, "' holds ", DataTypeName(got.dtype),
                      " rows of ", got.width(), " from ", got.init.ToString(),
                      "; the program's table is ", DataTypeName(want.dtype), " rows of ",
                      want.width(), " from ", want.init.ToString());
  for (int64_t id : loaded->Ids())
    if (kvstore::SparseTable::ShardOf(id, shards_) != shard_)
      return ctx_.Error("the checkpoint of table '", t->name, "' holds row ", id,
                        ", which belongs to server ", kvstore::SparseTable::ShardOf(id, shards_),
                        " of ", shards_, ", not to server ", shard_,
                        " (was it saved with another number of servers?)");
  // The rows, their optimizer state and the updater's scalars move into the table of this
  // program's spec (the file's may name the height).
  const size_t rows = loaded->Ids().size();
  LOOM_RETURN_IF_ERROR(t->rows->TakeRowsOf(loaded.get()));
  double pow1 = 0, pow2 = 0;
  if (t->rows->GetScalar("beta1_pow", &pow1) && t->rows->GetScalar("beta2_pow", &pow2)) {
    t->beta1_pow = pow1;
    t->beta2_pow = pow2;
  }
  std::fprintf(stderr, "loom %s: table '%s' resumes with %zu rows\n", name_.c_str(),
               t->name.c_str(), rows);
  return Status::OK();
}

Status ParamServer::Init() {
  scope_ = ctx_.scope();
  sync_ = ctx_.Attr<bool>("sync_mode");
  trainers_ = ctx_.Attr<int>("Fanin");
  applied_.assign(static_cast<size_t>(trainers_), 0);
  const StrList& params = ctx_.Attr<StrList>("param_blocks");
  const StrList& grads = ctx_.Attr<StrList>("grad_blocks");
  const auto& opt = ctx_.Attr<std::vector<int>>("optimize_blocks");
  if (params.size() != grads.size() || params.size() != opt.size())
    return ctx_.Error(params.size(), " param_blocks, ", grads.size(), " grad_blocks and ",
                      opt.size(), " optimize_blocks: they must match one to one");
  size_t max_bytes = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    Block b;
    b.param = params[i];
    b.grad = grads[i];
    b.optimize_block = opt[i];
    b.param_tensor = ScopeTensor(scope_, b.param);
    ScopeTensor(scope_, b.grad);
    if (!b.param_tensor->initialized())
      return ctx_.Error("parameter block '", b.param,
                        "' has no value: run the server's startup program first");
    max_bytes = std::max(max_bytes, b.param_tensor->nbytes());
    by_param_[b.param] = static_cast<int>(blocks_.size());
    by_grad_[b.grad] = static_cast<int>(blocks_.size());
    blocks_.push_back(std::move(b));
  }
  lr_blocks_ = ctx_.Attr<std::vector<int>>("lr_blocks");
  const StrList& tables = ctx_.Attr<StrList>("sparse_tables");
  const StrList& table_lr = ctx_.Attr<StrList>("sparse_lr");
  const StrList& table_opt = ctx_.Attr<StrList>("sparse_optimizers");
  const auto& table_eps = ctx_.Attr<std::vector<float>>("sparse_epsilons");
  const auto& table_beta1 = ctx_.Attr<std::vector<float>>("sparse_beta1");
  const auto& table_beta2 = ctx_.Attr<std::vector<float>>("sparse_beta2");
  const StrList& table_beta1_pow = ctx_.Attr<StrList>("sparse_beta1_pow");
  const StrList& table_beta2_pow = ctx_.Attr<StrList>("sparse_beta2_pow");
  const StrList& table_init = ctx_.Attr<StrList>("sparse_inits");
  const auto& table_dtype = ctx_.Attr<std::vector<int>>("sparse_dtypes");
  const auto& table_width = ctx_.Attr<std::vector<int64_t>>("sparse_widths");
  const auto& table_seed = ctx_.Attr<std::vector<int64_t>>("sparse_seeds");
  const auto& table_a = ctx_.Attr<std::vector<float>>("sparse_init_a");
  const auto& table_b = ctx_.Attr<std::vector<float>>("sparse_init_b");
  const size_t nt = tables.size();
  if (table_lr.size() != nt || table_init.size() != nt || table_dtype.size() != nt ||
      table_width.size() != nt || table_seed.size() != nt || table_a.size() != nt ||
      table_b.size() != nt || table_opt.size() != nt || table_eps.size() != nt ||
      table_beta1.size() != nt || table_beta2.size() != nt || table_beta1_pow.size() != nt ||
      table_beta2_pow.size() != nt)
    return ctx_.Error(nt, " sparse_tables, but the sparse_* attributes are not one per table");
  shard_ = ctx_.Attr<int>("pserver_id");
  shards_ = ctx_.Attr<int>("pservers");
  if (nt > 0 && (shards_ < 1 || shard_ >= shards_))
    return ctx_.Error("pserver_id ", shard_, " is not one of ", shards_, " servers");
  for (size_t i = 0; i < nt; ++i) {
    kvstore::SparseTableSpec spec;
    spec.dtype = static_cast<DataType>(table_dtype[i]);
    spec.height = -1;  // any id >= 0
    spec.row_dims = DDim({table_width[i]});
    auto init = kvstore::RowInitializer::FromName(table_init[i], table_a[i], table_b[i],
                                                  static_cast<uint64_t>(table_seed[i]));
    if (!init.ok())
      return init.status().WithContext(StrCat(ctx_.Where(), ": table '", tables[i], "'"));
    spec.init = *init;
    auto rows = kvstore::SparseTable::Create(spec);
    if (!rows.ok())
      return rows.status().WithContext(StrCat(ctx_.Where(), ": table '", tables[i], "'"));
    Table t;
    t.name = tables[i];
    t.lr = table_lr[i];
    t.optimizer = table_opt[i];
    t.epsilon = table_eps[i];
    t.beta1 = table_beta1[i];
    t.beta2 = table_beta2[i];
    t.beta1_pow = std::strtod(table_beta1_pow[i].c_str(), nullptr);
    t.beta2_pow = std::strtod(table_beta2_pow[i].c_str(), nullptr);
    if (t.optimizer != "sgd" && t.optimizer != "adagrad" && t.optimizer != "adam")
      return ctx_.Error("table '", t.name, "' is updated by '", t.optimizer,
                        "'; servers update distributed tables with sgd, adagrad or adam");
    t.rows = std::move(*rows);
    LOOM_RETURN_IF_ERROR(TakeLoadedTable(&t));
    by_table_[t.name] = static_cast<int>(tables_.size());
    tables_.push_back(std::move(t));
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> ep,
                        rpc::ResolveEndpoints({ctx_.Attr<std::string>("endpoint")}));
  LOOM_ASSIGN_OR_RETURN(options_, rpc::OptionsFromEnv());
  name_ = StrCat("pserver ", ctx_.Attr<int>("pserver_id"), " (", ep[0], ")");
  if (options_.secret.empty())
    std::fprintf(stderr,
                 "loom %s: warning: LOOM_PS_SECRET is not set; any local process "
                 "with an empty secret can connect\n",
                 name_.c_str());
  rpc::ServerOptions so;
  so.rpc = options_;
  so.trainers = trainers_;
  so.fingerprint = ctx_.Attr<std::string>("fingerprint");
  // A gradient block's rows come merged (at most one per row: its bytes, and 8 per id); a
  // table's pushes and prefetches are a batch's rows, unknown here: a bound, not a size.
  so.max_payload_bytes =
      tables_.empty() ? 2 * max_bytes + 64 : std::max<size_t>(2 * max_bytes + 64, size_t{1} << 30);
  so.name = name_;
  for (const auto& name : ctx_.Attr<StrList>("shared_state")) {
    Variable* v = scope_->FindVar(name);
    if (!v || !v->IsType<Tensor>() || !v->Get<Tensor>().initialized()) continue;
    const Tensor& t = v->Get<Tensor>();
    so.state[name] = TensorDigest(t);
    if (t.numel() > 0 && t.dtype() == proto::FP32) so.state_values[name] = t.data<float>()[0];
    if (t.numel() > 0 && t.dtype() == proto::FP64) so.state_values[name] = t.data<double>()[0];
    if (t.numel() > 0 && t.dtype() == proto::INT64)
      so.state_values[name] = static_cast<double>(t.data<int64_t>()[0]);
  }
  auto server = rpc::Server::Bind(ep[0], so);
  if (!server.ok()) return server.status().WithContext(ctx_.Where());
  server_ = std::move(*server);
  started_ = Clock::now();
  return Status::OK();
}

std::set<int> ParamServer::Live() const {
  std::set<int> live;
  for (int t = 0; t < trainers_; ++t)
    if (!closed_.count(t) && !dead_.count(t)) live.insert(t);
  return live;
}

Status ParamServer::Serve() {
  while (!Live().empty()) {
    if (InterruptRequested())
      return Fail(Interrupted(StrCat(name_, " served step ", step_done_ + 1)));
    if (!server_->fatal().ok()) return Fail(server_->fatal());
    auto requests = server_->Poll(std::chrono::milliseconds(100));
    for (auto& r : requests) {
      if (sync_ && Later(r)) {
        deferred_[r.trainer_id].push_back(std::move(r));
        continue;
      }
      LOOM_RETURN_IF_ERROR(Handle(r));
    }
    if (sync_) LOOM_RETURN_IF_ERROR(HandleDeferred());
    LOOM_RETURN_IF_ERROR(CheckTrainers());
  }
  std::fprintf(stderr,
               "loom %s: every trainer closed after %lld %s; %lld messages "
               "refused\n",
               name_.c_str(), static_cast<long long>(sync_ ? step_done_ : async_steps_),
               sync_ ? "sync steps" : "async trainer steps",
               static_cast<long long>(server_->refused() + refused_));
  Tensor* updates = ScopeTensor(scope_, kUpdatesVar);
  updates->Resize(DDim({trainers_}));
  int64_t* counts = updates->mutable_data<int64_t>(Place::CPU());
  std::copy(applied_.begin(), applied_.end(), counts);
  return Status::OK();
}

bool ParamServer::Later(const rpc::Request& r) {
  const auto kind = r.header.kind();
  // A GET's (or SPARSE_GET's) answer depends on the steps done only (one of a later step waits
  // for it anyway);
  // a fetch barrier changes nothing.
  if (kind == rpc::Header::GET || kind == rpc::Header::SPARSE_GET ||
      kind == rpc::Header::FETCH_BARRIER)
    return false;
  auto q = deferred_.find(r.trainer_id);
  if (q != deferred_.end() && !q->second.empty()) return true;  // keeps the trainer's order
  return (kind == rpc::Header::SEND || kind == rpc::Header::SPARSE_PUSH ||
          kind == rpc::Header::BARRIER) &&
         r.header.step() > step_done_ + 1;
}

Status ParamServer::HandleDeferred() {
  for (bool progress = true; progress;) {
    progress = false;
    for (auto& [t, q] : deferred_) {
      while (!q.empty()) {
        const auto kind = q.front().header.kind();
        if ((kind == rpc::Header::SEND || kind == rpc::Header::SPARSE_PUSH ||
             kind == rpc::Header::BARRIER) &&
            q.front().header.step() > step_done_ + 1)
          break;  // still a later step
        rpc::Request r = std::move(q.front());
        q.pop_front();
        LOOM_RETURN_IF_ERROR(Handle(r));  // may run the step, letting more through
        progress = true;
      }
    }
  }
  return Status::OK();
}

Status ParamServer::Handle(rpc::Request& r) {
  const int t = r.trainer_id;
  if (closed_.count(t) || dead_.count(t)) {
    server_->ReplyError(r, FailedPrecondition("trainer ", t, " already ",
                                              closed_.count(t) ? "closed" : "timed out"));
    return Status::OK();
  }
  switch (r.header.kind()) {
    case rpc::Header::SEND: return OnSend(r);
    case rpc::Header::BARRIER: return OnBarrier(r);
    case rpc::Header::GET: OnGet(r); return Status::OK();
    case rpc::Header::SPARSE_PUSH: return OnSparsePush(r);
    case rpc::Header::SPARSE_GET: OnSparseGet(r); return Status::OK();
    case rpc::Header::FETCH_BARRIER:  // one way: the trainer has the step's parameters
      // Nothing waits on it: a server updates again only after every trainer's next barrier,
      // which each sends after its recv (rpc_ops.cc).
      return Status::OK();
    case rpc::Header::COMPLETE:
      closed_.insert(t);
      server_->EndSession(t);
      server_->Reply(r, {});
      if (sync_) LOOM_RETURN_IF_ERROR(TryStep());
      AnswerWaiters();
      return Status::OK();
    case rpc::Header::ABORT: {  // the trainer stops (one way)
      Status why = FailedPrecondition(name_, ": trainer ", t, " stopped: ", r.header.text());
      if (sync_) return Fail(why);
      std::fprintf(stderr, "loom %s (async): %s; serving the other trainers\n", name_.c_str(),
                   why.message().c_str());
      dead_.insert(t);
      return Status::OK();
    }
    case rpc::Header::CHECKPOINT: {
      Status st = Checkpoint(r.header.text());
      if (st.ok())
        server_->Reply(r, {});
      else
        server_->ReplyError(r, st);
      return Status::OK();
    }
    default:
      server_->ReplyError(
          r, InvalidArgument("a server does not take ", rpc::KindName(r.header.kind())));
      return Status::OK();
  }
}

Status ParamServer::OnSend(rpc::Request& r) {
  const rpc::Header& h = r.header;
  auto it = by_grad_.find(h.name());
  Status bad;
  if (it == by_grad_.end()) {
    bad = InvalidArgument("no gradient block '", h.name(), "' on ", name_);
  } else {
    const Tensor& p = *blocks_[it->second].param_tensor;
    std::vector<int64_t> dims(h.dims().begin(), h.dims().end());
    if (h.dtype() != static_cast<int>(p.dtype()) || DDim(dims) != p.dims())
      bad =
          InvalidArgument("gradient block '", h.name(), "' is ",
                          DataTypeName(static_cast<DataType>(h.dtype())), DDim(dims).ToString(),
                          ", the server's block is ", DataTypeName(p.dtype()), p.dims().ToString());
    else if (sync_ && h.step() != step_done_ + 1)
      bad = FailedPrecondition("gradient of step ", h.step(), " while the server is at step ",
                               step_done_ + 1);
  }
  if (!bad.ok()) return Refuse(r, bad);
  // A gradient is answered only when refused (the trainer sends it one way).
  Block& b = blocks_[it->second];
  if (sync_) {
    b.received[r.trainer_id] = std::move(r.payloads[0]);
    return Status::OK();
  }
  // Async: this trainer's gradient alone updates the block now.
  Tensor* grad = DenseGrad(scope_, b.grad);
  grad->Resize(b.param_tensor->dims());
  void* dst = grad->mutable_data(Place::CPU(), b.param_tensor->dtype());
  if (r.payloads[0].size()) CopyBytes(dst, r.payloads[0].data(), r.payloads[0].size());
  Status st = ctx_.RunBlock(b.optimize_block, scope_);
  if (!st.ok()) return Fail(st.WithContext(StrCat(name_, ": optimizing '", b.param, "'")));
  ++applied_[r.trainer_id];
  return Status::OK();
}

Status ParamServer::OnBarrier(rpc::Request& r) {
  const int t = r.trainer_id;
  if (!sync_) {
    ++async_steps_;
    for (int lr : lr_blocks_) {
      Status st = ctx_.RunBlock(lr, scope_);
      if (!st.ok()) return Fail(st.WithContext(StrCat(name_, ": the learning-rate block")));
    }
    return Status::OK();
  }
  Status bad;
  if (r.header.step() != step_done_ + 1)
    bad = FailedPrecondition("barrier of step ", r.header.step(), " while the server is at step ",
                             step_done_ + 1);
  for (const auto& b : blocks_)
    if (bad.ok() && !b.received.count(t) && !b.sparse_received.count(t))
      bad = FailedPrecondition("trainer ", t, " ended step ", r.header.step(),
                               " without sending gradient block '", b.grad, "'");
  for (const auto& table : tables_)
    if (bad.ok() && !table.received.count(t))
      bad = FailedPrecondition("trainer ", t, " ended step ", r.header.step(),
                               " without sending the rows of table '", table.name, "'");
  if (!bad.ok()) {
    server_->ReplyError(r, bad);
    return Status::OK();
  }
  barrier_[t] = r.header.step();
  samples_[t] = r.header.samples();
  if (!step_begun_) step_begun_ = Clock::now();
  return TryStep();  // a barrier is answered only when refused (the trainer sends it one way)
}

// out = sum of w * part over the parts (received payloads), in one pass over memory: the sum is
// built chunk by chunk, each chunk staying in cache while every part is added. A part ZeroMQ
// holds at an address unfit for T (a small message lives inside its struct) is read through an
// aligned copy. The parts are added in trainer order: the same sum on every run.
template <typename T>
void WeightedSum(const std::vector<std::pair<double, const void*>>& parts, int64_t n, T* out) {
  if (parts.empty()) {
    std::fill(out, out + n, T(0));
    return;
  }
  std::vector<std::vector<T>> copies;
  std::vector<std::pair<T, const T*>> in;
  for (const auto& [w, data] : parts) {
    const T* g = static_cast<const T*>(data);
    if (reinterpret_cast<uintptr_t>(data) % alignof(T) != 0) {
      copies.emplace_back(static_cast<size_t>(n));
      CopyBytes(copies.back().data(), data, static_cast<size_t>(n) * sizeof(T));
      g = copies.back().data();
    }
    in.push_back({static_cast<T>(w), g});
  }
  constexpr int64_t kChunk = 4096;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t end = std::min(n, begin + kChunk);
    const auto& [w0, g0] = in[0];
    for (int64_t i = begin; i < end; ++i) out[i] = w0 * g0[i];
    for (size_t p = 1; p < in.size(); ++p) {
      const auto& [w, g] = in[p];
      for (int64_t i = begin; i < end; ++i) out[i] += w * g[i];
    }
  }
}

Status ParamServer::TryStep() {
  std::set<int> live = Live();
  if (live.empty()) return Status::OK();
  for (int t : live)
    if (barrier_[t] != step_done_ + 1) return Status::OK();
  return RunStep();
}

Status ParamServer::RunStep() {
  std::set<int> live = Live();
  int64_t total = 0;
  for (int t : live) total += samples_[t];
  for (auto& b : blocks_) {
    if (!b.sparse_received.empty()) {
      Status st = MergeSparseBlock(b, live, total);
      if (!st.ok()) return Fail(st.WithContext(StrCat(name_, ": merging '", b.grad, "'")));
      continue;
    }
    std::vector<std::pair<double, const void*>> parts;
    for (int t : live) {  // in trainer order: the same sum on every run
      double w = total > 0 ? static_cast<double>(samples_[t]) / total : 1.0 / live.size();
      parts.push_back({w, b.received[t].data()});
      ++applied_[t];
    }
    Tensor* grad = DenseGrad(scope_, b.grad);
    grad->Resize(b.param_tensor->dims());
    void* out = grad->mutable_data(Place::CPU(), b.param_tensor->dtype());
    int64_t n = b.param_tensor->numel();
    if (b.param_tensor->dtype() == proto::FP64)
      WeightedSum(parts, n, static_cast<double*>(out));
    else if (b.param_tensor->dtype() == proto::FP32)
      WeightedSum(parts, n, static_cast<float*>(out));
    else
      return Fail(ctx_.Error("parameter block '", b.param, "' is ",
                             DataTypeName(b.param_tensor->dtype()),
                             "; servers update fp32 and fp64"));
    b.received.clear();
  }
  for (int lr : lr_blocks_) {
    Status st = ctx_.RunBlock(lr, scope_);
    if (!st.ok()) return Fail(st.WithContext(StrCat(name_, ": the learning-rate block")));
  }
  for (auto& b : blocks_) {
    Status st = ctx_.RunBlock(b.optimize_block, scope_);
    if (!st.ok()) return Fail(st.WithContext(StrCat(name_, ": optimizing '", b.param, "'")));
  }
  for (auto& t : tables_) {
    Status st = ApplyStep(t, live, total);
    if (!st.ok()) return Fail(st.WithContext(StrCat(name_, ": optimizing table '", t.name, "'")));
  }
  ++step_done_;
  step_begun_.reset();
  AnswerWaiters();
  return Status::OK();
}

// One reply with every block the GET names, in its order.
void ParamServer::ReplyBlocks(const rpc::Request& r) {
  rpc::Header h;
  h.set_kind(rpc::Header::REPLY);
  h.set_step(step_done_);
  std::vector<rpc::Payload> payloads;
  for (const auto& want : r.header.tensors()) {
    const Tensor& p = *blocks_[by_param_.at(want.name())].param_tensor;
    auto* meta = h.add_tensors();
    meta->set_name(want.name());
    meta->set_dtype(static_cast<int>(p.dtype()));
    for (int64_t d : p.dims().vec()) meta->add_dims(d);
    meta->set_nbytes(static_cast<int64_t>(p.nbytes()));
    // Sync mode sends the block's own memory: it changes only after every trainer has received
    // this reply and sent its next barrier. Async mode updates it any time: a copy.
    payloads.push_back(
        {p.raw_data(), p.nbytes(), sync_ ? std::shared_ptr<const void>(p.holder()) : nullptr});
  }
  server_->Reply(r, std::move(h), payloads);
}

void ParamServer::OnGet(rpc::Request& r) {
  for (const auto& want : r.header.tensors()) {
    if (!by_param_.count(want.name())) {
      server_->ReplyError(r, InvalidArgument("no parameter block '", want.name(), "' on ", name_));
      return;
    }
  }
  if (!sync_ || r.header.step() <= step_done_) return ReplyBlocks(r);
  gets_.push_back(std::move(r));
}

void ParamServer::AnswerWaiters() {
  std::vector<rpc::Request> keep;
  for (auto& r : gets_) {
    if (r.header.step() <= step_done_ && r.header.kind() == rpc::Header::SPARSE_GET)
      ReplyRows(r);
    else if (r.header.step() <= step_done_)
      ReplyBlocks(r);
    else
      keep.push_back(std::move(r));
  }
  gets_.swap(keep);
}

StatusOr<SelectedRows> ParamServer::ReadRows(const rpc::Request& r, const Table& t) const {
  for (int64_t id : rpc::ReadRowIds(r.payloads[0].data(), r.payloads[0].size()))
    if (kvstore::SparseTable::ShardOf(id, shards_) != shard_)
      return InvalidArgument("row ", id, " of table '", t.name, "' belongs to server ",
                             kvstore::SparseTable::ShardOf(id, shards_), ", not to ", name_);
  return PushedRows(r, t.rows->dtype(), std::numeric_limits<int64_t>::max(), {t.rows->width()},
                    StrCat("table '", t.name, "'"));
}

Status ParamServer::OnSparseBlock(rpc::Request& r, Block& b) {
  const rpc::Header& h = r.header;
  const Tensor& p = *b.param_tensor;
  const std::vector<int64_t> dims = p.dims().vec();
  StatusOr<SelectedRows> rows = InvalidArgument("parameter block '", b.param, "' is a scalar");
  if (!dims.empty())
    rows = PushedRows(r, p.dtype(), dims[0], std::vector<int64_t>(dims.begin() + 1, dims.end()),
                      StrCat("gradient block '", b.grad, "'"));
  if (rows.ok() && sync_ && h.step() != step_done_ + 1)
    rows = FailedPrecondition("gradient rows of '", b.grad, "' of step ", h.step(),
                              " while the server is at step ", step_done_ + 1);
  if (!rows.ok()) return Refuse(r, rows.status());
  if (sync_) {
    b.sparse_received[r.trainer_id] = std::move(*rows);
    return Status::OK();
  }
  // Async: this trainer's rows alone are the gradient the optimize block applies now.
  SetSparseGrad(scope_, b.grad, std::move(*rows));
  Status st = ctx_.RunBlock(b.optimize_block, scope_);
  if (!st.ok()) return Fail(st.WithContext(StrCat(name_, ": optimizing '", b.param, "'")));
  ++applied_[r.trainer_id];
  return Status::OK();
}

Status ParamServer::Refuse(rpc::Request& r, const Status& why) {
  ++refused_;
  std::fprintf(stderr, "loom %s: refused a message from trainer %d (%s): %s\n", name_.c_str(),
               r.trainer_id, server_->PeerAddress(r.trainer_id).c_str(), why.message().c_str());
  server_->ReplyError(r, why);
  return Status::OK();
}

Status ParamServer::OnSparsePush(rpc::Request& r) {
  const rpc::Header& h = r.header;
  auto it = by_table_.find(h.name());
  if (it == by_table_.end() && by_grad_.count(h.name()))
    return OnSparseBlock(r, blocks_[static_cast<size_t>(by_grad_.at(h.name()))]);
  StatusOr<SelectedRows> rows = InvalidArgument("no distributed table '", h.name(), "' on ", name_);
  if (it != by_table_.end()) {
    rows = ReadRows(r, tables_[static_cast<size_t>(it->second)]);
    if (rows.ok() && sync_ && h.step() != step_done_ + 1)
      rows = FailedPrecondition("rows of table '", h.name(), "' of step ", h.step(),
                                " while the server is at step ", step_done_ + 1);
  }
  if (!rows.ok()) return Refuse(r, rows.status());
  Table& t = tables_[static_cast<size_t>(it->second)];
  if (sync_) {
    t.received[r.trainer_id] = std::move(*rows);
    return Status::OK();
  }
  // Async: this trainer's rows alone update the table now.
  Status st = ApplyRows(t, *rows);
  if (!st.ok()) return Fail(st.WithContext(StrCat(name_, ": optimizing table '", t.name, "'")));
  ++applied_[r.trainer_id];
  return Status::OK();
}

Status ParamServer::ApplyStep(Table& t, const std::set<int>& live, int64_t total) {
  std::vector<std::pair<double, const SelectedRows*>> parts;
  for (int trainer : live) {  // in trainer order: the same sum on every run
    auto it = t.received.find(trainer);
    if (it == t.received.end()) continue;
    double w = total > 0 ? static_cast<double>(samples_[trainer]) / total : 1.0 / live.size();
    parts.push_back({w, &it->second});
    ++applied_[trainer];
  }
  LOOM_ASSIGN_OR_RETURN(SelectedRows grad, WeightedRows(parts, t.rows->width(), t.rows->dtype()));
  t.received.clear();
  return ApplyRows(t, grad);
}

Status ParamServer::MergeSparseBlock(Block& b, const std::set<int>& live, int64_t total) {
  std::vector<std::pair<double, const SelectedRows*>> parts;
  for (int trainer : live) {  // in trainer order: the same sum on every run
    auto it = b.sparse_received.find(trainer);
    if (it == b.sparse_received.end()) continue;
    double w = total > 0 ? static_cast<double>(samples_[trainer]) / total : 1.0 / live.size();
    parts.push_back({w, &it->second});
    ++applied_[trainer];
  }
  const Tensor& p = *b.param_tensor;
  const int64_t rows = p.dims().size() ? p.dims()[0] : 1;
  const int64_t width = rows > 0 ? p.numel() / rows : 0;
  auto weighted = WeightedRows(parts, width, p.dtype());
  if (!weighted.ok())
    return weighted.status().WithContext(StrCat("parameter block '", b.param, "'"));
  SelectedRows grad = std::move(*weighted);
  grad.height = rows;
  DDim dims = p.dims();
  dims[0] = static_cast<int64_t>(grad.rows.size());
  grad.value.Resize(dims);
  b.sparse_received.clear();
  SetSparseGrad(scope_, b.grad, std::move(grad));
  return Status::OK();
}

Status ParamServer::ApplyRows(Table& t, const SelectedRows& grad) {
  if (grad.rows.empty() && t.optimizer != "adam") return Status::OK();
  Variable* v = scope_->FindVar(t.lr);
  if (!v || !v->IsType<Tensor>() || !v->Get<Tensor>().initialized() || v->Get<Tensor>().numel() < 1)
    return NotFound("no learning rate '", t.lr, "' for table '", t.name, "'");
  const Tensor& lr_t = v->Get<Tensor>();
  double lr;
  if (lr_t.dtype() == proto::FP32)
    lr = lr_t.data<float>()[0];
  else if (lr_t.dtype() == proto::FP64)
    lr = lr_t.data<double>()[0];
  else
    return InvalidArgument("learning rate '", t.lr, "' is ", DataTypeName(lr_t.dtype()));
  return ApplyTableRows(t, lr, grad);
}

void ParamServer::OnSparseGet(rpc::Request& r) {
  auto it = by_table_.find(r.header.name());
  if (it == by_table_.end()) {
    server_->ReplyError(r,
                        InvalidArgument("no distributed table '", r.header.name(), "' on ", name_));
    return;
  }
  for (int64_t id : rpc::ReadRowIds(r.payloads[0].data(), r.payloads[0].size()))
    if (kvstore::SparseTable::ShardOf(id, shards_) != shard_) {
      server_->ReplyError(
          r, InvalidArgument("row ", id, " of table '", r.header.name(), "' belongs to server ",
                             kvstore::SparseTable::ShardOf(id, shards_), ", not to ", name_));
      return;
    }
  if (!sync_ || r.header.step() <= step_done_) return ReplyRows(r);
  gets_.push_back(std::move(r));
}

// The rows a SPARSE_GET asks for (made on first touch): tensors "rows" and "value".
void ParamServer::ReplyRows(const rpc::Request& r) {
  Table& t = tables_[static_cast<size_t>(by_table_.at(r.header.name()))];
  auto ids = std::make_shared<const std::vector<int64_t>>(
      rpc::ReadRowIds(r.payloads[0].data(), r.payloads[0].size()));
  const int64_t n = static_cast<int64_t>(ids->size());
  const size_t bytes = static_cast<size_t>(n * t.rows->width()) * SizeOf(t.rows->dtype());
  auto value = std::make_shared<std::vector<char>>(bytes);
  Status st = t.rows->Lookup(ids->data(), n, value->data(), StrCat("table '", t.name, "'"));
  if (!st.ok()) {
    server_->ReplyError(r, st);
    return;
  }
  rpc::Header h;
  h.set_kind(rpc::Header::REPLY);
  h.set_step(step_done_);
  auto* rows = h.add_tensors();
  rows->set_name("rows");
  rows->set_dtype(rpc::kInt64Dtype);
  rows->add_dims(n);
  rows->set_nbytes(n * 8);
  auto* val = h.add_tensors();
  val->set_name("value");
  val->set_dtype(static_cast<int>(t.rows->dtype()));
  val->add_dims(n);
  val->add_dims(t.rows->width());
  val->set_nbytes(static_cast<int64_t>(bytes));
  server_->Reply(
      r, std::move(h),
      {rpc::RowIdsPayload(ids), {value->data(), bytes, std::shared_ptr<const void>(value)}});
}

Status ParamServer::CheckTrainers() {
  auto now = Clock::now();
  std::vector<int> never;
  for (int t : Live()) {
    auto heard = server_->LastHeard(t);
    if (!heard) {
      if (now - started_ > options_.connect_timeout) never.push_back(t);
      continue;
    }
    if (now - *heard <= options_.timeout) continue;
    Status why = Timeout(name_, ": trainer ", t, " (", server_->PeerAddress(t),
                         ") sent nothing for ", options_.timeout.count(),
                         " ms (LOOM_PS_TIMEOUT_MS): it died, hangs, or "
                         "ended without exe.close()");
    if (sync_) return Fail(why);
    std::fprintf(stderr, "loom %s (async): %s; serving the other trainers\n", name_.c_str(),
                 why.message().c_str());
    dead_.insert(t);
  }
  if (sync_ && step_begun_ && now - *step_begun_ > options_.step_timeout) {
    std::string missing;
    for (int t : Live())
      if (barrier_[t] != step_done_ + 1) missing += StrCat(missing.empty() ? "" : ", ", t);
    return Fail(Timeout(name_, ": step ", step_done_ + 1, " began ", options_.step_timeout.count(),
                        " ms ago and trainer(s) ", missing,
                        " have not ended it (alive but stuck? "
                        "LOOM_PS_STEP_TIMEOUT_MS)"));
  }
  if (!never.empty()) {
    std::string ids;
    for (int t : never) ids += StrCat(ids.empty() ? "" : ", ", t);
    return Fail(Timeout(name_, ": trainer(s) ", ids, " never connected within ",
                        options_.connect_timeout.count(), " ms (LOOM_PS_CONNECT_TIMEOUT_MS)"));
  }
  if (sync_) return TryStep();
  return Status::OK();
}

// Tells every trainer waiting here why the server stops, then stops.
Status ParamServer::Fail(const Status& why) {
  for (auto& r : gets_) server_->ReplyError(r, why);
  gets_.clear();
  std::fprintf(stderr, "loom %s: %s\n", name_.c_str(), why.message().c_str());
  return why;
}

Status ParamServer::Checkpoint(const std::string& dir) {
  ProgramDesc desc;
  BlockDesc* block = desc.GlobalBlock();
  for (const auto& name : ctx_.Attr<StrList>("checkpoint_vars")) {
    Variable* v = scope_->FindVar(name);
    if (!v || !v->IsType<Tensor>()) return NotFound(name_, ": no variable '", name, "' to save");
    const Tensor& t = v->Get<Tensor>();
    VarDesc d = block->Var(name);
    d.SetType(proto::VarType::DENSE_TENSOR);
    d.SetDtype(t.dtype());
    d.SetDims(t.dims());
    d.SetPersistable(true);
  }
  std::string where = JoinPath(dir, StrCat("pserver_", ctx_.Attr<int>("pserver_id")));
  Status st = SaveParams(desc, *scope_, where);
  // Each table's touched rows, in a file of its own beside them (written atomically).
  for (const auto& t : tables_) {
    if (t.optimizer == "adam") {  // with the rows' moments, so a resumed Adam continues exactly
      t.rows->SetScalar("beta1_pow", t.beta1_pow);
      t.rows->SetScalar("beta2_pow", t.beta2_pow);
    }
    if (st.ok()) st = t.rows->Save(JoinPath(where, t.name + ".sptb"));
  }
  if (st.ok())
    std::fprintf(stderr, "loom %s: saved step %lld to %s\n", name_.c_str(),
                 static_cast<long long>(step_done_), where.c_str());
  return st;
}

Status ListenAndServKernel(const KernelContext& ctx) {
  ParamServer server(ctx);
  LOOM_RETURN_IF_ERROR(server.Init());
  return server.Serve();
}

}  // namespace

LOOM_REGISTER_OP(listen_and_serv)
    .Doc(
        "Serves the parameter blocks of this server to the trainers until every one has closed "
        "(see operators/distributed/listen_and_serv.cc for the protocol).")
    .RequiredAttr<std::string>("endpoint", "host:port to bind, or pserver:I")
    .RequiredAttr<int>("pserver_id", "this server's index", NonNegative("pserver_id"))
    .RequiredAttr<int>("Fanin", "number of trainers", Positive("Fanin"))
    .Attr<bool>("sync_mode", true, "sync: one update per step from every trainer's gradient")
    .RequiredAttr<StrList>("param_blocks", "the parameter block of each optimize block")
    .RequiredAttr<StrList>("grad_blocks", "the gradient block of each optimize block")
    .RequiredAttr<std::vector<int>>("optimize_blocks", "sub-blocks updating each parameter block")
    .Attr<std::vector<int>>("lr_blocks", {}, "sub-block of the learning-rate schedule (0 or 1)")
    .Attr<StrList>("checkpoint_vars", {}, "persistables CHECKPOINT saves")
    .Attr<std::string>("fingerprint", "", "trainers must present the same")
    .Attr<StrList>("sparse_tables", {},
                   "distributed lookup tables: this server holds the rows ShardOf gives it")
    .Attr<StrList>("sparse_lr", {}, "per table: the learning-rate variable of its optimizer")
    .Attr<StrList>("sparse_optimizers", {}, "per table: sgd, adagrad or adam (lazy)")
    .Attr<std::vector<float>>("sparse_epsilons", {}, "per table: adagrad's or adam's epsilon")
    .Attr<std::vector<float>>("sparse_beta1", {}, "per table: adam's beta1")
    .Attr<std::vector<float>>("sparse_beta2", {}, "per table: adam's beta2")
    .Attr<StrList>("sparse_beta1_pow", {},
                   "per table: adam's initial beta1 power (a double, exact as %.17g text)")
    .Attr<StrList>("sparse_beta2_pow", {},
                   "per table: adam's initial beta2 power (a double, exact as %.17g text)")
    .Attr<std::vector<int>>("sparse_dtypes", {}, "per table: the DataType code of its rows")
    .Attr<std::vector<int64_t>>("sparse_widths", {}, "per table: elements of one row")
    .Attr<StrList>("sparse_inits", {}, "per table: constant, uniform or gaussian")
    .Attr<std::vector<float>>("sparse_init_a", {}, "per table: value, low or mean")
    .Attr<std::vector<float>>("sparse_init_b", {}, "per table: high or std")
    .Attr<std::vector<int64_t>>("sparse_seeds", {}, "per table: its initializer's seed")
    .Attr<int>("pservers", 1, "servers of the job (the tables are sharded over them)")
    .Attr<StrList>("shared_state", {},
                   "persistables other servers hold alike from the start: their digests go to "
                   "every trainer, which compares them across servers")
    .SubBlocksAttr("optimize_blocks")
    .SubBlocksAttr("lr_blocks")
    .Kernel(Place::kCPU, proto::FP32, ListenAndServKernel);

}  // namespace loom::ops
