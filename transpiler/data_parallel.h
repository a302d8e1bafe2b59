// The data-parallel transpiler: one single-device program (startup + main with forward,
// backward and optimizer ops) in, one startup + main program per rank out, plus a manifest of
// every decision (owners, buckets, algorithm per bucket). It never runs a kernel.
//
// It runs as a pipeline of small named passes (pass.h), declared once in data_parallel.cc with
// their summaries (`loom transpile --help` and docs/CLI.md list them from there); the verifier
// checks the programs after each, and optional passes can be disabled by name.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "collective/transport_registry.h"
#include "framework/comm_var.h"
#include "framework/framework.pb.h"
#include "framework/place.h"
#include "framework/program_desc.h"
#include "transpiler/pass.h"
#include "transpiler/placement.h"

namespace loom::transpiler {

enum class SyncMode { kAllReduce, kOwner };
// How a rank's gradient is weighted in the sum over ranks (Fluid's GradientScaleStrategy):
// kSample by its share of the global batch (the full-batch gradient even when the batch does
// not divide evenly, and 0 for a rank without samples), kAvg by 1/nranks (Fluid's
// CoeffNumDevice), kOne not at all (sum).
enum class GradScale { kSample, kAvg, kOne };

struct DataParallelConfig {
  int nranks = 1;
  // Recorded in the manifest; when given, one per rank, and CUDA places (distinct) exactly when
  // the transport is nccl or cuda_p2p.
  std::vector<Place> places;
  SyncMode mode = SyncMode::kAllReduce;
  collective::Algorithm algorithm = collective::Algorithm::kAuto;
  double fuse_grad_size_mb = 32;  // 0: no fusion
  GradScale grad_scale = GradScale::kSample;
  // Gradient compression: "" (none) or "fp16": float32 gradient buckets cross the wire as
  // float16 (half the bytes; each hop adds in float32 and rounds to float16), allreduce mode
  // on CPU places.
  std::string grad_compression;
  PlacementPolicy owner_policy = PlacementPolicy::kBytes;
  std::string group = "loom_dp";  // name the ranks' communicators meet under
  // How the ranks meet: in-process (one process, a thread per rank: Executor::RunRanks), mpi
  // (one process per rank under mpirun; the MPI world is the group), nccl (CUDA places, a thread
  // per rank, one GPU each; every collective is NCCL's own: "native") or cuda_p2p (CUDA places
  // like nccl, running Loom's ring/tree/multi_tree/star on the GPUs).
  collective::TransportId transport = collective::TransportId::kInProcess;
  std::string topology;  // preset name for comm_init; empty: uniform
  int timeout_ms = 30000;
  // "auto" is resolved per bucket by the collectives' cost model (collective/selector.h):
  // allreduce buckets up to this size take the tree, larger ones the cheapest by the model;
  // -1: the transport's measured crossover (collective/communicator.h).
  int tree_max_bytes = -1;
  // false: the per-rank startup programs hold only comm_init and the broadcasts (the caller
  // brings initialized parameters, as Python's CompiledProgram does).
  bool keep_startup_init = true;
  // Passes to skip (optional ones only) and to dump the programs after.
  PassOptions pass_options;
};

struct DataParallelResult {
  std::vector<ProgramDesc> startup;  // one per rank
  std::vector<ProgramDesc> main;
  proto::DataParallelManifest manifest;
};

StatusOr<DataParallelResult> TranspileDataParallel(const ProgramDesc& startup,
                                                   const ProgramDesc& main,
                                                   const DataParallelConfig& config);

// The pipeline's passes, in order.
std::vector<PassInfo> DataParallelPasses();

StatusOr<SyncMode> ParseSyncMode(const std::string& name);
StatusOr<GradScale> ParseGradScale(const std::string& name);
const char* SyncModeName(SyncMode mode);
const char* GradScaleName(GradScale scale);

// Variable names the transpiler introduces (and kCommVar: framework/comm_var.h).
inline constexpr const char* kSampleWeightVar = "@LOOM_SAMPLE_WEIGHT@";

}  // namespace loom::transpiler
