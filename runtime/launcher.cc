#include "runtime/launcher.h"

#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "runtime/emulate.h"
#include "runtime/slurm.h"
#include "runtime/supervisor.h"

namespace loom::runtime {
namespace {

constexpr int kJobFailed = 1;

std::string Join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

Status Validate(const LaunchOptions& o) {
  LOOM_ENFORCE(o.workers >= 1, "--workers must be at least 1, got ", o.workers);
  LOOM_ENFORCE(o.servers >= 0, "--servers must be 0 or more, got ", o.servers);
  LOOM_ENFORCE(!o.command.empty() && !o.command[0].empty(), "no command to run after '--'");
  LOOM_ENFORCE(o.grace_s >= 0 && o.server_wait_s >= 0 && o.timeout_s >= 0,
               "--grace, --server-wait and --timeout must not be negative");
  LOOM_ENFORCE(o.base_port >= 0 && o.base_port + o.servers + o.workers - 1 <= 65535, "--port ",
               o.base_port, ": the ", o.servers + o.workers, " ports from it must lie in 1..65535");
  return Status::OK();
}

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(std::llround(seconds * 1000));
}

SuperviseOptions SupervisorOptions(const LaunchOptions& o) {
  SuperviseOptions s;
  s.prefix = o.prefix;
  s.grace = Millis(o.grace_s);
  s.server_wait = Millis(o.server_wait_s);
  s.timeout = Millis(o.timeout_s);
  return s;
}

// This process's environment without any launch variable (a launcher started from a job must not
// hand its own role down), plus `extra`.
std::vector<std::string> ChildEnvironment(
    const std::vector<std::pair<std::string, std::string>>& extra) {
  const std::vector<std::string>& managed = LaunchVariables();
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    if (std::find(managed.begin(), managed.end(), entry.substr(0, entry.find('='))) ==
        managed.end())
      env.push_back(entry);
  }
  for (const auto& [name, value] : extra) env.push_back(StrCat(name, "=", value));
  return env;
}

ChildSpec RoleSpec(const JobLayout& layout, bool server, int rank,
                   const std::vector<std::string>& command) {
  ChildSpec spec;
  spec.name = StrCat(server ? "server " : "worker ", rank);
  spec.server = server;
  spec.argv = command;
  spec.env = ChildEnvironment(RoleEnvironment(layout, server, rank));
  return spec;
}

// "worker 1", or "worker 1 on node1" on an emulated cluster.
std::string Who(const ChildSpec& spec) {
  return spec.hostname.empty() ? spec.name : StrCat(spec.name, " on ", spec.hostname);
}

// Prints why the job ended (one line on stderr, nothing when it went well) and returns the
// launcher's exit code.
int Report(const JobOutcome& outcome, const std::vector<ChildSpec>& specs, const LaunchOptions& o) {
  using Kind = JobOutcome::Kind;
  std::string why;
  int code = kJobFailed;
  switch (outcome.kind) {
    case Kind::kAllExited: code = 0; break;
    case Kind::kFailed:
      why = StrCat(Who(specs[outcome.culprit]), " ", Describe(outcome.exits[outcome.culprit]),
                   specs.size() > 1 ? "; stopped the others" : "");
      break;
    case Kind::kServersRemained:
      why = StrCat("every worker exited 0, but ", Join(outcome.remained, ", "), " still ran ",
                   o.server_wait_s, " s later (--server-wait); stopped ",
                   outcome.remained.size() > 1 ? "them" : "it");
      break;
    case Kind::kTimedOut:
      why = StrCat("the job timed out after --timeout ", o.timeout_s, " s; stopped it");
      break;
    case Kind::kInterrupted:
      why = StrCat("received ", SignalName(outcome.signal), "; stopped the job");
      code = 128 + outcome.signal;
      break;
  }
  if (!why.empty()) std::fprintf(stderr, "loom launch: %s\n", why.c_str());
  if (!outcome.unresponsive.empty()) {
    std::fprintf(stderr, "loom launch: %s did not exit after SIGKILL; left running\n",
                 Join(outcome.unresponsive, ", ").c_str());
    if (code == 0) code = kJobFailed;
  }
  return code;
}

StatusOr<std::string> FindProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), X_OK) == 0) return name;
    return NotFound("mpirun '", name, "' cannot be run: ", strerror(errno));
  }
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return NotFound(name, " not found in PATH: --hostfile starts the job through Open MPI's ",
                  "mpirun (install Open MPI, or give its path with --mpirun)");
}

StatusOr<std::string> SelfExecutable(const LaunchOptions& o) {
  if (!o.self_exe.empty()) return o.self_exe;
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    return FailedPrecondition("cannot find the loom binary (/proc/self/exe): ", strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

// Every rank's "host:port" under mpirun --map-by slot: rank r gets the base port + r, so server i
// gets base + i and worker j base + S + j.
StatusOr<std::vector<std::string>> HostfileEndpoints(const LaunchOptions& o) {
  std::ifstream in(o.hostfile);
  if (!in) return NotFound("cannot read hostfile '", o.hostfile, "': ", strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  LOOM_ASSIGN_OR_RETURN(std::vector<HostSlots> hosts, ParseHostfile(text.str(), o.hostfile));
  const int base = o.base_port > 0 ? o.base_port : kDefaultBasePort;
  std::vector<std::string> endpoints = MapBySlot(hosts, o.servers + o.workers);
  for (size_t r = 0; r < endpoints.size(); ++r) endpoints[r] += StrCat(":", base + r);
  return endpoints;
}

// `mpirun [mpirun_args] loom launch --rank-exec ... [rank_args] -- CMD`: each rank's own loom
// sets its environment and prefixes its lines. The secret travels in the environment (-x), never
// on a command line others can read.
StatusOr<std::vector<std::string>> MpirunArgv(const LaunchOptions& o,
                                              const std::vector<std::string>& mpirun_args,
                                              const std::vector<std::string>& endpoints,
                                              const std::vector<std::string>& rank_args) {
  LOOM_ASSIGN_OR_RETURN(std::string mpirun, FindProgram(o.mpirun));
  LOOM_ASSIGN_OR_RETURN(std::string self, SelfExecutable(o));
  std::vector<std::string> argv = {mpirun, "--allow-run-as-root", "--oversubscribe"};
  argv.insert(argv.end(), mpirun_args.begin(), mpirun_args.end());
  for (const char* a : {"-x", "LOOM_PS_SECRET"}) argv.push_back(a);
  // The checkpoint schedule loom launch --checkpoint-* set for the job (tools/cmd_launch.cc).
  for (const char* name : kCheckpointVariables)
    if (std::getenv(name) != nullptr) argv.insert(argv.end(), {"-x", name});
  for (const std::string& a :
       {self, std::string("launch"), std::string("--rank-exec"), std::string("--workers"),
        std::to_string(o.workers), std::string("--servers"), std::to_string(o.servers),
        std::string("--endpoints"), Join(endpoints, ","), std::string("--grace"),
        StrCat(o.grace_s)})
    argv.push_back(a);
  argv.insert(argv.end(), rank_args.begin(), rank_args.end());
  if (!o.prefix) argv.push_back("--no-prefix");
  argv.push_back("--");
  argv.insert(argv.end(), o.command.begin(), o.command.end());
  return argv;
}

StatusOr<int> LaunchThroughMpirun(const LaunchOptions& o, const std::string& secret) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> endpoints, HostfileEndpoints(o));
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> argv,
                        MpirunArgv(o,
                                   {"--hostfile", o.hostfile, "--map-by", "slot", "-np",
                                    std::to_string(o.servers + o.workers)},
                                   endpoints, {}));
  std::vector<ChildSpec> specs(1);
  specs[0].name = "mpirun";
  specs[0].argv = argv;
  specs[0].env = ChildEnvironment({{"LOOM_PS_SECRET", secret}});
  SuperviseOptions s = SupervisorOptions(o);
  s.prefix = false;  // each rank prefixes its own lines
  LOOM_ASSIGN_OR_RETURN(JobOutcome outcome, Supervise(specs, s));
  return Report(outcome, specs, o);
}

// The workers of client c of C: an even split of the N workers, the first N % C clients taking
// one more. Returns (first worker, count).
std::pair<int, int> ClientWorkers(int workers, int clients, int c) {
  const int base = workers / clients, extra = workers % clients;
  const int first = c * base + std::min(c, extra);
  return {first, base + (c < extra ? 1 : 0)};
}

// Where an emulated job runs (null for loopback): the network and each worker's node.
struct EmulatedJob {
  const EmulatedNetwork* net = nullptr;
  std::vector<int> server_node, worker_node;
};

// Puts a process on `node` of the emulated cluster: its network namespace, its node's name, and
// the variables that say where it is. LOOM_LOCAL_PROCESSES stays the whole job: every node
// shares this machine's cores.
void PlaceOnNode(ChildSpec* spec, const EmulatedNetwork& net, int node, int processes) {
  spec->netns = net.NodeNetnsPath(node);
  spec->hostname = EmulatedNetwork::NodeHostname(node);
  for (std::string& e : spec->env)
    if (e.rfind("LOOM_LOCAL_PROCESSES=", 0) == 0) e = StrCat("LOOM_LOCAL_PROCESSES=", processes);
  for (const std::string& e :
       {StrCat("LOOM_EMULATE_NODE=", node), StrCat("LOOM_EMULATE_NODES=", net.cluster().nodes),
        StrCat("LOOM_EMULATE_NETNS=", net.NodeNetns(node)),
        StrCat("LOOM_EMULATE_SPEC=", ToString(net.cluster()))})
    spec->env.push_back(e);
}

// The mpirun arguments that spread client c's ranks over the nodes of its workers: a hostfile of
// node addresses (written to `session`), the agent that reaches a node's namespace in ssh's
// place, and Open MPI's TCP traffic kept on the nodes' rails.
StatusOr<std::vector<std::string>> EmulatedMpirunArgs(const LaunchOptions& o,
                                                      const EmulatedJob& emu, int first, int count,
                                                      const std::string& session) {
  std::string hosts;
  for (int w = first; w < first + count;) {
    int node = emu.worker_node[w], slots = 0;
    for (; w < first + count && emu.worker_node[w] == node; ++w) ++slots;
    hosts += StrCat(EmulatedNetwork::Address(node, 0), " slots=", slots, "\n");
  }
  const std::string hostfile = session + "/hosts";
  {
    std::ofstream out(hostfile);
    out << hosts;
    if (!out) return IOError("cannot write '", hostfile, "': ", std::strerror(errno));
  }
  LOOM_ASSIGN_OR_RETURN(std::string self, SelfExecutable(o));
  return std::vector<std::string>{
      "--hostfile", hostfile, "--map-by", "slot", "--mca", "plm_rsh_agent",
      StrCat(self, " launch --netns-agent ", getpid()), "--mca", "plm_rsh_no_tree_spawn", "1",
      "--mca", "oob_tcp_if_include", "10.77.0.0/24", "--mca", "btl_tcp_if_include", "10.77.0.0/16",
      // The nodes share this machine's cores, which a rank polling
      // for messages takes from the others (Open MPI sees one slot
      // per node and would poll).
      "--mca", "mpi_yield_when_idle", "1"};
}

// Client c's mpirun: its workers are its MPI world; each rank runs `loom launch --rank-exec`,
// which sets the worker's environment and prefixes its own lines.
// Concurrent mpiruns on one machine race to create Open MPI's session directory
// ($TMPDIR/ompi.<host>.<uid>), and the loser fails at start ("File exists"): each client's
// mpirun gets a session-directory base of its own (orte_tmpdir_base) under session_base.
// On an emulated cluster the mpirun runs on the node of the client's first worker.
StatusOr<ChildSpec> ClientSpec(const LaunchOptions& o, const JobLayout& layout, int c,
                               const std::string& session_base, const EmulatedJob& emu) {
  auto [first, count] = ClientWorkers(o.workers, o.clients, c);
  std::vector<std::string> endpoints = layout.servers;
  endpoints.insert(endpoints.end(), layout.workers.begin(), layout.workers.end());
  const std::string session = StrCat(session_base, "/c", c);
  if (::mkdir(session.c_str(), 0700) != 0)
    return Internal("cannot create '", session, "' for client ", c,
                    "'s mpirun: ", std::strerror(errno));
  std::vector<std::string> mpirun_args = {"--mca", "orte_tmpdir_base", session, "-np",
                                          std::to_string(count)};
  if (emu.net != nullptr) {
    LOOM_ASSIGN_OR_RETURN(std::vector<std::string> more,
                          EmulatedMpirunArgs(o, emu, first, count, session));
    mpirun_args.insert(mpirun_args.end(), more.begin(), more.end());
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> argv,
                        MpirunArgv(o, mpirun_args, endpoints,
                                   {"--clients", std::to_string(o.clients), "--client-first",
                                    std::to_string(first)}));
  ChildSpec spec;
  spec.name = StrCat("client ", c);
  spec.argv = argv;
  spec.env = ChildEnvironment({{"LOOM_PS_SECRET", layout.secret}});
  spec.prefixed = false;
  if (emu.net != nullptr)
    PlaceOnNode(&spec, *emu.net, emu.worker_node[first], o.servers + o.workers);
  return spec;
}

// Every process's endpoint, with the servers' sockets listening (see Listeners); the workers'
// ports are only names in their environment (nothing binds them). Locally all are on o.host,
// servers on free ports (or --port); on an emulated cluster each is on its node's first address,
// at --port (or kDefaultBasePort) + its rank, as on separate machines.
StatusOr<JobLayout> PlanEndpoints(const LaunchOptions& o, const EmulatedJob& emu,
                                  Listeners* listeners) {
  const int nprocs = o.servers + o.workers;
  std::vector<std::string> hosts(
      nprocs, o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host);
  std::vector<int> ports;
  if (emu.net != nullptr) {
    const int base = o.base_port > 0 ? o.base_port : kDefaultBasePort;
    for (int r = 0; r < nprocs; ++r) {
      const int node = r < o.servers ? emu.server_node[r] : emu.worker_node[r - o.servers];
      hosts[r] = EmulatedNetwork::Address(node, 0);
      ports.push_back(base + r);
      if (r >= o.servers) continue;
      LOOM_ASSIGN_OR_RETURN(auto scope, NetnsScope::Enter(emu.net->NodeNetnsPath(node)));
      LOOM_RETURN_IF_ERROR(listeners->Add(hosts[r], base + r, r));
    }
  } else {
    LOOM_RETURN_IF_ERROR(listeners->Open(o.host, o.servers, o.base_port));
    for (const Listener& l : listeners->list()) ports.push_back(l.port);
    if (o.base_port > 0) {
      for (int r = o.servers; r < nprocs; ++r) ports.push_back(o.base_port + r);
    } else {
      LOOM_ASSIGN_OR_RETURN(std::vector<int> free, PickFreePorts(o.host, o.workers));
      ports.insert(ports.end(), free.begin(), free.end());
    }
  }
  JobLayout layout;
  for (int r = 0; r < nprocs; ++r)
    (r < o.servers ? layout.servers : layout.workers).push_back(StrCat(hosts[r], ":", ports[r]));
  return layout;
}

// Builds the emulated cluster of o.emulate (after removing what SIGKILLed launchers left), and
// places the job's processes on its nodes.
StatusOr<std::unique_ptr<EmulatedNetwork>> BuildCluster(const LaunchOptions& o, EmulatedJob* emu) {
  LOOM_RETURN_IF_ERROR(CheckEmulationAllowed());
  LOOM_ASSIGN_OR_RETURN(int stale, RemoveStaleNetworks());
  if (stale > 0)
    std::fprintf(stderr, "loom launch: removed %d network namespaces of launchers that are gone\n",
                 stale);
  LOOM_ASSIGN_OR_RETURN(auto net, EmulatedNetwork::Create(*o.emulate, getpid()));
  std::fprintf(stderr,
               "loom launch: emulated cluster %s: node<i> has 10.77.<nic>.<i+1> (network "
               "namespace loom-%d-n<i>)\n",
               ToString(*o.emulate).c_str(), static_cast<int>(getpid()));
  emu->net = net.get();
  emu->server_node = PlaceOnNodes(o.servers, o.emulate->nodes);
  emu->worker_node = PlaceOnNodes(o.workers, o.emulate->nodes);
  return net;
}

}  // namespace

StatusOr<int> Launch(const LaunchOptions& o) {
  LOOM_RETURN_IF_ERROR(Validate(o));
  LOOM_ASSIGN_OR_RETURN(std::string secret, JobSecret());
  if (!o.hostfile.empty()) return LaunchThroughMpirun(o, secret);
  const int nprocs = o.servers + o.workers;
  EmulatedJob emu;
  std::unique_ptr<EmulatedNetwork> net;  // removed when Launch returns, however it returns
  if (o.emulate) {
    LOOM_ASSIGN_OR_RETURN(net, BuildCluster(o, &emu));
  }
  Listeners listeners;
  LOOM_ASSIGN_OR_RETURN(JobLayout layout, PlanEndpoints(o, emu, &listeners));
  layout.secret = secret;
  // Servers first: workers usually connect to them as they start.
  std::vector<ChildSpec> specs;
  specs.reserve(nprocs);
  for (int i = 0; i < o.servers; ++i) {
    specs.push_back(RoleSpec(layout, true, i, o.command));
    const int fd = listeners.list()[i].fd;
    specs.back().env.push_back(StrCat("LOOM_PS_LISTEN_FD=", fd));
    specs.back().inherit_fds.push_back(fd);
    if (net) PlaceOnNode(&specs.back(), *net, emu.server_node[i], nprocs);
  }
  std::string session_base;  // the clients' mpirun session directories, removed at the end
  if (o.clients > 0) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = StrCat(tmp && *tmp ? tmp : "/tmp", "/loom-mpi-XXXXXX");
    if (::mkdtemp(templ.data()) == nullptr)
      return Internal("cannot create a directory like '", templ,
                      "' for the clients' mpirun sessions: ", std::strerror(errno));
    session_base = templ;
  }
  auto remove_sessions = [&] {
    std::error_code ec;
    if (!session_base.empty()) std::filesystem::remove_all(session_base, ec);
  };
  if (o.clients > 0) {
    for (auto& server : specs) server.env.push_back(StrCat("LOOM_NUM_CLIENTS=", o.clients));
    for (int c = 0; c < o.clients; ++c) {
      StatusOr<ChildSpec> spec = ClientSpec(o, layout, c, session_base, emu);
      if (!spec.ok()) {
        remove_sessions();
        return spec.status();
      }
      specs.push_back(std::move(spec).value());
    }
  } else {
    for (int j = 0; j < o.workers; ++j) {
      specs.push_back(RoleSpec(layout, false, j, o.command));
      if (net) PlaceOnNode(&specs.back(), *net, emu.worker_node[j], nprocs);
    }
  }
  StatusOr<JobOutcome> outcome = Supervise(specs, SupervisorOptions(o));
  remove_sessions();
  if (!outcome.ok()) return outcome.status();
  return Report(*outcome, specs, o);
}

namespace {

// Runs spec (one rank's command) under this rank's mpirun and returns its exit code.
StatusOr<int> RunRank(ChildSpec spec, const LaunchOptions& o) {
  spec.server = false;  // mpirun waits for every rank; the server-wait rule is not this rank's
#ifdef __linux__
  // Should mpirun's daemon die without stopping this rank, its command is stopped with it.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
  SuperviseOptions s = SupervisorOptions(o);
  s.timeout = std::chrono::milliseconds(0);  // the launcher above times the whole job
  LOOM_ASSIGN_OR_RETURN(JobOutcome outcome, Supervise({spec}, s));
  if (outcome.kind == JobOutcome::Kind::kInterrupted) return 128 + outcome.signal;
  const ProcessExit& exit = outcome.exits[0];
  if (!exit.ok())
    std::fprintf(stderr, "loom launch: %s %s\n", spec.name.c_str(), Describe(exit).c_str());
  return exit.signal != 0 ? 128 + exit.signal : exit.code;
}

// A rank of client c's mpirun: worker client_first + its rank, with the client's variables.
StatusOr<int> ClientRankExec(const LaunchOptions& o, const std::vector<std::string>& endpoints) {
  const char* rank_text = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* size_text = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char* secret = std::getenv("LOOM_PS_SECRET");
  if (rank_text == nullptr || size_text == nullptr || secret == nullptr)
    return FailedPrecondition(
        "--rank-exec --client-first runs one rank of a client's mpirun "
        "(OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE or LOOM_PS_SECRET unset)");
  const int rank = std::atoi(rank_text), size = std::atoi(size_text);
  const int worker = o.client_first + rank;
  LOOM_ENFORCE(rank >= 0 && rank < size && worker < o.workers, "rank ", rank_text, " of ",
               size_text, " from worker ", o.client_first, " is not a worker of ", o.workers);
  JobLayout layout;
  layout.servers.assign(endpoints.begin(), endpoints.begin() + o.servers);
  layout.workers.assign(endpoints.begin() + o.servers, endpoints.end());
  layout.secret = secret;
  ChildSpec spec = RoleSpec(layout, false, worker, o.command);
  int client = 0;
  while (client + 1 < o.clients && ClientWorkers(o.workers, o.clients, client + 1).first <= worker)
    ++client;
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"LOOM_NUM_CLIENTS", std::to_string(o.clients)},
           {"LOOM_CLIENT_ID", std::to_string(client)},
           {"LOOM_CLIENT_RANK", std::to_string(rank)},
           {"LOOM_CLIENT_SIZE", std::to_string(size)}})
    spec.env.push_back(name + "=" + value);
  return RunRank(std::move(spec), o);
}

}  // namespace

StatusOr<int> SlurmRankExec(const LaunchOptions& o) {
  LOOM_RETURN_IF_ERROR(Validate(o));
  LOOM_ASSIGN_OR_RETURN(SlurmStep step, SlurmStepFromEnv());
  const int nprocs = o.servers + o.workers;
  LOOM_ENFORCE(static_cast<int>(step.task_hosts.size()) == nprocs, "the Slurm step has ",
               step.task_hosts.size(), " tasks, --servers and --workers make ", nprocs,
               " (srun --ntasks ", nprocs, ")");
  const char* secret = std::getenv("LOOM_PS_SECRET");
  if (secret == nullptr || *secret == '\0')
    return FailedPrecondition(
        "LOOM_PS_SECRET is unset: every task of the step must share it "
        "(loom launch --slurm outside srun sets it for the tasks it "
        "starts; with your own srun, export one first)");
  const int base = o.base_port > 0 ? o.base_port : kDefaultBasePort;
  std::vector<std::string> endpoints;
  for (size_t r = 0; r < step.task_hosts.size(); ++r)
    endpoints.push_back(StrCat(step.task_hosts[r], ":", base + step.local_index[r]));
  JobLayout layout;
  layout.servers.assign(endpoints.begin(), endpoints.begin() + o.servers);
  layout.workers.assign(endpoints.begin() + o.servers, endpoints.end());
  layout.secret = secret;
  const bool server = step.rank < o.servers;
  return RunRank(RoleSpec(layout, server, server ? step.rank : step.rank - o.servers, o.command),
                 o);
}

StatusOr<int> RankExec(const LaunchOptions& o, const std::vector<std::string>& endpoints) {
  LOOM_RETURN_IF_ERROR(Validate(o));
  const int nprocs = o.servers + o.workers;
  LOOM_ENFORCE(static_cast<int>(endpoints.size()) == nprocs, "--endpoints names ", endpoints.size(),
               " processes, --servers and --workers ", nprocs);
  if (o.client_first >= 0) return ClientRankExec(o, endpoints);
  const char* rank_text = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* secret = std::getenv("LOOM_PS_SECRET");
  if (rank_text == nullptr || secret == nullptr)
    return FailedPrecondition("--rank-exec runs one rank under the mpirun that `loom launch ",
                              "--hostfile` starts (OMPI_COMM_WORLD_RANK or LOOM_PS_SECRET unset)");
  char* end = nullptr;
  const long rank = std::strtol(rank_text, &end, 10);
  LOOM_ENFORCE(*rank_text != '\0' && *end == '\0' && rank >= 0 && rank < nprocs,
               "OMPI_COMM_WORLD_RANK '", rank_text, "' is not a rank of ", nprocs, " processes");
  JobLayout layout;
  layout.servers.assign(endpoints.begin(), endpoints.begin() + o.servers);
  layout.workers.assign(endpoints.begin() + o.servers, endpoints.end());
  layout.secret = secret;
  const bool server = rank < o.servers;
  return RunRank(
      RoleSpec(layout, server, static_cast<int>(server ? rank : rank - o.servers), o.command), o);
}

}  // namespace loom::runtime

namespace loom::runtime {

Status RunNetnsAgent(int launcher_pid, const std::string& host,
                     const std::vector<std::string>& command) {
  const int node = NodeOfAddress(host);
  LOOM_ENFORCE(node >= 0, "--netns-agent: '", host, "' is not an emulated node's address");
  LOOM_ENFORCE(!command.empty(), "--netns-agent: no command for ", host);
  const std::string path = StrCat("/var/run/netns/loom-", launcher_pid, "-n", node);
  LOOM_ASSIGN_OR_RETURN(auto scope, NetnsScope::Enter(path));
  const std::string name = EmulatedNetwork::NodeHostname(node);
  if (unshare(CLONE_NEWUTS) != 0 || sethostname(name.c_str(), name.size()) != 0)
    return FailedPrecondition("--netns-agent: cannot name node ", node, ": ", strerror(errno));
  // As sshd runs a command: its words joined by spaces, read by a shell.
  const std::string line = Join(command, " ");
  execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
  return Internal("--netns-agent: cannot run /bin/sh: ", strerror(errno));
}

}  // namespace loom::runtime
