// Pinning threads to CPUs (Linux; elsewhere the calls report Unimplemented).
//
// Why: Loom's in-process ranks poll for each other (pause, then sched_yield), and a polling rank
// thread that shares its core with another runnable thread takes turns with it through
// sched_yield for as long as both stay there (Linux does not move a thread that ran within the
// last half millisecond: it counts as cache-hot, and a polling thread always has). Seen on a
// 2-core AMD EPYC VM (docs/PERF.md, "Rank threads on cores"): a rank thread and the BLAS
// library's pool thread, which spins after it starts, alternated on one core 2,000 times in a
// 2-rank allgather launch while the other core ran the other rank. Pinning each rank thread
// (and its communicator's worker) to a core of its own keeps two ranks from landing together
// (where the ranks are no more than the cores).
#pragma once

#include <thread>
#include <vector>

#include "base/status.h"

namespace loom {

// The CPUs this process may run on (its affinity mask), in increasing order; never empty (one
// entry per hardware thread where the mask cannot be read).
std::vector<int> AllowedCpus();

// The CPU that the `index`-th of a group of threads should run on: AllowedCpus() round-robin.
int CpuForIndex(int index);

// Restricts `thread` (a std::thread's native handle) to `cpu`.
Status PinThreadToCpu(std::thread::native_handle_type thread, int cpu);

// Restricts the calling thread to `cpu`.
Status PinCurrentThreadToCpu(int cpu);

// The CPU the calling thread runs on at this moment (-1 where the system does not say).
int CurrentCpu();

// Whether a group of threads found on CPUs as counted in `threads_on` (index: CPU number, value:
// how many of the threads ran there) crowds a CPU: one holds more of them than an even spread
// over `available` CPUs puts on any (ceil(threads / available)). Two polling rank threads
// crowded onto one core while another is free take turns there through sched_yield, each call
// several times slower, for as long as the OS leaves them (docs/PERF.md, "Rank threads on
// cores"). `available` below 1 counts as 1.
bool CrowdedCpus(const std::vector<int>& threads_on, int available);

}  // namespace loom
