// loom topo: prints a machine's link matrix, the ring order, the tree for every root, the
// multi-trees and (with --selector) the cost model's table of algorithm estimates.
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>

#include "collective/communicator.h"
#include "collective/selector.h"
#include "sim/cost_model.h"
#include "tools/bench_mpi.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/gpu.h"

namespace loom::cli {

namespace {

using collective::CommPlan;
using collective::Topology;
using collective::Tree;

Flags TopoFlags() {
  std::string presets;
  for (const auto& p : Topology::PresetNames()) presets += (presets.empty() ? "" : ", ") + p;
  return Flags(
      "topo", "loom topo [--preset NAME | --file F | --detect | --mpi] [--selector] [--exact]",
      "Prints a machine's link matrix (3 = double NVLink, 2 = NVLink, 1 = PCIe, 0 =\n"
      "none), the ring order, the reduction tree for every root (marked nvlink-only\n"
      "when every edge is NVLink) and the multi-trees (one per root, built with the link\n"
      "penalty). Presets: " +
          presets + ".",
      {
          {"preset", "NAME", "a built-in machine", ""},
          {"file", "F", "a topology file (format in docs/COLLECTIVES.md)", ""},
          {"detect", "",
           "this machine's GPUs (CUDA runtime + NVML NVLink counts; else nvidia-smi topo -m)", ""},
          {"uniform", "N", "N devices, all linked alike (the in-process default)", ""},
          {"mpi", "",
           "under mpirun (or loom launch --clients 1): the ranks' nodes and NICs, each rank "
           "describing its host, and the link matrix Loom's MPI communicator builds from them "
           "(rank 0 prints)",
           ""},
          {"penalty", "X", "link penalty between multi-trees", "0.7"},
          {"selector", "", "also print the cost model's estimates and auto's choice", ""},
          {"cost-model", "M",
           "for --selector: sim (the simulator replaying the schedules on this topology, what "
           "auto asks by default) or formulas (the selector's alpha-beta formulas)",
           "sim"},
          {"exact", "",
           "also search every tree per root (branch and bound, up to 16 devices) and print its "
           "score (weakest link / total weight) beside the builder's",
           ""},
          {"op", "COLL",
           "collective for --selector: allreduce, reduce, broadcast, "
           "allgather, reducescatter",
           "allreduce"},
      },
      0, 0);
}

// The GPUs' links: from the CUDA runtime and NVML when this build has CUDA and sees a GPU
// (DetectGpuTopology), else by parsing `nvidia-smi topo -m`: rows "GPUi  X NV2 SYS ...". NV1 is
// one NVLink (weight 2), NVk with k >= 2 several (3); PIX/PXB/PHB/NODE/SYS go through PCIe or
// the CPU (1).
StatusOr<Topology> Detect() {
  StatusOr<Topology> cuda = DetectGpuTopology();
  if (cuda.ok()) return cuda;
  FILE* pipe = popen("nvidia-smi topo -m 2>/dev/null", "r");
  std::string text;
  if (pipe != nullptr) {
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, got);
    pclose(pipe);
  }
  std::vector<std::vector<int>> weights;
  std::istringstream lines(text);
  std::string line;
  bool header = true;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string first;
    fields >> first;
    if (header) {  // the header lists GPU0 GPU1 ... before the other columns
      if (first.rfind("GPU", 0) == 0) header = false;
      continue;
    }
    if (first.rfind("GPU", 0) != 0) continue;
    std::vector<int> row;
    std::string cell;
    // The header holds "GPUi" once per GPU; every GPU row starts with as many matrix cells.
    while (fields >> cell && row.size() < 64) {
      if (cell == "X")
        row.push_back(0);
      else if (cell.rfind("NV", 0) == 0)
        row.push_back(std::atoi(cell.c_str() + 2) >= 2 ? 3 : 2);
      else if (cell == "PIX" || cell == "PXB" || cell == "PHB" || cell == "NODE" || cell == "SYS")
        row.push_back(1);
      else
        break;
    }
    weights.push_back(row);
  }
  if (weights.empty()) {
    return NotFound(
        "--detect found no NVIDIA GPU on this machine (nvidia-smi is missing or lists "
        "no GPU); use --preset NAME or --file F");
  }
  for (auto& row : weights) row.resize(weights.size());
  return Topology::FromWeights(weights);
}

StatusOr<Topology> LoadTopology(const Flags& flags) {
  const int sources = flags.Has("preset") + flags.Has("file") + flags.Has("detect") +
                      flags.Has("uniform") + flags.Has("mpi");
  if (sources > 1)
    return InvalidArgument("give only one of --preset, --file, --detect, --uniform, --mpi");
  if (flags.Has("file")) return Topology::FromFile(flags.Get("file"));
  if (flags.Has("detect")) return Detect();
  if (flags.Has("uniform")) {
    LOOM_ASSIGN_OR_RETURN(int64_t n, flags.GetInt("uniform"));
    LOOM_ENFORCE(n >= 1 && n <= 64, "--uniform ", n, " is outside 1..64");
    return Topology::Uniform(static_cast<int>(n));
  }
  if (sources == 0)
    return InvalidArgument("give --preset NAME, --file F, --detect, --uniform N or --mpi");
  return Topology::Preset(flags.Get("preset"));
}

// The weakest link of a tree, as a label.
std::string TreeLinks(const Topology& t, const Tree& tree) {
  int weakest = 3;
  for (const auto& [a, b] : tree.Edges()) weakest = std::min(weakest, t.weight(a, b));
  if (tree.Edges().empty()) return "";
  return weakest >= 2 ? "nvlink-only" : weakest == 1 ? "uses-pcie" : "uses-missing-links";
}

// --mpi: every rank describes its host; rank 0 prints the nodes and returns their topology, the
// other ranks nothing (nullopt).
StatusOr<std::optional<Topology>> MpiTopology() {
  int rank = 0;
  std::string transport;
  LOOM_ASSIGN_OR_RETURN(collective::NodeMap nodes, DetectNodesOnMpiWorld(&rank, &transport));
  if (rank != 0) return std::optional<Topology>();
  std::printf("%s", collective::DescribeNodes(nodes).c_str());
  const char* how = transport == "mpi+shm"
                        ? "one node: the ranks meet and run their native collectives in shared "
                          "memory; point-to-point over MPI"
                    : transport == "mpi+shm+nodes"
                        ? "the node-hierarchical allreduce: shared memory inside each node, "
                          "one shard per rank across the nodes; the rest over MPI"
                        : "MPI messages";
  std::printf("# transport: %s (%s)\n\n", transport.c_str(), how);
  if (nodes.nodes() == 1)
    return std::optional<Topology>(Topology::Uniform(static_cast<int>(nodes.node_of_rank.size())));
  return std::optional<Topology>(collective::NodeTopology(nodes));
}

Status Topo(const Flags& flags) {
  std::optional<Topology> loaded;
  if (flags.Switch("mpi")) {
    LOOM_ASSIGN_OR_RETURN(loaded, MpiTopology());
    if (!loaded) return Status::OK();
  } else {
    LOOM_ASSIGN_OR_RETURN(Topology from_flags, LoadTopology(flags));
    loaded = std::move(from_flags);
  }
  const Topology& t = *loaded;
  LOOM_ASSIGN_OR_RETURN(double penalty, flags.GetDouble("penalty", 1e-6, 1));
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<const CommPlan> plan, CommPlan::Create(t, penalty));
  const int n = t.size();
  std::printf(
      "topology %s: %d devices\n\nlink matrix (weight; bandwidth GB/s, latency us by "
      "class: 3 = 50/2, 2 = 25/2, 1 = 10/5)\n     ",
      t.name().c_str(), n);
  for (int b = 0; b < n; ++b) std::printf("%3d", b);
  std::printf("\n");
  for (int a = 0; a < n; ++a) {
    std::printf("  %2d ", a);
    for (int b = 0; b < n; ++b) {
      if (a == b)
        std::printf("  -");
      else
        std::printf("%3d", t.weight(a, b));
    }
    std::printf("\n");
  }
  std::printf("\nring:");
  int weakest = 3;
  for (size_t i = 0; i < plan->ring_order.size(); ++i) {
    std::printf(" %d", plan->ring_order[i]);
    if (n > 1) {
      weakest = std::min(weakest, t.weight(plan->ring_order[i],
                                           plan->ring_order[(i + 1) % plan->ring_order.size()]));
    }
  }
  std::printf("  (weakest link weight %d)\n\ntrees (one per root):\n", n > 1 ? weakest : 0);
  for (const Tree& tree : plan->trees) {
    std::printf("  %s  [%s]\n", tree.ToString().c_str(), TreeLinks(t, tree).c_str());
  }
  std::printf("\nmulti-trees (link penalty %.2f):\n", penalty);
  for (const Tree& tree : plan->multi_trees) {
    std::printf("  %s  [%s]\n", tree.ToString().c_str(), TreeLinks(t, tree).c_str());
  }
  if (flags.Switch("exact")) {
    std::printf("\nexact search (score = weakest link / total weight):\n");
    for (const Tree& tree : plan->trees) {
      const collective::TreeScore built = collective::ScoreTree(t, tree);
      StatusOr<Tree> best = collective::ExhaustiveTree(t, tree.root);
      if (!best.ok()) {
        std::printf("  root %d: builder %d/%d, exhaustive: %s\n", tree.root, built.weakest,
                    built.total, best.status().message().c_str());
        continue;
      }
      const collective::TreeScore found = collective::ScoreTree(t, *best);
      std::printf("  root %d: builder %d/%d, exhaustive %d/%d  %s\n", tree.root, built.weakest,
                  built.total, found.weakest, found.total, best->ToString().c_str());
    }
  }
  if (!plan->notes.empty()) std::printf("\nnotes:\n");
  for (const auto& note : plan->notes) std::printf("  %s\n", note.c_str());
  if (flags.Switch("selector")) {
    LOOM_ASSIGN_OR_RETURN(collective::Collective kind,
                          collective::ParseCollective(flags.Get("op")));
    collective::SelectorOptions options;
    const std::string& model = flags.Get("cost-model");
    if (model == "sim") {
      LOOM_ASSIGN_OR_RETURN(sim::Machine machine, sim::Machine::FromTopology(t));
      LOOM_ASSIGN_OR_RETURN(sim::Simulator simulator, sim::Simulator::Create(std::move(machine)));
      options.cost_model = std::make_shared<sim::SimCostModel>(
          std::make_shared<const sim::Simulator>(std::move(simulator)));
    } else if (model == "formulas") {
      options.use_default_cost_model = false;
    } else {
      return InvalidArgument("--cost-model '", model, "' is not formulas or sim");
    }
    collective::Selector selector(*plan, options);
    std::printf("\n%s", selector.Table(kind, 4 << 10, 64 << 20).c_str());
  }
  return Status::OK();
}

}  // namespace

int TopoCommand(int argc, char** argv) {
  Flags flags = TopoFlags();
  return RunSubcommand(flags, argc, argv, Topo);
}

}  // namespace loom::cli
