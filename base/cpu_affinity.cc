#include "base/cpu_affinity.h"

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace loom {

std::vector<int> AllowedCpus() {
  std::vector<int> cpus;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
#endif
  if (cpus.empty()) {
    const unsigned n = std::thread::hardware_concurrency();
    for (unsigned c = 0; c < (n ? n : 1); ++c) cpus.push_back(static_cast<int>(c));
  }
  return cpus;
}

int CpuForIndex(int index) {
  const std::vector<int> cpus = AllowedCpus();
  const int n = static_cast<int>(cpus.size());
  return cpus[((index % n) + n) % n];
}

Status PinThreadToCpu(std::thread::native_handle_type thread, int cpu) {
#if defined(__linux__)
  if (cpu < 0 || cpu >= CPU_SETSIZE) {
    return InvalidArgument("cannot pin a thread to CPU ", cpu, ": CPUs are numbered 0..",
                           CPU_SETSIZE - 1);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  const int err = pthread_setaffinity_np(thread, sizeof(set), &set);
  if (err == EINVAL) {
    return InvalidArgument("cannot pin a thread to CPU ", cpu,
                           ": not one this process may run on (its affinity mask)");
  }
  if (err != 0) {
    return Internal("pinning a thread to CPU ", cpu, " failed: ", std::strerror(err));
  }
  return Status::OK();
#else
  (void)thread;
  return Unimplemented("pinning threads to CPUs (CPU ", cpu, ") needs Linux");
#endif
}

Status PinCurrentThreadToCpu(int cpu) {
#if defined(__linux__)
  return PinThreadToCpu(pthread_self(), cpu);
#else
  return Unimplemented("pinning threads to CPUs (CPU ", cpu, ") needs Linux");
#endif
}

int CurrentCpu() {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

bool CrowdedCpus(const std::vector<int>& threads_on, int available) {
  long long total = 0;
  int busiest = 0;
  for (int n : threads_on) {
    if (n <= 0) continue;
    total += n;
    busiest = std::max(busiest, n);
  }
  const long long spread = std::max(available, 1);
  return busiest > (total + spread - 1) / spread;
}

}  // namespace loom
