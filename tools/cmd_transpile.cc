// loom transpile IN_DIR -o OUT_DIR: turns a single-device bundle into per-rank bundles for
// data-parallel training on several places, plus a readable manifest of the decisions.
#include <cstdio>
#include <cstdlib>
#include <set>

#include <google/protobuf/text_format.h>

#include "collective/transport_registry.h"
#include "framework/file_util.h"
#include "framework/place.h"
#include "framework/serialization.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/proto_text.h"
#include "transpiler/data_parallel.h"
#include "transpiler/distribute.h"

namespace loom::cli {
namespace {

Flags TranspileFlags() {
  return Flags(
      "transpile", "loom transpile IN_DIR -o OUT_DIR [flags]",
      "Rewrites the single-device bundle IN_DIR (startup.pb, main.pb with forward, backward and\n"
      "optimizer ops, bundle.pbtxt) for data-parallel training on --places: OUT_DIR/rank<R>/ "
      "holds\n"
      "each rank's startup.pb and main.pb, OUT_DIR/manifest.pbtxt the owners, buckets and the\n"
      "algorithm of each bucket, OUT_DIR/bundle.pbtxt the feeds (global batch). `loom run "
      "OUT_DIR`\n"
      "trains with them. Passes, in order:" +
          transpiler::DescribePasses(transpiler::DataParallelPasses()) +
          "\n\nWith --mode pserver it writes OUT_DIR/trainer<K>/ and OUT_DIR/pserver<S>/ bundles "
          "for\n"
          "parameter-server training and OUT_DIR/manifest.pbtxt (every block of every parameter:\n"
          "rows, server, bytes; bytes per server and the imbalance). `loom launch --workers T\n"
          "--servers S -- loom run OUT_DIR` runs them. Passes, in order:" +
          transpiler::DescribePasses(transpiler::DistributePasses()),
      {
          {"output", "OUT_DIR", "where to write the per-rank bundles (also -o)", ""},
          {"places", "PLACES",
           StrCat("the devices: ", kPlaceSetSyntax,
                  ": N CPU places (threads of one process, or with --transport mpi one process "
                  "each), or one rank per listed GPU (threads of one process)"),
           CpuPlaceSet(2)},
          {"transport", "T",
           "how the ranks meet: inprocess (`loom run OUT_DIR` runs all ranks) "
           "or mpi (`mpirun -np N loom run OUT_DIR`, one rank per process); "
           "CUDA places use nccl (NCCL's collectives) unless cuda_p2p is given "
           "(Loom's ring/tree/multi_tree/star on the GPUs)",
           collective::GetTransport(collective::TransportId::kInProcess).name},
          {"mode", "MODE",
           "allreduce (every rank updates every parameter), owner (each "
           "parameter updated by one owner rank, then broadcast) or pserver "
           "(parameter servers own the parameters' blocks; see --pservers)",
           "allreduce"},
          {"pservers", "N|EP,...",
           "pserver mode: N servers found at run time in PADDLE_PSERVER_ENDPOINTS "
           "(as loom launch sets it), or their host:port endpoints",
           "1"},
          {"trainers", "T", "pserver mode: number of trainers", "1"},
          {"async", "", "pserver mode: apply each trainer's gradients as they arrive (no barriers)",
           ""},
          {"split-method", "M", "pserver mode: block placement round_robin, hash or bytes",
           "round_robin"},
          {"min-block-size", "N", "pserver mode: the fewest elements of a block", "8192"},
          {"no-slice", "", "pserver mode: one block per parameter", ""},
          {"algo", "ALGO",
           "ring, tree, multi_tree, star, native (the transport's own: in-process "
           "one pass over shared memory, MPI's, NCCL's) or auto (chosen per "
           "bucket); CUDA places over nccl: native or auto",
           "auto"},
          {"fuse-mb", "MB", "fuse gradients into buckets of about MB MiB (0: no fusion)", "32"},
          {"grad-scale", "S",
           "sample (weight ranks by their batch rows: the full-batch "
           "gradient), avg (1/N) or one",
           "sample"},
          {"owner-policy", "P", "owner mode: bytes (balanced), hash (of the name) or round_robin",
           "bytes"},
          {"grad-compression", "C",
           "none, or fp16: float32 gradients cross as float16 (half the bytes; allreduce mode, "
           "CPU places)",
           "none"},
          {"timeout-ms", "MS", "a collective that does not finish within MS fails", "30000"},
          {"topology", "PRESET", "topology preset of the places (see docs/COLLECTIVES.md)", ""},
          {"disable-pass", "NAME", "skip an optional pass", "", true},
          {"dump-after", "NAME",
           "write every program's text after pass NAME (or all) to --dump-dir", "", true},
          {"dump-dir", "DIR", "where --dump-after writes (default OUT_DIR/passes)", ""},
      },
      1, 1);
}

// Loads IN_DIR's programs and bundle manifest.
Status LoadInput(const std::string& in, ProgramDesc* startup, ProgramDesc* main,
                 proto::BundleManifest* bundle) {
  LOOM_ASSIGN_OR_RETURN(*startup, LoadProgram(JoinPath(in, "startup.pb")));
  LOOM_ASSIGN_OR_RETURN(*main, LoadProgram(JoinPath(in, "main.pb")));
  if (FileExists(JoinPath(in, "bundle.pbtxt"))) {
    LOOM_ASSIGN_OR_RETURN(std::string text, ReadFile(JoinPath(in, "bundle.pbtxt")));
    LOOM_RETURN_IF_ERROR(
        ParseTextProto(text, JoinPath(in, "bundle.pbtxt"), "a bundle manifest", bundle));
  }
  return Status::OK();
}

// OUT_DIR/bundle.pbtxt, with the feed files copied next to it so OUT_DIR stands on its own.
Status WriteBundle(const std::string& in, const std::string& out, proto::BundleManifest bundle) {
  for (auto& f : *bundle.mutable_feeds()) {
    if (!f.has_file()) continue;
    LOOM_ASSIGN_OR_RETURN(std::string data, ReadFile(JoinPath(in, f.file())));
    std::string name = f.file().substr(f.file().find_last_of('/') + 1);
    LOOM_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(out, name), data));
    f.set_file(name);
  }
  std::string text;
  google::protobuf::TextFormat::PrintToString(bundle, &text);
  return WriteFileAtomic(JoinPath(out, "bundle.pbtxt"), text);
}

Status SaveRole(const std::string& dir, const ProgramDesc& startup, const ProgramDesc& main) {
  LOOM_RETURN_IF_ERROR(MakeDirs(dir));
  LOOM_RETURN_IF_ERROR(SaveProgram(startup, JoinPath(dir, "startup.pb")));
  return SaveProgram(main, JoinPath(dir, "main.pb"));
}

// --mode pserver: OUT_DIR/trainer<K>/, OUT_DIR/pserver<S>/, manifest.pbtxt, bundle.pbtxt.
Status TranspilePserver(const Flags& flags, const std::string& in, const std::string& out) {
  transpiler::DistributeConfig config;
  const std::string ps = flags.Get("pservers");
  if (!ps.empty() && ps.find(':') == std::string::npos) {
    LOOM_ASSIGN_OR_RETURN(int64_t n, flags.GetInt("pservers"));
    if (n < 1 || n > 1024) return InvalidArgument("--pservers must be in 1..1024, got ", n);
    for (int64_t i = 0; i < n; ++i) config.pservers.push_back(StrCat("pserver:", i));
  } else {
    size_t start = 0;
    while (start <= ps.size()) {
      size_t comma = ps.find(',', start);
      if (comma == std::string::npos) comma = ps.size();
      config.pservers.push_back(ps.substr(start, comma - start));
      start = comma + 1;
    }
  }
  LOOM_ASSIGN_OR_RETURN(int64_t trainers, flags.GetInt("trainers"));
  if (trainers < 1 || trainers > 4096) return InvalidArgument("--trainers must be in 1..4096");
  config.trainers = static_cast<int>(trainers);
  config.sync_mode = !flags.Switch("async");
  config.slice_var_up = !flags.Switch("no-slice");
  config.split_method = flags.Get("split-method");
  LOOM_ASSIGN_OR_RETURN(config.min_block_size, flags.GetInt("min-block-size"));
  config.pass_options.disabled = flags.GetAll("disable-pass");
  config.pass_options.dump_after = flags.GetAll("dump-after");
  config.pass_options.dump_dir =
      flags.Has("dump-dir") ? flags.Get("dump-dir") : JoinPath(out, "passes");
  ProgramDesc startup, main;
  proto::BundleManifest bundle;
  LOOM_RETURN_IF_ERROR(LoadInput(in, &startup, &main, &bundle));
  LOOM_ASSIGN_OR_RETURN(auto r, transpiler::TranspileDistribute(startup, main, config));
  // Everything is decided; only now touch OUT_DIR (each file written atomically).
  LOOM_RETURN_IF_ERROR(MakeDirs(out));
  for (int t = 0; t < config.trainers; ++t)
    LOOM_RETURN_IF_ERROR(
        SaveRole(JoinPath(out, StrCat("trainer", t)), r.trainer_startup[t], r.trainer_main[t]));
  for (size_t s = 0; s < r.pserver_main.size(); ++s)
    LOOM_RETURN_IF_ERROR(
        SaveRole(JoinPath(out, StrCat("pserver", s)), r.pserver_startup[s], r.pserver_main[s]));
  LOOM_RETURN_IF_ERROR(WriteBundle(in, out, bundle));
  std::string text;
  google::protobuf::TextFormat::PrintToString(r.manifest, &text);
  LOOM_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(out, "manifest.pbtxt"), text));
  const auto& m = r.manifest;
  std::set<std::string> params;
  for (const auto& b : m.blocks()) params.insert(b.param());
  std::printf(
      "loom transpile %s -> %s: pserver mode (%s), %d trainers, %d servers, %d blocks of "
      "%d params, split %s, imbalance %.3f\n",
      in.c_str(), out.c_str(), m.sync_mode() ? "sync" : "async", m.trainers(), m.pservers_size(),
      m.blocks_size(), static_cast<int>(params.size()), m.split_method().c_str(), m.imbalance());
  for (int s = 0; s < m.server_bytes_size(); ++s)
    std::printf("  server %d (%s): %lld bytes\n", s, m.pservers(s).c_str(),
                static_cast<long long>(m.server_bytes(s)));
  return Status::OK();
}

Status Transpile(const Flags& flags) {
  const std::string in = flags.positional()[0];
  if (!flags.Has("output")) return InvalidArgument("-o OUT_DIR is required");
  const std::string out = flags.Get("output");
  if (!IsDirectory(in)) return NotFound("bundle directory '", in, "' does not exist");
  // Writing into the input (or a directory that holds it) would overwrite the bundle it reads.
  if (char* real_in = ::realpath(in.c_str(), nullptr)) {
    std::string a = real_in;
    std::free(real_in);
    std::string b = out;
    if (char* real_out = ::realpath(out.c_str(), nullptr)) {
      b = real_out;
      std::free(real_out);
    }
    if (a == b || (a.size() > b.size() && a.compare(0, b.size(), b) == 0 && a[b.size()] == '/'))
      return InvalidArgument("-o '", out, "' is (or holds) the input bundle '", in,
                             "': write the transpiled bundle elsewhere");
  }
  if (flags.Get("mode") == "pserver") return TranspilePserver(flags, in, out);
  transpiler::DataParallelConfig config;
  LOOM_ASSIGN_OR_RETURN(config.places,
                        ParsePlaceSet(flags.Get("places"), collective::kMaxWorldSize, "--places"));
  config.nranks = static_cast<int>(config.places.size());
  LOOM_ASSIGN_OR_RETURN(config.mode, transpiler::ParseSyncMode(flags.Get("mode")));
  LOOM_ASSIGN_OR_RETURN(config.grad_scale, transpiler::ParseGradScale(flags.Get("grad-scale")));
  LOOM_ASSIGN_OR_RETURN(config.algorithm, collective::ParseAlgorithm(flags.Get("algo")));
  LOOM_ASSIGN_OR_RETURN(config.owner_policy,
                        transpiler::ParsePlacementPolicy(flags.Get("owner-policy")));
  config.topology = flags.Get("topology");
  LOOM_ASSIGN_OR_RETURN(const collective::TransportInfo* transport,
                        collective::FindTransport(flags.Get("transport")));
  config.transport = transport->id;
  // CUDA places meet over NCCL unless another transport was asked for (which the transpiler
  // then refuses, naming the place).
  if (!config.places.empty() && config.places[0].is_cuda() &&
      config.transport == collective::TransportId::kInProcess)
    config.transport = collective::TransportId::kNccl;
  LOOM_ASSIGN_OR_RETURN(config.fuse_grad_size_mb, flags.GetDouble("fuse-mb", 0, 1 << 20));
  if (flags.Get("grad-compression") != "none")
    config.grad_compression = flags.Get("grad-compression");
  LOOM_ASSIGN_OR_RETURN(int64_t timeout, flags.GetInt("timeout-ms"));
  if (timeout <= 0) return InvalidArgument("--timeout-ms must be > 0");
  config.timeout_ms = static_cast<int>(timeout);
  config.pass_options.disabled = flags.GetAll("disable-pass");
  config.pass_options.dump_after = flags.GetAll("dump-after");
  config.pass_options.dump_dir =
      flags.Has("dump-dir") ? flags.Get("dump-dir") : JoinPath(out, "passes");
  config.group = StrCat("transpiled:", out);

  ProgramDesc startup, main;
  proto::BundleManifest bundle;
  LOOM_RETURN_IF_ERROR(LoadInput(in, &startup, &main, &bundle));
  LOOM_ASSIGN_OR_RETURN(auto result, transpiler::TranspileDataParallel(startup, main, config));

  // Everything is decided; only now touch OUT_DIR (each file written atomically).
  LOOM_RETURN_IF_ERROR(MakeDirs(out));
  for (int r = 0; r < config.nranks; ++r)
    LOOM_RETURN_IF_ERROR(
        SaveRole(JoinPath(out, StrCat("rank", r)), result.startup[r], result.main[r]));
  LOOM_RETURN_IF_ERROR(WriteBundle(in, out, bundle));
  std::string text;
  google::protobuf::TextFormat::PrintToString(result.manifest, &text);
  LOOM_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(out, "manifest.pbtxt"), text));

  const auto& m = result.manifest;
  int fused = 0;
  for (const auto& b : m.buckets()) fused += b.fused();
  std::printf("loom transpile %s -> %s: %d ranks, mode %s, %d params in %d buckets (%d fused)",
              in.c_str(), out.c_str(), m.nranks(), m.mode().c_str(), m.params_size(),
              m.buckets_size(), fused);
  if (m.has_owner_imbalance()) std::printf(", owner imbalance %.3f", m.owner_imbalance());
  std::printf("\n");
  return Status::OK();
}

}  // namespace

int TranspileCommand(int argc, char** argv) {
  Flags flags = TranspileFlags();
  return RunSubcommand(flags, argc, argv, Transpile);
}

}  // namespace loom::cli
