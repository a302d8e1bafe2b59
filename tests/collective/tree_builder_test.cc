#include "collective/tree_builder.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <random>
#include <tuple>

#include "collective/communicator.h"

namespace loom::collective {
namespace {

void ExpectValid(const Topology& t, const Tree& tree) {
  Status s = ValidateTree(t, tree);
  EXPECT_TRUE(s.ok()) << s.ToString() << "\n" << tree.ToString();
}

TEST(TreeBuilder, EveryPresetEveryRootSingleAndMulti) {
  for (const std::string& name : Topology::PresetNames()) {
    auto t = Topology::Preset(name).value();
    for (int root = 0; root < t.size(); ++root) {
      auto tree = BuildTree(t, root);
      ASSERT_TRUE(tree.ok()) << name << " root " << root << ": " << tree.status().ToString();
      EXPECT_EQ(tree->root, root);
      ExpectValid(t, *tree);
    }
    auto trees = BuildTrees(t);
    ASSERT_TRUE(trees.ok()) << name << ": " << trees.status().ToString();
    ASSERT_EQ(static_cast<int>(trees->size()), t.size());
    for (int root = 0; root < t.size(); ++root) {
      EXPECT_EQ((*trees)[root].root, root);
      ExpectValid(t, (*trees)[root]);
    }
  }
}

TEST(TreeBuilder, NvlinkOnlyOnTheReferenceMachines) {
  for (const char* name : {"p3.16xlarge", "dgx1-p100"}) {
    auto t = Topology::Preset(name).value();
    auto trees = BuildTrees(t).value();
    for (int root = 0; root < t.size(); ++root) {
      for (const Tree& tree : {BuildTree(t, root).value(), trees[root]}) {
        EXPECT_EQ(tree.depth(), 3);
        for (const auto& [p, c] : tree.Edges()) {
          EXPECT_GE(t.weight(p, c), 2) << name << " " << tree.ToString();
        }
      }
    }
  }
}

TEST(TreeBuilder, SmallSizesAndDepth) {
  for (int n = 1; n <= 16; ++n) {
    auto t = Topology::Uniform(n);
    for (int root = 0; root < n; ++root) {
      auto tree = BuildTree(t, root).value();
      EXPECT_EQ(tree.depth(), CeilLog2(n));
      EXPECT_EQ(static_cast<int>(tree.Edges().size()), n - 1);
      ExpectValid(t, tree);
    }
  }
  EXPECT_EQ(CeilLog2(1), 0);
  EXPECT_EQ(CeilLog2(5), 3);
  EXPECT_EQ(CeilLog2(16), 4);
  EXPECT_EQ(CeilLog2(17), 5);
}

TEST(TreeBuilder, PenaltySpreadsLaterTreesOverOtherLinks) {
  auto t = Topology::Preset("p3.16xlarge").value();
  auto plain = BuildTrees(t, TreeBuilderOptions{1.0}).value();
  auto penalized = BuildTrees(t, TreeBuilderOptions{0.7}).value();
  // The first tree sees no penalty yet.
  EXPECT_EQ(plain[0], penalized[0]);
  int differing = 0;
  for (int r = 0; r < 8; ++r) differing += plain[r] == penalized[r] ? 0 : 1;
  EXPECT_GT(differing, 0);
  // Links used: the penalty puts the trees on more distinct links and uses the busiest less.
  auto usage = [](const std::vector<Tree>& trees) {
    std::map<std::pair<int, int>, int> count;
    for (const Tree& tree : trees) {
      for (auto [p, c] : tree.Edges()) ++count[{std::min(p, c), std::max(p, c)}];
    }
    int busiest = 0;
    for (const auto& [link, k] : count) busiest = std::max(busiest, k);
    return std::make_pair(static_cast<int>(count.size()), busiest);
  };
  const auto [plain_links, plain_busiest] = usage(plain);
  const auto [penalized_links, penalized_busiest] = usage(penalized);
  EXPECT_GT(penalized_links, plain_links);
  EXPECT_LE(penalized_busiest, plain_busiest);
  EXPECT_EQ(BuildTrees(t, TreeBuilderOptions{0.0}).status().code(), StatusCode::kInvalidArgument);
}

TEST(TreeBuilder, Deterministic) {
  for (const char* name : {"p3.16xlarge", "dgx2"}) {
    auto t = Topology::Preset(name).value();
    auto a = BuildTrees(t).value();
    auto b = BuildTrees(t).value();
    EXPECT_EQ(a, b);
  }
}

// Independent existence oracle: does a schedule of at most `levels` levels over real links span
// (set, root)? After the first pairing the root's and the child's sides each need a schedule of
// levels - 1 levels, so each holds at most 2^(levels-1) devices. Plain recursion over every split
// with memoization, written apart from the builder.
bool TreeExists(const Topology& t, uint64_t set, int root, int levels,
                std::map<std::tuple<uint64_t, int, int>, bool>* memo) {
  const int m = __builtin_popcountll(set);
  if (m == 1) return true;
  if (levels == 0 || m > (1 << levels)) return false;
  auto key = std::make_tuple(set, root, levels);
  if (auto it = memo->find(key); it != memo->end()) return it->second;
  bool found = false;
  std::vector<int> others;
  for (int v = 0; v < t.size(); ++v) {
    if ((set >> v & 1) && v != root) others.push_back(v);
  }
  // Every non-empty subset of the others as the child's side.
  const uint64_t subsets = uint64_t{1} << others.size();
  for (uint64_t pick = 1; pick < subsets && !found; ++pick) {
    uint64_t half = 0;
    for (size_t i = 0; i < others.size(); ++i) {
      if (pick >> i & 1) half |= uint64_t{1} << others[i];
    }
    if (!TreeExists(t, set & ~half, root, levels - 1, memo)) continue;
    for (int c : others) {
      if ((half >> c & 1) && t.connected(root, c) && TreeExists(t, half, c, levels - 1, memo)) {
        found = true;
        break;
      }
    }
  }
  return (*memo)[key] = found;
}

Topology RandomConnected(std::mt19937& rng, int n) {
  std::vector<std::vector<int>> w(n, std::vector<int>(n, 0));
  std::uniform_int_distribution<int> weight(1, 3);
  // A random spanning tree keeps it connected; extra links appear with a random density.
  for (int v = 1; v < n; ++v) {
    const int u = std::uniform_int_distribution<int>(0, v - 1)(rng);
    w[u][v] = w[v][u] = weight(rng);
  }
  const double density = std::uniform_real_distribution<double>(0.3, 0.9)(rng);
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      if (w[a][b] == 0 && std::uniform_real_distribution<double>(0, 1)(rng) < density) {
        w[a][b] = w[b][a] = weight(rng);
      }
    }
  }
  return Topology::FromWeights(w).value();
}

TEST(TreeBuilder, HundredRandomConnectedGraphs) {
  std::mt19937 rng(20240611);
  int built = 0, impossible = 0;
  for (int g = 0; g < 100; ++g) {
    const int n = 2 + g % 15;
    const Topology t = RandomConnected(rng, n);
    ASSERT_TRUE(t.IsConnected());
    std::map<std::tuple<uint64_t, int, int>, bool> memo;
    const uint64_t all = (uint64_t{1} << n) - 1;
    for (int root = 0; root < n; ++root) {
      auto tree = BuildTree(t, root);
      const bool exists = TreeExists(t, all, root, CeilLog2(n), &memo);
      // Found exactly when one exists (sparse graphs, e.g. a path, admit none).
      ASSERT_EQ(tree.ok(), exists) << "graph " << g << " root " << root << "\n" << t.ToString();
      if (tree.ok()) {
        ExpectValid(t, *tree);
        ++built;
      } else {
        EXPECT_EQ(tree.status().code(), StatusCode::kNotFound);
        ++impossible;
      }
    }
    // The multi-tree set exists exactly when every root has a tree.
    auto trees = BuildTrees(t);
    if (trees.ok()) {
      for (const Tree& tree : *trees) ExpectValid(t, tree);
    }
  }
  EXPECT_GT(built, 4 * impossible);  // the sample is mostly feasible, so the check has teeth
  std::printf("random graphs: %d trees built, %d roots proven impossible\n", built, impossible);
}

TEST(TreeBuilder, SixteenDevicesGetATreePerRootExactlyWhenEachExists) {
  // At 16 devices the exhaustive search is at its largest: the builder must still find every
  // root's tree that exists (DGX-2's switch: all of them) and prove the others impossible. The
  // time is reported, not asserted (no timing asserts in tests; bench/ has the numbers).
  std::mt19937 rng(7);
  std::vector<Topology> graphs = {Topology::Preset("dgx2").value()};
  for (int g = 0; g < 5; ++g) graphs.push_back(RandomConnected(rng, 16));
  for (size_t g = 0; g < graphs.size(); ++g) {
    const Topology& t = graphs[g];
    ASSERT_EQ(t.size(), 16);
    std::map<std::tuple<uint64_t, int, int>, bool> memo;
    bool every_root = true;
    for (int root = 0; root < 16; ++root)
      every_root &= TreeExists(t, (uint64_t{1} << 16) - 1, root, CeilLog2(16), &memo);
    const auto start = std::chrono::steady_clock::now();
    auto trees = BuildTrees(t);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (g == 0) {
      ASSERT_TRUE(trees.ok()) << trees.status().ToString();
    }
    ASSERT_EQ(trees.ok(), every_root) << "graph " << g << ": " << trees.status().ToString();
    if (trees.ok()) {
      ASSERT_EQ(trees->size(), 16u);
      for (int root = 0; root < 16; ++root) {
        EXPECT_EQ((*trees)[root].root, root);
        ExpectValid(t, (*trees)[root]);
      }
    } else {
      EXPECT_EQ(trees.status().code(), StatusCode::kNotFound) << trees.status().ToString();
    }
    std::printf("16-device trees (%s): %.2f ms, %s\n", t.name().c_str(), ms,
                trees.ok() ? "all roots" : "some root has none");
  }
}

TEST(TreeBuilder, UnevenSplitsWhereOnlyTheyUseTheStrongLinks) {
  // Three devices in a line 0 = 1 - 2 (double NVLink, NVLink, and a PCIe link 0-2): rooted at 0,
  // the tree 0-1 | 1-2 uses NVLinks only, which a balanced split ({0, x} against one device)
  // cannot give (it always pairs 0 with 2 over PCIe).
  auto line = Topology::FromWeights({{0, 3, 1}, {3, 0, 2}, {1, 2, 0}}).value();
  auto tree = BuildTree(line, 0);
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  ExpectValid(line, *tree);
  EXPECT_EQ(tree->ToString(), "root 0: L1 0-1 | L2 1-2");
  // Without the PCIe link the line still has a tree for every root.
  auto path = Topology::FromWeights({{0, 2, 0}, {2, 0, 2}, {0, 2, 0}}).value();
  for (int root = 0; root < 3; ++root) {
    auto t = BuildTree(path, root);
    ASSERT_TRUE(t.ok()) << "root " << root << ": " << t.status().ToString();
    ExpectValid(path, *t);
  }
  // Six devices: two triangles of NVLinks joined by one NVLink (2-3), PCIe elsewhere. The bridge
  // ends (2 and 3) get NVLink-only trees of depth 3 (2-3 | 2-0 3-4 | 2-1 3-5); from any other
  // root no NVLink-only schedule of 3 levels exists (one triangle's far node is always left over),
  // so those trees take exactly one PCIe link.
  std::vector<std::vector<int>> w(6, std::vector<int>(6, 1));
  for (int a = 0; a < 6; ++a) w[a][a] = 0;
  for (auto [a, b] : {std::pair{0, 1}, {1, 2}, {0, 2}, {3, 4}, {4, 5}, {3, 5}, {2, 3}})
    w[a][b] = w[b][a] = 2;
  auto bridged = Topology::FromWeights(w).value();
  for (int root = 0; root < 6; ++root) {
    auto t = BuildTree(bridged, root);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ExpectValid(bridged, *t);
    int pcie = 0;
    for (const auto& [p, c] : t->Edges()) pcie += bridged.weight(p, c) == 1;
    EXPECT_EQ(pcie, root == 2 || root == 3 ? 0 : 1) << t->ToString();
  }
}

TEST(TreeBuilder, ErrorsAndHelpers) {
  auto t = Topology::Uniform(4);
  EXPECT_EQ(BuildTree(t, 4).status().code(), StatusCode::kInvalidArgument);
  // A path 0-1-2-3: root 0 has one link but needs two levels of partners.
  auto path =
      Topology::FromWeights({{0, 1, 0, 0}, {1, 0, 1, 0}, {0, 1, 0, 1}, {0, 0, 1, 0}}).value();
  EXPECT_EQ(BuildTree(path, 0).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(BuildTree(path, 1).ok(), true);  // 1-0 | 1-2, 2-3
  Tree bad;
  bad.root = 0;
  bad.levels = {{{0, 1}}, {{0, 2}, {0, 3}}};
  EXPECT_FALSE(ValidateTree(t, bad).ok());
  Tree star = StarTree(4, 2);
  EXPECT_EQ(star.depth(), 3);
  EXPECT_EQ(star.levels[0][0], std::make_pair(2, 0));
  Tree chain = ChainTree({0, 2, 1, 3}, 1);
  EXPECT_EQ(chain.Edges(), (std::vector<std::pair<int, int>>{{1, 3}, {3, 0}, {0, 2}}));
}

}  // namespace
}  // namespace loom::collective

namespace loom::collective {
namespace {

// A chain admits no balanced tree over real links; the search says so at once (every device
// must be within `levels` links of the root), and the plan falls back to chains, noting why.
TEST(TreeBuilderBounds, ChainsAndSparseMatricesEndWithAFallback) {
  for (int n : {24, 64}) {
    std::vector<std::vector<int>> w(n, std::vector<int>(n, 0));
    for (int i = 0; i + 1 < n; ++i) w[i][i + 1] = w[i + 1][i] = 2;
    Topology t = Topology::FromWeights(w).value();
    auto trees = BuildTreeForEachRoot(t);
    ASSERT_EQ(static_cast<int>(trees.size()), n);
    for (const auto& tree : trees) EXPECT_EQ(tree.status().code(), StatusCode::kNotFound);
    auto plan = CommPlan::Create(t).value();
    EXPECT_EQ(static_cast<int>(plan->trees.size()), n);
    ASSERT_FALSE(plan->notes.empty());
    EXPECT_NE(plan->notes[0].find("falling back to the chain along the ring"), std::string::npos);
  }
  // Random sparse 64-device matrices: the search ends (a tree, no tree, or gave up after its
  // step bound), and every tree the plan holds is a valid schedule of its kind.
  std::mt19937 rng(3);
  for (int trial = 0; trial < 3; ++trial) {
    const int n = 64;
    std::vector<std::vector<int>> w(n, std::vector<int>(n, 0));
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < 3; ++k) {
        int j = static_cast<int>(rng() % n);
        if (j != i) w[i][j] = w[j][i] = 1 + static_cast<int>(rng() % 3);
      }
    Topology t = Topology::FromWeights(w).value();
    auto plan = CommPlan::Create(t).value();
    for (const auto& note : plan->notes)
      EXPECT_NE(note.find("falling back"), std::string::npos) << note;
    for (const auto& tree : BuildTreeForEachRoot(t)) {
      if (tree.ok()) {
        ExpectValid(t, tree.value());
      } else {
        EXPECT_TRUE(tree.status().code() == StatusCode::kNotFound ||
                    tree.status().code() == StatusCode::kResourceExhausted)
            << tree.status().ToString();
      }
    }
  }
}

TEST(TopologyBounds, DeeplyNestedJsonIsRefusedBeforeParsing) {
  std::string deep = "{\"weights\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto t = Topology::ParseJson(deep);
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("nests 100001 levels deep"), std::string::npos)
      << t.status().message();
  // Brackets inside strings do not count.
  auto ok =
      Topology::ParseJson("{\"name\": \"[[[[[[[[[[[[[[[[[[[[\", \"weights\": [[0, 1], [1, 0]]}");
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  // A long bad token is cut in the message.
  auto bad = Topology::Parse(std::string(5000, 'x'));
  EXPECT_LT(bad.status().message().size(), 200u);
}

}  // namespace
}  // namespace loom::collective

namespace loom::collective {
namespace {

TEST(ExhaustiveTree, FindsTheBestTreeForEveryRootOfTheReferenceMachines) {
  for (const char* name : {"p3.16xlarge", "dgx1-p100", "mesh4", "pcie8"}) {
    StatusOr<Topology> t = Topology::Preset(name);
    ASSERT_TRUE(t.ok());
    std::vector<StatusOr<Tree>> built = BuildTreeForEachRoot(*t);
    for (int root = 0; root < t->size(); ++root) {
      StatusOr<Tree> best = ExhaustiveTree(*t, root);
      ASSERT_TRUE(best.ok()) << name << " root " << root << ": " << best.status().ToString();
      EXPECT_TRUE(ValidateTree(*t, *best).ok()) << name << " root " << root;
      EXPECT_EQ(best->root, root);
      ASSERT_TRUE(built[root].ok());
      // Never worse than the builder's.
      EXPECT_FALSE(ScoreTree(*t, *best) < ScoreTree(*t, *built[root])) << name << " " << root;
    }
  }
  // p3.16xlarge: 20 for every root (the builder reaches 19 for roots 0, 1, 4 and 5).
  StatusOr<Topology> p3 = Topology::Preset("p3.16xlarge");
  for (int root = 0; root < 8; ++root) {
    StatusOr<Tree> best = ExhaustiveTree(*p3, root);
    EXPECT_EQ(ScoreTree(*p3, *best).total, 20) << root;
    EXPECT_EQ(ScoreTree(*p3, *best).weakest, 2) << root;
  }
}

TEST(ExhaustiveTree, BoundsAndErrors) {
  EXPECT_EQ(ExhaustiveTree(Topology::Uniform(17), 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ExhaustiveTree(Topology::Uniform(16, 2), 0, 10).status().code(),
            StatusCode::kResourceExhausted);
  // A uniform 16-device machine: the bound stops the search at the first complete tree.
  StatusOr<Tree> dgx2 = ExhaustiveTree(Topology::Uniform(16, 3), 5);
  ASSERT_TRUE(dgx2.ok()) << dgx2.status().ToString();
  EXPECT_EQ(ScoreTree(Topology::Uniform(16, 3), *dgx2).total, 15 * 3);
  // Two islands: no tree over real links.
  StatusOr<Topology> split =
      Topology::FromWeights({{0, 3, 0, 0}, {3, 0, 0, 0}, {0, 0, 0, 3}, {0, 0, 3, 0}});
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(ExhaustiveTree(*split, 0).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(ExhaustiveTree(*split, 7).ok());
}

}  // namespace
}  // namespace loom::collective
