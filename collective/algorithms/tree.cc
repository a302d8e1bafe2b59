// Tree algorithm and the tree engine.
//
// Reduce phase: the levels run from the deepest to the first; at each level a child sends its
// (partial) range to its parent, which reduces it into its own. Broadcast phase: the levels run
// from the first to the deepest; a parent sends its range to its child. Ranges are cut into pieces
// and the outer loop runs over pieces, so piece j moves up one level while piece j + 1 starts below
// it. Every rank walks (piece, level) in the same order, posts a level's receives and sends
// before it waits, and only waits for receives whose sends come earlier or at the same point in
// that order, so the schedule cannot deadlock.
#include <algorithm>

#include "collective/algorithms/algorithms.h"

namespace loom::collective::internal {
namespace {

// What this rank does at each level: one step per job whose tree gives it a partner there. A
// level's receives come before its sends: a send that finds its receive posted moves the data on
// the sender's thread, so two ranks that exchange at one level (on 2 ranks the multi-tree's two
// trees do) each move their own message at the same time; were one to send first, the later of
// the two would find both postings waiting and move both messages itself.
struct Step {
  size_t job;
  int partner;
  bool parent;  // this rank is the partner's parent at this level
};

class Plan {
 public:
  // `reduce`: the receiving side is the parent (reduce phase), else the child (broadcast).
  Plan(Schedule& s, const TreeJobs& jobs, size_t elem, bool reduce) : piece_(s.piece_elems(elem)) {
    int depth = 0;
    for (const TreeJob& job : jobs) {
      max_pieces_ = std::max(max_pieces_, (job.range.count + piece_ - 1) / piece_);
      depth = std::max(depth, job.tree->depth());
    }
    begin_.push_back(0);
    for (int l = 0; l < depth; ++l) {
      // The level's receives (parent == reduce), then its sends.
      for (const bool receives : {true, false}) {
        for (size_t t = 0; t < jobs.size(); ++t) {
          const Tree& tree = *jobs[t].tree;
          if (l >= tree.depth()) continue;
          for (const auto& [p, c] : tree.levels[l]) {
            if (p != s.rank() && c != s.rank()) continue;
            const Step step{t, p == s.rank() ? c : p, p == s.rank()};
            if ((step.parent == reduce) == receives) steps_.push_back(step);
          }
        }
      }
      begin_.push_back(steps_.size());
    }
  }
  size_t piece() const { return piece_; }
  size_t max_pieces() const { return max_pieces_; }
  int depth() const { return static_cast<int>(begin_.size()) - 1; }
  // This rank's steps at level l, receives first.
  const Step* begin(int l) const { return steps_.data() + begin_[l]; }
  const Step* end(int l) const { return steps_.data() + begin_[l + 1]; }

 private:
  size_t piece_;
  size_t max_pieces_ = 0;
  SmallVector<Step, 16> steps_;
  SmallVector<size_t> begin_;  // level l's steps are [begin_[l], begin_[l + 1])
};

// Piece j of a range, or an empty range past its end.
Range PieceOf(const Range& range, size_t piece, size_t j) {
  const size_t begin = std::min(range.count, j * piece);
  const size_t end = std::min(range.count, begin + piece);
  return Range{range.offset + begin, end - begin};
}

}  // namespace

Status TreesReduce(Schedule& s, const TreeJobs& jobs, const void* in, void* work,
                   const Reduction& reduction) {
  const size_t elem = DataTypeSize(reduction.dtype);
  const Plan plan(s, jobs, elem, /*reduce=*/true);
  // touched[t]: work already holds this rank's partial result for job t's current piece.
  SmallVector<char> touched(jobs.size());
  SmallVector<int> receives;
  for (size_t j = 0; j < plan.max_pieces(); ++j) {
    std::fill(touched.begin(), touched.end(), 0);
    for (int l = plan.depth() - 1; l >= 0; --l) {
      receives.clear();
      for (const Step* step = plan.begin(l); step != plan.end(l); ++step) {
        const Range piece = PieceOf(jobs[step->job].range, plan.piece(), j);
        if (piece.count == 0) continue;
        const void* mine =
            touched[step->job] ? At(work, piece.offset, elem) : At(in, piece.offset, elem);
        if (step->parent) {
          receives.push_back(s.PostRecvReduce(step->partner, kReducePhase,
                                              At(work, piece.offset, elem), mine,
                                              piece.count * elem, reduction));
          touched[step->job] = 1;
        } else {
          s.PostSend(step->partner, kReducePhase, mine, piece.count * elem);
        }
      }
      for (int h : receives) LOOM_RETURN_IF_ERROR(s.Wait(h));
    }
  }
  // A root without children (a single rank) still owes its result in work.
  for (const TreeJob& job : jobs) {
    if (job.tree->root == s.rank() && job.tree->depth() == 0) {
      LOOM_RETURN_IF_ERROR(s.Copy(At(work, job.range.offset, elem), At(in, job.range.offset, elem),
                                  job.range.count * elem));
    }
  }
  return s.WaitAll();
}

Status TreesBroadcast(Schedule& s, const TreeJobs& jobs, void* buf, const void* root_src) {
  // Broadcast moves bytes; any element size works, so plan in bytes.
  const Plan plan(s, jobs, 1, /*reduce=*/false);
  SmallVector<int> receives;
  for (size_t j = 0; j < plan.max_pieces(); ++j) {
    for (int l = 0; l < plan.depth(); ++l) {
      receives.clear();
      for (const Step* step = plan.begin(l); step != plan.end(l); ++step) {
        const Range piece = PieceOf(jobs[step->job].range, plan.piece(), j);
        if (piece.count == 0) continue;
        if (step->parent) {
          const bool root = root_src != nullptr && jobs[step->job].tree->root == s.rank();
          s.PostSend(step->partner, kBroadcastPhase,
                     root ? At(root_src, piece.offset, 1) : At(buf, piece.offset, 1), piece.count);
        } else {
          receives.push_back(
              s.PostRecv(step->partner, kBroadcastPhase, At(buf, piece.offset, 1), piece.count));
        }
      }
      for (int h : receives) LOOM_RETURN_IF_ERROR(s.Wait(h));
    }
  }
  if (root_src != nullptr && root_src != buf) {
    for (const TreeJob& job : jobs) {
      if (job.tree->root != s.rank()) continue;
      LOOM_RETURN_IF_ERROR(
          s.Copy(At(buf, job.range.offset, 1), At(root_src, job.range.offset, 1), job.range.count));
    }
  }
  return s.WaitAll();
}

namespace {
TreeJobs InBytes(const TreeJobs& jobs, size_t elem) {
  TreeJobs out = jobs;
  for (TreeJob& job : out) job.range = Range{job.range.offset * elem, job.range.count * elem};
  return out;
}
}  // namespace

Status TreesAllReduce(Schedule& s, const CallArgs& args, const TreeJobs& jobs) {
  const Reduction reduction{args.dtype, args.op};
  const size_t elem = DataTypeSize(args.dtype);
  LOOM_RETURN_IF_ERROR(TreesReduce(s, jobs, args.send, args.recv, reduction));
  for (const TreeJob& job : jobs) {
    if (job.tree->root == s.rank()) {
      LOOM_RETURN_IF_ERROR(s.Finalize(reduction, At(args.recv, job.range.offset, elem),
                                      job.range.count, s.nranks()));
    }
  }
  return TreesBroadcast(s, InBytes(jobs, elem), args.recv);
}

Status TreeRootedReduce(Schedule& s, const CallArgs& args, const Tree& tree) {
  const Reduction reduction{args.dtype, args.op};
  const size_t elem = DataTypeSize(args.dtype);
  // Only the root's recv is the caller's; other ranks accumulate in scratch so that neither their
  // send nor their recv buffer changes.
  void* work = args.recv;
  if (s.rank() != args.root) {
    LOOM_ASSIGN_OR_RETURN(work, s.Scratch(args.count * elem));
  }
  LOOM_RETURN_IF_ERROR(
      TreesReduce(s, {TreeJob{&tree, Range{0, args.count}}}, args.send, work, reduction));
  if (s.rank() != args.root) return Status::OK();
  return s.Finalize(reduction, args.recv, args.count, s.nranks());
}

Status TreeRootedBroadcast(Schedule& s, const CallArgs& args, const Tree& tree) {
  const size_t bytes = args.count * DataTypeSize(args.dtype);
  const TreeJobs jobs{TreeJob{&tree, Range{0, bytes}}};
  return TreesBroadcast(s, jobs, args.recv, args.send);
}

Status UnsupportedAlgorithm(const CallArgs& args) {
  return Unimplemented(CollectiveCallName(args.kind), " has no '", AlgorithmName(args.algorithm),
                       "' algorithm");
}

Status RunTree(Schedule& s, const CallArgs& args) {
  switch (args.kind) {
    case Collective::kAllReduce: {
      const Tree& tree = s.plan().trees[0];
      return TreesAllReduce(s, args, {TreeJob{&tree, Range{0, args.count}}});
    }
    case Collective::kReduce: return TreeRootedReduce(s, args, s.plan().trees[args.root]);
    case Collective::kBroadcast: return TreeRootedBroadcast(s, args, s.plan().trees[args.root]);
    default: return UnsupportedAlgorithm(args);
  }
}

}  // namespace loom::collective::internal
