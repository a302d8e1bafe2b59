// The pass runner (verifier after each pass, changed flags, disabling and dumping by name), the
// shared analyses (gradients from op_role_var, placement, bucket planning, op insertion) and the
// docs table of the data-parallel passes, which must match the pipeline's one declaration.
#include "transpiler/pass.h"

#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "framework/file_util.h"
#include "framework/op_role.h"
#include "tests/transpiler/docs_table.h"
#include "tests/transpiler/test_nets.h"
#include "transpiler/buckets.h"
#include "transpiler/data_parallel.h"
#include "transpiler/gradients.h"
#include "transpiler/placement.h"
#include "transpiler/program_edit.h"

namespace loom::transpiler {
namespace {

struct Toy {
  ProgramDesc program;
  std::vector<std::string> ran;
  std::vector<NamedProgram> Programs() const { return {{"main", &program}}; }
};

StatusOr<bool> Nothing(Toy& t) {
  t.ran.push_back("nothing");
  return false;
}
StatusOr<bool> AddScale(Toy& t) {
  t.ran.push_back("add-scale");
  BlockDesc* b = t.program.GlobalBlock();
  for (const char* name : {"a", "b"}) {
    VarDesc v = b->Var(name);
    v.SetType(proto::VarType::DENSE_TENSOR);
    v.SetDims(DDim({2}));
  }
  b->AppendOp("scale", {{"X", {"a"}}}, {{"Out", {"b"}}}, {});
  return true;
}
StatusOr<bool> Break(Toy& t) {
  t.ran.push_back("break");
  t.program.GlobalBlock()->AppendOp("no_such_op", {}, {}, {});
  return true;
}
StatusOr<bool> Fail(Toy&) { return InvalidArgument("the toy failed"); }

// A fresh directory per call (runs of the test never see each other's files).
std::string FreshDir(const std::string& name) {
  std::string tmpl = ::testing::TempDir() + "/" + name + "_XXXXXX";
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

const std::vector<Pass<Toy>> kToyPasses = {
    {{"nothing", "changes nothing", true}, Nothing},
    {{"add-scale", "appends a scale op", false}, AddScale},
};

TEST(PassRunner, RunsInOrderAndRecordsWhatChanged) {
  Toy t;
  auto r = RunPipeline("toy", kToyPasses, t, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r.value().size(), 2u);
  EXPECT_EQ(r.value()[0].name, "nothing");
  EXPECT_FALSE(r.value()[0].changed);
  EXPECT_TRUE(r.value()[1].changed);
  EXPECT_EQ(t.ran, (std::vector<std::string>{"nothing", "add-scale"}));
}

TEST(PassRunner, DisablesOnlyOptionalPassesByName) {
  Toy t;
  PassOptions o;
  o.disabled = {"nothing"};
  auto r = RunPipeline("toy", kToyPasses, t, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(t.ran, (std::vector<std::string>{"add-scale"}));
  o.disabled = {"add-scale"};
  EXPECT_NE(RunPipeline("toy", kToyPasses, t, o).status().message().find("cannot be disabled"),
            std::string::npos);
  o.disabled = {"nope"};
  std::string m = RunPipeline("toy", kToyPasses, t, o).status().message();
  EXPECT_NE(m.find("no pass named 'nope'"), std::string::npos) << m;
  EXPECT_NE(m.find("nothing, add-scale"), std::string::npos) << m;
}

TEST(PassRunner, VerifierRunsAfterEveryPassAndNamesIt) {
  Toy t;
  std::vector<Pass<Toy>> passes = {{{"break", "adds an unknown op", false}, Break},
                                   {{"nothing", "", false}, Nothing}};
  Status st = RunPipeline("toy", passes, t, {}).status();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("toy: after pass 'break', the main program does not verify"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(t.ran, std::vector<std::string>{"break"});  // stops there
}

TEST(PassRunner, PassErrorsNameThePipeline) {
  Toy t;
  std::vector<Pass<Toy>> passes = {{{"fail", "", false}, Fail}};
  Status st = RunPipeline("toy", passes, t, {}).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "toy: the toy failed");
}

TEST(PassRunner, DumpsProgramTextAfterNamedPasses) {
  const std::string dir = FreshDir("loom_pass_dump");
  Toy t;
  PassOptions o;
  o.dump_after = {"add-scale"};
  o.dump_dir = dir;
  ASSERT_TRUE(RunPipeline("toy", kToyPasses, t, o).ok());
  auto text = ReadFile(dir + "/02-add-scale/main.txt");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(text.value().find("scale"), std::string::npos);
  EXPECT_FALSE(FileExists(dir + "/01-nothing/main.txt"));
  o.dump_after = {"all"};
  Toy t2;
  ASSERT_TRUE(RunPipeline("toy", kToyPasses, t2, o).ok());
  EXPECT_TRUE(FileExists(dir + "/01-nothing/main.txt"));
  o.dump_after = {"later"};
  EXPECT_NE(RunPipeline("toy", kToyPasses, t2, o).status().message().find("to dump after"),
            std::string::npos);
  o.dump_after = {"all"};
  o.dump_dir.clear();
  EXPECT_FALSE(RunPipeline("toy", kToyPasses, t2, o).ok());
}

TEST(DataParallelPipeline, DumpsEveryRanksProgramsAfterTheSplit) {
  const std::string dir = FreshDir("loom_dp_dump");
  Net n = Mlp();
  DataParallelConfig c;
  c.nranks = 2;
  c.pass_options.dump_after = {"insert-grad-sync", "split-per-rank"};
  c.pass_options.dump_dir = dir;
  ASSERT_TRUE(TranspileDataParallel(n.startup, n.main, c).ok());
  auto sync = ReadFile(dir + "/08-insert-grad-sync/main.txt");
  ASSERT_TRUE(sync.ok()) << sync.status().ToString();
  EXPECT_NE(sync.value().find("allreduce"), std::string::npos);
  EXPECT_TRUE(FileExists(dir + "/09-split-per-rank/rank1.startup.txt"));
  EXPECT_TRUE(FileExists(dir + "/09-split-per-rank/rank1.main.txt"));
}

// docs/CLI.md's pass table is the pipeline's declaration, rendered. LOOM_UPDATE_DOCS=1 rewrites
// it after a pass is added or its summary changes.
TEST(DataParallelPipeline, DocsTableListsThePasses) {
  std::string table = "| pass | optional | what it does |\n| --- | --- | --- |\n";
  for (const auto& p : DataParallelPasses())
    table += StrCat("| `", p.name, "` | ", p.optional ? "yes" : "", " | ", p.summary, " |\n");
  CheckGeneratedSection(std::string(LOOM_DOCS_DIR) + "/CLI.md",
                        "<!-- data-parallel passes: generated from DataParallelPasses() -->\n",
                        "<!-- end of passes -->", table);
}

// docs/DATA_PARALLEL.md explains each pass in a table of its own: the same passes, in order.
TEST(DataParallelPipeline, DesignDocExplainsEveryPassInOrder) {
  auto doc = ReadFile(std::string(LOOM_DOCS_DIR) + "/DATA_PARALLEL.md");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  std::vector<std::string> listed;
  std::istringstream lines(doc.value());
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    std::string name = line.substr(3, line.find('`', 3) - 3);
    for (const auto& p : DataParallelPasses())
      if (name == p.name) listed.push_back(name);
  }
  std::vector<std::string> want;
  for (const auto& p : DataParallelPasses()) want.push_back(p.name);
  EXPECT_EQ(listed, want);
}

TEST(GradientAnalysis, PairsComeFromOpRoleVarNotNames) {
  Net n = Mlp();
  // Rename fc_0.w_0's gradient to a name no convention would guess.
  BlockDesc* b = n.main.GlobalBlock();
  const std::string old_grad = GradVarName("fc_0.w_0"), grad = "weights_update";
  DeclareLike(b, b->FindVar(old_grad)).proto()->set_name(grad);
  b->RemoveVar(old_grad);
  for (int i = 0; i < b->OpSize(); ++i) {
    OpDesc op = b->Op(i);
    op.RenameInput(old_grad, grad);
    op.RenameOutput(old_grad, grad);
    auto rv = op.Attr<std::vector<std::string>>(kOpRoleVarAttr, {});
    for (auto& v : rv)
      if (v == old_grad) v = grad;
    if (!rv.empty()) op.SetAttr(kOpRoleVarAttr, rv);
  }
  auto g = AnalyzeGradients(n.main);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g.value().params.size(), 6u);
  const OptimizedParam* p = g.value().Find("fc_0.w_0");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->grad, grad);
  EXPECT_EQ(p->bytes, 6 * 16 * 4);
  EXPECT_EQ(g.value().batch_var, "x");
  EXPECT_GE(LastGradWriter(*b, grad), 0);
}

TEST(GradientAnalysis, TaggingAnAlreadyTaggedProgramChangesNothing) {
  Net n = Mlp();  // SGD update ops carry their op_role_var already
  auto g = AnalyzeGradients(n.main);
  ASSERT_TRUE(g.ok());
  ProgramDesc before = n.main;
  auto changed = TagOptimizerOps(&n.main, g.value());
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(changed.value());
  EXPECT_EQ(before.proto().SerializeAsString(), n.main.proto().SerializeAsString());
}

TEST(Placement, PoliciesSpreadItems) {
  std::vector<PlacementItem> items = {{"a", 100}, {"b", 60}, {"c", 50}, {"d", 10}};
  Placement bytes = PlaceItems(items, 2, PlacementPolicy::kBytes);
  EXPECT_EQ(bytes.owner, (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(bytes.load, (std::vector<int64_t>{110, 110}));
  EXPECT_DOUBLE_EQ(bytes.Imbalance(), 1.0);
  Placement rr = PlaceItems(items, 3, PlacementPolicy::kRoundRobin);
  EXPECT_EQ(rr.owner, (std::vector<int>{0, 1, 2, 0}));
  Placement h1 = PlaceItems(items, 3, PlacementPolicy::kHash);
  std::vector<PlacementItem> reversed(items.rbegin(), items.rend());
  Placement h2 = PlaceItems(reversed, 3, PlacementPolicy::kHash);
  for (size_t k = 0; k < items.size(); ++k) EXPECT_EQ(h1.owner[k], h2.owner[3 - k]);
  EXPECT_FALSE(ParsePlacementPolicy("fair").ok());
  EXPECT_EQ(ParsePlacementPolicy("round_robin").value(), PlacementPolicy::kRoundRobin);
}

TEST(Buckets, FuseInProductionOrderUpToTheLimit) {
  Net n = Mlp();
  auto g = AnalyzeGradients(n.main).value();
  auto one = PlanBuckets(n.main, g.params, 1 << 20);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_TRUE(one[0].fused);
  EXPECT_EQ(one[0].grads.front(), GradVarName("fc_2.b_0"));  // backward starts at the end
  auto alone = PlanBuckets(n.main, g.params, 0);
  EXPECT_EQ(alone.size(), 6u);
  for (const auto& b : alone) EXPECT_FALSE(b.fused);
  // fc_0.w_0 (384 bytes) and fc_1.w_0 (512) do not fit one 600-byte bucket together.
  for (const auto& b : PlanBuckets(n.main, g.params, 600)) EXPECT_LE(b.bytes, 600);
}

TEST(ProgramEdit, InsertOpsKeepsOrderAndFront) {
  ProgramDesc p;
  BlockDesc* b = p.GlobalBlock();
  b->AppendOp("a", {}, {}, {});
  b->AppendOp("b", {}, {}, {});
  Insertions ops;
  ops[1].push_back(MakeOp("after_b1", {}, {}, {}, 0));
  ops[-1].push_back(MakeOp("front", {}, {}, {}, 0));
  ops[0].push_back(MakeOp("after_a", {}, {}, {}, 0));
  ops[1].push_back(MakeOp("after_b2", {}, {}, {}, 0));
  InsertOps(b, ops);
  std::vector<std::string> types;
  for (int i = 0; i < b->OpSize(); ++i) types.push_back(b->Op(i).Type());
  EXPECT_EQ(types,
            (std::vector<std::string>{"front", "a", "after_a", "b", "after_b1", "after_b2"}));
  EXPECT_EQ(FindTranspiledOp(p), "");
  b->Op(2).SetRole(kOpRoleCommunication);
  EXPECT_EQ(FindTranspiledOp(p), OpLocation("after_a", 0, 2));
}

}  // namespace
}  // namespace loom::transpiler
