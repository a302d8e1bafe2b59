// loom bench copies: what one core's memcpy costs when the lines it reads or writes were
// written last by another core. Two threads pinned to two CPUs take turns: the writer writes
// the buffers the case gives it, then the copier copies the source into the destination, timed
// alone. The cases (both buffers the copier's own, the source the writer's, the destination
// the writer's, both the writer's, and the destination the copier's own but read since by the
// other core) are what an in-process transfer meets: a rank's thread copying between two
// ranks' buffers, which the other rank's thread may have just written, or just read (a buffer
// the peer received from in the call before: rewriting lines another core holds costs that
// core's copies of them). With --processes the writer is a second process and the copier reads the
// source from the writer's address space with process_vm_readv, as Open MPI's single-copy transfers
// between the processes of one host do (CMA). The simulator's host model prices them from this
// table (HostProtocol::dirty).
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "base/cpu_affinity.h"
#include "base/deadline.h"
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
      "by the other), dst (the destination by the other), both, read (the destination written\n"
      "by the copying core and copied from by the other since). --processes: the other is a\n"
      "second process, the copier reads the source from its address space with\n"
      "process_vm_readv (Open MPI's single-copy transfers between processes, CMA), and in the\n"
      "read case the other reads the destination so.",
      {
          {"minbytes", "SIZE", "-b: smallest size (K/M/G suffixes)", "4K"},
          {"maxbytes", "SIZE", "-e: largest size", "64M"},
          {"stepfactor", "F", "-f: multiply the size by F each step", "4"},
          {"iters", "N", "-n: timed copies per case and round (0: 2^28 / size, 20-2000)", "0"},
          {"rounds", "R", "rounds per size, round-robin over the cases", "5"},
          {"processes", "", "the writer a second process, the copies process_vm_readv", ""},
      },
      1, 1);
}

// The cases, in the order printed: which buffers the other core wrote (or, kRead, copied the
// destination out after the copier's last copy wrote it) before each timed copy.
enum CopyCase { kClean, kSource, kDestination, kBoth, kRead, kCases };

struct CaseWrites {
  bool other_src, other_dst;  // the other core writes the source / the destination
  bool own_src, own_dst;      // the copier writes them itself (before it copies)
  bool other_reads_dst;       // the other core copies the destination out
};

CaseWrites WritesOf(int kind) {
  const bool src = kind == kSource || kind == kBoth, dst = kind == kDestination || kind == kBoth;
  // kRead: the destination's last writer is the copier's previous copy, read since.
  return {src, dst, !src, !dst && kind != kRead, kind == kRead};
}

// The writes of copy i that fall to the other side (`theirs`) or to the copier: the buffers
// rewritten with values of their own each time.
void CaseWritesFor(const CaseWrites& w, bool theirs, char* src, char* dst, size_t bytes, int i) {
  if (theirs ? w.other_src : w.own_src) std::memset(src, i & 0x7f, bytes);
  if (theirs ? w.other_dst : w.own_dst) std::memset(dst, (i + 1) & 0x7f, bytes);
}

// The median of `us` (reordered).
double Median(std::vector<double>& us) {
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

// One case of one size: `iters` copies, each after the writer wrote what the case gives it.
// Returns the median copy in microseconds.
double TimeCase(int kind, char* src, char* dst, size_t bytes, int iters, int writer_cpu,
                int copier_cpu, Status* pinned) {
  const CaseWrites w = WritesOf(kind);
  std::atomic<int> turn{0};
  std::vector<double> us(iters);
  Status writer_pinned;  // the writer's own: merged once it has joined
  std::thread writer([&] {
    writer_pinned = PinCurrentThreadToCpu(writer_cpu);
    std::vector<char> scratch(w.other_reads_dst ? bytes : 0);
    for (int i = 0; i < iters; ++i) {
      while (turn.load(std::memory_order_acquire) != 2 * i) std::this_thread::yield();
      CaseWritesFor(w, true, src, dst, bytes, i);
      if (w.other_reads_dst) std::memcpy(scratch.data(), dst, bytes);
      turn.store(2 * i + 1, std::memory_order_release);
    }
  });
  Status s = PinCurrentThreadToCpu(copier_cpu);
  if (!s.ok()) *pinned = s;
  for (int i = 0; i < iters; ++i) {
    while (turn.load(std::memory_order_acquire) != 2 * i + 1) std::this_thread::yield();
    CaseWritesFor(w, false, src, dst, bytes, i);
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst, src, bytes);
    const auto t1 = std::chrono::steady_clock::now();
    us[i] = std::chrono::duration<double, std::micro>(t1 - t0).count();
    turn.store(2 * i + 2, std::memory_order_release);
  }
  writer.join();
  if (!writer_pinned.ok()) *pinned = writer_pinned;
  return Median(us);
}

// How long one side waits for the other's turn before it gives up (a side that died).
constexpr std::chrono::seconds kTurnTimeout{30};

// Waits until `turn` holds `want`; false at the deadline.
bool AwaitTurn(const std::atomic<int>& turn, int want, Deadline deadline) {
  for (uint32_t spins = 0; turn.load(std::memory_order_acquire) != want; ++spins) {
    if ((spins & 1023) == 0 && Clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// The same case with the writer a child process (forked for the case) and the copier reading
// the source from the child's mapping with process_vm_readv. `src`, `dst` and `turn` lie in a
// shared mapping, so both processes write the same lines: the copier's own writes go through
// its mapping, the writer's through the child's. Returns the median copy in microseconds.
StatusOr<double> TimeCaseBetweenProcesses(int kind, char* src, char* dst, size_t bytes, int iters,
                                          int writer_cpu, int copier_cpu, std::atomic<int>* turn) {
  const CaseWrites w = WritesOf(kind);
  turn->store(0, std::memory_order_release);
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) return Internal("fork: ", std::strerror(errno));
  if (child == 0) {
    // The writer: ends with the parent, and by the same deadline as it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(3);
    if (!PinCurrentThreadToCpu(writer_cpu).ok()) _exit(4);
    std::vector<char> scratch(w.other_reads_dst ? bytes : 0);
    for (int i = 0; i < iters; ++i) {
      if (!AwaitTurn(*turn, 2 * i, DeadlineAfter(kTurnTimeout))) _exit(3);
      CaseWritesFor(w, true, src, dst, bytes, i);
      if (w.other_reads_dst) {
        // As a peer's single-copy receive reads it: from the copier's address space.
        iovec into{scratch.data(), bytes}, from{dst, bytes};
        if (process_vm_readv(parent, &into, 1, &from, 1, 0) != static_cast<ssize_t>(bytes)) {
          _exit(5);
        }
      }
      turn->store(2 * i + 1, std::memory_order_release);
    }
    // Alive until the last copy has read its mapping.
    _exit(AwaitTurn(*turn, 2 * iters, DeadlineAfter(kTurnTimeout)) ? 0 : 3);
  }
  Status st = PinCurrentThreadToCpu(copier_cpu);
  std::vector<double> us(iters);
  for (int i = 0; i < iters && st.ok(); ++i) {
    if (!AwaitTurn(*turn, 2 * i + 1, DeadlineAfter(kTurnTimeout))) {
      st = Timeout("the writer process ", child, " did not write its buffers within ",
                   kTurnTimeout.count(), " s");
      break;
    }
    CaseWritesFor(w, false, src, dst, bytes, i);
    iovec local{dst, bytes}, remote{src, bytes};
    const auto t0 = std::chrono::steady_clock::now();
    const ssize_t got = process_vm_readv(child, &local, 1, &remote, 1, 0);
    const auto t1 = std::chrono::steady_clock::now();
    if (got != static_cast<ssize_t>(bytes)) {
      st = got < 0 ? FailedPrecondition("process_vm_readv from process ", child, ": ",
                                        std::strerror(errno))
                   : Internal("process_vm_readv copied ", got, " of ", bytes, " bytes");
      break;
    }
    us[i] = std::chrono::duration<double, std::micro>(t1 - t0).count();
    turn->store(2 * i + 2, std::memory_order_release);
  }
  if (!st.ok()) kill(child, SIGKILL);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  LOOM_RETURN_IF_ERROR(st);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return Internal("the writer process ", child,
                    code == 4 ? StrCat(" could not be pinned to CPU ", writer_cpu)
                    : code == 5
                        ? StrCat(" could not read process ", parent, " with process_vm_readv")
                        : StrCat(" ended with status ", status));
  }
  return Median(us);
}

// Memory for one size's buffers: two page-aligned buffers of `bytes`, apart (neither shares a
// line or a page with the other), and with `shared` a page for the turn after them, in a
// mapping a forked child shares (MAP_SHARED).
class CaseMemory {
 public:
  static StatusOr<std::unique_ptr<CaseMemory>> Map(size_t bytes, bool shared) {
    auto m = std::unique_ptr<CaseMemory>(new CaseMemory);
    m->stride_ = (bytes + 4095) / 4096 * 4096 + 4096;
    m->size_ = 2 * m->stride_ + 4096;
    void* p = mmap(nullptr, m->size_, PROT_READ | PROT_WRITE,
                   (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return ResourceExhausted("mmap of ", m->size_, " bytes: ", std::strerror(errno));
    }
    m->base_ = static_cast<char*>(p);
    std::memset(m->base_, 1, 2 * m->stride_);
    m->turn_ = new (m->base_ + 2 * m->stride_) std::atomic<int>(0);
    return m;
  }
  ~CaseMemory() {
    if (base_ != nullptr) munmap(base_, size_);
  }
  char* src() const { return base_; }
  char* dst() const { return base_ + stride_; }
  std::atomic<int>* turn() const { return turn_; }

 private:
  CaseMemory() = default;
  char* base_ = nullptr;
  size_t stride_ = 0, size_ = 0;
  std::atomic<int>* turn_ = nullptr;
};

struct Config {
  size_t lo = 0, hi = 0;
  double factor = 4;
  int64_t iters = 0, rounds = 5;
  bool processes = false;
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
  c.processes = flags.Switch("processes");
  return c;
}

Status Run(const Config& c) {
  const std::vector<int> cpus = AllowedCpus();
  LOOM_ENFORCE(cpus.size() >= 2, "loom bench copies needs two CPUs; this process may use ",
               cpus.size());
  const int writer_cpu = cpus[0], copier_cpu = cpus[1];
  std::printf(
      "# loom bench copies: CPU %d copies SIZE bytes%s; CPU %d wrote the source (src), the "
      "destination (dst), both or neither (clean) last, or read the destination since the "
      "copier wrote it (read)\n"
      "# %10s %10s %10s %10s %10s %10s %8s %8s %8s %8s %8s\n",
      copier_cpu, c.processes ? " with process_vm_readv from a second process (CMA)" : "",
      writer_cpu, "bytes", "clean(us)", "src(us)", "dst(us)", "both(us)", "read(us)", "clean",
      "src", "dst", "both", "read(GB/s)");
  Status pinned;
  for (double size = static_cast<double>(c.lo); size <= static_cast<double>(c.hi) * 1.0000001;
       size *= c.factor) {
    const size_t bytes = std::max<size_t>(64, static_cast<size_t>(size) / 64 * 64);
    const int iters = c.iters > 0 ? static_cast<int>(c.iters)
                                  : static_cast<int>(std::clamp<size_t>(
                                        (size_t{1} << 28) / std::max<size_t>(bytes, 1), 20, 2000));
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<CaseMemory> memory, CaseMemory::Map(bytes, c.processes));
    double best[kCases];
    std::fill(best, best + kCases, 1e300);
    for (int64_t r = 0; r < c.rounds; ++r) {
      for (int kind = 0; kind < kCases; ++kind) {
        double us = 0;
        if (c.processes) {
          LOOM_ASSIGN_OR_RETURN(
              us, TimeCaseBetweenProcesses(kind, memory->src(), memory->dst(), bytes, iters,
                                           writer_cpu, copier_cpu, memory->turn()));
        } else {
          us = TimeCase(kind, memory->src(), memory->dst(), bytes, iters, writer_cpu, copier_cpu,
                        &pinned);
        }
        best[kind] = std::min(best[kind], us);
      }
    }
    LOOM_RETURN_IF_ERROR(pinned);
    auto rate = [&](double us) { return us > 0 ? static_cast<double>(bytes) / us / 1e3 : 0.0; };
    std::printf("  %10zu", bytes);
    for (double us : best) std::printf(" %10.3f", us);
    for (double us : best) std::printf(" %8.2f", rate(us));
    std::printf("\n");
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
