// loom launch --workers N --servers S [flags] -- CMD ARGS...: starts a parameter-server job of
// S servers and N workers, each running CMD with Paddle's launch environment (runtime/launcher.h).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/launcher.h"
#include "tools/commands.h"
#include "tools/flags.h"

namespace loom::cli {
namespace {

Flags LaunchFlags() {
  return Flags(
      "launch", "loom launch --workers N --servers S [--hostfile F] [flags] -- CMD ARGS...",
      "Starts S server and N worker processes, each running CMD ARGS with the environment of\n"
      "Paddle's launcher (PADDLE_TRAINING_ROLE, PADDLE_PSERVER_ENDPOINTS, PADDLE_TRAINER_ID, ...;\n"
      "see docs/CLI.md), and prints their output line by line behind '[worker 3] '. When one\n"
      "process fails, the others are stopped (SIGTERM, SIGKILL after --grace) and loom launch\n"
      "exits 1 naming it. Locally each process is a child in a process group of its own and the\n"
      "servers listen on free ports of --host; with --hostfile the processes are started through\n"
      "mpirun, servers on ranks 0..S-1, workers on S..S+N-1.",
      {
          {"workers", "N", "worker (trainer) processes", "1"},
          {"servers", "S", "server (pserver) processes", "0"},
          {"hostfile", "F",
           "start the processes through mpirun on the hosts of this Open MPI hostfile "
           "('host slots=K' lines), filling slots in order",
           ""},
          {"emulate", "SPEC",
           "run the job on an emulated cluster on this machine: NODES[xNICS]:RATE[:delay=D]"
           "[:loss=P][:jitter=J], e.g. 4x2:1gbit (one network namespace per node, NICS shaped "
           "links each; needs root; see docs/CLUSTER.md)",
           ""},
          {"host", "ADDR", "local launches: the address servers listen on", "127.0.0.1"},
          {"port", "BASE",
           "server i listens on BASE+i, worker j gets BASE+S+j (default: free ports locally, "
           "6170 with --hostfile)",
           ""},
          {"no-prefix", "", "print the processes' lines as they are, without '[worker 3] '", ""},
          {"grace", "SECONDS", "from SIGTERM to SIGKILL when the job is stopped", "5"},
          {"server-wait", "SECONDS", "how long servers may run after every worker exited 0", "60"},
          {"timeout", "SECONDS", "stop the whole job after SECONDS (0: never)", "0"},
          {"clients", "C",
           "local launches: the workers form C MPI clients, each started as its own mpirun job "
           "(its own MPI world) of N/C workers (dist_sync_mpi / dist_async_mpi KVStores); 0: none",
           "0"},
          {"mpirun", "PROG", "with --hostfile or --clients: the mpirun to run", "mpirun"},
          {"slurm", "",
           "run under Slurm: inside an allocation start the S+N tasks with srun; as a task "
           "of srun (SLURM_PROCID set) run this task's role, its rank and every endpoint "
           "from Slurm's variables (port --port, default 6170, + its index on its node)",
           ""},
          {"checkpoint-dir", "DIR",
           "the job's checkpoints: every process gets LOOM_CHECKPOINT_DIR=DIR (loom run's "
           "--checkpoint-dir default; Python's io.save_checkpoint / load_latest_checkpoint)",
           ""},
          {"checkpoint-every", "N", "every process gets LOOM_CHECKPOINT_EVERY=N", ""},
          {"keep-checkpoints", "K", "every process gets LOOM_KEEP_CHECKPOINTS=K", ""},
          {"resume", "",
           "every process gets LOOM_RESUME=1: resume from the newest complete checkpoint of "
           "--checkpoint-dir",
           ""},
          {"client-first", "W", "internal: the first worker of this client, for --rank-exec", ""},
          {"rank-exec", "", "internal: one rank under the mpirun of --hostfile", ""},
          {"netns-agent", "PID", "internal: mpirun's agent into an emulated node (first flag)", ""},
          {"endpoints", "LIST", "internal: every rank's host:port, for --rank-exec", ""},
      },
      // Words before "--" are refused by CheckLaunchFlags, which can say why.
      0, 1 << 20);
}

Status CheckLaunchFlags(const Flags& f, bool has_separator, size_t command_words) {
  if (!has_separator)
    return InvalidArgument("missing '--' before the command to run (loom launch [flags] -- CMD)");
  if (!f.positional().empty())
    return InvalidArgument("unexpected '", f.positional()[0], "' before '--'");
  if (command_words == 0) return InvalidArgument("no command after '--'");
  LOOM_ASSIGN_OR_RETURN(int64_t workers, f.GetInt("workers"));
  LOOM_ASSIGN_OR_RETURN(int64_t servers, f.GetInt("servers"));
  LOOM_ENFORCE(workers >= 1 && workers <= 4096, "--workers must be in [1, 4096], got ", workers);
  LOOM_ENFORCE(servers >= 0 && servers <= 4096, "--servers must be in [0, 4096], got ", servers);
  if (f.Has("port")) {
    LOOM_ASSIGN_OR_RETURN(int64_t port, f.GetInt("port"));
    LOOM_ENFORCE(port >= 1 && port + workers + servers - 1 <= 65535, "--port ", port, ": the ",
                 workers + servers, " ports from it must lie in [1, 65535]");
  }
  for (const char* name : {"grace", "server-wait", "timeout"})
    LOOM_RETURN_IF_ERROR(f.GetDouble(name, 0, 1e7).status());
  LOOM_ENFORCE(!(f.Has("host") && f.Has("hostfile")),
               "--host is for local launches; with --hostfile the hosts come from the file");
  LOOM_ASSIGN_OR_RETURN(int64_t clients, f.GetInt("clients"));
  LOOM_ENFORCE(clients >= 0 && clients <= workers, "--clients must be in [0, --workers ", workers,
               "], got ", clients);
  LOOM_ENFORCE(clients == 0 || !f.Has("hostfile"),
               "--clients starts each client's mpirun on this machine: not with --hostfile");
  if (f.Has("emulate")) {
    LOOM_RETURN_IF_ERROR(ParseEmulatedCluster(f.Get("emulate")).status());
    LOOM_ENFORCE(!f.Has("hostfile"),
                 "--emulate runs every node on this machine: not with --hostfile");
    LOOM_ENFORCE(!f.Has("host"), "--emulate gives each node its own address: not with --host");
  }
  for (const char* name : {"checkpoint-every", "keep-checkpoints"})
    if (f.Has(name)) {
      LOOM_ASSIGN_OR_RETURN(int64_t v, f.GetInt(name));
      LOOM_ENFORCE(v >= 1, "--", name, " must be >= 1, got ", v);
    }
  LOOM_ENFORCE(f.Has("checkpoint-dir") ||
                   !(f.Has("checkpoint-every") || f.Has("keep-checkpoints") || f.Switch("resume")),
               "--checkpoint-every, --keep-checkpoints and --resume need --checkpoint-dir DIR");
  if (f.Switch("slurm")) {
    LOOM_ENFORCE(!f.Has("hostfile") && !f.Has("emulate") && !f.Has("host") &&
                     f.GetInt("clients").value() == 0,
                 "--slurm takes the hosts from Slurm: not with --hostfile, --emulate, --host or "
                 "--clients");
    LOOM_ENFORCE(std::getenv("SLURM_PROCID") != nullptr || std::getenv("SLURM_JOB_ID") != nullptr,
                 "--slurm: not inside a Slurm allocation or step (SLURM_JOB_ID and SLURM_PROCID "
                 "are unset): run it from sbatch or salloc");
  }
  LOOM_ENFORCE(f.Switch("rank-exec") == f.Has("endpoints"),
               "--rank-exec and --endpoints go together (loom launch --hostfile passes both)");
  return Status::OK();
}

std::vector<std::string> SplitList(const std::string& list) {
  std::vector<std::string> items;
  size_t start = 0;
  for (size_t comma; (comma = list.find(',', start)) != std::string::npos; start = comma + 1)
    items.push_back(list.substr(start, comma - start));
  items.push_back(list.substr(start));
  return items;
}

runtime::LaunchOptions OptionsOf(const Flags& f, std::vector<std::string> command) {
  runtime::LaunchOptions o;
  o.workers = static_cast<int>(f.GetInt("workers").value());
  o.servers = static_cast<int>(f.GetInt("servers").value());
  o.command = std::move(command);
  o.host = f.Get("host");
  o.hostfile = f.Get("hostfile");
  o.base_port = f.Has("port") ? static_cast<int>(f.GetInt("port").value()) : 0;
  o.prefix = !f.Switch("no-prefix");
  o.grace_s = f.GetDouble("grace", 0, 1e7).value();
  o.server_wait_s = f.GetDouble("server-wait", 0, 1e7).value();
  o.timeout_s = f.GetDouble("timeout", 0, 1e7).value();
  o.mpirun = f.Get("mpirun");
  o.clients = static_cast<int>(f.GetInt("clients").value());
  o.client_first = f.Has("client-first") ? static_cast<int>(f.GetInt("client-first").value()) : -1;
  if (f.Has("emulate")) o.emulate = ParseEmulatedCluster(f.Get("emulate")).value();
  return o;
}

// Inside a Slurm allocation: srun starts S+N tasks of this same command, each a task of the
// step (--slurm with SLURM_PROCID set), all sharing one secret. Replaces this process.
Status SrunTheJob(const Flags& f, const std::vector<std::string>& command) {
  LOOM_ASSIGN_OR_RETURN(std::string secret, runtime::JobSecret());
  setenv("LOOM_PS_SECRET", secret.c_str(), 1);
  const int64_t tasks = f.GetInt("workers").value() + f.GetInt("servers").value();
  std::vector<std::string> argv = {"srun", StrCat("--ntasks=", tasks), "--kill-on-bad-exit=1",
                                   "/proc/self/exe"};
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) argv[3] = std::string(self, static_cast<size_t>(n));
  for (const char* flag : {"workers", "servers", "port", "grace", "checkpoint-dir",
                           "checkpoint-every", "keep-checkpoints"})
    if (f.Has(flag)) argv.insert(argv.end(), {StrCat("--", flag), f.Get(flag)});
  argv.insert(argv.begin() + 4, "launch");
  for (const char* sw : {"no-prefix", "resume"})
    if (f.Switch(sw)) argv.push_back(StrCat("--", sw));
  argv.insert(argv.end(), {"--slurm", "--"});
  argv.insert(argv.end(), command.begin(), command.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::fflush(nullptr);
  execvp("srun", cargv.data());
  return FailedPrecondition("--slurm: cannot run srun (", std::strerror(errno),
                            "): is Slurm installed on this node?");
}

}  // namespace

int LaunchCommand(int argc, char** argv) {
  // mpirun's agent is called as ssh is, `AGENT HOST WORDS...`: no flags to parse after it.
  if (argc >= 3 && std::strcmp(argv[0], "--netns-agent") == 0) {
    Status failed = runtime::RunNetnsAgent(std::atoi(argv[1]), argv[2],
                                           std::vector<std::string>(argv + 3, argv + argc));
    std::fprintf(stderr, "loom launch: %s\n", failed.ToString().c_str());
    return kExitError;
  }
  // Everything after the first "--" is the command, flags of its own included.
  int separator = 0;
  while (separator < argc && std::strcmp(argv[separator], "--") != 0) ++separator;
  const bool has_separator = separator < argc;
  std::vector<std::string> command(argv + std::min(separator + 1, argc), argv + argc);
  Flags flags = LaunchFlags();
  int exit_code = kExitOk;
  auto body = [&](const Flags& f) -> Status {
    runtime::LaunchOptions options = OptionsOf(f, command);
    // The checkpoint schedule reaches every process through the environment it inherits.
    const std::pair<const char*, const char*> schedule[] = {
        {"checkpoint-dir", "LOOM_CHECKPOINT_DIR"},
        {"checkpoint-every", "LOOM_CHECKPOINT_EVERY"},
        {"keep-checkpoints", "LOOM_KEEP_CHECKPOINTS"}};
    for (const auto& [flag, var] : schedule)
      if (f.Has(flag)) setenv(var, f.Get(flag).c_str(), 1);
    if (f.Switch("resume")) setenv("LOOM_RESUME", "1", 1);
    if (f.Switch("slurm") && std::getenv("SLURM_PROCID") == nullptr)
      return SrunTheJob(f, command);  // returns only when srun cannot start
    StatusOr<int> code = f.Switch("slurm") ? runtime::SlurmRankExec(options)
                         : f.Switch("rank-exec")
                             ? runtime::RankExec(options, SplitList(f.Get("endpoints")))
                             : runtime::Launch(options);
    if (!code.ok()) return code.status();
    exit_code = code.value();
    return Status::OK();
  };
  auto check = [&](const Flags& f) { return CheckLaunchFlags(f, has_separator, command.size()); };
  int rc = RunSubcommand(flags, separator, argv, body, check);
  return rc == kExitOk ? exit_code : rc;
}

}  // namespace loom::cli
