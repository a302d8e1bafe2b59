// Ring algorithm (ranks in the topology's ring order; p = this rank's position).
//   reduce-scatter: N - 1 steps; at step k, position p sends chunk p-k-1 to the next position and
//     reduces chunk p-k-2 received from the previous one into its own. Afterwards position p holds
//     chunk p fully reduced.
//   all-gather: N - 1 steps; at step k, position p sends chunk p-k and receives chunk p-k-1.
//   allreduce = reduce-scatter + all-gather: each rank sends 2 (N-1)/N of the buffer.
// Every chunk moves in pieces; the piece i of step k is sent as soon as piece i of step k - 1
// arrived, so a large chunk streams instead of waiting for the whole previous step.
// Reduce and broadcast run as a pipelined chain along the ring (tree engine with a chain).
// Channels (RunChannels): the same steps on one ring per NIC (CommPlan::channels), channel c
// carrying stripe c of the buffer (of each rank's block, for allgather and reducescatter) under
// phases of its own; the channels advance side by side, piece i of every channel before piece
// i + 1 of any. Without channels (a single machine) the plain ring.
#include "collective/algorithms/algorithms.h"

namespace loom::collective::internal {
namespace {

struct Ring {
  int n, p, next, prev;
};

Ring RingOf(const std::vector<int>& order, int rank) {
  Ring r{static_cast<int>(order.size()), 0, 0, 0};
  while (order[r.p] != rank) ++r.p;
  r.next = order[(r.p + 1) % r.n];
  r.prev = order[(r.p + r.n - 1) % r.n];
  return r;
}

int Mod(int a, int n) { return ((a % n) + n) % n; }

Ranges Pieces(const Range& chunk, size_t piece) {
  Ranges out;
  for (size_t begin = 0; begin < chunk.count; begin += piece) {
    out.push_back(Range{chunk.offset + begin, std::min(piece, chunk.count - begin)});
  }
  return out;
}

// One ring of a call: this rank's place on it, the range each position ends with (chunks[q]:
// the chunk that ends at ring position q) and the phases its messages travel under. A plain ring
// is one lane; channels are one lane each, run side by side step by step.
struct Lane {
  Ring ring;
  Ranges chunks;
  Phase reduce_phase = kReducePhase;
  Phase gather_phase = kBroadcastPhase;
};
using Lanes = SmallVector<Lane, 4>;
using Handles = SmallVector<SmallVector<int>, 4>;

// Sends each lane's `sends[l]` pieces to its next position, piece i of every lane before piece
// i + 1 of any; a piece first waits for `previous[l][i]` (what the last step received into it)
// unless `first`.
Status SendPieces(Schedule& s, const Lanes& lanes, const SmallVector<Ranges, 4>& sends,
                  const Handles& previous, bool first, bool reduce, const void* src, size_t elem) {
  size_t most = 0;
  for (const Ranges& r : sends) most = std::max(most, r.size());
  for (size_t i = 0; i < most; ++i) {
    for (size_t l = 0; l < lanes.size(); ++l) {
      if (i >= sends[l].size()) continue;
      if (!first) LOOM_RETURN_IF_ERROR(s.Wait(previous[l][i]));
      const Lane& lane = lanes[l];
      s.PostSend(lane.ring.next, reduce ? lane.reduce_phase : lane.gather_phase,
                 At(src, sends[l][i].offset, elem), sends[l][i].count * elem);
    }
  }
  return Status::OK();
}

// N - 1 steps on every lane at once (elements; the lanes' rings have N ranks each).
Status ReduceScatterPhase(Schedule& s, const Lanes& lanes, const void* in, void* work,
                          const Reduction& reduction) {
  const size_t elem = DataTypeSize(reduction.dtype);
  const size_t piece = s.piece_elems(elem);
  const int n = lanes[0].ring.n;
  Handles previous(lanes.size()), current(lanes.size());
  SmallVector<Ranges, 4> sends(lanes.size());
  for (int k = 0; k < n - 1; ++k) {
    for (size_t l = 0; l < lanes.size(); ++l) {
      const Lane& lane = lanes[l];
      current[l].clear();
      for (const Range& r : Pieces(lane.chunks[Mod(lane.ring.p - k - 2, n)], piece)) {
        current[l].push_back(s.PostRecvReduce(lane.ring.prev, lane.reduce_phase,
                                              At(work, r.offset, elem), At(in, r.offset, elem),
                                              r.count * elem, reduction));
      }
      sends[l] = Pieces(lane.chunks[Mod(lane.ring.p - k - 1, n)], piece);
    }
    // The first step sends the rank's own data.
    LOOM_RETURN_IF_ERROR(
        SendPieces(s, lanes, sends, previous, k == 0, true, k == 0 ? in : work, elem));
    previous.swap(current);
  }
  return s.WaitAll();
}

// Each lane's chunks[q] is final at ring position q before the phase; afterwards everywhere.
// Works in bytes.
Status AllGatherPhase(Schedule& s, const Lanes& lanes, void* buf) {
  const size_t piece = s.piece_elems(1);
  const int n = lanes[0].ring.n;
  Handles previous(lanes.size()), current(lanes.size());
  SmallVector<Ranges, 4> sends(lanes.size());
  for (int k = 0; k < n - 1; ++k) {
    for (size_t l = 0; l < lanes.size(); ++l) {
      const Lane& lane = lanes[l];
      current[l].clear();
      for (const Range& r : Pieces(lane.chunks[Mod(lane.ring.p - k - 1, n)], piece)) {
        current[l].push_back(
            s.PostRecv(lane.ring.prev, lane.gather_phase, At(buf, r.offset, 1), r.count));
      }
      sends[l] = Pieces(lane.chunks[Mod(lane.ring.p - k, n)], piece);
    }
    LOOM_RETURN_IF_ERROR(SendPieces(s, lanes, sends, previous, k == 0, false, buf, 1));
    previous.swap(current);
  }
  return s.WaitAll();
}

void ToBytes(Lanes& lanes, size_t elem) {
  for (Lane& lane : lanes) {
    for (Range& r : lane.chunks) r = Range{r.offset * elem, r.count * elem};
  }
}

// Chunk q = the part `part` (elements within a block) of the block of the rank at position q.
Ranges BlocksInRingOrder(const std::vector<int>& order, size_t count, const Range& part) {
  Ranges chunks;
  for (int rank : order) chunks.push_back(Range{rank * count + part.offset, part.count});
  return chunks;
}

// The lanes of a call: the plain ring, or one per channel (`channels`) with stripe c of each
// block (or of the buffer, when `blocks` is false) on channel c.
StatusOr<Lanes> LanesOf(const Schedule& s, bool channels, size_t count, bool blocks) {
  const std::vector<std::vector<int>>& rings = s.plan().channels;
  const bool striped = channels && !rings.empty();
  const int k = striped ? static_cast<int>(rings.size()) : 1;
  LOOM_ENFORCE(k <= kMaxChannels, "a plan of ", k, " channels (at most ", kMaxChannels, ")");
  const Ranges stripes = SplitEvenly(count, k);
  Lanes lanes(k);
  for (int c = 0; c < k; ++c) {
    const std::vector<int>& order = striped ? rings[c] : s.plan().ring_order;
    Lane& lane = lanes[c];
    lane.ring = RingOf(order, s.rank());
    if (blocks) {
      lane.chunks = BlocksInRingOrder(order, count, stripes[c]);
    } else {
      lane.chunks = SplitEvenly(stripes[c].count, s.nranks());
      for (Range& r : lane.chunks) r.offset += stripes[c].offset;
    }
    if (striped) {
      lane.reduce_phase = static_cast<Phase>(kChannelPhases + 2 * c);
      lane.gather_phase = static_cast<Phase>(kChannelPhases + 2 * c + 1);
    }
  }
  return lanes;
}

Status RingAllReduce(Schedule& s, const CallArgs& args, bool channels) {
  const Reduction reduction{args.dtype, args.op};
  const size_t elem = DataTypeSize(args.dtype);
  if (s.nranks() == 1) return s.Copy(args.recv, args.send, args.count * elem);
  LOOM_ASSIGN_OR_RETURN(Lanes lanes, LanesOf(s, channels, args.count, false));
  LOOM_RETURN_IF_ERROR(ReduceScatterPhase(s, lanes, args.send, args.recv, reduction));
  for (const Lane& lane : lanes) {
    const Range& mine = lane.chunks[lane.ring.p];
    LOOM_RETURN_IF_ERROR(
        s.Finalize(reduction, At(args.recv, mine.offset, elem), mine.count, s.nranks()));
  }
  ToBytes(lanes, elem);
  return AllGatherPhase(s, lanes, args.recv);
}

Status RingAllGather(Schedule& s, const CallArgs& args, bool channels) {
  const size_t elem = DataTypeSize(args.dtype);
  LOOM_RETURN_IF_ERROR(
      s.Copy(At(args.recv, s.rank() * args.count, elem), args.send, args.count * elem));
  LOOM_ASSIGN_OR_RETURN(Lanes lanes, LanesOf(s, channels, args.count, true));
  ToBytes(lanes, elem);
  return AllGatherPhase(s, lanes, args.recv);
}

Status RingReduceScatter(Schedule& s, const CallArgs& args, bool channels) {
  const Reduction reduction{args.dtype, args.op};
  const size_t elem = DataTypeSize(args.dtype);
  const size_t mine = s.rank() * args.count;
  if (s.nranks() == 1) {
    LOOM_RETURN_IF_ERROR(s.Copy(args.recv, args.send, args.count * elem));
  } else {
    LOOM_ASSIGN_OR_RETURN(void* work, s.Scratch(s.nranks() * args.count * elem));
    LOOM_ASSIGN_OR_RETURN(const Lanes lanes, LanesOf(s, channels, args.count, true));
    LOOM_RETURN_IF_ERROR(ReduceScatterPhase(s, lanes, args.send, work, reduction));
    LOOM_RETURN_IF_ERROR(s.Copy(args.recv, At(work, mine, elem), args.count * elem));
  }
  return s.Finalize(reduction, args.recv, args.count, s.nranks());
}

// Rails (RunRails): a node-local ring reduce-scatter leaves each device with its node's sum of
// one chunk; the devices of one local index across the nodes (a rail, leaving every node through
// that device's NIC) allreduce their chunk on a ring of their own; a node-local ring all-gather
// spreads the chunks. The node's order is channel 0's (its ring otherwise).
Status RailsAllReduce(Schedule& s, const CallArgs& args) {
  const Topology& t = s.plan().topology;
  if (t.nodes() <= 1 || t.size() != s.nranks()) return RingAllReduce(s, args, false);
  const Reduction reduction{args.dtype, args.op};
  const size_t elem = DataTypeSize(args.dtype);
  const int per = t.devices_per_node(), node = t.node_of(s.rank());
  const std::vector<int>& ring =
      s.plan().channels.empty() ? s.plan().ring_order : s.plan().channels[0];
  std::vector<int> members, rail;
  for (int d : ring) {
    if (t.node_of(d) == node) members.push_back(d);
  }
  for (int k = 0; k < t.nodes(); ++k) rail.push_back(k * per + s.rank() % per);
  Lanes inner(1), across(1);
  inner[0].ring = RingOf(members, s.rank());
  inner[0].chunks = SplitEvenly(args.count, per);
  if (per == 1) {
    LOOM_RETURN_IF_ERROR(s.Copy(args.recv, args.send, args.count * elem));
  } else {
    LOOM_RETURN_IF_ERROR(ReduceScatterPhase(s, inner, args.send, args.recv, reduction));
  }
  const Range chunk = inner[0].chunks[inner[0].ring.p];
  across[0].ring = RingOf(rail, s.rank());
  across[0].chunks = SplitEvenly(chunk.count, t.nodes());
  for (Range& r : across[0].chunks) r.offset += chunk.offset;
  across[0].reduce_phase = kChannelPhases;
  across[0].gather_phase = static_cast<Phase>(kChannelPhases + 1);
  LOOM_RETURN_IF_ERROR(ReduceScatterPhase(s, across, args.recv, args.recv, reduction));
  const Range& mine = across[0].chunks[across[0].ring.p];
  LOOM_RETURN_IF_ERROR(
      s.Finalize(reduction, At(args.recv, mine.offset, elem), mine.count, s.nranks()));
  ToBytes(across, elem);
  LOOM_RETURN_IF_ERROR(AllGatherPhase(s, across, args.recv));
  ToBytes(inner, elem);
  return AllGatherPhase(s, inner, args.recv);
}

}  // namespace

Status RunRing(Schedule& s, const CallArgs& args) {
  switch (args.kind) {
    case Collective::kAllReduce: return RingAllReduce(s, args, false);
    case Collective::kAllGather: return RingAllGather(s, args, false);
    case Collective::kReduceScatter: return RingReduceScatter(s, args, false);
    case Collective::kReduce:
      return TreeRootedReduce(s, args, ChainTree(s.plan().ring_order, args.root));
    case Collective::kBroadcast:
      return TreeRootedBroadcast(s, args, ChainTree(s.plan().ring_order, args.root));
    default: return UnsupportedAlgorithm(args);
  }
}

Status RunChannels(Schedule& s, const CallArgs& args) {
  switch (args.kind) {
    case Collective::kAllReduce: return RingAllReduce(s, args, true);
    case Collective::kAllGather: return RingAllGather(s, args, true);
    case Collective::kReduceScatter: return RingReduceScatter(s, args, true);
    default: return UnsupportedAlgorithm(args);
  }
}

Status RunRails(Schedule& s, const CallArgs& args) {
  if (args.kind != Collective::kAllReduce) return UnsupportedAlgorithm(args);
  return RailsAllReduce(s, args);
}

}  // namespace loom::collective::internal
