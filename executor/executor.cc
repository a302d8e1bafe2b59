#include "executor/executor.h"

#include "framework/tensor_array.h"

#include <algorithm>
#include <future>
#include <queue>
#include <set>
#include <thread>
#include <unordered_map>
#include <variant>

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
    return InvalidArgument("block ", block_id, " does not exist (program has ", program.NumBlocks(),
                           " blocks)");
  auto prepared = std::make_unique<PreparedBlock>();
  prepared->program_ = program;
  prepared->block_id_ = block_id;
  LOOM_RETURN_IF_ERROR(PrepareOps(prepared.get()));
  LOOM_RETURN_IF_ERROR(PrepareSubBlocks(prepared.get(), *prepared));
  return prepared;
}

Status Executor::PrepareOps(PreparedBlock* prepared) {
  const BlockDesc* block = prepared->desc_->Block(prepared->block_id_);
  std::set<std::string> written;
  for (int i = 0; i < block->OpSize(); ++i) {
    LOOM_ASSIGN_OR_RETURN(auto op, Operator::Create(block->Op(i), prepared->block_id_, i));
    for (const auto& v : op->InputVars()) {
      VarDesc d = block->FindVarRecursive(v);
      if (!written.count(v) && d && !d.Persistable()) {
        prepared->feed_targets_.push_back(v);
        written.insert(v);
      } else if (!written.count(v) && d && d.Type() == proto::VarType::DENSE_TENSOR) {
        prepared->bound_persistables_.push_back({v, d.Dtype(), d.Dims()});
        written.insert(v);
      }
    }
    for (const auto& v : op->OutputVars()) {
      written.insert(v);
      VarDesc d = block->FindVarRecursive(v);
      if (d && d.Persistable()) prepared->writes_persistables_ = true;
    }
    prepared->ops_.push_back(std::move(op));
  }
  for (const VarDesc& v : block->AllVars())
    if (v.Type() == proto::VarType::LOD_TENSOR_ARRAY && !v.Persistable())
      prepared->arrays_.push_back(v.Name());
  BuildDependencies(prepared);
  return Status::OK();
}

// Prepares, into root, every block the ops of `from` run as sub-blocks, recursively.
Status Executor::PrepareSubBlocks(PreparedBlock* root, const PreparedBlock& from) {
  for (const auto& op : from.ops_) {
    for (int b : op->SubBlocks()) {
      if (b <= from.block_id_ || b >= root->program_.NumBlocks())
        return InvalidArgument(op->Where(), ": names block ", b,
                               ", which is not a sub-block of this program (it has ",
                               root->program_.NumBlocks(), " blocks)");
      if (root->sub_blocks_.count(b)) continue;
      auto sub = std::make_unique<PreparedBlock>();
      sub->desc_ = &root->program_;
      sub->block_id_ = b;
      LOOM_RETURN_IF_ERROR(PrepareOps(sub.get()));
      PreparedBlock* raw = sub.get();
      root->sub_blocks_[b] = std::move(sub);
      LOOM_RETURN_IF_ERROR(PrepareSubBlocks(root, *raw));
    }
  }
  return Status::OK();
}

Status Executor::RunBlock(int block, Scope* scope, const DeviceContext& dev) {
  if (!running_) return Internal("RunBlock(", block, ") outside a run");
  auto it = running_->sub_blocks_.find(block);
  if (it == running_->sub_blocks_.end())
    return Internal("block ", block, " was not prepared as a sub-block");
  PreparedBlock* sub = it->second.get();
  if (sub->vars_scope_ != scope->serial()) {
    for (const VarDesc& v : sub->desc_->Block(block)->AllVars())
      if (!scope->FindLocalVar(v.Name())) scope->Var(v.Name());
    sub->vars_scope_ = scope->serial();
  }
  return RunOps(sub, scope, dev);
}

Scope* Executor::LocalScope(PreparedBlock* prepared, Scope* scope) {
  auto it = prepared->local_scopes_.find(scope->serial());
  if (it != prepared->local_scopes_.end()) return it->second;
  Scope* local = &scope->NewScope();
  for (const VarDesc& v : prepared->desc_->Block(prepared->block_id_)->AllVars()) {
    if (v.Persistable())
      scope->Var(v.Name());
    else
      local->Var(v.Name());
  }
  prepared->local_scopes_[scope->serial()] = local;
  return local;
}

Status Executor::CheckBoundPersistables(const PreparedBlock& prepared, const Scope& local) {
  for (const auto& d : prepared.bound_persistables_) {
    const Variable* var = local.FindVar(d.name);
    if (!var || !var->IsType<Tensor>() || !var->Get<Tensor>().initialized()) continue;
    const Tensor& t = var->Get<Tensor>();
    const bool dims_ok = d.dims.size() == 0 || DimsCompatible(t.dims(), d.dims);
    if (t.dtype() != d.dtype || !dims_ok)
      return InvalidArgument("var '", d.name, "' holds ", DataTypeName(t.dtype()), " ",
                             t.dims().ToString(), " in the scope, block ", prepared.block_id_,
                             " of the program declares ", DataTypeName(d.dtype), " ",
                             d.dims.ToString(),
                             " (is the scope another program's? run this program's startup "
                             "program or load its parameters)");
  }
  return Status::OK();
}

Status Executor::Feed(const PreparedBlock& prepared, Scope* local, const FeedMap& feeds) {
  const BlockDesc* block = prepared.desc_->Block(prepared.block_id_);
  for (const auto& [name, tensor] : feeds) {
    VarDesc v = block->FindVarRecursive(name);
    if (!v)
      return NotFound("feed '", name, "' is not a variable of block ", prepared.block_id_,
                      " of the program");
    if (!tensor.initialized()) return InvalidArgument("feed '", name, "' holds no data");
    if (tensor.dtype() != v.Dtype())
      return InvalidArgument("feed '", name, "' has dtype ", DataTypeName(tensor.dtype()),
                             ", the program declares ", DataTypeName(v.Dtype()));
    if (v.Dims().size() > 0 && !DimsCompatible(tensor.dims(), v.Dims()))
      return InvalidArgument("feed '", name, "' has dims ", tensor.dims().ToString(),
                             ", the program declares ", v.Dims().ToString());
    if (tensor.has_lod()) {
      LOOM_RETURN_IF_ERROR(CheckLoD(tensor.lod(), tensor.dims().size() ? tensor.dims()[0] : 0,
                                    StrCat("feed '", name, "'")));
      if (v.LoDLevel() > 0 && static_cast<int>(tensor.lod().size()) != v.LoDLevel())
        return InvalidArgument("feed '", name, "' has ", tensor.lod().size(),
                               " LoD levels, the program declares lod_level ", v.LoDLevel());
    } else if (v.LoDLevel() > 0) {
      return InvalidArgument("feed '", name, "' has no LoD, the program declares lod_level ",
                             v.LoDLevel(),
                             " (feed a LoDTensor: fluid.create_lod_tensor, or a DataFeeder)");
    }
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

void Executor::BuildDependencies(PreparedBlock* prepared) {
  const BlockDesc* block = prepared->desc_->Block(prepared->block_id_);
  const int n = static_cast<int>(prepared->ops_.size());
  std::vector<std::set<int>> preds(n);
  std::unordered_map<std::string, int> last_writer;
  std::unordered_map<std::string, std::vector<int>> readers;  // since the last write
  int last_barrier = -1;
  int last_ordered = -1;  // the last op registered Ordered(): such ops keep program order
  std::vector<int> since_barrier;
  auto is_tensor = [block](const std::string& v) {
    VarDesc d = block->FindVarRecursive(v);
    return !d || d.Type() == proto::VarType::DENSE_TENSOR;
  };
  for (int i = 0; i < n; ++i) {
    const Operator& op = *prepared->ops_[i];
    bool barrier = false;
    for (const auto& [name, attr] : op.Attrs())
      if (std::holds_alternative<BlockIndex>(attr)) barrier = true;
    if (op.info().ordered) {
      if (last_ordered >= 0) preds[i].insert(last_ordered);
      last_ordered = i;
    }
    if (barrier) {
      for (int j : since_barrier) preds[i].insert(j);
      if (last_barrier >= 0) preds[i].insert(last_barrier);
      since_barrier.clear();
      last_barrier = i;
    } else {
      if (last_barrier >= 0) preds[i].insert(last_barrier);
      since_barrier.push_back(i);
    }
    auto write = [&](const std::string& v) {
      auto w = last_writer.find(v);
      if (w != last_writer.end() && w->second != i) preds[i].insert(w->second);
      for (int r : readers[v])
        if (r != i) preds[i].insert(r);
      readers[v].clear();
      last_writer[v] = i;
    };
    for (const auto& v : op.InputVars()) {
      if (!is_tensor(v)) continue;  // ordered below, as a write
      auto w = last_writer.find(v);
      if (w != last_writer.end() && w->second != i) preds[i].insert(w->second);
    }
    for (const auto& v : op.InputVars())
      if (!is_tensor(v)) write(v);
    for (const auto& v : op.OutputVars()) write(v);
    for (const auto& v : op.InputVars()) {
      auto w = last_writer.find(v);
      if (is_tensor(v) && (w == last_writer.end() || w->second != i)) readers[v].push_back(i);
    }
  }
  prepared->succs_.assign(n, {});
  prepared->npreds_.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    prepared->npreds_[i] = static_cast<int>(preds[i].size());
    for (int p : preds[i]) prepared->succs_[p].push_back(i);
  }
}

namespace {

// One run's schedule: which ops are ready (all the ops they depend on have run, and any call
// those left running has ended), and the calls still running.
class Schedule {
 public:
  Schedule(const PreparedBlock& prepared, const std::vector<std::vector<int>>& succs,
           std::vector<int> npreds, Timeline* timeline, int rank)
      : prepared_(prepared),
        succs_(succs),
        npreds_(std::move(npreds)),
        timeline_(timeline),
        rank_(rank) {
    for (int i = 0; i < static_cast<int>(npreds_.size()); ++i)
      if (npreds_[i] == 0) ready_.push(i);
  }

  // The next op to run (the lowest ready index), ending finished calls first and waiting for
  // the oldest running call when no op is ready. -1 when every op has run, or on error.
  int Next(Status* status) {
    Retire(/*block=*/false, status);
    while (ready_.empty() && !running_.empty() && status->ok()) Retire(/*block=*/true, status);
    if (!status->ok() || ready_.empty()) return -1;
    int i = ready_.top();
    ready_.pop();
    return i;
  }

  // Op i has run; `call` is the work it left running, if any.
  void Ran(int i, Operator::AsyncCall call) {
    if (call.wait) {
      running_.push_back({i, std::move(call.wait), std::move(call.done)});
    } else {
      Release(i);
    }
  }

  // Ends every call still running (also after an error: buffers must not be freed under a
  // running call) and returns the first error.
  Status WaitAll() {
    Status first;
    for (auto& c : running_) {
      Status st = End(&c);
      if (first.ok() && !st.ok()) first = st;
    }
    running_.clear();
    return first;
  }

 private:
  struct Running {
    int op;
    AsyncWait wait;
    AsyncDone done;
  };

  void Release(int i) {
    for (int s : succs_[i])
      if (--npreds_[s] == 0) ready_.push(s);
  }

  // Ends the calls that have finished (block: at least the oldest one, waiting for it).
  void Retire(bool block, Status* status) {
    for (size_t k = 0; k < running_.size() && status->ok();) {
      Running& c = running_[k];
      bool finished = (block && k == 0) || (c.done && c.done());
      if (!finished) {
        ++k;
        continue;
      }
      *status = End(&c);
      int op = c.op;
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(k));
      if (status->ok()) Release(op);
      if (block) break;
    }
  }

  Status End(Running* c) {
    if (!c->wait) return Status::OK();
    AsyncWait wait = std::move(c->wait);
    const Operator& op = *prepared_.ops()[c->op];
    AsyncSpan span;
    bool record = timeline_ && timeline_->enabled();
    Status st = wait(record ? &span : nullptr);
    if (!st.ok()) st = Status(st.code(), op.Where() + ": " + st.message());
    if (record && span.end != AsyncSpan().end) {
      std::string vars;
      for (const auto& v : op.InputVars()) vars += (vars.empty() ? "" : ", ") + v;
      timeline_->Add(rank_, Timeline::kCommunication, op.Type(), vars, span.begin, span.end);
    }
    return st;
  }

  const PreparedBlock& prepared_;
  const std::vector<std::vector<int>>& succs_;
  std::vector<int> npreds_;
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready_;
  std::vector<Running> running_;  // in issue order
  Timeline* timeline_;
  int rank_;
};

}  // namespace

Status Executor::RunOps(PreparedBlock* prepared, Scope* local, const DeviceContext& dev) {
  Schedule schedule(*prepared, prepared->succs_, prepared->npreds_, timeline_, timeline_rank_);
  const bool record = timeline_ && timeline_->enabled();
  Status st;
  for (int i; (i = schedule.Next(&st)) >= 0;) {
    Operator& op = *prepared->ops_[i];
    auto begin = record ? Timeline::Clock::now() : Timeline::Clock::time_point();
    st = op.Run(local, dev, this);
    if (record) {
      std::string outs;
      for (const auto& v : op.OutputVars()) outs += (outs.empty() ? "" : ", ") + v;
      timeline_->Add(timeline_rank_, Timeline::kCompute, op.Type(), outs, begin,
                     Timeline::Clock::now());
    }
    schedule.Ran(i, op.TakeAsync());
    if (!st.ok()) break;
  }
  Status ended = schedule.WaitAll();
  return st.ok() ? ended : st;
}

Status Executor::Run(PreparedBlock* prepared, Scope* scope, const FeedMap& feeds,
                     const std::vector<std::string>& fetches, std::vector<Tensor>* fetched) {
  Scope* local = LocalScope(prepared, scope);
  for (const auto& name : prepared->feed_targets_) {
    if (feeds.count(name)) continue;
    if (Variable* v = local->FindLocalVar(name)) v->Clear();
  }
  for (const auto& name : prepared->arrays_)
    if (Variable* v = local->FindLocalVar(name)) v->Clear();
  LOOM_RETURN_IF_ERROR(Feed(*prepared, local, feeds));
  LOOM_RETURN_IF_ERROR(CheckBoundPersistables(*prepared, *local));
  const DeviceContext& dev = *GetDeviceContext(place_);
  PreparedBlock* outer = running_;
  running_ = prepared;
  Status ran = RunOps(prepared, local, dev);
  running_ = outer;
  if (prepared->writes_persistables_) scope->AdvancePersistablesGeneration();
  LOOM_RETURN_IF_ERROR(ran);
  dev.Wait();
  if (fetched) fetched->clear();
  for (const auto& name : fetches) {
    const Variable* v = local->FindVar(name);
    if (!v) return NotFound("fetch '", name, "' is not a variable of the program or the scope");
    if (v->IsType<SelectedRows>()) {  // a sparse gradient is fetched dense
      const SelectedRows& s = v->Get<SelectedRows>();
      if (!s.value.initialized())
        return FailedPrecondition("fetch '", name, "' has no value after the run");
      SelectedRows host{s.rows, Tensor(), s.height};
      TensorCopy(s.value, Place::CPU(), &host.value);
      Tensor dense;
      LOOM_RETURN_IF_ERROR(SelectedRowsToDense(host, &dense).WithContext("fetch '" + name + "'"));
      if (fetched) fetched->push_back(std::move(dense));
      continue;
    }
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

Status Executor::FetchArray(PreparedBlock* prepared, Scope* scope, const std::string& name,
                            std::vector<Tensor>* elements) {
  const Variable* v = LocalScope(prepared, scope)->FindVar(name);
  if (!v) return NotFound("fetch '", name, "' is not a variable of the program or the scope");
  elements->clear();
  if (!v->IsInitialized()) return Status::OK();  // never written: empty
  if (!v->IsType<TensorArray>()) return InvalidArgument("fetch '", name, "' is not an array");
  GetDeviceContext(place_)->Wait();
  for (const Tensor& e : v->Get<TensorArray>()) {
    elements->emplace_back();
    if (e.initialized()) TensorCopy(e, Place::CPU(), &elements->back());
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
    try {
      ScopedThreadBudget threads(budget);
      Executor exe(r->place);
      exe.set_timeline(r->timeline, static_cast<int>(r - &(*ranks)[0]));
      r->status = exe.Run(r->prepared, r->scope, r->feeds, fetches, &r->fetched);
    } catch (...) {  // nothing may escape a thread
      r->status = StatusOfException(std::current_exception());
    }
    if (!r->status.ok() && r->on_failure) r->on_failure(r->status);
  };
  // The workers start together once every thread exists: a rank without a thread would leave
  // the others waiting in their collectives.
  std::promise<bool> go;
  std::shared_future<bool> started = go.get_future().share();
  std::vector<std::thread> workers;
  Status spawn;
  for (size_t i = 1; i < ranks->size() && spawn.ok(); ++i) {
    try {
      workers.emplace_back([&run_one, started, r = &(*ranks)[i]] {
        if (started.get()) run_one(r);
      });
    } catch (const std::system_error& e) {
      spawn = ResourceExhausted("cannot start a thread for rank ", i, " of ", ranks->size(), ": ",
                                e.what());
    }
  }
  go.set_value(spawn.ok());
  if (!spawn.ok()) {
    for (auto& w : workers) w.join();
    return spawn;
  }
  if (!ranks->empty()) run_one(&(*ranks)[0]);
  for (auto& w : workers) w.join();
  // The first cause: a rank's own error, else (every rank aborted) the first abort.
  for (bool aborted : {false, true}) {
    for (size_t i = 0; i < ranks->size(); ++i) {
      const Status& st = (*ranks)[i].status;
      if (!st.ok() && (st.code() == StatusCode::kAborted) == aborted)
        return Status(st.code(), "rank " + std::to_string(i) + ": " + st.message());
    }
  }
  return Status::OK();
}

}  // namespace loom
