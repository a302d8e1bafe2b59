// Deadlines: every wait in Loom ends by one. A Deadline is a point on the steady clock.
#pragma once

#include <chrono>

namespace loom {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// The deadline `timeout` from now (a non-positive timeout: now, already passed).
inline Deadline DeadlineAfter(std::chrono::milliseconds timeout) {
  return Clock::now() + (timeout.count() > 0 ? timeout : std::chrono::milliseconds(0));
}

// Time left until `deadline` (zero once it passed).
inline std::chrono::milliseconds TimeLeft(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? left : std::chrono::milliseconds(0);
}

}  // namespace loom
