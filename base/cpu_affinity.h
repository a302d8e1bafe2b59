// Pinning threads to CPUs (Linux; elsewhere the calls report Unimplemented).
//
// Why: threads that poll for each other (Loom's in-process ranks spin, then yield) can be left
// on one core by the scheduler while another core idles. Linux places new threads where the
// creating thread's core looked busy and then does not move a thread that ran within the last
// half millisecond (it counts as cache-hot), and a polling thread always has. Two in-process
// ranks then take turns on one core through sched_yield: a 2-rank 64 KiB allgather took 10 us
// that way against 2.6 us on two cores (2-core AMD EPYC VM; `taskset -c 0` reproduces it), and
// which of the two a launch got decided its every row. Open MPI binds small jobs to cores for
// the same reason.
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

}  // namespace loom
