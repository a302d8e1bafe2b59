#include "runtime/child_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <cerrno>
#include <cstring>
#include <iterator>

namespace loom::runtime {
namespace {

constexpr int kHandledSignals[] = {SIGINT, SIGTERM, SIGCHLD, SIGPIPE};

// The signal handler's only state: where it writes (see SignalPipe).
volatile sig_atomic_t g_signal_write_fd = -1;

void WriteSignalByte(int sig) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  // Non-blocking: when the pipe is full it already holds a wakeup, and the signal is lost only
  // for SIGCHLD, which carries nothing but the wakeup.
  ssize_t ignored = write(g_signal_write_fd, &byte, 1);
  (void)ignored;
  errno = saved_errno;
}

// In the child between fork and exec: only async-signal-safe calls, then exec or _exit.
// Says why the child cannot run its command, then ends it.
[[noreturn]] void FailChild(const char* what, const char* command) {
  // strerror is not on the async-signal-safe list, but this process is about to exit and runs
  // no other thread: the message is worth it.
  const char* parts[] = {"loom launch: cannot run '", command, "': ", what, strerror(errno), "\n"};
  for (const char* p : parts) {
    if (write(STDERR_FILENO, p, strlen(p)) < 0) break;
  }
  _exit(127);
}

// The process a child spec describes: its namespaces, pid, argv and environment, built before
// fork (the child may not allocate).
struct ChildPlan {
  char* const* argv;
  char* const* envp;
  int netns_fd;          // -1: the supervisor's network namespace
  const char* hostname;  // with netns_fd: the node's name
  const int* keep;
  size_t keep_count;
  pid_t parent;
};

[[noreturn]] void ExecChild(const ChildPlan& plan, int stdin_fd, int stdout_fd, int stderr_fd) {
  char* const* argv = plan.argv;
  setpgid(0, 0);
#ifdef __linux__
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != plan.parent) _exit(127);  // the supervisor died before prctl took effect
  if (plan.netns_fd >= 0) {
    if (setns(plan.netns_fd, CLONE_NEWNET) != 0)
      FailChild("entering its node's network: ", argv[0]);
    if (unshare(CLONE_NEWUTS) != 0 || sethostname(plan.hostname, strlen(plan.hostname)) != 0)
      FailChild("naming its node: ", argv[0]);
  }
#endif
  dup2(stdin_fd, STDIN_FILENO);
  dup2(stdout_fd, STDOUT_FILENO);
  dup2(stderr_fd, STDERR_FILENO);
  for (size_t i = 0; i < plan.keep_count; ++i) fcntl(plan.keep[i], F_SETFD, 0);  // survives exec
  // The command starts with the default dispositions and an empty mask, not the supervisor's
  // (an ignored SIGPIPE would survive exec).
  for (int sig : kHandledSignals) signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execvpe(argv[0], argv, plan.envp);
  FailChild("", argv[0]);
}

}  // namespace

StatusOr<pid_t> SpawnChild(const ChildSpec& spec, int stdout_fd, int stderr_fd) {
  if (spec.argv.empty()) return InvalidArgument(spec.name, ": no command");
  // Everything the child needs is built before fork: it may not allocate after.
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) return IOError("cannot open /dev/null: ", strerror(errno));
  int netns_fd = -1;
  if (!spec.netns.empty()) {
    netns_fd = open(spec.netns.c_str(), O_RDONLY | O_CLOEXEC);
    if (netns_fd < 0) {
      const int e = errno;
      close(devnull);
      return NotFound("cannot start ", spec.name, ": its network namespace '", spec.netns,
                      "': ", strerror(e));
    }
  }
  const ChildPlan plan{argv.data(),
                       envp.data(),
                       netns_fd,
                       spec.hostname.c_str(),
                       spec.inherit_fds.data(),
                       spec.inherit_fds.size(),
                       getpid()};
  const pid_t pid = fork();
  if (pid == 0) ExecChild(plan, devnull, stdout_fd, stderr_fd);
  const int fork_errno = errno;
  close(devnull);
  if (netns_fd >= 0) close(netns_fd);
  if (pid < 0)
    return ResourceExhausted("cannot start ", spec.name, ": fork: ", strerror(fork_errno));
  // Also here, so the group exists before anyone signals it, whichever of the two runs first
  // (the child's own call may already have happened, or the child may have exec'd: both fine).
  setpgid(pid, pid);
  return pid;
}

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

LinePump::LinePump(int fd, int target, std::string prefix)
    : fd_(fd), target_(target), prefix_(std::move(prefix)) {
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

LinePump::~LinePump() { Close(); }

void LinePump::ReadAvailable() {
  char buf[16384];
  for (int reads = 0; fd_ >= 0 && reads < 16; ++reads) {
    ssize_t n = read(fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {  // the end of the pipe (or an error that ends it just as well)
      Close();
      return;
    }
    pending_.append(buf, static_cast<size_t>(n));
    Emit(false);
  }
}

void LinePump::Close() {
  if (fd_ < 0) return;
  close(fd_);
  fd_ = -1;
  Emit(true);
}

void LinePump::Emit(bool at_end) {
  std::string out;
  size_t start = 0;
  while (start < pending_.size()) {
    size_t nl = pending_.find('\n', start);
    size_t end;  // one past the line's last byte, its newline included when it has one
    if (nl != std::string::npos && nl - start < kMaxLine) {
      end = nl + 1;
    } else if (pending_.size() - start >= kMaxLine) {
      end = start + kMaxLine;
    } else if (at_end) {
      end = pending_.size();
    } else {
      break;
    }
    out += prefix_;
    out.append(pending_, start, end - start);
    if (!prefix_.empty() && out.back() != '\n') out += '\n';
    start = end;
  }
  pending_.erase(0, start);
  if (!out.empty()) WriteAll(target_, out);
}

struct SignalPipe::Saved {
  struct sigaction actions[sizeof(kHandledSignals) / sizeof(kHandledSignals[0])];
};

StatusOr<std::unique_ptr<SignalPipe>> SignalPipe::Create() {
  if (g_signal_write_fd != -1) return FailedPrecondition("another launch runs in this process");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    return ResourceExhausted("cannot create a pipe: ", strerror(errno));
  std::unique_ptr<SignalPipe> p(new SignalPipe());
  p->read_fd_ = fds[0];
  p->write_fd_ = fds[1];
  p->saved_ = std::make_unique<Saved>();
  g_signal_write_fd = fds[1];
  struct sigaction action = {};
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (size_t i = 0; i < std::size(kHandledSignals); ++i) {
    action.sa_handler = kHandledSignals[i] == SIGPIPE ? SIG_IGN : WriteSignalByte;
    sigaction(kHandledSignals[i], &action, &p->saved_->actions[i]);
  }
  return p;
}

SignalPipe::~SignalPipe() {
  for (size_t i = 0; i < std::size(kHandledSignals); ++i)
    sigaction(kHandledSignals[i], &saved_->actions[i], nullptr);
  g_signal_write_fd = -1;
  close(read_fd_);
  close(write_fd_);
}

std::vector<int> SignalPipe::Drain() {
  std::vector<int> received;
  unsigned char buf[64];
  ssize_t n;
  while ((n = read(read_fd_, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
    for (ssize_t i = 0; i < n; ++i)
      if (buf[i] == SIGINT || buf[i] == SIGTERM) received.push_back(buf[i]);
  }
  return received;
}

}  // namespace loom::runtime
