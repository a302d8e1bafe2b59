// loom: run and inspect saved Loom programs.
#include <cstdio>
#include <cstring>
#include <string>

#include "loom/config.h"
#include "sim/cost_model.h"
#include "tools/commands.h"
#include "tools/flags.h"

namespace {

constexpr const char* kUsage =
    "usage: loom <command> [flags] [args]\n"
    "\n"
    "commands:\n"
    "  run DIR        train a saved program bundle (DIR/startup.pb, DIR/main.pb, "
    "DIR/bundle.pbtxt)\n"
    "  inspect FILE   print a program, verify it, or draw it (--dot); --ops lists registered ops\n"
    "  transpile DIR  rewrite a bundle for data-parallel training on several places (-o OUT)\n"
    "  topo           print a machine's links, ring and trees (--preset, --file, --detect)\n"
    "  bench collective   time a collective over message sizes (nccl-tests format)\n"
    "  simulate       predict collectives on a machine or cluster (--topology, --cluster)\n"
    "  devices        print the build (CUDA, NCCL, MPI) and the GPUs this machine has\n"
    "  launch -- CMD  run CMD as the servers and workers of a job (--servers S --workers N)\n"
    "  help [CMD]     print help for loom or a command\n"
    "\n"
    "  loom CMD --help    flags of a command\n"
    "  loom --version     print the version\n";

}  // namespace

namespace {

int Main(int argc, char** argv) {
  using namespace loom::cli;
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  // auto asks the simulator (LOOM_AUTO_COST_MODEL=formulas: the selector's formulas).
  if (auto installed = loom::sim::InstallDefaultCostModel(); !installed.ok()) {
    std::fprintf(stderr, "loom: error: %s\n", installed.status().message().c_str());
    return kExitUsage;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h") {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  if (cmd == "help") {
    if (argc > 2) {
      char help_flag[] = "--help";
      char* args[] = {help_flag};
      std::string sub = argv[2];
      if (sub == "run") return RunCommand(1, args);
      if (sub == "inspect") return InspectCommand(1, args);
      if (sub == "transpile") return TranspileCommand(1, args);
      if (sub == "topo") return TopoCommand(1, args);
      if (sub == "bench") return BenchCommand(1, args);
      if (sub == "devices") return DevicesCommand(1, args);
      if (sub == "launch") return LaunchCommand(1, args);
      if (sub == "simulate") return SimulateCommand(1, args);
      std::fprintf(stderr, "loom: unknown command '%s'\n\n%s", sub.c_str(), kUsage);
      return kExitUsage;
    }
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  if (cmd == "--version" || cmd == "version") {
    std::printf("loom %s (CUDA %s)\n", LOOM_VERSION, LOOM_CUDA_ENABLED ? "enabled" : "disabled");
    return kExitOk;
  }
  if (cmd == "run") return RunCommand(argc - 2, argv + 2);
  if (cmd == "inspect") return InspectCommand(argc - 2, argv + 2);
  if (cmd == "transpile") return TranspileCommand(argc - 2, argv + 2);
  if (cmd == "topo") return TopoCommand(argc - 2, argv + 2);
  if (cmd == "bench") return BenchCommand(argc - 2, argv + 2);
  if (cmd == "devices") return DevicesCommand(argc - 2, argv + 2);
  if (cmd == "launch") return LaunchCommand(argc - 2, argv + 2);
  if (cmd == "simulate") return SimulateCommand(argc - 2, argv + 2);
  std::fprintf(stderr, "loom: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
  return kExitUsage;
}

}  // namespace

// The last boundary: whatever a command lets escape ends as an error message and exit code, never
// as std::terminate (commands report their own errors through RunSubcommand first).
int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (...) {
    loom::Status st = loom::StatusOfException(std::current_exception());
    std::fprintf(stderr, "loom: error: %s\n", st.message().c_str());
    return loom::cli::kExitError;
  }
}
