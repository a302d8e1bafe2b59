// Ring algorithm (ranks in the topology's ring order; p = this rank's position).
//   reduce-scatter: N - 1 steps; at step k, position p sends chunk p-k-1 to the next position and
//     reduces chunk p-k-2 received from the previous one into its own. Afterwards position p holds
//     chunk p fully reduced.
//   all-gather: N - 1 steps; at step k, position p sends chunk p-k and receives chunk p-k-1.
//   allreduce = reduce-scatter + all-gather: each rank sends 2 (N-1)/N of the buffer.
// Every chunk moves in pieces; the piece i of step k is sent as soon as piece i of step k - 1
// arrived, so a large chunk streams instead of waiting for the whole previous step.
// Reduce and broadcast run as a pipelined chain along the ring (tree engine with a chain).
#include "collective/algorithms/algorithms.h"

namespace loom::collective::internal {
namespace {

struct Ring {
  int n, p, next, prev;
};

Ring RingOf(const Schedule& s) {
  const std::vector<int>& order = s.plan().ring_order;
  Ring r{s.nranks(), 0, 0, 0};
  while (order[r.p] != s.rank()) ++r.p;
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

// chunks[q] is the chunk that ends at ring position q.
Status ReduceScatterPhase(Schedule& s, const Ranges& chunks, const void* in, void* work,
                          const Reduction& reduction) {
  const Ring ring = RingOf(s);
  const size_t elem = DataTypeSize(reduction.dtype);
  const size_t piece = s.piece_elems(elem);
  SmallVector<int> previous, current;
  for (int k = 0; k < ring.n - 1; ++k) {
    const Range& recv_chunk = chunks[Mod(ring.p - k - 2, ring.n)];
    const Range& send_chunk = chunks[Mod(ring.p - k - 1, ring.n)];
    current.clear();
    for (const Range& r : Pieces(recv_chunk, piece)) {
      current.push_back(s.PostRecvReduce(ring.prev, kReducePhase, At(work, r.offset, elem),
                                         At(in, r.offset, elem), r.count * elem, reduction));
    }
    const void* src = k == 0 ? in : work;  // the first step sends the rank's own data
    const Ranges send_pieces = Pieces(send_chunk, piece);
    for (size_t i = 0; i < send_pieces.size(); ++i) {
      if (k > 0) LOOM_RETURN_IF_ERROR(s.Wait(previous[i]));
      s.PostSend(ring.next, kReducePhase, At(src, send_pieces[i].offset, elem),
                 send_pieces[i].count * elem);
    }
    previous.swap(current);
  }
  return s.WaitAll();
}

// chunks[q] is final at ring position q before the phase; afterwards everywhere. Works in bytes.
Status AllGatherPhase(Schedule& s, const Ranges& chunks, void* buf) {
  const Ring ring = RingOf(s);
  const size_t piece = s.piece_elems(1);
  SmallVector<int> previous, current;
  for (int k = 0; k < ring.n - 1; ++k) {
    const Range& recv_chunk = chunks[Mod(ring.p - k - 1, ring.n)];
    const Range& send_chunk = chunks[Mod(ring.p - k, ring.n)];
    current.clear();
    for (const Range& r : Pieces(recv_chunk, piece)) {
      current.push_back(s.PostRecv(ring.prev, kBroadcastPhase, At(buf, r.offset, 1), r.count));
    }
    const Ranges send_pieces = Pieces(send_chunk, piece);
    for (size_t i = 0; i < send_pieces.size(); ++i) {
      if (k > 0) LOOM_RETURN_IF_ERROR(s.Wait(previous[i]));
      s.PostSend(ring.next, kBroadcastPhase, At(buf, send_pieces[i].offset, 1),
                 send_pieces[i].count);
    }
    previous.swap(current);
  }
  return s.WaitAll();
}

Ranges ToBytes(Ranges ranges, size_t elem) {
  for (Range& r : ranges) r = Range{r.offset * elem, r.count * elem};
  return ranges;
}

// Chunk q = the block of the rank at ring position q.
Ranges BlocksInRingOrder(const Schedule& s, size_t count) {
  Ranges chunks;
  for (int rank : s.plan().ring_order) chunks.push_back(Range{rank * count, count});
  return chunks;
}

Status RingAllReduce(Schedule& s, const CallArgs& args) {
  const Reduction reduction{args.dtype, args.op};
  const size_t elem = DataTypeSize(args.dtype);
  if (s.nranks() == 1) return s.Copy(args.recv, args.send, args.count * elem);
  const Ranges chunks = SplitEvenly(args.count, s.nranks());
  LOOM_RETURN_IF_ERROR(ReduceScatterPhase(s, chunks, args.send, args.recv, reduction));
  const Range& mine = chunks[RingOf(s).p];
  LOOM_RETURN_IF_ERROR(
      s.Finalize(reduction, At(args.recv, mine.offset, elem), mine.count, s.nranks()));
  return AllGatherPhase(s, ToBytes(chunks, elem), args.recv);
}

Status RingAllGather(Schedule& s, const CallArgs& args) {
  const size_t elem = DataTypeSize(args.dtype);
  LOOM_RETURN_IF_ERROR(
      s.Copy(At(args.recv, s.rank() * args.count, elem), args.send, args.count * elem));
  return AllGatherPhase(s, ToBytes(BlocksInRingOrder(s, args.count), elem), args.recv);
}

Status RingReduceScatter(Schedule& s, const CallArgs& args) {
  const Reduction reduction{args.dtype, args.op};
  const size_t elem = DataTypeSize(args.dtype);
  const size_t mine = s.rank() * args.count;
  if (s.nranks() == 1) {
    LOOM_RETURN_IF_ERROR(s.Copy(args.recv, args.send, args.count * elem));
  } else {
    LOOM_ASSIGN_OR_RETURN(void* work, s.Scratch(s.nranks() * args.count * elem));
    LOOM_RETURN_IF_ERROR(
        ReduceScatterPhase(s, BlocksInRingOrder(s, args.count), args.send, work, reduction));
    LOOM_RETURN_IF_ERROR(s.Copy(args.recv, At(work, mine, elem), args.count * elem));
  }
  return s.Finalize(reduction, args.recv, args.count, s.nranks());
}

}  // namespace

Status RunRing(Schedule& s, const CallArgs& args) {
  switch (args.kind) {
    case Collective::kAllReduce: return RingAllReduce(s, args);
    case Collective::kAllGather: return RingAllGather(s, args);
    case Collective::kReduceScatter: return RingReduceScatter(s, args);
    case Collective::kReduce:
      return TreeRootedReduce(s, args, ChainTree(s.plan().ring_order, args.root));
    case Collective::kBroadcast:
      return TreeRootedBroadcast(s, args, ChainTree(s.plan().ring_order, args.root));
    default: return UnsupportedAlgorithm(args);
  }
}

}  // namespace loom::collective::internal
