// The launcher's parts that need no process: the environment of each role, hostfiles and where
// mpirun --map-by slot puts each rank, free ports, the job secret, and line-by-line output.
// Whole launches are tested through the loom binary (tests/tools/launch_test.cc).
#include "runtime/launcher.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include "runtime/child_process.h"

namespace loom::runtime {
namespace {

std::map<std::string, std::string> EnvMap(const JobLayout& layout, bool server, int rank) {
  std::map<std::string, std::string> env;
  for (const auto& [name, value] : RoleEnvironment(layout, server, rank)) {
    EXPECT_TRUE(env.emplace(name, value).second) << name << " set twice";
  }
  return env;
}

JobLayout TwoServersThreeWorkers() {
  JobLayout layout;
  layout.servers = {"10.0.0.1:6170", "10.0.0.2:6171"};
  layout.workers = {"10.0.0.3:6172", "10.0.0.3:6173", "10.0.0.4:6174"};
  layout.secret = "s3cret";
  return layout;
}

TEST(RoleEnvironment, ServerHasItsEndpointPortAndIdButNoTrainerId) {
  auto env = EnvMap(TwoServersThreeWorkers(), true, 1);
  EXPECT_EQ(env["PADDLE_TRAINING_ROLE"], "PSERVER");
  EXPECT_EQ(env["TRAINING_ROLE"], "PSERVER");
  EXPECT_EQ(env["PADDLE_PSERVER_ENDPOINTS"], "10.0.0.1:6170,10.0.0.2:6171");
  EXPECT_EQ(env["PADDLE_PSERVERS_IP_PORT_LIST"], "10.0.0.1:6170,10.0.0.2:6171");
  EXPECT_EQ(env["PADDLE_CURRENT_ENDPOINT"], "10.0.0.2:6171");
  EXPECT_EQ(env["PADDLE_PORT"], "6171");
  EXPECT_EQ(env["POD_IP"], "10.0.0.2");
  EXPECT_EQ(env["PADDLE_PSERVER_ID"], "1");
  EXPECT_EQ(env.count("PADDLE_TRAINER_ID"), 0u);
  EXPECT_EQ(env["PADDLE_TRAINERS_NUM"], "3");
  EXPECT_EQ(env["PADDLE_PSERVER_NUM"], "2");
  EXPECT_EQ(env["LOOM_NUM_SERVERS"], "2");
  EXPECT_EQ(env["LOOM_ROLE"], "server");
  EXPECT_EQ(env["LOOM_RANK"], "1");
  EXPECT_EQ(env["LOOM_PS_SECRET"], "s3cret");
  EXPECT_EQ(env["LOOM_LOCAL_PROCESSES"], "1");  // alone on 10.0.0.2
  EXPECT_EQ(EnvMap(TwoServersThreeWorkers(), false, 0)["LOOM_LOCAL_PROCESSES"], "2");
}

TEST(RoleEnvironment, WorkerHasItsIdAndEndpointButNoServerId) {
  auto env = EnvMap(TwoServersThreeWorkers(), false, 2);
  EXPECT_EQ(env["PADDLE_TRAINING_ROLE"], "TRAINER");
  EXPECT_EQ(env["TRAINING_ROLE"], "TRAINER");
  EXPECT_EQ(env["PADDLE_TRAINER_ID"], "2");
  EXPECT_EQ(env["PADDLE_CURRENT_ENDPOINT"], "10.0.0.4:6174");
  EXPECT_EQ(env["POD_IP"], "10.0.0.4");
  EXPECT_EQ(env["PADDLE_TRAINER_ENDPOINTS"], "10.0.0.3:6172,10.0.0.3:6173,10.0.0.4:6174");
  EXPECT_EQ(env.count("PADDLE_PSERVER_ID"), 0u);
  EXPECT_EQ(env.count("PADDLE_PORT"), 0u);
  EXPECT_EQ(env["LOOM_ROLE"], "worker");
  EXPECT_EQ(env["LOOM_RANK"], "2");
}

TEST(RoleEnvironment, WithoutServersOnlyAnEmptyEndpointList) {
  JobLayout layout;
  layout.workers = {"127.0.0.1:5000"};
  auto env = EnvMap(layout, false, 0);
  EXPECT_EQ(env.at("PADDLE_PSERVER_ENDPOINTS"), "");
  for (const char* name : {"PADDLE_PSERVERS_IP_PORT_LIST", "PADDLE_PSERVER_NUM", "LOOM_NUM_SERVERS",
                           "PADDLE_PSERVER_ID", "PADDLE_PORT"})
    EXPECT_EQ(env.count(name), 0u) << name;
}

TEST(RoleEnvironment, EveryVariableSetIsOneTheLauncherClearsFirst) {
  const auto& managed = LaunchVariables();
  for (bool server : {true, false}) {
    for (const auto& [name, value] : RoleEnvironment(TwoServersThreeWorkers(), server, 0))
      EXPECT_NE(std::find(managed.begin(), managed.end(), name), managed.end()) << name;
  }
}

TEST(RoleEnvironment, Ipv6EndpointGivesABareAddress) {
  JobLayout layout;
  layout.servers = {"[::1]:7000"};
  layout.workers = {"[::1]:7001"};
  auto env = EnvMap(layout, true, 0);
  EXPECT_EQ(env["POD_IP"], "::1");
  EXPECT_EQ(env["PADDLE_PORT"], "7000");
}

TEST(ParseHostfile, SlotsCommentsAndRepeatedHosts) {
  auto hosts = ParseHostfile(
      "# cluster\n"
      "node1 slots=4   # four GPUs\n"
      "\n"
      "   \n"
      "alice@node2\n"
      "node3 slot=2\n"
      "node2\n",
      "hf");
  ASSERT_TRUE(hosts.ok()) << hosts.status().ToString();
  ASSERT_EQ(hosts->size(), 3u);
  EXPECT_EQ((*hosts)[0].host, "node1");
  EXPECT_EQ((*hosts)[0].slots, 4);
  EXPECT_EQ((*hosts)[1].host, "node2");  // listed twice without slots=: one slot per line
  EXPECT_EQ((*hosts)[1].slots, 2);
  EXPECT_EQ((*hosts)[2].slots, 2);
}

TEST(ParseHostfile, ErrorsNameTheFileAndLine) {
  struct Case {
    const char* text;
    const char* fragment;
  } cases[] = {
      {"# only a comment\n\n", "names no host"},
      {"", "names no host"},
      {"a slots=0\n", "hf:1: 'slots=0'"},
      {"a\nb slots=x\n", "hf:2: 'slots=x'"},
      {"a max_slots=4\n", "'max_slots=4' is not understood"},
      {"a slots=2\na slots=2\n", "hf:2: host 'a' is listed again"},
  };
  for (const Case& c : cases) {
    auto hosts = ParseHostfile(c.text, "hf");
    ASSERT_FALSE(hosts.ok()) << c.text;
    EXPECT_NE(hosts.status().message().find(c.fragment), std::string::npos)
        << hosts.status().message();
  }
}

// The maps below are what Open MPI 4.1's `mpirun --display-map --map-by slot --oversubscribe`
// prints for these hostfiles.
TEST(MapBySlot, FillsSlotsInOrder) {
  std::vector<HostSlots> hosts = {{"a", 2}, {"b", 1}, {"c", 1}};
  EXPECT_EQ(MapBySlot(hosts, 3), (std::vector<std::string>{"a", "a", "b"}));
  EXPECT_EQ(MapBySlot({{"localhost", 8}}, 5), std::vector<std::string>(5, "localhost"));
}

TEST(MapBySlot, OversubscribedRanksAreSpreadEvenlyAndStayConsecutivePerHost) {
  std::vector<HostSlots> hosts = {{"a", 2}, {"b", 1}, {"c", 1}};
  EXPECT_EQ(MapBySlot(hosts, 9),
            (std::vector<std::string>{"a", "a", "a", "a", "b", "b", "b", "c", "c"}));
  EXPECT_EQ(MapBySlot({{"a", 2}, {"b", 2}}, 5),
            (std::vector<std::string>{"a", "a", "a", "b", "b"}));
  EXPECT_EQ(MapBySlot({{"localhost", 1}}, 3), std::vector<std::string>(3, "localhost"));
}

TEST(JobSecret, TakenFromTheEnvironmentElseRandomHex) {
  const char* saved = std::getenv("LOOM_PS_SECRET");
  std::string restore = saved ? saved : "";
  setenv("LOOM_PS_SECRET", "given", 1);
  EXPECT_EQ(JobSecret().value(), "given");
  unsetenv("LOOM_PS_SECRET");
  std::string a = JobSecret().value(), b = JobSecret().value();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
  if (saved) setenv("LOOM_PS_SECRET", restore.c_str(), 1);
}

TEST(PickFreePorts, DistinctAndFreeToBind) {
  auto ports = PickFreePorts("127.0.0.1", 8);
  ASSERT_TRUE(ports.ok()) << ports.status().ToString();
  EXPECT_EQ(std::set<int>(ports->begin(), ports->end()).size(), 8u);
  for (int port : *ports) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << port;
    close(fd);
  }
  EXPECT_FALSE(PickFreePorts("no.such.host.invalid", 1).ok());
}

// Feeds `input` through a LinePump from a pipe into a file and returns what came out.
std::string Pump(const std::string& input, const std::string& prefix) {
  int in[2];
  EXPECT_EQ(pipe(in), 0);
  FILE* out = std::tmpfile();
  {
    LinePump pump(in[0], fileno(out), prefix);
    // A writer of its own: the input may be more than the pipe holds.
    std::thread writer([&] {
      WriteAll(in[1], input);
      close(in[1]);
    });
    while (pump.fd() >= 0) pump.ReadAvailable();
    writer.join();
  }
  std::string result;
  std::rewind(out);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), out)) > 0) result.append(buf, n);
  std::fclose(out);
  return result;
}

TEST(LinePump, PrefixesEveryLineAndEndsTheLastOne) {
  EXPECT_EQ(Pump("a\nbc\n\nd", "[w] "), "[w] a\n[w] bc\n[w] \n[w] d\n");
  EXPECT_EQ(Pump("", "[w] "), "");
  // Without a prefix the bytes pass unchanged, the missing last newline too.
  EXPECT_EQ(Pump("a\nb", ""), "a\nb");
}

TEST(LinePump, CutsOverlongLines) {
  const size_t max = LinePump::kMaxLine;
  std::string out = Pump(std::string(max + 10, 'x') + "\n", "> ");
  EXPECT_EQ(out, "> " + std::string(max, 'x') + "\n> " + std::string(10, 'x') + "\n");
}

}  // namespace
}  // namespace loom::runtime
