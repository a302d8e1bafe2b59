// The data-parallel transpiler: where each pass puts its ops, owner assignment, fusion,
// disabling passes, errors, and the transpiled programs run on several ranks giving the
// single-device result.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "examples/program_builder.h"
#include "executor/executor.h"
#include "framework/op_role.h"
#include "runtime/runner.h"
#include "tests/transpiler/test_nets.h"
#include "transpiler/data_parallel.h"

namespace loom::transpiler {
namespace {

collective::Algorithm Algo(const std::string& name) {
  return collective::ParseAlgorithm(name).value();
}
collective::TransportId Transport(const std::string& name) {
  return collective::FindTransport(name).value()->id;
}
std::vector<Place> Places(const std::vector<std::string>& names) {
  std::vector<Place> out;
  for (const auto& n : names) out.push_back(ParsePlace(n).value());
  return out;
}

std::vector<std::string> OpTypes(const ProgramDesc& p) {
  std::vector<std::string> t;
  for (int i = 0; i < p.GlobalBlock()->OpSize(); ++i) t.push_back(p.GlobalBlock()->Op(i).Type());
  return t;
}

int Count(const ProgramDesc& p, const std::string& type) {
  auto t = OpTypes(p);
  return static_cast<int>(std::count(t.begin(), t.end(), type));
}

bool WritesAny(const OpDesc& op, const std::vector<std::string>& vars) {
  for (const auto& o : op.OutputArgumentNames())
    if (std::find(vars.begin(), vars.end(), o) != vars.end()) return true;
  return false;
}

// Every gradient collective sits right after the last backward op producing one of its grads,
// and no backward compute op after it writes them again.
void ExpectSyncRightAfterProducers(const ProgramDesc& p, const std::string& collective) {
  const BlockDesc* b = p.GlobalBlock();
  int seen = 0;
  for (int i = 0; i < b->OpSize(); ++i) {
    OpDesc op = b->Op(i);
    if (op.Type() != collective || !(op.Role() & kOpRoleBackward)) continue;
    ++seen;
    std::vector<std::string> grads = op.Input("X");
    int j = i - 1;
    while (j >= 0 && (b->Op(j).Role() & kOpRoleCommunication)) --j;  // other syncs in between
    ASSERT_GE(j, 0);
    EXPECT_TRUE(WritesAny(b->Op(j), grads)) << collective << " #" << i << " is not right after "
                                            << "the producer of its gradients";
    for (int k = i + 1; k < b->OpSize(); ++k) {
      OpDesc later = b->Op(k);
      if ((later.Role() & kOpRoleBackward) && !(later.Role() & kOpRoleCommunication)) {
        EXPECT_FALSE(WritesAny(later, grads)) << later.Type() << " #" << k << " rewrites a grad";
      }
    }
  }
  EXPECT_GT(seen, 0);
}

TEST(DataParallelTranspiler, AllReduceModeWithFusion) {
  Net n = Mlp();
  DataParallelConfig c;
  c.nranks = 3;
  auto r = TranspileDataParallel(n.startup, n.main, c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r.value().main.size(), 3u);
  for (int rank = 0; rank < 3; ++rank) {
    const ProgramDesc& s = r.value().startup[rank];
    const ProgramDesc& m = r.value().main[rank];
    EXPECT_EQ(OpTypes(s)[0], "comm_init");
    EXPECT_EQ(s.GlobalBlock()->Op(0).Attr<int>("rank", -1), rank);
    EXPECT_EQ(s.GlobalBlock()->Op(0).Attr<int>("nranks", -1), 3);
    EXPECT_EQ(Count(s, "broadcast"), 6);
    // All six small grads share one bucket: one coalesce_grads, one allreduce, all sgd kept.
    EXPECT_EQ(OpTypes(m)[0], "sample_weight");
    EXPECT_EQ(Count(m, "coalesce_grads"), 1);
    EXPECT_EQ(Count(m, "allreduce"), 1);
    EXPECT_EQ(Count(m, "sgd"), 6);
    ExpectSyncRightAfterProducers(m, "allreduce");
  }
  const auto& man = r.value().manifest;
  ASSERT_EQ(man.buckets_size(), 1);
  EXPECT_TRUE(man.buckets(0).fused());
  // in-process places: the transport's native rendezvous at every size
  EXPECT_EQ(man.buckets(0).algorithm(), "native");
  EXPECT_EQ(man.batch_var(), "x");
  EXPECT_EQ(man.passes_size(), static_cast<int>(DataParallelPasses().size()));
}

TEST(DataParallelTranspiler, NoFusionSyncsEachGradientAsSoonAsItExists) {
  Net n = Mlp();
  DataParallelConfig c;
  c.nranks = 2;
  c.fuse_grad_size_mb = 0;
  c.algorithm = Algo("ring");
  c.grad_scale = GradScale::kAvg;
  auto r = TranspileDataParallel(n.startup, n.main, c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ProgramDesc& m = r.value().main[0];
  EXPECT_EQ(Count(m, "allreduce"), 6);
  EXPECT_EQ(Count(m, "coalesce_grads"), 0);
  EXPECT_EQ(Count(m, "sample_weight"), 0);
  ExpectSyncRightAfterProducers(m, "allreduce");
  const BlockDesc* b = m.GlobalBlock();
  for (int i = 0; i < b->OpSize(); ++i) {
    if (b->Op(i).Type() != "allreduce") continue;
    EXPECT_EQ(b->Op(i).Attr<std::string>("reduce_type", ""), "avg");
    EXPECT_EQ(b->Op(i).Attr<std::string>("algorithm", ""), "ring");
  }
  // The first sync comes before the last backward op: it overlaps with backward.
  int first_sync = -1, last_backward = -1;
  for (int i = 0; i < b->OpSize(); ++i) {
    int role = b->Op(i).Role();
    if (b->Op(i).Type() == "allreduce" && first_sync < 0) first_sync = i;
    if ((role & kOpRoleBackward) && !(role & kOpRoleCommunication)) last_backward = i;
  }
  EXPECT_LT(first_sync, last_backward);
}

TEST(DataParallelTranspiler, OwnerModeBalancesBytesAndKeepsOnlyOwnedUpdates) {
  Net n = Mlp();
  DataParallelConfig c;
  c.nranks = 3;
  c.mode = SyncMode::kOwner;
  auto r = TranspileDataParallel(n.startup, n.main, c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& man = r.value().manifest;
  std::map<std::string, int> owner;
  std::vector<int64_t> load(3, 0);
  for (const auto& p : man.params()) {
    ASSERT_GE(p.owner(), 0);
    owner[p.name()] = p.owner();
    load[p.owner()] += p.bytes();
  }
  // fc_0.w_0 (6x16) is the largest and goes alone; the rest spread over the other ranks.
  for (int k = 0; k < 3; ++k) EXPECT_EQ(man.owner_bytes(k), load[k]);
  EXPECT_GE(man.owner_imbalance(), 1.0);
  int updates = 0;
  for (int rank = 0; rank < 3; ++rank) {
    const BlockDesc* b = r.value().main[rank].GlobalBlock();
    EXPECT_EQ(Count(r.value().main[rank], "reduce"), 6);
    EXPECT_EQ(Count(r.value().main[rank], "broadcast"), 6);
    for (int i = 0; i < b->OpSize(); ++i) {
      OpDesc op = b->Op(i);
      if (op.Type() == "sgd") {
        ++updates;
        EXPECT_EQ(owner[op.Input("Param")[0]], rank);
      }
      if (op.Type() == "broadcast") {
        EXPECT_EQ(op.Attr<int>("root", -1), owner[op.Input("X")[0]]);
      }
      if (op.Type() == "reduce") {
        EXPECT_EQ(op.Attr<int>("root", -1),
                  owner[op.Input("X")[0].substr(0, op.Input("X")[0].size() - 5)]);
      }
    }
  }
  EXPECT_EQ(updates, 6);  // each parameter updated on exactly one rank
}

TEST(DataParallelTranspiler, HashOwnersAreDeterministic) {
  Net n = Mlp();
  DataParallelConfig c;
  c.nranks = 4;
  c.mode = SyncMode::kOwner;
  c.owner_policy = ParsePlacementPolicy("hash").value();
  auto a = TranspileDataParallel(n.startup, n.main, c);
  auto b = TranspileDataParallel(n.startup, n.main, c);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.value().manifest.SerializeAsString(), b.value().manifest.SerializeAsString());
}

TEST(DataParallelTranspiler, OptionalPassesCanBeDisabled) {
  Net n = Mlp();
  DataParallelConfig c;
  c.nranks = 2;
  c.pass_options.disabled = {"broadcast-params", "plan-buckets"};
  auto r = TranspileDataParallel(n.startup, n.main, c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Count(r.value().startup[0], "broadcast"), 0);
  EXPECT_EQ(Count(r.value().main[0], "coalesce_grads"), 0);
  EXPECT_EQ(Count(r.value().main[0], "allreduce"), 6);
  c.pass_options.disabled = {"insert-grad-sync"};
  EXPECT_NE(
      TranspileDataParallel(n.startup, n.main, c).status().message().find("cannot be disabled"),
      std::string::npos);
  c.pass_options.disabled = {"no-such-pass"};
  EXPECT_NE(TranspileDataParallel(n.startup, n.main, c).status().message().find("no pass named"),
            std::string::npos);
}

TEST(DataParallelTranspiler, ClearErrors) {
  Net n = Mlp();
  DataParallelConfig c;
  c.nranks = 2;
  auto once = TranspileDataParallel(n.startup, n.main, c);
  ASSERT_TRUE(once.ok());
  auto twice = TranspileDataParallel(once.value().startup[0], once.value().main[0], c);
  EXPECT_NE(twice.status().message().find("already transpiled"), std::string::npos)
      << twice.status().ToString();
  // No optimizer: only forward ops.
  Net fwd;
  examples::ProgramBuilder b(&fwd.main, &fwd.startup, 1);
  b.Data("x", {4});
  ASSERT_TRUE(b.FC("x", 2, "", "fc").ok());
  EXPECT_NE(
      TranspileDataParallel(fwd.startup, fwd.main, c).status().message().find("no optimizer ops"),
      std::string::npos);
  // In-process ranks have native collectives (one pass over shared memory): kept as asked.
  c.algorithm = Algo("native");
  {
    auto r = TranspileDataParallel(n.startup, n.main, c);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (const auto& b : r.value().manifest.buckets()) EXPECT_EQ(b.algorithm(), "native");
  }
  // Names are parsed where they enter (the CLI, Python): unknown ones fail there.
  EXPECT_FALSE(collective::ParseAlgorithm("bogus").ok());
  c.algorithm = Algo("auto");
  EXPECT_NE(
      collective::FindTransport("carrier-pigeon")
          .status()
          .message()
          .find("unknown transport 'carrier-pigeon' (registered: inprocess, mpi, nccl, cuda_p2p)"),
      std::string::npos);
  c.transport = Transport("mpi");
  c.algorithm = Algo("native");  // MPI has its own allreduce
  EXPECT_TRUE(TranspileDataParallel(n.startup, n.main, c).ok());
  c.algorithm = Algo("auto");
  c.transport = Transport("inprocess");
  // A gradient written inside a sub-block (control flow) is refused, naming it.
  {
    Net sub = Mlp();
    std::string param;
    for (const VarDesc& v : sub.main.GlobalBlock()->AllVars())
      if (v.IsParameter() && param.empty()) param = v.Name();
    BlockDesc* inner = sub.main.AppendBlock(*sub.main.GlobalBlock());
    inner->AppendOp("scale", {{"X", {param + "@GRAD"}}}, {{"Out", {param + "@GRAD"}}},
                    {{"scale", 0.5f}});
    Status st = TranspileDataParallel(sub.startup, sub.main, c).status();
    EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << st.ToString();
    EXPECT_NE(st.message().find("of block 0 is written inside sub-block 1"), std::string::npos)
        << st.ToString();
  }
  c.nranks = 0;
  EXPECT_FALSE(TranspileDataParallel(n.startup, n.main, c).ok());
}

TEST(DataParallelTranspiler, CudaPlacesMeetOverNcclWithItsOwnCollectives) {
  Net n = Mlp();
  DataParallelConfig c;
  c.nranks = 2;
  c.transport = Transport("nccl");
  c.places = Places({"cuda:0", "cuda:1"});
  for (SyncMode mode : {SyncMode::kAllReduce, SyncMode::kOwner}) {
    c.mode = mode;
    auto r = TranspileDataParallel(n.startup, n.main, c);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (int rank = 0; rank < 2; ++rank) {
      const BlockDesc* s = r.value().startup[rank].GlobalBlock();
      EXPECT_EQ(s->Op(0).Type(), "comm_init");
      EXPECT_EQ(s->Op(0).Attr<std::string>("transport", ""), "nccl");
      int collectives = 0;
      for (const ProgramDesc* p : {&r.value().startup[rank], &r.value().main[rank]}) {
        for (int i = 0; i < p->GlobalBlock()->OpSize(); ++i) {
          OpDesc op = p->GlobalBlock()->Op(i);
          if (!op.HasAttr("algorithm")) continue;
          ++collectives;
          EXPECT_EQ(op.Attr<std::string>("algorithm", ""), "native") << op.Type();
        }
      }
      EXPECT_GT(collectives, 0);
    }
    for (const auto& b : r.value().manifest.buckets()) EXPECT_EQ(b.algorithm(), "native");
  }
  c.algorithm = Algo("ring");
  EXPECT_NE(TranspileDataParallel(n.startup, n.main, c)
                .status()
                .message()
                .find("algorithm 'ring' is one of Loom's schedules; transport nccl"),
            std::string::npos);
  c.algorithm = Algo("auto");
  c.places = Places({"cuda:0", "cuda:0"});
  EXPECT_NE(TranspileDataParallel(n.startup, n.main, c)
                .status()
                .message()
                .find("'cuda:0' is given twice"),
            std::string::npos);
  c.places = Places({"cpu:0", "cpu:1"});
  EXPECT_NE(TranspileDataParallel(n.startup, n.main, c)
                .status()
                .message()
                .find("transport nccl needs CUDA places"),
            std::string::npos);
  c.transport = Transport("inprocess");
  c.places = Places({"cuda:0", "cuda:1"});
  EXPECT_NE(TranspileDataParallel(n.startup, n.main, c)
                .status()
                .message()
                .find("CUDA places meet over transport nccl"),
            std::string::npos);
}

TEST(DataParallelTranspiler, CudaPlacesOverCudaP2PRunLoomsSchedules) {
  Net n = Mlp();
  DataParallelConfig c;
  c.nranks = 3;
  c.transport = Transport("cuda_p2p");
  c.places = Places({"cuda:0", "cuda:1", "cuda:2"});
  c.fuse_grad_size_mb = 0;  // one bucket per gradient: small ones
  for (const char* algorithm : {"ring", "tree", "multi_tree", "star", "auto"}) {
    c.algorithm = Algo(algorithm);
    auto r = TranspileDataParallel(n.startup, n.main, c);
    ASSERT_TRUE(r.ok()) << algorithm << ": " << r.status().ToString();
    const BlockDesc* s = r.value().startup[1].GlobalBlock();
    EXPECT_EQ(s->Op(0).Type(), "comm_init");
    EXPECT_EQ(s->Op(0).Attr<std::string>("transport", ""), "cuda_p2p");
    EXPECT_EQ(r.value().manifest.transport(), "cuda_p2p");
    ASSERT_GT(r.value().manifest.buckets_size(), 0);
    for (const auto& b : r.value().manifest.buckets()) {
      // auto resolves with the link crossover: these small gradients take the tree.
      EXPECT_EQ(b.algorithm(), std::string(algorithm) == "auto" ? "tree" : algorithm);
    }
  }
  c.algorithm = Algo("native");
  EXPECT_NE(
      TranspileDataParallel(n.startup, n.main, c)
          .status()
          .message()
          .find("the cuda_p2p transport offers ring, tree, multi_tree, star, direct and auto"),
      std::string::npos);
  c.algorithm = Algo("auto");
  c.places = Places({"cpu:0", "cpu:1", "cpu:2"});
  EXPECT_NE(TranspileDataParallel(n.startup, n.main, c)
                .status()
                .message()
                .find("transport cuda_p2p needs CUDA places"),
            std::string::npos);
  // A GPU listed several times holds several virtual devices (one GPU checks a 3-rank group).
  c.places = Places({"cuda:0", "cuda:1", "cuda:1"});
  auto virtual_devices = TranspileDataParallel(n.startup, n.main, c);
  ASSERT_TRUE(virtual_devices.ok()) << virtual_devices.status().ToString();
  EXPECT_EQ(virtual_devices.value().manifest.places(2), "cuda:1");
}

// Every rank's comm_init carries the fingerprint of the program and options it was transpiled
// from; ranks started from different transpiles fail in comm_init, naming both.
TEST(DataParallelTranspiler, RanksOfDifferentProgramsFailInCommInit) {
  Net n = Mlp();
  DataParallelConfig c;
  c.nranks = 2;
  c.group = "fingerprint-test";
  auto a = TranspileDataParallel(n.startup, n.main, c).value();
  c.fuse_grad_size_mb = 1;
  auto b = TranspileDataParallel(n.startup, n.main, c).value();
  auto fp = [](const ProgramDesc& startup) {
    return startup.GlobalBlock()->Op(0).Attr<std::string>("fingerprint", "");
  };
  EXPECT_EQ(fp(a.startup[0]), fp(a.startup[1]));
  EXPECT_NE(fp(a.startup[0]), fp(b.startup[0]));
  std::vector<runtime::RankProgram> ranks(2);
  ranks[0].startup = a.startup[0];
  ranks[0].main = a.main[0];
  ranks[1].startup = b.startup[1];
  ranks[1].main = b.main[1];
  auto runner = runtime::Runner::Create(std::move(ranks), 0, 2).value();
  Status st = runner->Startup();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("rank 1 runs another program or options than rank 0"),
            std::string::npos)
      << st.message();
}

// Runs the transpiled programs on nranks threads and single-device on the whole batch; the
// parameters must agree (and be identical across ranks).
void ExpectSameTraining(SyncMode mode, int nranks, int rows) {
  Net n = Mlp();
  DataParallelConfig c;
  c.nranks = nranks;
  c.mode = mode;
  c.group = "cc-test-" + std::to_string(static_cast<int>(mode)) + "-" + std::to_string(nranks) +
            "-" + std::to_string(rows);
  auto r = TranspileDataParallel(n.startup, n.main, c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();

  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  Tensor x(proto::FP32, DDim({rows, 6})), label(proto::INT64, DDim({rows, 1}));
  float* xp = x.mutable_data<float>(Place::CPU());
  int64_t* lp = label.mutable_data<int64_t>(Place::CPU());
  for (int i = 0; i < rows * 6; ++i) xp[i] = normal(rng);
  for (int i = 0; i < rows; ++i) lp[i] = i % 3;

  // One place on the whole batch, and the ranks as threads on their shares of it, through the
  // one runner.
  std::vector<runtime::RankProgram> one(1), many(nranks);
  one[0].startup = n.startup;
  one[0].main = n.main;
  for (int k = 0; k < nranks; ++k) {
    many[k].startup = r.value().startup[k];
    many[k].main = r.value().main[k];
  }
  auto single = runtime::Runner::Create(std::move(one), 0, 1).value();
  auto ranks = runtime::Runner::Create(std::move(many), 0, nranks).value();
  ASSERT_TRUE(single->Startup().ok());
  ASSERT_TRUE(ranks->Startup().ok());
  for (int step = 0; step < 10; ++step) {
    ASSERT_TRUE(single->Step({{"x", x}, {"label", label}}, {}).ok());
    Status st = ranks->Step({{"x", x}, {"label", label}}, {});
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  for (const auto& p : r.value().manifest.params()) {
    const Tensor& want = single->scope(0)->FindVar(p.name())->Get<Tensor>();
    for (int k = 0; k < nranks; ++k) {
      const Tensor& got = ranks->scope(k)->FindVar(p.name())->Get<Tensor>();
      ASSERT_EQ(got.numel(), want.numel());
      double diff = 0, norm = 0;
      for (int64_t i = 0; i < want.numel(); ++i) {
        diff += std::pow(got.data<float>()[i] - want.data<float>()[i], 2);
        norm += std::pow(want.data<float>()[i], 2);
      }
      EXPECT_LT(std::sqrt(diff / std::max(norm, 1e-30)), 1e-5)
          << p.name() << " on rank " << k << " of " << nranks;
    }
  }
}

TEST(DataParallelTranspiler, AllReduceRanksTrainLikeOneDevice) {
  ExpectSameTraining(SyncMode::kAllReduce, 3, 10);
}
TEST(DataParallelTranspiler, OwnerRanksTrainLikeOneDevice) {
  ExpectSameTraining(SyncMode::kOwner, 4, 9);
}
TEST(DataParallelTranspiler, FewerSamplesThanRanks) {
  ExpectSameTraining(SyncMode::kAllReduce, 4, 2);
}

}  // namespace
}  // namespace loom::transpiler
