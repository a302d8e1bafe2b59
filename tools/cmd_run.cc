// loom run DIR: trains a saved program bundle.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>

#include "collective/transport/mpi.h"
#include "collective/transport_registry.h"
#include "executor/executor.h"
#include "framework/cpu_threads.h"
#include "framework/file_util.h"
#include "framework/serialization.h"
#include "loom/config.h"
#include "operators/collective/comm.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/proto_text.h"
#include "transpiler/data_parallel.h"

namespace loom::cli {

namespace {

Flags RunFlags() {
  return Flags(
      "run", "loom run DIR [flags]",
      "Runs DIR/startup.pb once (initializing parameters), then DIR/main.pb for --iters steps,\n"
      "feeding minibatches sliced along dim 0 from .npy files (wrapping around), and prints the\n"
      "fetched variables. Defaults for feeds, fetches and batch size come from DIR/bundle.pbtxt.\n"
      "A DIR written by `loom transpile` (DIR/manifest.pbtxt) trains on all its ranks at once:\n"
      "each step's global batch is split across the ranks and the loss is reported over it\n"
      "(ranks transpiled for CUDA places run on their GPUs, --place applies to CPU ranks).\n"
      "A DIR transpiled with --transport mpi runs one rank per process:\n"
      "  mpirun -np N loom run DIR   (rank 0 prints; every rank reads the same feeds)",
      {
          {"iters", "N", "number of training steps", "100"},
          {"batch-size", "B", "rows per minibatch (default: bundle.pbtxt, else all rows)", ""},
          {"feed", "NAME=FILE.npy", "feed variable NAME from a .npy file", "", true},
          {"fetch", "NAME", "variable to fetch and print each step", "", true},
          {"print-every", "K", "print a progress line every K steps", "10"},
          {"place", "PLACE", "where to run: cpu:i or cuda:i", "cpu:0"},
          {"load-params", "DIR", "load parameters from DIR instead of running startup.pb", ""},
          {"save-params", "DIR", "save the persistable variables to DIR at the end", ""},
          {"timeline", "FILE",
           "write a chrome://tracing JSON of the last --timeline-iters steps "
           "(ops per rank on compute and communication threads)",
           ""},
          {"timeline-iters", "K", "steps recorded by --timeline", "5"},
      },
      1, 1);
}

struct Feed {
  std::string name;
  std::string path;
  Tensor data;
};

Status LoadManifest(const std::string& dir, proto::BundleManifest* manifest) {
  std::string path = JoinPath(dir, "bundle.pbtxt");
  if (!FileExists(path)) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseTextProto(text, path, "a bundle manifest", manifest);
}

// Vars main reads before any op writes them, that are neither persistable nor fed.
Status CheckAllInputsProvided(const ProgramDesc& main, const std::vector<Feed>& feeds) {
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

Status PrepareFeeds(const std::string& dir, const Flags& flags,
                    const proto::BundleManifest& manifest, const ProgramDesc& main,
                    std::vector<Feed>* feeds) {
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
    if (!v) return NotFound("feed '", name, "' is not a variable of main.pb");
    auto t = LoadNpy(path);
    if (!t.ok()) return t.status().WithContext(StrCat("feed '", name, "'"));
    Tensor data = std::move(t).value();
    if (data.dtype() != v.Dtype())
      return InvalidArgument("feed '", name, "' from ", path, " has dtype ",
                             DataTypeName(data.dtype()), ", main.pb declares ",
                             DataTypeName(v.Dtype()));
    DDim want = v.Dims();
    bool shape_ok = data.dims().size() == want.size() && data.dims().size() > 0;
    for (int i = 1; shape_ok && i < want.size(); ++i)
      shape_ok = want[i] < 0 || want[i] == data.dims()[i];
    if (!shape_ok)
      return InvalidArgument("feed '", name, "' from ", path, " has dims ", data.dims().ToString(),
                             ", main.pb declares ", want.ToString(), " (dim 0 is the batch)");
    feeds->push_back(Feed{name, path, std::move(data)});
  }
  for (size_t i = 1; i < feeds->size(); ++i)
    if ((*feeds)[i].data.dims()[0] != (*feeds)[0].data.dims()[0])
      return InvalidArgument("feeds have different numbers of rows: '", (*feeds)[0].name, "' has ",
                             (*feeds)[0].data.dims()[0], ", '", (*feeds)[i].name, "' has ",
                             (*feeds)[i].data.dims()[0]);
  return CheckAllInputsProvided(main, *feeds);
}

std::string Summarize(const Tensor& t) {
  if (t.numel() == 1) {
    double v = t.dtype() == proto::FP64    ? t.data<double>()[0]
               : t.dtype() == proto::FP32  ? t.data<float>()[0]
               : t.dtype() == proto::INT64 ? static_cast<double>(t.data<int64_t>()[0])
               : t.dtype() == proto::INT32 ? static_cast<double>(t.data<int32_t>()[0])
                                           : NAN;
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.6g", v);
    return buf;
  }
  return TensorSummary(t, 4);
}

// Rows [offset, offset + batch) of data, wrapping around to row 0 past the end (a copy then;
// a view otherwise). Requires 0 <= offset < rows and 1 <= batch <= rows.
Tensor Minibatch(const Tensor& data, int64_t offset, int64_t batch) {
  const int64_t rows = data.dims()[0];
  if (offset + batch <= rows) return data.Slice(offset, offset + batch);
  DDim dims = data.dims();
  dims[0] = batch;
  Tensor out(data.dtype(), dims);
  char* dst = static_cast<char*>(out.mutable_data(Place::CPU(), data.dtype()));
  const char* src = static_cast<const char*>(data.raw_data());
  const size_t row_bytes = data.nbytes() / static_cast<size_t>(rows);
  const size_t tail = static_cast<size_t>(rows - offset) * row_bytes;
  std::memcpy(dst, src + static_cast<size_t>(offset) * row_bytes, tail);
  std::memcpy(dst + tail, src, static_cast<size_t>(batch) * row_bytes - tail);
  return out;
}

double FirstValue(const Tensor& t) {
  if (t.numel() < 1) return NAN;
  if (t.dtype() == proto::FP32) return t.data<float>()[0];
  if (t.dtype() == proto::FP64) return t.data<double>()[0];
  return NAN;
}

// The feeds, fetches and batch size of a run, shared by the one-place and multi-place paths.
struct RunSetup {
  std::string dir;
  int64_t iters = 0;
  int64_t every = 1;
  Place place = Place::CPU();
  std::vector<Feed> feeds;
  std::vector<std::string> fetches;
  int64_t rows = 0;
  int64_t batch = 0;
  bool timeline = false;
  int64_t timeline_iters = 5;
};

Status WriteTimeline(const Flags& flags, const Timeline& timeline) {
  if (!flags.Has("timeline")) return Status::OK();
  LOOM_RETURN_IF_ERROR(timeline.Write(flags.Get("timeline")));
  std::printf("wrote timeline (%zu events) to %s\n", timeline.size(),
              flags.Get("timeline").c_str());
  return Status::OK();
}

// Prints the progress line of iteration it (of setup.iters) and updates first/last.
class Progress {
 public:
  explicit Progress(const RunSetup& setup) : setup_(setup) {}
  void Step(int64_t it, const std::vector<Tensor>& out, double scalar0) {
    if (!out.empty()) {
      last = scalar0;
      if (it == 1) first = last;
    }
    const int64_t every = setup_.every;
    if (it % every == 0 || it == setup_.iters || it == 1) {
      auto now = std::chrono::steady_clock::now();
      double secs = std::chrono::duration<double>(now - window_).count();
      int64_t span = it == 1 ? 1 : (it % every == 0 ? every : it % every);
      std::string line = StrCat("iter ", it, "/", setup_.iters);
      for (size_t k = 0; k < out.size(); ++k) {
        line += StrCat("  ", setup_.fetches[k], " ",
                       k == 0 && out[0].numel() == 1 ? StrCat(scalar0) : Summarize(out[k]));
      }
      char rate[32];
      std::snprintf(rate, sizeof(rate), "  %.1f it/s", secs > 0 ? span / secs : 0.0);
      std::printf("%s%s\n", line.c_str(), rate);
      std::fflush(stdout);
      window_ = now;
    }
  }
  void Done() {
    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    std::printf("done: %lld iterations in %.3f s", static_cast<long long>(setup_.iters), total);
    if (!setup_.fetches.empty() && std::isfinite(first) && std::isfinite(last)) {
      std::printf("; %s %.6g -> %.6g", setup_.fetches[0].c_str(), first, last);
      if (last > 0) std::printf(" (%.1fx lower)", first / last);
    }
    std::printf("\n");
  }
  double first = NAN, last = NAN;

 private:
  const RunSetup& setup_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point window_ = t0_;
};

Status LoadSetup(const Flags& flags, const std::string& dir, const ProgramDesc& main,
                 RunSetup* setup) {
  setup->dir = dir;
  LOOM_ASSIGN_OR_RETURN(setup->iters, flags.GetInt("iters"));
  LOOM_ASSIGN_OR_RETURN(setup->every, flags.GetInt("print-every"));
  if (setup->iters < 0) return InvalidArgument("--iters must be >= 0, got ", setup->iters);
  if (setup->every <= 0) return InvalidArgument("--print-every must be > 0, got ", setup->every);
  LOOM_ASSIGN_OR_RETURN(setup->place, ParsePlace(flags.Get("place")));
  setup->timeline = flags.Has("timeline");
  LOOM_ASSIGN_OR_RETURN(setup->timeline_iters, flags.GetInt("timeline-iters"));
  if (setup->timeline_iters < 1)
    return InvalidArgument("--timeline-iters must be >= 1, got ", setup->timeline_iters);
  proto::BundleManifest manifest;
  LOOM_RETURN_IF_ERROR(LoadManifest(dir, &manifest));
  LOOM_RETURN_IF_ERROR(PrepareFeeds(dir, flags, manifest, main, &setup->feeds));
  setup->fetches = flags.GetAll("fetch");
  if (setup->fetches.empty())
    setup->fetches.assign(manifest.fetches().begin(), manifest.fetches().end());
  for (const auto& f : setup->fetches)
    if (!main.GlobalBlock()->FindVar(f))
      return NotFound("fetch '", f, "' is not a variable of main.pb");
  setup->rows = setup->feeds.empty() ? 0 : setup->feeds[0].data.dims()[0];
  setup->batch = setup->rows;
  if (flags.Has("batch-size")) {
    LOOM_ASSIGN_OR_RETURN(setup->batch, flags.GetInt("batch-size"));
  } else if (manifest.has_batch_size()) {
    setup->batch = manifest.batch_size();
  }
  if (!setup->feeds.empty() && (setup->batch <= 0 || setup->batch > setup->rows))
    return InvalidArgument("batch size ", setup->batch, " must be between 1 and the ", setup->rows,
                           " rows of the feeds");
  return Status::OK();
}

Status RunOnePlace(const Flags& flags, const RunSetup& setup, const ProgramDesc& main) {
  const std::string& dir = setup.dir;
  const int64_t batch = setup.batch;
  for (const auto& f : setup.feeds) {
    DDim want = main.GlobalBlock()->FindVar(f.name).Dims();
    if (want[0] >= 0 && want[0] != batch)
      return InvalidArgument("batch size ", batch, " does not fit feed '", f.name,
                             "': main.pb declares dims ", want.ToString(), " (pass --batch-size ",
                             want[0], ")");
  }
  Executor exe(setup.place);
  Scope scope;
  if (flags.Has("load-params")) {
    LOOM_RETURN_IF_ERROR(LoadParams(main, &scope, flags.Get("load-params"), setup.place));
  } else {
    LOOM_ASSIGN_OR_RETURN(ProgramDesc startup, LoadProgram(JoinPath(dir, "startup.pb")));
    LOOM_RETURN_IF_ERROR(exe.Run(startup, &scope).WithContext("startup.pb"));
  }
  LOOM_ASSIGN_OR_RETURN(auto prepared, exe.Prepare(main));

  std::printf("loom run %s: %lld iterations, batch %lld of %lld rows, %s\n", dir.c_str(),
              static_cast<long long>(setup.iters), static_cast<long long>(batch),
              static_cast<long long>(setup.rows), setup.place.ToString().c_str());
  std::vector<Tensor> out;
  Timeline timeline;
  if (setup.timeline) exe.set_timeline(&timeline, 0);
  Progress progress(setup);
  int64_t offset = 0;
  for (int64_t it = 1; it <= setup.iters; ++it) {
    timeline.set_enabled(it > setup.iters - setup.timeline_iters);
    FeedMap feed;
    for (const auto& f : setup.feeds) feed[f.name] = Minibatch(f.data, offset, batch);
    if (setup.rows > 0) offset = (offset + batch) % setup.rows;
    Status st = exe.Run(prepared.get(), &scope, feed, setup.fetches, &out);
    if (!st.ok()) return st.WithContext(StrCat("iteration ", it));
    progress.Step(it, out, out.empty() ? NAN : FirstValue(out[0]));
  }
  progress.Done();
  LOOM_RETURN_IF_ERROR(WriteTimeline(flags, timeline));
  if (flags.Has("save-params")) {
    LOOM_RETURN_IF_ERROR(SaveParams(main, scope, flags.Get("save-params")));
    std::printf("saved parameters to %s\n", flags.Get("save-params").c_str());
  }
  return Status::OK();
}

// The global minibatch's rows per rank: the first rows % n ranks get one row more.
std::vector<int64_t> Shares(int64_t batch, int n) {
  std::vector<int64_t> share(n);
  for (int r = 0; r < n; ++r) share[r] = batch / n + (r < batch % n ? 1 : 0);
  return share;
}

// A transpiled bundle: DIR/manifest.pbtxt and DIR/rank<R>/{startup,main}.pb. Every rank runs on
// its own thread with its own scope; each step's global minibatch is split along dim 0 (the
// first rows % N ranks get one row more; a rank may get none).
// The manifest's transport; manifests written before the field existed are in-process.
std::string ManifestTransport(const proto::DataParallelManifest& dp) {
  return dp.transport().empty() ? collective::GetTransport(collective::TransportId::kInProcess).name
                                : dp.transport();
}

Status RunRanks(const Flags& flags, const RunSetup& setup, const proto::DataParallelManifest& dp) {
  const int n = dp.nranks();
  std::vector<ProgramDesc> startups(n), mains(n);
  for (int r = 0; r < n; ++r) {
    std::string rd = JoinPath(setup.dir, StrCat("rank", r));
    LOOM_ASSIGN_OR_RETURN(startups[r], LoadProgram(JoinPath(rd, "startup.pb")));
    LOOM_ASSIGN_OR_RETURN(mains[r], LoadProgram(JoinPath(rd, "main.pb")));
  }
  // CPU ranks run on --place; CUDA ranks (transport nccl or cuda_p2p) each on the GPU of its
  // manifest place.
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
  std::vector<std::unique_ptr<Scope>> scopes;
  std::vector<std::unique_ptr<PreparedBlock>> startup_prepared, main_prepared;
  std::vector<RankRun> ranks(n);
  for (int r = 0; r < n; ++r) {
    scopes.push_back(std::make_unique<Scope>());
    Executor exe(places[r]);
    LOOM_ASSIGN_OR_RETURN(auto sp, exe.Prepare(startups[r]));
    LOOM_ASSIGN_OR_RETURN(auto mp, exe.Prepare(mains[r]));
    startup_prepared.push_back(std::move(sp));
    main_prepared.push_back(std::move(mp));
    ranks[r].place = places[r];
    ranks[r].scope = scopes[r].get();
    ranks[r].prepared = startup_prepared[r].get();
  }
  // Startup: comm_init, parameter initialization, broadcast from rank 0.
  LOOM_RETURN_IF_ERROR(Executor::RunRanks(&ranks, {}).WithContext("startup.pb"));
  if (flags.Has("load-params")) {
    for (int r = 0; r < n; ++r)
      LOOM_RETURN_IF_ERROR(
          LoadParams(mains[r], scopes[r].get(), flags.Get("load-params"), places[r]));
  }
  for (int r = 0; r < n; ++r) ranks[r].prepared = main_prepared[r].get();

  const int64_t batch = setup.batch;
  std::printf("loom run %s: %lld iterations, global batch %lld of %lld rows, %d ranks (%s, %s)\n",
              setup.dir.c_str(), static_cast<long long>(setup.iters), static_cast<long long>(batch),
              static_cast<long long>(setup.rows), n, dp.mode().c_str(), where.c_str());
  Timeline timeline;
  if (setup.timeline)
    for (auto& r : ranks) r.timeline = &timeline;
  Progress progress(setup);
  int64_t offset = 0;
  for (int64_t it = 1; it <= setup.iters; ++it) {
    timeline.set_enabled(it > setup.iters - setup.timeline_iters);
    const std::vector<int64_t> share = Shares(batch, n);
    for (const auto& f : setup.feeds) {
      Tensor global = Minibatch(f.data, offset, batch);
      int64_t begin = 0;
      for (int r = 0; r < n; ++r) {
        ranks[r].feeds[f.name] = global.Slice(begin, begin + share[r]);
        begin += share[r];
      }
    }
    if (setup.rows > 0) offset = (offset + batch) % setup.rows;
    Status st = Executor::RunRanks(&ranks, setup.fetches);
    if (!st.ok()) return st.WithContext(StrCat("iteration ", it));
    // A scalar first fetch (the loss) is reported over the global batch: the ranks' values
    // weighted by their rows.
    double scalar = NAN;
    const auto& out0 = ranks[0].fetched;
    if (!out0.empty() && out0[0].numel() == 1 && batch > 0) {
      scalar = 0;
      for (int r = 0; r < n; ++r)
        if (share[r] > 0) scalar += FirstValue(ranks[r].fetched[0]) * share[r] / batch;
    } else if (!out0.empty()) {
      scalar = FirstValue(out0[0]);
    }
    progress.Step(it, out0, scalar);
  }
  progress.Done();
  LOOM_RETURN_IF_ERROR(WriteTimeline(flags, timeline));
  if (flags.Has("save-params")) {
    LOOM_RETURN_IF_ERROR(SaveParams(mains[0], *scopes[0], flags.Get("save-params")));
    std::printf("saved parameters (rank 0) to %s\n", flags.Get("save-params").c_str());
  }
  return Status::OK();
}

#if LOOM_MPI_ENABLED
// One rank of a DIR transpiled for transport mpi: this process is MPI rank R and runs
// DIR/rank<R> on its share of each global minibatch; a scalar first fetch is summed over the
// ranks (weighted by rows) through the program's own communicator, and rank 0 prints.
Status RunThisMpiRank(const Flags& flags, const RunSetup& setup,
                      const proto::DataParallelManifest& dp, int rank) {
  const int n = dp.nranks();
  std::string rd = JoinPath(setup.dir, StrCat("rank", rank));
  LOOM_ASSIGN_OR_RETURN(ProgramDesc startup, LoadProgram(JoinPath(rd, "startup.pb")));
  LOOM_ASSIGN_OR_RETURN(ProgramDesc main, LoadProgram(JoinPath(rd, "main.pb")));
  // The processes of one machine share its cores.
  int local = 1;
  if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) local = std::max(1, std::atoi(v));
  const int threads = std::max(1, CpuCores() / local);
  ScopedBlasThreads blas(threads);
  ScopedThreadBudget budget(local > 1 ? threads : 0);
  const bool print = rank == 0;

  Scope scope;
  Executor exe(setup.place);
  LOOM_RETURN_IF_ERROR(exe.Run(startup, &scope).WithContext("startup.pb"));
  if (flags.Has("load-params"))
    LOOM_RETURN_IF_ERROR(LoadParams(main, &scope, flags.Get("load-params"), setup.place));
  const Variable* cv = scope.FindVar(transpiler::kCommVar);
  if (!cv || !cv->IsType<ops::CommHandle>() || !cv->Get<ops::CommHandle>().comm)
    return FailedPrecondition("rank", rank, "/startup.pb made no communicator ('",
                              transpiler::kCommVar, "')");
  collective::Communicator* comm = cv->Get<ops::CommHandle>().comm;
  LOOM_ASSIGN_OR_RETURN(auto prepared, exe.Prepare(main));

  const int64_t batch = setup.batch;
  const std::vector<int64_t> share = Shares(batch, n);
  int64_t begin = 0;
  for (int r = 0; r < rank; ++r) begin += share[r];
  if (print)
    std::printf(
        "loom run %s: %lld iterations, global batch %lld of %lld rows, %d ranks "
        "(%s, mpi, %d thread(s) per rank)\n",
        setup.dir.c_str(), static_cast<long long>(setup.iters), static_cast<long long>(batch),
        static_cast<long long>(setup.rows), n, dp.mode().c_str(), threads);
  Timeline timeline;
  if (setup.timeline && print) exe.set_timeline(&timeline, 0);
  Progress progress(setup);
  std::vector<Tensor> out;
  int64_t offset = 0;
  for (int64_t it = 1; it <= setup.iters; ++it) {
    timeline.set_enabled(it > setup.iters - setup.timeline_iters);
    FeedMap feed;
    for (const auto& f : setup.feeds)
      feed[f.name] = Minibatch(f.data, offset, batch).Slice(begin, begin + share[rank]);
    if (setup.rows > 0) offset = (offset + batch) % setup.rows;
    Status st = exe.Run(prepared.get(), &scope, feed, setup.fetches, &out);
    if (!st.ok()) return st.WithContext(StrCat("iteration ", it));
    double scalar = out.empty() ? NAN : FirstValue(out[0]);
    if (!out.empty() && out[0].numel() == 1 && batch > 0) {
      double part = share[rank] > 0 ? scalar * share[rank] / batch : 0.0;
      LOOM_RETURN_IF_ERROR(comm->AllReduce(&part, &scalar, 1, collective::DataType::kFloat64,
                                           collective::ReduceOp::kSum)
                               .Wait()
                               .WithContext("summing the loss over the ranks"));
    }
    if (print) progress.Step(it, out, scalar);
  }
  if (print) {
    progress.Done();
    LOOM_RETURN_IF_ERROR(WriteTimeline(flags, timeline));
    if (flags.Has("save-params")) {
      LOOM_RETURN_IF_ERROR(SaveParams(main, scope, flags.Get("save-params")));
      std::printf("saved parameters (rank 0) to %s\n", flags.Get("save-params").c_str());
    }
  }
  // Every rank leaves together: rank 0 may still be saving.
  return comm->Barrier().Wait();
}
#endif

// A DIR transpiled for transport mpi, in this process (one of the mpirun ranks). Errors found
// after MPI is up end the whole job (MPI_Abort), so no peer waits for a rank that is gone.
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
  Status st =
      collective::MpiWorldSize() == n
          ? RunThisMpiRank(flags, setup, dp, rank)
          : FailedPrecondition(setup.dir, " was transpiled for ", n, " ranks, the MPI world has ",
                               collective::MpiWorldSize(), " processes");
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

Status Run(const Flags& flags) {
  const std::string dir = flags.positional()[0];
  if (!IsDirectory(dir)) return NotFound("bundle directory '", dir, "' does not exist");
  const std::string dp_path = JoinPath(dir, "manifest.pbtxt");
  if (FileExists(dp_path)) {
    proto::DataParallelManifest dp;
    LOOM_ASSIGN_OR_RETURN(std::string text, ReadFile(dp_path));
    LOOM_RETURN_IF_ERROR(ParseTextProto(text, dp_path, "a data-parallel manifest", &dp));
    if (dp.nranks() < 1) return InvalidArgument(dp_path, ": nranks must be >= 1");
    LOOM_ASSIGN_OR_RETURN(ProgramDesc main0,
                          LoadProgram(JoinPath(JoinPath(dir, "rank0"), "main.pb")));
    RunSetup setup;
    LOOM_RETURN_IF_ERROR(LoadSetup(flags, dir, main0, &setup));
    auto transport = collective::FindTransport(ManifestTransport(dp));
    if (!transport.ok()) return transport.status().WithContext(dp_path);
    if (transport.value()->processes) return RunMpiRank(flags, setup, dp);
    return RunRanks(flags, setup, dp);
  }
  LOOM_ASSIGN_OR_RETURN(ProgramDesc main, LoadProgram(JoinPath(dir, "main.pb")));
  RunSetup setup;
  LOOM_RETURN_IF_ERROR(LoadSetup(flags, dir, main, &setup));
  return RunOnePlace(flags, setup, main);
}

}  // namespace

int RunCommand(int argc, char** argv) {
  Flags flags = RunFlags();
  return RunSubcommand(flags, argc, argv, Run);
}

}  // namespace loom::cli
