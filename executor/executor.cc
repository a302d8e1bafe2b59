#include "executor/executor.h"

#include <algorithm>
#include <set>
#include <thread>
#include <unordered_map>

#include "framework/cpu_threads.h"
#include "framework/device_context.h"
#include "loom/config.h"

namespace loom {

Executor::Executor(const Place& place) : place_(place) {}

Status Executor::CheckPlace() const {
  if (place_.is_cpu()) return Status::OK();
#if LOOM_CUDA_ENABLED
  int n = CudaDeviceCount();
  if (place_.device >= n)
    return FailedPrecondition("place ", place_.ToString(), " is not available: ", n,
                              " CUDA device(s) visible");
  return Status::OK();
#else
  return FailedPrecondition("place ", place_.ToString(),
                            " is not available: Loom was built without CUDA");
#endif
}

StatusOr<std::unique_ptr<PreparedBlock>> Executor::Prepare(const ProgramDesc& program,
                                                           int block_id) {
  LOOM_RETURN_IF_ERROR(CheckPlace());
  if (block_id < 0 || block_id >= program.NumBlocks())
    return InvalidArgument("block ", block_id, " does not exist (program has ",
                           program.NumBlocks(), " blocks)");
  auto prepared = std::make_unique<PreparedBlock>();
  prepared->program_ = program;
  prepared->block_id_ = block_id;
  const BlockDesc* block = prepared->program_.Block(block_id);
  std::set<std::string> written;
  for (int i = 0; i < block->OpSize(); ++i) {
    LOOM_ASSIGN_OR_RETURN(auto op, Operator::Create(block->Op(i), block_id, i));
    for (const auto& v : op->InputVars()) {
      VarDesc d = block->FindVarRecursive(v);
      if (!written.count(v) && d && !d.Persistable()) {
        prepared->feed_targets_.push_back(v);
        written.insert(v);
      }
    }
    for (const auto& v : op->OutputVars()) written.insert(v);
    prepared->ops_.push_back(std::move(op));
  }
  return prepared;
}

Scope* Executor::LocalScope(PreparedBlock* prepared, Scope* scope) {
  auto it = prepared->local_scopes_.find(scope->serial());
  if (it != prepared->local_scopes_.end()) return it->second;
  Scope* local = &scope->NewScope();
  for (const VarDesc& v : prepared->program_.Block(prepared->block_id_)->AllVars()) {
    if (v.Persistable()) scope->Var(v.Name());
    else local->Var(v.Name());
  }
  prepared->local_scopes_[scope->serial()] = local;
  return local;
}

Status Executor::Feed(const PreparedBlock& prepared, Scope* local, const FeedMap& feeds) {
  const BlockDesc* block = prepared.program_.Block(prepared.block_id_);
  for (const auto& [name, tensor] : feeds) {
    VarDesc v = block->FindVarRecursive(name);
    if (!v)
      return NotFound("feed '", name, "' is not a variable of block ", prepared.block_id_,
                      " of the program");
    if (!tensor.initialized())
      return InvalidArgument("feed '", name, "' holds no data");
    if (tensor.dtype() != v.Dtype())
      return InvalidArgument("feed '", name, "' has dtype ", DataTypeName(tensor.dtype()),
                             ", the program declares ", DataTypeName(v.Dtype()));
    if (v.Dims().size() > 0 && !DimsCompatible(tensor.dims(), v.Dims()))
      return InvalidArgument("feed '", name, "' has dims ", tensor.dims().ToString(),
                             ", the program declares ", v.Dims().ToString());
    Variable* var = local->FindVar(name);
    Tensor* dst = var->GetMutable<Tensor>();
    // Share the caller's memory, except for persistable vars that ops may update in place.
    if (tensor.place() == place_ && !v.Persistable()) {
      *dst = tensor;
    } else {
      TensorCopy(tensor, place_, dst);
    }
  }
  return Status::OK();
}

namespace {

// Calls still running on behalf of ops of one run (collectives), keyed by the variables they
// touch. An op that reads or writes one of those variables waits for the call first, so
// communication overlaps with every op that does not depend on it.
class PendingCalls {
 public:
  PendingCalls(Timeline* timeline, int rank) : timeline_(timeline), rank_(rank) {}
  bool empty() const { return by_var_.empty(); }

  void Add(AsyncWait wait, const Operator& op) {
    auto call = std::make_shared<Call>();
    call->wait = std::move(wait);
    call->op = &op;
    for (const auto* vars : {&op.InputVars(), &op.OutputVars()})
      for (const auto& v : *vars) by_var_[v] = call;
    all_.push_back(std::move(call));
  }

  // Ends the calls touching any variable of op.
  Status WaitFor(const Operator& op) {
    for (const auto* vars : {&op.InputVars(), &op.OutputVars()}) {
      for (const auto& v : *vars) {
        auto it = by_var_.find(v);
        if (it == by_var_.end()) continue;
        std::shared_ptr<Call> call = it->second;
        LOOM_RETURN_IF_ERROR(End(call.get()));
        for (auto i = by_var_.begin(); i != by_var_.end();) {
          i = i->second == call ? by_var_.erase(i) : std::next(i);
        }
      }
    }
    return Status::OK();
  }

  // Ends every call (also after an error: buffers must not be freed under a running call) and
  // returns the first error.
  Status WaitAll() {
    Status first;
    for (auto& call : all_) {
      Status st = End(call.get());
      if (first.ok() && !st.ok()) first = st;
    }
    all_.clear();
    by_var_.clear();
    return first;
  }

 private:
  struct Call {
    AsyncWait wait;
    const Operator* op;
    bool ended = false;
    Status status;
  };
  Status End(Call* call) {
    if (!call->ended) {
      call->ended = true;
      AsyncSpan span;
      bool record = timeline_ && timeline_->enabled();
      call->status = call->wait(record ? &span : nullptr);
      if (!call->status.ok())
        call->status =
            Status(call->status.code(), call->op->Where() + ": " + call->status.message());
      if (record && span.end != AsyncSpan().end) {
        std::string vars;
        for (const auto& v : call->op->InputVars()) vars += (vars.empty() ? "" : ", ") + v;
        timeline_->Add(rank_, Timeline::kCommunication, call->op->Type(), vars, span.begin,
                       span.end);
      }
    }
    return call->status;
  }
  Timeline* timeline_;
  int rank_;
  std::unordered_map<std::string, std::shared_ptr<Call>> by_var_;
  std::vector<std::shared_ptr<Call>> all_;
};

}  // namespace

Status Executor::RunOps(PreparedBlock* prepared, Scope* local, const DeviceContext& dev) {
  PendingCalls pending(timeline_, timeline_rank_);
  const bool record = timeline_ && timeline_->enabled();
  Status st;
  for (auto& op : prepared->ops_) {
    if (!pending.empty()) {
      st = pending.WaitFor(*op);
      if (!st.ok()) break;
    }
    auto begin = record ? Timeline::Clock::now() : Timeline::Clock::time_point();
    st = op->Run(*local, dev);
    if (record) {
      std::string outs;
      for (const auto& v : op->OutputVars()) outs += (outs.empty() ? "" : ", ") + v;
      timeline_->Add(timeline_rank_, Timeline::kCompute, op->Type(), outs, begin,
                     Timeline::Clock::now());
    }
    if (AsyncWait wait = op->TakeAsync()) pending.Add(std::move(wait), *op);
    if (!st.ok()) break;
  }
  Status ended = pending.WaitAll();
  return st.ok() ? ended : st;
}

Status Executor::Run(PreparedBlock* prepared, Scope* scope, const FeedMap& feeds,
                     const std::vector<std::string>& fetches, std::vector<Tensor>* fetched) {
  Scope* local = LocalScope(prepared, scope);
  for (const auto& name : prepared->feed_targets_) {
    if (feeds.count(name)) continue;
    if (Variable* v = local->FindLocalVar(name)) v->Clear();
  }
  LOOM_RETURN_IF_ERROR(Feed(*prepared, local, feeds));
  const DeviceContext& dev = *GetDeviceContext(place_);
  LOOM_RETURN_IF_ERROR(RunOps(prepared, local, dev));
  dev.Wait();
  if (fetched) fetched->clear();
  for (const auto& name : fetches) {
    const Variable* v = local->FindVar(name);
    if (!v)
      return NotFound("fetch '", name, "' is not a variable of the program or the scope");
    if (!v->IsType<Tensor>() || !v->Get<Tensor>().initialized())
      return FailedPrecondition("fetch '", name, "' has no value after the run");
    if (fetched) {
      Tensor host;
      TensorCopy(v->Get<Tensor>(), Place::CPU(), &host);
      fetched->push_back(std::move(host));
    }
  }
  return Status::OK();
}

Status Executor::Run(const ProgramDesc& program, Scope* scope, const FeedMap& feeds,
                     const std::vector<std::string>& fetches, std::vector<Tensor>* fetched) {
  LOOM_ASSIGN_OR_RETURN(auto prepared, Prepare(program, 0));
  Status st = Run(prepared.get(), scope, feeds, fetches, fetched);
  // A one-shot run keeps no temporaries.
  scope->DeleteScope(prepared->local_scopes_[scope->serial()]);
  return st;
}

Status Executor::RunRanks(std::vector<RankRun>* ranks, const std::vector<std::string>& fetches) {
  // The ranks share the machine's cores: each rank's GEMMs get its share of them.
  int n = static_cast<int>(ranks->size());
  ScopedBlasThreads blas(n > 1 ? std::max(1, CpuCores() / n) : BlasThreads());
  const int budget = n > 1 ? std::max(1, CpuCores() / n) : 0;
  auto run_one = [&fetches, ranks, budget](RankRun* r) {
    ScopedThreadBudget threads(budget);
    Executor exe(r->place);
    exe.set_timeline(r->timeline, static_cast<int>(r - &(*ranks)[0]));
    r->status = exe.Run(r->prepared, r->scope, r->feeds, fetches, &r->fetched);
  };
  std::vector<std::thread> workers;
  for (size_t i = 1; i < ranks->size(); ++i) workers.emplace_back(run_one, &(*ranks)[i]);
  if (!ranks->empty()) run_one(&(*ranks)[0]);
  for (auto& w : workers) w.join();
  for (size_t i = 0; i < ranks->size(); ++i) {
    const Status& st = (*ranks)[i].status;
    if (!st.ok()) return Status(st.code(), "rank " + std::to_string(i) + ": " + st.message());
  }
  return Status::OK();
}

}  // namespace loom
