// Multi-tree algorithm: one tree per rank (built with the link-usage penalty, so the trees spread
// over different links); tree r carries the r-th slice of the buffer. All trees run at once, so
// every link and every rank works on some slice at every step.
//   allreduce:     each slice reduced up its tree, then broadcast down it.
//   reducescatter: slice r (= block r) reduced to rank r.
//   reduce:        slices reduced to their tree roots, then gathered at the root.
//   broadcast:     the root scatters slice r to rank r, which broadcasts it down tree r.
#include "collective/algorithms/algorithms.h"

namespace loom::collective::internal {
namespace {

TreeJobs SliceJobs(const Schedule& s, const Ranges& slices) {
  TreeJobs jobs;
  for (int r = 0; r < s.nranks(); ++r) jobs.push_back(TreeJob{&s.plan().multi_trees[r], slices[r]});
  return jobs;
}

Status MultiTreeReduce(Schedule& s, const CallArgs& args) {
  const Reduction reduction{args.dtype, args.op};
  const size_t elem = DataTypeSize(args.dtype);
  const Ranges slices = SplitEvenly(args.count, s.nranks());
  void* work = args.recv;
  if (s.rank() != args.root) {
    LOOM_ASSIGN_OR_RETURN(work, s.Scratch(args.count * elem));
  }
  LOOM_RETURN_IF_ERROR(TreesReduce(s, SliceJobs(s, slices), args.send, work, reduction));
  if (s.rank() == args.root) {
    for (int r = 0; r < s.nranks(); ++r) {
      if (r != args.root) {
        s.PostRecv(r, kGatherPhase, At(work, slices[r].offset, elem), slices[r].count * elem);
      }
    }
  } else {
    const Range& mine = slices[s.rank()];
    s.PostSend(args.root, kGatherPhase, At(work, mine.offset, elem), mine.count * elem);
  }
  LOOM_RETURN_IF_ERROR(s.WaitAll());
  if (s.rank() != args.root) return Status::OK();
  return s.Finalize(reduction, args.recv, args.count, s.nranks());
}

Status MultiTreeBroadcast(Schedule& s, const CallArgs& args) {
  const size_t bytes = args.count * DataTypeSize(args.dtype);
  const Ranges slices = SplitEvenly(bytes, s.nranks());
  // The root sends from its send buffer and copies its own slice into recv at the end (the
  // tree engine's root_src).
  const bool root = s.rank() == args.root;
  const void* src = root ? args.send : args.recv;
  if (root) {
    for (int r = 0; r < s.nranks(); ++r) {
      if (r != args.root)
        s.PostSend(r, kScatterPhase, At(src, slices[r].offset, 1), slices[r].count);
    }
  } else {
    const Range& mine = slices[s.rank()];
    s.PostRecv(args.root, kScatterPhase, At(args.recv, mine.offset, 1), mine.count);
  }
  LOOM_RETURN_IF_ERROR(s.WaitAll());
  return TreesBroadcast(s, SliceJobs(s, slices), args.recv, src == args.recv ? nullptr : src);
}

Status MultiTreeReduceScatter(Schedule& s, const CallArgs& args) {
  const Reduction reduction{args.dtype, args.op};
  const size_t elem = DataTypeSize(args.dtype);
  Ranges blocks(s.nranks());
  for (int r = 0; r < s.nranks(); ++r) blocks[r] = Range{r * args.count, args.count};
  LOOM_ASSIGN_OR_RETURN(void* work, s.Scratch(s.nranks() * args.count * elem));
  LOOM_RETURN_IF_ERROR(TreesReduce(s, SliceJobs(s, blocks), args.send, work, reduction));
  LOOM_RETURN_IF_ERROR(
      s.Copy(args.recv, At(work, blocks[s.rank()].offset, elem), args.count * elem));
  return s.Finalize(reduction, args.recv, args.count, s.nranks());
}

}  // namespace

Status RunMultiTree(Schedule& s, const CallArgs& args) {
  switch (args.kind) {
    case Collective::kAllReduce:
      return TreesAllReduce(s, args, SliceJobs(s, SplitEvenly(args.count, s.nranks())));
    case Collective::kReduce: return MultiTreeReduce(s, args);
    case Collective::kBroadcast: return MultiTreeBroadcast(s, args);
    case Collective::kReduceScatter: return MultiTreeReduceScatter(s, args);
    default: return UnsupportedAlgorithm(args);
  }
}

}  // namespace loom::collective::internal
