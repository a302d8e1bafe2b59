// Internal: the algorithms. Each is a schedule of sends, receives and reductions over a Transport
// (through Schedule), so it runs unchanged on any transport. One entry point per algorithm file;
// the tree-shaped ones share the tree engine in tree.cc.
#pragma once

#include <vector>

#include "collective/schedule.h"
#include "collective/tree_builder.h"

namespace loom::collective::internal {

// ring.cc: allreduce = reduce-scatter + all-gather around the ring; allgather; reducescatter;
// reduce and broadcast as a pipelined chain along the ring.
Status RunRing(Schedule& s, const CallArgs& args);
// ring.cc: allreduce, allgather and reducescatter striped over the plan's channel rings (one
// per NIC, CommPlan::channels), side by side; the plain ring where the plan has no channels.
Status RunChannels(Schedule& s, const CallArgs& args);
// ring.cc: allreduce as a node-local ring reduce-scatter, one ring per local device index across
// the nodes (each leaving its node through that device's NIC) on the device's chunk, and a
// node-local ring all-gather; the plain ring on a single machine.
Status RunRails(Schedule& s, const CallArgs& args);
// tree.cc: one topology tree (rooted at 0 for allreduce, at the root otherwise).
Status RunTree(Schedule& s, const CallArgs& args);
// multi_tree.cc: one tree per rank, tree r carrying the r-th slice of the buffer.
Status RunMultiTree(Schedule& s, const CallArgs& args);
// star.cc: everything through one rank (rank 0 for allreduce, the root otherwise).
Status RunStar(Schedule& s, const CallArgs& args);
// direct.cc: every rank reduces one block, exchanging with every rank at once (allreduce =
// reduce-scatter + allgather in two rounds; allgather; reducescatter). sends_posted: the first
// round's sends were posted ahead with PostDirectSends (over MPI beside the signature round).
Status RunDirect(Schedule& s, const CallArgs& args, bool sends_posted = false);
// The first round's sends of a direct allreduce or reducescatter (others: none); returns
// whether it posted them.
bool PostDirectSends(Schedule& s, const CallArgs& args);

// The tree engine (tree.cc). A job is one tree carrying one element range of the buffer; jobs run
// interleaved and pipelined in pieces of Schedule::piece_elems.
struct TreeJob {
  const Tree* tree;
  Range range;
};
using TreeJobs = SmallVector<TreeJob>;
// Reduces each job's range to its tree's root. Leaves send from `in`; a rank with children
// accumulates into `work` (which then holds, on each job's root, the job's unscaled result).
Status TreesReduce(Schedule& s, const TreeJobs& jobs, const void* in, void* work,
                   const Reduction& reduction);
// Sends each job's range of `buf` from its tree's root down to every rank. A root that roots a
// job sends it from `root_src` when given (its send buffer: lines no rank has just written),
// and copies it into `buf` after its sends are posted, off the path of its children.
Status TreesBroadcast(Schedule& s, const TreeJobs& jobs, void* buf, const void* root_src = nullptr);

// Collectives over trees, shared by tree, multi_tree, star and ring (chain).
Status TreesAllReduce(Schedule& s, const CallArgs& args, const TreeJobs& jobs);
Status TreeRootedReduce(Schedule& s, const CallArgs& args, const Tree& tree);
Status TreeRootedBroadcast(Schedule& s, const CallArgs& args, const Tree& tree);

Status UnsupportedAlgorithm(const CallArgs& args);

}  // namespace loom::collective::internal
