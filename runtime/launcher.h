// The launcher of `loom launch`: starts the processes of a parameter-server job (S servers and N
// workers running one command), gives each the environment Paddle's launcher gives its
// processes, prints their output line by line behind a "[worker 3] " prefix, and stops the whole
// job as soon as one process fails. Locally every process is a child of the launcher in a process
// group of its own; with a hostfile the processes are started through Open MPI's mpirun, each rank
// running `loom launch --rank-exec`, which sets up its own process (RankExec).
//
// Thread safety: Launch and RankExec install signal handlers for SIGINT, SIGTERM, SIGCHLD and
// SIGPIPE while they run (the previous ones come back when they return) and reap only the
// processes they started: call them from one thread of a process that runs no other launch.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/emulated_cluster.h"
#include "base/status.h"

namespace loom::runtime {

struct LaunchOptions {
  int workers = 1;
  int servers = 0;
  std::vector<std::string> command;  // CMD ARGS, run by every process
  std::string host = "127.0.0.1";    // local launches: where servers listen (endpoints)
  std::string hostfile;              // empty: local; else the Open MPI hostfile to start through
  int base_port = 0;   // >0: server i gets base_port + i, worker j base_port + S + j; 0: free
                       // ports locally, kDefaultBasePort with a hostfile
  bool prefix = true;  // "[worker 3] " before every line of output
  double grace_s = 5;  // from SIGTERM to SIGKILL when the job is stopped
  double server_wait_s = 60;      // how long servers may run after every worker exited 0
  double timeout_s = 0;           // the whole job; 0: no limit
  std::string mpirun = "mpirun";  // with a hostfile or clients: the mpirun to run
  // Local launches: the workers form this many MPI clients, each started as its own mpirun job
  // (its own MPI world); 0: none. Workers get LOOM_NUM_CLIENTS, LOOM_CLIENT_ID, LOOM_CLIENT_RANK
  // and LOOM_CLIENT_SIZE.
  int clients = 0;
  int client_first = -1;  // --rank-exec of a client: the global id of the client's rank 0
  std::string self_exe;   // with a hostfile: the loom binary; empty: /proc/self/exe
  // Local launches: run the job on this emulated cluster (runtime/emulate.h) instead of
  // loopback; servers and workers are placed on its nodes by PlaceOnNodes, each in its node's
  // network namespace, and each client's mpirun spans the nodes of its workers.
  std::optional<EmulatedCluster> emulate;
};

inline constexpr int kDefaultBasePort = 6170;

// The checkpoint schedule of a job (loom launch --checkpoint-dir, --checkpoint-every,
// --keep-checkpoints, --resume), handed to every process in its environment: `loom run` takes
// them as the defaults of its flags of the same names, Python's io.save_checkpoint /
// load_latest_checkpoint take LOOM_CHECKPOINT_DIR when given no directory.
inline constexpr const char* kCheckpointVariables[] = {
    "LOOM_CHECKPOINT_DIR", "LOOM_CHECKPOINT_EVERY", "LOOM_KEEP_CHECKPOINTS", "LOOM_RESUME"};

// Runs the job to its end and returns the launcher's exit code: 0 when every process exited 0,
// 1 when one failed (or the job timed out, or servers outlived --server-wait), 128 + the signal
// when the launcher was stopped by SIGINT or SIGTERM. It prints one line saying why on stderr
// ("loom launch: worker 1 exited with code 1; stopped the others"). Errors before any process
// started (no free port, no mpirun, a bad hostfile) come back as a Status.
StatusOr<int> Launch(const LaunchOptions& options);

// One rank of a hostfile job, run under mpirun: reads OMPI_COMM_WORLD_RANK (ranks 0..S-1 are the
// servers, S..S+N-1 the workers), runs options.command as a child with that role's environment
// and prefixed output, and returns an exit code for the child's status (its code, or 128 + the
// signal that killed it). `endpoints` holds every rank's "host:port", in rank order. In a
// client's mpirun (options.client_first >= 0) every rank is a worker: client_first + its rank.
StatusOr<int> RankExec(const LaunchOptions& options, const std::vector<std::string>& endpoints);

// One task of a Slurm job step (loom launch --slurm under srun, runtime/slurm.h): its rank from
// SLURM_PROCID (ranks 0..S-1 the servers), every endpoint from the step's nodes (port base_port,
// or kDefaultBasePort, + the task's index on its node); runs options.command as RankExec does.
// LOOM_PS_SECRET must be set (the same for every task).
StatusOr<int> SlurmRankExec(const LaunchOptions& options);

// `loom launch --netns-agent PID HOST CMD...`: how the mpirun of an emulated job reaches a node
// (Open MPI's plm_rsh_agent, in ssh's place): enters the network namespace of the node of launcher
// PID whose address is HOST, names the node, and runs CMD's words through /bin/sh -c, as sshd
// would. Returns only on error (the exec failed, HOST is no node).
Status RunNetnsAgent(int launcher_pid, const std::string& host,
                     const std::vector<std::string>& command);

// --- The parts below are exposed for tests and for the CLI. ---

// Where every process of a job listens: servers[i] and workers[j] are "host:port".
struct JobLayout {
  std::vector<std::string> servers, workers;
  std::string secret;  // LOOM_PS_SECRET, the same for every process
};

// The variables Launch sets (or, where a role has none, removes) in a process's environment.
const std::vector<std::string>& LaunchVariables();

// The variables of server `rank` (server = true) or worker `rank`, as name/value pairs.
std::vector<std::pair<std::string, std::string>> RoleEnvironment(const JobLayout& layout,
                                                                 bool server, int rank);

// LOOM_PS_SECRET of this process's environment when set, else 32 bytes of /dev/urandom as 64 hex
// digits.
StatusOr<std::string> JobSecret();

// `count` distinct free TCP ports on `host` (each bound to port 0, read, and closed only once all
// are picked, so no port comes twice). Another process may still take one before its server
// binds it: pass base_port to fix the ports instead.
StatusOr<std::vector<int>> PickFreePorts(const std::string& host, int count);

// The servers' listening sockets, opened by the launcher before it starts anyone: each server
// inherits its socket (LOOM_PS_LISTEN_FD names the descriptor) and serves on it, so no process
// started beside it (an mpirun's daemons, binding ports of their own) can take the port between
// the launcher's choice and the server's start. Closed by the destructor (close-on-exec: a child
// keeps only the one it is told to keep).
struct Listener {
  int port = 0;
  int fd = -1;
};
class Listeners {
 public:
  Listeners() = default;
  Listeners(const Listeners&) = delete;
  Listeners& operator=(const Listeners&) = delete;
  ~Listeners();
  // `count` sockets listening on `host`: at base_port, base_port + 1, ... when base_port > 0
  // (AlreadyExists naming the port when one is taken), else on ports the kernel picks.
  Status Open(const std::string& host, int count, int base_port);
  // One more socket, listening on host:port (port 0: one the kernel picks), for server `server`
  // (named in errors). It belongs to the calling thread's network namespace.
  Status Add(const std::string& host, int port, int server);
  void Close();
  const std::vector<Listener>& list() const { return list_; }

 private:
  std::vector<Listener> list_;
};

// One host of an Open MPI hostfile and its slots (lines "host slots=K" or "host", the latter one
// slot per line naming it; "#" starts a comment).
struct HostSlots {
  std::string host;
  int slots = 1;
};
StatusOr<std::vector<HostSlots>> ParseHostfile(const std::string& text, const std::string& path);

// The host each of `nprocs` ranks lands on under `mpirun --map-by slot --oversubscribe`: the
// hosts' slots are filled in order; ranks beyond every slot are spread evenly over the hosts
// (the first hosts taking one more when they do not divide), and each host's ranks are
// consecutive, as Open MPI 4 numbers them.
std::vector<std::string> MapBySlot(const std::vector<HostSlots>& hosts, int nprocs);

}  // namespace loom::runtime
