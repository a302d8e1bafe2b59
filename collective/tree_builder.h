// Tree builder: topology-aware reduction trees and ring orders.
//
// A Tree here is a balanced binary reduction schedule of depth ceil(log2 n) whose every edge is a
// real link: at each level every node already in the tree pairs with (at most) one new node, so a
// node may appear on several levels. Built by recursive bisection: with L levels left, the device
// set is split into the root's half and the child's half, each at most 2^(L-1) devices (balanced
// ceil(m/2) / floor(m/2) first, uneven splits where only those work over real links: e.g. three
// devices in a line, rooted at an end), the root pairs with a child in the other half over a link
// and both halves recurse with L-1 levels. Bisections come from Kernighan-Lin (keep heavy links
// inside the halves); where that leads nowhere, an exhaustive branch-and-bound search over all
// bisections takes over, so a tree is found whenever one exists. The search first allows only
// the strongest link class (weight 3), then adds weaker classes until a tree exists: the weakest
// link of a tree bounds its speed, so it is maximized first and the total weight second.
// BuildTrees builds one tree per root and multiplies the weight of every link a tree uses by a
// penalty, so later trees prefer other links.
//
// Pure functions; safe from any thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "collective/topology.h"

namespace loom::collective {

struct Tree {
  int root = 0;
  // levels[l] holds the (parent, child) pairs joined at level l + 1; level 1 is the root's first
  // child. Reduction runs the levels from last to first, broadcast from first to last.
  std::vector<std::vector<std::pair<int, int>>> levels;

  int depth() const { return static_cast<int>(levels.size()); }
  // The (parent, child) edges of all levels.
  std::vector<std::pair<int, int>> Edges() const;
  // e.g. "root 0: L1 0-4 | L2 0-3 4-5 | L3 0-1 3-2 4-7 5-6".
  std::string ToString() const;
  bool operator==(const Tree& o) const { return root == o.root && levels == o.levels; }
};

struct TreeBuilderOptions {
  // Each time a tree uses a link, later trees see the link's weight multiplied by this factor.
  double link_penalty = 0.7;
};

// ceil(log2(n)) for n >= 1.
int CeilLog2(int n);

// The tree of maximum link weight (as found by the search) rooted at `root`. NotFound when no
// tree of depth ceil(log2 n) over real links exists for this root; ResourceExhausted when the
// search gave up (it takes a bounded number of steps, about a second, on any 64-device matrix).
StatusOr<Tree> BuildTree(const Topology& topology, int root);

// BuildTree for every root, as one search (what is learnt about one root's sub-problems serves
// the others, and the step bound covers them all).
std::vector<StatusOr<Tree>> BuildTreeForEachRoot(const Topology& topology);

// One tree per root (tree r is rooted at r), with the link-usage penalty between trees.
StatusOr<std::vector<Tree>> BuildTrees(const Topology& topology,
                                       const TreeBuilderOptions& options = {});

// Checks the definition above: rooted at tree.root, spanning all devices exactly once, depth
// ceil(log2 n), every edge a link, at each level a parent already in the tree and a new child, no
// node twice in one level.
Status ValidateTree(const Topology& topology, const Tree& tree);

// A ring through all devices that follows heavy links (greedy, then 2-opt on total weight;
// missing links are used only when no ring avoids them). Starts at device 0.
std::vector<int> BuildRingOrder(const Topology& topology);

// A "star" tree: the root pairs with every other device, one per level (depth n - 1). Used by the
// star algorithm; a schedule, not a topology tree (it ignores links).
Tree StarTree(int n, int root);

// A chain following `order` rotated to start at root: root - next - next... (depth n - 1). Used by
// the ring algorithm's pipelined reduce and broadcast.
Tree ChainTree(const std::vector<int>& order, int root);

}  // namespace loom::collective

namespace loom::collective {

// A tree's quality as the builder ranks trees: its weakest link first, then the sum of its
// links' weights (MXNet's objective for its topology-aware trees).
struct TreeScore {
  int weakest = 0;
  int total = 0;
  bool operator<(const TreeScore& o) const {
    return weakest != o.weakest ? weakest < o.weakest : total < o.total;
  }
  bool operator==(const TreeScore& o) const { return weakest == o.weakest && total == o.total; }
};
TreeScore ScoreTree(const Topology& topology, const Tree& tree);

// The best tree rooted at `root` by TreeScore over every tree of the definition above (depth
// ceil(log2 n), every edge a link, one new partner per tree node per level), by branch and
// bound: exact for machines of up to 16 devices. ResourceExhausted after `max_steps` search
// steps (the best found so far is not returned: it is not proven best); InvalidArgument beyond
// 16 devices; NotFound when no such tree exists.
StatusOr<Tree> ExhaustiveTree(const Topology& topology, int root, long long max_steps = 20000000);

}  // namespace loom::collective
