// loom bench collective: a sweep of one collective over message sizes in the nccl-tests format
// (size, count, type, redop, algorithm, time, algbw, busbw, #wrong), on in-process devices
// (--places cpu:N), on GPUs (--places cuda:D0,D1,...: the CUDA P2P transport or NCCL) or, under
// mpirun, one rank per process over the MPI transport.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "base/cpu_affinity.h"
#include "collective/reduce.h"
#include "collective/selector.h"
#include "collective/transport.h"
#include "collective/transport_registry.h"
#include "collective/world.h"
#include "framework/allocator.h"
#include "framework/cpu_threads.h"
#include "framework/place.h"
#include "tools/bench_copies.h"
#include "tools/bench_mpi.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/gpu.h"

namespace loom::cli {

namespace {

using namespace loom::collective;

// What each call is and the sizes it sweeps (nccl-tests' short flags).
std::vector<FlagSpec> BenchCallFlags() {
  return {
      {"op", "COLL", "allreduce, broadcast, reduce, allgather or reducescatter", "allreduce"},
      {"algo", "LIST",
       "comma-separated: auto, ring, tree, multi_tree, star, direct, native, or all", "auto"},
      {"minbytes", "SIZE", "-b: smallest size (K/M/G suffixes)", "4K"},
      {"maxbytes", "SIZE", "-e: largest size", "64M"},
      {"stepfactor", "F", "-f: multiply the size by F each step", "4"},
      {"iters", "N", "-n: timed iterations per size", "20"},
      {"warmup_iters", "N", "-w: untimed iterations per size", "5"},
      {"datatype", "T", "-d: fp32, fp64, fp16, int32, int64", "fp32"},
      {"redop", "OP", "-o: sum, prod, max, min, avg", "sum"},
  };
}

// Where the ranks run and how each row is timed.
std::vector<FlagSpec> BenchRankFlags() {
  return {
      {"places", "PLACES",
       StrCat(kPlaceSetSyntax,
              ": N in-process devices, one rank thread each, or one rank per listed GPU (a "
              "GPU listed several times holds several virtual devices)"),
       CpuPlaceSet(4)},
      {"bind", "B",
       "in-process CPU places: none (the OS places the rank threads) or core (rank r's "
       "thread and its communicator's worker pinned to the r-th CPU this process may use, "
       "round-robin: ranks no more than CPUs never share one; calls handed to the worker "
       "share the rank's; docs/PERF.md); over MPI, mpirun's --bind-to decides",
       "none"},
      {"transport", "T",
       "inprocess or mpi for CPU places (default: mpi under mpirun, else inprocess); "
       "cuda_p2p (CUDA P2P: Loom's schedules on the GPUs) or nccl for CUDA places (default "
       "cuda_p2p)",
       ""},
      {"inflight", "K", "calls issued before each WaitAll", "1"},
      {"rounds", "R",
       "time each row R times, round-robin over the rows of a size (so that load from other "
       "processes falls on all alike), and report each row's median",
       "1"},
      {"stat", "S",
       "what a row reports of its rounds: median, or min (its fastest round: the machine "
       "undisturbed by other load)",
       "median"},
  };
}

// The communicator's tuning: auto's crossovers, the pipeline's pieces, inline calls.
std::vector<FlagSpec> BenchTuningFlags() {
  return {
      {"tree-max-bytes", "B",
       "auto's allreduce tree/ring crossover (negative: model only; default: the "
       "transport's measured one, in-process every size, mpi 256K)",
       ""},
      {"native-min-bytes", "B",
       "auto runs the transport's native collective from B bytes on (negative: never; "
       "default: in-process 0 (every size), mpi 128K, otherwise never)",
       ""},
      {"native-max-bytes", "B",
       "... and up to B bytes (negative: no bound; default: mpi 1M, otherwise none)", ""},
      {"direct-min-bytes", "B",
       "auto runs allreduce from B bytes on with the direct algorithm (negative: never; "
       "default: mpi 128K, otherwise never)",
       ""},
      {"direct-max-bytes", "B",
       "... and up to B bytes (negative: no bound; default: mpi 16M, otherwise none)", ""},
      {"chunk", "SIZE", "pipeline piece size (default: 1M in-process, 256K over MPI)", ""},
      {"inline-max-bytes", "B",
       "calls of at most B bytes issued with nothing in flight run on the caller's thread "
       "(negative: never; default: 64K; every rank here has its own thread, as the ranks of "
       "a comm_init group do)",
       ""},
  };
}

// How the calls are issued and checked, and what else is timed or printed.
std::vector<FlagSpec> BenchRunFlags() {
  return {
      {"packet-signatures", "",
       "over MPI: the signature round sends each call's 48-byte signature inside its "
       "messages instead of as their MPI tag (the round of transports without tags; for "
       "comparison)",
       ""},
      {"in-place", "",
       "allreduce, reduce and broadcast with one buffer for send and receive (nccl-tests' "
       "in-place columns; a broadcast's root then copies nothing): each size's checked call "
       "starts from the rank's input, the timed calls from what the call before left "
       "(floating-point types only: sums grow from call to call)",
       ""},
      {"timeout-ms", "MS", "per-call timeout", "60000"},
      {"selector", "", "also print the cost model's table for these sizes", ""},
      {"peer-mpi", "",
       "over MPI (allreduce): beside Loom's rows at each size, time Open MPI's blocking "
       "MPI_Allreduce on the same buffers, out of place, in the same processes (a row named "
       "MPI_Allreduce, one call at a time; in the round-robin of --rounds)",
       ""},
  };
}

Flags BenchFlags() {
  return Flags(
      "bench",
      "loom bench collective [flags]   (under mpirun: one rank per process)\n"
      "       loom bench copies [flags]      (a core's copies of what another wrote: --help)",
      "Times one collective over a range of message sizes and prints a table with the\n"
      "conventions of nccl-tests: size is the whole buffer (allgather: the gathered output,\n"
      "reducescatter: the input), time is per call (max over ranks), algbw = size / time and\n"
      "busbw = algbw x factor (allreduce 2(N-1)/N; allgather, reducescatter (N-1)/N; reduce,\n"
      "broadcast 1). #wrong counts elements that differ from a locally computed reference\n"
      "after one checked call per size. Short flags as nccl-tests: -b -e -f -n -w -d -o.",
      JoinFlags({BenchCallFlags(), BenchRankFlags(), BenchTuningFlags(), BenchRunFlags()}), 1, 1);
}

// "-b 8" -> "--minbytes 8" and so on; everything else passes through.
std::vector<std::string> TranslateShortFlags(int argc, char** argv) {
  static const std::pair<const char*, const char*> kShort[] = {
      {"-b", "--minbytes"},     {"-e", "--maxbytes"}, {"-f", "--stepfactor"}, {"-n", "--iters"},
      {"-w", "--warmup_iters"}, {"-d", "--datatype"}, {"-o", "--redop"}};
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    for (const auto& [s, l] : kShort) {
      if (arg == s) arg = l;
    }
    out.push_back(arg);
  }
  return out;
}

StatusOr<DataType> ParseDtype(const std::string& v) {
  StatusOr<DataType> d = collective::ParseDataType(v);
  if (!d.ok()) return d.status().WithContext("--datatype");
  return d;
}

StatusOr<ReduceOp> ParseRedop(const std::string& v) {
  for (ReduceOp o :
       {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
    if (v == ReduceOpName(o)) return o;
  }
  return InvalidArgument("unknown --redop '", v, "' (expected sum, prod, max, min, avg)");
}

struct Config {
  Collective kind = Collective::kAllReduce;
  std::vector<Algorithm> algorithms;
  bool all = false;  // --algo all: skip pairs that do not exist instead of failing
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  size_t min_bytes = 0, max_bytes = 0;
  double factor = 4;
  int iters = 20, warmup = 5, inflight = 1, places = 4, rounds = 1;
  std::vector<int> cuda_devices;  // --places cuda:...
  const collective::TransportInfo* transport = nullptr;
  bool mpi = false, selector = false, peer_mpi = false;
  bool fastest = false;   // --stat min: a row reports its fastest round, else its median
  bool in_place = false;  // --in-place: send and receive one buffer
  bool bind = false;      // --bind core: in-process rank threads and workers pinned to CPUs
  CommunicatorOptions options;
};

// Deterministic small-integer inputs (exact under every reduction order).
int64_t Value(ReduceOp op, int rank, size_t i) {
  const int64_t k = static_cast<int64_t>((rank * 7 + i * 13) % 7);
  if (op == ReduceOp::kProd) return (k % 3 == 0) ? -1 : (k % 3 == 1 ? 1 : 2);
  return k - 3;
}

void Store(DataType dtype, void* buf, size_t i, double v) {
  switch (dtype) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(buf)[i] = FloatToHalf(static_cast<float>(v));
      break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
  }
}

// The reference value of element i after reducing every rank's input.
double Reduced(ReduceOp op, DataType dtype, int n, size_t i) {
  int64_t acc = Value(op, 0, i);
  for (int r = 1; r < n; ++r) {
    const int64_t v = Value(op, r, i);
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg)
      acc += v;
    else if (op == ReduceOp::kProd)
      acc *= v;
    else if (op == ReduceOp::kMax)
      acc = std::max(acc, v);
    else
      acc = std::min(acc, v);
  }
  if (op != ReduceOp::kAvg) return static_cast<double>(acc);
  if (dtype == DataType::kInt32 || dtype == DataType::kInt64) return static_cast<double>(acc / n);
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat16
             ? static_cast<double>(static_cast<float>(acc) / static_cast<float>(n))
             : static_cast<double>(acc) / n;
}

// Elements of `got` (count, starting at global index `first`) that differ from the reference.
int64_t CountWrong(DataType dtype, const void* got, size_t count, size_t first,
                   const std::function<double(size_t)>& want) {
  const size_t elem = DataTypeSize(dtype);
  std::vector<unsigned char> one(elem);
  int64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    Store(dtype, one.data(), 0, want(first + i));
    if (std::memcmp(one.data(), static_cast<const unsigned char*>(got) + i * elem, elem)) ++wrong;
  }
  return wrong;
}

double BusFactor(Collective kind, int n) {
  switch (kind) {
    case Collective::kAllReduce: return 2.0 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

Work Issue(Communicator& comm, const Config& c, Algorithm a, const void* send, void* recv,
           size_t count) {
  const CallOptions o{a};
  switch (c.kind) {
    case Collective::kAllReduce: return comm.AllReduce(send, recv, count, c.dtype, c.op, o);
    case Collective::kReduce: return comm.Reduce(send, recv, count, c.dtype, c.op, 0, o);
    case Collective::kBroadcast: return comm.Broadcast(send, recv, count, c.dtype, 0, o);
    case Collective::kAllGather: return comm.AllGather(send, recv, count, c.dtype, o);
    case Collective::kReduceScatter: return comm.ReduceScatter(send, recv, count, c.dtype, c.op, o);
    default: break;  // ParseCollective gives only the five above
  }
  return Work();
}

class HostMemory final : public BenchMemory {
 public:
  StatusOr<std::shared_ptr<void>> Allocate(size_t bytes) override {
    // As the transports' own host memory (huge pages from 2 MiB, as Loom's tensors).
    std::shared_ptr<void> p = collective::AllocateHostBuffer(bytes);
    if (p == nullptr) return ResourceExhausted("could not allocate ", bytes, " bytes");
    return p;
  }
  Status Upload(void* dst, const void* host, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, host, bytes);
    return Status::OK();
  }
  Status Download(void* host, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(host, src, bytes);
    return Status::OK();
  }
};

// cuda:D0,D1,... -> device ordinals (repeats allowed).
// `v` summed (or combined with `op`) element-wise over every rank, through the ranks' memory.
StatusOr<std::vector<double>> ReduceVector(Communicator& comm, BenchMemory& memory,
                                           std::vector<double> v, ReduceOp op) {
  const size_t bytes = v.size() * sizeof(double);
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<void> buf, memory.Allocate(bytes));
  LOOM_RETURN_IF_ERROR(memory.Upload(buf.get(), v.data(), bytes));
  LOOM_RETURN_IF_ERROR(
      comm.AllReduce(buf.get(), buf.get(), v.size(), DataType::kFloat64, op).Wait());
  LOOM_RETURN_IF_ERROR(memory.Download(v.data(), buf.get(), bytes));
  return v;
}

// `v` reduced over every rank with `op`, through the ranks' memory (a GPU transport reduces
// device buffers).
StatusOr<double> ReduceScalar(Communicator& comm, BenchMemory& memory, double v, ReduceOp op) {
  LOOM_ASSIGN_OR_RETURN(std::vector<double> all, ReduceVector(comm, memory, {v}, op));
  return all[0];
}

// Where a CPU transport's ranks run, where they are no more than the CPUs they may use: in every
// timed round each rank notes the CPU it is on halfway through the calls, and a round in which
// two shared one (CrowdedCpus: two polling ranks taking turns on one core, another idle) is
// counted. The OS places the threads; it rarely moves a polling one, so a launch that starts
// crowded tends to stay so, every round several times slower (docs/PERF.md, "Rank threads on
// cores").
class Placement {
 public:
  static StatusOr<Placement> Start(Communicator& comm, BenchMemory& memory, bool cpu) {
    Placement p;
    if (!cpu) return p;
    const long conf = sysconf(_SC_NPROCESSORS_CONF);
    const std::vector<int> allowed = AllowedCpus();
    p.slots_ = static_cast<int>(std::max<long>({conf, 1L, allowed.back() + 1L}));
    // The CPUs any rank may run on: the union of their masks (MPI binds each process to its
    // own; in-process the ranks share one).
    std::vector<double> mine(p.slots_, 0);
    for (int cpu : allowed) mine[cpu] = 1;
    LOOM_ASSIGN_OR_RETURN(std::vector<double> any,
                          ReduceVector(comm, memory, std::move(mine), ReduceOp::kMax));
    p.available_ = static_cast<int>(std::count(any.begin(), any.end(), 1.0));
    // More ranks than CPUs take turns on them whatever the placement (and 3 of 4 ranks on one
    // of 2 cores timed no slower than 2 and 2): checked only where each rank can have a CPU.
    if (comm.nranks() > p.available_) p.slots_ = 0;
    return p;
  }
  // One round's check (collective: every rank calls it) on the CPU each rank sampled halfway
  // through the round's calls (the calls are collective, so the samples are nearly
  // simultaneous; a sample after the round would find where the reduction of the times woke the
  // thread); true where two ranks shared one.
  StatusOr<bool> Crowded(Communicator& comm, BenchMemory& memory, int cpu) const {
    if (slots_ == 0) return false;
    std::vector<double> here(slots_, 0);
    if (cpu >= 0 && cpu < slots_) here[cpu] = 1;
    LOOM_ASSIGN_OR_RETURN(std::vector<double> on,
                          ReduceVector(comm, memory, std::move(here), ReduceOp::kSum));
    return CrowdedCpus(std::vector<int>(on.begin(), on.end()), available_);
  }
  bool checked() const { return slots_ > 0; }
  int available() const { return available_; }

 private:
  int slots_ = 0;  // CPU numbers 0..slots_-1; 0: not checked (GPU transports)
  int available_ = 0;
};

// One size of a rank's sweep: its counts, the rank's buffers and the rows it times.
struct SweepSize {
  bool split = false;  // allgather, reducescatter: `count` is each rank's part
  size_t count = 0;    // elements per call
  size_t bytes = 0;    // nccl-tests' size: the whole buffer
  std::vector<unsigned char> send_host, recv;  // the rank's input; the output read back
  std::shared_ptr<void> send_buf, recv_buf;
  void* send = nullptr;  // the calls' send buffer (--in-place: recv_dev)
  void* recv_dev = nullptr;
  // The rows of this size: each algorithm that runs here, then the MPI peer (--peer-mpi).
  std::vector<Algorithm> algos;
  size_t entries = 0;
  bool mpi_row(size_t e) const { return e == algos.size(); }
};

// One rank's sweep; rank 0 prints. Every rank runs the same calls in the same order.
class RankSweeper {
 public:
  RankSweeper(Communicator& comm, BenchMemory& memory, const Config& c, Placement placement)
      : comm_(comm),
        memory_(memory),
        c_(c),
        rank_(comm.rank()),
        n_(comm.nranks()),
        print_(rank_ == 0),
        placement_(placement),
        selector_(comm.plan(), collective::SelectorOptionsOf(comm.options())) {}

  Status Run() {
    PrintHeader();
    for (double size = static_cast<double>(c_.min_bytes); size <= c_.max_bytes * 1.0000001;
         size = std::max(size * c_.factor, size + 1)) {
      LOOM_RETURN_IF_ERROR(RunSize(size));
      if (size == 0) size = 1;  // a sweep from 0 continues with 1 byte
    }
    PrintSummary();
    return Status::OK();
  }

 private:
  Status RunSize(double size) {
    LOOM_ASSIGN_OR_RETURN(SweepSize s, Prepare(size));
    LOOM_ASSIGN_OR_RETURN(s.algos, RowAlgorithms());
    s.entries = s.algos.size() + (c_.peer_mpi ? 1 : 0);
    std::vector<int64_t> wrong(s.entries, 0);
    // One checked call and the warmup of every row, before any timing.
    for (size_t e = 0; e < s.entries; ++e) {
      LOOM_ASSIGN_OR_RETURN(wrong[e], CheckedCall(s, e));
      LOOM_RETURN_IF_ERROR(WarmUp(s, e));
    }
    // Placement is checked where the rank threads run the calls themselves (one in flight, at
    // most --inline-max-bytes): a larger call runs on the communicator's worker while the rank
    // thread sleeps, and where a woken thread lands says nothing of where the work ran.
    const bool placed = c_.inflight == 1 && c_.options.inline_max_bytes >= 0 &&
                        s.bytes <= static_cast<size_t>(c_.options.inline_max_bytes);
    std::vector<std::vector<double>> times(s.entries);
    LOOM_RETURN_IF_ERROR(TimeRows(s, placed, &times));
    return Report(s, wrong, &times);
  }

  // The counts of `size` bytes and the rank's buffers, its input uploaded.
  StatusOr<SweepSize> Prepare(double size) const {
    const size_t elem = DataTypeSize(c_.dtype);
    SweepSize s;
    s.split = c_.kind == Collective::kAllGather || c_.kind == Collective::kReduceScatter;
    s.count = static_cast<size_t>(size) / elem / (s.split ? n_ : 1);
    const size_t send_count = c_.kind == Collective::kReduceScatter ? s.count * n_ : s.count;
    const size_t recv_count = c_.kind == Collective::kAllGather ? s.count * n_ : s.count;
    s.bytes = (s.split ? s.count * n_ : s.count) * elem;
    s.send_host.resize(send_count * elem);
    s.recv.resize(recv_count * elem);
    for (size_t i = 0; i < send_count; ++i) {
      Store(c_.dtype, s.send_host.data(), i, static_cast<double>(Value(c_.op, rank_, i)));
    }
    LOOM_ASSIGN_OR_RETURN(s.send_buf, memory_.Allocate(s.send_host.size()));
    LOOM_ASSIGN_OR_RETURN(s.recv_buf, memory_.Allocate(s.recv.size()));
    s.recv_dev = s.recv_buf.get();
    s.send = c_.in_place ? s.recv_dev : s.send_buf.get();  // --in-place: one buffer
    LOOM_RETURN_IF_ERROR(memory_.Upload(s.send_buf.get(), s.send_host.data(), s.send_host.size()));
    return s;
  }

  // The algorithms of --algo that run here (--algo all: those that exist on this transport).
  StatusOr<std::vector<Algorithm>> RowAlgorithms() const {
    std::vector<Algorithm> algos;
    for (Algorithm a : c_.algorithms) {
      if (a != Algorithm::kAuto && a != Algorithm::kNative && !AlgorithmSupports(a, c_.kind)) {
        if (c_.all) continue;
        return Unimplemented(CollectiveCallName(c_.kind), " has no '", AlgorithmName(a),
                             "' algorithm");
      }
      if (c_.all) {
        // Skip what the transport lacks: native on CUDA P2P, schedules on NCCL.
        const bool has_native = c_.transport->native;
        const bool has_schedules = c_.transport->schedules;
        if (a == Algorithm::kNative ? !has_native : (a != Algorithm::kAuto && !has_schedules)) {
          continue;
        }
      }
      algos.push_back(a);
    }
    return algos;
  }

  // Row e's checked call: the elements of this rank's output that differ from the reference.
  StatusOr<int64_t> CheckedCall(SweepSize& s, size_t e) {
    std::fill(s.recv.begin(), s.recv.end(), 0);
    // In place the one buffer starts as the rank's input (send and receive sizes agree for
    // the collectives that run in place).
    LOOM_RETURN_IF_ERROR(memory_.Upload(
        s.recv_dev, c_.in_place ? s.send_host.data() : s.recv.data(), s.recv.size()));
    if (s.mpi_row(e)) {  // Open MPI's blocking allreduce, out of place as Loom's rows
      LOOM_RETURN_IF_ERROR(
          TimeMpiAllreduce(s.send, s.recv_dev, s.count, c_.dtype, c_.op, 0, 1).status());
    } else {
      LOOM_RETURN_IF_ERROR(Issue(comm_, c_, s.algos[e], s.send, s.recv_dev, s.count).Wait());
    }
    LOOM_RETURN_IF_ERROR(memory_.Download(s.recv.data(), s.recv_dev, s.recv.size()));
    return Wrong(s);
  }

  // The elements of the output read back (s.recv) that differ from the reference.
  int64_t Wrong(const SweepSize& s) const {
    const size_t count = s.count;
    const int n = n_;
    const Config& c = c_;
    int64_t wrong = 0;
    switch (c.kind) {
      case Collective::kAllReduce:
        wrong = CountWrong(c.dtype, s.recv.data(), count, 0,
                           [&](size_t i) { return Reduced(c.op, c.dtype, n, i); });
        break;
      case Collective::kReduce:
        if (rank_ == 0) {
          wrong = CountWrong(c.dtype, s.recv.data(), count, 0,
                             [&](size_t i) { return Reduced(c.op, c.dtype, n, i); });
        }
        break;
      case Collective::kBroadcast:
        wrong = CountWrong(c.dtype, s.recv.data(), count, 0,
                           [&](size_t i) { return static_cast<double>(Value(c.op, 0, i)); });
        break;
      case Collective::kAllGather:
        for (int r = 0; r < n; ++r) {
          wrong += CountWrong(c.dtype, s.recv.data() + r * count * DataTypeSize(c.dtype), count, 0,
                              [&](size_t i) { return static_cast<double>(Value(c.op, r, i)); });
        }
        break;
      case Collective::kReduceScatter:
        wrong = CountWrong(c.dtype, s.recv.data(), count, rank_ * count,
                           [&](size_t i) { return Reduced(c.op, c.dtype, n, i); });
        break;
      default: break;
    }
    return wrong;
  }

  // Row e's untimed iterations.
  Status WarmUp(const SweepSize& s, size_t e) {
    if (s.mpi_row(e)) {
      return TimeMpiAllreduce(s.send, s.recv_dev, s.count, c_.dtype, c_.op, c_.warmup, 0).status();
    }
    for (int i = 0; i < c_.warmup; ++i) {
      for (int k = 0; k < c_.inflight; ++k) {
        Issue(comm_, c_, s.algos[e], s.send, s.recv_dev, s.count);
      }
      LOOM_RETURN_IF_ERROR(comm_.WaitAll());
    }
    return Status::OK();
  }

  // The timed loops: --rounds times round-robin over the rows, so that a burst of load from
  // other processes falls on all of them alike; each row reports its median (or fastest)
  // round. `placed`: each round's placement is checked (Placement).
  Status TimeRows(const SweepSize& s, bool placed, std::vector<std::vector<double>>* times) {
    std::vector<int> crowded_rounds(s.entries, 0);
    for (int round = 0; round < c_.rounds; ++round) {
      for (size_t e = 0; e < s.entries; ++e) {
        int cpu = -1;  // this rank's CPU halfway through the round (Placement)
        LOOM_ASSIGN_OR_RETURN(double us, TimeRound(s, e, placed, &cpu));
        // The slowest rank's time (through the ranks' memory: a GPU transport reduces device
        // buffers).
        LOOM_ASSIGN_OR_RETURN(us, ReduceScalar(comm_, memory_, us, ReduceOp::kMax));
        (*times)[e].push_back(us);
        if (!placed) continue;
        LOOM_ASSIGN_OR_RETURN(const bool crowded, placement_.Crowded(comm_, memory_, cpu));
        crowded_rounds[e] += crowded ? 1 : 0;
      }
    }
    for (size_t e = 0; e < s.entries && placed; ++e) {
      rounds_crowded_ += crowded_rounds[e];
      ++rows_timed_;
      rows_crowded_ += 2 * crowded_rounds[e] > c_.rounds ? 1 : 0;
    }
    return Status::OK();
  }

  // Row e's time per call in one round on this rank, microseconds; `cpu`: where the rank ran
  // halfway through (where it is sampled).
  StatusOr<double> TimeRound(const SweepSize& s, size_t e, bool placed, int* cpu) {
    if (s.mpi_row(e)) {
      LOOM_ASSIGN_OR_RETURN(const double us, TimeMpiAllreduce(s.send, s.recv_dev, s.count, c_.dtype,
                                                              c_.op, 0, c_.iters * c_.inflight));
      *cpu = CurrentCpu();
      return us;
    }
    LOOM_RETURN_IF_ERROR(comm_.Barrier().Wait());
    const auto start = Clock::now();
    std::vector<Work> works(c_.inflight);
    for (int i = 0; i < c_.iters; ++i) {
      for (int k = 0; k < c_.inflight; ++k) {
        works[k] = Issue(comm_, c_, s.algos[e], s.send, s.recv_dev, s.count);
      }
      for (const Work& w : works) LOOM_RETURN_IF_ERROR(w.Wait());
      if (placed && i == c_.iters / 2) *cpu = CurrentCpu();  // tens of ns
    }
    LOOM_RETURN_IF_ERROR(comm_.WaitAll());
    return std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
           (static_cast<double>(c_.iters) * c_.inflight);
  }

  // The size's rows (rank 0 prints them; every rank takes part in the reductions).
  Status Report(const SweepSize& s, const std::vector<int64_t>& wrong,
                std::vector<std::vector<double>>* times) {
    for (size_t e = 0; e < s.entries; ++e) {
      // Every rank's wrong elements.
      LOOM_ASSIGN_OR_RETURN(
          double all_wrong,
          ReduceScalar(comm_, memory_, static_cast<double>(wrong[e]), ReduceOp::kSum));
      std::vector<double>& t = (*times)[e];
      std::sort(t.begin(), t.end());
      const double us = c_.fastest ? t.front() : t[t.size() / 2];
      if (!print_) continue;
      const double algbw = static_cast<double>(s.bytes) / (us * 1e3);
      const double busbw = algbw * BusFactor(c_.kind, n_);
      if (!s.mpi_row(e)) {
        busbw_sum_ += busbw;
        ++rows_;
      }
      std::printf("%12zu %12zu %6s %6s %18s %11.2f %12.3f %12.3f %7lld\n", s.bytes,
                  s.split ? s.count * n_ : s.count, DataTypeName(c_.dtype),
                  c_.kind == Collective::kBroadcast || c_.kind == Collective::kAllGather
                      ? "none"
                      : ReduceOpName(c_.op),
                  RowName(s, e).c_str(), us, algbw, busbw, static_cast<long long>(all_wrong));
      std::fflush(stdout);
    }
    return Status::OK();
  }

  // Row e's algorithm column: auto names what it runs.
  std::string RowName(const SweepSize& s, size_t e) const {
    if (s.mpi_row(e)) return "MPI_Allreduce";
    const Algorithm a = s.algos[e];
    std::string name = AlgorithmName(a);
    if (a != Algorithm::kAuto) return name;
    // What auto runs is what the communicator's selector picks, from its own options (native only
    // where the transport has it; a transport without schedules, NCCL, always runs native).
    const Algorithm chosen =
        !c_.transport->schedules
            ? Algorithm::kNative
            : selector_.Choose(c_.kind, s.bytes, c_.inflight, c_.transport->native);
    // Ranks that do not meet (MPI) run small allreduce calls in the signature exchange,
    // whole or split (communicator.h).
    using collective::InExchange;
    const InExchange mode =
        c_.transport->processes && c_.transport->schedules &&
                !comm_.transport().meets_with_signatures() &&
                c_.transport->device == collective::DeviceKind::kCpu
            ? collective::SignatureExchangeMode(c_.kind, s.count, c_.dtype, n_,
                                                comm_.options().doubling_exchange)
            : InExchange::kNo;
    return name + (mode == InExchange::kDoubling ? std::string(":doubling")
                   : mode == InExchange::kWhole  ? std::string(":exchange")
                   : mode == InExchange::kSplit  ? std::string(":split_exchange")
                                                 : StrCat(":", AlgorithmName(chosen)));
  }

  void PrintHeader() const {
    if (!print_) return;
    std::printf("# loom bench collective: %s, %d ranks (%s), inflight %d, iters %d, warmup %d%s\n",
                CollectiveName(c_.kind), n_, comm_.transport().name(), c_.inflight, c_.iters,
                c_.warmup, c_.in_place ? ", in place" : "");
    std::printf("%12s %12s %6s %6s %18s %11s %12s %12s %7s\n", "size(B)", "count", "type", "redop",
                "algorithm", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }

  void PrintSummary() const {
    if (print_ && rows_ > 0) std::printf("# Avg bus bandwidth    : %.3f\n", busbw_sum_ / rows_);
    if (print_ && placement_.checked() && rows_timed_ > 0) {
      // Read by bench/sim/calibrate_host.py, which launches again when a row was crowded in
      // most of its rounds. Rows of calls handed to the worker are not counted (above).
      std::printf(
          "# Placement            : %d ranks on %d CPUs; crowded onto fewer CPUs in %d of %d "
          "timed rounds, in most rounds of %d of %d rows\n",
          n_, placement_.available(), rounds_crowded_, rows_timed_ * c_.rounds, rows_crowded_,
          rows_timed_);
    }
    if (print_ && c_.selector) {
      std::printf(
          "\n%s",
          selector_.Table(c_.kind, std::max<size_t>(c_.min_bytes, 1), c_.max_bytes, c_.inflight)
              .c_str());
    }
  }

  Communicator& comm_;
  BenchMemory& memory_;
  const Config& c_;
  const int rank_, n_;
  const bool print_;
  const Placement placement_;
  const Selector selector_;
  // Summed over the sizes, for the summary lines.
  double busbw_sum_ = 0;
  int rows_ = 0;
  int rounds_crowded_ = 0, rows_timed_ = 0, rows_crowded_ = 0;
};

Status RankSweep(Communicator& comm, BenchMemory& memory, const Config& c) {
  LOOM_ASSIGN_OR_RETURN(
      const Placement placement,
      Placement::Start(comm, memory, c.transport->device == collective::DeviceKind::kCpu));
  return RankSweeper(comm, memory, c, placement).Run();
}

// --algo: a comma-separated list, or all (every algorithm, skipping those that do not run).
Status ParseAlgorithms(const Flags& flags, Config* c) {
  std::string list = flags.Get("algo");
  if (list == "all") {
    c->all = true;
    list = "ring,tree,multi_tree,star,direct,native,auto";
  }
  for (size_t pos = 0; pos <= list.size();) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    LOOM_ASSIGN_OR_RETURN(Algorithm a, ParseAlgorithm(list.substr(pos, comma - pos)));
    c->algorithms.push_back(a);
    pos = comma + 1;
  }
  return Status::OK();
}

// What each call is and how each size is timed: -d, -o, -b, -e, -f, -n, -w, --inflight,
// --rounds and --stat.
Status ParseSweep(const Flags& flags, Config* c) {
  LOOM_ASSIGN_OR_RETURN(c->dtype, ParseDtype(flags.Get("datatype")));
  LOOM_ASSIGN_OR_RETURN(c->op, ParseRedop(flags.Get("redop")));
  LOOM_ASSIGN_OR_RETURN(c->min_bytes, ParseSizeFlag("minbytes", flags.Get("minbytes")));
  LOOM_ASSIGN_OR_RETURN(c->max_bytes, ParseSizeFlag("maxbytes", flags.Get("maxbytes")));
  LOOM_ENFORCE(c->min_bytes <= c->max_bytes, "-b ", c->min_bytes, " is larger than -e ",
               c->max_bytes);
  LOOM_ASSIGN_OR_RETURN(c->factor, flags.GetDouble("stepfactor", 1.0001, 1024));
  LOOM_ASSIGN_OR_RETURN(int64_t iters, flags.GetInt("iters"));
  LOOM_ASSIGN_OR_RETURN(int64_t warmup, flags.GetInt("warmup_iters"));
  LOOM_ASSIGN_OR_RETURN(int64_t inflight, flags.GetInt("inflight"));
  LOOM_ASSIGN_OR_RETURN(int64_t rounds, flags.GetInt("rounds"));
  LOOM_ENFORCE(iters >= 1 && warmup >= 0 && inflight >= 1 && rounds >= 1 && rounds <= 1000,
               "-n, --inflight and --rounds (at most 1000) must be >= 1 and -w >= 0");
  c->rounds = static_cast<int>(rounds);
  const std::string stat = flags.Get("stat");
  LOOM_ENFORCE(stat == "median" || stat == "min", "--stat must be median or min, not '", stat, "'");
  c->fastest = stat == "min";
  c->iters = static_cast<int>(iters), c->warmup = static_cast<int>(warmup);
  c->inflight = static_cast<int>(inflight);
  return Status::OK();
}

// Where the ranks run and what connects them: --bind, --places and --transport.
Status ParsePlaces(const Flags& flags, Config* c) {
  const std::string bind = flags.Get("bind");
  LOOM_ENFORCE(bind == "core" || bind == "none", "--bind must be core or none, not '", bind, "'");
  c->bind = bind == "core";
  LOOM_ASSIGN_OR_RETURN(std::vector<Place> places,
                        ParsePlaceSet(flags.Get("places"), collective::kMaxWorldSize, "--places"));
  c->places = static_cast<int>(places.size());
  if (places[0].is_cuda()) {
    for (const Place& p : places) c->cuda_devices.push_back(p.device);
    LOOM_ASSIGN_OR_RETURN(
        c->transport, collective::FindTransport(
                          flags.Has("transport")
                              ? flags.Get("transport")
                              : collective::GetTransport(collective::TransportId::kCudaP2P).name));
    LOOM_ENFORCE(c->transport->device == collective::DeviceKind::kCuda,
                 "--transport for CUDA places expects cuda_p2p or nccl, got '", c->transport->name,
                 "'");
  } else {
    using collective::TransportId;
    LOOM_ASSIGN_OR_RETURN(
        c->transport, collective::FindTransport(
                          flags.Has("transport")
                              ? flags.Get("transport")
                              : collective::GetTransport(UnderMpirun() ? TransportId::kMpi
                                                                       : TransportId::kInProcess)
                                    .name));
    LOOM_ENFORCE(c->transport->device == collective::DeviceKind::kCpu,
                 "--transport for CPU places expects inprocess or mpi, got '", c->transport->name,
                 "'");
  }
  c->mpi = c->transport->processes;
  return Status::OK();
}

// The communicator's options: the transport's defaults, then what the selector, --chunk,
// --timeout-ms and --packet-signatures flags say.
Status ParseCommunicatorOptions(const Flags& flags, Config* c) {
  // The transport's measured crossovers and chunking, unless a flag says otherwise.
  c->options = collective::TransportDefaults(*c->transport);
  // Every rank here has its own thread, as the ranks of a comm_init group do (comm.cc): small
  // calls with nothing in flight run on it.
  if (c->transport->device == collective::DeviceKind::kCpu)
    c->options.inline_max_bytes = collective::CommunicatorOptions::kInlineDefaultBytes;
  // Byte bounds of the selector: each flag, when given, replaces the transport's default.
  const std::pair<const char*, long long*> bounds[] = {
      {"tree-max-bytes", &c->options.auto_tree_max_bytes},
      {"native-min-bytes", &c->options.auto_native_min_bytes},
      {"native-max-bytes", &c->options.auto_native_max_bytes},
      {"direct-min-bytes", &c->options.auto_direct_min_bytes},
      {"direct-max-bytes", &c->options.auto_direct_max_bytes},
      {"inline-max-bytes", &c->options.inline_max_bytes},
  };
  for (const auto& [flag, field] : bounds) {
    if (!flags.Has(flag)) continue;
    LOOM_ASSIGN_OR_RETURN(int64_t value, flags.GetInt(flag));
    *field = value;
  }
  if (flags.Has("chunk")) {
    LOOM_ASSIGN_OR_RETURN(c->options.pipeline_chunk_bytes,
                          ParseSizeFlag("chunk", flags.Get("chunk")));
  }
  LOOM_ENFORCE(c->options.pipeline_chunk_bytes > 0, "--chunk must be positive");
  LOOM_ASSIGN_OR_RETURN(int64_t timeout, flags.GetInt("timeout-ms"));
  LOOM_ENFORCE(timeout > 0, "--timeout-ms must be positive");
  c->options.timeout = std::chrono::milliseconds(timeout);
  c->options.tagged_signatures = !flags.Switch("packet-signatures");
  return Status::OK();
}

// --selector, --peer-mpi and --in-place, and the calls they take.
Status ParseModes(const Flags& flags, Config* c) {
  c->selector = flags.Switch("selector");
  c->peer_mpi = flags.Switch("peer-mpi");
  c->in_place = flags.Switch("in-place");
  LOOM_ENFORCE(!c->in_place || c->kind == Collective::kAllReduce ||
                   c->kind == Collective::kReduce || c->kind == Collective::kBroadcast,
               "--in-place runs allreduce, reduce and broadcast, not ", CollectiveName(c->kind));
  LOOM_ENFORCE(!c->in_place || c->kind == Collective::kBroadcast ||
                   c->dtype == DataType::kFloat32 || c->dtype == DataType::kFloat64 ||
                   c->dtype == DataType::kFloat16,
               "--in-place ", CollectiveName(c->kind), " of ", collective::DataTypeName(c->dtype),
               ": the timed calls reduce what the call before left, so integer sums would "
               "overflow; use a floating-point -d");
  LOOM_ENFORCE(!c->in_place || !c->peer_mpi, "--in-place and --peer-mpi exclude each other");
  LOOM_ENFORCE(!c->peer_mpi || (c->mpi && c->kind == Collective::kAllReduce),
               "--peer-mpi compares allreduce over MPI: use it with --transport mpi under mpirun "
               "and --op allreduce");
  return Status::OK();
}

// Each rank of this process holds a send and a receive buffer of the largest size (x ranks for
// allgather / reducescatter) and host copies of both: refuse a sweep the machine cannot hold
// before any rank starts, rather than fail one rank while the others wait for it.
Status CheckHostMemory(const Config& c) {
  const int here = c.mpi ? 1 : c.places;
  const bool gathers = c.kind == Collective::kAllGather || c.kind == Collective::kReduceScatter;
  const double need = 4.0 * static_cast<double>(c.max_bytes) * here * (gathers ? c.places : 1);
  LOOM_ENFORCE(need <= static_cast<double>(HostMemoryLimit()), "-e ", c.max_bytes, " bytes on ",
               here, " rank(s) here needs about ", static_cast<int64_t>(need / (1 << 20)),
               " MiB of host memory, more than the ", HostMemoryLimit() >> 20,
               " MiB available (LOOM_HOST_MEMORY_MB)");
  return Status::OK();
}

StatusOr<Config> MakeConfig(const Flags& flags) {
  Config c;
  if (flags.positional()[0] != "collective") {
    return InvalidArgument("unknown benchmark '", flags.positional()[0],
                           "' (expected: loom bench collective)");
  }
  LOOM_ASSIGN_OR_RETURN(c.kind, ParseCollective(flags.Get("op")));
  LOOM_RETURN_IF_ERROR(ParseAlgorithms(flags, &c));
  LOOM_RETURN_IF_ERROR(ParseSweep(flags, &c));
  LOOM_RETURN_IF_ERROR(ParsePlaces(flags, &c));
  LOOM_RETURN_IF_ERROR(ParseCommunicatorOptions(flags, &c));
  LOOM_RETURN_IF_ERROR(ParseModes(flags, &c));
  LOOM_RETURN_IF_ERROR(CheckHostMemory(c));
  return c;
}

void WarnUnpinned(const Status& pinned, int rank, const char* what) {
  if (!pinned.ok()) {
    std::fprintf(stderr, "loom bench: warning: rank %d's %s runs unpinned (%s)\n", rank, what,
                 pinned.message().c_str());
  }
}

Status Bench(const Config& c, int* argc, char*** argv) {
  // Nothing here calls BLAS; its pool threads, which OpenBLAS starts when it loads and which
  // poll for about 0.1 s, would only crowd the ranks while the OS places them (2-rank 4 KiB ring,
  // 40 alternating launches each: 9 slow with the pool, none without; docs/PERF.md).
  ReleaseBlasThreads();
  if (c.mpi) {
    return RunOnMpiWorld(argc, argv, c.options, [&](Communicator& comm) {
      return RankSweep(comm, *HostBenchMemory(), c);
    });
  }
  std::vector<Communicator*> comms;
  std::vector<std::unique_ptr<BenchMemory>> memory;
  std::unique_ptr<InProcessWorld> world;
  CudaBenchGroup gpus;
  if (c.cuda_devices.empty()) {
    WorldOptions options;
    options.communicator = c.options;
    LOOM_ASSIGN_OR_RETURN(world, InProcessWorld::Create(c.places, options));
    for (int r = 0; r < world->size(); ++r) {
      comms.push_back(&world->comm(r));
      memory.push_back(HostBenchMemory());
      if (c.bind) WarnUnpinned(world->comm(r).PinWorkerToCpu(CpuForIndex(r)), r, "worker");
    }
  } else {
    LOOM_ASSIGN_OR_RETURN(gpus, MakeCudaBenchGroup(c.cuda_devices, *c.transport, c.options));
    for (auto& comm : gpus.comms) comms.push_back(comm.get());
    memory = std::move(gpus.memory);
  }
  std::mutex mu;
  Status first;
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] {
      Status s;
      try {
        // Rank r's thread beside its communicator's worker (pinned above). Pinning only places
        // the threads: where it fails the rank runs where the OS puts it, as with --bind none.
        if (c.bind && c.cuda_devices.empty())
          WarnUnpinned(PinCurrentThreadToCpu(CpuForIndex(r)), static_cast<int>(r), "thread");
        s = RankSweep(*comms[r], *memory[r], c);
      } catch (...) {  // nothing may escape a thread
        s = StatusOfException(std::current_exception());
      }
      std::lock_guard<std::mutex> lock(mu);
      if (first.ok() && !s.ok()) first = s;
    });
  }
  for (auto& t : threads) t.join();
  return first;
}

}  // namespace

std::unique_ptr<BenchMemory> HostBenchMemory() { return std::make_unique<HostMemory>(); }

int BenchCommand(int argc, char** argv) {
  Flags flags = BenchFlags();
  std::vector<std::string> args = TranslateShortFlags(argc, argv);
  std::vector<char*> ptrs;
  for (auto& a : args) ptrs.push_back(a.data());
  if (IsBenchCopies(static_cast<int>(ptrs.size()), ptrs.data())) {
    return BenchCopiesCommand(static_cast<int>(ptrs.size()), ptrs.data());
  }
  Status parsed = flags.Parse(static_cast<int>(ptrs.size()), ptrs.data());
  if (flags.help()) {
    std::fputs(flags.Help().c_str(), stdout);
    return kExitOk;
  }
  StatusOr<Config> config = parsed.ok() ? MakeConfig(flags) : StatusOr<Config>(parsed);
  if (!config.ok()) {
    std::fprintf(stderr, "loom bench: %s\n", config.status().message().c_str());
    return kExitUsage;
  }
  Status st = Bench(config.value(), &argc, &argv);
  if (!st.ok()) {
    std::fprintf(stderr, "loom bench: error: %s\n", st.ToString().c_str());
    return kExitError;
  }
  return kExitOk;
}

}  // namespace loom::cli
