// Direct algorithm: every rank owns one block of the buffer (count / n elements, the first
// count % n blocks one element longer) and talks to every other rank at once. Allreduce is two
// rounds: each rank sends block r to rank r and reduces the blocks it receives into its own
// (reduce-scatter), then sends its reduced block to every rank (allgather). Each rank sends and
// receives 2(n-1)/n of the buffer, as around the ring, in 2 message latencies instead of the
// ring's 2(n-1): the fastest schedule where every pair of ranks has a path of its own (processes
// of one host over shared memory, an NVSwitch), at the price of n-1 messages per rank and round.
// Every element is reduced by one rank, so every rank ends with the same bits. The messages are
// whole blocks, not pipelined pieces: every pair's transfers already run side by side.
#include "collective/algorithms/algorithms.h"

namespace loom::collective::internal {
namespace {

// dst = block `own` of `in` (op) the same block of every peer, in the order rank + 1, rank + 2,
// ... (not every rank from rank 0 first). Where a receive may reduce on arrival (a transport
// that reads the sender's memory) each is posted once the last has been waited for; where
// reductions run inside Wait (MPI: into staging until then) all are posted at once, so that
// the peers' blocks arrive side by side.
Status ReduceOwnBlock(Schedule& s, const void* in, void* dst, const Range& own,
                      const Reduction& reduction, size_t elem) {
  const int n = s.nranks(), me = s.rank();
  const bool together = s.transport().reduces_at_wait();
  const void* acc = At(in, own.offset, elem);
  SmallVector<int> posted;
  for (int k = 1; k < n; ++k) {
    const int r = (me + k) % n;
    posted.push_back(s.PostRecvReduce(r, kScatterPhase, dst, acc, own.count * elem, reduction));
    if (!together) LOOM_RETURN_IF_ERROR(s.Wait(posted.back()));
    acc = dst;  // the next arrival reduces into what the last one left
  }
  for (int h : posted) LOOM_RETURN_IF_ERROR(s.Wait(h));
  return Status::OK();
}

}  // namespace

bool PostDirectSends(Schedule& s, const CallArgs& args) {
  const int n = s.nranks(), me = s.rank();
  const size_t elem = DataTypeSize(args.dtype);
  if (args.kind == Collective::kAllReduce) {
    const Ranges blocks = SplitEvenly(args.count, n);
    for (int r = 0; r < n; ++r) {
      if (r != me)
        s.PostSend(r, kScatterPhase, At(args.send, blocks[r].offset, elem), blocks[r].count * elem);
    }
    return true;
  }
  if (args.kind == Collective::kReduceScatter) {
    // send holds n blocks of count elements; block r goes to rank r.
    for (int r = 0; r < n; ++r) {
      if (r != me)
        s.PostSend(r, kScatterPhase, At(args.send, r * args.count, elem), args.count * elem);
    }
    return true;
  }
  return false;
}

Status RunDirect(Schedule& s, const CallArgs& args, bool sends_posted) {
  const int n = s.nranks(), me = s.rank();
  const size_t elem = DataTypeSize(args.dtype);
  const Reduction reduction{args.dtype, args.op};
  switch (args.kind) {
    case Collective::kAllReduce: {
      const Ranges blocks = SplitEvenly(args.count, n);
      const Range own = blocks[me];
      char* own_recv = At(args.recv, own.offset, elem);
      if (!sends_posted) PostDirectSends(s, args);
      if (n == 1) LOOM_RETURN_IF_ERROR(s.Copy(args.recv, args.send, args.count * elem));
      LOOM_RETURN_IF_ERROR(ReduceOwnBlock(s, args.send, own_recv, own, reduction, elem));
      // Every block sent is read before any block of recv other than this rank's is written
      // (in place, recv's blocks are send's).
      LOOM_RETURN_IF_ERROR(s.WaitAll());
      LOOM_RETURN_IF_ERROR(s.Finalize(reduction, own_recv, own.count, n));
      for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        s.PostRecv(r, kGatherPhase, At(args.recv, blocks[r].offset, elem), blocks[r].count * elem);
        s.PostSend(r, kGatherPhase, own_recv, own.count * elem);
      }
      return s.WaitAll();
    }
    case Collective::kReduceScatter: {
      // send holds n blocks of count elements; recv is block `me` of their reduction.
      const Range own{me * args.count, args.count};
      if (!sends_posted) PostDirectSends(s, args);
      if (n == 1)
        LOOM_RETURN_IF_ERROR(s.Copy(args.recv, At(args.send, own.offset, elem), args.count * elem));
      LOOM_RETURN_IF_ERROR(ReduceOwnBlock(s, args.send, args.recv, own, reduction, elem));
      LOOM_RETURN_IF_ERROR(s.WaitAll());
      return s.Finalize(reduction, args.recv, args.count, n);
    }
    case Collective::kAllGather: {
      // recv holds n blocks of count elements; block `me` is this rank's send.
      char* own_recv = At(args.recv, me * args.count, elem);
      LOOM_RETURN_IF_ERROR(s.Copy(own_recv, args.send, args.count * elem));
      for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        s.PostRecv(r, kGatherPhase, At(args.recv, r * args.count, elem), args.count * elem);
        s.PostSend(r, kGatherPhase, own_recv, args.count * elem);
      }
      return s.WaitAll();
    }
    default: return UnsupportedAlgorithm(args);
  }
}

}  // namespace loom::collective::internal
