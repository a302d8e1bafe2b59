// Bindings for data-parallel training: the transpiler, multi-rank runs and the collective ops'
// counters. The Python side (loom.compiler.CompiledProgram) drives them.
#include <google/protobuf/text_format.h>
#include <pybind11/stl.h>

#include "collective/transport_registry.h"
#include "framework/device_context.h"
#include "loom/config.h"
#include "operators/collective/stats.h"
#include "python/core/common.h"
#include "runtime/runner.h"
#include "transpiler/data_parallel.h"
#if LOOM_MPI_ENABLED
#include "collective/transport/mpi.h"
#endif

namespace loom::python {

namespace {

// The data-parallel transpiler and the registered transports.
void RegisterTranspile(py::module_& m) {
  m.def(
      "transpile_data_parallel",
      [](const ProgramDesc& startup, const ProgramDesc& main, int nranks, const std::string& mode,
         const std::string& algorithm, double fuse_mb, const std::string& grad_scale,
         const std::string& owner_policy, const std::string& group, bool keep_startup_init,
         int timeout_ms, const std::vector<std::string>& disabled_passes,
         const std::string& transport, const std::vector<std::string>& places,
         const std::string& grad_compression) {
        transpiler::DataParallelConfig c;
        c.nranks = nranks;
        c.mode = ValueOrThrow(transpiler::ParseSyncMode(mode));
        c.algorithm = ValueOrThrow(collective::ParseAlgorithm(algorithm));
        c.fuse_grad_size_mb = fuse_mb;
        c.grad_scale = ValueOrThrow(transpiler::ParseGradScale(grad_scale));
        c.grad_compression = grad_compression;
        c.owner_policy = ValueOrThrow(transpiler::ParsePlacementPolicy(owner_policy));
        c.group = group;
        c.keep_startup_init = keep_startup_init;
        c.timeout_ms = timeout_ms;
        c.pass_options.disabled = disabled_passes;
        c.transport = ValueOrThrow(collective::FindTransport(transport))->id;
        for (const std::string& p : places) c.places.push_back(ValueOrThrow(ParsePlace(p)));
        if (c.places.empty())
          for (int r = 0; r < nranks; ++r) c.places.push_back(Place::CPU(r));
        auto result = ValueOrThrow(transpiler::TranspileDataParallel(startup, main, c));
        std::vector<std::shared_ptr<ProgramDesc>> starts, mains;
        for (auto& p : result.startup) starts.push_back(std::make_shared<ProgramDesc>(p));
        for (auto& p : result.main) mains.push_back(std::make_shared<ProgramDesc>(p));
        std::string text;
        google::protobuf::TextFormat::PrintToString(result.manifest, &text);
        return py::make_tuple(starts, mains, text);
      },
      py::arg("startup"), py::arg("main"), py::arg("nranks"), py::arg("mode") = "allreduce",
      py::arg("algorithm") = "auto", py::arg("fuse_grad_size_mb") = 32.0,
      py::arg("grad_scale") = "sample", py::arg("owner_policy") = "bytes",
      py::arg("group") = "loom_dp", py::arg("keep_startup_init") = true,
      py::arg("timeout_ms") = 30000, py::arg("disabled_passes") = std::vector<std::string>{},
      py::arg("transport") = collective::GetTransport(collective::TransportId::kInProcess).name,
      py::arg("places") = std::vector<std::string>{}, py::arg("grad_compression") = "",
      "Transpiles a single-device (startup, main) for nranks places (names like 'cpu:0' or "
      "'cuda:1'; default cpu:0..): returns (per-rank startup programs, per-rank main programs, "
      "the manifest as text).");

  m.attr("max_world_size") = collective::kMaxWorldSize;
  m.def(
      "transports",
      [] {
        py::list out;
        for (const auto& t : collective::Transports()) {
          py::dict d;
          d["name"] = t.name;
          d["device"] = t.device == collective::DeviceKind::kCuda ? "cuda" : "cpu";
          d["processes"] = t.processes;
          d["schedules"] = t.schedules;
          d["native"] = t.native;
          d["shared_devices"] = t.shared_devices;
          d["built"] = t.built;
          d["summary"] = t.summary;
          out.append(d);
        }
        return out;
      },
      "The registered transports (collective/transport_registry.h), one dict each: name, device "
      "('cpu' or 'cuda'), processes (one process per rank), schedules (Loom's ring/tree/...), "
      "native (collectives of its own), shared_devices, built, summary.");
}

// The runner of a transpiled job's ranks.
void RegisterRunner(py::module_& m) {
  py::class_<runtime::Runner>(m, "Runner",
                              "The runner of per-rank programs (runtime/runner.h): the ranks "
                              "this process runs of a job, their prepared programs and scopes.")
      .def(py::init([](const std::vector<ProgramDesc>& startups,
                       const std::vector<ProgramDesc>& mains, const std::vector<Place>& places,
                       const std::vector<Scope*>& scopes, int first_rank, int nranks) {
             // nranks < 0: the given ranks are the whole job.
             const size_t n = mains.size();
             if (startups.size() != n || places.size() != n || scopes.size() != n)
               Throw(InvalidArgument("Runner: ", n, " main programs, ", startups.size(),
                                     " startup programs, ", places.size(), " places and ",
                                     scopes.size(), " scopes"));
             if (nranks < 0) nranks = first_rank + static_cast<int>(n);
             std::vector<runtime::RankProgram> ranks(n);
             for (size_t r = 0; r < n; ++r) {
               CheckPlaceAvailable(places[r], "Runner");
               ranks[r] = {startups[r], mains[r], places[r], scopes[r]};
             }
             return ValueOrThrow(runtime::Runner::Create(std::move(ranks), first_rank, nranks));
           }),
           py::arg("startups"), py::arg("mains"), py::arg("places"), py::arg("scopes"),
           py::arg("first_rank") = 0, py::arg("nranks") = -1, py::keep_alive<1, 5>(),
           "Prepares the programs of ranks first_rank.. of a job of nranks ranks (-1: as many "
           "as given), one place and scope each (scopes must outlive the runner).")
      .def(
          "startup",
          [](runtime::Runner& r) {
            Status st;
            {
              py::gil_scoped_release release;
              st = r.Startup();
            }
            ThrowIfError(st);
          },
          "Runs every local rank's startup program (comm_init, broadcasts) concurrently.")
      .def(
          "step",
          [](runtime::Runner& r, const py::dict& feed, const std::vector<std::string>& fetch,
             bool split) {
            // Feeds stay on the CPU (views of the arrays); each rank's executor copies its share
            // to its place.
            FeedMap feeds = FeedsFromPy(feed, Place::CPU());
            Status st;
            {
              py::gil_scoped_release release;
              st = r.Step(feeds, fetch,
                          split ? runtime::FeedSplit::kGlobal : runtime::FeedSplit::kLocal);
            }
            feeds.clear();  // the arrays' references, dropped while holding the GIL
            ThrowIfError(st);
            std::vector<std::vector<Tensor>> out;
            for (int i = 0; i < r.local_ranks(); ++i) out.push_back(r.fetched(i));
            return out;
          },
          py::arg("feed"), py::arg("fetch_list"), py::arg("split") = true,
          "One step of every local rank: with split, feed is the global minibatch, split along "
          "dim 0 across all ranks of the job (the first rows % N ranks get one row more); "
          "without, it is this process's one rank's own. Returns each local rank's fetched "
          "tensors.")
      .def(
          "set_timeline", [](runtime::Runner& r, Timeline* timeline) { r.set_timeline(timeline); },
          py::arg("timeline").none(true), py::keep_alive<1, 2>(),
          "Records every local rank's ops of later steps into timeline (None: stop).")
      .def_property_readonly("nranks", &runtime::Runner::nranks)
      .def_property_readonly("local_ranks", &runtime::Runner::local_ranks);
}

// The batch split rule and copying persistables between ranks' scopes.
void RegisterRankHelpers(py::module_& m) {
  m.def("batch_shares", &runtime::BatchShares, py::arg("batch"), py::arg("nranks"),
        "Rows of a global minibatch per rank: the first batch % nranks ranks get one more.");

  m.def(
      "copy_persistables",
      [](const ProgramDesc& program, const Scope& src, Scope& dst, const Place& place) {
        CheckPlaceAvailable(place, "copy_persistables");
        int copied = 0;
        for (const VarDesc& v : program.GlobalBlock()->AllVars()) {
          if (!v.Persistable() || v.Type() != proto::VarType::DENSE_TENSOR) continue;
          const Variable* from = src.FindVar(v.Name());
          if (!from || !from->IsType<Tensor>() || !from->Get<Tensor>().initialized()) continue;
          // A copy sharing the buffer keeps the data alive when dst is src (moving rank 0's
          // own scope onto its device).
          Tensor data = from->Get<Tensor>();
          Tensor* to = dst.Var(v.Name())->GetMutable<Tensor>();
          if (to == &from->Get<Tensor>() && data.place() == place) continue;
          TensorCopy(data, place, to);
          ++copied;
        }
        return copied;
      },
      py::arg("program"), py::arg("src"), py::arg("dst"), py::arg("place"),
      "Deep-copies the program's initialized persistable tensors from src into dst on place "
      "(src may be dst: moves them to place); returns how many.");
}

// MPI for data parallelism across processes, and the collective ops' counters.
void RegisterMpi(py::module_& m) {
  // MPI for data parallelism across processes (BuildStrategy.transport = "mpi").
  m.def("is_compiled_with_mpi", [] { return static_cast<bool>(LOOM_MPI_ENABLED); });
  m.def(
      "mpi_init",
      []() -> py::tuple {
#if LOOM_MPI_ENABLED
        if (!collective::LaunchedByMpirun())
          Throw(
              FailedPrecondition("transport 'mpi' needs one process per rank started by "
                                 "mpirun (e.g. mpirun -np 4 python3 train.py)"));
        ThrowIfError(collective::MpiInit(nullptr, nullptr));
        return py::make_tuple(collective::MpiWorldRank(), collective::MpiWorldSize());
#else
        Throw(
            Unimplemented("transport 'mpi': Loom was built without MPI (install Open MPI, see "
                          "scripts/install-deps.sh, and rebuild)"));
        return py::tuple();
#endif
      },
      "Initializes MPI (once; MPI_THREAD_MULTIPLE) in a process started by mpirun; returns "
      "(rank, world size).");
  m.def(
      "mpi_finalize",
      [] {
#if LOOM_MPI_ENABLED
        ThrowIfError(collective::MpiFinalize());
#endif
      },
      "MPI_Finalize, if mpi_init initialized MPI; every MPI communicator must be gone.");
  m.def(
      "mpi_abort",
      [](int code) {
#if LOOM_MPI_ENABLED
        collective::MpiAbort(code);
#endif
      },
      py::arg("code"), "Ends every process of the MPI job (MPI_Abort), when MPI is up.");

  m.def("collective_op_stats", [] {
    auto& s = ops::CollectiveOpStats::Get();
    py::dict d;
    d["allreduce_calls"] = s.allreduce_calls.load();
    d["fused_calls"] = s.fused_calls.load();
    d["unfused_buckets"] = s.unfused_buckets.load();
    d["compressed_calls"] = s.compressed_calls.load();
    d["sparse_calls"] = s.sparse_calls.load();
    d["sparse_dense_calls"] = s.sparse_dense_calls.load();
    d["sparse_row_bytes"] = s.sparse_row_bytes.load();
    d["sparse_dense_bytes"] = s.sparse_dense_bytes.load();
    return d;
  });
  m.def("reset_collective_op_stats", [] { ops::CollectiveOpStats::Get().Reset(); });
}

}  // namespace

void RegisterParallel(py::module_& m) {
  RegisterTranspile(m);
  RegisterRunner(m);
  RegisterRankHelpers(m);
  RegisterMpi(m);
}

}  // namespace loom::python
