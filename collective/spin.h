// Bounded spinning before a blocking wait. On an oversubscribed machine (more rank threads
// than cores) sleeping on a condition variable and being woken costs tens of microseconds,
// more than a small collective's whole exchange; polling a flag for a short, bounded time
// (pausing, then yielding the core to the peers that must make the flag true) answers most
// small waits without a sleep, and the wait falls back to blocking when the answer is late.
#pragma once

#include <chrono>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace loom::collective {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// How long a wait polls before it blocks (measured: 4 in-process ranks on 2 cores answer a
// 4-byte exchange within ~10-30 us).
constexpr std::chrono::microseconds kSpinBudget{50};

// Polls before the first yield. With a core per waiting thread a peer is running and answers
// soon; when threads outnumber cores the peer a wait needs is often queued behind the waiter on
// the same core, and every pause delays it (4 in-process ranks on 2 cores, 4-byte allreduce:
// 4.1-5.3 us with 32 pauses, 3.2-3.8 us with 4; 2 ranks on 2 cores: 0.5 us with 32, 1.7 with 0).
constexpr int kSpinPauses = 32;
constexpr int kOversubscribedSpinPauses = 4;

// How many of a group's `threads` busy threads run at once on this machine: all of them, or
// its cores.
inline int WorkersFor(int threads) {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores > 0 && static_cast<unsigned>(threads) > cores ? static_cast<int>(cores) : threads;
}

// The pauses for a group of `threads` busy threads on this machine.
inline int SpinPausesFor(int threads) {
  return WorkersFor(threads) < threads ? kOversubscribedSpinPauses : kSpinPauses;
}

// Polls ready() for at most `budget` (`pauses` pauses, then yields); true once it holds.
template <typename Ready>
bool SpinUntil(Ready&& ready, std::chrono::microseconds budget = kSpinBudget,
               int pauses = kSpinPauses) {
  const auto until = std::chrono::steady_clock::now() + budget;
  for (int i = 0;; ++i) {
    if (ready()) return true;
    if (i < pauses) {
      CpuRelax();
      continue;
    }
    if (i >= pauses && ((i - pauses) & 7) == 0 && std::chrono::steady_clock::now() > until)
      return false;
    std::this_thread::yield();
  }
}

}  // namespace loom::collective
