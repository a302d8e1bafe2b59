// loom topo and loom bench collective end to end: the trees the CLI prints for the reference
// machines, detection without a GPU, the nccl-tests table of bench, and usage errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <string>

#include "base/cpu_affinity.h"

namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

std::string Slurp(const std::string& path) {
  std::string text;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    std::fclose(f);
  }
  return text;
}

Result Loom(const std::string& args, const std::string& env = "") {
  const std::string base = "/tmp/loom_collective_cli_" + std::to_string(getpid());
  const std::string cmd =
      env + " " + LOOM_CLI_PATH + " " + args + " > " + base + ".out 2> " + base + ".err";
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = Slurp(base + ".out");
  r.err = Slurp(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

// The lines of `text` that start (after spaces) with "root ".
std::vector<std::string> TreeLines(const std::string& text, const std::string& section) {
  std::vector<std::string> out;
  std::istringstream in(text.substr(text.find(section)));
  std::string line;
  std::getline(in, line);  // the section title
  while (std::getline(in, line) && !line.empty()) out.push_back(line);
  return out;
}

TEST(LoomTopo, P3PresetHasNvlinkOnlyTreesForAllEightRoots) {
  Result r = Loom("topo --preset p3.16xlarge");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto trees = TreeLines(r.out, "trees (one per root)");
  ASSERT_EQ(trees.size(), 8u) << r.out;
  for (int root = 0; root < 8; ++root) {
    EXPECT_NE(trees[root].find("root " + std::to_string(root) + ":"), std::string::npos)
        << trees[root];
    EXPECT_NE(trees[root].find("[nvlink-only]"), std::string::npos) << trees[root];
    // Every edge a-b printed in the tree is a weight >= 2 entry of the matrix printed above.
  }
  const auto multi = TreeLines(r.out, "multi-trees");
  ASSERT_EQ(multi.size(), 8u) << r.out;
  EXPECT_NE(r.out.find("ring: 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(weakest link weight 3)"), std::string::npos) << r.out;
}

TEST(LoomTopo, PrintedTreeEdgesAreLinksOfThePrintedMatrix) {
  Result r = Loom("topo --preset dgx1-p100");
  ASSERT_EQ(r.code, 0) << r.err;
  // Matrix rows: "   a  w w w ..." after the header line.
  std::istringstream in(r.out.substr(r.out.find("link matrix")));
  std::string line;
  std::getline(in, line);
  std::getline(in, line);
  std::vector<std::vector<std::string>> m;
  for (int a = 0; a < 8 && std::getline(in, line); ++a) {
    std::istringstream cells(line);
    std::string cell;
    cells >> cell;  // row label
    m.emplace_back();
    while (cells >> cell) m.back().push_back(cell);
    ASSERT_EQ(m.back().size(), 8u) << line;
  }
  const std::regex edge("(\\d+)-(\\d+)");
  for (const std::string& tree : TreeLines(r.out, "trees (one per root)")) {
    for (std::sregex_iterator it(tree.begin(), tree.end(), edge), end; it != end; ++it) {
      const int a = std::stoi((*it)[1]), b = std::stoi((*it)[2]);
      EXPECT_GE(std::stoi(m[a][b]), 2) << "edge " << a << "-" << b << " in " << tree;
    }
  }
}

TEST(LoomTopo, DetectWithoutGpuSaysSo) {
  // An empty PATH hides nvidia-smi even on a GPU machine.
  Result r = Loom("topo --detect", "PATH=/nonexistent");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.err.find("no NVIDIA GPU"), std::string::npos) << r.err;
}

TEST(LoomTopo, HelpUsageErrorsAndSelectorTable) {
  Result help = Loom("topo --help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("--preset"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--detect"), std::string::npos) << help.out;
  Result none = Loom("topo");
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("--preset"), std::string::npos) << none.err;
  Result bad = Loom("topo --preset nosuchmachine");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("nosuchmachine"), std::string::npos) << bad.err;
  Result two = Loom("topo --preset mesh4 --uniform 4");
  EXPECT_EQ(two.code, 1);
  Result exact = Loom("topo --preset p3.16xlarge --exact");
  ASSERT_EQ(exact.code, 0) << exact.err;
  EXPECT_NE(exact.out.find("root 0: builder 2/19, exhaustive 2/20"), std::string::npos)
      << exact.out;
  Result table = Loom("topo --uniform 4 --selector");
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("auto"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("67108864"), std::string::npos) << table.out;
}

// Every data row of a loom bench collective table ends in its #wrong count, which must be 0;
// the table has at least two rows.
void ExpectEveryRowRight(const std::string& out, const std::string& what) {
  std::istringstream in(out);
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.find("size(B)") != std::string::npos) continue;
    ++rows;
    std::istringstream cells(line);
    std::string cell, last;
    while (cells >> cell) last = cell;
    EXPECT_EQ(last, "0") << what << ": " << line;
  }
  EXPECT_GE(rows, 2) << out;
}

TEST(LoomBench, CollectiveTableHasNcclTestsColumnsAndNoWrongElements) {
  for (const std::string op : {"allreduce", "broadcast", "reduce", "allgather", "reducescatter"}) {
    Result r = Loom("bench collective --op " + op +
                    " --algo all -b 1K -e 64K -f 8 -n 2 -w 1 --places cpu:3 --inflight 2");
    ASSERT_EQ(r.code, 0) << op << ": " << r.err;
    EXPECT_NE(r.out.find("size(B)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("busbw(GB/s)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("#wrong"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("auto:"), std::string::npos) << r.out;
    ExpectEveryRowRight(r.out, op);
  }
}

// --in-place: one buffer for send and receive; the checked call of every row still gets the
// reference result, and what cannot run in place is a usage error naming why.
TEST(LoomBench, InPlaceRowsAreCheckedAndTheirLimitsAreUsageErrors) {
  for (const std::string op : {"allreduce", "broadcast", "reduce"}) {
    Result r = Loom("bench collective --in-place --op " + op +
                    " --algo all -b 1K -e 64K -f 8 -n 2 -w 1 --places cpu:3 -d fp64");
    ASSERT_EQ(r.code, 0) << op << ": " << r.err;
    EXPECT_NE(r.out.find(", in place"), std::string::npos) << r.out;
    ExpectEveryRowRight(r.out, op);
  }
  Result gather = Loom("bench collective --in-place --op allgather -b 1K -e 1K");
  EXPECT_EQ(gather.code, 2);
  EXPECT_NE(gather.err.find("allreduce, reduce and broadcast"), std::string::npos) << gather.err;
  Result ints = Loom("bench collective --in-place -d int32 -b 1K -e 1K");
  EXPECT_EQ(ints.code, 2);
  EXPECT_NE(ints.err.find("overflow"), std::string::npos) << ints.err;
  // A broadcast moves bytes: any type runs in place.
  EXPECT_EQ(Loom("bench collective --in-place --op broadcast -d int32 -b 1K -e 1K -n 1 -w 0 "
                 "--places cpu:2")
                .code,
            0);
}

TEST(LoomBench, PlacementLineCountsTheRoundsAndRowsWhereRanksSharedACpu) {
  // Pinned (--bind core) to a CPU each, two ranks never share one where two are allowed: 2 sizes
  // x 2 algorithms = 4 rows of 3 rounds, none crowded.
  const int cpus = static_cast<int>(loom::AllowedCpus().size());
  Result r = Loom(
      "bench collective --places cpu:2 --algo ring,tree -b 1K -e 4K -f 4 -n 2 -w 1 --rounds 3 "
      "--bind core");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string want = "# Placement            : 2 ranks on " + std::to_string(cpus) +
                           " CPUs; crowded onto fewer CPUs in 0 of 12 timed rounds, in most "
                           "rounds of 0 of 4 rows";
  EXPECT_NE(r.out.find(want), std::string::npos) << r.out;
}

// Checks `loom bench copies -b 4K -e 16K -f 4` output: its header, and two rows of five
// positive times (clean, src, dst, both, read) and the rates they give.
void CheckCopiesTable(const std::string& out, bool processes) {
  EXPECT_NE(out.find("clean(us)    src(us)    dst(us)   both(us)   read(us)"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("process_vm_readv") != std::string::npos, processes) << out;
  int rows = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream row(line);
    double bytes = 0, us[5], gbps[5], more = 0;
    row >> bytes;
    for (double& u : us) row >> u;
    for (double& g : gbps) row >> g;
    ASSERT_FALSE(row.fail()) << line;
    EXPECT_FALSE(row >> more) << line;  // nothing after the rates
    EXPECT_EQ(bytes, rows == 0 ? 4096 : 16384) << line;
    for (int i = 0; i < 5; ++i) {
      EXPECT_GT(us[i], 0) << line;
      // The rate is the size over the time (both printed rounded).
      EXPECT_NEAR(gbps[i], bytes / us[i] / 1e3, 0.01 * gbps[i] + 0.01) << line;
    }
    ++rows;
  }
  EXPECT_EQ(rows, 2) << out;
}

TEST(LoomBench, CopiesTimesEachCaseOfWhichCoreWroteTheBuffersLast) {
  // Threads of one process (memcpy), and two processes (process_vm_readv).
  for (const std::string mode : {"", " --processes"}) {
    SCOPED_TRACE(mode);
    Result r = Loom("bench copies -b 4K -e 16K -f 4 -n 20 --rounds 2" + mode);
    if (loom::AllowedCpus().size() < 2) {
      EXPECT_EQ(r.code, 1);
      EXPECT_NE(r.err.find("needs two CPUs"), std::string::npos) << r.err;
      return;
    }
    ASSERT_EQ(r.code, 0) << r.err;
    CheckCopiesTable(r.out, !mode.empty());
  }
  for (const char* bad : {"-b 16", "-b 1M -e 1K", "--rounds 0", "--op allreduce"}) {
    EXPECT_EQ(Loom(std::string("bench copies ") + bad).code, 2) << bad;
  }
  Result help = Loom("bench copies --help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("--rounds"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--processes"), std::string::npos) << help.out;
}

TEST(LoomBench, UsageErrors) {
  EXPECT_EQ(Loom("bench collective -b 1X").code, 2);
  EXPECT_EQ(Loom("bench collective --op allscatter").code, 2);
  EXPECT_EQ(Loom("bench collective -b 1M -e 1K").code, 2);
  EXPECT_EQ(Loom("bench nothing").code, 2);
  Result unsupported = Loom("bench collective --op allgather --algo tree -b 1K -e 1K");
  EXPECT_EQ(unsupported.code, 1);
  EXPECT_NE(unsupported.err.find("AllGather has no 'tree'"), std::string::npos) << unsupported.err;
  // In-process ranks have native collectives now; CUDA places need a GPU (or a CUDA build).
  Result native = Loom("bench collective --algo native -b 1K -e 1K --transport inprocess");
  EXPECT_EQ(native.code, 0) << native.err;
  EXPECT_NE(native.out.find("native"), std::string::npos) << native.out;
  Result gpu = Loom("bench collective --places cuda:0,0 -b 1K -e 1K");
  if (gpu.code != 0) {
    EXPECT_EQ(gpu.code, 1);
    EXPECT_TRUE(gpu.err.find("no CUDA device") != std::string::npos ||
                gpu.err.find("built without CUDA") != std::string::npos)
        << gpu.err;
  }
  EXPECT_EQ(Loom("bench collective --places cuda:x").code, 2);
  Result unknown = Loom("bench collective --places cpu:2 --transport p2p");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(
      unknown.err.find("unknown transport 'p2p' (registered: inprocess, mpi, nccl, cuda_p2p)"),
      std::string::npos)
      << unknown.err;
  EXPECT_EQ(Loom("bench collective --places cpu:2 --transport cuda_p2p").code, 2);
  EXPECT_EQ(Loom("bench collective --places cuda:0 --transport mpi").code, 2);
  // A row reports the median of its rounds or, with --stat min, the fastest.
  Result stat = Loom("bench collective --places cpu:2 -b 1K -e 1K --stat mean");
  EXPECT_EQ(stat.code, 2);
  EXPECT_NE(stat.err.find("--stat must be median or min, not 'mean'"), std::string::npos)
      << stat.err;
  // --bind core pins in-process rank threads (and their workers) to CPUs; none (the default)
  // leaves them to the OS.
  Result bind = Loom("bench collective --places cpu:2 -b 1K -e 1K --bind socket");
  EXPECT_EQ(bind.code, 2);
  EXPECT_NE(bind.err.find("--bind must be core or none, not 'socket'"), std::string::npos)
      << bind.err;
  for (const char* how : {"core", "none"}) {
    Result bound = Loom(std::string("bench collective --places cpu:4 -b 1K -e 1K --bind ") + how);
    EXPECT_EQ(bound.code, 0) << how << ": " << bound.err;
    EXPECT_EQ(bound.err.find("unpinned"), std::string::npos) << how << ": " << bound.err;
  }
  Result fastest = Loom("bench collective --places cpu:2 -b 1K -e 4K --rounds 3 --stat min");
  EXPECT_EQ(fastest.code, 0) << fastest.err;
  EXPECT_NE(fastest.out.find("#wrong"), std::string::npos) << fastest.out;
}

}  // namespace

// loom simulate: the nccl-tests table for a machine and a cluster, the mesh4 ring's closed form
// through the CLI, and usage errors.
// --plot: the table drawn as a PNG through `python3 -m loom.sim plot-json`; a helper that fails
// is an error naming the flag, and leaves no file.
TEST(LoomSimulate, PlotWritesAPngThroughThePythonHelper) {
  if (std::system("/usr/bin/python3 -c 'import matplotlib' 2>/dev/null") != 0)
    GTEST_SKIP() << "Debian's python3-matplotlib is not installed: --plot is not tested";
  const std::string cli = LOOM_CLI_PATH;
  if (Slurp(cli.substr(0, cli.rfind('/')) + "/../python/loom/sim.py").empty())
    GTEST_SKIP() << "this build has no Python package beside the CLI: --plot is not tested";
  const std::string png = "/tmp/loom_sim_plot_" + std::to_string(getpid()) + ".png";
  std::remove(png.c_str());
  Result busbw =
      Loom("simulate --topology mesh4 --algo ring,tree --sizes 1K:16M --factor 8 --plot " + png);
  ASSERT_EQ(busbw.code, 0) << busbw.err;
  EXPECT_NE(busbw.out.find("ring"), std::string::npos) << "the table is printed too";
  EXPECT_EQ(Slurp(png).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::remove(png.c_str());
  Result steps = Loom("simulate --topology mesh4 --model resnet50 --scale 1,2,4 --plot " + png);
  ASSERT_EQ(steps.code, 0) << steps.err;
  EXPECT_EQ(Slurp(png).substr(0, 4), "\x89PNG");
  std::remove(png.c_str());
  Result failed =
      Loom("simulate --topology mesh4 --sizes 1K:1K --plot " + png, "LOOM_PYTHON=/bin/false");
  EXPECT_NE(failed.code, 0);
  EXPECT_NE(failed.err.find("--plot " + png), std::string::npos) << failed.err;
  EXPECT_NE(failed.err.find("exit code 1"), std::string::npos) << failed.err;
  EXPECT_EQ(Slurp(png), "");
}

TEST(LoomSimulate, TablesAndErrors) {
  Result help = Loom("simulate --help");
  EXPECT_EQ(help.code, 0);
  for (const char* flag :
       {"--topology", "--cluster", "--op", "--algo", "--sizes", "--factor", "--dtype", "--root",
        "--chunk-bytes", "--post-us", "--reduce-gbps", "--efficiency", "--mpi-exchange",
        "--nccl-ll128-max", "--nccl-ll128-efficiency", "--nccl-launch-us"}) {
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
  }
  Result ring = Loom("simulate --topology mesh4 --algo ring --sizes 4M:4M --post-us 0");
  ASSERT_EQ(ring.code, 0) << ring.err;
  // 6 steps of (2 us + 1 MiB / 50 GB/s).
  std::smatch m;
  const std::regex row(R"(4194304\s+1048576\s+fp32\s+sum\s+-1\s+ring\s+([0-9.]+))");
  ASSERT_TRUE(std::regex_search(ring.out, m, row)) << ring.out;
  EXPECT_NEAR(std::stod(m[1]), 6 * (2 + 1048576 / 50e3), 0.01);

  Result cluster = Loom(
      "simulate --cluster 4x8:dgx-a100:4x100Gb --algo auto,hierarchical --sizes 1K:64M "
      "--factor 64");
  ASSERT_EQ(cluster.code, 0) << cluster.err;
  EXPECT_NE(cluster.out.find("32 devices (4 nodes x 8)"), std::string::npos) << cluster.out;
  EXPECT_NE(cluster.out.find("auto:"), std::string::npos) << cluster.out;
  EXPECT_NE(cluster.out.find("nic"), std::string::npos) << cluster.out;

  // MPI ranks: small allreduces run inside the signature round; an algorithm listed beside
  // others skips the sizes it does not run at, alone it is an error naming the window.
  Result mpi = Loom(
      "simulate --topology mesh4 --mpi-exchange --algo auto,exchange --sizes 64:64K --factor 64");
  ASSERT_EQ(mpi.code, 0) << mpi.err;
  EXPECT_TRUE(std::regex_search(mpi.out, std::regex(R"(\n\s+64\s+16\s.*auto:exchange)")))
      << mpi.out;
  EXPECT_TRUE(std::regex_search(mpi.out, std::regex(R"(\n\s+4096\s+1024\s.*auto:split_exchange)")))
      << mpi.out;
  EXPECT_FALSE(std::regex_search(mpi.out, std::regex(R"(\n\s+4096\s+1024\s.* exchange)")))
      << mpi.out;
  Result outside = Loom("simulate --topology mesh4 --algo exchange --sizes 64K:64K");
  EXPECT_NE(outside.code, 0);
  EXPECT_NE(outside.err.find("at most 2048 bytes"), std::string::npos) << outside.err;

  // NCCL's protocols: the low-latency one up to --nccl-ll128-max, Simple above; the flags move
  // the switch and the launch cost.
  Result nccl = Loom("simulate --topology nd-a100-v4 --algo nccl --sizes 1M:512M --factor 512");
  ASSERT_EQ(nccl.code, 0) << nccl.err;
  EXPECT_TRUE(std::regex_search(nccl.out, std::regex(R"(\n\s+1048576\s.*nccl:ring/LL128)")))
      << nccl.out;
  EXPECT_TRUE(std::regex_search(nccl.out, std::regex(R"(\n\s+536870912\s.*nccl:ring/Simple)")))
      << nccl.out;
  Result simple = Loom(
      "simulate --topology nd-a100-v4 --algo nccl_ring --sizes 1M:1M --nccl-ll128-max 0 "
      "--nccl-launch-us 0");
  ASSERT_EQ(simple.code, 0) << simple.err;
  EXPECT_NE(simple.out.find("nccl_ring/Simple"), std::string::npos) << simple.out;

  Result broadcast = Loom(
      "simulate --topology p3.16xlarge --op broadcast --root 3 --algo tree "
      "--sizes 1M:1M");
  ASSERT_EQ(broadcast.code, 0) << broadcast.err;

  Result steps = Loom("simulate --topology mesh4 --model resnet50 --scale 1,4 --algo ring");
  ASSERT_EQ(steps.code, 0) << steps.err;
  EXPECT_NE(steps.out.find("25.6M parameters in 161 gradients"), std::string::npos) << steps.out;
  EXPECT_TRUE(std::regex_search(steps.out, std::regex(R"(\n\s+1\s+1\s+\d+.*100\.0%)")))
      << steps.out;
  EXPECT_TRUE(std::regex_search(steps.out, std::regex(R"(\n\s+4\s+1\s+\d+.*ringx)"))) << steps.out;

  const std::pair<const char*, const char*> bad[] = {
      {"simulate --topology mesh4 --model alexnet", "alexnet"},
      {"simulate --topology mesh4 --model resnet50 --scale 0", "--scale entry '0'"},
      {"simulate --topology mesh4 --model resnet50 --algo ring,tree", "one --algo"},
      {"simulate --cluster 2x8:dgx-a100:1x100Gb --model resnet50 --scale 12", "whole nodes"},
      {"simulate", "--topology"},
      {"simulate --topology mesh4 --cluster 2x8:dgx-a100:1x100Gb", "one of"},
      {"simulate --topology nosuchbox", "nosuchbox"},
      {"simulate --cluster 2x8:dgx-a100", "NODESxGPUS"},
      {"simulate --topology mesh4 --algo butterfly --sizes 8:8", "butterfly"},
      {"simulate --topology mesh4 --sizes 8", "MIN:MAX"},
      {"simulate --topology mesh4 --root 9 --op broadcast", "--root 9"},
      {"simulate --topology mesh4 --efficiency 2", "efficiency"},
      {"simulate --topology mesh4 --dtype bf16", "bf16"},
      {"simulate --topology mesh4 --nccl-ll128-max 1X", "--nccl-ll128-max: size '1X'"},
      {"simulate --topology mesh4 --nccl-ll128-efficiency 0", "--nccl-ll128-efficiency"},
      {"simulate --topology mesh4 --nccl-launch-us -1", "--nccl-launch-us"},
  };
  for (const auto& [args, says] : bad) {
    Result r = Loom(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.err.find(says), std::string::npos) << args << ": " << r.err;
  }
}
