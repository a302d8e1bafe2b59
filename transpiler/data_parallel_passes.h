// The passes of the data-parallel pipeline (data_parallel.cc lists them in order) and the state
// they share. What a later pass needs of an earlier one's decisions lives on the ops (op_role,
// op_role_var, attributes) or in name-keyed fields here, never as op indices.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/framework.pb.h"
#include "framework/program_desc.h"
#include "transpiler/algorithm_choice.h"
#include "transpiler/buckets.h"
#include "transpiler/data_parallel.h"
#include "transpiler/gradients.h"
#include "transpiler/pass.h"
#include "transpiler/placement.h"

namespace loom::transpiler {

struct DataParallelState {
  explicit DataParallelState(const DataParallelConfig& c) : config(c) {}
  const DataParallelConfig& config;
  ProgramDesc startup, main;  // until split-per-rank
  std::unique_ptr<AlgorithmChooser> chooser;
  std::string fingerprint;  // of the input main program and the options (comm_init checks it)
  GradientAnalysis grads;
  std::map<std::string, int> owner;  // owner mode: parameter -> rank
  std::vector<int64_t> owner_bytes;  // owner mode: bytes each rank owns
  double owner_imbalance = 1.0;
  bool buckets_planned = false;
  std::vector<GradBucket> buckets;
  std::vector<ProgramDesc> rank_startup, rank_main;  // after split-per-rank

  bool owner_mode() const { return config.mode == SyncMode::kOwner; }
  std::vector<NamedProgram> Programs() const;
};

// The collective that synchronizes gradient buckets: allreduce, or in owner mode reduce.
collective::Collective GradCollective(const DataParallelState& s);

StatusOr<bool> CheckProgram(DataParallelState& s);
StatusOr<bool> FindGradients(DataParallelState& s);
StatusOr<bool> AssignOwners(DataParallelState& s);
StatusOr<bool> PlanGradBuckets(DataParallelState& s);
StatusOr<bool> InsertCommInit(DataParallelState& s);
StatusOr<bool> BroadcastParams(DataParallelState& s);
StatusOr<bool> CheckPersistables(DataParallelState& s);
StatusOr<bool> InsertGradSync(DataParallelState& s);
StatusOr<bool> SplitPerRank(DataParallelState& s);

}  // namespace loom::transpiler
