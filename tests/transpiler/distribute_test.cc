// The parameter-server pipeline: slicing as Fluid slices, placement, where sends and receives
// go in trainer programs, what each server's program holds, bad configurations; and a live
// listen_and_serv refusing a wrong-shape gradient without touching its parameters.
#include <unistd.h>

#include <filesystem>
#include <set>
#include <thread>

#include "executor/executor.h"
#include "framework/file_util.h"
#include "framework/op_role.h"
#include "kvstore/sparse_table.h"
#include "rpc/client.h"
#include "rpc/ps_client.h"
#include "tests/transpiler/docs_table.h"
#include "tests/transpiler/test_nets.h"
#include "transpiler/distribute.h"
#include "transpiler/distribute_passes.h"

namespace loom::transpiler {
namespace {

DistributeConfig Config(int servers, int trainers, const std::string& split = "round_robin",
                        int64_t min_block = 8) {
  DistributeConfig c;
  c.trainers = trainers;
  for (int s = 0; s < servers; ++s) c.pservers.push_back(StrCat("127.0.0.1:", 7000 + s));
  c.split_method = split;
  c.min_block_size = min_block;
  return c;
}

std::vector<std::string> OpTypes(const BlockDesc& b) {
  std::vector<std::string> t;
  for (int i = 0; i < b.OpSize(); ++i) t.push_back(b.Op(i).Type());
  return t;
}

TEST(DistributeTest, BlocksCoverEveryRowOnceAndFollowFluidsSlicing) {
  Net n = Mlp();
  auto r = TranspileDistribute(n.startup, n.main, Config(3, 2));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& m = r->manifest;
  std::map<std::string, int64_t> next_row;
  int64_t bytes = 0;
  for (const auto& b : m.blocks()) {
    EXPECT_EQ(b.row_begin(), next_row[b.param()]) << b.name();
    EXPECT_GT(b.row_end(), b.row_begin()) << b.name();
    next_row[b.param()] = b.row_end();
    EXPECT_TRUE(b.server() >= 0 && b.server() < 3);
    bytes += b.bytes();
  }
  // fc_0.w_0 is 6x16 = 96 elements: min(3, 96 / 8) = 3 blocks of 32 elements = 2 rows each.
  EXPECT_EQ(next_row["fc_0.w_0"], 6);
  int w0 = 0;
  for (const auto& b : m.blocks()) w0 += b.param() == "fc_0.w_0";
  EXPECT_EQ(w0, 3);
  int64_t server_total = 0;
  for (int64_t s : m.server_bytes()) server_total += s;
  EXPECT_EQ(server_total, bytes);
  EXPECT_EQ(r->trainer_main.size(), 2u);
  EXPECT_EQ(r->pserver_main.size(), 3u);
}

TEST(DistributeTest, TrainersSendEachGradientRightAfterItsLastWriterAndHaveNoOptimizer) {
  Net n = Mlp();
  auto r = TranspileDistribute(n.startup, n.main, Config(2, 2));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const BlockDesc& b = *r->trainer_main[1].GlobalBlock();
  auto types = OpTypes(b);
  EXPECT_EQ(std::count(types.begin(), types.end(), "sgd"), 0);
  EXPECT_EQ(std::count(types.begin(), types.end(), "send"), 6);
  for (int i = 0; i < b.OpSize(); ++i) {
    OpDesc op = b.Op(i);
    if (op.Type() != "send") continue;
    EXPECT_EQ(op.Attr<int>("trainer_id", -1), 1);
    // The op before the send (or its split_byref) writes the gradient.
    int w = b.Op(i - 1).Type() == "split_byref" ? i - 2 : i - 1;
    std::string grad =
        b.Op(i - 1).Type() == "split_byref" ? b.Op(i - 1).Input("X")[0] : op.Input("X")[0];
    auto outs = b.Op(w).OutputArgumentNames();
    EXPECT_NE(std::find(outs.begin(), outs.end(), grad), outs.end()) << grad;
  }
  // The step ends: send_barrier, recv, concat of sliced parameters, fetch_barrier.
  auto barrier = std::find(types.begin(), types.end(), "send_barrier");
  ASSERT_NE(barrier, types.end());
  EXPECT_EQ(*(barrier + 1), "recv");
  EXPECT_EQ(types.back(), "fetch_barrier");
  // The startup fetches the parameters instead of initializing them.
  auto st = OpTypes(*r->trainer_startup[1].GlobalBlock());
  EXPECT_NE(std::find(st.begin(), st.end(), "recv"), st.end());
  EXPECT_EQ(std::count(st.begin(), st.end(), "uniform_random") +
                std::count(st.begin(), st.end(), "gaussian_random"),
            0);
}

TEST(DistributeTest, ServersHoldOneOptimizeBlockPerBlockTheyOwn) {
  Net n = Mlp();
  auto r = TranspileDistribute(n.startup, n.main, Config(2, 3, "bytes"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::set<std::string> served;
  for (size_t s = 0; s < r->pserver_main.size(); ++s) {
    const ProgramDesc& p = r->pserver_main[s];
    ASSERT_EQ(OpTypes(*p.GlobalBlock()), std::vector<std::string>{"listen_and_serv"});
    OpDesc serve = p.GlobalBlock()->Op(0);
    auto params = serve.Attr<std::vector<std::string>>("param_blocks", {});
    auto blocks = serve.Attr<std::vector<int>>("optimize_blocks", {});
    ASSERT_EQ(params.size(), blocks.size());
    for (size_t i = 0; i < params.size(); ++i) {
      served.insert(params[i]);
      const BlockDesc& ob = *p.Block(blocks[i]);
      ASSERT_EQ(ob.OpSize(), 1);
      EXPECT_EQ(ob.Op(0).Type(), "sgd");
      EXPECT_EQ(ob.Op(0).Input("Param")[0], params[i]);
    }
    EXPECT_EQ(serve.Attr<int>("Fanin", 0), 3);
  }
  std::set<std::string> want;
  for (const auto& b : r->manifest.blocks()) want.insert(b.name());
  EXPECT_EQ(served, want);
}

TEST(DistributeTest, HashPlacementIsStableAndBytesIsBalanced) {
  Net n = Mlp();
  auto a = TranspileDistribute(n.startup, n.main, Config(3, 1, "hash"));
  auto b = TranspileDistribute(n.startup, n.main, Config(3, 1, "HashName"));
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < a->manifest.blocks_size(); ++i)
    EXPECT_EQ(a->manifest.blocks(i).server(), b->manifest.blocks(i).server());
  auto rr = TranspileDistribute(n.startup, n.main, Config(3, 1, "round_robin"));
  auto by = TranspileDistribute(n.startup, n.main, Config(3, 1, "bytes"));
  ASSERT_TRUE(rr.ok() && by.ok());
  EXPECT_LE(by->manifest.imbalance(), rr->manifest.imbalance());
}

TEST(DistributeTest, BadConfigurationsAreErrorsNamingWhatIsWrong) {
  Net n = Mlp();
  auto expect = [&](DistributeConfig c, const std::string& text) {
    auto r = TranspileDistribute(n.startup, n.main, c);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status().ToString();
  };
  DistributeConfig c = Config(2, 2);
  c.pservers.clear();
  expect(c, "no parameter servers");
  c = Config(2, 2);
  c.pservers[1] = c.pservers[0];
  expect(c, "given twice");
  c = Config(2, 2);
  c.pservers[0] = "localhost";
  expect(c, "not host:port");
  c = Config(2, 0);
  expect(c, "trainers");
  c = Config(2, 2, "random");
  expect(c, "split method");
  c = Config(2, 2);
  c.min_block_size = 0;
  expect(c, "min_block_size");
  c = Config(2, 2);
  c.client_size = 2;
  c.client_rank = 2;
  expect(c, "client rank 2 is not a rank of a client of 2 processes");
  auto once = TranspileDistribute(n.startup, n.main, Config(2, 2));
  ASSERT_TRUE(once.ok());
  auto twice = TranspileDistribute(once->trainer_startup[0], once->trainer_main[0], Config(2, 2));
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("already transpiled"), std::string::npos);
}

// Hybrid: rank 0 of a client talks to the servers, the others only join the client's
// collectives; both allreduce every gradient before rank 0 sends it and broadcast the
// parameters, in the same order.
TEST(DistributeTest, HybridClientRanksAllreduceAndOnlyRankZeroTalksToServers) {
  Net n = Mlp();
  std::vector<std::vector<std::string>> collectives;  // per rank, "type:var" in order
  for (int rank = 0; rank < 2; ++rank) {
    DistributeConfig c = Config(2, 3);
    c.client_size = 2;
    c.client_rank = rank;
    auto r = TranspileDistribute(n.startup, n.main, c);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->manifest.mode(), "hybrid");
    EXPECT_EQ(r->manifest.client_size(), 2);
    EXPECT_EQ(r->manifest.passes(r->manifest.passes_size() - 1), "join-clients");
    const BlockDesc& b = *r->trainer_main[1].GlobalBlock();
    auto types = OpTypes(b);
    EXPECT_EQ(types.front(), "sample_weight");
    const int sends = static_cast<int>(std::count(types.begin(), types.end(), "send"));
    EXPECT_EQ(sends, rank == 0 ? 6 : 0);
    EXPECT_EQ(std::count(types.begin(), types.end(), "allreduce"), 6);
    EXPECT_EQ(std::count(types.begin(), types.end(), "broadcast"), 6);
    std::vector<std::string> seq;
    std::set<std::string> reduced;
    for (int i = 0; i < b.OpSize(); ++i) {
      OpDesc op = b.Op(i);
      if (op.Type() == "allreduce" || op.Type() == "broadcast") {
        seq.push_back(op.Type() + ":" + op.Input("X")[0]);
        if (op.Type() == "allreduce") reduced.insert(op.Input("X")[0]);
      }
      if (op.Type() == "split_byref" || op.Type() == "send") {
        // What is sent was reduced in the client first.
        EXPECT_TRUE(reduced.count(op.Input("X")[0]) || op.Type() == "send") << op.Type();
      }
      if (op.Type() == "send_barrier") {
        EXPECT_EQ(op.Input("SampleCount"), std::vector<std::string>{"@LOOM_CLIENT_SAMPLES@"});
      }
      if (op.Type() == "broadcast") {
        // Parameters go out only after rank 0 has received them.
        for (int j = i + 1; j < b.OpSize(); ++j) EXPECT_NE(b.Op(j).Type(), "recv");
      }
    }
    collectives.push_back(seq);
    auto st = OpTypes(*r->trainer_startup[1].GlobalBlock());
    EXPECT_EQ(st.front(), "comm_init");
    EXPECT_EQ(std::count(st.begin(), st.end(), "recv"), rank == 0 ? 1 : 0);
    EXPECT_EQ(std::count(st.begin(), st.end(), "broadcast"), 6);
    // The servers' programs do not depend on the client layout.
    EXPECT_EQ(r->pserver_main.size(), 2u);
  }
  EXPECT_EQ(collectives[0], collectives[1]);  // the ranks' collectives match, call for call
}

TEST(DistributeTest, DumpAfterWritesEveryRolesProgram) {
  Net n = Mlp();
  DistributeConfig c = Config(2, 2);
  char tmpl[] = "/tmp/loom_dist_dumpXXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  c.pass_options.dump_after = {"build-trainers"};
  c.pass_options.dump_dir = tmpl;
  ASSERT_TRUE(TranspileDistribute(n.startup, n.main, c).ok());
  auto text = ReadFile(StrCat(tmpl, "/06-build-trainers/trainer1.main.txt"));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(text->find("send_barrier"), std::string::npos);
  EXPECT_TRUE(FileExists(StrCat(tmpl, "/06-build-trainers/pserver0.main.txt")));
}

// A live server: a gradient of the wrong shape is refused, and the parameters stay as they were.
// The MLP transpiled for one server and two trainers, its server serving on a thread (a port
// from the pid and `salt`).
struct LiveServer {
  explicit LiveServer(int salt) {
    Net n = Mlp();
    c = Config(1, 2, "round_robin", 1 << 20);
    c.pservers = {StrCat("127.0.0.1:", 20000 + (getpid() + salt) % 20000)};
    auto transpiled = TranspileDistribute(n.startup, n.main, c);
    EXPECT_TRUE(transpiled.ok()) << transpiled.status().ToString();
    r = std::move(transpiled).value();
    setenv("LOOM_PS_SECRET", "unit", 1);
    setenv("LOOM_PS_CONNECT_TIMEOUT_MS", "10000", 1);
    EXPECT_TRUE(exe.Run(r.pserver_startup[0], &scope).ok());
    thread = std::thread([this] { served = exe.Run(r.pserver_main[0], &scope); });
    opts = rpc::OptionsFromEnv().value();
  }
  DistributeConfig c;
  DistributeResult r;
  Scope scope;
  Executor exe;
  Status served;
  std::thread thread;
  rpc::Options opts;
};

TEST(DistributeTest, ServerRefusesAWrongShapeGradientAndChangesNothing) {
  LiveServer live(0);
  const DistributeConfig& c = live.c;
  const DistributeResult* r = &live.r;
  const std::string fp = r->manifest.fingerprint();
  const rpc::Options& opts = live.opts;
  auto get = [&](rpc::Client& cl) {
    rpc::Header h;
    h.set_kind(rpc::Header::GET);
    h.add_tensors()->set_name("fc_0.w_0");
    auto rep = cl.Wait(cl.Post(0, h));
    EXPECT_TRUE(rep.ok()) << rep.status().ToString();
    if (!rep.ok() || rep->payloads.size() != 1) return std::vector<float>();
    const float* v = static_cast<const float*>(rep->payloads[0].data());
    return std::vector<float>(v, v + rep->payloads[0].size() / 4);
  };
  auto t1 = rpc::Client::Connect(c.pservers, 1, fp, opts);
  ASSERT_TRUE(t1.ok()) << t1.status().ToString();
  const std::vector<float> before = get(**t1);
  {
    auto t0 = rpc::Client::Connect(c.pservers, 0, fp, opts);
    ASSERT_TRUE(t0.ok()) << t0.status().ToString();
    std::vector<float> wrong(7, 1.0f);
    rpc::Header h;
    h.set_kind(rpc::Header::SEND);
    h.set_name(GradVarName("fc_0.w_0"));
    h.set_dtype(proto::FP32);
    h.add_dims(7);
    h.set_nbytes(28);
    h.set_step(1);
    rpc::Payload p{wrong.data(), 28, nullptr};
    (*t0)->PostOneWay(0, h, &p);
    rpc::Header b;
    b.set_kind(rpc::Header::BARRIER);
    b.set_step(1);
    auto rep = (*t0)->Wait((*t0)->Post(0, b));
    ASSERT_FALSE(rep.ok());
    EXPECT_NE(rep.status().message().find("float32[7]"), std::string::npos)
        << rep.status().ToString();
  }
  EXPECT_EQ(get(**t1), before);
  for (int t : {0, 1}) {
    auto cl = rpc::Client::Connect(c.pservers, t, fp, opts);
    ASSERT_TRUE(cl.ok());
    rpc::Header done;
    done.set_kind(rpc::Header::COMPLETE);
    EXPECT_TRUE((*cl)->CallAll(done).ok());
  }
  live.thread.join();
  EXPECT_TRUE(live.served.ok()) << live.served.ToString();
}

TEST(DistributePipeline, DocsTableListsThePasses) {
  std::string table = "| pass | what it does |\n| --- | --- |\n";
  for (const auto& p : DistributePasses())
    table += StrCat("| `", p.name, "` | ", p.summary, " |\n");
  CheckGeneratedSection(std::string(LOOM_DOCS_DIR) + "/CLI.md",
                        "<!-- pserver passes: generated from DistributePasses() -->\n",
                        "<!-- end of pserver passes -->", table);
}

// Sync: one trainer's gradients and barrier of step 2 reach the server before the other
// trainer's barrier of step 1 (servers are reached over separate connections, and nothing holds
// a trainer back on a server that owns none of its blocks). They wait for step 1 to end, and
// both steps run; they were refused once ("gradient of step 2 while the server is at step 1").
TEST(DistributeTest, MessagesOfALaterStepWaitForTheStepInsteadOfBeingRefused) {
  LiveServer live(7919);
  const DistributeConfig& c = live.c;
  const DistributeResult* r = &live.r;
  const std::string fp = r->manifest.fingerprint();
  const rpc::Options& opts = live.opts;
  std::vector<std::unique_ptr<rpc::Client>> trainers;
  for (int t : {0, 1}) {
    auto cl = rpc::Client::Connect(c.pservers, t, fp, opts);
    ASSERT_TRUE(cl.ok()) << cl.status().ToString();
    trainers.push_back(std::move(*cl));
  }
  const BlockDesc* sb = r->pserver_main[0].GlobalBlock();
  std::vector<std::vector<float>> ones;  // kept alive until sent
  auto step = [&](rpc::Client& cl, int64_t s) {
    for (const auto& b : r->manifest.blocks()) {
      const int64_t numel = sb->FindVar(b.name()).Dims().numel();
      ones.emplace_back(static_cast<size_t>(numel), 0.5f);
      rpc::Header h;
      h.set_kind(rpc::Header::SEND);
      h.set_name(b.grad());
      h.set_dtype(proto::FP32);
      for (int64_t d : sb->FindVar(b.name()).Dims().vec()) h.add_dims(d);
      h.set_nbytes(numel * 4);
      h.set_step(s);
      rpc::Payload p{ones.back().data(), static_cast<size_t>(numel * 4), nullptr};
      cl.PostOneWay(0, h, &p);
    }
    rpc::Header b;
    b.set_kind(rpc::Header::BARRIER);
    b.set_step(s);
    b.set_samples(2);
    cl.PostOneWay(0, b);
  };
  auto get = [&](rpc::Client& cl, int64_t s) {
    rpc::Header h;
    h.set_kind(rpc::Header::GET);
    h.set_step(s);
    h.add_tensors()->set_name(r->manifest.blocks(0).name());
    return cl.Wait(cl.Post(0, h));
  };
  step(*trainers[0], 1);
  step(*trainers[0], 2);  // a step ahead of the server
  // Trainer 0's messages are taken in order: once this answers, its step 2 reached the server.
  ASSERT_TRUE(get(*trainers[0], 0).ok());
  step(*trainers[1], 1);
  auto one = get(*trainers[1], 1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->header.step(), 1);
  step(*trainers[1], 2);
  for (auto& t : trainers) {
    auto two = get(*t, 2);
    ASSERT_TRUE(two.ok()) << two.status().ToString();
    EXPECT_EQ(two->header.step(), 2);
    rpc::Header done;
    done.set_kind(rpc::Header::COMPLETE);
    EXPECT_TRUE(t->CallAll(done).ok());
  }
  live.thread.join();
  EXPECT_TRUE(live.served.ok()) << live.served.ToString();
}

}  // namespace
}  // namespace loom::transpiler

namespace loom::transpiler {
namespace {

// ids -> lookup_table of a [rows, 8] table -> fc -> softmax cross-entropy, SGD.
Net EmbeddingNet(bool distributed, int64_t rows = 1000000000, std::string* loss_name = nullptr) {
  Net n;
  examples::ProgramBuilder b(&n.main, &n.startup, 5);
  b.Data("ids", {1}, proto::INT64);
  b.Data("label", {1}, proto::INT64);
  const std::vector<int64_t> dims{rows, 8};
  for (ProgramDesc* p : {&n.main, &n.startup}) {
    VarDesc v = p->GlobalBlock()->Var("emb");
    v.SetDims(DDim(dims));
    v.SetPersistable(true);
    v.SetIsParameter(true);
  }
  n.startup.GlobalBlock()->AppendOp("uniform_random", {}, {{"Out", {"emb"}}},
                                    {{"shape", dims},
                                     {"min", -0.5f},
                                     {"max", 0.5f},
                                     {"seed", 3},
                                     {"dtype", static_cast<int>(proto::FP32)}});
  std::string e = b.Op("lookup_table", {{"W", {"emb"}}, {"Ids", {"ids"}}}, "Out",
                       {{"is_sparse", true}, {"is_distributed", distributed}})
                      .value();
  std::string logits = b.FC(e, 3, "", "fc_0").value();
  std::string loss = b.SoftmaxCrossEntropyLoss(logits, "label").value();
  if (loss_name) *loss_name = loss;
  EXPECT_TRUE(b.MinimizeWithSGD(loss, 0.1f).ok());
  return n;
}

TEST(DistributeTest, ADistributedTableLivesOnlyOnTheServers) {
  Net n = EmbeddingNet(true);
  auto r = TranspileDistribute(n.startup, n.main, Config(2, 2));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const auto& b : r->manifest.blocks()) EXPECT_NE(b.param(), "emb") << b.name();
  ASSERT_EQ(r->manifest.tables_size(), 1);
  EXPECT_EQ(r->manifest.tables(0).param(), "emb");
  EXPECT_EQ(r->manifest.tables(0).height(), 1000000000);
  EXPECT_EQ(r->manifest.tables(0).optimizer(), "sgd");
  for (size_t t = 0; t < 2; ++t) {
    auto types = OpTypes(*r->trainer_main[t].GlobalBlock());
    EXPECT_EQ(std::count(types.begin(), types.end(), "lookup_table"), 0);
    EXPECT_EQ(std::count(types.begin(), types.end(), "distributed_lookup_table"), 1);
    EXPECT_EQ(std::count(types.begin(), types.end(), "distributed_lookup_table_grad"), 1);
    EXPECT_EQ(std::count(types.begin(), types.end(), "send_sparse"), 1);
    // Never declared, initialized or received on a trainer.
    EXPECT_FALSE(r->trainer_main[t].GlobalBlock()->HasVar("emb"));
    EXPECT_FALSE(r->trainer_startup[t].GlobalBlock()->HasVar("emb"));
  }
  for (size_t s = 0; s < 2; ++s) {
    const BlockDesc& b0 = *r->pserver_main[s].GlobalBlock();
    EXPECT_FALSE(b0.HasVar("emb"));
    EXPECT_FALSE(r->pserver_startup[s].GlobalBlock()->HasVar("emb"));
    OpDesc serve = b0.Op(b0.OpSize() - 1);
    ASSERT_EQ(serve.Type(), "listen_and_serv");
    EXPECT_EQ(serve.Attr<std::vector<std::string>>("sparse_tables", {}),
              std::vector<std::string>{"emb"});
    EXPECT_EQ(serve.Attr<std::vector<std::string>>("sparse_inits", {}),
              std::vector<std::string>{"uniform"});
    EXPECT_EQ(serve.Attr<std::vector<int64_t>>("sparse_seeds", {}), std::vector<int64_t>{3});
    EXPECT_EQ(serve.Attr<std::vector<int64_t>>("sparse_widths", {}), std::vector<int64_t>{8});
    EXPECT_EQ(serve.Attr<int>("pservers", 0), 2);
  }
}

TEST(DistributeTest, AnIsSparseTableIsSlicedAndItsRowsPushedToTheBlockOwners) {
  Net n = EmbeddingNet(false, 40);
  auto r = TranspileDistribute(n.startup, n.main, Config(2, 2));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const BlockDesc& b = *r->trainer_main[0].GlobalBlock();
  bool pushed = false;
  for (int i = 0; i < b.OpSize(); ++i) {
    OpDesc op = b.Op(i);
    if (op.Type() != "send_sparse") continue;
    pushed = true;
    EXPECT_EQ(op.Input("X")[0], "emb@GRAD");
    EXPECT_EQ(op.Attr<std::vector<int64_t>>("sections", {}), (std::vector<int64_t>{20, 20}));
    EXPECT_EQ(op.Attr<std::vector<std::string>>("send_varnames", {}),
              (std::vector<std::string>{"emb@GRAD.block0", "emb@GRAD.block1"}));
  }
  EXPECT_TRUE(pushed);
  auto types = OpTypes(b);
  EXPECT_EQ(std::count(types.begin(), types.end(), "lookup_table"), 1);
}

}  // namespace
}  // namespace loom::transpiler

namespace loom::transpiler {
namespace {

// A whole sync job over a distributed table in one process (two server threads, two trainer
// threads): trainers prefetch rows, push row gradients and train; trainer 0 makes the servers
// checkpoint their shards; the shards hold only the rows the batches touched, and both
// trainers' losses fall. The threads and sockets of the table path, for the sanitizers.
TEST(DistributeTest, ADistributedTableJobTrainsAndCheckpointsInProcess) {
  std::string loss;
  Net n = EmbeddingNet(true, 1000000000, &loss);
  DistributeConfig c = Config(2, 2);
  const int base = 21000 + getpid() % 20000;
  c.pservers = {StrCat("127.0.0.1:", base), StrCat("127.0.0.1:", base + 1)};
  auto transpiled = TranspileDistribute(n.startup, n.main, c);
  ASSERT_TRUE(transpiled.ok()) << transpiled.status().ToString();
  const DistributeResult& r = *transpiled;
  setenv("LOOM_PS_SECRET", "unit", 1);
  setenv("LOOM_PS_CONNECT_TIMEOUT_MS", "10000", 1);
  Scope server_scope[2];
  Executor server_exe[2];
  Status served[2];
  std::vector<std::thread> servers;
  for (int s = 0; s < 2; ++s) {
    ASSERT_TRUE(server_exe[s].Run(r.pserver_startup[s], &server_scope[s]).ok());
    servers.emplace_back(
        [&, s] { served[s] = server_exe[s].Run(r.pserver_main[s], &server_scope[s]); });
  }
  const std::string ckpt = JoinPath(testing::TempDir(), StrCat("dist_table_", getpid()));
  constexpr int kSteps = 4, kBatch = 8;
  std::vector<float> first(2), last(2);
  Status trained[2];
  std::set<int64_t> touched[2];
  auto trainer = [&](int t) {
    Executor exe;
    Scope scope;
    trained[t] = exe.Run(r.trainer_startup[t], &scope);
    auto prepared = exe.Prepare(r.trainer_main[t]);
    if (!prepared.ok()) trained[t] = prepared.status();
    for (int step = 0; step < kSteps && trained[t].ok(); ++step) {
      Tensor ids, label;
      ids.Resize(DDim({kBatch, 1}));
      label.Resize(DDim({kBatch, 1}));
      int64_t* id = ids.mutable_data<int64_t>(Place::CPU());
      int64_t* lab = label.mutable_data<int64_t>(Place::CPU());
      for (int i = 0; i < kBatch; ++i) {
        id[i] = (t * 1000003 + i * 7919) % 1000000000;  // the same batch every step
        lab[i] = i % 3;
        touched[t].insert(id[i]);
      }
      std::vector<Tensor> fetched;
      trained[t] =
          exe.Run(prepared->get(), &scope, {{"ids", ids}, {"label", label}}, {loss}, &fetched);
      if (trained[t].ok()) (step == 0 ? first : last)[t] = fetched[0].data<float>()[0];
    }
    if (t == 0 && trained[t].ok())
      trained[t] = rpc::CheckpointServers(0, c.pservers, r.manifest.fingerprint(), ckpt);
    Status closed = rpc::CloseTrainer(t, c.pservers);
    if (trained[t].ok()) trained[t] = closed;
  };
  std::thread t1(trainer, 1);
  trainer(0);
  t1.join();
  for (auto& s : servers) s.join();
  for (int t = 0; t < 2; ++t) {
    EXPECT_TRUE(trained[t].ok()) << "trainer " << t << ": " << trained[t].ToString();
    EXPECT_LT(last[t], first[t]) << "trainer " << t;
  }
  for (int s = 0; s < 2; ++s) EXPECT_TRUE(served[s].ok()) << served[s].ToString();
  int64_t rows = 0;
  for (int s = 0; s < 2; ++s) {
    auto shard = kvstore::SparseTable::Load(JoinPath(ckpt, StrCat("pserver_", s, "/emb.sptb")));
    ASSERT_TRUE(shard.ok()) << shard.status().ToString();
    for (int64_t id : (*shard)->Ids()) {
      EXPECT_EQ(kvstore::SparseTable::ShardOf(id, 2), s);
      EXPECT_TRUE(touched[0].count(id) || touched[1].count(id)) << id;
    }
    rows += (*shard)->Size();
  }
  std::set<int64_t> all(touched[0]);
  all.insert(touched[1].begin(), touched[1].end());
  EXPECT_EQ(rows, static_cast<int64_t>(all.size()));
  std::filesystem::remove_all(ckpt);
}

}  // namespace
}  // namespace loom::transpiler
