#include "sim/simulate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "collective/channels.h"
#include "collective/transport/inprocess.h"
#include "collective/tree_builder.h"

namespace loom::sim {

using collective::Algorithm;
using collective::Collective;
using collective::CommPlan;
using collective::Tree;

namespace {

// Algorithms beyond these sizes are not offered: a star's root or a multi-tree's n trees of n
// ranks make the replay quadratic, and Loom never runs them at that scale.
constexpr int kMaxStarRanks = 256;
// Direct sends n(n-1) messages per round: beyond this many devices a trace would hold millions.
constexpr int kMaxDirectRanks = 256;
constexpr int kMaxMultiTreeRanks = 64;
// Channels in auto: beyond this many devices their 2(N-1) steps on every NIC's ring (K times the
// ring's transfers to replay) lose to the rails' 2(per-1) + 2(nodes-1); `--algo channels` still
// replays them.
constexpr int kMaxAutoChannelsRanks = 512;

void Halve(const std::vector<int>& order, int lo, int hi, int level, Tree& tree) {
  if (hi - lo <= 1) return;
  const int half = (hi - lo + 1) / 2;
  tree.levels[level].push_back({order[lo], order[lo + half]});
  Halve(order, lo, lo + half, level + 1, tree);
  Halve(order, lo + half, hi, level + 1, tree);
}

// A balanced recursive-halving tree over `order` rotated to start at `root`.
Tree HalvingTree(const std::vector<int>& order, int root) {
  const int n = static_cast<int>(order.size());
  const int at = static_cast<int>(std::find(order.begin(), order.end(), root) - order.begin());
  std::vector<int> rotated(n);
  for (int i = 0; i < n; ++i) rotated[i] = order[(at + i) % n];
  Tree tree;
  tree.root = root;
  tree.levels.resize(collective::CeilLog2(n));
  Halve(rotated, 0, n, 0, tree);
  return tree;
}

// The plan of a cluster (`topology`: nodes x the node's devices): node-major ring through each
// node's ring order, halving trees over it, and the channel rings of the collective library
// (one per NIC, collective/channels.h).
StatusOr<std::shared_ptr<const CommPlan>> ClusterPlan(const collective::Topology& topology,
                                                      const std::vector<int>& node_ring,
                                                      bool multi_trees) {
  const int nodes = topology.nodes();
  const int per = static_cast<int>(node_ring.size());
  const int n = nodes * per;
  LOOM_ENFORCE(topology.size() == n, "a cluster plan of ", n, " devices for a topology of ",
               topology.size());
  auto plan = std::make_shared<CommPlan>();
  plan->topology = topology;
  for (int k = 0; k < nodes; ++k) {
    for (int d : node_ring) plan->ring_order.push_back(k * per + d);
  }
  for (int r = 0; r < n; ++r) plan->trees.push_back(HalvingTree(plan->ring_order, r));
  if (multi_trees) plan->multi_trees = plan->trees;
  plan->channels = collective::BuildChannelRings(topology);
  plan->notes.push_back("cluster plan: node-major ring, recursive-halving trees, channel rings");
  return std::shared_ptr<const CommPlan>(std::move(plan));
}

Algorithm LoomAlgorithm(const std::string& name) {
  if (name == "ring") return Algorithm::kRing;
  if (name == "tree") return Algorithm::kTree;
  if (name == "multi_tree") return Algorithm::kMultiTree;
  if (name == "star") return Algorithm::kStar;
  if (name == "direct") return Algorithm::kDirect;
  if (name == "channels") return Algorithm::kChannels;
  if (name == "rails") return Algorithm::kRails;
  return Algorithm::kAuto;
}

}  // namespace

std::vector<std::string> SimAlgorithmNames() {
  return {"ring",      "tree",      "multi_tree",     "star",   "direct",       "channels",
          "rails",     "exchange",  "split_exchange", "native", "hierarchical", "auto",
          "nccl_ring", "nccl_tree", "nccl",           "ps",     "ps_mpi"};
}

double BusFactor(Collective kind, int n) {
  switch (kind) {
    case Collective::kAllReduce: return n > 1 ? 2.0 * (n - 1) / n : 0;
    case Collective::kAllGather:
    case Collective::kReduceScatter: return n > 1 ? double(n - 1) / n : 0;
    default: return 1;
  }
}

StatusOr<Simulator> Simulator::Create(Machine machine, const SimOptions& options) {
  return Build(std::move(machine), options, nullptr);
}

StatusOr<Simulator> Simulator::ForPlan(Machine machine, const CommPlan& plan,
                                       const SimOptions& options) {
  LOOM_ENFORCE(plan.topology.size() == machine.size(), "a plan for ", plan.topology.size(),
               " ranks on a machine of ", machine.size());
  LOOM_ENFORCE(plan.topology.nodes() == machine.nodes(), "a plan for ", plan.topology.nodes(),
               " nodes on a machine of ", machine.nodes());
  return Build(std::move(machine), options, &plan);
}

StatusOr<Simulator> Simulator::Build(Machine machine, const SimOptions& options,
                                     const CommPlan* given) {
  LOOM_ENFORCE(options.chunk_bytes >= 1, "the pipeline chunk must be at least one byte");
  LOOM_ENFORCE(options.nccl_ll128_efficiency > 0 && options.nccl_ll128_efficiency <= 1,
               "NCCL's low-latency protocol efficiency must lie in (0, 1], got ",
               options.nccl_ll128_efficiency);
  LOOM_ENFORCE(options.nccl_launch_us >= 0 && std::isfinite(options.nccl_launch_us),
               "NCCL's launch cost must be a finite number of microseconds >= 0, got ",
               options.nccl_launch_us);
  Simulator sim;
  sim.options_ = options;
  sim.machine_ = std::make_shared<const Machine>(std::move(machine));
  const Machine& m = *sim.machine_;
  if (given != nullptr && m.nodes() == 1) {
    sim.node_plan_ = sim.plan_ = std::make_shared<const CommPlan>(*given);
    return sim;
  }
  LOOM_ASSIGN_OR_RETURN(sim.node_plan_, CommPlan::Create(m.node_topology()));
  if (m.nodes() == 1) {
    sim.plan_ = sim.node_plan_;
  } else {
    // The plan's links between nodes stand for the NICs (the machine prices them itself).
    const collective::Link nic = collective::Topology::LinkForWeight(1);
    LOOM_ASSIGN_OR_RETURN(
        collective::Topology cluster,
        collective::Topology::Cluster(m.node_topology(), m.nodes(), m.nics(), nic));
    LOOM_ASSIGN_OR_RETURN(sim.plan_, ClusterPlan(cluster, sim.node_plan_->ring_order,
                                                 m.size() <= kMaxMultiTreeRanks));
    LOOM_ASSIGN_OR_RETURN(
        collective::Topology leaders,
        collective::Topology::Cluster(collective::Topology::Uniform(1), m.nodes(), 1, nic));
    LOOM_ASSIGN_OR_RETURN(sim.leaders_plan_, ClusterPlan(leaders, {0}, false));
    if (given != nullptr) sim.plan_ = std::make_shared<const CommPlan>(*given);
  }
  return sim;
}

StatusOr<Trace> Simulator::AroundNodes(size_t bytes, const Trace& middle,
                                       const std::vector<int>& extra_devices) const {
  const Machine& m = *machine_;
  const int per = m.devices_per_node(), n = m.size();
  const int extra = static_cast<int>(extra_devices.size());
  CallSpec call;
  call.bytes = bytes;
  call.chunk_bytes = options_.chunk_bytes;
  call.root = 0;
  call.algorithm = Algorithm::kTree;
  call.root_copy_first = options_.root_copy_first;
  call.kind = Collective::kReduce;
  LOOM_ASSIGN_OR_RETURN(Trace reduce, Capture(*node_plan_, call));
  call.kind = Collective::kBroadcast;
  LOOM_ASSIGN_OR_RETURN(Trace broadcast, Capture(*node_plan_, call));
  Trace out;
  out.ranks.resize(n + extra);
  out.handles.assign(n + extra, 0);
  if (extra > 0) {
    for (int r = 0; r < n; ++r) out.device.push_back(r);
    out.device.insert(out.device.end(), extra_devices.begin(), extra_devices.end());
  }
  std::vector<int> members(per), middle_members;
  for (int k = 0; k < m.nodes(); ++k) {
    for (int d = 0; d < per; ++d) members[d] = k * per + d;
    if (per > 1) LOOM_RETURN_IF_ERROR(Append(out, reduce, members));
    middle_members.push_back(k * per);
  }
  for (int e = 0; e < extra; ++e) middle_members.push_back(n + e);
  LOOM_RETURN_IF_ERROR(Append(out, middle, middle_members));
  for (int k = 0; k < m.nodes() && per > 1; ++k) {
    for (int d = 0; d < per; ++d) members[d] = k * per + d;
    LOOM_RETURN_IF_ERROR(Append(out, broadcast, members));
  }
  return out;
}

StatusOr<Trace> Simulator::Hierarchical(Collective kind, size_t bytes) const {
  const Machine& m = *machine_;
  LOOM_ENFORCE(kind == Collective::kAllReduce, "hierarchical runs allreduce only, not ",
               CollectiveName(kind));
  LOOM_ENFORCE(m.nodes() > 1, "hierarchical needs a cluster (", m.name(), " is one node)");
  CallSpec call;
  call.kind = Collective::kAllReduce;
  call.bytes = bytes;
  call.chunk_bytes = options_.chunk_bytes;
  call.algorithm = Algorithm::kRing;
  LOOM_ASSIGN_OR_RETURN(Trace across, Capture(*leaders_plan_, call));
  return AroundNodes(bytes, across, {});
}

std::vector<int> Simulator::ChannelOrder(int c) const {
  const std::vector<int>& ring = node_plan_->ring_order;
  const int per = static_cast<int>(ring.size());
  // Prefer a start whose ring predecessor (where the ring leaves the node) is on the same NIC.
  int start = -1;
  for (int p = 0; p < per && start < 0; ++p) {
    if (machine_->nic_of(ring[p]) == c && machine_->nic_of(ring[(p + per - 1) % per]) == c)
      start = p;
  }
  for (int p = 0; p < per && start < 0; ++p) {
    if (machine_->nic_of(ring[p]) == c) start = p;
  }
  if (start < 0) start = c % per;
  std::vector<int> order(per);
  for (int i = 0; i < per; ++i) order[i] = ring[(start + i) % per];
  return order;
}

namespace {

// Splits `bytes` over `parts` in whole units (the last part takes what is left).
std::vector<size_t> SplitBytes(size_t bytes, int parts, size_t unit) {
  std::vector<size_t> out(parts, bytes / unit / parts * unit);
  out.back() = bytes - out[0] * (parts - 1);
  return out;
}

// Posts, waits and copies of a hand-written schedule, one list per rank.
class TraceBuilder {
 public:
  explicit TraceBuilder(int n) {
    t_.ranks.resize(n);
    t_.handles.assign(n, 0);
    t_.parts = 1;
  }
  // Posts a send, receive or receive-and-reduce; returns its handle. `addr` and `addr2` as
  // TraceOp's (0: not recorded).
  int Post(int rank, TraceOp::Kind kind, int peer, uint64_t tag, uint64_t bytes, uint64_t addr = 0,
           uint64_t addr2 = 0) {
    TraceOp op;
    op.kind = kind;
    op.peer = peer;
    op.tag = tag;
    op.bytes = bytes;
    op.addr = addr;
    op.addr2 = addr2;
    op.handle = t_.handles[rank]++;
    t_.ranks[rank].push_back(op);
    return op.handle;
  }
  void Wait(int rank, int handle) {
    TraceOp op;
    op.kind = TraceOp::kWait;
    op.handle = handle;
    t_.ranks[rank].push_back(op);
  }
  // Waits for every handle of `rank` from `from` on.
  void WaitFrom(int rank, int from) {
    for (int h = from; h < t_.handles[rank]; ++h) Wait(rank, h);
  }
  void Copy(int rank, uint64_t bytes, uint64_t dst = 0, uint64_t src = 0) {
    TraceOp op;
    op.kind = TraceOp::kCopy;
    op.bytes = bytes;
    op.addr = dst;
    op.addr2 = src;
    t_.ranks[rank].push_back(op);
  }
  void Reduce(int rank, uint64_t bytes) {
    TraceOp op;
    op.kind = TraceOp::kReduce;
    op.bytes = bytes;
    t_.ranks[rank].push_back(op);
  }
  void Fault(int rank, uint64_t bytes) {
    TraceOp op;
    op.kind = TraceOp::kFault;
    op.bytes = bytes;
    t_.ranks[rank].push_back(op);
  }
  int handles(int rank) const { return t_.handles[rank]; }
  std::vector<int>& device() { return t_.device; }
  Trace Take() { return std::move(t_); }

 private:
  Trace t_;
};

// One round in which every rank sends `bytes` to every other and receives (or receives and
// reduces) as much from each: the MPI communicator's signature round (empty messages, as
// signatures travel as tags) and its exchange of small calls.
Trace AllToAllRound(int n, size_t bytes, TraceOp::Kind receive) {
  TraceBuilder t(n);
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      if (p != r) t.Post(r, receive, p, 1, bytes);
    }
    for (int p = 0; p < n; ++p) {
      if (p != r) t.Post(r, TraceOp::kSend, p, 1, bytes);
    }
    t.WaitFrom(r, 0);
  }
  return t.Take();
}

}  // namespace

StatusOr<Trace> Simulator::NcclRing(Collective kind, size_t bytes, int root) const {
  const Machine& m = *machine_;
  const int n = m.size(), per = m.devices_per_node(), c_count = channels();
  const size_t elem = collective::DataTypeSize(collective::DataType::kFloat32);
  const bool split = kind == Collective::kAllGather || kind == Collective::kReduceScatter;
  const std::vector<size_t> part = SplitBytes(bytes, c_count, split ? elem * n : elem);
  std::vector<Trace> parts;
  for (int c = 0; c < c_count; ++c) {
    if (part[c] == 0) continue;
    const std::vector<int> order = ChannelOrder(c);
    CommPlan plan;
    plan.topology = collective::Topology::Uniform(n, 1);
    for (int k = 0; k < m.nodes(); ++k) {
      for (int d : order) plan.ring_order.push_back(k * per + d);
    }
    CallSpec call;
    call.kind = kind;
    call.bytes = part[c];
    call.root = root;
    call.algorithm = Algorithm::kRing;
    call.chunk_bytes = options_.chunk_bytes;
    LOOM_ASSIGN_OR_RETURN(Trace t, Capture(plan, call));
    parts.push_back(std::move(t));
  }
  return Stack(parts);
}

StatusOr<Trace> Simulator::NcclTree(Collective kind, size_t bytes) const {
  const Machine& m = *machine_;
  LOOM_ENFORCE(kind == Collective::kAllReduce, "nccl_tree runs allreduce only, not ",
               CollectiveName(kind));
  const int n = m.size(), per = m.devices_per_node(), nodes = m.nodes(), c_count = channels();
  const size_t elem = collective::DataTypeSize(collective::DataType::kFloat32);
  const std::vector<size_t> part = SplitBytes(bytes, 2 * c_count, elem);
  std::vector<Trace> parts;
  for (int c = 0; c < c_count; ++c) {
    const std::vector<int> chain = ChannelOrder(c);
    for (int mirrored = 0; mirrored < 2; ++mirrored) {
      const size_t b = part[2 * c + mirrored];
      if (b == 0) continue;
      // Children of each device: binary-tree children heads (heap layout over the nodes, the
      // mirror over the nodes reversed), then the next device of the node's chain.
      std::vector<std::vector<int>> children(n);
      auto node_at = [&](int i) { return mirrored ? nodes - 1 - i : i; };
      for (int i = 0; i < nodes; ++i) {
        const int head = node_at(i) * per + chain[0];
        for (int ci : {2 * i + 1, 2 * i + 2}) {
          if (ci < nodes) children[head].push_back(node_at(ci) * per + chain[0]);
        }
        for (int j = 0; j + 1 < per; ++j) {
          children[node_at(i) * per + chain[j]].push_back(node_at(i) * per + chain[j + 1]);
        }
      }
      Tree tree;
      tree.root = node_at(0) * per + chain[0];
      // Each device's edge to child i sits one level past its edge to its parent (plus i):
      // every device has at most one partner per level, subtrees sit deeper than their edge.
      std::vector<std::pair<int, int>> stack{{tree.root, -1}};
      while (!stack.empty()) {
        const auto [v, level] = stack.back();
        stack.pop_back();
        for (size_t i = 0; i < children[v].size(); ++i) {
          const int l = level + 1 + static_cast<int>(i);
          if (static_cast<int>(tree.levels.size()) <= l) tree.levels.resize(l + 1);
          tree.levels[l].push_back({v, children[v][i]});
          stack.push_back({children[v][i], l});
        }
      }
      CallSpec call;
      call.kind = kind;
      call.bytes = b;
      call.algorithm = Algorithm::kTree;
      call.chunk_bytes = options_.chunk_bytes;
      LOOM_ASSIGN_OR_RETURN(Trace t, CaptureTreeAllReduce(*plan_, tree, call));
      parts.push_back(std::move(t));
    }
  }
  return Stack(parts);
}

namespace {

// Push and pull through parameter servers: trace ranks 0 .. workers-1 run on `worker_devices`,
// workers .. workers+servers-1 on `server_devices`. Every worker pushes shard s of its buffer
// to server s; each server sums the shards as they arrive and, once all have, sends the sum
// back to every worker.
Trace PushPull(const std::vector<int>& worker_devices, const std::vector<int>& server_devices,
               size_t bytes) {
  const int n = static_cast<int>(worker_devices.size());
  const int servers = static_cast<int>(server_devices.size());
  const size_t elem = collective::DataTypeSize(collective::DataType::kFloat32);
  const std::vector<size_t> shard = SplitBytes(bytes, servers, elem);
  TraceBuilder t(n + servers);
  t.device() = worker_devices;
  t.device().insert(t.device().end(), server_devices.begin(), server_devices.end());
  constexpr uint64_t kPush = 1, kPull = 2;
  for (int w = 0; w < n; ++w) {
    for (int s = 0; s < servers; ++s) {
      if (shard[s] > 0) t.Post(w, TraceOp::kSend, n + s, kPush, shard[s]);
    }
    for (int s = 0; s < servers; ++s) {
      if (shard[s] > 0) t.Post(w, TraceOp::kRecv, n + s, kPull, shard[s]);
    }
    t.WaitFrom(w, 0);
  }
  for (int s = 0; s < servers; ++s) {
    if (shard[s] == 0) continue;
    const int rank = n + s;
    for (int w = 0; w < n; ++w) t.Post(rank, TraceOp::kRecvReduce, w, kPush, shard[s]);
    t.WaitFrom(rank, 0);
    const int sends = t.handles(rank);
    for (int w = 0; w < n; ++w) t.Post(rank, TraceOp::kSend, w, kPull, shard[s]);
    t.WaitFrom(rank, sends);
  }
  return t.Take();
}

}  // namespace

std::vector<int> Simulator::ServerDevices() const {
  const Machine& m = *machine_;
  std::vector<int> out;
  if (m.servers() > 0) {
    for (int s = 0; s < m.servers(); ++s) out.push_back(m.size() + s);
  } else {
    for (int k = 0; k < m.nodes(); ++k) out.push_back(k * m.devices_per_node());
  }
  return out;
}

StatusOr<Trace> Simulator::ParameterServers(Collective kind, size_t bytes) const {
  LOOM_ENFORCE(kind == Collective::kAllReduce, "ps runs push + pull (allreduce) only, not ",
               CollectiveName(kind));
  const size_t elem = collective::DataTypeSize(collective::DataType::kFloat32);
  LOOM_ENFORCE(bytes % elem == 0, "a ", bytes, "-byte call is not a whole number of fp32 elements");
  std::vector<int> workers(machine_->size());
  for (int r = 0; r < machine_->size(); ++r) workers[r] = r;
  return PushPull(workers, ServerDevices(), bytes);
}

StatusOr<Trace> Simulator::ParameterServersMpi(Collective kind, size_t bytes) const {
  const Machine& m = *machine_;
  LOOM_ENFORCE(kind == Collective::kAllReduce, "ps_mpi runs push + pull (allreduce) only, not ",
               CollectiveName(kind));
  const size_t elem = collective::DataTypeSize(collective::DataType::kFloat32);
  LOOM_ENFORCE(bytes % elem == 0, "a ", bytes, "-byte call is not a whole number of fp32 elements");
  // Each node's workers are one MPI client: a tree reduce to the node's first device (the
  // client's rank 0), which pushes and pulls for the client, then a tree broadcast back.
  std::vector<int> leaders(m.nodes());
  for (int k = 0; k < m.nodes(); ++k) leaders[k] = k * m.devices_per_node();
  const std::vector<int> servers = ServerDevices();
  return AroundNodes(bytes, PushPull(leaders, servers, bytes), servers);
}

StatusOr<Trace> Simulator::Exchange(Collective kind, size_t bytes) const {
  const int n = machine_->size();
  const size_t elem = collective::DataTypeSize(collective::DataType::kFloat32);
  LOOM_ENFORCE(kind == Collective::kAllReduce, "exchange is simulated for allreduce only, not ",
               CollectiveName(kind));
  LOOM_ENFORCE(bytes % elem == 0, "a ", bytes, "-byte call is not a whole number of fp32 elements");
  if (collective::SignatureExchangeMode(kind, bytes / elem, collective::DataType::kFloat32, n) !=
      collective::InExchange::kWhole) {
    return Unimplemented(
        "exchange replays the allreduce calls Loom's MPI communicator sends whole "
        "inside its signature round (at most ",
        collective::kInExchangeBytes, " bytes, ", collective::kInExchangeTotalBytes,
        " to all peers), not a ", bytes, "-byte ", CollectiveName(kind), " on ", n, " ranks");
  }
  return AllToAllRound(n, bytes, TraceOp::kRecvReduce);
}

// Whether the in-process native pass writes the outputs of a call of `kind` with `bytes`
// (nccl-tests' size) on n ranks with streaming stores (InProcessTransport::RunNative).
bool NativeStreams(Collective kind, size_t bytes, int n) {
  const double out = kind == Collective::kReduce || kind == Collective::kReduceScatter
                         ? static_cast<double>(bytes)
                         : static_cast<double>(bytes) * n;
  return out >= static_cast<double>(collective::kInProcessNativeStreamingBytes);
}

// Whether the in-process native pass on host m runs a call of `kind` with `bytes` from copies
// in the meeting (every rank's input at most its inline bytes: the transport's RunsFromCopies).
bool NativeFromCopies(const Machine& m, Collective kind, size_t bytes) {
  const double input = kind == Collective::kAllGather ? static_cast<double>(bytes) / m.size()
                                                      : static_cast<double>(bytes);
  return input <= m.native_inline_bytes();
}

// Open MPI's MPI_Iallreduce (coll/libnbc, nbc_iallreduce.c) on n ranks, `bytes` of fp32: below
// 4 ranks or 64 KiB the binomial schedule (a binomial tree reduce to rank 0, each receive
// reduced into the running sum, then a binomial broadcast), otherwise the reduce-scatter by
// recursive halving and allgather by recursive doubling (power-of-two rank counts), which
// first copies the input to the output. Every message is whole (no pipelining); a round's
// posts complete before the next round's. Each call mallocs a temporary of the whole buffer;
// beyond glibc's largest dynamic mmap threshold it is fresh memory every call, and the pages a
// rank receives into are faulted in (kFault).
bool LibnbcTemporaryIsFresh(size_t bytes) {
  // glibc (malloc.c): a free()d mmapped chunk raises the mmap threshold to its size, so that
  // later requests that size come from the heap, only up to DEFAULT_MMAP_THRESHOLD_MAX (32 MiB
  // on 64-bit); a chunk is the request plus an 8-byte header, in whole pages.
  constexpr double kMmapThresholdMax = 32.0 * 1024 * 1024;
  return std::ceil((static_cast<double>(bytes) + 8) / 4096) * 4096 > kMmapThresholdMax;
}

// The libnbc trace's buffers on every rank (TraceOp::addr: meaningful per rank): the input,
// the output and the temporary, each at a distance of its own.
constexpr uint64_t kLibnbcInput = uint64_t{1} << 40, kLibnbcOutput = uint64_t{2} << 40,
                   kLibnbcTemporary = uint64_t{3} << 40;

namespace {

// Rank `rank`'s part of the binomial schedule (below 4 ranks or 64 KiB) on n ranks, maxr
// rounds.
void LibnbcBinomialRank(TraceBuilder& t, int rank, int n, int maxr, size_t bytes) {
  const uint64_t b = bytes;
  // The receives alternate between the temporary and the output, the temporary first where
  // maxr is even (the result ends in the output); each reduces into itself the sum so far
  // (the input before the first), and a rank sends up the sum it holds.
  int received = 0;
  uint64_t sum = kLibnbcInput;
  for (int r = 1; r <= maxr; ++r) {  // up: receive from vrank + 2^(r-1) or send and leave
    if (rank % (1 << r) == 0) {
      const int peer = rank + (1 << (r - 1));
      if (peer >= n) continue;
      const bool temporary = (++received % 2 == 1) == (maxr % 2 == 0);
      if (temporary && received <= 2 && LibnbcTemporaryIsFresh(bytes)) t.Fault(rank, b);
      const uint64_t into = temporary ? kLibnbcTemporary : kLibnbcOutput;
      t.Wait(rank, t.Post(rank, TraceOp::kRecvReduce, peer, 1, b, into, sum));
      sum = into;
    } else {
      t.Wait(rank, t.Post(rank, TraceOp::kSend, rank - (1 << (r - 1)), 1, b, sum));
      break;
    }
  }
  if (rank != 0) {  // down: receive from the parent, then send to the children
    for (int r = 0; r < maxr; ++r) {
      if (rank >= (1 << r) && rank < (1 << (r + 1))) {
        t.Wait(rank, t.Post(rank, TraceOp::kRecv, rank - (1 << r), 2, b, kLibnbcOutput));
      }
    }
  }
  std::vector<int> sends;
  for (int r = 0; r < maxr; ++r) {
    if ((rank + (1 << r) < n && rank < (1 << r)) || rank == 0) {
      sends.push_back(t.Post(rank, TraceOp::kSend, rank + (1 << r), 2, b, kLibnbcOutput));
    }
  }
  for (int h : sends) t.Wait(rank, h);
}

// Rank `rank`'s part of the reduce-scatter by recursive halving and allgather by recursive
// doubling on n ranks (a power of two, 2^maxr).
void LibnbcHalvingDoublingRank(TraceBuilder& t, int rank, int n, int maxr, size_t bytes) {
  const uint64_t b = bytes;
  const uint64_t elem = collective::DataTypeSize(collective::DataType::kFloat32);
  const uint64_t count = b / elem;
  // Out of place, the schedule starts with a copy of the whole input to the output, which
  // the halving then reduces into.
  t.Copy(rank, b, kLibnbcOutput, kLibnbcInput);
  // The first step receives half the buffer into the temporary; later steps reuse its pages.
  if (LibnbcTemporaryIsFresh(bytes)) t.Fault(rank, (count - count / 2) * elem);
  // Recursive halving: the window of elements this rank still reduces halves each step; the
  // half it keeps is received (and reduced into the output), the other half sent to the
  // partner from the output.
  uint64_t lo = 0, hi = count;
  std::vector<std::pair<uint64_t, uint64_t>> windows;
  for (int mask = 1, step = 0; mask < n; mask <<= 1, ++step) {
    const int peer = rank ^ mask;
    const uint64_t mid = lo + (hi - lo) / 2;
    const bool low = rank < peer;
    const uint64_t keep = low ? mid - lo : hi - mid, give = (hi - lo) - keep;
    const uint64_t kept = kLibnbcOutput + (low ? lo : mid) * elem;
    const uint64_t given = kLibnbcOutput + (low ? mid : lo) * elem;
    const int recv = t.Post(rank, TraceOp::kRecvReduce, peer, 10 + step, keep * elem, kept, kept);
    const int send = t.Post(rank, TraceOp::kSend, peer, 10 + step, give * elem, given);
    t.Wait(rank, recv);
    t.Wait(rank, send);
    windows.emplace_back(lo, hi);
    (low ? hi : lo) = mid;  // the half this rank keeps
  }
  // Recursive doubling back: each step sends the window held and receives the partner's.
  for (int mask = n >> 1, step = maxr - 1; mask >= 1; mask >>= 1, --step) {
    const int peer = rank ^ mask;
    const auto [wlo, whi] = windows[step];
    const uint64_t held = hi - lo, other = (whi - wlo) - held;
    // The partner's part of the window: the other side of the part held.
    const uint64_t other_at = kLibnbcOutput + (lo == wlo ? hi : wlo) * elem;
    const int recv = t.Post(rank, TraceOp::kRecv, peer, 20 + step, other * elem, other_at);
    const int send =
        t.Post(rank, TraceOp::kSend, peer, 20 + step, held * elem, kLibnbcOutput + lo * elem);
    t.Wait(rank, recv);
    t.Wait(rank, send);
    lo = wlo;
    hi = whi;
  }
}

}  // namespace

StatusOr<Trace> LibnbcAllReduce(int n, size_t bytes) {
  TraceBuilder t(n);
  int maxr = 0;
  while ((1 << maxr) < n) ++maxr;
  if (n < 4 || bytes < (size_t{64} << 10)) {
    for (int rank = 0; rank < n; ++rank) LibnbcBinomialRank(t, rank, n, maxr, bytes);
    return t.Take();
  }
  if ((n & (n - 1)) != 0) {
    return Unimplemented("Open MPI's allreduce on ", n,
                         " ranks (not a power of two) is not simulated from 64 KiB on");
  }
  for (int rank = 0; rank < n; ++rank) LibnbcHalvingDoublingRank(t, rank, n, maxr, bytes);
  return t.Take();
}

namespace {

// A checked call of the in-process native pass (native=pass) on n ranks.
struct NativeCall {
  Collective kind;
  size_t bytes;
  int n, root;
  bool gathers;  // allgather or reduce-scatter: the buffer is n parts
  // Each rank's part of an allgather's output or a reduce-scatter's input; the buffer otherwise.
  double part;
  double Input(int r) const {  // bytes of rank r's input
    switch (kind) {
      case Collective::kBroadcast: return r == root ? part : 0.0;
      case Collective::kReduceScatter: return part * n;
      default: return part;
    }
  }
};

// What the pass prices per byte of an operand-sized piece (NativePieceCost).
struct NativePiece {
  double reductions = 0;  // 1: summed as one reduction of the piece; 0: no sum, or as traffic
  double stored = 0;      // piece-sized reads and writes priced as copies (two to a copy)
  double streamed = 1;    // what the pass's stores cost against a copy's (streaming stores)
};

// A streaming pass reads its inputs from the last-level cache where every rank's inputs
// together take at most half of it (the streamed outputs do not displace them; a larger
// share is evicted by what else runs, measured: 4 MiB on 4 ranks, inputs 16 MiB of a 32 MiB
// cache, runs 1.4x the memory's rates, 16 MiB on 2 ranks, 32 MiB, at them): its reads
// cost the inputs' working set's shared copy rate against the memory's, at which the pass
// is priced.
double NativeStreamedReadCost(const Machine& m, double inputs) {
  if (inputs > m.cache_bytes() / 2) return 1;
  const double memory =
      m.ForWorkingSet(std::numeric_limits<double>::infinity()).host_shared_copy_gbps();
  const double cached = m.ForWorkingSet(inputs).host_shared_copy_gbps();
  return memory > 0 && cached > memory ? memory / cached : 1;
}

// What one operand-sized piece of `len` bytes reads and writes: an allreduce reads N inputs
// and writes N outputs, a reduce or reduce-scatter reads N and writes 1, a broadcast or
// allgather reads 1 and writes N; as local copies, (reads + writes) / 2 pieces (a copy reads
// and writes each byte once). A reduction sums its piece in L1 (the first two inputs, then
// each further one into the sum) and stores the sum to each output: where its data comes
// from the caches the summing is priced as one reduction of the piece at the reduce rates
// (which price reading two operands and writing one: the reduce kernel, slower than a copy
// there) and the further inputs and the outputs as copies. Streaming stores (outputs beyond
// the caches) skip the read of each written line that a copy's store makes: of the copy's
// memory traffic (a read, the written line's read, the write per byte) they leave
// (read + written) / (read + 2 written), unless the host says what they cost
// (HostProtocol::stream, calibrated), and run at the memory's rates (Simulate: the host's
// largest working set), as their lines bypass the caches; the memory then bounds the pass,
// and the summing is priced as the traffic it makes.
NativePiece NativePieceCost(const Machine& m, const NativeCall& call) {
  const Collective kind = call.kind;
  const int n = call.n;
  const double reads = kind == Collective::kBroadcast || kind == Collective::kAllGather ? 1 : n;
  const double writes = kind == Collective::kAllReduce || reads == 1 ? n : 1;
  const bool streams = NativeStreams(kind, call.bytes, n);
  NativePiece piece;
  piece.reductions = reads > 1 && !streams ? 1 : 0;
  double read_cost = 1;
  if (streams && m.host()) {
    double inputs = 0;
    for (int r = 0; r < n; ++r) inputs += call.Input(r);
    read_cost = NativeStreamedReadCost(m, inputs);
  }
  piece.stored = piece.reductions > 0 ? writes + reads - 2 : reads * read_cost + writes;
  piece.streamed = !streams         ? 1.0
                   : m.stream() > 0 ? m.stream()
                                    : (reads + writes) / (reads + 2 * writes);
  return piece;
}

// What each rank of the pass does, in bytes.
struct NativeWork {
  explicit NativeWork(int n) : copy_in(n, 0), reduced(n, 0), share(n, 0) {}
  std::vector<double> copy_in;  // its input copied into the meeting
  std::vector<double> reduced;  // reduce bytes
  std::vector<double> share;    // copy bytes
};

// Every rank leaves its input in the meeting and then computes its own output from the
// copies (a reduce: the root alone): it reads every copy it needs and writes its output.
void NativeFromCopiesWork(const NativeCall& call, const NativePiece& piece, NativeWork* work) {
  const double part = call.part;
  // allreduce, reduce, reduce-scatter: n parts summed as above, one output written.
  double read = part * call.n, written = part;
  switch (call.kind) {
    case Collective::kBroadcast: read = part; break;
    case Collective::kAllGather: read = written = part * call.n; break;
    default: break;
  }
  for (int r = 0; r < call.n; ++r) {
    work->copy_in[r] = call.Input(r);
    if (call.kind == Collective::kReduce && r != call.root) continue;
    if (piece.reductions > 0) {
      work->reduced[r] = part;
      work->share[r] = (read - 2 * part + written) / 2;
    } else {
      work->share[r] = (read + written) / 2;
    }
  }
}

// The transport's cut (NativeBlockElements: smaller blocks where a call has fewer than the
// ranks that run at once), the blocks dealt round-robin.
void NativeBlocksWork(const Machine& m, const NativeCall& call, const NativePiece& piece,
                      NativeWork* work) {
  const size_t elem = collective::DataTypeSize(collective::DataType::kFloat32);
  const int n = call.n;
  const int parts = call.gathers ? n : 1;
  const size_t count = static_cast<size_t>(call.part) / elem;
  const int workers = m.host() ? std::min(n, m.host_core_count()) : n;
  const double block =
      static_cast<double>(collective::NativeBlockElements(count, elem, parts, workers) * elem);
  const size_t per_part = static_cast<size_t>(std::ceil(call.part / block));
  for (size_t b = 0; b < per_part * parts; ++b) {
    const double len = std::min(block, call.part - static_cast<double>(b % per_part) * block);
    const int r = static_cast<int>(b % n);
    work->share[r] += piece.stored * len / 2 * piece.streamed;
    work->reduced[r] += piece.reductions * len;
  }
}

// The in-process native pass of `call` on host m.
Trace NativePassTrace(const Machine& m, const NativeCall& call) {
  const NativePiece piece = NativePieceCost(m, call);
  NativeWork work(call.n);
  const bool from_copies = NativeFromCopies(m, call.kind, call.bytes);
  if (from_copies) {
    NativeFromCopiesWork(call, piece, &work);
  } else {
    NativeBlocksWork(m, call, piece, &work);
  }
  TraceBuilder t(call.n);
  for (int r = 0; r < call.n; ++r) {
    if (work.copy_in[r] > 0) t.Copy(r, static_cast<uint64_t>(std::llround(work.copy_in[r])));
    if (work.reduced[r] > 0) t.Reduce(r, static_cast<uint64_t>(std::llround(work.reduced[r])));
    if (work.share[r] > 0) t.Copy(r, static_cast<uint64_t>(std::llround(work.share[r])));
  }
  Trace out = t.Take();
  // A pass of blocks waits, after the meeting, until every rank's blocks are written.
  if (!from_copies) out.start_us = m.native_wait_us();
  return out;
}

}  // namespace

StatusOr<Trace> Simulator::Native(Collective kind, size_t bytes, int root) const {
  const Machine& m = *machine_;
  const int n = m.size();
  const HostProtocol::Native native = m.host() ? m.native() : HostProtocol::Native::kNone;
  if (native == HostProtocol::Native::kNone) {
    return Unimplemented(
        "native is simulated on hosts whose spec says what the transport's native collectives "
        "are (native=pass: Loom's in-process pass over shared memory; native=libnbc: Open "
        "MPI's), not on ",
        m.name(), "; NCCL's native collectives are nccl_ring, nccl_tree and nccl");
  }
  if (native == HostProtocol::Native::kLibnbc) {
    if (kind != Collective::kAllReduce) {
      return Unimplemented("Open MPI's native ", CollectiveName(kind),
                           " is not simulated (allreduce is)");
    }
    const size_t elem = collective::DataTypeSize(collective::DataType::kFloat32);
    LOOM_ENFORCE(bytes % elem == 0, "a ", bytes,
                 "-byte call is not a whole number of fp32 elements");
    return LibnbcAllReduce(n, bytes);
  }
  if (root < 0 || root >= n) return InvalidArgument("root ", root, " is not a rank of ", n);
  const size_t elem = collective::DataTypeSize(collective::DataType::kFloat32);
  LOOM_ENFORCE(bytes % elem == 0, "a ", bytes, "-byte call is not a whole number of fp32 elements");
  const bool gathers = kind == Collective::kAllGather || kind == Collective::kReduceScatter;
  if (gathers && bytes % (elem * n) != 0) {
    return InvalidArgument("a ", bytes, "-byte ", CollectiveName(kind), " does not split into ", n,
                           " equal parts of whole fp32 elements");
  }
  const double part = gathers ? static_cast<double>(bytes) / n : static_cast<double>(bytes);
  return NativePassTrace(m, NativeCall{kind, bytes, n, root, gathers, part});
}

StatusOr<Trace> Simulator::TraceOf(Collective kind, const std::string& algorithm, size_t bytes,
                                   int root) const {
  const int n = machine_->size();
  if (algorithm == "hierarchical") return Hierarchical(kind, bytes);
  if (algorithm == "native") return Native(kind, bytes, root);
  if (algorithm == "exchange") return Exchange(kind, bytes);
  if (algorithm == "split_exchange") {
    const size_t elem = collective::DataTypeSize(collective::DataType::kFloat32);
    if (bytes % elem != 0 ||
        collective::SignatureExchangeMode(kind, bytes / elem, collective::DataType::kFloat32, n) !=
            collective::InExchange::kSplit) {
      return Unimplemented(
          "split_exchange replays the allreduce calls Loom's MPI communicator "
          "splits inside its signature round (blocks of at most ",
          collective::kInExchangeBytes, " bytes), not a ", bytes, "-byte ", CollectiveName(kind),
          " on ", n, " ranks");
    }
    CallSpec call;
    call.kind = kind;
    call.bytes = bytes;
    call.algorithm = Algorithm::kDirect;  // the same two rounds, the first with the signatures
    call.chunk_bytes = options_.chunk_bytes;
    return Capture(*plan_, call);
  }
  if (algorithm == "nccl_ring") return NcclRing(kind, bytes, root);
  if (algorithm == "nccl_tree") return NcclTree(kind, bytes);
  if (algorithm == "ps") return ParameterServers(kind, bytes);
  if (algorithm == "ps_mpi") return ParameterServersMpi(kind, bytes);
  const Algorithm a = LoomAlgorithm(algorithm);
  if (a == Algorithm::kAuto) {
    std::string known;
    for (const std::string& name : SimAlgorithmNames()) known += (known.empty() ? "" : ", ") + name;
    return InvalidArgument("unknown algorithm '", algorithm, "' (one of: ", known, ")");
  }
  if (a == Algorithm::kStar && n > kMaxStarRanks) {
    return InvalidArgument("star is not simulated beyond ", kMaxStarRanks, " devices (", n,
                           " here): its root meets every peer one after another");
  }
  if (a == Algorithm::kDirect && n > kMaxDirectRanks) {
    return InvalidArgument("direct is not simulated beyond ", kMaxDirectRanks, " devices (", n,
                           " here): every rank exchanges with every other in each round");
  }
  if (a == Algorithm::kMultiTree && plan_->multi_trees.size() != static_cast<size_t>(n)) {
    return InvalidArgument("multi_tree is not simulated on clusters beyond ", kMaxMultiTreeRanks,
                           " devices (", n, " here); Loom runs hierarchical collectives there");
  }
  CallSpec call;
  call.kind = kind;
  call.bytes = bytes;
  call.root = root;
  call.algorithm = a;
  call.chunk_bytes = options_.chunk_bytes;
  call.root_copy_first = options_.root_copy_first;
  call.in_place = options_.in_place;
  return Capture(*plan_, call);
}

StatusOr<CollectiveResult> Simulator::SimulateNccl(Collective kind, size_t bytes, int root) const {
  StatusOr<CollectiveResult> ring = Simulate(kind, "nccl_ring", bytes, root);
  if (!ring.ok() || kind != Collective::kAllReduce) return ring;
  StatusOr<CollectiveResult> tree = Simulate(kind, "nccl_tree", bytes, root);
  if (!tree.ok()) return tree;
  StatusOr<CollectiveResult> best = tree->time_us < ring->time_us ? tree : ring;
  best->algorithm = "nccl:" + best->algorithm.substr(5);
  return best;
}

StatusOr<CollectiveResult> Simulator::SimulateAuto(Collective kind, size_t bytes, int root) const {
  const int n = machine_->size();
  if (options_.mpi_exchange && kind == Collective::kAllReduce &&
      bytes % collective::DataTypeSize(collective::DataType::kFloat32) == 0) {
    // Loom's MPI communicator runs these calls inside its signature round, whatever else
    // might be faster.
    const collective::InExchange mode = collective::SignatureExchangeMode(
        kind, bytes / collective::DataTypeSize(collective::DataType::kFloat32),
        collective::DataType::kFloat32, n);
    if (mode != collective::InExchange::kNo) {
      StatusOr<CollectiveResult> r = Simulate(
          kind, mode == collective::InExchange::kWhole ? "exchange" : "split_exchange", bytes);
      if (r.ok()) r->algorithm = "auto:" + r->algorithm;
      return r;
    }
  }
  StatusOr<CollectiveResult> best =
      InvalidArgument("no algorithm runs ", CollectiveName(kind), " here");
  for (const std::string& name : SimAlgorithmNames()) {
    if (name == "auto" || name.rfind("ps", 0) == 0 || name.rfind("nccl", 0) == 0) continue;
    if (name == "exchange" || name == "split_exchange") continue;  // above
    if ((name == "star" || name == "direct") && n > 64) continue;
    if (name == "multi_tree" && (machine_->nodes() > 1 || n > kMaxMultiTreeRanks)) continue;
    if ((name == "channels" || name == "rails") && machine_->nodes() == 1) continue;  // the ring
    if (name == "channels" && n > kMaxAutoChannelsRanks) continue;
    if (name == "rails" && kind != Collective::kAllReduce) continue;
    if (name == "hierarchical" && (machine_->nodes() == 1 || kind != Collective::kAllReduce))
      continue;
    StatusOr<CollectiveResult> r = Simulate(kind, name, bytes, root);
    if (!r.ok()) {
      if (r.status().code() == StatusCode::kUnimplemented) continue;  // e.g. tree allgather
      return r.status();
    }
    if (!best.ok() || r->time_us < best->time_us) best = std::move(r);
  }
  if (best.ok()) best->algorithm = "auto:" + best->algorithm;
  return best;
}

const Machine& Simulator::MachineFor(Collective kind, const std::string& algorithm,
                                     size_t bytes) const {
  const int n = machine_->size();
  // A host runs each call at the rates of the memory it touches, every rank's send and receive
  // buffer (its ranks' local copies, a root's copy of its own buffer, are transfers there:
  // engine.h). An allgather's output and a reduce-scatter's input are `bytes`, the other side
  // bytes / n; the other collectives take bytes each way.
  // The in-process native pass's streaming stores bypass the caches: the memory's rates.
  // A pass of blocks through the caches runs at the pass's own rates where the host states
  // them. A call from copies in the meeting reads copies the other ranks have just written, as
  // a transfer does: the levels' rates.
  const double b = static_cast<double>(bytes);
  const bool pass = algorithm == "native" && machine_->host() &&
                    machine_->native() == HostProtocol::Native::kPass;
  const bool streams = pass && NativeStreams(kind, bytes, n);
  const Machine& host = pass && !streams && !NativeFromCopies(*machine_, kind, bytes) &&
                                machine_->native_pass() != nullptr
                            ? *machine_->native_pass()
                            : *machine_;
  return host.ForWorkingSet(streams ? std::numeric_limits<double>::infinity()
                            : kind == Collective::kAllGather || kind == Collective::kReduceScatter
                                ? b * (n + 1)
                                : 2 * b * n);
}

StatusOr<CollectiveResult> Simulator::Simulate(Collective kind, const std::string& algorithm,
                                               size_t bytes, int root) const {
  const int n = machine_->size();
  if (algorithm == "nccl") return SimulateNccl(kind, bytes, root);
  if (algorithm == "auto") return SimulateAuto(kind, bytes, root);
  LOOM_ASSIGN_OR_RETURN(Trace trace, TraceOf(kind, algorithm, bytes, root));
  std::string label = algorithm;
  if (algorithm == "nccl_ring" || algorithm == "nccl_tree") {
    // The protocol's flags and synchronisation: its data crosses the links at its share of
    // their rate, as if that many more bytes moved.
    const auto [protocol, efficiency] = NcclProtocol(options_, bytes);
    if (efficiency < 1) {
      for (std::vector<TraceOp>& ops : trace.ranks) {
        for (TraceOp& op : ops) {
          if (op.kind <= TraceOp::kRecvReduce)
            op.bytes = static_cast<uint64_t>(std::llround(op.bytes / efficiency));
        }
      }
    }
    trace.start_us = options_.nccl_launch_us;
    label += "/" + protocol;
  }
  if (options_.mpi_exchange &&
      (LoomAlgorithm(algorithm) != Algorithm::kAuto || algorithm == "native")) {
    // Loom's MPI communicator starts every call outside the exchange with its signature round
    // (its native calls too).
    Trace call = AllToAllRound(n, 0, TraceOp::kRecv);
    std::vector<int> everyone(n);
    for (int r = 0; r < n; ++r) everyone[r] = r;
    LOOM_RETURN_IF_ERROR(Append(call, trace, everyone));
    trace = std::move(call);
  }
  LOOM_ASSIGN_OR_RETURN(Replay replay,
                        ReplayTrace(MachineFor(kind, algorithm, bytes), trace, options_.engine));
  CollectiveResult out;
  out.algorithm = label;
  out.bytes = bytes;
  out.time_us = replay.time_us;
  out.transfers = replay.transfers;
  if (replay.time_us > 0) {
    out.algbw_gbps = bytes / (replay.time_us * 1e3);
    out.busbw_gbps = out.algbw_gbps * BusFactor(kind, n);
    out.bottleneck = replay.bottleneck_name;
    out.bottleneck_utilization = replay.bottleneck_busy_us / replay.time_us;
  }
  return out;
}

std::pair<std::string, double> NcclProtocol(const SimOptions& options, size_t bytes) {
  if (bytes <= options.nccl_ll128_max_bytes) return {"LL128", options.nccl_ll128_efficiency};
  return {"Simple", 1.0};
}

StatusOr<std::vector<size_t>> SizeSweep(size_t min, size_t max, double factor) {
  LOOM_ENFORCE(min >= 1 && min <= max, "sizes ", min, ":", max, " are not 1 <= MIN <= MAX");
  LOOM_ENFORCE(factor > 1 && std::isfinite(factor), "size factor ", factor, " must exceed 1");
  std::vector<size_t> out;
  for (double s = static_cast<double>(min); s <= static_cast<double>(max) * (1 + 1e-12);
       s *= factor) {
    out.push_back(static_cast<size_t>(std::llround(s)));
    LOOM_ENFORCE(out.size() <= 4096, "sizes ", min, ":", max, " by ", factor,
                 " make more than 4096 rows");
  }
  return out;
}

std::string FormatTable(const Machine& machine, Collective kind, collective::DataType dtype,
                        const std::vector<CollectiveResult>& rows) {
  std::string out =
      StrCat("# loom simulate: ", CollectiveName(kind), " on ", machine.Describe(), "\n");
  char line[512];
  std::snprintf(line, sizeof line, "#%14s %12s %8s %6s %6s %14s %12s %8s %8s  %s\n", "size",
                "count", "type", "redop", "root", "algorithm", "time(us)", "algbw", "busbw",
                "bottleneck (busy %)");
  out += line;
  const size_t elem = collective::DataTypeSize(dtype);
  const bool rooted = kind == Collective::kReduce || kind == Collective::kBroadcast;
  const bool reduces = kind != Collective::kBroadcast && kind != Collective::kAllGather;
  for (const CollectiveResult& r : rows) {
    std::snprintf(
        line, sizeof line, " %14zu %12zu %8s %6s %6s %14s %12.2f %8.2f %8.2f  %s (%.0f)\n", r.bytes,
        r.bytes / elem, collective::DataTypeName(dtype), reduces ? "sum" : "none",
        rooted ? "0" : "-1", r.algorithm.c_str(), r.time_us, r.algbw_gbps, r.busbw_gbps,
        r.bottleneck.empty() ? "-" : r.bottleneck.c_str(), 100 * r.bottleneck_utilization);
    out += line;
  }
  return out;
}

}  // namespace loom::sim
