// The data-parallel transpiler: one single-device program (startup + main with forward,
// backward and optimizer ops) in, one startup + main program per rank out, plus a manifest of
// every decision (owners, buckets, algorithm per bucket). It never runs a kernel.
//
// It runs as a pipeline of small named passes; the verifier checks the programs after each:
//   check-program       rejects transpiled programs, programs without optimizer ops, and
//                       parameters whose gradient no backward op writes
//   find-gradients      pairs every optimized parameter with the gradient backward produces and
//                       the op that produces it last
//   assign-owners       (owner mode) one owner rank per parameter: balanced by bytes (largest
//                       first onto the least-loaded rank) or by a hash of the name
//   plan-buckets        groups small gradients, in the order backward produces them, into
//                       buckets of about fuse_grad_size_mb; resolves algorithm "auto" per bucket
//                       with the collectives' cost model
//   insert-comm-init    comm_init in startup; the communicator variable in both programs
//   broadcast-params    every parameter is broadcast from rank 0 after initialization
//   insert-grad-sync    sample_weight, coalesce_grads per fused bucket, and right after a
//                       bucket's last gradient is produced its allreduce (or, in owner mode, a
//                       reduce to the owner and a broadcast of the updated parameter)
//   split-per-rank      per-rank copies; owner mode drops the optimizer ops (and their state)
//                       of parameters the rank does not own
// Passes marked optional (plan-buckets, broadcast-params) can be disabled by name.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "collective/transport_registry.h"
#include "framework/framework.pb.h"
#include "framework/program_desc.h"

namespace loom::transpiler {

enum class SyncMode { kAllReduce, kOwner };
// How a rank's gradient is weighted in the sum over ranks (Fluid's GradientScaleStrategy):
// kSample by its share of the global batch (the full-batch gradient even when the batch does
// not divide evenly, and 0 for a rank without samples), kAvg by 1/nranks (Fluid's
// CoeffNumDevice), kOne not at all (sum).
enum class GradScale { kSample, kAvg, kOne };

struct DataParallelConfig {
  int nranks = 1;
  // Recorded in the manifest, e.g. "cpu:0"; when given, one per rank, and CUDA places
  // ("cuda:N", distinct) exactly when the transport is nccl or cuda_p2p.
  std::vector<std::string> places;
  SyncMode mode = SyncMode::kAllReduce;
  std::string algorithm = "auto";  // ring, tree, multi_tree, star or auto
  double fuse_grad_size_mb = 32;   // 0: no fusion
  GradScale grad_scale = GradScale::kSample;
  std::string owner_policy = "bytes";  // bytes | hash
  std::string group = "loom_dp";       // name the ranks' communicators meet under
  // How the ranks meet: "inprocess" (one process, a thread per rank: Executor::RunRanks),
  // "mpi" (one process per rank under mpirun; the MPI world is the group), "nccl" (CUDA
  // places, a thread per rank, one GPU each; every collective is NCCL's own: "native") or
  // "cuda_p2p" (CUDA places like nccl, running Loom's ring/tree/multi_tree/star on the GPUs).
  std::string transport = collective::GetTransport(collective::TransportId::kInProcess).name;
  std::string topology;  // preset name for comm_init; empty: uniform
  int timeout_ms = 30000;
  // "auto" is resolved per bucket by the collectives' cost model (collective/selector.h):
  // allreduce buckets up to this size take the tree, larger ones the cheapest by the model;
  // -1: the transport's measured crossover (collective/communicator.h).
  int tree_max_bytes = -1;
  // false: the per-rank startup programs hold only comm_init and the broadcasts (the caller
  // brings initialized parameters, as Python's CompiledProgram does).
  bool keep_startup_init = true;
  std::vector<std::string> disabled_passes;
};

struct DataParallelResult {
  std::vector<ProgramDesc> startup;  // one per rank
  std::vector<ProgramDesc> main;
  proto::DataParallelManifest manifest;
};

StatusOr<DataParallelResult> TranspileDataParallel(const ProgramDesc& startup,
                                                   const ProgramDesc& main,
                                                   const DataParallelConfig& config);

// (name, summary, optional) of every pass, in pipeline order.
struct PassInfo {
  const char* name;
  const char* summary;
  bool optional;
};
const std::vector<PassInfo>& DataParallelPasses();

StatusOr<SyncMode> ParseSyncMode(const std::string& name);
StatusOr<GradScale> ParseGradScale(const std::string& name);
const char* SyncModeName(SyncMode mode);
const char* GradScaleName(GradScale scale);

// Variable names the transpiler introduces.
inline constexpr const char* kCommVar = "@LOOM_COMM@";
inline constexpr const char* kSampleWeightVar = "@LOOM_SAMPLE_WEIGHT@";

}  // namespace loom::transpiler
