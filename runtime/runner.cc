#include "runtime/runner.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "base/job_env.h"
#include "collective/communicator.h"
#include "framework/comm_var.h"
#include "framework/cpu_threads.h"
#include "framework/file_util.h"
#include "framework/serialization.h"

namespace loom::runtime {
namespace {

// The communicator comm_init left in a rank's scope (null before its startup ran).
collective::Communicator* CommOfScope(const Scope& scope) {
  return CommunicatorIn(scope.FindVar(kCommVar));
}

}  // namespace

std::vector<int64_t> BatchShares(int64_t batch, int nranks) {
  std::vector<int64_t> share(static_cast<size_t>(std::max(nranks, 0)));
  for (int r = 0; r < nranks; ++r) share[r] = batch / nranks + (r < batch % nranks ? 1 : 0);
  return share;
}

namespace {

// The samples of a feed: its top-level sequences when it has a LoD, else its rows.
int64_t Samples(const Tensor& t) {
  return t.has_lod() ? static_cast<int64_t>(t.lod()[0].size()) - 1 : t.dims()[0];
}

// Samples [begin, end) of t: rows, or whole sequences with their LoD rebased to 0.
Tensor SliceSamples(const Tensor& t, int64_t begin, int64_t end) {
  if (!t.has_lod()) return t.Slice(begin, end);
  LoD lod;
  for (const auto& level : t.lod()) {
    std::vector<int64_t> offsets;
    for (int64_t i = begin; i <= end; ++i) offsets.push_back(level[i] - level[begin]);
    lod.push_back(std::move(offsets));
    const int64_t b = level[begin], e = level[end];
    begin = b;
    end = e;
  }
  Tensor out = t.Slice(begin, end);
  out.set_lod(std::move(lod));
  return out;
}

}  // namespace

StatusOr<FeedMap> RankFeed(const FeedMap& global, int rank, int nranks,
                           const std::set<std::string>& whole) {
  FeedMap out;
  const std::string* first = nullptr;
  int64_t samples = -1;
  for (const auto& [name, t] : global) {
    if (whole.count(name)) continue;
    if (t.dims().size() == 0)
      return InvalidArgument("feed '", name,
                             "' is a scalar: data-parallel feeds are split along dim 0");
    if (t.has_lod())
      LOOM_RETURN_IF_ERROR(CheckLoD(t.lod(), t.dims()[0], StrCat("feed '", name, "'")));
    const int64_t n = Samples(t);
    if (samples >= 0 && n != samples)
      return InvalidArgument(
          "feeds have different numbers of samples (rows, or sequences of a "
          "LoD feed): '",
          *first, "' has ", samples, ", '", name, "' has ", n);
    if (samples < 0) {
      samples = n;
      first = &name;
    }
  }
  // Whole samples go to each rank: rows, or the sequences of LoD feeds.
  const std::vector<int64_t> share = BatchShares(std::max<int64_t>(samples, 0), nranks);
  int64_t begin = 0;
  for (int r = 0; r < rank; ++r) begin += share[r];
  for (const auto& [name, t] : global)
    out[name] = whole.count(name) ? t : SliceSamples(t, begin, begin + share[rank]);
  return out;
}

StatusOr<std::unique_ptr<Runner>> Runner::Create(std::vector<RankProgram> ranks, int first_rank,
                                                 int nranks) {
  const int local = static_cast<int>(ranks.size());
  if (local < 1 || first_rank < 0 || nranks < first_rank + local)
    return InvalidArgument("a runner of ranks ", first_rank, "..", first_rank + local - 1,
                           " does not fit a job of ", nranks, " rank(s)");
  std::unique_ptr<Runner> r(new Runner());
  r->first_rank_ = first_rank;
  r->nranks_ = nranks;
  // The ranks of one machine share its cores: threads of this process, or (under mpirun or
  // `loom launch`) the processes started on this machine.
  int sharing = local;
  if (local < nranks) {
    LOOM_ASSIGN_OR_RETURN(JobEnv job, ReadJobEnv());
    if (job.local_processes > 0) sharing = job.local_processes;
  }
  r->threads_ = std::max(1, CpuCores() / std::max(1, sharing));
  r->ranks_.resize(local);
  for (int i = 0; i < local; ++i) {
    RankProgram& p = ranks[i];
    if (!p.scope) {
      r->owned_scopes_.push_back(std::make_unique<Scope>());
      p.scope = r->owned_scopes_.back().get();
    }
    Executor exe(p.place);
    auto sp = exe.Prepare(p.startup);
    if (!sp.ok()) return sp.status().WithContext(StrCat("rank ", first_rank + i, " startup"));
    auto mp = exe.Prepare(p.main);
    if (!mp.ok()) return mp.status().WithContext(StrCat("rank ", first_rank + i, " main"));
    r->startup_.push_back(std::move(sp).value());
    r->main_.push_back(std::move(mp).value());
    r->mains_.push_back(std::move(p.main));
    r->ranks_[i].place = p.place;
    r->ranks_[i].scope = p.scope;
    // Several ranks here: one that fails aborts the group's communicators (once startup made
    // them), so that its peers stop at once and the error returned is its own.
    if (local > 1) {
      Scope* scope = p.scope;
      r->ranks_[i].on_failure = [scope](const Status& cause) {
        if (collective::Communicator* comm = CommOfScope(*scope)) comm->Abort(cause);
      };
    }
  }
  return r;
}

Runner::~Runner() {
  for (auto& r : ranks_) r.feeds.clear();
}

std::set<std::string> Runner::WholeFeeds(const FeedMap& feed) const {
  std::set<std::string> whole;
  const BlockDesc& block = *mains_[0].GlobalBlock();
  for (const auto& [name, t] : feed) {
    VarDesc v = block.FindVar(name);
    if (v && v.Dims().size() > 0 && v.Dims()[0] >= 0 && nranks_ > 1) whole.insert(name);
  }
  return whole;
}

Status Runner::RunLocal(bool startup, const std::vector<std::string>& fetches) {
  for (size_t i = 0; i < ranks_.size(); ++i)
    ranks_[i].prepared = startup ? startup_[i].get() : main_[i].get();
  if (ranks_.size() > 1) return Executor::RunRanks(&ranks_, fetches);
  // One rank in this process: its kernels get this process's share of the machine.
  RankRun& r = ranks_[0];
  ScopedBlasThreads blas(multi_process() ? threads_ : BlasThreads());
  ScopedThreadBudget budget(multi_process() && threads_ < CpuCores() ? threads_ : 0);
  Executor exe(r.place);
  exe.set_timeline(r.timeline, first_rank_);
  return exe.Run(r.prepared, r.scope, r.feeds, fetches, &r.fetched);
}

Status Runner::Startup() {
  for (auto& r : ranks_) r.feeds.clear();
  return RunLocal(true, {});
}

Status Runner::LoadParams(const std::string& path) {
  // A regular file is a combined parameter file (save_combine); anything else a directory.
  const bool combined = FileExists(path) && !IsDirectory(path);
  for (size_t i = 0; i < ranks_.size(); ++i)
    LOOM_RETURN_IF_ERROR(
        combined ? loom::LoadParamsCombined(mains_[i], ranks_[i].scope, path, ranks_[i].place)
                 : loom::LoadParams(mains_[i], ranks_[i].scope, path, ranks_[i].place));
  return Status::OK();
}

StatusOr<bool> Runner::SaveParams(const std::string& dir) const {
  if (first_rank_ != 0) return false;
  LOOM_RETURN_IF_ERROR(loom::SaveParams(mains_[0], *ranks_[0].scope, dir));
  return true;
}

Status Runner::Step(const FeedMap& feed, const std::vector<std::string>& fetches, FeedSplit split) {
  if (!failed_.ok())
    return FailedPrecondition(
        "an earlier step failed and aborted the ranks' group (", failed_.message(),
        "): create a new runner (Python's CompiledProgram does so on its next run)");
  rows_.assign(ranks_.size(), 0);
  global_rows_ = 0;
  if (split == FeedSplit::kLocal) {
    if (ranks_.size() != 1)
      return InvalidArgument("a feed of one rank's own for ", ranks_.size(), " local ranks");
    ranks_[0].feeds = feed;
  }
  const std::set<std::string> whole = WholeFeeds(feed);
  if (split == FeedSplit::kGlobal) {
    for (size_t i = 0; i < ranks_.size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(ranks_[i].feeds,
                            RankFeed(feed, first_rank_ + static_cast<int>(i), nranks_, whole));
    }
  }
  auto batch = std::find_if(feed.begin(), feed.end(), [&](const auto& f) {
    return !whole.count(f.first) && f.second.dims().size() > 0;
  });
  if (batch != feed.end()) {
    const int64_t rows = batch->second.dims()[0];
    global_rows_ = split == FeedSplit::kGlobal ? rows : 0;
    const std::vector<int64_t> shares = BatchShares(rows, nranks_);
    for (size_t i = 0; i < ranks_.size(); ++i)
      rows_[i] = split == FeedSplit::kGlobal ? shares[first_rank_ + static_cast<int>(i)] : rows;
  }
  // Every rank's collectives carry the step number: a rank that went on after an error (under
  // MPI, where each process drives its own runner) meets the others' calls of another step and
  // both learn it at once.
  ++steps_;
  for (auto& r : ranks_)
    if (collective::Communicator* comm = CommOfScope(*r.scope)) comm->set_step(steps_);
  Status st = RunLocal(false, fetches);
  for (auto& r : ranks_) r.feeds.clear();
  if (!st.ok() && ranks_.size() > 1) failed_ = st;  // RunLocal aborted the group
  return st;
}

namespace {
double FirstValue(const Tensor& t) {
  if (t.numel() < 1) return NAN;
  if (t.dtype() == proto::FP32) return t.data<float>()[0];
  if (t.dtype() == proto::FP64) return t.data<double>()[0];
  return NAN;
}
}  // namespace

StatusOr<double> Runner::GlobalFirstValue() {
  const auto& out0 = ranks_[0].fetched;
  if (out0.empty()) return NAN;
  if (out0[0].numel() != 1 || global_rows_ <= 0) return FirstValue(out0[0]);
  double part = 0;
  for (size_t i = 0; i < ranks_.size(); ++i)
    if (rows_[i] > 0)
      part += FirstValue(ranks_[i].fetched[0]) * static_cast<double>(rows_[i]) / global_rows_;
  if (!multi_process()) return part;
  if (peers_unreachable_) {
    int64_t local = 0;
    for (int64_t r : rows_) local += r;
    return local > 0 ? part * static_cast<double>(global_rows_) / local : NAN;
  }
  LOOM_ASSIGN_OR_RETURN(collective::Communicator * comm, Communicator());
  double sum = 0;
  LOOM_RETURN_IF_ERROR(
      comm->AllReduce(&part, &sum, 1, collective::DataType::kFloat64, collective::ReduceOp::kSum)
          .Wait()
          .WithContext("summing the first fetch over the ranks"));
  return sum;
}

StatusOr<collective::Communicator*> Runner::Communicator() const {
  collective::Communicator* comm = CommOfScope(*ranks_[0].scope);
  if (!comm)
    return FailedPrecondition("rank ", first_rank_, ": the startup program made no communicator ('",
                              kCommVar, "')");
  return comm;
}

void Runner::set_timeline(Timeline* timeline) {
  for (auto& r : ranks_) r.timeline = timeline;
}

Status Runner::CheckSameOnEveryRank(const std::vector<std::pair<std::string, int64_t>>& values) {
  if (!multi_process() || values.empty() || peers_unreachable_) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(collective::Communicator * comm, Communicator());
  const size_t k = values.size();
  std::vector<int64_t> mine(k), all(k * static_cast<size_t>(nranks_));
  for (size_t i = 0; i < k; ++i) mine[i] = values[i].second;
  LOOM_RETURN_IF_ERROR(
      comm->AllGather(mine.data(), all.data(), k, collective::DataType::kInt64).Wait());
  for (int r = 1; r < nranks_; ++r)
    for (size_t i = 0; i < k; ++i)
      if (all[r * k + i] != all[i])
        return InvalidArgument("the ranks were started with different ", values[i].first, ": rank ",
                               r, " has ", all[r * k + i], ", rank 0 has ", all[i]);
  return Status::OK();
}

Status Runner::Finish() {
  if (!multi_process() || peers_unreachable_) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(collective::Communicator * comm, Communicator());
  return comm->Barrier().Wait();
}

}  // namespace loom::runtime
