#include "transpiler/data_parallel.h"

#include "transpiler/data_parallel_passes.h"

namespace loom::transpiler {
namespace {

// The pipeline, in order: the one declaration of its passes (names, summaries, optional).
const std::vector<Pass<DataParallelState>>& Pipeline() {
  static const std::vector<Pass<DataParallelState>> passes = {
      {{"check-program",
        "checks the config; rejects transpiled programs and programs without optimizer ops", false},
       CheckProgram},
      {{"find-gradients",
        "pairs each optimized parameter with its gradient (op_role_var) and finds the batch input",
        false},
       FindGradients},
      {{"assign-owners",
        "owner mode: one owner rank per parameter (policy bytes, hash or round_robin); tags "
        "each optimizer op with the parameter it serves",
        false},
       AssignOwners},
      {{"plan-buckets",
        "fuses small gradients, in the order backward produces them, into buckets of about "
        "fuse_grad_size_mb (disabled: one bucket per gradient)",
        true},
       PlanGradBuckets},
      {{"insert-comm-init", "comm_init in startup; the communicator variable in both programs",
        false},
       InsertCommInit},
      {{"broadcast-params", "broadcasts every parameter from rank 0 after initialization", true},
       BroadcastParams},
      {{"check-persistables",
        "ends startup with a check that every rank holds the same value of every persistable "
        "the main program reads (learning rates, optimizer state, counters, parameters): ranks "
        "that differ fail, naming the first variable",
        true},
       CheckPersistables},
      {{"insert-grad-sync",
        "right after a bucket's last gradient: its allreduce (owner mode: reduce to the owner, "
        "and the owner's broadcast of the updated parameter); algorithm auto resolved per "
        "collective by the cost model",
        false},
       InsertGradSync},
      {{"split-per-rank",
        "per-rank programs; owner mode keeps only the optimizer ops (and state) a rank owns",
        false},
       SplitPerRank},
  };
  return passes;
}

void FillManifest(const DataParallelState& s, const std::vector<PassRecord>& records,
                  proto::DataParallelManifest* m) {
  const auto& c = s.config;
  m->set_nranks(c.nranks);
  for (const Place& p : c.places) m->add_places(p.ToString());
  m->set_mode(SyncModeName(c.mode));
  m->set_algorithm(collective::AlgorithmName(c.algorithm));
  m->set_grad_scale(GradScaleName(c.grad_scale));
  m->set_fuse_grad_size_mb(c.fuse_grad_size_mb);
  m->set_group(c.group);
  m->set_transport(collective::GetTransport(c.transport).name);
  if (c.grad_scale == GradScale::kSample) m->set_batch_var(s.grads.batch_var);
  for (const auto& r : records) m->add_passes(r.name);
  if (s.owner_mode()) {
    for (int64_t bytes : s.owner_bytes) m->add_owner_bytes(bytes);
    m->set_owner_imbalance(s.owner_imbalance);
  }
  std::map<std::string, int> bucket_of;
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    const GradBucket& bucket = s.buckets[b];
    for (const auto& p : bucket.params) bucket_of[p] = static_cast<int>(b);
    auto* mb = m->add_buckets();
    mb->set_id(static_cast<int>(b));
    for (const auto& g : bucket.grads) mb->add_grads(g);
    mb->set_bytes(bucket.bytes);
    mb->set_algorithm(bucket.algorithm);
    mb->set_collective(collective::CollectiveName(GradCollective(s)));
    mb->set_fused(bucket.fused);
  }
  for (const auto& p : s.grads.params) {
    auto* mp = m->add_params();
    mp->set_name(p.param);
    mp->set_grad(p.grad);
    mp->set_bytes(p.bytes);
    if (auto it = s.owner.find(p.param); it != s.owner.end()) mp->set_owner(it->second);
    mp->set_bucket(bucket_of.count(p.param) ? bucket_of[p.param] : -1);
  }
  for (const auto& f : s.grads.frozen) m->add_frozen_params(f);
}

}  // namespace

std::vector<PassInfo> DataParallelPasses() { return PassInfos(Pipeline()); }

StatusOr<DataParallelResult> TranspileDataParallel(const ProgramDesc& startup,
                                                   const ProgramDesc& main,
                                                   const DataParallelConfig& config) {
  DataParallelState s(config);
  s.startup = startup;
  s.main = main;
  PassOptions options = config.pass_options;
  LOOM_ASSIGN_OR_RETURN(std::vector<PassRecord> records,
                        RunPipeline("transpile", Pipeline(), s, options));
  DataParallelResult result;
  FillManifest(s, records, &result.manifest);
  result.startup = std::move(s.rank_startup);
  result.main = std::move(s.rank_main);
  return result;
}

StatusOr<SyncMode> ParseSyncMode(const std::string& name) {
  if (name == "allreduce") return SyncMode::kAllReduce;
  if (name == "owner" || name == "reduce") return SyncMode::kOwner;
  return InvalidArgument("mode '", name, "' is not one of allreduce, owner");
}

StatusOr<GradScale> ParseGradScale(const std::string& name) {
  if (name == "sample") return GradScale::kSample;
  if (name == "avg") return GradScale::kAvg;
  if (name == "one") return GradScale::kOne;
  return InvalidArgument("grad scale '", name, "' is not one of sample, avg, one");
}

const char* SyncModeName(SyncMode mode) { return mode == SyncMode::kOwner ? "owner" : "allreduce"; }

const char* GradScaleName(GradScale scale) {
  switch (scale) {
    case GradScale::kSample: return "sample";
    case GradScale::kAvg: return "avg";
    default: return "one";
  }
}

}  // namespace loom::transpiler
