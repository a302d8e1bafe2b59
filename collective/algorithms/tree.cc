// Tree algorithm and the tree engine.
//
// Reduce phase: the levels run from the deepest to the first; at each level a child sends its
// (partial) range to its parent, which reduces it into its own. Broadcast phase: the levels run
// from the first to the deepest; a parent sends its range to its child. Ranges are cut into pieces
// and the outer loop runs over pieces, so piece j moves up one level while piece j + 1 starts below
// it. Every rank walks (piece, level, job) in the same order and only waits for receives whose
// sends come earlier or at the same point in that order, so the schedule cannot deadlock.
#include <algorithm>

#include "collective/algorithms/algorithms.h"

namespace loom::collective::internal {
namespace {

// This rank's partner at each level of a tree (-1: none) and whether it is the parent there.
struct Roles {
  std::vector<int> partner;
  std::vector<bool> is_parent;
};

Roles RolesOf(const Tree& tree, int rank) {
  Roles r;
  r.partner.assign(tree.depth(), -1);
  r.is_parent.assign(tree.depth(), false);
  for (int l = 0; l < tree.depth(); ++l) {
    for (const auto& [p, c] : tree.levels[l]) {
      if (p == rank) {
        r.partner[l] = c;
        r.is_parent[l] = true;
      } else if (c == rank) {
        r.partner[l] = p;
      }
    }
  }
  return r;
}

struct Plan {
  std::vector<Roles> roles;
  size_t piece = 1;
  size_t max_pieces = 0;
  int max_depth = 0;
};

Plan MakePlan(Schedule& s, const std::vector<TreeJob>& jobs, size_t elem) {
  Plan plan;
  plan.piece = s.piece_elems(elem);
  for (const TreeJob& job : jobs) {
    plan.roles.push_back(RolesOf(*job.tree, s.rank()));
    plan.max_pieces = std::max(plan.max_pieces, (job.range.count + plan.piece - 1) / plan.piece);
    plan.max_depth = std::max(plan.max_depth, job.tree->depth());
  }
  return plan;
}

// Piece j of a range, or an empty range past its end.
Range PieceOf(const Range& range, size_t piece, size_t j) {
  const size_t begin = std::min(range.count, j * piece);
  const size_t end = std::min(range.count, begin + piece);
  return Range{range.offset + begin, end - begin};
}

}  // namespace

Status TreesReduce(Schedule& s, const std::vector<TreeJob>& jobs, const void* in, void* work,
                   const Reduction& reduction) {
  const size_t elem = DataTypeSize(reduction.dtype);
  const Plan plan = MakePlan(s, jobs, elem);
  // touched[t][j]: work already holds this rank's partial result for piece j of job t.
  std::vector<std::vector<bool>> touched(jobs.size(), std::vector<bool>(plan.max_pieces, false));
  std::vector<int> receives;
  for (size_t j = 0; j < plan.max_pieces; ++j) {
    for (int l = plan.max_depth - 1; l >= 0; --l) {
      receives.clear();
      for (size_t t = 0; t < jobs.size(); ++t) {
        const Roles& roles = plan.roles[t];
        if (l >= static_cast<int>(roles.partner.size()) || roles.partner[l] < 0) continue;
        const Range piece = PieceOf(jobs[t].range, plan.piece, j);
        if (piece.count == 0) continue;
        const void* mine =
            touched[t][j] ? At(work, piece.offset, elem) : At(in, piece.offset, elem);
        if (roles.is_parent[l]) {
          receives.push_back(s.PostRecvReduce(roles.partner[l], kReducePhase,
                                              At(work, piece.offset, elem), mine,
                                              piece.count * elem, reduction));
          touched[t][j] = true;
        } else {
          s.PostSend(roles.partner[l], kReducePhase, mine, piece.count * elem);
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

Status TreesBroadcast(Schedule& s, const std::vector<TreeJob>& jobs, void* buf) {
  // Broadcast moves bytes; any element size works, so plan in bytes.
  const Plan plan = MakePlan(s, jobs, 1);
  std::vector<int> receives;
  for (size_t j = 0; j < plan.max_pieces; ++j) {
    for (int l = 0; l < plan.max_depth; ++l) {
      receives.clear();
      for (size_t t = 0; t < jobs.size(); ++t) {
        const Roles& roles = plan.roles[t];
        if (l >= static_cast<int>(roles.partner.size()) || roles.partner[l] < 0) continue;
        const Range piece = PieceOf(jobs[t].range, plan.piece, j);
        if (piece.count == 0) continue;
        if (roles.is_parent[l]) {
          s.PostSend(roles.partner[l], kBroadcastPhase, At(buf, piece.offset, 1), piece.count);
        } else {
          receives.push_back(
              s.PostRecv(roles.partner[l], kBroadcastPhase, At(buf, piece.offset, 1), piece.count));
        }
      }
      for (int h : receives) LOOM_RETURN_IF_ERROR(s.Wait(h));
    }
  }
  return s.WaitAll();
}

namespace {
std::vector<TreeJob> InBytes(const std::vector<TreeJob>& jobs, size_t elem) {
  std::vector<TreeJob> out = jobs;
  for (TreeJob& job : out) job.range = Range{job.range.offset * elem, job.range.count * elem};
  return out;
}
}  // namespace

Status TreesAllReduce(Schedule& s, const CallArgs& args, const std::vector<TreeJob>& jobs) {
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
  if (s.rank() == args.root) LOOM_RETURN_IF_ERROR(s.Copy(args.recv, args.send, bytes));
  return TreesBroadcast(s, {TreeJob{&tree, Range{0, bytes}}}, args.recv);
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
