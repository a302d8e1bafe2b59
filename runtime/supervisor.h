// The supervisor under `loom launch`: runs a set of child processes to their end. Each child runs
// in a process group of its own, with stdin from /dev/null and its stdout and stderr read through
// pipes and copied, whole lines at a time, to the supervisor's stdout and stderr (behind a
// "[worker 3] " prefix unless turned off). The first child that fails (a non-zero exit or a
// signal) stops the job: SIGTERM to every group, SIGKILL after the grace period; SIGINT and
// SIGTERM sent to the supervisor are forwarded the same way. Every wait has a deadline: after
// SIGKILL a process has a few seconds to go before the supervisor gives up on it.
//
// Thread safety: Supervise installs process-wide signal handlers while it runs; one call at a time
// per process (see launcher.h).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/status.h"

namespace loom::runtime {

struct ChildSpec {
  std::string name;     // "worker 3": the output prefix and the name in messages
  bool server = false;  // servers may run on until every worker exited 0, then server_wait more
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  std::vector<std::string> env;   // the whole environment, "NAME=value" each
  bool prefixed = true;           // false: its lines are printed as they are (it prefixes its own)
  // Descriptors the command keeps open (the rest of the supervisor's are close-on-exec); the
  // caller owns them and closes its copies when it likes.
  std::vector<int> inherit_fds;
  // Non-empty: the command runs in this network namespace (a path such as
  // /var/run/netns/loom-7-n1) and in a UTS namespace of its own named `hostname` (an emulated
  // node; see emulate.h).
  std::string netns;
  std::string hostname;
};

struct SuperviseOptions {
  bool prefix = true;
  std::chrono::milliseconds grace{5000};
  std::chrono::milliseconds server_wait{60000};
  std::chrono::milliseconds timeout{0};  // the whole job; 0: none
};

// How a process ended: its exit code, or the signal that killed it.
struct ProcessExit {
  int code = 0;
  int signal = 0;
  bool ok() const { return code == 0 && signal == 0; }
};

// "exited with code 3" or "killed by signal 9 (SIGKILL)".
std::string Describe(const ProcessExit& exit);

struct JobOutcome {
  enum class Kind {
    kAllExited,        // every child ended on its own (each exits[i] says how)
    kFailed,           // child `culprit` failed first; the others were stopped
    kServersRemained,  // every worker exited 0, the servers in `remained` did not within time
    kTimedOut,         // options.timeout passed; the job was stopped
    kInterrupted,      // the supervisor received `signal` and forwarded it
  };
  Kind kind = Kind::kAllExited;
  int culprit = -1;
  int signal = 0;
  std::vector<std::string> remained;
  std::vector<std::string> unresponsive;  // children that outlived SIGKILL (left unreaped)
  std::vector<ProcessExit> exits;         // per child, in the order given
};

// Starts every child (in order) and runs them to the end. A child that cannot be executed exits
// 127 after saying why on its stderr. Errors before the job runs (no pipe, no fork) stop the
// children already started and come back as a Status.
StatusOr<JobOutcome> Supervise(const std::vector<ChildSpec>& children,
                               const SuperviseOptions& options);

// The name of a signal ("SIGKILL"), or "signal N" for one without a common name.
std::string SignalName(int signal);

}  // namespace loom::runtime
