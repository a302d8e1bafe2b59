// The transpiler's output, pinned: for one MLP on 3 ranks in allreduce mode (fused buckets) and
// in owner mode, the manifest and every rank's startup and main program as protobuf text must
// equal tests/transpiler/golden/*.txt byte for byte. A change of the transpiler that changes its
// output shows here; after checking the difference is intended, regenerate the files with
// LOOM_UPDATE_GOLDEN=1 build/tests/transpiler/transpiler_test --gtest_filter='Golden*'.
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/transpiler/test_nets.h"
#include "transpiler/data_parallel.h"

namespace loom::transpiler {
namespace {

std::string Text(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::TextFormat::PrintToString(m, &out);
  return out;
}

// The transpiled MLP (test_nets.h) as one text.
std::string Transpiled(SyncMode mode) {
  Net n = Mlp();
  DataParallelConfig c;
  c.nranks = 3;
  c.mode = mode;
  c.group = "golden";
  auto r = TranspileDataParallel(n.startup, n.main, c);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return "";
  std::string out = "# manifest\n" + Text(r.value().manifest);
  for (size_t i = 0; i < r.value().main.size(); ++i) {
    out += "# rank " + std::to_string(i) + " startup\n" + Text(r.value().startup[i].proto());
    out += "# rank " + std::to_string(i) + " main\n" + Text(r.value().main[i].proto());
  }
  return out;
}

void ExpectGolden(const std::string& name, const std::string& got) {
  const std::string path = std::string(LOOM_GOLDEN_DIR) + "/" + name;
  const char* update = std::getenv("LOOM_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path) << got;
    return;
  }
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << path << " is missing (LOOM_UPDATE_GOLDEN=1 writes it)";
  std::stringstream want;
  want << f.rdbuf();
  if (want.str() == got) return;
  // Name the first line that differs rather than printing both programs.
  std::istringstream a(want.str()), b(got);
  std::string la, lb;
  int line = 0;
  while (true) {
    ++line;
    bool ha = static_cast<bool>(std::getline(a, la)), hb = static_cast<bool>(std::getline(b, lb));
    if (!ha || !hb || la != lb) {
      ADD_FAILURE() << name << ": line " << line
                    << " differs from the golden file:\n  golden: " << (ha ? la : "<end>")
                    << "\n  now:    " << (hb ? lb : "<end>");
      return;
    }
  }
}

TEST(GoldenTranspile, MlpAllReduceModeIsUnchanged) {
  ExpectGolden("mlp_allreduce_3ranks.txt", Transpiled(SyncMode::kAllReduce));
}

TEST(GoldenTranspile, MlpOwnerModeIsUnchanged) {
  ExpectGolden("mlp_owner_3ranks.txt", Transpiled(SyncMode::kOwner));
}

}  // namespace
}  // namespace loom::transpiler
