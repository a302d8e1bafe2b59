// The passes of the parameter-server pipeline (distribute.cc lists them in order) and the state
// they share: decisions are kept by name (parameter, block), never as op indices.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "transpiler/distribute.h"
#include "transpiler/gradients.h"
#include "transpiler/placement.h"

namespace loom::transpiler {

// A row block of a parameter and the server that owns it.
struct ParamBlock {
  std::string param, grad;      // the parameter and its gradient
  std::string name, grad_name;  // the block's variables (the originals when unsliced)
  int index = 0;
  int64_t row_begin = 0, row_end = 0;
  int server = 0;
  int64_t bytes = 0;
  bool sliced = false;
};

// A lookup table with is_distributed: it lives only on the servers, each holding the rows of
// the ids ShardOf gives it (kvstore/sparse_table.h), created on first touch from the
// parameter's initializer. Trainers prefetch rows and push SelectedRows gradients.
struct DistributedTable {
  std::string param, grad;
  std::string lr;  // the LearningRate variable of its update op
  // sgd | adagrad (its moment per row, starting at 0) | adam (lazy: two moments per row,
  // starting at 0; beta powers per table)
  std::string optimizer = "sgd";
  float epsilon = 0;                    // adagrad's, adam's
  float beta1 = 0, beta2 = 0;           // adam's
  double beta1_pow = 0, beta2_pow = 0;  // adam's, as fill_constant makes them
  DataType dtype = proto::FP32;
  int64_t height = 0;  // the declared size[0]: nominal, any id >= 0 is accepted
  int64_t width = 0;
  std::string init;  // constant | uniform | gaussian (kvstore::RowInitializer)
  float init_a = 0, init_b = 0;
  int64_t seed = 0;
};

struct DistributeState {
  explicit DistributeState(const DistributeConfig& c) : config(c) {}
  const DistributeConfig& config;
  ProgramDesc startup, main;
  std::string fingerprint;
  GradientAnalysis grads;
  PlacementPolicy policy = PlacementPolicy::kRoundRobin;
  std::vector<ParamBlock> blocks;        // by parameter (analysis order), then rows
  std::vector<DistributedTable> tables;  // not in grads.params: never sliced nor placed
  // Parameters (of grads.params) whose gradient stays a SelectedRows: is_sparse embeddings whose
  // gradient only their optimizer op reads. Trainers push its rows to the block owners.
  std::set<std::string> sparse_params;
  const DistributedTable* TableOf(const std::string& param) const;
  std::vector<int64_t> server_bytes;
  double imbalance = 1.0;
  std::vector<std::string> lr_ops;
  std::vector<ProgramDesc> trainer_startup, trainer_main, pserver_startup, pserver_main;

  std::vector<NamedProgram> Programs() const;
  std::vector<const ParamBlock*> BlocksOf(const std::string& param) const;
};

StatusOr<bool> CheckDistributeConfig(DistributeState& s);
StatusOr<bool> FindDistributeGradients(DistributeState& s);
StatusOr<bool> SliceParams(DistributeState& s);
StatusOr<bool> PlaceBlocks(DistributeState& s);
StatusOr<bool> BuildServerPrograms(DistributeState& s);
StatusOr<bool> BuildTrainerPrograms(DistributeState& s);
StatusOr<bool> JoinClients(DistributeState& s);

// Variable names of a sliced parameter's pieces: "w.block0", "w@GRAD.block0" (Fluid's).
std::string BlockVarName(const std::string& var, int index);

}  // namespace loom::transpiler
