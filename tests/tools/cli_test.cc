// The loom CLI end to end: example bundles train, params round-trip, and every kind of bad
// input ends in a non-zero exit with one clear message and no partial output.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <regex>

#include "framework/device_context.h"
#include "framework/file_util.h"
#include "framework/serialization.h"

namespace loom {
namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/loom_cli_XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::string cmd = StrCat(LOOM_MAKE_EXAMPLES_PATH, " ", dir_, " > /dev/null");
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }

  static void TearDownTestSuite() {
    if (!dir_.empty() && std::getenv("LOOM_KEEP_TEST_DIR") == nullptr)
      std::system(("rm -rf " + dir_).c_str());
  }

  static Result Loom(const std::string& args) {
    std::string out = JoinPath(dir_, "stdout"), err = JoinPath(dir_, "stderr");
    std::string cmd = StrCat(LOOM_CLI_PATH, " ", args, " > ", out, " 2> ", err);
    int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = ReadFile(out).value();
    r.err = ReadFile(err).value();
    return r;
  }

  static std::string Bundle(const std::string& name) { return JoinPath(dir_, name); }

  // A copy of the softmax bundle whose main.pb is replaced by program (saved unverified).
  static std::string BundleWithMain(const std::string& name, const ProgramDesc& program) {
    std::string d = JoinPath(dir_, name);
    std::string cmd = StrCat("rm -rf ", d, " && cp -r ", Bundle("softmax_classifier"), " ", d);
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    EXPECT_TRUE(SaveProgram(program, JoinPath(d, "main.pb")).ok());
    return d;
  }

  static ProgramDesc Main() {
    return LoadProgram(JoinPath(Bundle("softmax_classifier"), "main.pb")).value();
  }

  static void ExpectError(const Result& r, std::initializer_list<std::string> fragments,
                          int code = 1) {
    EXPECT_EQ(r.code, code) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line expected: " << r.err;
    for (const auto& f : fragments)
      EXPECT_NE(r.err.find(f), std::string::npos) << "stderr lacks '" << f << "': " << r.err;
  }

  static std::string dir_;
};

std::string CliTest::dir_;

double LossAt(const std::string& out, const std::string& iter) {
  std::smatch m;
  std::regex re("iter " + iter + "/\\d+  loss ([0-9.e+-]+)");
  if (!std::regex_search(out, m, re)) return -1;
  return std::stod(m[1]);
}

// --checkpoint-every saves step-<N> directories, keeping the newest --keep-checkpoints; a
// run with --resume starts from the newest complete one and reaches the losses of a run that
// never stopped (the parameters and optimizer state are all persistables).
TEST_F(CliTest, ScheduledCheckpointsResumeWhereTheRunStopped) {
  const std::string ckpt = JoinPath(dir_, "scheduled");
  const std::string run = "run " + Bundle("softmax_classifier") + " --print-every 4 ";
  Result whole = Loom(run + "--iters 20");
  ASSERT_EQ(whole.code, 0) << whole.err;
  Result first = Loom(run + "--iters 12 --checkpoint-every 4 --keep-checkpoints 2 " +
                      "--checkpoint-dir " + ckpt);
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_NE(first.out.find("checkpoint: step 12 saved"), std::string::npos) << first.out;
  EXPECT_FALSE(IsDirectory(JoinPath(ckpt, "step-4")));  // beyond the newest two
  EXPECT_TRUE(FileExists(JoinPath(ckpt, "step-8/CHECKPOINT")));
  EXPECT_TRUE(FileExists(JoinPath(ckpt, "step-12/CHECKPOINT")));
  // An incomplete directory (no CHECKPOINT: a save that died) is never picked.
  ASSERT_TRUE(MakeDirs(JoinPath(ckpt, "step-16")).ok());
  Result resumed = Loom(run + "--iters 20 --resume --checkpoint-dir " + ckpt);
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("step-12 (step 12)"), std::string::npos) << resumed.out;
  EXPECT_LT(LossAt(resumed.out, "12"), 0) << "step 12 ran again: " << resumed.out;
  for (const char* it : {"16", "20"}) {
    ASSERT_GT(LossAt(whole.out, it), 0) << whole.out;
    EXPECT_EQ(LossAt(resumed.out, it), LossAt(whole.out, it)) << it << "\n" << resumed.out;
  }
  ExpectError(Loom(run + "--iters 2 --resume"), {"--resume needs --checkpoint-dir"});
  ExpectError(Loom(run + "--iters 2 --checkpoint-every 1"),
              {"--checkpoint-every needs --checkpoint-dir"});
  ExpectError(Loom(run + "--iters 2 --resume --checkpoint-dir " + JoinPath(dir_, "none")),
              {"holds no complete checkpoint"});
  ExpectError(Loom(run + "--iters 2 --keep-checkpoints 0 --checkpoint-dir " + ckpt),
              {"--keep-checkpoints must be >= 1"});
}

TEST_F(CliTest, SoftmaxClassifierLossFallsTenfold) {
  Result r = Loom("run " + Bundle("softmax_classifier") + " --iters 200 --print-every 50");
  ASSERT_EQ(r.code, 0) << r.err;
  double first = LossAt(r.out, "1"), last = LossAt(r.out, "200");
  ASSERT_GT(first, 0) << r.out;
  ASSERT_GT(last, 0) << r.out;
  EXPECT_GT(first / last, 10.0) << r.out;
}

TEST_F(CliTest, LinearRegressionTrains) {
  Result r = Loom("run " + Bundle("linear_regression") + " --iters 300 --print-every 100");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_LT(LossAt(r.out, "300"), LossAt(r.out, "1") / 10) << r.out;
}

TEST_F(CliTest, SaveAndLoadParamsRoundTrip) {
  std::string params = JoinPath(dir_, "params");
  Result a = Loom("run " + Bundle("softmax_classifier") + " --iters 100 --save-params " + params);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_TRUE(FileExists(JoinPath(params, "fc_0.w_0")));
  // Resuming from the saved params starts where training stopped, not from scratch.
  Result b = Loom("run " + Bundle("softmax_classifier") + " --iters 1 --load-params " + params);
  ASSERT_EQ(b.code, 0) << b.err;
  double resumed = LossAt(b.out, "1");
  EXPECT_LT(resumed, LossAt(a.out, "1") / 5) << b.out;
}

TEST_F(CliTest, ExplicitFeedsFetchAndBatchSize) {
  std::string d = Bundle("softmax_classifier");
  Result r = Loom("run " + d + " --iters 3 --print-every 1 --batch-size 16 --feed x=" +
                  JoinPath(d, "data/x.npy") + " --fetch loss --fetch fc_0.b_0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("fc_0.b_0 float32[64]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("batch 16"), std::string::npos);
}

TEST_F(CliTest, InspectPrintsAndDraws) {
  std::string dot = JoinPath(dir_, "main.dot");
  Result r = Loom("inspect " + JoinPath(Bundle("softmax_classifier"), "main.pb") + " --dot " + dot);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("mul(X=[x], Y=[fc_0.w_0])"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sgd("), std::string::npos);
  EXPECT_NE(r.out.find("[optimize]"), std::string::npos);
  EXPECT_NE(r.out.find("verified: ok"), std::string::npos);
  std::string graph = ReadFile(dot).value();
  EXPECT_EQ(graph.rfind("digraph program {", 0), 0u);
  EXPECT_NE(graph.find("-> \"b0_var_loss\""), std::string::npos);
}

TEST_F(CliTest, InspectListsOps) {
  Result r = Loom("inspect --ops");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("attr x_num_col_dims : int = 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cpu/float32"), std::string::npos);
  // Grad ops list the attributes they take from their forward op (AttrsFrom).
  size_t grad = r.out.find("\nconv2d_grad");
  ASSERT_NE(grad, std::string::npos) << r.out;
  std::string entry = r.out.substr(grad, r.out.find("\n\n", grad + 1) - grad);
  for (const char* attr : {"strides", "paddings", "dilations", "groups"})
    EXPECT_NE(entry.find(std::string("attr ") + attr), std::string::npos) << entry;
  EXPECT_NE(entry.find("(as in conv2d)"), std::string::npos) << entry;
}

TEST_F(CliTest, HelpForEveryCommand) {
  for (const char* args :
       {"--help", "help", "run --help", "inspect --help", "help run", "--version"}) {
    Result r = Loom(args);
    EXPECT_EQ(r.code, 0) << args << ": " << r.err;
    EXPECT_FALSE(r.out.empty()) << args;
  }
  EXPECT_NE(Loom("run --help").out.find("--save-params DIR"), std::string::npos);
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(Loom("").code, 2);
  EXPECT_EQ(Loom("frobnicate").code, 2);
  ExpectError(Loom("run " + Bundle("softmax_classifier") + " --bogus 3"), {"--bogus"}, 2);
  ExpectError(Loom("run " + Bundle("softmax_classifier") + " --iters"),
              {"--iters", "needs a value"}, 2);
  ExpectError(Loom("run"), {"usage"}, 2);
}

TEST_F(CliTest, BadFlagValues) {
  ExpectError(Loom("run " + Bundle("softmax_classifier") + " --iters many"), {"--iters", "many"});
  ExpectError(Loom("run " + Bundle("softmax_classifier") + " --batch-size 0"), {"batch size 0"});
  ExpectError(Loom("run " + Bundle("softmax_classifier") + " --place tpu:0"), {"tpu:0"});
  ExpectError(Loom("run " + Bundle("softmax_classifier") + " --feed x"), {"NAME=FILE.npy"});
}

TEST_F(CliTest, MissingBundle) {
  ExpectError(Loom("run " + JoinPath(dir_, "nope")), {"nope", "does not exist"});
}

TEST_F(CliTest, TruncatedProgram) {
  std::string d = BundleWithMain("truncated", Main());
  std::string path = JoinPath(d, "main.pb");
  std::string bytes = ReadFile(path).value();
  ASSERT_TRUE(WriteFileAtomic(path, bytes.substr(0, bytes.size() / 2)).ok());
  ExpectError(Loom("run " + d), {"main.pb"});
  ExpectError(Loom("inspect " + path), {"main.pb"});
}

TEST_F(CliTest, RandomBytesAsProgram) {
  std::string d = BundleWithMain("random", Main());
  std::string junk(4096, '\0');
  unsigned s = 12345;
  for (auto& c : junk) c = static_cast<char>((s = s * 1103515245u + 12345u) >> 16);
  ASSERT_TRUE(WriteFileAtomic(JoinPath(d, "main.pb"), junk).ok());
  ExpectError(Loom("run " + d), {"main.pb"});
}

TEST_F(CliTest, UnknownOpType) {
  ProgramDesc p = Main();
  p.GlobalBlock()->Op(2).SetType("relu_v9");
  ExpectError(Loom("run " + BundleWithMain("unknown_op", p)), {"relu_v9", "block 0, #2"});
}

TEST_F(CliTest, MissingInputVar) {
  ProgramDesc p = Main();
  p.GlobalBlock()->Op(0).SetInput("Y", {"no_such_weight"});
  ExpectError(Loom("run " + BundleWithMain("missing_var", p)), {"no_such_weight", "mul"});
}

TEST_F(CliTest, WrongAttributeType) {
  ProgramDesc p = Main();
  p.GlobalBlock()->Op(1).SetAttr("axis", std::string("one"));
  ExpectError(Loom("run " + BundleWithMain("bad_attr", p)), {"elementwise_add", "axis", "int"});
}

TEST_F(CliTest, IncompatibleMulShapes) {
  ProgramDesc p = Main();
  p.GlobalBlock()->FindVar("fc_0.w_0").SetDims({21, 64});
  ExpectError(Loom("run " + BundleWithMain("bad_shape", p)),
              {"mul", "'x'", "fc_0.w_0", "[21, 64]", "[-1, 20]"});
}

TEST_F(CliTest, MissingFeed) {
  std::string d = BundleWithMain("no_feed", Main());
  ASSERT_EQ(std::system(("rm " + JoinPath(d, "data/label.npy")).c_str()), 0);
  ExpectError(Loom("run " + d), {"label.npy"});
  ASSERT_TRUE(WriteFileAtomic(JoinPath(d, "bundle.pbtxt"),
                              "feeds { name: \"x\" file: \"data/x.npy\" }\nfetches: \"loss\"\n")
                  .ok());
  ExpectError(Loom("run " + d), {"missing feed", "'label'", "softmax_with_cross_entropy"});
}

TEST_F(CliTest, WrongFeedDtypeAndShape) {
  std::string d = Bundle("softmax_classifier");
  Tensor x64(proto::FP64, DDim{8, 20});
  x64.mutable_data<double>(Place::CPU());
  std::string p64 = JoinPath(dir_, "x64.npy");
  ASSERT_TRUE(SaveNpy(x64, p64).ok());
  ExpectError(Loom("run " + d + " --feed x=" + p64), {"'x'", "float64", "float32"});
  Tensor x19(proto::FP32, DDim{2048, 19});
  x19.mutable_data<float>(Place::CPU());
  std::string p19 = JoinPath(dir_, "x19.npy");
  ASSERT_TRUE(SaveNpy(x19, p19).ok());
  ExpectError(Loom("run " + d + " --feed x=" + p19), {"'x'", "[2048, 19]", "[-1, 20]"});
}

TEST_F(CliTest, UnreadableNpy) {
  std::string junk = JoinPath(dir_, "junk.npy");
  ASSERT_TRUE(WriteFileAtomic(junk, "definitely not numpy").ok());
  ExpectError(Loom("run " + Bundle("softmax_classifier") + " --feed x=" + junk),
              {"junk.npy", "not a .npy"});
}

TEST_F(CliTest, CorruptParamFile) {
  std::string params = JoinPath(dir_, "params_corrupt");
  ASSERT_EQ(Loom("run " + Bundle("softmax_classifier") + " --iters 1 --save-params " + params).code,
            0);
  std::string path = JoinPath(params, "fc_1.w_0");
  std::string bytes = ReadFile(path).value();
  bytes[bytes.size() / 2] ^= 0x40;
  ASSERT_TRUE(WriteFileAtomic(path, bytes).ok());
  ExpectError(Loom("run " + Bundle("softmax_classifier") + " --load-params " + params),
              {"fc_1.w_0", "checksum"});
}

TEST_F(CliTest, FailedRunLeavesNoPartialOutput) {
  std::string params = JoinPath(dir_, "never_written");
  std::string dot = JoinPath(dir_, "never.dot");
  ProgramDesc p = Main();
  p.GlobalBlock()->Op(0).SetType("nope");
  std::string d = BundleWithMain("no_output", p);
  EXPECT_EQ(Loom("run " + d + " --save-params " + params).code, 1);
  EXPECT_FALSE(FileExists(params));
  // A program that fails verification is printed but not drawn.
  EXPECT_EQ(Loom("inspect " + JoinPath(d, "main.pb") + " --dot " + dot).code, 1);
  EXPECT_FALSE(FileExists(dot));
  // An unwritable --dot target fails without leaving anything behind.
  std::string bad_dot = JoinPath(dir_, "no/such/dir.dot");
  EXPECT_EQ(
      Loom("inspect " + JoinPath(Bundle("softmax_classifier"), "main.pb") + " --dot " + bad_dot)
          .code,
      1);
  EXPECT_FALSE(FileExists(bad_dot));
  // No stray temp files were left next to the targets.
  EXPECT_NE(std::system(("ls " + dir_ + " | grep -q '\\.tmp\\.'").c_str()), 0);
}

TEST_F(CliTest, MakeExamplesWritesBothBundles) {
  for (const char* b : {"linear_regression", "softmax_classifier"}) {
    for (const char* f : {"startup.pb", "main.pb", "bundle.pbtxt"})
      EXPECT_TRUE(FileExists(JoinPath(Bundle(b), f))) << b << "/" << f;
    EXPECT_TRUE(LoadProgram(JoinPath(Bundle(b), "main.pb")).ok()) << b;
    EXPECT_TRUE(LoadProgram(JoinPath(Bundle(b), "startup.pb")).ok()) << b;
  }
  EXPECT_TRUE(FileExists(JoinPath(Bundle("linear_regression"), "data/x.npy")));
  EXPECT_TRUE(FileExists(JoinPath(Bundle("linear_regression"), "data/y.npy")));
  EXPECT_TRUE(FileExists(JoinPath(Bundle("softmax_classifier"), "data/x.npy")));
  EXPECT_TRUE(FileExists(JoinPath(Bundle("softmax_classifier"), "data/label.npy")));
  // Same seed, same bytes.
  std::string again = JoinPath(dir_, "again");
  ASSERT_EQ(std::system(StrCat(LOOM_MAKE_EXAMPLES_PATH, " ", again, " > /dev/null").c_str()), 0);
  for (const char* f : {"startup.pb", "main.pb", "data/x.npy", "data/label.npy"})
    EXPECT_EQ(ReadFile(JoinPath(JoinPath(again, "softmax_classifier"), f)).value(),
              ReadFile(JoinPath(Bundle("softmax_classifier"), f)).value())
        << f;
}

TEST_F(CliTest, MakeExamplesUsageErrors) {
  auto code = [](const std::string& args) {
    int status =
        std::system(StrCat(LOOM_MAKE_EXAMPLES_PATH, " ", args, " > /dev/null 2>&1").c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  };
  EXPECT_EQ(code(""), 2);
  EXPECT_EQ(code(JoinPath(dir_, "s") + " --seed"), 2);
  EXPECT_EQ(code(JoinPath(dir_, "s") + " --seed abc"), 2);
  EXPECT_EQ(code(JoinPath(dir_, "s") + " --bogus"), 2);
  EXPECT_FALSE(FileExists(JoinPath(dir_, "s")));
}

TEST_F(CliTest, BatchesWrapAround) {
  // 2048 rows in batches of 100 (and of 2047): later batches wrap past the last row.
  Result r =
      Loom("run " + Bundle("softmax_classifier") + " --batch-size 100 --iters 45 --print-every 5");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_GT(LossAt(r.out, "1") / LossAt(r.out, "45"), 5.0) << r.out;
  r = Loom("run " + Bundle("softmax_classifier") + " --batch-size 2047 --iters 3 --print-every 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_GT(LossAt(r.out, "3"), 0) << r.out;
}

TEST_F(CliTest, InspectRejectsBadProgramsWithoutDrawing) {
  struct Case {
    const char* name;
    std::function<void(ProgramDesc*)> edit;
    std::vector<std::string> fragments;
  };
  std::vector<Case> cases = {
      {"unknown_op",
       [](ProgramDesc* p) { p->GlobalBlock()->Op(2).SetType("relu_v9"); },
       {"relu_v9", "block 0, #2"}},
      {"missing_var",
       [](ProgramDesc* p) { p->GlobalBlock()->Op(0).SetInput("Y", {"no_such_weight"}); },
       {"no_such_weight", "mul"}},
      {"bad_attr",
       [](ProgramDesc* p) { p->GlobalBlock()->Op(1).SetAttr("axis", std::string("one")); },
       {"elementwise_add", "axis"}},
      {"bad_shape",
       [](ProgramDesc* p) {
         p->GlobalBlock()->FindVar("fc_0.w_0").SetDims({21, 64});
       },
       {"mul", "fc_0.w_0", "[21, 64]"}},
  };
  for (const auto& c : cases) {
    ProgramDesc p = Main();
    c.edit(&p);
    std::string pb = JoinPath(dir_, StrCat("inspect_", c.name, ".pb"));
    ASSERT_TRUE(SaveProgram(p, pb).ok());
    std::string dot = JoinPath(dir_, StrCat("inspect_", c.name, ".dot"));
    Result r = Loom("inspect " + pb + " --dot " + dot);
    std::vector<std::string> want = c.fragments;
    want.push_back(pb);
    EXPECT_EQ(r.code, 1) << c.name << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.name << ": " << r.err;
    for (const auto& f : want)
      EXPECT_NE(r.err.find(f), std::string::npos)
          << c.name << ": stderr lacks '" << f << "': " << r.err;
    EXPECT_FALSE(FileExists(dot)) << c.name;
  }
}

TEST_F(CliTest, InspectUsageErrors) {
  std::string pb = JoinPath(Bundle("softmax_classifier"), "main.pb");
  ExpectError(Loom("inspect"), {"nothing to inspect"}, 2);
  ExpectError(Loom("inspect --ops " + pb), {"--ops"}, 2);
  ExpectError(Loom("inspect " + pb + " --dot"), {"--dot", "needs a value"}, 2);
  ExpectError(Loom("inspect " + pb + " --colour"), {"--colour"}, 2);
  ExpectError(Loom("inspect " + JoinPath(dir_, "absent.pb")), {"absent.pb"});
}

TEST_F(CliTest, OutOfRangeIntegerFlag) {
  ExpectError(Loom("run " + Bundle("softmax_classifier") + " --iters 99999999999999999999999"),
              {"--iters", "out of range"});
}

// A .npy file with a hand-written header: dims whose byte count overflows, and no data.
void WriteOverflowingNpy(const std::string& path, const std::string& descr,
                         const std::string& shape) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }";
  header += std::string(63 - (10 + header.size()) % 64, ' ') + "\n";
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  ASSERT_TRUE(WriteFileAtomic(path, bytes + header).ok());
}

TEST_F(CliTest, NpyDimsThatOverflowAreRejected) {
  // 2^62 rows of 20 floats wrap to 0 bytes in 64 bits; the run must not read past the data.
  std::string x = JoinPath(dir_, "overflow_x.npy"), label = JoinPath(dir_, "overflow_label.npy");
  WriteOverflowingNpy(x, "<f4", "4611686018427387904, 20");
  WriteOverflowingNpy(label, "<i8", "4611686018427387904, 1");
  ExpectError(
      Loom("run " + Bundle("softmax_classifier") + " --feed x=" + x + " --feed label=" + label),
      {"overflow_", "4611686018427387904", "overflow"});
}

TEST_F(CliTest, BadManifestIsOneLineWithPosition) {
  std::string d = BundleWithMain("bad_manifest", Main());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(d, "bundle.pbtxt"), "feeds { nme: \"x\" }\n").ok());
  ExpectError(Loom("run " + d), {"bundle.pbtxt:1:", "nme", "bundle manifest"});
}

TEST_F(CliTest, TextProgramSyntaxErrorIsOneLineWithPosition) {
  std::string path = JoinPath(dir_, "broken.pbtxt");
  ASSERT_TRUE(WriteFileAtomic(path, "blocks { idx: 0\n  ops { type: \"relu\"\n").ok());
  ExpectError(Loom("inspect " + path), {"broken.pbtxt:3:", "Loom program"});
}

TEST_F(CliTest, FixedBatchDimMustMatchBatchSize) {
  ProgramDesc p = Main();
  p.GlobalBlock()->FindVar("x").SetDims({64, 20});
  std::string d = BundleWithMain("fixed_batch", p);
  ExpectError(Loom("run " + d + " --batch-size 32"), {"batch size 32", "'x'", "[64, 20]"});
  Result r = Loom("run " + d + " --iters 2");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(CliTest, TranspiledBundleTrainsLikeOneDevice) {
  Result one = Loom("run " + Bundle("softmax_classifier") + " --iters 30 --print-every 10");
  ASSERT_EQ(one.code, 0) << one.err;
  for (const std::string mode : {"allreduce", "owner"}) {
    std::string out = JoinPath(dir_, "dp_" + mode);
    Result t = Loom("transpile " + Bundle("softmax_classifier") + " -o " + out +
                    " --places cpu:3 --mode " + mode);
    ASSERT_EQ(t.code, 0) << t.err;
    EXPECT_TRUE(FileExists(JoinPath(out, "manifest.pbtxt")));
    EXPECT_TRUE(FileExists(JoinPath(out, "rank2/main.pb")));
    Result r = Loom("run " + out + " --iters 30 --print-every 10");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("3 ranks (" + mode), std::string::npos) << r.out;
    // The loss over the global batch follows single-device training.
    for (const char* it : {"1", "10", "30"})
      EXPECT_NEAR(LossAt(r.out, it), LossAt(one.out, it), 1e-4 * LossAt(one.out, it))
          << mode << " iter " << it << "\n"
          << r.out << one.out;
  }
}

TEST_F(CliTest, TranspileWritesManifestAndInspectShowsCollectives) {
  std::string out = JoinPath(dir_, "dp_inspect");
  Result t = Loom("transpile " + Bundle("softmax_classifier") + " -o " + out +
                  " --places cpu:2 --fuse-mb 0 --algo ring");
  ASSERT_EQ(t.code, 0) << t.err;
  std::string manifest = ReadFile(JoinPath(out, "manifest.pbtxt")).value();
  EXPECT_NE(manifest.find("algorithm: \"ring\""), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("collective: \"allreduce\""), std::string::npos);
  std::string dot_file = JoinPath(dir_, "dp_rank0.dot");
  Result dot = Loom("inspect " + JoinPath(out, "rank0/main.pb") + " --dot " + dot_file);
  ASSERT_EQ(dot.code, 0) << dot.err;
  EXPECT_NE(ReadFile(dot_file).value().find("allreduce"), std::string::npos);
  Result text = Loom("inspect " + JoinPath(out, "rank1/startup.pb"));
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("comm_init"), std::string::npos);
  EXPECT_NE(text.out.find("broadcast"), std::string::npos);
  // A global batch smaller than the number of ranks still trains (one rank gets no rows).
  Result tiny = Loom("transpile " + Bundle("softmax_classifier") + " -o " +
                     JoinPath(dir_, "dp_tiny") + " --places cpu:4");
  ASSERT_EQ(tiny.code, 0) << tiny.err;
  std::string trace = JoinPath(dir_, "dp_tiny.json");
  Result r =
      Loom("run " + JoinPath(dir_, "dp_tiny") + " --iters 5 --batch-size 3 --timeline " + trace);
  ASSERT_EQ(r.code, 0) << r.err;
  // The timeline shows every rank's compute and its allreduce on the communication thread.
  std::string json = ReadFile(trace).value();
  EXPECT_NE(json.find("\"rank 3\""), std::string::npos);
  EXPECT_NE(json.find("\"name\": \"allreduce\", \"cat\": \"communication\""), std::string::npos);
  EXPECT_NE(json.find("\"name\": \"mul_grad\", \"cat\": \"compute\""), std::string::npos);
}

// loom simulate --timeline: a one-device trace of a training run becomes the model of a scaling
// table (the program gives the gradients and their sizes).
TEST_F(CliTest, SimulateTakesTheModelFromATimeline) {
  const std::string trace = JoinPath(dir_, "one_device.json");
  Result r = Loom("run " + Bundle("softmax_classifier") + " --iters 6 --timeline " + trace);
  ASSERT_EQ(r.code, 0) << r.err;
  Result s = Loom("simulate --topology mesh4 --timeline " + trace + " --program " +
                  Bundle("softmax_classifier") + " --batch 16 --fusion-mb 0 --algo ring");
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("batch 16 per device"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("measured on one device: forward"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("median of 5 recorded steps of rank 0"), std::string::npos) << s.out;
  // Rows for 1 and 4 devices; one device is the measured step itself.
  EXPECT_NE(s.out.find("100.0%  -"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("ringx"), std::string::npos) << s.out;
  ExpectError(Loom("simulate --topology mesh4 --timeline " + trace),
              {"--timeline needs --program"});
  ExpectError(Loom("simulate --topology mesh4 --model resnet50 --timeline " + trace +
                   " --program " + Bundle("softmax_classifier")),
              {"one of --model"});
  ExpectError(Loom("simulate --topology mesh4 --timeline " + trace + " --program " +
                   JoinPath(Bundle("softmax_classifier"), "startup.pb")),
              {"no parameter is updated"});
  ExpectError(Loom("simulate --topology mesh4 --timeline " +
                   JoinPath(Bundle("softmax_classifier"), "main.pb") + " --program " +
                   Bundle("softmax_classifier")),
              {"not a trace"});
}

// loom simulate --op-costs: the program priced per op by a cost table instead of measured.
TEST_F(CliTest, SimulateTakesTheModelFromAProgramAndAnOpCostTable) {
  const std::string costs = JoinPath(dir_, "costs.json");
  ASSERT_TRUE(
      WriteFileAtomic(costs, R"({"ops": {"mul": 40}, "default_us": 4, "source": "test"})").ok());
  Result s = Loom("simulate --topology mesh4 --op-costs " + costs + " --program " +
                  Bundle("softmax_classifier") + " --batch 8 --fusion-mb 0 --algo ring");
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("batch 8 per device"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("# source: op cost table: test"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("100.0%  -"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("ringx"), std::string::npos) << s.out;
  ExpectError(Loom("simulate --topology mesh4 --op-costs " + costs),
              {"--op-costs needs --program"});
  ASSERT_TRUE(WriteFileAtomic(costs, R"({"ops": {"mul": 40}})").ok());
  ExpectError(Loom("simulate --topology mesh4 --op-costs " + costs + " --program " +
                   Bundle("softmax_classifier")),
              {costs, "no cost for op"});
  ExpectError(Loom("simulate --topology mesh4 --op-costs " + costs + " --timeline " + costs +
                   " --program " + Bundle("softmax_classifier")),
              {"one of --model"});
}

TEST_F(CliTest, CudaPlacesTranspileToNcclRanks) {
  std::string out = JoinPath(dir_, "dp_cuda");
  Result r =
      Loom("transpile " + Bundle("softmax_classifier") + " -o " + out + " --places cuda:0,1");
  ASSERT_EQ(r.code, 0) << r.err;
  std::string manifest = ReadFile(JoinPath(out, "manifest.pbtxt")).value();
  EXPECT_NE(manifest.find("places: \"cuda:1\""), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("transport: \"nccl\""), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("algorithm: \"native\""), std::string::npos) << manifest;
  if (CudaDeviceCount() < 2) {
    // Without the GPUs the run stops with an error naming the place, not a crash.
    ExpectError(Loom("run " + out + " --iters 1"), {"cuda:0", "not available"});
  }
}

TEST_F(CliTest, CudaPlacesOverCudaP2PKeepLoomsAlgorithms) {
  std::string out = JoinPath(dir_, "dp_cuda_p2p");
  Result r = Loom("transpile " + Bundle("softmax_classifier") + " -o " + out +
                  " --places cuda:0,1 --transport cuda_p2p --algo multi_tree");
  ASSERT_EQ(r.code, 0) << r.err;
  std::string manifest = ReadFile(JoinPath(out, "manifest.pbtxt")).value();
  EXPECT_NE(manifest.find("transport: \"cuda_p2p\""), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("algorithm: \"multi_tree\""), std::string::npos) << manifest;
  EXPECT_EQ(manifest.find("algorithm: \"native\""), std::string::npos) << manifest;
  if (CudaDeviceCount() < 2) {
    ExpectError(Loom("run " + out + " --iters 1"), {"cuda:0", "not available"});
  }
  ExpectError(Loom("transpile " + Bundle("softmax_classifier") + " -o " + out + "_x" +
                   " --places cpu:2 --transport cuda_p2p"),
              {"transport cuda_p2p needs CUDA places"});
}

TEST_F(CliTest, TranspileErrors) {
  std::string out = JoinPath(dir_, "dp_err");
  Result ok = Loom("transpile " + Bundle("softmax_classifier") + " -o " + out + " --places cpu:2");
  ASSERT_EQ(ok.code, 0) << ok.err;
  std::string again = JoinPath(dir_, "dp_again");
  ExpectError(Loom("transpile " + JoinPath(out, "rank0") + " -o " + again),
              {"already transpiled", "comm_init"});
  EXPECT_FALSE(IsDirectory(again)) << "a failed transpile must not create its output";
  ExpectError(Loom("transpile " + Bundle("softmax_classifier") + " -o " + again + " --mode bogus"),
              {"mode 'bogus'"});
  ExpectError(
      Loom("transpile " + Bundle("softmax_classifier") + " -o " + again + " --places cuda:0,x"),
      {"--places 'cuda:0,x'", "'x' is not a GPU number"});
  ExpectError(Loom("transpile " + Bundle("softmax_classifier") + " -o " + again +
                   " --places cuda:0,1 --transport mpi"),
              {"place 'cuda:0' does not fit transport 'mpi'"});
  ExpectError(Loom("transpile " + Bundle("softmax_classifier") + " -o " + again +
                   " --places cuda:0,1 --algo ring"),
              {"algorithm 'ring' is one of Loom's schedules", "transport cuda_p2p"});
  ExpectError(Loom("transpile " + Bundle("softmax_classifier")), {"-o OUT_DIR is required"});
}

// ---- the CLI used carelessly: one clear line, a non-zero exit, never a crash or a long wait ----

TEST_F(CliTest, MisusePlaceCountsAreCheckedWhereGiven) {
  std::string out = JoinPath(dir_, "dp_many");
  ExpectError(
      Loom("transpile " + Bundle("softmax_classifier") + " -o " + out + " --places cpu:1000"),
      {"--places 'cpu:1000'", "[1, 64]"});
  std::string gpus = "cuda:0";
  for (int i = 1; i < 65; ++i) gpus += ",0";
  ExpectError(Loom("transpile " + Bundle("softmax_classifier") + " -o " + out + " --places " +
                   gpus + " --transport cuda_p2p"),
              {"65 GPUs, at most 64 ranks"});
  EXPECT_FALSE(IsDirectory(out));
  // A manifest edited by hand to more ranks than a group holds.
  std::string dp = JoinPath(dir_, "dp_edited");
  ASSERT_EQ(
      Loom("transpile " + Bundle("softmax_classifier") + " -o " + dp + " --places cpu:2").code, 0);
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dp, "manifest.pbtxt"), "nranks: 1000\n").ok());
  ExpectError(Loom("run " + dp + " --iters 1"), {"nranks 1000 is outside 1..64"});
}

TEST_F(CliTest, MisuseHostileTopologyFiles) {
  std::string deep = JoinPath(dir_, "deep.json");
  ASSERT_TRUE(WriteFileAtomic(deep, "{\"weights\": " + std::string(100000, '[') +
                                        std::string(100000, ']') + "}")
                  .ok());
  ExpectError(Loom("topo --file " + deep), {"nests 100001 levels deep"});
  std::string junk = JoinPath(dir_, "junk.txt");
  ASSERT_TRUE(WriteFileAtomic(junk, std::string(100000, '[')).ok());
  Result r = Loom("topo --file " + junk);
  ExpectError(r, {"is not an integer"});
  EXPECT_LT(r.err.size(), 300u) << "the message repeats the whole file";
  // A 24-device chain has no balanced tree over real links: found out at once, with a note.
  std::string chain = "24\n";
  for (int a = 0; a < 24; ++a) {
    for (int b = 0; b < 24; ++b) chain += (std::abs(a - b) == 1 ? "2 " : "0 ");
    chain += "\n";
  }
  std::string chain_file = JoinPath(dir_, "chain24.txt");
  ASSERT_TRUE(WriteFileAtomic(chain_file, chain).ok());
  Result c = Loom("topo --file " + chain_file);
  EXPECT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("falling back to the chain along the ring"), std::string::npos) << c.out;
}

TEST_F(CliTest, TranspileWithGradientCompressionTrains) {
  std::string out = JoinPath(dir_, "dp_fp16");
  Result t = Loom("transpile " + Bundle("softmax_classifier") + " -o " + out +
                  " --places cpu:2 --grad-compression fp16");
  ASSERT_EQ(t.code, 0) << t.err;
  Result text = Loom("inspect " + JoinPath(out, "rank0/main.pb"));
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("wire_dtype=\"fp16\""), std::string::npos) << text.out;
  Result r = Loom("run " + out + " --iters 30 --print-every 30");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("lower)"), std::string::npos) << r.out;
  ExpectError(Loom("transpile " + Bundle("softmax_classifier") + " -o " +
                   JoinPath(dir_, "dp_int8") + " --places cpu:2 --grad-compression int8"),
              {"gradient compression must be fp16", "int8"});
}

TEST_F(CliTest, MisuseSizesTheMachineCannotHold) {
  ExpectError(Loom("bench collective -b 100G -e 100G"), {"host memory", "LOOM_HOST_MEMORY_MB"}, 2);
  ExpectError(Loom("transpile " + Bundle("softmax_classifier") + " -o " +
                   JoinPath(dir_, "dp_dump") + " --dump-after nope"),
              {"no pass named 'nope' to dump after"});
  for (const char* v : {"inf", "nan", "-1"})
    ExpectError(Loom("transpile " + Bundle("softmax_classifier") + " -o " +
                     JoinPath(dir_, "dp_fuse") + " --fuse-mb " + v),
                {"--fuse-mb expects a number in [0, "});
}

TEST_F(CliTest, MisuseOutputPaths) {
  // Special files are written into, never replaced; directories are refused.
  Result t = Loom("run " + Bundle("softmax_classifier") + " --iters 2 --timeline /dev/null");
  EXPECT_EQ(t.code, 0) << t.err;
  struct stat st;
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null was replaced";
  ExpectError(
      Loom("inspect " + JoinPath(Bundle("softmax_classifier"), "main.pb") + " --dot " + dir_),
      {"is a directory"});
  ExpectError(Loom("run " + Bundle("softmax_classifier") + " --iters 1 --save-params ''"),
              {"--save-params was given an empty value"}, 2);
  // The output of transpile may not be its input, nor hold it.
  std::string copy = JoinPath(dir_, "self_transpile");
  ASSERT_EQ(std::system(("cp -r " + Bundle("softmax_classifier") + " " + copy).c_str()), 0);
  std::string before = ReadFile(JoinPath(copy, "main.pb")).value();
  ExpectError(Loom("transpile " + copy + " -o " + copy), {"is (or holds) the input bundle"});
  ExpectError(Loom("transpile " + copy + " -o " + dir_), {"is (or holds) the input bundle"});
  EXPECT_EQ(ReadFile(JoinPath(copy, "main.pb")).value(), before);
}

}  // namespace

// A parameter-server bundle: loom transpile --mode pserver, then loom launch running loom run
// in every role; trainer 0 makes the servers checkpoint, and restarted servers resume from it.
TEST_F(CliTest, PserverBundleTrainsThroughLaunchAndResumes) {
  const std::string out = JoinPath(dir_, "ps"), params = JoinPath(dir_, "ps_params");
  Result t = Loom("transpile " + Bundle("softmax_classifier") + " -o " + out +
                  " --mode pserver --pservers 2 --trainers 2 --min-block-size 64");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("2 trainers, 2 servers"), std::string::npos) << t.out;
  EXPECT_TRUE(FileExists(JoinPath(out, "trainer1/main.pb")));
  EXPECT_TRUE(FileExists(JoinPath(out, "pserver1/startup.pb")));
  auto manifest = ReadFile(JoinPath(out, "manifest.pbtxt"));
  ASSERT_TRUE(manifest.ok());
  EXPECT_NE(manifest->find("server_bytes"), std::string::npos);
  const std::string launch = StrCat("launch --workers 2 --servers 2 -- ", LOOM_CLI_PATH, " run ",
                                    out, " --print-every 20 ");
  Result a = Loom(launch + "--iters 60 --save-params " + params);
  ASSERT_EQ(a.code, 0) << a.out << a.err;
  double first = LossAt(a.out, "1"), last = LossAt(a.out, "60");
  ASSERT_GT(first, 0) << a.out;
  EXPECT_LT(last, first / 2) << a.out;
  EXPECT_TRUE(FileExists(JoinPath(params, "pserver_0/CHECKPOINT")));
  EXPECT_TRUE(FileExists(JoinPath(params, "pserver_1/CHECKPOINT")));
  // Trainer 0 prints the progress; trainer 1 ends with one line of its own.
  std::smatch done;
  ASSERT_TRUE(std::regex_search(
      a.out, done, std::regex("trainer 1 done: 60 iterations in [0-9.]+ s; loss ([0-9.e+-]+)")))
      << a.out;
  EXPECT_LT(std::stod(done[1]), first) << a.out;
  Result b = Loom(launch + "--iters 1 --load-params " + params);
  ASSERT_EQ(b.code, 0) << b.out << b.err;
  EXPECT_NE(b.out.find("resumes from"), std::string::npos) << b.out;
  double resumed = LossAt(b.out, "1");
  ASSERT_GT(resumed, 0) << b.out;
  EXPECT_LT(resumed, first / 2) << b.out;
  // Outside a launcher the bundle does not know its role.
  ExpectError(Loom("run " + out + " --iters 1"), {"PADDLE_TRAINING_ROLE"});
}

// The same bundle on an emulated cluster of two nodes (one server and one trainer each): the
// losses are those of the loopback job to the digit (sync training is deterministic), and the
// servers' checkpoint resumes there too. Needs root.
TEST_F(CliTest, PserverBundleTrainsAcrossEmulatedNodesAsOnLoopback) {
  if (geteuid() != 0 || std::system("command -v ip > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "not root or no iproute2: no emulated cluster";
  const std::string out = JoinPath(dir_, "ps_emu"), params = JoinPath(dir_, "ps_emu_params");
  Result t = Loom("transpile " + Bundle("softmax_classifier") + " -o " + out +
                  " --mode pserver --pservers 2 --trainers 2 --min-block-size 64");
  ASSERT_EQ(t.code, 0) << t.err;
  const std::string run = StrCat(" --workers 2 --servers 2 -- ", LOOM_CLI_PATH, " run ", out,
                                 " --print-every 20 --iters 40");
  Result local = Loom("launch" + run);
  ASSERT_EQ(local.code, 0) << local.out << local.err;
  Result emulated = Loom("launch --emulate 2x1:1gbit" + run + " --save-params " + params);
  ASSERT_EQ(emulated.code, 0) << emulated.out << emulated.err;
  EXPECT_NE(emulated.err.find("pserver 1 (10.77.0.2:6171)"), std::string::npos) << emulated.err;
  for (const char* iter : {"1", "20", "40"}) {
    ASSERT_GT(LossAt(local.out, iter), 0) << local.out;
    EXPECT_EQ(LossAt(emulated.out, iter), LossAt(local.out, iter)) << "iteration " << iter;
  }
  Result resumed = Loom("launch --emulate 2x1:1gbit" + run + " --load-params " + params);
  ASSERT_EQ(resumed.code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("resumes from"), std::string::npos) << resumed.out;
  EXPECT_LT(LossAt(resumed.out, "1"), LossAt(local.out, "1")) << resumed.out;
}

// The same bundle across the hosts of an Open MPI hostfile (here one: localhost), through mpirun:
// servers named by host name bind the address it resolves to.
TEST_F(CliTest, PserverBundleRunsThroughAHostfile) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "mpirun is not installed: the --hostfile path is not tested";
  const std::string out = JoinPath(dir_, "ps_hosts"), hosts = JoinPath(dir_, "hostfile");
  ASSERT_TRUE(WriteFileAtomic(hosts, "localhost slots=4\n").ok());
  ASSERT_EQ(Loom("transpile " + Bundle("softmax_classifier") + " -o " + out +
                 " --mode pserver --pservers 2 --trainers 2")
                .code,
            0);
  int sock = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(sock, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(sock, reinterpret_cast<sockaddr*>(&a), &len);
  close(sock);
  Result r = Loom(StrCat("launch --hostfile ", hosts, " --port ", ntohs(a.sin_port),
                         " --workers 2 --servers 2 -- ", LOOM_CLI_PATH, " run ", out,
                         " --iters 20 --print-every 20"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_LT(LossAt(r.out, "20"), LossAt(r.out, "1")) << r.out;
  EXPECT_NE(r.err.find("every trainer closed after 20 sync steps"), std::string::npos) << r.err;
}

}  // namespace loom
