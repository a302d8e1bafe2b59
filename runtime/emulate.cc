#include "runtime/emulate.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace loom::runtime {
namespace {

constexpr const char* kNetnsDir = "/var/run/netns";
constexpr int kCapNetAdmin = 12, kCapSysAdmin = 21;

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string JoinWords(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// tbf's bucket: at least 64 KiB, and at least a millisecond of the rate (so that timer ticks do
// not cap the rate); the queue holds 10 ms beyond it.
std::string TbfArgs(uint64_t rate_bps) {
  const uint64_t burst = std::max<uint64_t>(64 * 1024, rate_bps / 8 / 1000);
  return StrCat("tbf rate ", rate_bps, "bit burst ", burst, " latency 10ms");
}

}  // namespace

Status CheckEmulationAllowed() {
  std::ifstream status("/proc/self/status");
  std::string line;
  uint64_t effective = 0;
  while (std::getline(status, line))
    if (line.rfind("CapEff:", 0) == 0) effective = std::strtoull(line.c_str() + 7, nullptr, 16);
  const bool net = effective >> kCapNetAdmin & 1, sys = effective >> kCapSysAdmin & 1;
  if (net && sys) return Status::OK();
  return FailedPrecondition(
      "--emulate creates network namespaces and shapes their links, which needs ",
      net ? "" : "CAP_NET_ADMIN", !net && !sys ? " and " : "", sys ? "" : "CAP_SYS_ADMIN",
      ": run loom launch as root (this process has uid ", geteuid(), ")");
}

StatusOr<std::string> RunTool(const std::vector<std::string>& argv, const std::string& input,
                              double timeout_s) {
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0) return IOError("pipe: ", strerror(errno));
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return IOError("pipe: ", strerror(errno));
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    close(in[1]);
    close(out[0]);
    close(err[0]);
    return ResourceExhausted("fork: ", strerror(errno));
  }
  // The input is small (a batch of commands): written whole before reading.
  size_t done = 0;
  while (done < input.size()) {
    ssize_t n = write(in[1], input.data() + done, input.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(in[1]);
  std::string output[2];
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  bool timed_out = false;
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    if (poll(fds, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        output[i].append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
      }
    }
  }
  for (const pollfd& p : fds)
    if (p.fd >= 0) close(p.fd);
  if (timed_out) kill(pid, SIGKILL);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return Status(StatusCode::kTimeout,
                  StrCat("'", JoinWords(argv), "' did not finish within ", timeout_s, " s"));
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 127 && output[1].empty())
    return NotFound("cannot run '", argv[0], "' (install ",
                    argv[0] == "nft" ? "nftables" : "iproute2", ")");
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
    return Internal("'", JoinWords(argv), "' failed: ", Trim(output[1]));
  return output[0];
}

StatusOr<int> RemoveStaleNetworks() {
  DIR* dir = opendir(kNetnsDir);
  if (dir == nullptr) return 0;  // no namespace was ever made
  std::vector<std::string> stale;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind("loom-", 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + 5, &end, 10);
    if (end == name.c_str() + 5 || *end != '-' || pid <= 0) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;  // still running
    stale.push_back(name);
  }
  closedir(dir);
  std::string batch;
  for (const std::string& name : stale) batch += "netns del " + name + "\n";
  if (!batch.empty())
    LOOM_RETURN_IF_ERROR(RunTool({"ip", "-force", "-batch", "-"}, batch).status());
  return static_cast<int>(stale.size());
}

StatusOr<std::unique_ptr<EmulatedNetwork>> EmulatedNetwork::Create(const EmulatedCluster& cluster,
                                                                   int pid) {
  std::unique_ptr<EmulatedNetwork> net(new EmulatedNetwork(cluster, pid));
  Status built = net->Build();
  if (!built.ok()) {
    net->Remove();
    return Status(built.code(), StrCat("cannot build the emulated cluster ", ToString(cluster),
                                       ": ", built.message()));
  }
  return net;
}

EmulatedNetwork::~EmulatedNetwork() { Remove(); }

std::string EmulatedNetwork::NodeNetns(int node) const { return StrCat("loom-", pid_, "-n", node); }
std::string EmulatedNetwork::NodeNetnsPath(int node) const {
  return StrCat(kNetnsDir, "/", NodeNetns(node));
}
std::string EmulatedNetwork::SwitchNetns() const { return StrCat("loom-", pid_, "-sw"); }
std::string EmulatedNetwork::Address(int node, int nic) {
  return StrCat("10.77.", nic, ".", node + 1);
}
std::string EmulatedNetwork::Interface(int nic) { return StrCat("eth", nic); }
std::string EmulatedNetwork::NodeHostname(int node) { return StrCat("node", node); }

Status EmulatedNetwork::Build() {
  const EmulatedCluster& c = cluster_;
  const bool delayed = c.delay_us > 0 || c.jitter_us > 0;
  // Namespaces first, each recorded as soon as it exists. A delayed cluster's switch is a
  // thread of this process (DelayLine), not a namespace.
  for (int i = delayed ? 0 : -1; i < c.nodes; ++i) {
    const std::string name = i < 0 ? SwitchNetns() : NodeNetns(i);
    LOOM_RETURN_IF_ERROR(RunTool({"ip", "netns", "add", name}, "").status());
    made_.push_back(name);
  }
  if (delayed) {
    LOOM_RETURN_IF_ERROR(StartDelayLine());
  } else {
    LOOM_RETURN_IF_ERROR(BuildBridges());
  }
  for (int i = 0; i < c.nodes; ++i) LOOM_RETURN_IF_ERROR(SetUpNode(i));
  return Status::OK();
}

Status EmulatedNetwork::BuildBridges() {
  const EmulatedCluster& c = cluster_;
  const std::string sw = SwitchNetns();
  std::string links, shaping;
  for (int j = 0; j < c.nics; ++j) links += StrCat("link add br", j, " type bridge\n");
  for (int i = 0; i < c.nodes; ++i) {
    for (int j = 0; j < c.nics; ++j) {
      const std::string port = StrCat("n", i, "e", j);
      links +=
          StrCat("link add ", port, " type veth peer name ", Interface(j), " netns ", NodeNetns(i),
                 "\nlink set ", port, " master br", j, "\nlink set ", port, " up\n");
      shaping += StrCat("qdisc add dev ", port, " root ", TbfArgs(c.rate_bps), "\n");
    }
  }
  for (int j = 0; j < c.nics; ++j) links += StrCat("link set br", j, " up\n");
  LOOM_RETURN_IF_ERROR(RunTool({"ip", "-n", sw, "-batch", "-"}, links).status());
  return RunTool({"tc", "-n", sw, "-batch", "-"}, shaping).status();
}

Status EmulatedNetwork::StartDelayLine() {
  const EmulatedCluster& c = cluster_;
  std::vector<std::vector<int>> taps(c.nodes);
  Status status;
  for (int i = 0; i < c.nodes && status.ok(); ++i) {
    StatusOr<std::unique_ptr<NetnsScope>> in = NetnsScope::Enter(NodeNetnsPath(i));
    status = in.status();
    for (int j = 0; j < c.nics && status.ok(); ++j) {
      StatusOr<int> fd = OpenTap(Interface(j));
      status = fd.status();
      if (fd.ok()) taps[i].push_back(*fd);
    }
  }
  if (!status.ok()) {
    for (auto& node : taps)
      for (int fd : node) close(fd);
    return status;
  }
  DelayLineOptions options;
  options.delay_us = c.delay_us;
  options.jitter_us = c.jitter_us;
  options.rate_bps = c.rate_bps;
  LOOM_ASSIGN_OR_RETURN(delay_line_, DelayLine::Start(std::move(taps), options));
  return Status::OK();
}

// A node's loopback and NICs up, its addresses, what it sends shaped, and its loss.
Status EmulatedNetwork::SetUpNode(int i) {
  const EmulatedCluster& c = cluster_;
  std::string node = "link set lo up\n", qdiscs;
  for (int j = 0; j < c.nics; ++j) {
    const std::string dev = Interface(j);
    node += StrCat("link set ", dev, " up\naddr add ", Address(i, j), "/24 dev ", dev, "\n");
    qdiscs += StrCat("qdisc add dev ", dev, " root ", TbfArgs(c.rate_bps), "\n");
  }
  LOOM_RETURN_IF_ERROR(RunTool({"ip", "-n", NodeNetns(i), "-batch", "-"}, node).status());
  LOOM_RETURN_IF_ERROR(RunTool({"tc", "-n", NodeNetns(i), "-batch", "-"}, qdiscs).status());
  if (c.loss_percent <= 0) return Status::OK();
  // A share of every packet the node sends through its NICs, in millionths.
  const long threshold = std::lround(c.loss_percent * 10000);
  const std::string rules =
      StrCat("table inet loom {\n  chain loss {\n    type filter hook output priority 0;\n",
             "    oifname \"eth*\" numgen random mod 1000000 < ", threshold, " drop\n  }\n}\n");
  return RunTool({"ip", "netns", "exec", NodeNetns(i), "nft", "-f", "-"}, rules).status();
}

void EmulatedNetwork::Remove() {
  delay_line_.reset();  // closes the TAPs
  if (made_.empty()) return;
  std::string batch;
  for (const std::string& name : made_) batch += "netns del " + name + "\n";
  Status removed = RunTool({"ip", "-force", "-batch", "-"}, batch).status();
  if (!removed.ok())
    std::fprintf(stderr, "loom launch: removing the emulated cluster: %s\n",
                 removed.ToString().c_str());
  made_.clear();
}

std::vector<int> PlaceOnNodes(int count, int nodes) {
  std::vector<int> node(static_cast<size_t>(std::max(count, 0)));
  for (int k = 0; k < count; ++k)
    node[k] = static_cast<int>(static_cast<int64_t>(k) * nodes / count);
  return node;
}

int NodeOfAddress(const std::string& address) {
  int nic = 0, node = 0;
  char tail = 0;
  if (std::sscanf(address.c_str(), "10.77.%d.%d%c", &nic, &node, &tail) != 2) return -1;
  if (nic < 0 || nic >= kMaxEmulatedNics || node < 1 || node > kMaxEmulatedNodes) return -1;
  return node - 1;
}

StatusOr<std::unique_ptr<NetnsScope>> NetnsScope::Enter(const std::string& path) {
  const int saved = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (saved < 0) return IOError("cannot open this thread's network namespace: ", strerror(errno));
  const int target = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (target < 0) {
    const int e = errno;
    close(saved);
    return NotFound("cannot open network namespace '", path, "': ", strerror(e));
  }
  const int rc = setns(target, CLONE_NEWNET);
  const int e = errno;
  close(target);
  if (rc != 0) {
    close(saved);
    return FailedPrecondition("cannot enter network namespace '", path, "': ", strerror(e));
  }
  return std::unique_ptr<NetnsScope>(new NetnsScope(saved));
}

NetnsScope::~NetnsScope() {
  if (setns(saved_, CLONE_NEWNET) != 0)
    std::fprintf(stderr, "loom launch: cannot return to the launcher's network namespace: %s\n",
                 strerror(errno));
  close(saved_);
}

}  // namespace loom::runtime
