// Executor: runs a block of a program on one place. Prepare() turns the block's ops into
// Operators once (unknown ops and bad attributes are reported here); Run() executes them in
// program order in a scope, after placing feeds, and copies fetched tensors back to the host.
// Persistable variables live in the scope given to Run; temporaries in a child scope that is
// created on the first run with that scope and reused afterwards. Variables the block reads
// before writing (its feed targets) are cleared when a run does not feed them, so a stale
// batch from an earlier run is never used silently.
// Ops are scheduled by their data dependencies (read-after-write, write-after-read,
// write-after-write on variable names), lowest program index first among the ready ones. An op
// may leave a call running (a collective on its communicator's thread); the ops that depend on
// it become ready only when that call has ended, and every op that does not depend on it runs
// meanwhile, so communication overlaps with the compute that does not need it. Ops that share a
// variable that is not a tensor (a communicator) keep their program order, so every rank issues
// its collectives in the same order; an op carrying a sub-block is a barrier (it may touch any
// variable). With no call left running the schedule is exactly program order.
// Thread-safety: one Executor per thread; a PreparedBlock runs on one thread at a time.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "executor/timeline.h"
#include "framework/operator.h"
#include "framework/program_desc.h"
#include "framework/scope.h"

namespace loom {

class PreparedBlock {
 public:
  const ProgramDesc& program() const { return *desc_; }
  int block_id() const { return block_id_; }
  const std::vector<std::unique_ptr<Operator>>& ops() const { return ops_; }

 private:
  friend class Executor;
  ProgramDesc program_;  // the root's own copy (sub-blocks point into it)
  const ProgramDesc* desc_ = &program_;
  int block_id_ = 0;
  std::vector<std::unique_ptr<Operator>> ops_;
  // Dependency graph: succs_[i] are the ops that must wait for op i; npreds_[i] counts the
  // ops op i waits for.
  std::vector<std::vector<int>> succs_;
  std::vector<int> npreds_;
  // Non-persistable vars read before any op writes them: they must be fed on every run.
  std::vector<std::string> feed_targets_;
  // Non-persistable tensor arrays declared in the block: every run starts them empty (a run
  // that writes fewer elements than the last must not read the last run's).
  std::vector<std::string> arrays_;
  // Persistable tensors read before any op writes them: their values come from the scope
  // (startup, loaded parameters) and must match the program's declaration on every run.
  struct Declared {
    std::string name;
    DataType dtype;
    DDim dims;
  };
  std::vector<Declared> bound_persistables_;
  bool writes_persistables_ = false;  // some op writes a persistable variable
  // Outer scope serial -> (outer scope, its child holding this block's temporaries).
  std::map<uint64_t, Scope*> local_scopes_;
  // Root only: the sub-blocks its control-flow ops (and theirs) run, by block index.
  std::map<int, std::unique_ptr<PreparedBlock>> sub_blocks_;
  // Sub-blocks: the scope whose block variables were last created.
  uint64_t vars_scope_ = 0;
};

using FeedMap = std::map<std::string, Tensor>;

// One rank of a multi-place run: where it runs, its prepared per-rank program and scope, its
// share of the feeds; receives its fetches and its status.
struct RankRun {
  Place place = Place::CPU();
  PreparedBlock* prepared = nullptr;
  Scope* scope = nullptr;
  FeedMap feeds;
  std::vector<Tensor> fetched;
  Status status;
  Timeline* timeline = nullptr;  // when set, the rank's ops are recorded (pid = rank index)
  // Called on the rank's thread as soon as its run fails, before the other ranks finish: the
  // runner aborts the rank's communicator here, so that peers waiting for it stop at once.
  std::function<void(const Status&)> on_failure;
};

class Executor final : public BlockRunner {
 public:
  explicit Executor(const Place& place = Place::CPU());
  const Place& place() const { return place_; }
  // Records every op of later runs into timeline as rank `rank` (nullptr: stop recording).
  void set_timeline(Timeline* timeline, int rank = 0) {
    timeline_ = timeline;
    timeline_rank_ = rank;
  }

  StatusOr<std::unique_ptr<PreparedBlock>> Prepare(const ProgramDesc& program, int block_id = 0);

  // Feeds must name variables of the block with the declared dtype and compatible dims.
  // fetched (when not null) receives host copies of the fetch vars, in order.
  Status Run(PreparedBlock* prepared, Scope* scope, const FeedMap& feeds = {},
             const std::vector<std::string>& fetches = {}, std::vector<Tensor>* fetched = nullptr);
  // Host copies of the elements of tensor array `name` as the last Run of `prepared` in
  // `scope` left it (Run fetches tensors only).
  Status FetchArray(PreparedBlock* prepared, Scope* scope, const std::string& name,
                    std::vector<Tensor>* elements);
  // Prepares and runs block 0 once.
  Status Run(const ProgramDesc& program, Scope* scope, const FeedMap& feeds = {},
             const std::vector<std::string>& fetches = {}, std::vector<Tensor>* fetched = nullptr);

  // Runs the per-rank programs of a transpiled multi-device program concurrently, one worker
  // thread per rank (rank 0 on the calling thread); the ranks meet in their collective ops.
  // Returns the first failing rank's error prefixed with "rank R: " (each rank's own status is
  // in its RankRun).
  // The first cause is returned: a rank's own error before the Aborted errors it caused in
  // the others.
  static Status RunRanks(std::vector<RankRun>* ranks, const std::vector<std::string>& fetches);

  // BlockRunner: runs a sub-block of the program being run (control-flow ops call it).
  Status RunBlock(int block, Scope* scope, const DeviceContext& dev) override;

 private:
  Status PrepareOps(PreparedBlock* prepared);
  Status PrepareSubBlocks(PreparedBlock* root, const PreparedBlock& from);
  Status CheckPlace() const;
  Scope* LocalScope(PreparedBlock* prepared, Scope* scope);
  Status Feed(const PreparedBlock& prepared, Scope* local, const FeedMap& feeds);
  static Status CheckBoundPersistables(const PreparedBlock& prepared, const Scope& local);
  Status RunOps(PreparedBlock* prepared, Scope* local, const DeviceContext& dev);
  static void BuildDependencies(PreparedBlock* prepared);

  Place place_;
  PreparedBlock* running_ = nullptr;  // the root block of the run in progress
  Timeline* timeline_ = nullptr;
  int timeline_rank_ = 0;
};

}  // namespace loom
