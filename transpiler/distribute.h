// The parameter-server transpiler (Fluid's DistributeTranspiler): one single-device program
// (startup + main with forward, backward and optimizer ops) in; per trainer a startup and a main
// program, per server a startup and a main program, and a manifest of where every parameter
// block lives, out. It never runs a kernel.
//
// Parameters are cut along dim 0 into whole-row blocks (as Fluid: min(servers, numel /
// min_block_size) blocks, at least one) and the blocks placed on servers (round robin, name
// hash, or bytes: the largest first onto the least-loaded server). Trainers lose their optimizer
// ops and send each gradient's blocks right after the op that finishes it, then barrier, receive
// the parameter blocks and concatenate them. Each server runs listen_and_serv with one optimize
// sub-block per block it owns (the optimizer op and its state, sliced to the block) and the
// learning-rate schedule in a block of its own. Servers initialize the parameters (the
// single-device startup's own ops, then sliced); every trainer's startup fetches them, so all
// trainers start from the servers' values.
//
// Distributed lookup tables (a lookup_table with is_distributed): never sliced, placed nor
// allocated by a startup; every server holds the rows of the ids SparseTable::ShardOf gives it,
// made on first touch from the parameter's initializer (uniform_random, gaussian_random or
// fill_constant), seeded per id. Trainers prefetch their batch's rows (distributed_lookup_table)
// and push the SelectedRows gradient by row (send_sparse); servers apply sgd to those rows.
//
// Hybrid mode (client_size > 1): every trainer is an MPI client of several processes; the
// servers see one trainer per client (see DistributeConfig::client_size).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "framework/framework.pb.h"
#include "framework/program_desc.h"
#include "transpiler/pass.h"

namespace loom::transpiler {

struct DistributeConfig {
  int trainers = 1;
  // Server endpoints ("host:port"), or "pserver:I" placeholders resolved at run time from
  // PADDLE_PSERVER_ENDPOINTS.
  std::vector<std::string> pservers;
  bool sync_mode = true;
  bool slice_var_up = true;
  std::string split_method = "round_robin";  // round_robin | hash | bytes
  int64_t min_block_size = 8192;             // elements
  // Hybrid (MPI clients of the servers): each trainer is a client of client_size processes
  // (its own MPI world), and the trainer programs made are those of rank client_rank of the
  // client. The client allreduces its gradients (weighted by the ranks' batch rows), its rank 0
  // alone talks to the servers, and broadcasts the parameters it receives. 1: plain trainers.
  int client_size = 1;
  int client_rank = 0;
  PassOptions pass_options;
};

struct DistributeResult {
  std::vector<ProgramDesc> trainer_startup, trainer_main;  // one per trainer
  std::vector<ProgramDesc> pserver_startup, pserver_main;  // one per server
  proto::DistributeManifest manifest;
};

StatusOr<DistributeResult> TranspileDistribute(const ProgramDesc& startup, const ProgramDesc& main,
                                               const DistributeConfig& config);

std::vector<PassInfo> DistributePasses();

}  // namespace loom::transpiler
