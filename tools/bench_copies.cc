// loom bench copies: what one core's memcpy costs when the lines it reads or writes were
// written last by another core. Two threads pinned to two CPUs take turns: the writer writes
// the buffers the case gives it, then the copier copies the source into the destination, timed
// alone. The four cases (both buffers the copier's own, the source the writer's, the
// destination the writer's, both the writer's) are what an in-process transfer meets: a rank's
// thread copying between two ranks' buffers, which the other rank's thread may have just
// written. The simulator's host model prices them from this table (HostProtocol::dirty).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "base/cpu_affinity.h"
#include "tools/bench_copies.h"
#include "tools/flags.h"

namespace loom::cli {
namespace {

Flags CopiesFlags() {
  return Flags(
      "bench copies", "loom bench copies [flags]",
      "Times one core's copy of SIZE bytes between two buffers while a second core wrote the\n"
      "source, the destination, both or neither last (two threads pinned to the first two CPUs\n"
      "this process may use, taking turns). Prints per size the time of each case (the median\n"
      "of a round's copies, the fastest of --rounds rounds taken round-robin over the cases)\n"
      "and its rate in GB/s: clean (both buffers written by the copying core), src (the source\n"
      "by the other), dst (the destination by the other), both.",
      {
          {"minbytes", "SIZE", "-b: smallest size (K/M/G suffixes)", "4K"},
          {"maxbytes", "SIZE", "-e: largest size", "64M"},
          {"stepfactor", "F", "-f: multiply the size by F each step", "4"},
          {"iters", "N", "-n: timed copies per case and round (0: 2^28 / size, 20-2000)", "0"},
          {"rounds", "R", "rounds per size, round-robin over the cases", "5"},
      },
      1, 1);
}

// One case of one size: `iters` copies, each after the writer wrote what the case gives it.
// Returns the median copy in microseconds.
double TimeCase(int kind, char* src, char* dst, size_t bytes, int iters, int writer_cpu,
                int copier_cpu, Status* pinned) {
  const bool foreign_src = kind == 1 || kind == 3, foreign_dst = kind == 2 || kind == 3;
  std::atomic<int> turn{0};
  std::vector<double> us(iters);
  Status writer_pinned;  // the writer's own: merged once it has joined
  std::thread writer([&] {
    writer_pinned = PinCurrentThreadToCpu(writer_cpu);
    for (int i = 0; i < iters; ++i) {
      while (turn.load(std::memory_order_acquire) != 2 * i) std::this_thread::yield();
      if (foreign_src) std::memset(src, i & 0x7f, bytes);
      if (foreign_dst) std::memset(dst, (i + 1) & 0x7f, bytes);
      turn.store(2 * i + 1, std::memory_order_release);
    }
  });
  Status s = PinCurrentThreadToCpu(copier_cpu);
  if (!s.ok()) *pinned = s;
  for (int i = 0; i < iters; ++i) {
    while (turn.load(std::memory_order_acquire) != 2 * i + 1) std::this_thread::yield();
    if (!foreign_src) std::memset(src, i & 0x7f, bytes);
    if (!foreign_dst) std::memset(dst, (i + 1) & 0x7f, bytes);
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst, src, bytes);
    const auto t1 = std::chrono::steady_clock::now();
    us[i] = std::chrono::duration<double, std::micro>(t1 - t0).count();
    turn.store(2 * i + 2, std::memory_order_release);
  }
  writer.join();
  if (!writer_pinned.ok()) *pinned = writer_pinned;
  std::nth_element(us.begin(), us.begin() + iters / 2, us.end());
  return us[iters / 2];
}

struct Config {
  size_t lo = 0, hi = 0;
  double factor = 4;
  int64_t iters = 0, rounds = 5;
};

StatusOr<Config> MakeConfig(const Flags& flags) {
  if (flags.positional()[0] != "copies") {
    return InvalidArgument("unknown benchmark '", flags.positional()[0], "'");
  }
  Config c;
  LOOM_ASSIGN_OR_RETURN(c.lo, ParseSizeFlag("minbytes", flags.Get("minbytes")));
  LOOM_ASSIGN_OR_RETURN(c.hi, ParseSizeFlag("maxbytes", flags.Get("maxbytes")));
  LOOM_ENFORCE(c.lo >= 64 && c.lo <= c.hi && c.hi <= (size_t{1} << 32), "-b ", c.lo, " and -e ",
               c.hi, ": sizes of 64 B-4 GiB, -b at most -e");
  LOOM_ASSIGN_OR_RETURN(c.factor, flags.GetDouble("stepfactor", 1.0001, 1024));
  LOOM_ASSIGN_OR_RETURN(c.iters, flags.GetInt("iters"));
  LOOM_ASSIGN_OR_RETURN(c.rounds, flags.GetInt("rounds"));
  LOOM_ENFORCE(c.iters >= 0 && c.iters <= 1000000 && c.rounds >= 1 && c.rounds <= 1000,
               "-n must be 0-1000000 and --rounds 1-1000");
  return c;
}

Status Run(const Config& c) {
  const std::vector<int> cpus = AllowedCpus();
  LOOM_ENFORCE(cpus.size() >= 2, "loom bench copies needs two CPUs; this process may use ",
               cpus.size());
  const int writer_cpu = cpus[0], copier_cpu = cpus[1];
  std::printf(
      "# loom bench copies: CPU %d copies SIZE bytes; CPU %d wrote the source (src), the "
      "destination (dst), both or neither (clean) last\n"
      "# %10s %10s %10s %10s %10s %8s %8s %8s %8s\n",
      copier_cpu, writer_cpu, "bytes", "clean(us)", "src(us)", "dst(us)", "both(us)", "clean",
      "src", "dst", "both(GB/s)");
  Status pinned;
  for (double size = static_cast<double>(c.lo); size <= static_cast<double>(c.hi) * 1.0000001;
       size *= c.factor) {
    const size_t bytes = std::max<size_t>(64, static_cast<size_t>(size) / 64 * 64);
    const int iters = c.iters > 0 ? static_cast<int>(c.iters)
                                  : static_cast<int>(std::clamp<size_t>(
                                        (size_t{1} << 28) / std::max<size_t>(bytes, 1), 20, 2000));
    // Page-aligned and apart: neither buffer shares a line or a page with the other.
    const size_t stride = (bytes + 4095) / 4096 * 4096 + 4096;
    std::unique_ptr<char[]> memory(new char[2 * stride + 4096]);
    char* base =
        reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(memory.get()) + 4095) / 4096 * 4096);
    char* src = base;
    char* dst = base + stride;
    std::memset(base, 1, 2 * stride);
    double best[4] = {1e300, 1e300, 1e300, 1e300};
    for (int64_t r = 0; r < c.rounds; ++r) {
      for (int kind = 0; kind < 4; ++kind) {
        best[kind] = std::min(
            best[kind], TimeCase(kind, src, dst, bytes, iters, writer_cpu, copier_cpu, &pinned));
      }
    }
    LOOM_RETURN_IF_ERROR(pinned);
    auto rate = [&](double us) { return us > 0 ? static_cast<double>(bytes) / us / 1e3 : 0.0; };
    std::printf("  %10zu %10.3f %10.3f %10.3f %10.3f %8.2f %8.2f %8.2f %8.2f\n", bytes, best[0],
                best[1], best[2], best[3], rate(best[0]), rate(best[1]), rate(best[2]),
                rate(best[3]));
    std::fflush(stdout);
  }
  return Status::OK();
}

}  // namespace

bool IsBenchCopies(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    if (argv[i][0] != '-') return std::strcmp(argv[i], "copies") == 0;
  }
  return false;
}

int BenchCopiesCommand(int argc, char** argv) {
  Flags flags = CopiesFlags();
  Status parsed = flags.Parse(argc, argv);
  if (flags.help()) {
    std::fputs(flags.Help().c_str(), stdout);
    return kExitOk;
  }
  StatusOr<Config> config = parsed.ok() ? MakeConfig(flags) : StatusOr<Config>(parsed);
  if (!config.ok()) {
    std::fprintf(stderr, "loom bench copies: %s\n", config.status().message().c_str());
    return kExitUsage;
  }
  Status st = Run(*config);
  if (!st.ok()) {
    std::fprintf(stderr, "loom bench copies: error: %s\n", st.message().c_str());
    return kExitError;
  }
  return kExitOk;
}

}  // namespace loom::cli
