#include "runtime/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>

#include "base/deadline.h"
#include "runtime/child_process.h"

namespace loom::runtime {
namespace {

using std::chrono::milliseconds;

// How long a process may take to go after SIGKILL before the supervisor gives up on it (one stuck
// in uninterruptible sleep), and how long output is still read after every child ended (a
// process that left the job's groups may hold a pipe open forever).
constexpr milliseconds kAfterKill{5000};
constexpr milliseconds kDrainAfterExit{1000};
// The longest poll: a bound on any wait, should a wakeup ever be missed.
constexpr milliseconds kMaxPoll{1000};

struct Child {
  const ChildSpec* spec = nullptr;
  pid_t pid = -1;
  std::unique_ptr<LinePump> out, err;
  bool exited = false;
  ProcessExit exit;
};

class Supervisor {
 public:
  Supervisor(const SuperviseOptions& options, SignalPipe& signals)
      : options_(options), signals_(signals) {}

  Status Start(const std::vector<ChildSpec>& specs);
  // Until every child ended (or one outlived SIGKILL).
  void Run();
  // Kills what remains in every group, reads the pipes to their end and reaps the children.
  void Finish();
  const JobOutcome& outcome() const { return outcome_; }

 private:
  Status StartOne(const ChildSpec& spec);
  void Poll(Deadline wake);
  void CheckExits();
  void CheckDeadlines();
  void OnSignal(int sig);
  void Stop(JobOutcome::Kind why, int sig);
  void Kill();
  void SignalAll(int sig);
  Deadline NextWake() const;
  bool AllExited() const;
  bool WorkersDone() const;

  const SuperviseOptions& options_;
  SignalPipe& signals_;
  std::vector<Child> children_;
  std::vector<int> received_;  // signals read from signals_ and not yet acted on
  JobOutcome outcome_;
  bool stopping_ = false, killed_ = false;
  Deadline kill_at_{}, give_up_at_{};
  std::optional<Deadline> timeout_at_, servers_due_;
};

Status MakePipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0)
    return ResourceExhausted("cannot create a pipe: ", strerror(errno));
  return Status::OK();
}

Status Supervisor::StartOne(const ChildSpec& spec) {
  int out[2], err[2];
  LOOM_RETURN_IF_ERROR(MakePipe(out));
  Status piped = MakePipe(err);
  if (!piped.ok()) {
    close(out[0]);
    close(out[1]);
    return piped;
  }
  Child child;
  child.spec = &spec;
  const std::string prefix = options_.prefix && spec.prefixed ? "[" + spec.name + "] " : "";
  child.out = std::make_unique<LinePump>(out[0], STDOUT_FILENO, prefix);
  child.err = std::make_unique<LinePump>(err[0], STDERR_FILENO, prefix);
  StatusOr<pid_t> pid = SpawnChild(spec, out[1], err[1]);
  // The write ends belong to the child now: only its exit (and its own children's) ends the pipe.
  close(out[1]);
  close(err[1]);
  if (!pid.ok()) return pid.status();
  child.pid = pid.value();
  children_.push_back(std::move(child));
  return Status::OK();
}

Status Supervisor::Start(const std::vector<ChildSpec>& specs) {
  children_.reserve(specs.size());
  for (const ChildSpec& spec : specs) LOOM_RETURN_IF_ERROR(StartOne(spec));
  if (options_.timeout.count() > 0) timeout_at_ = DeadlineAfter(options_.timeout);
  return Status::OK();
}

void Supervisor::Run() {
  while (!AllExited()) {
    if (killed_ && Clock::now() >= give_up_at_) return;
    Poll(NextWake());
    std::vector<int> received;
    received.swap(received_);
    for (int sig : received) OnSignal(sig);
    CheckExits();
    CheckDeadlines();
  }
}

void Supervisor::Poll(Deadline wake) {
  std::vector<pollfd> fds = {{signals_.read_fd(), POLLIN, 0}};
  std::vector<LinePump*> pumps;
  for (Child& c : children_) {
    for (LinePump* pump : {c.out.get(), c.err.get()}) {
      if (pump->fd() < 0) continue;
      fds.push_back({pump->fd(), POLLIN, 0});
      pumps.push_back(pump);
    }
  }
  const int timeout_ms = static_cast<int>(std::min(TimeLeft(wake), kMaxPoll).count());
  if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  if (fds[0].revents) {
    for (int sig : signals_.Drain()) received_.push_back(sig);
  }
  for (size_t i = 1; i < fds.size(); ++i)
    if (fds[i].revents) pumps[i - 1]->ReadAvailable();
}

void Supervisor::CheckExits() {
  for (size_t i = 0; i < children_.size(); ++i) {
    Child& c = children_[i];
    if (c.exited) continue;
    siginfo_t info;
    std::memset(&info, 0, sizeof(info));
    // WNOWAIT leaves the child a zombie until Finish: its pid, and so its process group's id,
    // stays taken, and signalling the group can never reach a stranger that got the number.
    int rc = waitid(P_PID, static_cast<id_t>(c.pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if (rc != 0 && errno == ECHILD) {
      info.si_pid = c.pid;  // reaped behind our back (SIGCHLD ignored by the host process)
      info.si_code = CLD_EXITED;
      info.si_status = 255;
    } else if (rc != 0 || info.si_pid == 0) {
      continue;
    }
    c.exited = true;
    if (info.si_code == CLD_EXITED)
      c.exit.code = info.si_status;
    else
      c.exit.signal = info.si_status;
    // What it wrote before it ended comes out before anything is said about its end.
    c.out->ReadAvailable();
    c.err->ReadAvailable();
    if (!stopping_ && !c.exit.ok()) {
      outcome_.culprit = static_cast<int>(i);
      Stop(JobOutcome::Kind::kFailed, SIGTERM);
    }
  }
}

void Supervisor::CheckDeadlines() {
  const Deadline now = Clock::now();
  if (stopping_) {
    if (!killed_ && now >= kill_at_) Kill();
    return;
  }
  if (timeout_at_ && now >= *timeout_at_) return Stop(JobOutcome::Kind::kTimedOut, SIGTERM);
  if (!WorkersDone()) return;
  if (!servers_due_) {
    servers_due_ = DeadlineAfter(options_.server_wait);
  } else if (now >= *servers_due_) {
    for (const Child& c : children_)
      if (!c.exited) outcome_.remained.push_back(c.spec->name);
    Stop(JobOutcome::Kind::kServersRemained, SIGTERM);
  }
}

void Supervisor::OnSignal(int sig) {
  if (!stopping_) {
    outcome_.signal = sig;
    Stop(JobOutcome::Kind::kInterrupted, sig);  // the children get the signal the job got
  } else if (!killed_) {
    Kill();  // asked twice: no more grace
  }
}

void Supervisor::Stop(JobOutcome::Kind why, int sig) {
  outcome_.kind = why;
  stopping_ = true;
  kill_at_ = DeadlineAfter(options_.grace);
  SignalAll(sig);
  SignalAll(SIGCONT);  // a stopped process acts on SIGTERM only once continued
}

void Supervisor::Kill() {
  SignalAll(SIGKILL);
  killed_ = true;
  give_up_at_ = DeadlineAfter(kAfterKill);
}

void Supervisor::SignalAll(int sig) {
  // Every group, also of children that ended: what they started may still run in it.
  for (const Child& c : children_) kill(-c.pid, sig);
}

Deadline Supervisor::NextWake() const {
  Deadline wake = DeadlineAfter(kMaxPoll);
  if (stopping_) return std::min(wake, killed_ ? give_up_at_ : kill_at_);
  if (timeout_at_) wake = std::min(wake, *timeout_at_);
  if (servers_due_) wake = std::min(wake, *servers_due_);
  return wake;
}

bool Supervisor::AllExited() const {
  return std::all_of(children_.begin(), children_.end(), [](const Child& c) { return c.exited; });
}

bool Supervisor::WorkersDone() const {
  return std::all_of(children_.begin(), children_.end(),
                     [](const Child& c) { return c.exited || c.spec->server; });
}

void Supervisor::Finish() {
  stopping_ = true;  // from here on an exit is not a failure of the job
  // What a command left running in its group (a background process) ends with the job.
  SignalAll(SIGKILL);
  if (!killed_) {
    killed_ = true;
    give_up_at_ = DeadlineAfter(kAfterKill);
  }
  while (!AllExited() && Clock::now() < give_up_at_) {
    Poll(give_up_at_);
    CheckExits();
  }
  const Deadline drain_until = DeadlineAfter(kDrainAfterExit);
  auto open = [this] {
    return std::any_of(children_.begin(), children_.end(),
                       [](const Child& c) { return c.out->fd() >= 0 || c.err->fd() >= 0; });
  };
  while (open() && Clock::now() < drain_until) Poll(drain_until);
  outcome_.exits.clear();
  for (Child& c : children_) {
    c.out->Close();
    c.err->Close();
    if (c.exited)
      waitpid(c.pid, nullptr, WNOHANG);
    else
      outcome_.unresponsive.push_back(c.spec->name);
    outcome_.exits.push_back(c.exit);
  }
}

}  // namespace

std::string SignalName(int signal) {
  static const struct {
    int number;
    const char* name;
  } kNames[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"}};
  for (const auto& n : kNames)
    if (n.number == signal) return n.name;
  return StrCat("signal ", signal);
}

std::string Describe(const ProcessExit& exit) {
  if (exit.signal != 0)
    return StrCat("killed by signal ", exit.signal, " (", SignalName(exit.signal), ")");
  return StrCat("exited with code ", exit.code);
}

StatusOr<JobOutcome> Supervise(const std::vector<ChildSpec>& children,
                               const SuperviseOptions& options) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<SignalPipe> signals, SignalPipe::Create());
  Supervisor supervisor(options, *signals);
  Status started = supervisor.Start(children);
  if (started.ok()) supervisor.Run();
  supervisor.Finish();
  if (!started.ok()) return started;
  return supervisor.outcome();
}

}  // namespace loom::runtime
