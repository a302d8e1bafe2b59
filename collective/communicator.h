// Communicator: one rank's face of a group of ranks that run collectives together (the library's
// public API, in the style of Gloo/NCCL communicators and c10d's process groups).
//
// Every call validates its local arguments, then returns a Work handle; the call runs on the
// communicator's own worker thread, except that over a transport with one rank per process
// (MPI) a small call issued while nothing else is in flight runs on the caller's thread before
// the call returns (CommunicatorOptions::inline_max_bytes). Many calls may be in flight; they
// run and complete in issue order. As with MPI, ranks must then issue their calls on several
// communicators in the same order: a rank blocked in one communicator's small call does not
// reach its next communicator's. All ranks must issue the same collectives in the same order;
// each collective first exchanges a small signature with every rank, so a call whose count,
// dtype, operator, root or algorithm differs from another rank's ends in InvalidArgument naming
// both ranks' calls (and the communicator stays usable). A call that does not finish within the
// timeout ends in Timeout and leaves the communicator unusable (later calls fail with
// FailedPrecondition).
//
// Buffers must stay valid and untouched until the call's Work completes. "In place" means send ==
// recv (AllGather: send == recv + rank * count; ReduceScatter: recv == send + rank * count).
//
// Threading: issue calls for one communicator from one thread at a time; Work handles may be
// waited on from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/status.h"
#include "collective/cost_model.h"
#include "collective/topology.h"
#include "collective/transport.h"
#include "collective/tree_builder.h"
#include "collective/types.h"

namespace loom::collective {

namespace internal {
struct WorkState;
struct ScheduleLists;
struct StealGate;
}  // namespace internal
class Selector;

// Handle of one issued call.
class Work {
 public:
  Work() = default;
  // Blocks until the call completes and returns its status, or returns Timeout when `timeout`
  // passes first (the call then stays in flight).
  Status Wait(std::chrono::milliseconds timeout = std::chrono::hours(24 * 365)) const;
  bool IsCompleted() const;
  // When the communicator's worker started and finished running the call (for timelines);
  // meaningful once the call completed.
  std::pair<Clock::time_point, Clock::time_point> RunSpan() const;

 private:
  friend class Communicator;
  explicit Work(std::shared_ptr<internal::WorkState> state) : state_(std::move(state)) {}
  std::shared_ptr<internal::WorkState> state_;
};

// Per-call options.
struct CallOptions {
  Algorithm algorithm = Algorithm::kAuto;
};

// Measured allreduce crossovers of Algorithm::kAuto (docs/COLLECTIVES.md, "Selector"; rerun
// with bench/collective/auto_check.py). Over real links the tree wins up to ~2 MiB and the
// ring's bandwidth takes over above (kLinkAutoTreeMaxBytes); MPI: kMpiAutoTreeMaxBytes. Ranks of
// one process share one memory system: every algorithm moves the same bytes through it, and the
// tree, with the fewest synchronized steps, was at or ahead of the ring at every size from 4 KiB to
// 64 MiB (medians of 5 rounds: 4 MiB tree 3190 µs vs ring 3518, 16 MiB 17021 vs 18556, 64 MiB 58830
// vs 68454), so in-process allreduce takes the tree at every size.
constexpr long long kLinkAutoTreeMaxBytes = 2 << 20;
// Over MPI (processes of one host, medians of 3 and 5 rounds): the tree was at or near the best
// up to 256 KiB and behind the ring and multi_tree from 1 MiB (1 MiB: tree 1476/1820 µs, ring
// 1351/1454, multi_tree 1388/1244), with overlapped transfers in the model picking multi_tree.
constexpr long long kMpiAutoTreeMaxBytes = 256 << 10;
// ... where with 4 processes the star led the tree at every size from 16 to 256 KiB, 1, 50 and
// 150 calls in flight, once a call's own cost had come down (auto_check.py --mpi, medians of 3
// round-robin rounds: 16 KiB 46.9 / 46.4 / 47.3 µs against 56.4 / 48.0 / 49.8, 64 KiB 104.8 /
// 92.9 / 95.4 against 131.4 / 112.8 / 113.7; 128 KiB 182 against 250-260). Its root receives
// from every rank, so larger groups keep the tree.
constexpr int kMpiAutoStarMaxRanks = 4;
// Over MPI, Open MPI's own MPI_Iallreduce (native) led the schedules between these sizes
// (auto_check.py, 4 processes, medians of 3 rounds; 256 KiB: native 146 / 118 / 179 µs with
// 1 / 50 / 150 calls in flight against the tree's 166 / 150 / 252; 1 MiB: native 443 / 460
// against the multi-tree's 551 / 536 with 1 / 50 in flight); at 64 KiB the tree was ahead
// (53 vs 65 µs), at 4 MiB they tied and from 16 MiB the multi-tree led (64 MiB: native 69.7
// ms against 38.6).
constexpr long long kMpiAutoNativeMinBytes = 128 << 10;
constexpr long long kMpiAutoNativeMaxBytes = 1 << 20;
constexpr long long kInProcessAutoTreeMaxBytes = 1LL << 62;
// In-process ranks from this size on run the transport's native collectives: every rank reads
// and writes every other rank's memory, so one pass over shared memory moves N·S bytes in and
// N·S out, against about 15·S for the ring or the tree (N = 4), and it is one rendezvous of
// all ranks against the schedules' several steps. Since the rendezvous polls before it sleeps
// (collective/spin.h) native is ahead at every size (loom bench collective, 4 ranks, 2 runs,
// allreduce tree vs native: 4 KiB 50-57 vs 39-41 µs, 64 KiB 65-70 vs 44-48, 256 KiB 112-120 vs
// 61-62, 1 MiB 227-408 vs 121-125; broadcast, reduce, allgather and reducescatter at 4 and
// 64 KiB: native the best or within 5% of the best schedule). Before, the schedules were
// ahead below 256 KiB, this crossover's earlier value.
constexpr long long kInProcessAutoNativeMinBytes = 0;

// Where ranks do not meet in shared memory (MPI) every collective starts with a round in which
// each rank sends every other its call's signature. A call that auto runs travels inside that
// round when it is an allreduce, reduce or broadcast of at most kInExchangeBytes whose data to
// all peers is at most kInExchangeTotalBytes, on a transport with host buffers: each rank then
// reduces the n payloads in rank order (the same bits on every rank) and the call ends with
// the round, one message latency in all (4-byte allreduce over MPI, 4 ranks: 12 -> 5 µs;
// docs/PERF.md). 2 KiB + the signature stays under Open MPI's 4 KiB eager limit over shared
// memory; above it the exchange was no faster than the tree.
//
// A larger allreduce whose blocks (count / nranks elements, rounded up) are at most
// kInExchangeBytes is split: each rank sends block r of its data to rank r with the signature,
// reduces the block it owns in rank order once the signatures agree, and sends it to every
// rank (an allgather): two rounds of messages under the eager limit, where the tree takes five
// (4 KiB, 4 ranks over MPI: docs/PERF.md).
constexpr size_t kInExchangeBytes = 2048;
constexpr size_t kInExchangeTotalBytes = 64 << 10;

// Over MPI an auto allreduce from kMpiAutoDirectMinBytes to kMpiAutoDirectMaxBytes runs the
// direct algorithm (algorithms/direct.cc: the same two rounds as the split exchange, each block a
// message of its own, after the signature round). With 4 processes (medians of 5 round-robin
// rounds) it led the tree, multi_tree, the native MPI_Iallreduce and Open MPI's blocking
// MPI_Allreduce from 128 KiB to 16 MiB (1 MiB: 717-733 µs against 1003-1417 and MPI_Allreduce's
// 1058-1077; 16 MiB: 12.4-12.8 ms against 13.4-16.8); at 64 KiB the star stayed ahead
// (auto_check.py --mpi, 1 / 50 / 150 in flight: 91.6 / 60.2 / 60.5 µs against 95.9 / 65.8 /
// 67.1), and the multi-tree led at 64 MiB.
constexpr long long kMpiAutoDirectMinBytes = 128 << 10;
constexpr long long kMpiAutoDirectMaxBytes = 16 << 20;
// Over MPI ranks on several nodes (DetectMpiNodes), the windows above, measured between the
// processes of one host, do not hold: a network is the bottleneck, not memory. On an emulated
// cluster (4x2:1gbit, one rank per node; docs/CLUSTER.md) the ring led the direct algorithm from
// 1 MiB (1 MiB 0.240 GB/s busbw against 0.178, 16 MiB 0.204 against 0.139) and the star was
// last at 16 KiB (413 µs against the ring's 211): across nodes auto runs neither the star, the
// direct algorithm nor MPI's own collectives, and the tree only up to 8 KiB, the cost model above
// (AcrossNodesMpiOptions): from 16 KiB the ring led the tree (256 KiB: 0.237 GB/s against 0.135,
// bench/cluster/allreduce.sh, medians of 3 launches).
constexpr long long kMpiAcrossNodesTreeMaxBytes = 8 << 10;
// How a call that auto runs travels in the signature exchange (see above).
enum class InExchange {
  kNo,        // only the signature; the algorithm runs after the round
  kWhole,     // the data with the signature, reduced by every rank: one round
  kSplit,     // block r with the signature to rank r, then an allgather: two rounds
  kDoubling,  // allreduce by recursive doubling with the signatures' range (doubling_exchange)
};
// `doubling`: CommunicatorOptions::doubling_exchange.
InExchange SignatureExchangeMode(Collective kind, size_t count, DataType dtype, int nranks,
                                 bool doubling = false);

struct CommunicatorOptions {
  // How long one call may run before it ends in Timeout.
  std::chrono::milliseconds timeout{30000};
  // Large transfers are cut into pieces of at most this many bytes so that steps pipeline.
  size_t pipeline_chunk_bytes = size_t{1} << 20;
  // kAuto (selector.h): allreduce up to this many bytes per rank uses the single tree, larger
  // ones the cheapest algorithm by the cost model; negative: the cost model decides alone. Other
  // collectives follow the cost model. The default is the crossover measured between processes
  // (kLinkAutoTreeMaxBytes); in-process worlds default to kInProcessAutoTreeMaxBytes.
  long long auto_tree_max_bytes = kLinkAutoTreeMaxBytes;
  // ... and in groups of at most this many ranks the star instead of the tree (MPI:
  // kMpiAutoStarMaxRanks; otherwise 0, never).
  int auto_star_max_ranks = 0;
  // kAuto: calls of at least this many bytes (allgather/reducescatter: the whole buffer) run
  // the transport's native collective when it has one; negative: never. In-process worlds
  // default to kInProcessAutoNativeMinBytes.
  long long auto_native_min_bytes = -1;
  // kAuto: ... and at most this many bytes; negative: no upper bound. Over MPI the window is
  // [kMpiAutoNativeMinBytes, kMpiAutoNativeMaxBytes].
  long long auto_native_max_bytes = -1;
  // kAuto: an allreduce of at least this many bytes runs the direct algorithm (negative: never)
  // ...
  long long auto_direct_min_bytes = -1;
  // ... and at most this many (negative: no bound). MPI: kMpiAutoDirectMinBytes to
  // kMpiAutoDirectMaxBytes; otherwise never.
  long long auto_direct_max_bytes = -1;
  // For the cost model: a rank's sends and receives overlap (selector.h); MPI sets it.
  bool overlapped_transfers = false;
  // A call of at most this many bytes per rank, issued when no call of this communicator is
  // queued or running, runs on the caller's thread (the Work it returns has completed): no
  // hand-off to the worker and back, which costs more than a small collective itself (4 ranks
  // over MPI, 4 bytes: 8.6 us against 27). Larger calls, and calls issued behind others, go to
  // the worker so that they overlap the caller's work; with one rank per process a Wait on such
  // a call before the worker started it runs it (and the calls queued before it) on the waiting
  // thread instead (Work::Wait: 4 processes, 128 KiB, auto / MPI_Allreduce 1.36-1.39 ->
  // 1.08-1.13 in paired launches). Negative: every call goes to the worker
  // (needed when one thread issues several ranks' calls, as tests of in-process worlds do).
  // kInlineAuto: kInlineDefaultBytes when the transport has one rank per process (MPI), else
  // never.
  static constexpr long long kInlineAuto = -2;
  static constexpr long long kInlineDefaultBytes = 64 << 10;
  long long inline_max_bytes = kInlineAuto;
  // Where the transport has a tagged channel (Transport::signature_tag_max, MPI), the signature
  // round sends each call's signature as the tag of a message that holds only data, and the
  // full signatures travel only when the tags disagree (to name the calls); false: every
  // message carries the 48-byte signature (communicator.cc, ExchangeSignatures).
  bool tagged_signatures = true;
  // Ranks on several nodes (AcrossNodesMpiOptions): a small auto allreduce (at most
  // kInExchangeBytes, 4 ranks or more) runs by recursive doubling instead of in the all-to-all
  // signature round (InExchange::kDoubling): ceil(log2 n) rounds of one message per rank, each
  // carrying the data so far and the lowest and highest signature seen, where the all-to-all
  // sends n - 1 messages per rank that all cross the network. Every rank learns whether every
  // signature agreed; when not, a full signature round names the calls. A call of another
  // mode against it (a larger call) ends in the ranks' timeouts, naming the rank each waited
  // for, instead of the mismatch.
  bool doubling_exchange = false;
  // kAuto's cost model instead of the selector's formulas (cost_model.h); null: the installed
  // default (selector.h, SetDefaultCostModel: the simulator in the loom CLI and the Python
  // module) when default_cost_model is set and one is installed, else the formulas.
  std::shared_ptr<const CostModel> cost_model;
  bool default_cost_model = true;
};

// What every rank of one group shares: the topology, the ring order and the trees.
struct CommPlan {
  Topology topology = Topology::Uniform(1);
  std::vector<int> ring_order;
  std::vector<Tree> trees;        // trees[r]: the best tree rooted at r (algorithm kTree)
  std::vector<Tree> multi_trees;  // multi_trees[r]: rooted at r, built with the link penalty
  // channels[c]: the ring of channel c, one per NIC (algorithm kChannels, channels.h); empty on
  // a single machine.
  std::vector<std::vector<int>> channels;
  std::vector<std::string> notes;  // what fell back to what (no tree over real links, ...)

  static StatusOr<std::shared_ptr<const CommPlan>> Create(const Topology& topology,
                                                          double tree_link_penalty = 0.7);
};

class Communicator {
 public:
  // rank r of transport->nranks() ranks; plan->topology must have nranks devices.
  Communicator(std::unique_ptr<Transport> transport, std::shared_ptr<const CommPlan> plan,
               const CommunicatorOptions& options = {});
  // Lets every issued call finish (or time out), then stops the worker.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  const CommPlan& plan() const { return *plan_; }
  const CommunicatorOptions& options() const { return options_; }
  // The transport the calls run over (its name(), what it offers; not for moving data).
  const Transport& transport() const { return *transport_; }

  // Restricts the worker thread that runs this communicator's handed-off calls to `cpu` (see
  // base/cpu_affinity.h): a caller that pins its rank threads pins their workers beside them.
  Status PinWorkerToCpu(int cpu);

  // recv[i] = send[i] reduced over all ranks, count elements.
  Work AllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                 const CallOptions& options = {});
  // Like AllReduce, but only root's recv receives the result; recv may be null elsewhere.
  Work Reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root,
              const CallOptions& options = {});
  // recv = root's send on every rank; send is read on root only (may be null elsewhere).
  Work Broadcast(const void* send, void* recv, size_t count, DataType dtype, int root,
                 const CallOptions& options = {});
  // recv (nranks * count elements) = every rank's send (count elements) in rank order.
  Work AllGather(const void* send, void* recv, size_t count, DataType dtype,
                 const CallOptions& options = {});
  // recv (count elements) = block `rank` of the element-wise reduction of every rank's send
  // (nranks * count elements).
  Work ReduceScatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                     const CallOptions& options = {});
  // Point-to-point; a Send matches the peer's Recv with the same tag (>= 0), in posting order.
  Work Send(const void* data, size_t count, DataType dtype, int peer, int tag);
  Work Recv(void* data, size_t count, DataType dtype, int peer, int tag);
  // Completes once every rank has called it.
  Work Barrier();

  // Waits for every call issued so far; returns the first error among them.
  Status WaitAll(std::chrono::milliseconds timeout = std::chrono::hours(24 * 365));

  // The caller's training step, carried in the signature of every collective issued from now
  // on: ranks whose calls belong to different steps (one went on after an error) get an
  // immediate InvalidArgument naming both steps instead of pairing unrelated calls. The runner
  // sets it; 0 (never set) on every rank leaves the check out.
  void set_step(uint64_t step) { step_.store(step); }

  // This rank failed (`cause`): ends the group's communication at once, so that every rank's
  // pending and later calls fail with Aborted("rank R failed: cause") instead of waiting for
  // the timeout. Returns false when the transport cannot abort (the timeout still bounds the
  // wait). Any thread.
  bool Abort(const Status& cause);

 private:
  struct Call;
  Work Issue(Call call);
  // Resolves kAuto (and kNative where only it runs) and checks the call's arguments.
  Status PrepareCall(Call& call);
  Work Failed(Status status);
  void Remember(const Work& work);
  void WorkerLoop();
  // Runs the first queued call; `lock` holds mu_, the queue is not empty and no call runs.
  // Returns with `lock` released, the call completed.
  void RunFront(std::unique_lock<std::mutex>& lock);
  // Runs queued calls on the calling thread, in issue order, while the worker is idle, until
  // `target` has completed (Work::Wait: a caller that waits for a call the worker has not
  // started needs no hand-off).
  void RunQueuedUntil(const internal::WorkState& target);
  friend class Work;
  // Runs one call in issue order (worker or inline), started at `start` (its timeout counts from
  // there), and returns its final status.
  Status Execute(const Call& call, Clock::time_point start);
  Status Run(const Call& call, Clock::time_point start);

  std::unique_ptr<Transport> transport_;
  std::shared_ptr<const CommPlan> plan_;
  CommunicatorOptions options_;
  std::unique_ptr<const Selector> selector_;
  int rank_;
  int nranks_;
  // The signature round sends signatures as tags (CommunicatorOptions::tagged_signatures and a
  // transport with the channel).
  bool tagged_signatures_ = false;
  uint64_t next_seq_ = 1;
  std::atomic<uint64_t> step_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Call>, std::shared_ptr<internal::WorkState>>> queue_;
  bool stopping_ = false;
  std::atomic<size_t> queued_{0};  // queue_.size(), for the worker's polling
  // Hand-offs between the caller and the worker poll before they sleep (in-process worlds:
  // many rank threads per core; not with one rank per process, whose polling would take the
  // core from the peer processes).
  bool spin_handoff_ = true;
  // A Wait on a call still queued runs it on the waiting thread (one rank per process: MPI);
  // null elsewhere.
  std::shared_ptr<internal::StealGate> steal_gate_;
  bool busy_ = false;              // a call is running (worker or inline); guarded by mu_
  std::vector<Work> outstanding_;  // issued since the last WaitAll
  // The signature exchange's packets (ranks that do not meet), reused from call to call by
  // whoever runs the call (calls run one at a time).
  std::unique_ptr<unsigned char[]> packets_;
  // The request lists of the Schedule that runs the current call, kept between calls.
  std::unique_ptr<internal::ScheduleLists> schedule_lists_;
  // The tagged signature round's per-peer entries (tagged_signatures_), reused likewise.
  std::vector<Transport::TaggedPeer> tagged_peers_;
  Status broken_;  // whoever runs a call (busy_ hands it over under mu_)
  std::thread worker_;
};

}  // namespace loom::collective
