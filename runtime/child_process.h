// The pieces the supervisor (supervisor.h) is built from: starting one child in a process group
// of its own, copying a child's pipe to an output line by line, and turning the signals the
// supervisor receives into bytes on a pipe that poll() watches.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/supervisor.h"

namespace loom::runtime {

// Forks and executes spec with stdin from /dev/null and stdout, stderr the given (write) ends of
// pipes. The child leads a new process group (its pid) and, on Linux, is killed when the
// supervisor dies, so that not even a SIGKILLed supervisor leaves it behind.
StatusOr<pid_t> SpawnChild(const ChildSpec& spec, int stdout_fd, int stderr_fd);

// Copies what a child writes to one pipe to `target`, a whole line per write (so lines of
// different children never mix), each behind `prefix`. A line longer than kMaxLine is cut into
// lines of kMaxLine bytes. At the end of the pipe a last line without a newline is written too
// (given a newline when prefixed, since the next line belongs to someone else).
class LinePump {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  // Takes ownership of fd (made non-blocking).
  LinePump(int fd, int target, std::string prefix);
  ~LinePump();
  LinePump(const LinePump&) = delete;
  LinePump& operator=(const LinePump&) = delete;

  int fd() const { return fd_; }  // -1 once the pipe ended
  // Reads what the pipe holds now (a bounded number of reads, so one chatty child cannot starve
  // the others); at its end writes the last partial line and closes it.
  void ReadAvailable();
  // Closes the pipe now (a process outside the job still holds it open), writing what was read.
  void Close();

 private:
  void Emit(bool at_end);

  int fd_;
  int target_;
  std::string prefix_;
  std::string pending_;
};

// Writes all of data to fd, retrying after EINTR; gives up quietly on other errors (a closed
// stdout must not stop the job).
void WriteAll(int fd, const std::string& data);

// While alive, SIGINT, SIGTERM and SIGCHLD write their number to a pipe (read_fd()) and SIGPIPE is
// ignored; the previous dispositions come back on destruction. Only one may exist at a time.
class SignalPipe {
 public:
  static StatusOr<std::unique_ptr<SignalPipe>> Create();
  ~SignalPipe();

  int read_fd() const { return read_fd_; }
  // The SIGINT and SIGTERM received since the last call, in order (SIGCHLD only wakes poll).
  std::vector<int> Drain();

 private:
  SignalPipe() = default;

  int read_fd_ = -1, write_fd_ = -1;
  struct Saved;
  std::unique_ptr<Saved> saved_;
};

}  // namespace loom::runtime
