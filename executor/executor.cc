#include "executor/executor.h"

#include <set>

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

Status Executor::Run(PreparedBlock* prepared, Scope* scope, const FeedMap& feeds,
                     const std::vector<std::string>& fetches, std::vector<Tensor>* fetched) {
  Scope* local = LocalScope(prepared, scope);
  for (const auto& name : prepared->feed_targets_) {
    if (feeds.count(name)) continue;
    if (Variable* v = local->FindLocalVar(name)) v->Clear();
  }
  LOOM_RETURN_IF_ERROR(Feed(*prepared, local, feeds));
  const DeviceContext& dev = *GetDeviceContext(place_);
  for (auto& op : prepared->ops_) LOOM_RETURN_IF_ERROR(op->Run(*local, dev));
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

}  // namespace loom
