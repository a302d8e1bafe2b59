// The runner: the one way Loom runs per-rank programs, used by `loom run` and by Python's
// CompiledProgram. A runner holds the ranks this process runs of a job of nranks ranks: one
// place (a job of one rank), every rank of a transpiled job as threads of this process, or this
// process's rank of a job under MPI. It prepares their programs once, runs their startup
// programs (comm_init, initialization, broadcasts), and runs steps: the global minibatch is split
// along dim 0 by BatchShares (the one split rule), each local rank runs its main program on its
// share, and the first fetch's scalar is averaged over the global batch. When one rank of a job
// in this process fails, it aborts the group's communicators at once: the others stop instead of
// waiting for their timeout, and the error returned is the failed rank's own.
//
// Thread safety: one thread drives a runner; Step runs the local ranks on threads of its own.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "executor/executor.h"
#include "executor/timeline.h"
#include "framework/program_desc.h"
#include "framework/scope.h"

namespace loom::collective {
class Communicator;
}

namespace loom::runtime {

// Rows of a global minibatch of `batch` rows per rank: the first batch % nranks ranks get one row
// more; a rank may get none.
std::vector<int64_t> BatchShares(int64_t batch, int nranks);

// Rank `rank`'s part of every feed of a global minibatch (views of rows along dim 0); the feeds
// named in `whole` (variables without a batch dim, e.g. a shape-[1] flag) go to every rank whole,
// as Fluid does. Every split feed must have the same number of rows, and dims of at least one.
StatusOr<FeedMap> RankFeed(const FeedMap& global, int rank, int nranks,
                           const std::set<std::string>& whole = {});

struct RankProgram {
  ProgramDesc startup;  // no ops: the caller brings initialized parameters
  ProgramDesc main;
  Place place = Place::CPU();
  Scope* scope = nullptr;  // borrowed (must outlive the runner); null: the runner owns one
};

enum class FeedSplit {
  kGlobal,  // the feed is the global minibatch: each local rank takes its BatchShares rows
  kLocal,   // the feed is this process's one rank's own (Python under MPI)
};

class Runner {
 public:
  // `ranks` are global ranks first_rank, first_rank + 1, ... of a job of nranks ranks.
  static StatusOr<std::unique_ptr<Runner>> Create(std::vector<RankProgram> ranks, int first_rank,
                                                  int nranks);
  ~Runner();

  // Runs every local rank's startup program, concurrently (collectives meet across them).
  Status Startup();
  // Loads main's persistable variables into every local rank from a parameter directory
  // (save_params) or, when path is a regular file, a combined parameter file (save_combine).
  Status LoadParams(const std::string& path);
  // Rank 0 saves main's persistable variables to dir; other processes write nothing. Returns
  // whether this process wrote.
  StatusOr<bool> SaveParams(const std::string& dir) const;

  // One training step of every local rank; fetched(i) holds local rank i's values after it.
  // A failed step of several local ranks aborts their group: later steps fail, naming it.
  Status Step(const FeedMap& feed, const std::vector<std::string>& fetches,
              FeedSplit split = FeedSplit::kGlobal);
  const std::vector<Tensor>& fetched(int local) const { return ranks_[local].fetched; }

  // The first fetch of the last step as one number over the global batch: a scalar is the ranks'
  // values weighted by their rows (summed over the processes of an MPI job through the program's
  // communicator), anything else the first value of rank first_rank. NaN: nothing numeric.
  StatusOr<double> GlobalFirstValue();

  // Parameter-server trainers: the job's other ranks are processes this runner cannot reach
  // (they meet only at the servers). The first fetch is then averaged over this process's own
  // rows, and CheckSameOnEveryRank and Finish have nothing to do.
  void set_peers_unreachable() { peers_unreachable_ = true; }

  // Records every op of later steps (each rank as its own pid); nullptr stops recording.
  void set_timeline(Timeline* timeline);
  // A multi-process job: every rank was given the same values (e.g. the batch size), else
  // InvalidArgument naming the value, a rank and both numbers. Collective: every rank calls it.
  Status CheckSameOnEveryRank(const std::vector<std::pair<std::string, int64_t>>& values);
  // Ends a multi-process job together (a barrier on the program's communicator).
  Status Finish();

  int nranks() const { return nranks_; }
  int first_rank() const { return first_rank_; }
  int local_ranks() const { return static_cast<int>(ranks_.size()); }
  // Threads a rank's kernels may use (the machine's cores over the ranks sharing it).
  int threads_per_rank() const { return threads_; }
  Scope* scope(int local) const { return ranks_[local].scope; }
  const Place& place(int local) const { return ranks_[local].place; }
  bool multi_process() const { return static_cast<int>(ranks_.size()) < nranks_; }

 private:
  Runner() = default;
  Status RunLocal(bool startup, const std::vector<std::string>& fetches);
  // Feeds of variables without a batch dim (declared dim 0 >= 0): every rank takes them whole.
  std::set<std::string> WholeFeeds(const FeedMap& feed) const;
  StatusOr<collective::Communicator*> Communicator() const;

  int first_rank_ = 0, nranks_ = 1, threads_ = 1;
  std::vector<ProgramDesc> mains_;
  std::vector<std::unique_ptr<Scope>> owned_scopes_;
  std::vector<std::unique_ptr<PreparedBlock>> startup_, main_;
  std::vector<RankRun> ranks_;
  std::vector<int64_t> rows_;  // rows each local rank got in the last step
  Status failed_;              // the step that aborted the group of several local ranks
  uint64_t steps_ = 0;         // steps begun (carried in the collectives' signatures)
  int64_t global_rows_ = 0;
  bool peers_unreachable_ = false;
};

}  // namespace loom::runtime
