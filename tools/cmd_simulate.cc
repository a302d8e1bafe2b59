// loom simulate: predicts collectives on a machine or a cluster by replaying Loom's schedules
// over a model of its links (sim/), printed in nccl-tests' table layout.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/byte_size.h"
#include "base/json_text.h"
#include "collective/types.h"
#include "framework/comm_var.h"
#include "framework/file_util.h"
#include "framework/serialization.h"
#include "sim/simulate.h"
#include "sim/training.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "transpiler/gradients.h"

namespace loom::cli {

namespace {

// What to simulate: the machine, the collective and its sizes.
std::vector<FlagSpec> SimulateCallFlags() {
  std::string algos;
  for (const auto& a : sim::SimAlgorithmNames()) algos += (algos.empty() ? "" : ", ") + a;
  return {
      {"topology", "NAME|FILE", "one machine: a preset or a topology file", ""},
      {"cluster", "SPEC", "nodes joined by NICs (see above)", ""},
      {"op", "COLL", "allreduce, reduce, broadcast, allgather, reducescatter", "allreduce"},
      {"algo", "A[,A...]", "algorithms to simulate: " + algos, "auto"},
      {"sizes", "MIN:MAX", "sizes in bytes (K, M, G: binary units), nccl-tests' -b:-e", "8:1G"},
      {"factor", "F", "each size is F times the last (nccl-tests' -f)", "2"},
      {"dtype", "T", "float32, float64, float16, int32, int64 (or fp32, fp64, fp16)", "float32"},
      {"root", "R", "root of reduce and broadcast", "0"},
  };
}

// The cost model's software costs and rates, and NCCL's protocols.
std::vector<FlagSpec> SimulateCostFlags() {
  return {
      {"chunk-bytes", "N", "pipeline piece of the schedules", "1048576"},
      {"post-us", "US", "software cost of posting one message, microseconds", "1"},
      {"call-us", "US", "cost of one call before its first message (hand-off), microseconds", "0"},
      {"reduce-gbps", "G", "reduction throughput per device, GB/s (0: free)", "0"},
      {"efficiency", "E", "share of a link's bandwidth a stream reaches, (0, 1]", "1"},
      {"mpi-exchange", "",
       "the ranks are processes under Loom's MPI communicator: auto runs the allreduce calls "
       "it sends inside its signature round as it does (exchange up to 2K, split_exchange "
       "for blocks up to 2K)",
       ""},
      {"nccl-ll128-max", "BYTES",
       "NCCL's calls (nccl_ring, nccl_tree, nccl) up to this size run its low-latency "
       "protocol (LL/LL128), larger ones Simple (K, M, G; 0: Simple always)",
       "128M"},
      {"nccl-ll128-efficiency", "E",
       "share of the link rate NCCL's low-latency protocol reaches, (0, 1]", "0.75"},
      {"nccl-launch-us", "US",
       "cost of launching one NCCL call's kernel and seeing it end, microseconds", "15"},
  };
}

// Training steps instead of a sweep, and the plot of either.
std::vector<FlagSpec> SimulateTrainingFlags() {
  return {
      {"model", "NAME|FILE",
       "simulate training steps of a model (resnet50, vgg16, inception-v3, bert-large, or a "
       "JSON file) "
       "instead of a collective sweep",
       ""},
      {"scale", "N,N,...",
       "device counts for --model (default: 1, one node, then doubling nodes up to the "
       "machine)",
       ""},
      {"fusion-mb", "MB", "gradient bucket limit for --model (the transpiler's)", "32"},
      {"plot", "OUT.png",
       "also draw the table: busbw against size per algorithm, or scaling efficiency "
       "against devices (through `python3 -m loom.sim`, matplotlib; LOOM_PYTHON names "
       "the interpreter)",
       ""},
      {"timeline", "FILE",
       "simulate training steps of a model measured by Loom: a one-device `loom run "
       "--timeline` trace (needs --program; instead of --model)",
       ""},
      {"op-costs", "FILE",
       "simulate training steps of a program priced per op: a JSON cost table "
       "({\"ops\": {\"mul\": 12.5, ...}, \"default_us\": 5, \"grad_factor\": 2}; needs "
       "--program; instead of --model)",
       ""},
      {"program", "FILE|DIR",
       "the main program of --timeline or --op-costs (main.pb, or the directory holding "
       "it): its ops, and its parameters' gradients and their sizes",
       ""},
      {"batch", "N", "samples per device in the traced or priced run", "1"},
  };
}

Flags SimulateFlags() {
  std::string presets, classes;
  for (const auto& p : sim::Machine::MachinePresetNames())
    presets += (presets.empty() ? "" : ", ") + p;
  for (const auto& c : sim::LinkClasses()) classes += (classes.empty() ? "" : ", ") + c.name;
  return Flags(
      "simulate",
      "loom simulate (--topology NAME|FILE | --cluster SPEC) [--op COLL] [--algo A[,A...]] "
      "[--sizes MIN:MAX] [--factor F]",
      "Predicts the time, algbw and busbw (nccl-tests' definitions) of a collective by\n"
      "replaying the schedules Loom runs (ring, tree, multi_tree, star, channels, rails,\n"
      "hierarchical) over a model of the machine's links: every link direction, NVSwitch\n"
      "port and NIC is a resource its transfers share. The bottleneck column names the\n"
      "busiest resource and how much of the call it was busy. Model and sources:\n"
      "docs/SIMULATOR.md.\n"
      "Machines: " +
          presets +
          ", or a topology file.\n"
          "Clusters: NODESxGPUS:NODE:NICSxSPEED[:oversub=K][:servers=S[xSPEED]], e.g. "
          "16x8:dgx1-v100:4x100Gb\n(servers=S: S parameter-server machines of their own, one NIC "
          "each, for ps and ps_mpi);\n"
          "SPEED is a rate (100Gb, 12.5GB) or a link class: " +
          classes + ".",
      JoinFlags({SimulateCallFlags(), SimulateCostFlags(), SimulateTrainingFlags()}), 0, 0);
}

StatusOr<collective::DataType> ParseDtype(const std::string& name) {
  StatusOr<collective::DataType> d = collective::ParseDataType(name);
  if (!d.ok()) return d.status().WithContext("--dtype");
  return d;
}

StatusOr<sim::SimOptions> Options(const Flags& flags);
Status Sweep(const Flags& flags, const sim::SimOptions& options);

// --timeline or --op-costs with --program: the model a one-device trace measured
// (sim::ModelFromTimeline) or the program's ops priced by a cost table (sim::ModelFromOpCosts).
StatusOr<sim::ModelSpec> ProgramModel(const Flags& flags) {
  const bool timeline = flags.Has("timeline");
  if (!flags.Has("program"))
    return InvalidArgument(timeline ? "--timeline" : "--op-costs",
                           " needs --program (the run's main program)");
  std::string path = flags.Get("program");
  if (IsDirectory(path)) path = JoinPath(path, "main.pb");
  LOOM_ASSIGN_OR_RETURN(ProgramDesc program, LoadProgram(path));
  StatusOr<transpiler::GradientAnalysis> analysis = transpiler::AnalyzeGradients(program);
  if (!analysis.ok()) return analysis.status().WithContext("--program " + path);
  std::map<std::string, uint64_t> gradients;
  DataType dtype = proto::FP32;
  for (const transpiler::OptimizedParam& p : analysis->params) {
    if (gradients.empty()) dtype = p.dtype;
    if (p.dtype != dtype)
      return InvalidArgument("--program ", path, ": gradient '", p.grad, "' is ",
                             DataTypeName(p.dtype), ", the first one ", DataTypeName(dtype),
                             " (one dtype per model)");
    gradients[p.grad] = static_cast<uint64_t>(p.bytes / SizeOf(p.dtype));
  }
  if (gradients.empty())
    return InvalidArgument("--program ", path,
                           ": no parameter is updated (not a training program)");
  LOOM_ASSIGN_OR_RETURN(collective::DataType cdtype, CollectiveDtype(dtype, "--program " + path));
  LOOM_ASSIGN_OR_RETURN(int64_t batch, flags.GetInt("batch"));
  if (batch < 1 || batch > (1 << 24))
    return InvalidArgument("--batch must be in 1..16777216, got ", batch);
  if (!timeline) {
    const std::string& costs = flags.Get("op-costs");
    LOOM_ASSIGN_OR_RETURN(std::string json, ReadFile(costs));
    std::vector<sim::ProgramOp> ops;
    if (program.NumBlocks() > 0) {
      for (const auto& op : program.GlobalBlock()->proto()->ops()) {
        sim::ProgramOp p;
        p.type = op.type();
        for (const auto& var : op.outputs())
          for (const auto& arg : var.arguments()) p.outputs.push_back(arg);
        ops.push_back(std::move(p));
      }
    }
    StatusOr<sim::ModelSpec> model =
        sim::ModelFromOpCosts(ops, json, gradients, cdtype, static_cast<int>(batch));
    if (!model.ok()) return model.status().WithContext(costs);
    model->name = path;
    model->device = "the cost table's device";
    return model;
  }
  const std::string& trace = flags.Get("timeline");
  LOOM_ASSIGN_OR_RETURN(std::string json, ReadFile(trace));
  StatusOr<sim::ModelSpec> model =
      sim::ModelFromTimeline(json, gradients, cdtype, static_cast<int>(batch));
  if (!model.ok()) return model.status().WithContext(trace);
  model->name = trace;
  model->device = "traced device";
  return model;
}

// --model or --timeline: one row per device count.
// One line of a plot: its name and its (x, y) points.
struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;
};

std::string JsonString(const std::string& text) { return "\"" + JsonEscape(text) + "\""; }

// Draws `series` into `out` (PNG) through loom.sim's plot helper: the points go to a JSON file
// that `PYTHON -m loom.sim plot-json JSON OUT` reads. PYTHON is $LOOM_PYTHON, else Debian's
// /usr/bin/python3 (where matplotlib comes from), else python3 on PATH; the build tree's (or
// the installed package's) loom is found beside this executable.
Status Plot(const std::string& kind, const std::string& title,
            const std::vector<PlotSeries>& series, const std::string& out) {
  std::string json = StrCat("{\"kind\": ", JsonString(kind), ", \"title\": ", JsonString(title),
                            ", \"series\": [");
  for (size_t s = 0; s < series.size(); ++s) {
    json += StrCat(s ? ", " : "", "{\"name\": ", JsonString(series[s].name), ", \"points\": [");
    for (size_t i = 0; i < series[s].points.size(); ++i) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "%s[%.17g, %.17g]", i ? ", " : "", series[s].points[i].first,
                    series[s].points[i].second);
      json += buf;
    }
    json += "]}";
  }
  json += "]}\n";
  char tmpl[] = "/tmp/loom-plot-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) return IOError("--plot: cannot create a temporary file: ", std::strerror(errno));
  ::close(fd);
  const std::string data = tmpl;
  Status written = WriteFileAtomic(data, json);
  if (!written.ok()) {
    ::unlink(data.c_str());
    return written;
  }
  std::string python = "python3";
  if (const char* given = std::getenv("LOOM_PYTHON"); given != nullptr && *given != '\0') {
    python = given;
  } else if (::access("/usr/bin/python3", X_OK) == 0) {
    python = "/usr/bin/python3";
  }
  std::string path;
  char self[4096];
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len > 0) {
    self[len] = '\0';
    std::string dir = self;
    dir = dir.substr(0, dir.rfind('/'));
    // build/tools/loom -> build/python; an installed package's loom/bin/loom -> site-packages.
    for (const std::string& candidate : {dir + "/../python", dir + "/../.."}) {
      if (FileExists(candidate + "/loom/sim.py")) {
        path = candidate;
        break;
      }
    }
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::unlink(data.c_str());
    return ResourceExhausted("--plot: fork: ", std::strerror(errno));
  }
  if (pid == 0) {
    if (!path.empty()) {
      const char* old = std::getenv("PYTHONPATH");
      const std::string joined = old && *old ? path + ":" + old : path;
      ::setenv("PYTHONPATH", joined.c_str(), 1);
    }
    const char* argv[] = {python.c_str(), "-m",        "loom.sim", "plot-json",
                          data.c_str(),   out.c_str(), nullptr};
    ::execvp(argv[0], const_cast<char* const*>(argv));
    std::fprintf(stderr, "loom simulate: cannot run '%s': %s\n", python.c_str(),
                 std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ::unlink(data.c_str());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Internal("--plot ", out, ": the plot helper (", python,
                    " -m loom.sim plot-json) failed (",
                    WIFEXITED(status) ? StrCat("exit code ", WEXITSTATUS(status))
                                      : StrCat("signal ", WTERMSIG(status)),
                    "); it needs Loom's Python package and matplotlib (Debian: "
                    "python3-matplotlib)");
  }
  return Status::OK();
}

Status Scaling(const Flags& flags, const sim::SimOptions& options) {
  if (flags.Has("model") + flags.Has("timeline") + flags.Has("op-costs") > 1)
    return InvalidArgument("give one of --model NAME|FILE, --timeline FILE or --op-costs FILE");
  LOOM_ASSIGN_OR_RETURN(sim::ModelSpec model, flags.Has("timeline") || flags.Has("op-costs")
                                                  ? ProgramModel(flags)
                                                  : sim::LoadModel(flags.Get("model")));
  const std::string base = flags.Has("cluster") ? flags.Get("cluster") : flags.Get("topology");
  LOOM_ASSIGN_OR_RETURN(sim::Machine whole, sim::Machine::Load(base));
  std::vector<int> scale;
  if (flags.Has("scale")) {
    std::string list = flags.Get("scale") + ",";
    for (size_t at = 0, comma; (comma = list.find(',', at)) != std::string::npos; at = comma + 1) {
      const std::string item = list.substr(at, comma - at);
      char* end = nullptr;
      const long v = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || v < 1 || v > 65536)
        return InvalidArgument("--scale entry '", item, "' is not a device count in 1..65536");
      scale.push_back(static_cast<int>(v));
    }
  } else {
    scale.push_back(1);
    for (int d = whole.devices_per_node(); d <= whole.size(); d *= 2) {
      if (d > 1) scale.push_back(d);
    }
  }
  sim::StepOptions step;
  LOOM_ASSIGN_OR_RETURN(step.fusion_mb, flags.GetDouble("fusion-mb", 0, 1e6));
  const std::string& algo = flags.Get("algo");
  LOOM_ENFORCE(algo.find(',') == std::string::npos, "--model and --timeline take one --algo, not '",
               algo, "'");
  step.algorithm = algo;
  std::printf(
      "# loom simulate: %s, %.1fM parameters in %zu gradients, batch %d per device, "
      "%.0f samples/s on one %s\n# source: %s\n# machine: %s\n",
      model.name.c_str(), model.parameters() / 1e6, model.gradients.size(), model.batch_per_device,
      model.samples_per_s, model.device.c_str(), model.source.c_str(), whole.Describe().c_str());
  if (model.measured()) {
    std::printf("# measured on one device: forward %.3f ms, backward %.3f ms, update %.3f ms\n",
                model.forward_us / 1e3, model.backward_us / 1e3, model.update_us / 1e3);
  }
  std::printf("#%8s %6s %8s %12s %10s %12s %10s %12s %10s  %s\n", "devices", "nodes", "buckets",
              "compute(ms)", "comm(ms)", "exposed(ms)", "step(ms)", "samples/s", "efficiency",
              "algorithms");
  PlotSeries line{StrCat(model.name, ", ", algo), {}};
  for (int devices : scale) {
    LOOM_ASSIGN_OR_RETURN(sim::Machine machine, sim::MachineForScale(base, devices));
    LOOM_ASSIGN_OR_RETURN(sim::Simulator simulator,
                          sim::Simulator::Create(std::move(machine), options));
    LOOM_ASSIGN_OR_RETURN(sim::StepResult r, sim::SimulateStep(simulator, model, step));
    std::printf(" %8d %6d %8d %12.2f %10.2f %12.2f %10.2f %12.0f %9.1f%%  %s\n", r.devices, r.nodes,
                r.buckets, r.compute_us / 1e3, r.comm_us / 1e3, r.exposed_us / 1e3, r.step_us / 1e3,
                r.samples_per_s, 100 * r.efficiency, r.algorithms.c_str());
    std::fflush(stdout);
    line.points.push_back({static_cast<double>(r.devices), 100 * r.efficiency});
  }
  if (flags.Has("plot")) {
    LOOM_RETURN_IF_ERROR(
        Plot("scaling", StrCat(model.name, " on ", base), {line}, flags.Get("plot")));
  }
  return Status::OK();
}

Status Simulate(const Flags& flags) {
  if (flags.Has("topology") == flags.Has("cluster")) {
    return InvalidArgument("give one of --topology NAME|FILE or --cluster SPEC");
  }
  LOOM_ASSIGN_OR_RETURN(sim::SimOptions options, Options(flags));
  if (flags.Has("model") || flags.Has("timeline") || flags.Has("op-costs"))
    return Scaling(flags, options);
  return Sweep(flags, options);
}

StatusOr<sim::SimOptions> Options(const Flags& flags) {
  sim::SimOptions options;
  LOOM_ASSIGN_OR_RETURN(int64_t chunk, flags.GetInt("chunk-bytes"));
  LOOM_ENFORCE(chunk >= 1 && chunk <= (int64_t{1} << 34), "--chunk-bytes ", chunk,
               " is outside 1..16G");
  options.chunk_bytes = static_cast<size_t>(chunk);
  LOOM_ASSIGN_OR_RETURN(options.engine.post_us, flags.GetDouble("post-us", 0, 1e6));
  LOOM_ASSIGN_OR_RETURN(options.engine.call_us, flags.GetDouble("call-us", 0, 1e6));
  LOOM_ASSIGN_OR_RETURN(options.engine.reduce_gbps, flags.GetDouble("reduce-gbps", 0, 1e6));
  LOOM_ASSIGN_OR_RETURN(options.engine.efficiency, flags.GetDouble("efficiency", 1e-6, 1));
  options.mpi_exchange = flags.Switch("mpi-exchange");
  StatusOr<size_t> ll128_max = ParseByteSize(flags.Get("nccl-ll128-max"));
  if (!ll128_max.ok()) return InvalidArgument("--nccl-ll128-max: ", ll128_max.status().message());
  options.nccl_ll128_max_bytes = *ll128_max;
  LOOM_ASSIGN_OR_RETURN(options.nccl_ll128_efficiency,
                        flags.GetDouble("nccl-ll128-efficiency", 1e-6, 1));
  LOOM_ASSIGN_OR_RETURN(options.nccl_launch_us, flags.GetDouble("nccl-launch-us", 0, 1e6));
  return options;
}

Status Sweep(const Flags& flags, const sim::SimOptions& options) {
  LOOM_ASSIGN_OR_RETURN(collective::Collective kind, collective::ParseCollective(flags.Get("op")));
  LOOM_ASSIGN_OR_RETURN(collective::DataType dtype, ParseDtype(flags.Get("dtype")));
  LOOM_ASSIGN_OR_RETURN(int64_t root, flags.GetInt("root"));
  LOOM_ASSIGN_OR_RETURN(double factor, flags.GetDouble("factor", 1.0001, 1024));
  const std::string& sizes = flags.Get("sizes");
  const size_t colon = sizes.find(':');
  if (colon == std::string::npos) return InvalidArgument("--sizes '", sizes, "' is not MIN:MAX");
  LOOM_ASSIGN_OR_RETURN(size_t min, ParseByteSize(sizes.substr(0, colon)));
  LOOM_ASSIGN_OR_RETURN(size_t max, ParseByteSize(sizes.substr(colon + 1)));
  LOOM_ASSIGN_OR_RETURN(std::vector<size_t> sweep, sim::SizeSweep(min, max, factor));

  LOOM_ASSIGN_OR_RETURN(
      sim::Machine machine,
      sim::Machine::Load(flags.Has("cluster") ? flags.Get("cluster") : flags.Get("topology")));
  if (flags.Has("cluster") && machine.nodes() == 1 &&
      flags.Get("cluster").find(':') == std::string::npos) {
    return InvalidArgument("--cluster '", flags.Get("cluster"), "' is not a cluster spec");
  }
  const int n = machine.size();
  LOOM_ENFORCE(root >= 0 && root < n, "--root ", root, " is outside 0..", n - 1);
  LOOM_ASSIGN_OR_RETURN(sim::Simulator simulator,
                        sim::Simulator::Create(std::move(machine), options));
  std::vector<std::string> algos;
  std::string list = flags.Get("algo") + ",";
  for (size_t at = 0, comma; (comma = list.find(',', at)) != std::string::npos; at = comma + 1) {
    if (comma > at) algos.push_back(list.substr(at, comma - at));
  }
  LOOM_ENFORCE(!algos.empty(), "--algo is empty");
  // Sizes become whole elements (and, for allgather / reducescatter, whole elements per rank),
  // as nccl-tests rounds its counts.
  const size_t elem = collective::DataTypeSize(dtype);
  const bool split =
      kind == collective::Collective::kAllGather || kind == collective::Collective::kReduceScatter;
  const size_t unit = split ? elem * n : elem;
  std::vector<PlotSeries> lines;
  for (const std::string& algo : algos) {
    std::vector<sim::CollectiveResult> rows;
    Status skipped;  // sizes the algorithm does not run at (exchange beyond 2K, ...)
    for (size_t bytes : sweep) {
      const size_t rounded = bytes / unit * unit;
      if (rounded == 0) continue;
      StatusOr<sim::CollectiveResult> r =
          simulator.Simulate(kind, algo, rounded, static_cast<int>(root));
      if (!r.ok() && r.status().code() == StatusCode::kUnimplemented) {
        skipped = r.status();
        continue;
      }
      if (!r.ok()) return r.status();
      rows.push_back(std::move(r).value());
    }
    if (rows.empty() && !skipped.ok()) return skipped;
    std::fputs(sim::FormatTable(simulator.machine(), kind, dtype, rows).c_str(), stdout);
    PlotSeries line{algo, {}};
    for (const sim::CollectiveResult& r : rows)
      line.points.push_back({static_cast<double>(r.bytes), r.busbw_gbps});
    lines.push_back(std::move(line));
  }
  if (flags.Has("plot")) {
    std::fflush(stdout);
    LOOM_RETURN_IF_ERROR(
        Plot("busbw",
             StrCat(collective::CollectiveName(kind), " on ",
                    flags.Has("cluster") ? flags.Get("cluster") : flags.Get("topology")),
             lines, flags.Get("plot")));
  }
  return Status::OK();
}

}  // namespace

int SimulateCommand(int argc, char** argv) {
  Flags flags = SimulateFlags();
  return RunSubcommand(flags, argc, argv, Simulate);
}

}  // namespace loom::cli
