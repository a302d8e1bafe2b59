// `loom launch` end to end, through the built binary: the environment every process sees, the
// prefixed output, fail-fast with no process left behind, servers, --timeout, forwarded signals,
// usage errors, and the --hostfile path through mpirun (skipped where there is none). Every
// launch here ends in a few seconds; one that does not is killed and fails its test.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "base/status.h"
#include "runtime/launcher.h"
#include "runtime/slurm.h"

namespace loom {
namespace {

using Clock = std::chrono::steady_clock;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Whether pid is a process that still runs (a zombie waiting for its reaper does not).
bool Running(int pid) {
  std::string stat = ReadAll(StrCat("/proc/", pid, "/stat"));
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class LaunchTest : public ::testing::Test {
 protected:
  struct Result {
    int code = -1;
    std::string out, err;
    double seconds = 0;
  };

  void SetUp() override {
    char tmpl[] = "/tmp/loom_launch_XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override {
    for (int pid : pids_) {
      if (Running(pid)) kill(pid, SIGKILL);  // a leftover already failed the test
    }
    std::system(("rm -rf " + dir_).c_str());
  }

  // Starts `loom launch ARGS` with stdout and stderr in files and `env` added to its environment.
  pid_t Start(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    started_ = Clock::now();
    const std::string out = dir_ + "/out", err = dir_ + "/err";
    // Nothing of an earlier launch may pass for this one's output.
    unlink(out.c_str());
    unlink(err.c_str());
    pid_t pid = fork();
    if (pid == 0) {
      if (!freopen(out.c_str(), "w", stdout) || !freopen(err.c_str(), "w", stderr)) _exit(99);
      for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> argv = {const_cast<char*>(LOOM_CLI_PATH), const_cast<char*>("launch")};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(LOOM_CLI_PATH, argv.data());
      _exit(98);
    }
    return pid;
  }

  // Waits for the launcher up to `limit` seconds (then kills it and fails).
  Result Wait(pid_t pid, double limit = 15) {
    Result r;
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (Clock::now() - started_ > std::chrono::duration<double>(limit)) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        ADD_FAILURE() << "loom launch still ran after " << limit << " s";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = ReadAll(dir_ + "/out");
    r.err = ReadAll(dir_ + "/err");
    return r;
  }

  Result Launch(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    return Wait(Start(args, env));
  }

  // Remembers every "pid N" the processes print, to look for leftovers.
  void CollectPids(const std::string& text) {
    std::regex re("pid (\\d+)");
    for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it)
      pids_.push_back(std::stoi((*it)[1]));
  }

  void ExpectNoneRunning() {
    EXPECT_FALSE(pids_.empty());
    for (int pid : pids_) EXPECT_FALSE(Running(pid)) << "process " << pid << " was left behind";
  }

  // Waits until `fragment` appears `count` times in the launcher's stdout (up to 5 s).
  bool AwaitOutput(const std::string& fragment, int count) {
    for (int i = 0; i < 500; ++i) {
      std::string out = ReadAll(dir_ + "/out");
      int seen = 0;
      for (size_t p = out.find(fragment); p != std::string::npos; p = out.find(fragment, p + 1))
        ++seen;
      if (seen >= count) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  std::string dir_;
  std::vector<int> pids_;
  Clock::time_point started_;
};

bool HasLine(const std::string& text, const std::string& line) {
  for (const auto& l : Lines(text))
    if (l == line) return true;
  return false;
}

TEST_F(LaunchTest, EveryProcessSeesItsRoleAndTheJob) {
  const std::string script =
      "echo role=$PADDLE_TRAINING_ROLE/$TRAINING_ROLE/$LOOM_ROLE rank=$LOOM_RANK "
      "tid=${PADDLE_TRAINER_ID-unset} sid=${PADDLE_PSERVER_ID-unset} "
      "cur=$PADDLE_CURRENT_ENDPOINT port=${PADDLE_PORT-unset} ip=$POD_IP "
      "eps=$PADDLE_PSERVER_ENDPOINTS list=$PADDLE_PSERVERS_IP_PORT_LIST "
      "n=$PADDLE_TRAINERS_NUM s=$PADDLE_PSERVER_NUM/$LOOM_NUM_SERVERS secret=$LOOM_PS_SECRET";
  // A trainer id in the launcher's own environment must not reach the servers.
  Result r = Launch({"--workers", "3", "--servers", "2", "--", "sh", "-c", script},
                    {"PADDLE_TRAINER_ID=77", "LOOM_PS_SECRET="});
  ASSERT_EQ(r.code, 0) << r.err;
  std::regex re(
      "\\[(server|worker) (\\d)\\] role=(\\w+)/(\\w+)/(\\w+) rank=(\\d) tid=(\\w+) sid=(\\w+) "
      "cur=127\\.0\\.0\\.1:(\\d+) port=(\\w+) ip=127\\.0\\.0\\.1 eps=([0-9.:,]+) list=([0-9.:,]+) "
      "n=3 s=2/2 secret=([0-9a-f]{64})");
  std::map<std::string, std::smatch> by_name;
  std::set<std::string> secrets, server_lists, ports;
  std::string servers[2];
  std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 5u) << r.out;
  for (const std::string& line : lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, re)) << line;
    const bool server = m[1] == "server";
    EXPECT_EQ(m[3], server ? "PSERVER" : "TRAINER") << line;
    EXPECT_EQ(m[4], m[3].str()) << line;
    EXPECT_EQ(m[5], m[1].str()) << line;
    EXPECT_EQ(m[6], m[2].str()) << line;
    EXPECT_EQ(m[7], server ? "unset" : m[2].str()) << line;
    EXPECT_EQ(m[8], server ? m[2].str() : "unset") << line;
    EXPECT_EQ(m[10], server ? m[9].str() : "unset") << line;
    EXPECT_EQ(m[11], m[12].str()) << line;
    secrets.insert(m[13]);
    server_lists.insert(m[11]);
    ports.insert(m[9]);
    if (server) servers[std::stoi(m[2])] = "127.0.0.1:" + m[9].str();
  }
  // The endpoint list is the servers' own endpoints, in server order.
  EXPECT_EQ(*server_lists.begin(), servers[0] + "," + servers[1]);
  EXPECT_EQ(secrets.size(), 1u) << "one secret per job";
  EXPECT_EQ(server_lists.size(), 1u);
  EXPECT_EQ(ports.size(), 5u) << "every process its own port";
}

TEST_F(LaunchTest, WithoutServersOnlyAnEmptyEndpointList) {
  Result r = Launch({"--workers", "1", "--", "sh", "-c",
                     "echo eps=[${PADDLE_PSERVER_ENDPOINTS-unset}] "
                     "${PADDLE_PSERVERS_IP_PORT_LIST-unset} ${PADDLE_PSERVER_NUM-unset} "
                     "${LOOM_NUM_SERVERS-unset} ${PADDLE_PORT-unset}"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[worker 0] eps=[] unset unset unset unset\n");
}

TEST_F(LaunchTest, SecretComesFromTheLaunchersEnvironment) {
  Result r = Launch({"--workers", "2", "--", "sh", "-c", "echo $LOOM_PS_SECRET"},
                    {"LOOM_PS_SECRET=abc123"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(HasLine(r.out, "[worker 0] abc123")) << r.out;
  EXPECT_TRUE(HasLine(r.out, "[worker 1] abc123")) << r.out;
}

TEST_F(LaunchTest, FixedPortsFromBase) {
  Result r = Launch({"--workers", "2", "--servers", "1", "--port", "7100", "--", "sh", "-c",
                     "echo $PADDLE_CURRENT_ENDPOINT"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(HasLine(r.out, "[server 0] 127.0.0.1:7100")) << r.out;
  EXPECT_TRUE(HasLine(r.out, "[worker 0] 127.0.0.1:7101")) << r.out;
  EXPECT_TRUE(HasLine(r.out, "[worker 1] 127.0.0.1:7102")) << r.out;
}

// Each server inherits the socket the launcher listens on at its port (LOOM_PS_LISTEN_FD), so
// nothing started beside it can take the port first; workers get no such descriptor.
TEST_F(LaunchTest, ServersInheritASocketListeningOnTheirPort) {
  // The descriptor's socket inode, then its local port and state from /proc/net/tcp[6].
  const std::string script =
      "if [ -z \"${LOOM_PS_LISTEN_FD-}\" ]; then echo fd=unset; exit 0; fi; "
      "inode=$(readlink /proc/$$/fd/$LOOM_PS_LISTEN_FD | tr -dc 0-9); "
      "echo fd=$LOOM_PS_LISTEN_FD port=$PADDLE_PORT "
      "socket=$(cat /proc/net/tcp /proc/net/tcp6 | awk -v i=$inode '$10 == i {print $2 \"/\" $4}')";
  Result r = Launch({"--workers", "2", "--servers", "2", "--", "sh", "-c", script},
                    {"LOOM_PS_LISTEN_FD=1"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::regex re("\\[server (\\d)\\] fd=(\\d+) port=(\\d+) socket=[0-9A-F]+:([0-9A-F]{4})/(\\w+)");
  int servers = 0;
  for (const std::string& line : Lines(r.out)) {
    std::smatch m;
    if (line.rfind("[worker", 0) == 0) {
      // The launcher's own LOOM_PS_LISTEN_FD does not reach anyone.
      EXPECT_NE(line.find("fd=unset"), std::string::npos) << line;
      continue;
    }
    ASSERT_TRUE(std::regex_match(line, m, re)) << line;
    EXPECT_GE(std::stoi(m[2]), 3) << line;
    EXPECT_EQ(std::stoi(m[4], nullptr, 16), std::stoi(m[3])) << "listens at its own port: " << line;
    EXPECT_EQ(m[5], "0A") << "a listening socket: " << line;
    ++servers;
  }
  EXPECT_EQ(servers, 2) << r.out;
}

TEST_F(LaunchTest, AFixedServerPortInUseFailsBeforeAnythingStarts) {
  runtime::Listeners taken;  // a socket listening on a port the kernel picks
  ASSERT_TRUE(taken.Open("127.0.0.1", 1, 0).ok());
  const int port = taken.list()[0].port;
  Result r = Launch({"--workers", "1", "--servers", "1", "--port", std::to_string(port), "--", "sh",
                     "-c", "echo started"});
  taken.Close();
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.out, "") << "no process may start";
  EXPECT_NE(r.err.find(StrCat("127.0.0.1:", port)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("in use"), std::string::npos) << r.err;
}

TEST_F(LaunchTest, OutputIsPrefixedPerStreamAndTheLastLineFlushed) {
  Result r = Launch({"--", "sh", "-c", "echo one; printf 'two'; echo oops >&2; printf 'tail' >&2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[worker 0] one\n[worker 0] two\n");
  EXPECT_EQ(r.err, "[worker 0] oops\n[worker 0] tail\n");
  r = Launch({"--no-prefix", "--", "sh", "-c", "echo one; printf 'two'"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "one\ntwo");
}

TEST_F(LaunchTest, LinesOfManyProcessesNeverMix) {
  // Each worker writes 300 lines of 200 copies of its id, in small writes.
  Result r = Launch({"--workers", "4", "--", "sh", "-c",
                     "line=$(printf '%0200d' 0 | tr 0 $PADDLE_TRAINER_ID); i=0; "
                     "while [ $i -lt 300 ]; do echo $line; i=$((i+1)); done"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> lines = Lines(r.out);
  EXPECT_EQ(lines.size(), 1200u);
  std::regex re("\\[worker (\\d)\\] (\\d)\\2{199}");
  for (const std::string& line : lines) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, re)) << line.substr(0, 80);
    ASSERT_EQ(m[1], m[2].str()) << line.substr(0, 80);
  }
}

TEST_F(LaunchTest, FailingWorkerStopsEveryOtherProcess) {
  // Each process leaves a background process in its group; worker 1 fails, the others sleep.
  Result r = Launch({"--workers", "3", "--servers", "1", "--", "sh", "-c",
                     "sleep 30 & echo pid $!; echo pid $$; "
                     "if [ \"$PADDLE_TRAINER_ID\" = 1 ]; then sleep 0.3; exit 3; fi; wait"});
  EXPECT_EQ(r.code, 1);
  EXPECT_LT(r.seconds, 5);
  EXPECT_NE(r.err.find("loom launch: worker 1 exited with code 3; stopped the others"),
            std::string::npos)
      << r.err;
  CollectPids(r.out);
  EXPECT_EQ(pids_.size(), 8u) << r.out;
  ExpectNoneRunning();
}

TEST_F(LaunchTest, ProcessIgnoringSigtermIsKilledAfterTheGrace) {
  Result r = Launch({"--workers", "2", "--grace", "1", "--", "sh", "-c",
                     "trap '' TERM; echo pid $$; "
                     "if [ $PADDLE_TRAINER_ID = 0 ]; then sleep 0.2; exit 1; fi; "
                     "while :; do sleep 0.1; done"});
  EXPECT_EQ(r.code, 1);
  EXPECT_GT(r.seconds, 1);
  EXPECT_LT(r.seconds, 5);
  EXPECT_NE(r.err.find("worker 0 exited with code 1"), std::string::npos) << r.err;
  CollectPids(r.out);
  ExpectNoneRunning();
}

TEST_F(LaunchTest, DeathBySignalIsNamed) {
  Result r = Launch({"--workers", "2", "--", "sh", "-c",
                     "if [ $PADDLE_TRAINER_ID = 1 ]; then kill -KILL $$; fi; sleep 30"});
  EXPECT_EQ(r.code, 1);
  EXPECT_LT(r.seconds, 5);
  EXPECT_NE(r.err.find("loom launch: worker 1 killed by signal 9 (SIGKILL); stopped the others"),
            std::string::npos)
      << r.err;
}

TEST_F(LaunchTest, CommandThatCannotRunFails) {
  Result r = Launch({"--", "no-such-command-for-loom-launch"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("[worker 0] loom launch: cannot run 'no-such-command-for-loom-launch'"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("worker 0 exited with code 127"), std::string::npos) << r.err;
}

TEST_F(LaunchTest, ServersExitingAfterTheWorkersEndTheJob) {
  Result r = Launch({"--workers", "2", "--servers", "2", "--", "sh", "-c",
                     "if [ $LOOM_ROLE = server ]; then sleep 0.5; fi; echo bye"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(HasLine(r.out, "[server 1] bye")) << r.out;
  EXPECT_TRUE(HasLine(r.out, "[worker 1] bye")) << r.out;
}

TEST_F(LaunchTest, ServersOutlivingServerWaitAreStopped) {
  Result r = Launch({"--workers", "1", "--servers", "2", "--server-wait", "0.5", "--", "sh", "-c",
                     "echo pid $$; if [ $LOOM_ROLE = server ]; then exec sleep 30; fi"});
  EXPECT_EQ(r.code, 1);
  EXPECT_LT(r.seconds, 4);
  EXPECT_NE(r.err.find("every worker exited 0, but server 0, server 1 still ran 0.5 s later "
                       "(--server-wait); stopped them"),
            std::string::npos)
      << r.err;
  CollectPids(r.out);
  ExpectNoneRunning();
}

TEST_F(LaunchTest, TimeoutStopsTheWholeJob) {
  Result r = Launch(
      {"--workers", "2", "--timeout", "0.5", "--", "sh", "-c", "echo pid $$; exec sleep 30"});
  EXPECT_EQ(r.code, 1);
  EXPECT_LT(r.seconds, 4);
  EXPECT_NE(r.err.find("loom launch: the job timed out after --timeout 0.5 s; stopped it"),
            std::string::npos)
      << r.err;
  CollectPids(r.out);
  ExpectNoneRunning();
}

TEST_F(LaunchTest, SigintAndSigtermAreForwarded) {
  for (int sig : {SIGINT, SIGTERM}) {
    // The processes run in groups of their own: only the launcher can pass the signal on.
    pid_t pid = Start({"--workers", "2", "--", "sh", "-c",
                       "trap 'echo got INT; exit 4' INT; trap 'echo got TERM; exit 5' TERM; "
                       "echo pid $$; while :; do sleep 0.05; done"});
    ASSERT_TRUE(AwaitOutput("pid ", 2));
    kill(pid, sig);
    Result r = Wait(pid);
    const std::string name = sig == SIGINT ? "INT" : "TERM";
    EXPECT_EQ(r.code, 128 + sig) << r.err;
    EXPECT_LT(r.seconds, 5);
    EXPECT_TRUE(HasLine(r.out, "[worker 0] got " + name)) << r.out;
    EXPECT_TRUE(HasLine(r.out, "[worker 1] got " + name)) << r.out;
    EXPECT_NE(r.err.find("loom launch: received SIG" + name + "; stopped the job"),
              std::string::npos)
        << r.err;
    CollectPids(r.out);
    ExpectNoneRunning();
  }
}

TEST_F(LaunchTest, UsageErrors) {
  struct Case {
    std::vector<std::string> args;
    int code;
    const char* fragment;
  } cases[] = {
      {{"--workers", "0", "--", "true"}, 2, "--workers must be in [1, 4096], got 0"},
      {{"--servers", "-1", "--", "true"}, 2, "--servers must be in [0, 4096], got -1"},
      {{"--workers", "2", "true"}, 2, "missing '--' before the command"},
      {{"--workers", "2", "--"}, 2, "no command after '--'"},
      {{"stray", "--", "true"}, 2, "unexpected 'stray' before '--'"},
      {{"--grace", "-1", "--", "true"}, 2, "flag --grace expects a number"},
      {{"--port", "65535", "--workers", "2", "--", "true"}, 2, "must lie in [1, 65535]"},
      {{"--host", "h", "--hostfile", "f", "--", "true"}, 2, "--host is for local launches"},
      {{"--rank-exec", "--", "true"}, 2, "--rank-exec and --endpoints go together"},
      {{"--hostfile", "/no/such/hostfile", "--", "true"}, 1, "cannot read hostfile"},
  };
  for (const Case& c : cases) {
    Result r = Launch(c.args);
    EXPECT_EQ(r.code, c.code) << c.fragment << ": " << r.err;
    EXPECT_NE(r.err.find(c.fragment), std::string::npos) << r.err;
    EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
  }
  std::ofstream(dir_ + "/empty_hostfile") << "# no hosts\n\n";
  Result r = Launch({"--hostfile", dir_ + "/empty_hostfile", "--", "true"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("names no host"), std::string::npos) << r.err;
}

TEST_F(LaunchTest, HelpListsEveryFlag) {
  Result r = Launch({"--help"});
  ASSERT_EQ(r.code, 0);
  for (const char* flag :
       {"--workers N", "--servers S", "--hostfile F", "--host ADDR", "--port BASE", "--no-prefix",
        "--grace SECONDS", "--server-wait SECONDS", "--timeout SECONDS", "--mpirun PROG"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
}

// docs/CLI.md's section on loom launch documents every flag --help lists.
TEST_F(LaunchTest, DocsDescribeEveryFlag) {
  Result r = Launch({"--help"});
  ASSERT_EQ(r.code, 0);
  const std::string docs = ReadAll(std::string(LOOM_DOCS_DIR) + "/CLI.md");
  const size_t begin = docs.find("## `loom launch");
  ASSERT_NE(begin, std::string::npos);
  const std::string section = docs.substr(begin, docs.find("\n## ", begin + 1) - begin);
  std::regex flag_line("^  (--[a-z-]+)");
  int flags = 0;
  for (const std::string& line : Lines(r.out)) {
    std::smatch m;
    if (!std::regex_search(line, m, flag_line) || m[1] == "--help") continue;
    ++flags;
    EXPECT_NE(section.find("`" + m[1].str()), std::string::npos) << m[1] << " is not in the docs";
  }
  EXPECT_GE(flags, 12);
}

// --- --hostfile: through mpirun ---

bool HaveMpirun() {
  std::istringstream dirs(std::getenv("PATH") ? std::getenv("PATH") : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (access((dir + "/mpirun").c_str(), X_OK) == 0) return true;
  return false;
}

TEST_F(LaunchTest, HostfileRunsEveryRankThroughMpirun) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun is not installed: the --hostfile path is not tested";
  std::ofstream(dir_ + "/hosts") << "# one machine\nlocalhost slots=8\n";
  Result r = Launch({"--hostfile", dir_ + "/hosts", "--workers", "2", "--servers", "1", "--port",
                     "7300", "--", "sh", "-c",
                     "echo $PADDLE_TRAINING_ROLE ${PADDLE_TRAINER_ID-x}${PADDLE_PSERVER_ID-x} "
                     "$PADDLE_CURRENT_ENDPOINT $PADDLE_PSERVER_ENDPOINTS $POD_IP "
                     "$PADDLE_TRAINERS_NUM ${#LOOM_PS_SECRET} $LOOM_PS_SECRET"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  std::set<std::string> secrets;
  for (const auto& line : lines) secrets.insert(line.substr(line.rfind(' ')));
  EXPECT_EQ(secrets.size(), 1u) << r.out;
  auto has = [&](const std::string& start) {
    for (const auto& line : lines)
      if (line.compare(0, start.size(), start) == 0) return true;
    return false;
  };
  EXPECT_TRUE(has("[server 0] PSERVER x0 localhost:7300 localhost:7300 localhost 2 64 ")) << r.out;
  EXPECT_TRUE(has("[worker 0] TRAINER 0x localhost:7301 localhost:7300 localhost 2 64 ")) << r.out;
  EXPECT_TRUE(has("[worker 1] TRAINER 1x localhost:7302 localhost:7300 localhost 2 64 ")) << r.out;
}

TEST_F(LaunchTest, HostfileJobStopsWhenARankFails) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun is not installed: the --hostfile path is not tested";
  std::ofstream(dir_ + "/hosts") << "localhost slots=8\n";
  Result r = Launch({"--hostfile", dir_ + "/hosts", "--workers", "3", "--", "sh", "-c",
                     "echo pid $$; if [ $PADDLE_TRAINER_ID = 1 ]; then sleep 0.3; exit 1; fi; "
                     "exec sleep 30"});
  EXPECT_EQ(r.code, 1);
  EXPECT_LT(r.seconds, 10);
  EXPECT_NE(r.err.find("loom launch: worker 1 exited with code 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("loom launch: mpirun exited with code 1"), std::string::npos) << r.err;
  CollectPids(r.out);
  EXPECT_EQ(pids_.size(), 3u) << r.out;
  ExpectNoneRunning();
}

TEST_F(LaunchTest, HostfileWithoutMpirunIsAClearError) {
  std::ofstream(dir_ + "/hosts") << "localhost slots=8\n";
  Result r = Launch({"--hostfile", dir_ + "/hosts", "--", "true"}, {"PATH=/nonexistent"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("loom launch: error: mpirun not found in PATH"), std::string::npos) << r.err;
}

}  // namespace
// --- --clients: each client is an mpirun job of its own ---

TEST_F(LaunchTest, ClientsAreMpirunJobsOfConsecutiveWorkers) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun is not installed: --clients is not tested";
  Result r = Launch({"--workers", "5", "--servers", "1", "--clients", "2", "--", "sh", "-c",
                     "echo ${PADDLE_TRAINER_ID-x} ${LOOM_CLIENT_ID-x} ${LOOM_CLIENT_RANK-x} "
                     "${LOOM_CLIENT_SIZE-x} ${LOOM_NUM_CLIENTS-x} $PADDLE_TRAINERS_NUM"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::set<std::string> lines;
  for (const auto& l : Lines(r.out)) lines.insert(l);
  // 5 workers over 2 clients: 3 and 2; the server knows the number of clients.
  for (const char* want :
       {"[worker 0] 0 0 0 3 2 5", "[worker 1] 1 0 1 3 2 5", "[worker 2] 2 0 2 3 2 5",
        "[worker 3] 3 1 0 2 2 5", "[worker 4] 4 1 1 2 2 5", "[server 0] x x x x 2 5"})
    EXPECT_TRUE(lines.count(want)) << "missing '" << want << "' in:\n" << r.out;
}

TEST_F(LaunchTest, AFailingRankOfAClientStopsTheJobNamingTheClient) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun is not installed: --clients is not tested";
  Result r = Launch({"--workers", "4", "--clients", "2", "--", "sh", "-c",
                     "if [ $PADDLE_TRAINER_ID = 3 ]; then sleep 0.3; exit 1; fi; exec sleep 30"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("client 1"), std::string::npos) << r.err;
}

}  // namespace loom

namespace loom {
namespace {

// loom launch --checkpoint-dir / --checkpoint-every / --resume hand the job its checkpoint
// schedule: loom run under it saves on that schedule, and a relaunch with --resume continues
// from the newest checkpoint with the losses of a run that never stopped.
TEST_F(LaunchTest, TheCheckpointScheduleReachesLoomRun) {
  const std::string bundles = dir_ + "/bundles", ckpt = dir_ + "/schedule";
  ASSERT_EQ(
      std::system((std::string(LOOM_MAKE_EXAMPLES_PATH) + " " + bundles + " > /dev/null").c_str()),
      0);
  const std::string bundle = bundles + "/softmax_classifier";
  auto loss_at = [](const std::string& out, const std::string& it) {
    std::smatch m;
    std::regex re("iter " + it + "/\\d+  loss ([0-9.e+-]+)");
    return std::regex_search(out, m, re) ? std::stod(m[1]) : -1.0;
  };
  Result whole =
      Launch({"--", LOOM_CLI_PATH, "run", bundle, "--iters", "20", "--print-every", "4"});
  ASSERT_EQ(whole.code, 0) << whole.err;
  Result first = Launch({"--checkpoint-dir", ckpt, "--checkpoint-every", "4", "--", LOOM_CLI_PATH,
                         "run", bundle, "--iters", "10", "--print-every", "4"});
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_TRUE(std::ifstream(ckpt + "/step-8/CHECKPOINT").good()) << first.out;
  Result resumed = Launch({"--checkpoint-dir", ckpt, "--resume", "--", LOOM_CLI_PATH, "run", bundle,
                           "--iters", "20", "--print-every", "4"});
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("step-8 (step 8)"), std::string::npos) << resumed.out;
  for (const char* it : {"12", "20"}) {
    ASSERT_GT(loss_at(whole.out, it), 0) << whole.out;
    EXPECT_EQ(loss_at(resumed.out, it), loss_at(whole.out, it)) << it << "\n" << resumed.out;
  }
  Result bad = Launch({"--resume", "--", "true"});
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("need --checkpoint-dir"), std::string::npos) << bad.err;
}

// A task of srun (SLURM_PROCID set): its role, rank and every endpoint come from Slurm's
// variables (block distribution; port 6170 + the task's index on its node).
TEST_F(LaunchTest, ASlurmTaskTakesItsRoleFromSlurm) {
  const std::vector<std::string> slurm = {"SLURM_PROCID=2", "SLURM_NTASKS=3",
                                          "SLURM_JOB_NODELIST=node[1-2]",
                                          "SLURM_TASKS_PER_NODE=2,1", "LOOM_PS_SECRET=shared"};
  const std::string show =
      "echo \"$PADDLE_TRAINING_ROLE $PADDLE_TRAINER_ID $PADDLE_PSERVER_ENDPOINTS "
      "$PADDLE_CURRENT_ENDPOINT $PADDLE_TRAINER_ENDPOINTS\"";
  Result r =
      Launch({"--slurm", "--workers", "2", "--servers", "1", "--no-prefix", "--", "sh", "-c", show},
             slurm);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "TRAINER 1 node1:6170 node2:6170 node1:6171,node2:6170\n");
  // The step's task count must be the job's.
  Result wrong = Launch({"--slurm", "--workers", "1", "--", "true"}, slurm);
  EXPECT_EQ(wrong.code, 1);
  EXPECT_NE(wrong.err.find("the Slurm step has 3 tasks"), std::string::npos) << wrong.err;
  Result outside = Launch({"--slurm", "--", "true"});
  EXPECT_EQ(outside.code, 2);
  EXPECT_NE(outside.err.find("not inside a Slurm allocation"), std::string::npos) << outside.err;
}

// Inside an allocation (SLURM_JOB_ID set, no SLURM_PROCID) loom launch --slurm starts the tasks
// through srun (here a stand-in that starts them as Slurm would on one node).
TEST_F(LaunchTest, InsideAnAllocationTheTasksStartThroughSrun) {
  const std::string bin = dir_ + "/bin";
  ASSERT_EQ(std::system(("mkdir -p " + bin).c_str()), 0);
  std::ofstream(bin + "/srun") << "#!/bin/sh\n"
                                  "n=0\n"
                                  "while [ $# -gt 0 ]; do case \"$1\" in\n"
                                  "  --ntasks=*) n=${1#--ntasks=}; shift ;;\n"
                                  "  -*) shift ;;\n"
                                  "  *) break ;;\n"
                                  "esac; done\n"
                                  "i=0\n"
                                  "while [ $i -lt $n ]; do\n"
                                  "  SLURM_PROCID=$i SLURM_NTASKS=$n SLURM_JOB_NODELIST=localhost "
                                  "SLURM_TASKS_PER_NODE=$n \"$@\" &\n"
                                  "  i=$((i + 1))\n"
                                  "done\n"
                                  "wait\n";
  ASSERT_EQ(std::system(("chmod +x " + bin + "/srun").c_str()), 0);
  const std::string path = "PATH=" + bin + ":" + std::getenv("PATH");
  Result r = Launch({"--slurm", "--workers", "2", "--no-prefix", "--", "sh", "-c",
                     "echo \"worker $PADDLE_TRAINER_ID of $PADDLE_TRAINERS_NUM at "
                     "$PADDLE_CURRENT_ENDPOINT\""},
                    {"SLURM_JOB_ID=7", path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("worker 0 of 2 at localhost:6170"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("worker 1 of 2 at localhost:6171"), std::string::npos) << r.out;
}

TEST(Slurm, HostListsAndTaskCountsExpandAsSlurmWritesThem) {
  auto hosts = runtime::ExpandHostlist("node[01-03,7],gpu5,rack[1-2]x");
  ASSERT_TRUE(hosts.ok()) << hosts.status().ToString();
  EXPECT_EQ(*hosts, (std::vector<std::string>{"node01", "node02", "node03", "node7", "gpu5",
                                              "rack1x", "rack2x"}));
  auto counts = runtime::ExpandTasksPerNode("2(x3),1");
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(*counts, (std::vector<int>{2, 2, 2, 1}));
  EXPECT_FALSE(runtime::ExpandHostlist("node[1-3").ok());
  EXPECT_FALSE(runtime::ExpandHostlist("node[3-1]").ok());
  EXPECT_FALSE(runtime::ExpandHostlist("a,,b").ok());
  EXPECT_FALSE(runtime::ExpandTasksPerNode("2(x3").ok());
  EXPECT_FALSE(runtime::ExpandTasksPerNode("two").ok());
}

}  // namespace
}  // namespace loom
