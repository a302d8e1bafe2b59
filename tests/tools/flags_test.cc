// The subcommand boundary of the loom tool: whatever a command's body throws (a failed internal
// check, std::bad_alloc, anything) becomes one error line and exit code 1, never std::terminate;
// numeric flags take finite numbers in their range only.
#include "tools/flags.h"

#include <gtest/gtest.h>

#include <new>
#include <stdexcept>

namespace loom::cli {
namespace {

Flags TestFlags() {
  return Flags("test", "loom test", "a command for tests",
               {{"ratio", "X", "a ratio", "0.5"}, {"count", "N", "a count", "3"}}, 0, 0);
}

int RunBody(const std::function<Status(const Flags&)>& body, std::vector<std::string> args = {}) {
  Flags flags = TestFlags();
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return RunSubcommand(flags, static_cast<int>(argv.size()), argv.data(), body);
}

TEST(RunSubcommand, ExceptionsFromACommandAreErrorsNotCrashes) {
  struct Case {
    std::function<Status(const Flags&)> body;
    std::string says;
  };
  std::vector<Case> cases = {
      {[](const Flags&) -> Status { throw std::bad_alloc(); }, "out of memory"},
      {[](const Flags&) -> Status { throw std::runtime_error("surprise"); }, "surprise"},
      {[](const Flags&) -> Status {
         LOOM_CHECK(false, "an invariant");
         return Status::OK();
       },
       "an invariant"},
      {[](const Flags&) -> Status { throw 7; }, "unknown type"},
  };
  for (const auto& c : cases) {
    ::testing::internal::CaptureStderr();
    int code = RunBody(c.body);
    std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(code, kExitError);
    EXPECT_EQ(err.rfind("loom test: error: ", 0), 0u) << err;
    EXPECT_NE(err.find(c.says), std::string::npos) << err;
  }
  EXPECT_EQ(RunBody([](const Flags&) { return Status::OK(); }), kExitOk);
}

TEST(Flags, NumbersMustBeFiniteAndInRange) {
  for (const char* bad : {"inf", "-inf", "nan", "1e999", "2", "-0.5", "x"}) {
    Flags flags = TestFlags();
    std::string arg = std::string("--ratio=") + bad;
    char* argv[] = {arg.data()};
    ASSERT_TRUE(flags.Parse(1, argv).ok()) << bad;
    auto v = flags.GetDouble("ratio", 0, 1);
    EXPECT_FALSE(v.ok()) << bad;
    EXPECT_NE(v.status().message().find("in [0, 1]"), std::string::npos) << v.status().message();
  }
  Flags empty = TestFlags();
  std::string arg = "--ratio=";
  char* argv[] = {arg.data()};
  EXPECT_NE(empty.Parse(1, argv).message().find("empty value"), std::string::npos);
  Flags flags = TestFlags();
  ASSERT_TRUE(flags.Parse(0, nullptr).ok());
  EXPECT_DOUBLE_EQ(flags.GetDouble("ratio", 0, 1).value(), 0.5);
}

}  // namespace
}  // namespace loom::cli
