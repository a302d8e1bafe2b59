// loom run DIR: trains a saved program bundle.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>

#include "base/job_env.h"
#include "collective/transport/mpi.h"
#include "collective/transport_registry.h"
#include "executor/executor.h"
#include "framework/file_util.h"
#include "framework/serialization.h"
#include "kvstore/sparse_table.h"
#include "loom/config.h"
#include "rpc/ps_client.h"
#include "runtime/runner.h"
#include "runtime/train.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/model_dir.h"
#include "tools/proto_text.h"

namespace loom::cli {

namespace {

Flags RunFlags() {
  return Flags(
      "run", "loom run DIR [flags]",
      "Runs DIR/startup.pb once (initializing parameters), then DIR/main.pb for --iters steps,\n"
      "feeding minibatches sliced along dim 0 from .npy files (wrapping around), and prints the\n"
      "fetched variables. Defaults for feeds, fetches and batch size come from DIR/bundle.pbtxt.\n"
      "A DIR save_inference_model wrote runs its program (main.pb, or the model_file its\n"
      "bundle.pbtxt names) from its saved parameters (DIR/params, or the params_file).\n"
      "A DIR written by `loom transpile` (DIR/manifest.pbtxt) trains on all its ranks at once:\n"
      "each step's global batch is split across the ranks and the loss is reported over it\n"
      "(ranks transpiled for CUDA places run on their GPUs, --place applies to CPU ranks).\n"
      "A DIR transpiled with --transport mpi runs one rank per process:\n"
      "  mpirun -np N loom run DIR   (rank 0 prints; every rank reads the same feeds)\n"
      "A DIR transpiled with --mode pserver runs as the role its environment names\n"
      "(PADDLE_TRAINING_ROLE=PSERVER|TRAINER, PADDLE_PSERVER_ID, PADDLE_TRAINER_ID):\n"
      "  loom launch --workers T --servers S -- loom run DIR\n"
      "each trainer trains on its share of every global minibatch; a server serves until every\n"
      "trainer is done. There --load-params DIR makes a server resume from DIR/pserver_<id> (with\n"
      "its shards of distributed lookup tables) and\n"
      "--save-params DIR makes trainer 0 save and every server write DIR/pserver_<id>.",
      {
          {"iters", "N", "number of training steps", "100"},
          {"batch-size", "B", "rows per minibatch (default: bundle.pbtxt, else all rows)", ""},
          {"feed", "NAME=FILE.npy", "feed variable NAME from a .npy file", "", true},
          {"fetch", "NAME", "variable to fetch and print each step", "", true},
          {"print-every", "K", "print a progress line every K steps", "10"},
          {"place", "PLACE", StrCat("where to run: ", kPlaceSyntax), Place::CPU(0).ToString()},
          {"load-params", "DIR",
           "load parameters from DIR (or a combined parameter file) instead of running "
           "startup.pb",
           ""},
          {"save-params", "DIR", "save the persistable variables to DIR at the end", ""},
          {"checkpoint-every", "N",
           "save the persistable variables every N steps to --checkpoint-dir/step-<N>", "0"},
          {"checkpoint-dir", "DIR", "where --checkpoint-every saves and --resume looks", ""},
          {"keep-checkpoints", "K", "keep the newest K complete checkpoints", "3"},
          {"resume", "",
           "start from the newest complete checkpoint in --checkpoint-dir (its step's "
           "parameters; the steps after it run)",
           ""},
          {"timeline", "FILE",
           "write a chrome://tracing JSON of the last --timeline-iters steps "
           "(ops per rank on compute and communication threads)",
           ""},
          {"timeline-iters", "K", "steps recorded by --timeline", "5"},
      },
      1, 1);
}

using runtime::FeedData;

Status LoadManifest(const std::string& dir, proto::BundleManifest* manifest) {
  std::string path = JoinPath(dir, "bundle.pbtxt");
  if (!FileExists(path)) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseTextProto(text, path, "a bundle manifest", manifest);
}

// Vars main reads before any op writes them, that are neither persistable nor fed.
Status CheckAllInputsProvided(const ProgramDesc& main, const std::vector<FeedData>& feeds) {
  std::set<std::string> ready;
  for (const auto& f : feeds) ready.insert(f.name);
  const BlockDesc& b = *main.GlobalBlock();
  for (int i = 0; i < b.OpSize(); ++i) {
    OpDesc op = b.Op(i);
    for (const auto& slot : op.InputSlots()) {
      for (const auto& v : op.Input(slot)) {
        VarDesc vd = b.FindVar(v);
        if (ready.count(v) || (vd && vd.Persistable())) continue;
        return InvalidArgument("missing feed: var '", v, "' (input '", slot, "' of ",
                               OpLocation(op.Type(), 0, i),
                               ") is not fed and no earlier op writes it; pass --feed ", v,
                               "=FILE.npy or list it in bundle.pbtxt");
      }
    }
    for (const auto& v : op.OutputArgumentNames()) ready.insert(v);
  }
  return Status::OK();
}

// `program` names main's file in messages (DIR/main.pb, or the model_file of a model).
Status PrepareFeeds(const std::string& dir, const Flags& flags,
                    const proto::BundleManifest& manifest, const ProgramDesc& main,
                    const std::string& program, std::vector<FeedData>* feeds) {
  std::map<std::string, std::string> paths;
  for (const auto& f : manifest.feeds())
    if (f.has_file()) paths[f.name()] = JoinPath(dir, f.file());
  for (const auto& spec : flags.GetAll("feed")) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      return InvalidArgument("--feed expects NAME=FILE.npy, got '", spec, "'");
    paths[spec.substr(0, eq)] = spec.substr(eq + 1);
  }
  const BlockDesc& b = *main.GlobalBlock();
  for (const auto& [name, path] : paths) {
    VarDesc v = b.FindVar(name);
    if (!v) return NotFound("feed '", name, "' is not a variable of ", program);
    auto t = LoadNpy(path);
    if (!t.ok()) return t.status().WithContext(StrCat("feed '", name, "'"));
    Tensor data = std::move(t).value();
    if (data.dtype() != v.Dtype())
      return InvalidArgument("feed '", name, "' from ", path, " has dtype ",
                             DataTypeName(data.dtype()), ", ", program, " declares ",
                             DataTypeName(v.Dtype()));
    DDim want = v.Dims();
    bool shape_ok = data.dims().size() == want.size() && data.dims().size() > 0;
    for (int i = 1; shape_ok && i < want.size(); ++i)
      shape_ok = want[i] < 0 || want[i] == data.dims()[i];
    if (!shape_ok)
      return InvalidArgument("feed '", name, "' from ", path, " has dims ", data.dims().ToString(),
                             ", ", program, " declares ", want.ToString(), " (dim 0 is the batch)");
    feeds->push_back(FeedData{name, std::move(data)});
  }
  for (size_t i = 1; i < feeds->size(); ++i)
    if ((*feeds)[i].data.dims()[0] != (*feeds)[0].data.dims()[0])
      return InvalidArgument("feeds have different numbers of rows: '", (*feeds)[0].name, "' has ",
                             (*feeds)[0].data.dims()[0], ", '", (*feeds)[i].name, "' has ",
                             (*feeds)[i].data.dims()[0]);
  return CheckAllInputsProvided(main, *feeds);
}

// The feeds, fetches and batch size of a run, from the flags and DIR/bundle.pbtxt.
struct RunSetup {
  std::string dir;
  std::string program;  // main's file, for messages
  Place place = Place::CPU();
  std::vector<FeedData> feeds;
  int64_t rows = 0;
  runtime::TrainOptions train;
};

// The checkpoint flags, defaulting to the schedule loom launch --checkpoint-* gave the job.
std::string CheckpointDir(const Flags& flags) {
  if (flags.Has("checkpoint-dir")) return flags.Get("checkpoint-dir");
  const char* env = std::getenv("LOOM_CHECKPOINT_DIR");
  return env ? env : "";
}

bool Resume(const Flags& flags) {
  const char* env = std::getenv("LOOM_RESUME");
  return flags.Switch("resume") || (env != nullptr && std::string(env) == "1");
}

StatusOr<int64_t> IntFlagOrEnv(const Flags& flags, const std::string& flag, const char* var) {
  const char* env = std::getenv(var);
  if (flags.Has(flag) || env == nullptr || *env == '\0') return flags.GetInt(flag);
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  if (*end) return InvalidArgument(var, "='", env, "' is not an integer");
  return static_cast<int64_t>(v);
}

Status LoadSetup(const Flags& flags, const std::string& dir, const ProgramDesc& main,
                 const std::string& program, RunSetup* setup) {
  setup->dir = dir;
  setup->program = program;
  runtime::TrainOptions& t = setup->train;
  LOOM_ASSIGN_OR_RETURN(t.iters, flags.GetInt("iters"));
  LOOM_ASSIGN_OR_RETURN(t.print_every, flags.GetInt("print-every"));
  if (t.iters < 0) return InvalidArgument("--iters must be >= 0, got ", t.iters);
  if (t.print_every <= 0) return InvalidArgument("--print-every must be > 0, got ", t.print_every);
  LOOM_ASSIGN_OR_RETURN(setup->place, ParsePlace(flags.Get("place")));
  if (flags.Has("timeline")) t.timeline = flags.Get("timeline");
  LOOM_ASSIGN_OR_RETURN(t.timeline_iters, flags.GetInt("timeline-iters"));
  if (t.timeline_iters < 1)
    return InvalidArgument("--timeline-iters must be >= 1, got ", t.timeline_iters);
  if (flags.Has("save-params")) t.save_params = flags.Get("save-params");
  // Under loom launch --checkpoint-*, the job's schedule is the default (LOOM_CHECKPOINT_*).
  LOOM_ASSIGN_OR_RETURN(t.checkpoint_every,
                        IntFlagOrEnv(flags, "checkpoint-every", "LOOM_CHECKPOINT_EVERY"));
  LOOM_ASSIGN_OR_RETURN(t.keep_checkpoints,
                        IntFlagOrEnv(flags, "keep-checkpoints", "LOOM_KEEP_CHECKPOINTS"));
  t.checkpoint_dir = CheckpointDir(flags);
  if (t.checkpoint_every < 0)
    return InvalidArgument("--checkpoint-every must be >= 0, got ", t.checkpoint_every);
  if (t.keep_checkpoints < 1)
    return InvalidArgument("--keep-checkpoints must be >= 1, got ", t.keep_checkpoints);
  if ((t.checkpoint_every > 0 || Resume(flags)) && t.checkpoint_dir.empty())
    return InvalidArgument(t.checkpoint_every > 0 ? "--checkpoint-every" : "--resume",
                           " needs --checkpoint-dir DIR");
  proto::BundleManifest manifest;
  LOOM_RETURN_IF_ERROR(LoadManifest(dir, &manifest));
  LOOM_RETURN_IF_ERROR(PrepareFeeds(dir, flags, manifest, main, program, &setup->feeds));
  t.fetches = flags.GetAll("fetch");
  if (t.fetches.empty()) t.fetches.assign(manifest.fetches().begin(), manifest.fetches().end());
  for (const auto& f : t.fetches)
    if (!main.GlobalBlock()->FindVar(f))
      return NotFound("fetch '", f, "' is not a variable of ", program);
  setup->rows = setup->feeds.empty() ? 0 : setup->feeds[0].data.dims()[0];
  t.batch = setup->rows;
  if (flags.Has("batch-size")) {
    LOOM_ASSIGN_OR_RETURN(t.batch, flags.GetInt("batch-size"));
  } else if (manifest.has_batch_size()) {
    t.batch = manifest.batch_size();
  }
  if (!setup->feeds.empty() && (t.batch <= 0 || t.batch > setup->rows))
    return InvalidArgument("batch size ", t.batch, " must be between 1 and the ", setup->rows,
                           " rows of the feeds");
  return Status::OK();
}

// Parameters from --load-params, or (without it, or with several ranks, which also meet in
// startup: comm_init, broadcasts) the startup programs.
// Startup (or --load-params); with --resume then the newest complete checkpoint of
// --checkpoint-dir. Returns the step that checkpoint ends (0: from the start).
StatusOr<int64_t> Initialize(const Flags& flags, runtime::Runner& runner, bool startup) {
  if (startup) LOOM_RETURN_IF_ERROR(runner.Startup().WithContext("startup.pb"));
  if (flags.Has("load-params")) LOOM_RETURN_IF_ERROR(runner.LoadParams(flags.Get("load-params")));
  if (!Resume(flags)) return int64_t{0};
  const std::string dir = CheckpointDir(flags);
  LOOM_ASSIGN_OR_RETURN(auto all, runtime::ListCheckpoints(dir));
  if (all.empty())
    return NotFound("--resume: '", dir, "' holds no complete checkpoint (step-<N>/ with its ",
                    "CHECKPOINT)");
  LOOM_RETURN_IF_ERROR(runner.LoadParams(all.back().second));
  if (runner.first_rank() == 0)
    std::printf("resumed from %s (step %lld)\n", all.back().second.c_str(),
                static_cast<long long>(all.back().first));
  return all.back().first;
}

// DIR/main.pb (and startup.pb) on one place; a model save_inference_model wrote (no startup.pb)
// starts from its parameters.
Status RunOnePlace(const Flags& flags, const RunSetup& setup, ProgramDesc main,
                   const ModelDir& model) {
  const int64_t batch = setup.train.batch;
  for (const auto& f : setup.feeds) {
    DDim want = main.GlobalBlock()->FindVar(f.name).Dims();
    if (want[0] >= 0 && want[0] != batch)
      return InvalidArgument("batch size ", batch, " does not fit feed '", f.name,
                             "': ", setup.program, " declares dims ", want.ToString(),
                             " (pass --batch-size ", want[0], ")");
  }
  runtime::RankProgram rank{ProgramDesc(), std::move(main), setup.place, nullptr};
  const bool load = flags.Has("load-params");
  const bool saved_params = !load && !model.has_startup && !model.params.empty();
  if (!load && !saved_params) {
    if (!model.has_startup)
      return NotFound("'", setup.dir,
                      "' has no startup.pb and no saved parameters (params/ or a "
                      "params_file in bundle.pbtxt) to start ",
                      setup.program, " from: pass --load-params");
    LOOM_ASSIGN_OR_RETURN(rank.startup, LoadProgram(JoinPath(setup.dir, "startup.pb")));
  }
  std::vector<runtime::RankProgram> ranks;
  ranks.push_back(std::move(rank));
  LOOM_ASSIGN_OR_RETURN(auto runner, runtime::Runner::Create(std::move(ranks), 0, 1));
  runtime::TrainOptions train = setup.train;
  if (saved_params && !Resume(flags)) {
    LOOM_RETURN_IF_ERROR(runner->LoadParams(model.params));
  } else {
    if (saved_params) LOOM_RETURN_IF_ERROR(runner->LoadParams(model.params));
    LOOM_ASSIGN_OR_RETURN(train.first_step, Initialize(flags, *runner, !load && !saved_params));
  }
  std::printf("loom run %s: %lld iterations, batch %lld of %lld rows, %s\n", setup.dir.c_str(),
              static_cast<long long>(setup.train.iters), static_cast<long long>(batch),
              static_cast<long long>(setup.rows), setup.place.ToString().c_str());
  return runtime::Train(*runner, setup.feeds, train);
}

// The manifest's transport; manifests written before the field existed are in-process.
std::string ManifestTransport(const proto::DataParallelManifest& dp) {
  return dp.transport().empty() ? collective::GetTransport(collective::TransportId::kInProcess).name
                                : dp.transport();
}

StatusOr<runtime::RankProgram> LoadRank(const std::string& dir, int rank, const Place& place) {
  runtime::RankProgram p;
  std::string rd = JoinPath(dir, StrCat("rank", rank));
  LOOM_ASSIGN_OR_RETURN(p.startup, LoadProgram(JoinPath(rd, "startup.pb")));
  LOOM_ASSIGN_OR_RETURN(p.main, LoadProgram(JoinPath(rd, "main.pb")));
  p.place = place;
  return p;
}

// A transpiled bundle (DIR/manifest.pbtxt, DIR/rank<R>/{startup,main}.pb), every rank on a
// thread of this process. CPU ranks run on --place; CUDA ranks (transport nccl or cuda_p2p) each
// on the GPU of its manifest place.
Status RunRanks(const Flags& flags, const RunSetup& setup, const proto::DataParallelManifest& dp) {
  const int n = dp.nranks();
  std::vector<Place> places(n, setup.place);
  std::string where = setup.place.ToString();
  LOOM_ASSIGN_OR_RETURN(const collective::TransportInfo* transport,
                        collective::FindTransport(ManifestTransport(dp)));
  if (transport->device == collective::DeviceKind::kCuda) {
    if (dp.places_size() != n)
      return InvalidArgument(setup.dir, ": the manifest lists ", dp.places_size(), " places for ",
                             n, " ranks");
    where.clear();
    for (int r = 0; r < n; ++r) {
      LOOM_ASSIGN_OR_RETURN(places[r], ParsePlace(dp.places(r)));
      where += (r ? "," : "") + places[r].ToString();
    }
  }
  std::vector<runtime::RankProgram> ranks;
  for (int r = 0; r < n; ++r) {
    LOOM_ASSIGN_OR_RETURN(runtime::RankProgram p, LoadRank(setup.dir, r, places[r]));
    ranks.push_back(std::move(p));
  }
  LOOM_ASSIGN_OR_RETURN(auto runner, runtime::Runner::Create(std::move(ranks), 0, n));
  runtime::TrainOptions train = setup.train;
  LOOM_ASSIGN_OR_RETURN(train.first_step, Initialize(flags, *runner, true));
  std::printf("loom run %s: %lld iterations, global batch %lld of %lld rows, %d ranks (%s, %s)\n",
              setup.dir.c_str(), static_cast<long long>(setup.train.iters),
              static_cast<long long>(setup.train.batch), static_cast<long long>(setup.rows), n,
              dp.mode().c_str(), where.c_str());
  return runtime::Train(*runner, setup.feeds, train);
}

// A DIR transpiled for transport mpi, in this process (one of the mpirun ranks): this process is
// MPI rank R and runs DIR/rank<R> on its share of each global minibatch (every rank reads the
// same feeds); rank 0 prints. Errors found after MPI is up end the whole job (MPI_Abort), so no
// peer waits for a rank that is gone.
Status RunMpiRank(const Flags& flags, const RunSetup& setup,
                  const proto::DataParallelManifest& dp) {
#if LOOM_MPI_ENABLED
  const int n = dp.nranks();
  if (!collective::LaunchedByMpirun())
    return FailedPrecondition(setup.dir,
                              " was transpiled for transport mpi: start one process "
                              "per rank, e.g. mpirun -np ",
                              n, " loom run ", setup.dir);
  LOOM_RETURN_IF_ERROR(collective::MpiInit(nullptr, nullptr));
  const int rank = collective::MpiWorldRank();
  auto run = [&]() -> Status {
    if (collective::MpiWorldSize() != n)
      return FailedPrecondition(setup.dir, " was transpiled for ", n, " ranks, the MPI world has ",
                                collective::MpiWorldSize(), " processes");
    std::vector<runtime::RankProgram> ranks;
    LOOM_ASSIGN_OR_RETURN(runtime::RankProgram p, LoadRank(setup.dir, rank, setup.place));
    ranks.push_back(std::move(p));
    LOOM_ASSIGN_OR_RETURN(auto runner, runtime::Runner::Create(std::move(ranks), rank, n));
    runtime::TrainOptions train = setup.train;
    LOOM_ASSIGN_OR_RETURN(train.first_step, Initialize(flags, *runner, true));
    if (rank == 0)
      std::printf(
          "loom run %s: %lld iterations, global batch %lld of %lld rows, %d ranks "
          "(%s, mpi, %d thread(s) per rank)\n",
          setup.dir.c_str(), static_cast<long long>(setup.train.iters),
          static_cast<long long>(setup.train.batch), static_cast<long long>(setup.rows), n,
          dp.mode().c_str(), runner->threads_per_rank());
    return runtime::Train(*runner, setup.feeds, train);
  };
  Status st = run();
  if (!st.ok()) {
    std::fprintf(stderr, "loom run: error: rank %d: %s\n", rank, st.message().c_str());
    std::fflush(stderr);
    collective::MpiAbort(kExitError);
    return st;
  }
  return collective::MpiFinalize();
#else
  return Unimplemented(setup.dir,
                       " was transpiled for transport mpi, but Loom was built "
                       "without MPI (install Open MPI, see scripts/install-deps.sh, and rebuild)");
#endif
}

// The role this process plays in a parameter-server job, from the launcher's environment.
struct PsRole {
  bool server = false;
  int index = 0;
};

// `index` (JobEnv's: -1 when unset) as an index of `count`.
StatusOr<int> JobIndex(const char* name, int index, int count) {
  if (index < 0) return InvalidArgument(name, " is not set (`loom launch` sets it)");
  if (index >= count) return InvalidArgument(name, "='", index, "' is not in 0..", count - 1);
  return index;
}

StatusOr<PsRole> PsRoleFromEnv(const proto::DistributeManifest& m) {
  LOOM_ASSIGN_OR_RETURN(JobEnv job, ReadJobEnv());
  PsRole r;
  if (job.role == JobRole::kTrainer) {
    LOOM_ASSIGN_OR_RETURN(r.index, JobIndex("PADDLE_TRAINER_ID", job.trainer_id, m.trainers()));
    return r;
  }
  if (job.role != JobRole::kServer)
    return FailedPrecondition(
        "a parameter-server bundle runs as one role of the job: set "
        "PADDLE_TRAINING_ROLE to PSERVER or TRAINER (`loom launch` does)");
  r.server = true;
  if (job.server_id >= 0) {
    LOOM_ASSIGN_OR_RETURN(r.index, JobIndex("PADDLE_PSERVER_ID", job.server_id, m.pservers_size()));
    return r;
  }
  const std::string& current = job.current_endpoint;
  LOOM_ASSIGN_OR_RETURN(auto eps,
                        rpc::ResolveEndpoints({m.pservers().begin(), m.pservers().end()}));
  for (size_t i = 0; i < eps.size(); ++i)
    if (eps[i] == current) {
      r.index = static_cast<int>(i);
      return r;
    }
  return FailedPrecondition("PADDLE_CURRENT_ENDPOINT '", current,
                            "' is none of the job's servers; set PADDLE_PSERVER_ID");
}

// The shard of each distributed lookup table a server saved beside its parameters
// (FROM/<table>.sptb), put where listen_and_serv takes it when it starts (as Python's
// io.load_persistables does). A table the checkpoint lacks starts empty.
Status LoadTableShards(const ProgramDesc& main, Scope* scope, const std::string& from) {
  const BlockDesc& b = *main.GlobalBlock();
  for (int i = 0; i < b.OpSize(); ++i) {
    OpDesc op = b.Op(i);
    if (op.Type() != "listen_and_serv") continue;
    for (const auto& table : op.Attr<std::vector<std::string>>("sparse_tables", {})) {
      const std::string path = JoinPath(from, table + ".sptb");
      if (!FileExists(path)) continue;
      LOOM_ASSIGN_OR_RETURN(auto loaded, kvstore::SparseTable::Load(path));
      *scope->Var(kvstore::LoadedTableVar(table))
           ->GetMutable<std::shared_ptr<kvstore::SparseTable>>() = std::move(loaded);
    }
  }
  return Status::OK();
}

// A server: its startup (or --load-params DIR: what it saved to DIR/pserver_<id>), then
// listen_and_serv until every trainer has closed.
Status RunPserver(const Flags& flags, const std::string& dir, int index) {
  const std::string sub = JoinPath(dir, StrCat("pserver", index));
  LOOM_ASSIGN_OR_RETURN(ProgramDesc startup, LoadProgram(JoinPath(sub, "startup.pb")));
  LOOM_ASSIGN_OR_RETURN(ProgramDesc main, LoadProgram(JoinPath(sub, "main.pb")));
  Executor exe(Place::CPU());
  Scope scope;
  LOOM_RETURN_IF_ERROR(exe.Run(startup, &scope).WithContext(sub + "/startup.pb"));
  if (flags.Has("load-params")) {
    std::string from = JoinPath(flags.Get("load-params"), StrCat("pserver_", index));
    LOOM_RETURN_IF_ERROR(LoadParams(main, &scope, from, Place::CPU()));
    LOOM_RETURN_IF_ERROR(LoadTableShards(main, &scope, from));
    std::printf("loom run %s: server %d resumes from %s\n", dir.c_str(), index, from.c_str());
  }
  std::printf("loom run %s: parameter server %d serving\n", dir.c_str(), index);
  std::fflush(stdout);
  return exe.Run(main, &scope).WithContext(sub + "/main.pb");
}

// (trainer id, endpoints, fingerprint) of a trainer program's parameter-server ops.
struct RpcTarget {
  int trainer = 0;
  std::vector<std::string> endpoints;
  std::string fingerprint;
};

RpcTarget RpcTargetOf(const ProgramDesc& main) {
  RpcTarget t;
  const BlockDesc& b = *main.GlobalBlock();
  for (int i = 0; i < b.OpSize(); ++i) {
    OpDesc op = b.Op(i);
    if (op.Type() != "send_barrier") continue;
    t.trainer = op.Attr<int>("trainer_id", 0);
    t.endpoints = op.Attr<std::vector<std::string>>("endpoints", {});
    t.fingerprint = op.Attr<std::string>("fingerprint", "");
  }
  return t;
}

// A trainer: its share of every global minibatch (BatchShares over the trainers, so the
// trainers together train on what one process would), then exe.close()'s COMPLETE. With
// --save-params, trainer 0 also makes every server save its blocks (DIR/pserver_<id>).
Status RunPsTrainer(const Flags& flags, const std::string& dir, int index, int trainers) {
  const std::string sub = JoinPath(dir, StrCat("trainer", index));
  const std::string main_path = JoinPath(sub, "main.pb");
  LOOM_ASSIGN_OR_RETURN(ProgramDesc main, LoadProgram(main_path));
  RunSetup setup;
  LOOM_RETURN_IF_ERROR(LoadSetup(flags, dir, main, main_path, &setup));
  RpcTarget target = RpcTargetOf(main);
  runtime::RankProgram rank{ProgramDesc(), std::move(main), setup.place, nullptr};
  LOOM_ASSIGN_OR_RETURN(rank.startup, LoadProgram(JoinPath(sub, "startup.pb")));
  std::vector<runtime::RankProgram> ranks;
  ranks.push_back(std::move(rank));
  LOOM_ASSIGN_OR_RETURN(auto runner, runtime::Runner::Create(std::move(ranks), index, trainers));
  runner->set_peers_unreachable();
  LOOM_RETURN_IF_ERROR(runner->Startup().WithContext(sub + "/startup.pb"));
  std::printf("loom run %s: trainer %d of %d, %lld iterations, global batch %lld of %lld rows\n",
              dir.c_str(), index, trainers, static_cast<long long>(setup.train.iters),
              static_cast<long long>(setup.train.batch), static_cast<long long>(setup.rows));
  runtime::TrainOptions train = setup.train;
  if (train.checkpoint_every > 0 || Resume(flags))
    return Unimplemented(dir,
                         ": --checkpoint-every and --resume are for data-parallel and "
                         "single-place bundles; a parameter-server job checkpoints with "
                         "--save-params / --load-params");
  const std::string save = train.save_params;
  train.save_params.clear();
  const auto start = std::chrono::steady_clock::now();
  LOOM_RETURN_IF_ERROR(runtime::Train(*runner, setup.feeds, train));
  if (index != 0) {  // trainer 0 prints the progress; the others end with one line each
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string last;
    if (!train.fetches.empty() && train.iters > 0) {
      LOOM_ASSIGN_OR_RETURN(double value, runner->GlobalFirstValue());
      last = StrCat("; ", train.fetches[0], " ", value, " at the last step (its own rows)");
    }
    std::printf("trainer %d done: %lld iterations in %.3f s%s\n", index,
                static_cast<long long>(train.iters), secs, last.c_str());
    std::fflush(stdout);
  }
  if (!save.empty() && index == 0) {
    LOOM_RETURN_IF_ERROR(runner->SaveParams(save).status());
    LOOM_RETURN_IF_ERROR(
        rpc::CheckpointServers(target.trainer, target.endpoints, target.fingerprint, save));
    std::printf("saved parameters and every server's blocks to %s\n", save.c_str());
  }
  return rpc::CloseTrainer(target.trainer, target.endpoints);
}

Status RunPserverJob(const Flags& flags, const std::string& dir, const std::string& path) {
  proto::DistributeManifest m;
  LOOM_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  LOOM_RETURN_IF_ERROR(ParseTextProto(text, path, "a parameter-server manifest", &m));
  if (m.trainers() < 1 || m.pservers_size() < 1)
    return InvalidArgument(path, ": ", m.trainers(), " trainers and ", m.pservers_size(),
                           " servers (each must be >= 1)");
  LOOM_ASSIGN_OR_RETURN(PsRole role, PsRoleFromEnv(m));
  if (role.server) return RunPserver(flags, dir, role.index);
  return RunPsTrainer(flags, dir, role.index, m.trainers());
}

Status Run(const Flags& flags) {
  const std::string dir = flags.positional()[0];
  if (!IsDirectory(dir)) return NotFound("bundle directory '", dir, "' does not exist");
  const std::string dp_path = JoinPath(dir, "manifest.pbtxt");
  if (FileExists(dp_path) && IsDirectory(JoinPath(dir, "pserver0")))
    return RunPserverJob(flags, dir, dp_path);
  if (FileExists(dp_path)) {
    proto::DataParallelManifest dp;
    LOOM_ASSIGN_OR_RETURN(std::string text, ReadFile(dp_path));
    LOOM_RETURN_IF_ERROR(ParseTextProto(text, dp_path, "a data-parallel manifest", &dp));
    if (dp.nranks() < 1 || dp.nranks() > collective::kMaxWorldSize)
      return InvalidArgument(dp_path, ": nranks ", dp.nranks(), " is outside 1..",
                             collective::kMaxWorldSize);
    const std::string main0_path = JoinPath(JoinPath(dir, "rank0"), "main.pb");
    LOOM_ASSIGN_OR_RETURN(ProgramDesc main0, LoadProgram(main0_path));
    RunSetup setup;
    LOOM_RETURN_IF_ERROR(LoadSetup(flags, dir, main0, main0_path, &setup));
    auto transport = collective::FindTransport(ManifestTransport(dp));
    if (!transport.ok()) return transport.status().WithContext(dp_path);
    if (transport.value()->processes) return RunMpiRank(flags, setup, dp);
    return RunRanks(flags, setup, dp);
  }
  LOOM_ASSIGN_OR_RETURN(ModelDir model, ResolveModelDir(dir));
  LOOM_ASSIGN_OR_RETURN(ProgramDesc main, LoadProgram(model.program));
  RunSetup setup;
  LOOM_RETURN_IF_ERROR(LoadSetup(flags, dir, main, model.program, &setup));
  return RunOnePlace(flags, setup, std::move(main), model);
}

}  // namespace

int RunCommand(int argc, char** argv) {
  Flags flags = RunFlags();
  return RunSubcommand(flags, argc, argv, Run);
}

}  // namespace loom::cli
