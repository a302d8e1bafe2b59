// loom devices: what this loom was built with and the GPUs it sees.
#include <cstdio>

#include "loom/config.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/gpu.h"

namespace loom::cli {

namespace {

Flags DevicesFlags() {
  return Flags("devices", "loom devices [--require-gpu]",
               "Prints the build (version, CUDA, NCCL, MPI) and every CUDA device this process\n"
               "sees: name, compute capability, multiprocessors, memory, L2 size, PCI bus.",
               {{"require-gpu", "", "fail (exit 1) when no CUDA device is visible", ""}}, 0, 0);
}

Status Devices(const Flags& flags) {
  std::printf("loom %s: cuda %s, nccl %s, mpi %s\n", LOOM_VERSION, LOOM_CUDA_ENABLED ? "yes" : "no",
              LOOM_NCCL_ENABLED ? "yes" : "no", LOOM_MPI_ENABLED ? "yes" : "no");
  GpuReport report = DescribeGpus();
  std::fputs(report.text.c_str(), stdout);
  std::fflush(stdout);
  if (flags.Switch("require-gpu") && report.count == 0)
    return FailedPrecondition("no CUDA device is visible");
  return Status::OK();
}

}  // namespace

int DevicesCommand(int argc, char** argv) {
  Flags flags = DevicesFlags();
  return RunSubcommand(flags, argc, argv, Devices);
}

}  // namespace loom::cli
