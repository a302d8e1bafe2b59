#include "framework/cpu_threads.h"

#include "base/cpu_affinity.h"

#include <dlfcn.h>

namespace loom {
namespace {

// OpenBLAS's controls, looked up at run time so that any CBLAS works (the setting is then a
// no-op).
using GetFn = int (*)();
using SetFn = void (*)(int);

GetFn GetThreadsFn() {
  static GetFn fn = reinterpret_cast<GetFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return fn;
}

SetFn SetThreadsFn() {
  static SetFn fn = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  return fn;
}

thread_local int thread_budget = 0;

}  // namespace

int ThreadBudget() { return thread_budget; }

ScopedThreadBudget::ScopedThreadBudget(int n) : saved_(thread_budget) { thread_budget = n; }

ScopedThreadBudget::~ScopedThreadBudget() { thread_budget = saved_; }

int BlasThreads() {
  GetFn fn = GetThreadsFn();
  return fn ? fn() : 1;
}

void SetBlasThreads(int n) {
  if (SetFn fn = SetThreadsFn()) fn(n < 1 ? 1 : n);
}

int CpuCores() { return static_cast<int>(AllowedCpus().size()); }

bool ReleaseBlasThreads() {
  // OpenBLAS's own fork handler (pthread_atfork) calls it: the pool is rebuilt on demand.
  using ShutdownFn = int (*)();
  static ShutdownFn fn = reinterpret_cast<ShutdownFn>(dlsym(RTLD_DEFAULT, "blas_thread_shutdown_"));
  if (fn == nullptr) return false;
  fn();
  return true;
}

}  // namespace loom
