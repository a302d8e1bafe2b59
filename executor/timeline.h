// Timeline: records when ops ran, per rank, on the compute thread and on the communication
// thread (a collective's span is when its communicator actually ran it), and writes them as a
// chrome://tracing (Trace Event Format) JSON file: one process per rank, threads "compute" and
// "communication". Thread-safe: ranks record concurrently.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace loom {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  enum Lane { kCompute = 0, kCommunication = 1 };

  // One recorded op: its rank (pid), lane (tid), op type, the variables it wrote, and its span
  // in microseconds since the timeline was made.
  struct Event {
    int rank;
    Lane lane;
    std::string name, detail;
    double begin_us, dur_us;
  };

  Timeline() : origin_(Clock::now()) {}
  // Events are recorded only while enabled (e.g. the last iterations of a run).
  void set_enabled(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  void Add(int rank, Lane lane, const std::string& name, const std::string& detail,
           Clock::time_point begin, Clock::time_point end);
  size_t size() const;
  // A copy of the events recorded so far, in the order they were added.
  std::vector<Event> events() const;
  std::string ToJson() const;
  // Written atomically.
  Status Write(const std::string& path) const;

 private:
  Clock::time_point origin_;
  bool enabled_ = true;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  int max_rank_ = -1;
};

}  // namespace loom
