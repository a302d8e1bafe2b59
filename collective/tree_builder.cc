#include "collective/tree_builder.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

namespace loom::collective {
namespace {

using Mask = uint64_t;

int PopCount(Mask m) { return __builtin_popcountll(m); }
Mask Bit(int i) { return Mask{1} << i; }

std::vector<int> Members(Mask m) {
  std::vector<int> out;
  for (; m; m &= m - 1) out.push_back(__builtin_ctzll(m));
  return out;
}

struct PairHash {
  size_t operator()(const std::pair<Mask, int>& k) const {
    return std::hash<uint64_t>()(k.first * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(k.second));
  }
};

// A sub-problem: a device set, its root and the levels left for it (|set| <= 2^levels), packed
// as (set, root * 8 + levels); 64 devices need at most 6 levels.
std::pair<Mask, int> Key(Mask set, int root, int levels) {
  return std::make_pair(set, root * 8 + levels);
}

// The best subtree found for (device set, root): its weight and the first split, from which the
// rest is read back out of the memo.
struct Subtree {
  bool feasible = false;
  double weight = 0;
  int child = -1;  // the root's level-1 partner
  Mask half = 0;   // the child's half
};

// Searches trees over one topology. Link weights change between trees (penalty); which device sets
// admit a tree at all does not, so proven-infeasible (set, root) pairs are kept across trees.
class Searcher {
 public:
  // Steps (feasibility sub-problems and candidate splits) one searcher may take over all its
  // builds: milliseconds on the machines Loom knows, under a second for any 64-device matrix.
  static constexpr int64_t kMaxSteps = 1000000;

  explicit Searcher(const Topology& t) : topology_(t), n_(t.size()), weight_(size_t(n_) * n_) {
    std::set<int, std::greater<int>> classes;
    for (int a = 0; a < n_; ++a) {
      for (int b = 0; b < n_; ++b) {
        if (t.connected(a, b)) {
          weight_[size_t(a) * n_ + b] = t.weight(a, b);
          classes.insert(t.weight(a, b));
        }
      }
    }
    classes_.assign(classes.begin(), classes.end());
  }

  double w(int a, int b) const { return weight_[size_t(a) * n_ + b]; }
  bool exhausted() const { return exhausted_; }
  void Penalize(int a, int b, double factor) {
    weight_[size_t(a) * n_ + b] *= factor;
    weight_[size_t(b) * n_ + a] *= factor;
  }

  // Tries the strongest link class first: a tree over links of weight >= 3 if one exists, else
  // >= 2, and so on. The weakest link bounds a tree's speed, so this is the first criterion; the
  // total (penalized) weight is the second. On p3.16xlarge and DGX-1 it yields NVLink-only trees.
  StatusOr<Tree> Build(int root) {
    max_weight_ = *std::max_element(weight_.begin(), weight_.end());
    const Mask all = n_ == 64 ? ~Mask{0} : Bit(n_) - 1;
    bool found = false;
    const int levels = CeilLog2(n_);
    for (int min_class : classes_) {
      UseLinksOfAtLeast(min_class);
      if (Solve(all, root, levels).feasible) {
        found = true;
        break;
      }
    }
    if (exhausted_) {
      return ResourceExhausted("the search for a balanced binary tree for root ", root,
                               " gave up after ", kMaxSteps, " steps on this ", n_,
                               "-device topology");
    }
    if (!found && n_ > 1) {
      return NotFound("no balanced binary tree of depth ", CeilLog2(n_), " over real links exists",
                      " for root ", root, " on this ", n_, "-device topology");
    }
    Tree tree;
    tree.root = root;
    tree.levels.resize(levels);
    Emit(all, root, levels, 0, &tree);
    return tree;
  }

 private:
  void UseLinksOfAtLeast(int min_class) {
    memo_.clear();
    min_class_ = min_class;
    adj_.assign(n_, 0);
    for (int a = 0; a < n_; ++a) {
      for (int b = 0; b < n_; ++b) {
        if (topology_.connected(a, b) && topology_.weight(a, b) >= min_class) adj_[a] |= Bit(b);
      }
    }
  }

  // The best tree for (set, root) within `levels` levels (|set| <= 2^levels).
  const Subtree& Solve(Mask set, int root, int levels) {
    const auto key = Key(set, root, levels);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    Subtree best;
    if (PopCount(set) == 1) {
      best.feasible = true;
    } else if (Feasible(set, root, levels)) {
      // Kernighan-Lin first: one good bisection, tried with every possible child; the exhaustive
      // search only where that bisection admits no tree (one exists: Feasible said so).
      TrySplit(set, root, levels, KernighanLin(set, root), &best);
      if (!best.feasible) Exhaustive(set, root, levels, &best);
    }
    return memo_[key] = best;
  }

  // Whether (set, root) admits any tree within `levels` levels over the current link class: a
  // weight-free search whose answers hold for every root and every tree of this class, so they
  // are kept across builds.
  bool Feasible(Mask set, int root, int levels) {
    const int m = PopCount(set);
    if (m == 1) return true;
    if (levels == 0 || m > (1 << levels)) return false;
    auto& known = feasible_[min_class_];
    const auto key = Key(set, root, levels);
    if (auto it = known.find(key); it != known.end()) return it->second;
    bool found = false;
    // Every device of a tree of `levels` levels is at most `levels` links from its root: a
    // polynomial test that rules out most sets (a chain, a sparse mesh) before the subset search,
    // whose steps are bounded besides.
    if ((adj_[root] & set) != 0 && WithinHops(set, root, levels) && Step()) {
      ForEachHalf(set, root, levels, [&](Mask half) {
        if (!Step()) return true;
        const Mask left = set & ~half;
        if ((adj_[root] & half) == 0 || !Feasible(left, root, levels - 1)) return false;
        for (int c : Members(adj_[root] & half)) {
          if (Feasible(half, c, levels - 1)) return found = true;
        }
        return false;
      });
    }
    known[key] = found;
    return found;
  }

  // Calls fn(half) for every subset of set \ {root} that can be the child's half when `levels`
  // levels are left, until fn returns true: both halves must fit in levels - 1 levels. The
  // balanced size floor(m/2) comes first, then sizes further from it (an uneven split, e.g. the
  // root alone against a linked pair, can be the only one over real links).
  template <typename Fn>
  void ForEachHalf(Mask set, int root, int levels, Fn fn) const {
    const std::vector<int> others = Members(set & ~Bit(root));
    const int m = PopCount(set);
    const int n = static_cast<int>(others.size());
    const int cap = 1 << (levels - 1);
    const int lo = std::max(1, m - cap), hi = std::min(m - 1, cap);
    std::vector<int> sizes;
    for (int d = 0; d <= m; ++d) {
      for (int k : {m / 2 - d, m / 2 + d}) {
        if (k >= lo && k <= hi && std::find(sizes.begin(), sizes.end(), k) == sizes.end())
          sizes.push_back(k);
      }
    }
    for (int k : sizes) {
      std::vector<int> pick(k);
      for (int i = 0; i < k; ++i) pick[i] = i;
      while (true) {
        Mask half = 0;
        for (int i : pick) half |= Bit(others[i]);
        if (fn(half)) return;
        // Next k-combination of n in lexicographic order.
        int i = k - 1;
        while (i >= 0 && pick[i] == n - k + i) --i;
        if (i < 0) break;
        ++pick[i];
        for (int j = i + 1; j < k; ++j) pick[j] = pick[j - 1] + 1;
      }
    }
  }

  // Counts one step of the search; false (and the search ends, infeasible) past kMaxSteps.
  bool Step() {
    if (++steps_ > kMaxSteps) exhausted_ = true;
    return !exhausted_;
  }

  // Whether every device of `set` is within `hops` links of root over links inside `set`.
  bool WithinHops(Mask set, int root, int hops) const {
    Mask reached = Bit(root), frontier = Bit(root);
    for (int h = 0; h < hops && frontier; ++h) {
      Mask next = 0;
      for (int v : Members(frontier)) next |= adj_[v] & set;
      frontier = next & ~reached;
      reached |= next;
    }
    return (reached & set) == set;
  }

  // Whether the links inside `set` connect it (necessary for any spanning tree).
  bool Connected(Mask set, int root) const {
    Mask reached = Bit(root), frontier = Bit(root);
    while (frontier) {
      Mask next = 0;
      for (int v : Members(frontier)) next |= adj_[v] & set;
      frontier = next & ~reached;
      reached |= next;
    }
    return (reached & set) == set;
  }

  // Tries the root's half = set \ half with every child in `half` linked to the root; returns
  // whether this split admits a tree at all.
  bool TrySplit(Mask set, int root, int levels, Mask half, Subtree* best) {
    if ((adj_[root] & half) == 0) return false;
    // Cheap necessary conditions first: both halves fit and are connected, the root is linked.
    const Mask left_set = set & ~half;
    const int cap = 1 << (levels - 1);
    if (PopCount(half) > cap || PopCount(left_set) > cap) return false;
    if (PopCount(left_set) > 1 && (adj_[root] & left_set) == 0) return false;
    if (!Connected(left_set, root) || !Connected(half, __builtin_ctzll(half))) return false;
    if (!Feasible(left_set, root, levels - 1)) return false;
    const Subtree& left = Solve(left_set, root, levels - 1);
    if (!left.feasible) return false;
    const double left_weight = left.weight;
    bool admits = false;
    for (int c : Members(adj_[root] & half)) {
      // Bound: the child's subtree can add at most (|half| - 1) links of the heaviest weight.
      if (best->feasible &&
          w(root, c) + left_weight + (PopCount(half) - 1) * max_weight_ <= best->weight) {
        continue;
      }
      if (!Feasible(half, c, levels - 1)) continue;
      admits = true;
      const Subtree& right = Solve(half, c, levels - 1);
      const double total = w(root, c) + left_weight + right.weight;
      if (!best->feasible || total > best->weight + 1e-9) {
        *best = Subtree{true, total, c, half};
      }
    }
    return admits;
  }

  // Bisections in ForEachHalf's order (balanced sizes first); TrySplit's bound skips children
  // that cannot beat the best tree so far. Feasible() guarantees a tree exists, so the first
  // feasible split is found; after kSplitBudget feasible splits the best so far is kept, which
  // bounds the time on large sets.
  void Exhaustive(Mask set, int root, int levels, Subtree* best) {
    constexpr int kSplitBudget = 24;
    int feasible_splits = 0;
    ForEachHalf(set, root, levels, [&](Mask half) {
      if (!Step()) return true;
      if (TrySplit(set, root, levels, half, best)) ++feasible_splits;
      return feasible_splits >= kSplitBudget;
    });
  }

  // Bisection of `set` into the root's half (ceil(m/2), containing root) and the other half
  // (floor(m/2)) with little link weight across: greedy growth from the root, then KL passes of
  // pair swaps. Returns the other half.
  Mask KernighanLin(Mask set, int root) {
    const std::vector<int> nodes = Members(set);
    const int m = static_cast<int>(nodes.size());
    const int size_a = (m + 1) / 2;
    std::vector<bool> in_a(n_, false);
    in_a[root] = true;
    for (int count = 1; count < size_a; ++count) {
      int pick = -1;
      double pick_gain = -1;
      for (int v : nodes) {
        if (in_a[v]) continue;
        double gain = 0;
        for (int u : nodes) gain += in_a[u] ? w(u, v) : 0;
        if (gain > pick_gain) {
          pick = v;
          pick_gain = gain;
        }
      }
      in_a[pick] = true;
    }
    for (int pass = 0; pass < 4; ++pass) {  // KL converges in a few passes
      // D(v) = external - internal link weight.
      std::vector<double> d(n_, 0);
      for (int v : nodes) {
        for (int u : nodes) d[v] += (in_a[u] != in_a[v] ? 1 : -1) * w(u, v);
      }
      std::vector<bool> locked(n_, false);
      locked[root] = true;
      std::vector<std::pair<int, int>> swaps;
      std::vector<double> gains;
      while (true) {
        int best_a = -1, best_b = -1;
        double best_gain = 0;
        for (int a : nodes) {
          if (!in_a[a] || locked[a]) continue;
          for (int b : nodes) {
            if (in_a[b] || locked[b]) continue;
            const double g = d[a] + d[b] - 2 * w(a, b);
            if (best_a < 0 || g > best_gain) {
              best_a = a;
              best_b = b;
              best_gain = g;
            }
          }
        }
        if (best_a < 0) break;
        locked[best_a] = locked[best_b] = true;
        swaps.emplace_back(best_a, best_b);
        gains.push_back(best_gain);
        for (int x : nodes) {
          if (locked[x]) continue;
          const double delta = 2 * w(x, best_a) - 2 * w(x, best_b);
          d[x] += in_a[x] ? delta : -delta;
        }
      }
      double total = 0, best_total = 0;
      size_t best_prefix = 0;
      for (size_t i = 0; i < gains.size(); ++i) {
        total += gains[i];
        if (total > best_total + 1e-9) {
          best_total = total;
          best_prefix = i + 1;
        }
      }
      if (best_prefix == 0) break;
      for (size_t i = 0; i < best_prefix; ++i) {
        in_a[swaps[i].first] = false;
        in_a[swaps[i].second] = true;
      }
    }
    Mask half = 0;
    for (int v : nodes) {
      if (!in_a[v]) half |= Bit(v);
    }
    return half;
  }

  void Emit(Mask set, int root, int levels, int level, Tree* tree) {
    if (PopCount(set) == 1) return;
    const Subtree& s = memo_.at(Key(set, root, levels));
    tree->levels[level].emplace_back(root, s.child);
    Emit(set & ~s.half, root, levels - 1, level + 1, tree);
    Emit(s.half, s.child, levels - 1, level + 1, tree);
  }

  const Topology& topology_;
  int n_;
  std::vector<double> weight_;  // link weights with the penalties applied so far
  std::vector<int> classes_;    // distinct link weights, strongest first
  int min_class_ = 1;           // links weaker than this are ignored in the current search
  std::vector<Mask> adj_;       // links of at least min_class_
  double max_weight_ = 0;
  std::map<std::pair<Mask, int>, Subtree> memo_;  // by Key(set, root, levels)
  // Per link class: whether (set, root, levels) admits a tree; weights never change this.
  std::map<int, std::unordered_map<std::pair<Mask, int>, bool, PairHash>> feasible_;
  int64_t steps_ = 0;
  bool exhausted_ = false;  // the search ran out of steps: its answers are no longer complete
};

Status CheckBuildable(const Topology& topology, int root) {
  LOOM_ENFORCE(topology.size() <= 64, "tree builder supports at most 64 devices, topology has ",
               topology.size());
  LOOM_ENFORCE(root >= 0 && root < topology.size(), "root ", root, " is outside 0..",
               topology.size() - 1);
  return Status::OK();
}

}  // namespace

int CeilLog2(int n) {
  LOOM_CHECK(n >= 1, "CeilLog2 of ", n);
  int d = 0;
  while ((1 << d) < n) ++d;
  return d;
}

std::vector<std::pair<int, int>> Tree::Edges() const {
  std::vector<std::pair<int, int>> out;
  for (const auto& level : levels) out.insert(out.end(), level.begin(), level.end());
  return out;
}

std::string Tree::ToString() const {
  std::ostringstream os;
  os << "root " << root << ":";
  for (size_t l = 0; l < levels.size(); ++l) {
    os << (l ? " |" : "") << " L" << l + 1;
    for (const auto& [p, c] : levels[l]) os << " " << p << "-" << c;
  }
  return os.str();
}

StatusOr<Tree> BuildTree(const Topology& topology, int root) {
  LOOM_RETURN_IF_ERROR(CheckBuildable(topology, root));
  Searcher searcher(topology);
  return searcher.Build(root);
}

std::vector<StatusOr<Tree>> BuildTreeForEachRoot(const Topology& topology) {
  std::vector<StatusOr<Tree>> trees;
  Status buildable = CheckBuildable(topology, 0);
  Searcher searcher(topology);
  for (int root = 0; root < topology.size(); ++root)
    trees.push_back(buildable.ok() ? searcher.Build(root) : StatusOr<Tree>(buildable));
  return trees;
}

StatusOr<std::vector<Tree>> BuildTrees(const Topology& topology,
                                       const TreeBuilderOptions& options) {
  LOOM_RETURN_IF_ERROR(CheckBuildable(topology, 0));
  LOOM_ENFORCE(options.link_penalty > 0 && options.link_penalty <= 1, "link penalty ",
               options.link_penalty, " is outside (0, 1]");
  Searcher searcher(topology);
  std::vector<Tree> trees;
  for (int root = 0; root < topology.size(); ++root) {
    LOOM_ASSIGN_OR_RETURN(Tree tree, searcher.Build(root));
    for (const auto& [p, c] : tree.Edges()) searcher.Penalize(p, c, options.link_penalty);
    trees.push_back(std::move(tree));
  }
  return trees;
}

Status ValidateTree(const Topology& topology, const Tree& tree) {
  const int n = topology.size();
  LOOM_ENFORCE(tree.root >= 0 && tree.root < n, "root ", tree.root, " is outside 0..", n - 1);
  LOOM_ENFORCE(tree.depth() == CeilLog2(n), "depth ", tree.depth(), ", expected ", CeilLog2(n));
  std::vector<bool> in_tree(n, false);
  in_tree[tree.root] = true;
  int count = 1;
  for (int l = 0; l < tree.depth(); ++l) {
    std::vector<bool> used(n, false);
    for (const auto& [p, c] : tree.levels[l]) {
      LOOM_ENFORCE(p >= 0 && p < n && c >= 0 && c < n, "level ", l + 1, ": edge ", p, "-", c,
                   " names a device outside 0..", n - 1);
      LOOM_ENFORCE(in_tree[p], "level ", l + 1, ": parent ", p, " is not yet in the tree");
      LOOM_ENFORCE(!in_tree[c], "level ", l + 1, ": child ", c, " is already in the tree");
      LOOM_ENFORCE(!used[p] && !used[c], "level ", l + 1, ": device ", used[p] ? p : c,
                   " appears twice");
      LOOM_ENFORCE(topology.connected(p, c), "level ", l + 1, ": no link between ", p, " and ", c);
      used[p] = used[c] = true;
    }
    for (const auto& [p, c] : tree.levels[l]) {
      in_tree[c] = true;
      ++count;
    }
  }
  LOOM_ENFORCE(count == n, "tree spans ", count, " of ", n, " devices");
  return Status::OK();
}

std::vector<int> BuildRingOrder(const Topology& topology) {
  const int n = topology.size();
  // Missing links count as strongly negative so any ring over real links wins.
  auto score = [&](int a, int b) {
    return topology.connected(a, b) ? static_cast<double>(topology.weight(a, b)) : -100.0;
  };
  std::vector<int> order{0};
  std::vector<bool> used(n, false);
  used[0] = true;
  for (int i = 1; i < n; ++i) {
    const int last = order.back();
    int pick = -1;
    for (int v = 0; v < n; ++v) {
      if (!used[v] && (pick < 0 || score(last, v) > score(last, pick))) pick = v;
    }
    used[pick] = true;
    order.push_back(pick);
  }
  // 2-opt: reverse order[i..j] when that raises the ring's total weight.
  bool improved = n > 3;
  for (int round = 0; improved && round < 100; ++round) {
    improved = false;
    for (int i = 1; i < n - 1; ++i) {
      for (int j = i + 1; j < n; ++j) {
        const int a = order[i - 1], b = order[i], c = order[j], d = order[(j + 1) % n];
        if (score(a, c) + score(b, d) > score(a, b) + score(c, d) + 1e-9) {
          std::reverse(order.begin() + i, order.begin() + j + 1);
          improved = true;
        }
      }
    }
  }
  return order;
}

Tree StarTree(int n, int root) {
  Tree tree;
  tree.root = root;
  for (int v = 0; v < n; ++v) {
    if (v != root) tree.levels.push_back({{root, v}});
  }
  return tree;
}

Tree ChainTree(const std::vector<int>& order, int root) {
  const int n = static_cast<int>(order.size());
  const int start = static_cast<int>(std::find(order.begin(), order.end(), root) - order.begin());
  LOOM_CHECK(start < n, "root ", root, " not in ring order");
  Tree tree;
  tree.root = root;
  for (int i = 1; i < n; ++i) {
    tree.levels.push_back({{order[(start + i - 1) % n], order[(start + i) % n]}});
  }
  return tree;
}

}  // namespace loom::collective

namespace loom::collective {

TreeScore ScoreTree(const Topology& topology, const Tree& tree) {
  TreeScore s;
  s.weakest = tree.Edges().empty() ? 0 : 3;
  for (const auto& [a, b] : tree.Edges()) {
    s.weakest = std::min(s.weakest, topology.weight(a, b));
    s.total += topology.weight(a, b);
  }
  return s;
}

namespace {

class ExhaustiveSearch {
 public:
  ExhaustiveSearch(const Topology& t, int root, long long max_steps)
      : t_(t), n_(t.size()), depth_(CeilLog2(t.size())), max_steps_(max_steps) {
    for (int a = 0; a < n_; ++a) {
      for (int b = 0; b < n_; ++b) max_weight_ = std::max(max_weight_, t.weight(a, b));
    }
    in_tree_.assign(n_, false);
    in_tree_[root] = true;
    members_.push_back(root);
    current_.root = root;
    current_.levels.resize(depth_);
  }

  StatusOr<Tree> Run() {
    Level(0, 3, 0);
    if (steps_ > max_steps_) {
      return ResourceExhausted("the exhaustive tree search gave up after ", max_steps_, " steps");
    }
    if (!found_) return NotFound("no tree of depth ", depth_, " over real links exists");
    return best_;
  }

 private:
  // Starts level `level` with the tree built so far.
  void Level(int level, int weakest, int total) {
    if (++steps_ > max_steps_ || level >= depth_) return;
    Pair(level, 0, members_.size(), weakest, total);
  }

  // Gives members_[i], ..., members_[count - 1] (the tree before this level) a new partner
  // each, or none, then closes the level.
  void Pair(int level, size_t i, size_t count, int weakest, int total) {
    if (++steps_ > max_steps_) return;
    const int placed = static_cast<int>(members_.size());
    // Bound: every edge still to place at most max_weight_.
    const TreeScore bound{weakest, total + (n_ - placed) * max_weight_};
    if (found_ && !(best_score_ < bound)) return;
    if (i == count) {
      if (placed == n_) {
        const TreeScore s{weakest, total};
        if (!found_ || best_score_ < s) {
          found_ = true;
          best_score_ = s;
          best_ = current_;
          best_.levels.resize(level + 1);
        }
        return;
      }
      // The tree can at most double on each level left.
      const long long reach = static_cast<long long>(placed) << (depth_ - level - 1);
      if (static_cast<size_t>(placed) == count || reach < n_) return;
      Level(level + 1, weakest, total);
      return;
    }
    const int parent = members_[i];
    std::vector<int> candidates;  // heaviest links first
    for (int c = 0; c < n_; ++c) {
      if (!in_tree_[c] && t_.connected(parent, c)) candidates.push_back(c);
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](int a, int b) { return t_.weight(parent, a) > t_.weight(parent, b); });
    for (int c : candidates) {
      const int w = t_.weight(parent, c);
      in_tree_[c] = true;
      members_.push_back(c);
      current_.levels[level].push_back({parent, c});
      Pair(level, i + 1, count, std::min(weakest, w), total + w);
      current_.levels[level].pop_back();
      members_.pop_back();
      in_tree_[c] = false;
      if (steps_ > max_steps_) return;
    }
    Pair(level, i + 1, count, weakest, total);
  }

  const Topology& t_;
  int n_, depth_;
  long long max_steps_, steps_ = 0;
  int max_weight_ = 0;
  std::vector<bool> in_tree_;
  std::vector<int> members_;
  Tree current_, best_;
  TreeScore best_score_;
  bool found_ = false;
};

}  // namespace

StatusOr<Tree> ExhaustiveTree(const Topology& topology, int root, long long max_steps) {
  const int n = topology.size();
  LOOM_ENFORCE(root >= 0 && root < n, "root ", root, " is outside 0..", n - 1);
  if (n > 16) {
    return InvalidArgument("the exhaustive tree search takes at most 16 devices, not ", n);
  }
  if (n == 1) {
    Tree t;
    t.root = root;
    return t;
  }
  ExhaustiveSearch search(topology, root, max_steps);
  return search.Run();
}

}  // namespace loom::collective
