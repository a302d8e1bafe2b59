// CPU thread policy shared by kernels and the executor: how many threads the BLAS library may
// use. When several ranks run at once on one machine (in-process data parallelism), each rank's
// GEMMs must not each spawn a thread per core, or N ranks x cores threads fight for the cores.
// Thread-safety: the BLAS thread count is process-wide; set it from one thread at a time.
#pragma once

namespace loom {

// Threads the BLAS library uses now (1 when it cannot tell, e.g. not OpenBLAS).
int BlasThreads();
// Sets the BLAS thread count when the library supports it (OpenBLAS); otherwise a no-op.
void SetBlasThreads(int n);
// Number of cores this process may use.
int CpuCores();
// Stops the BLAS library's pool of worker threads where the library can (OpenBLAS:
// blas_thread_shutdown_); its next multithreaded call starts them again. OpenBLAS starts the
// pool when it loads, and a pool thread polls (sched_yield) for about 0.1 s before it sleeps:
// long enough for the OS to put two rank threads started meanwhile on one core and leave them
// there (docs/PERF.md, "Rank threads on cores"). For processes whose threads do no BLAS work
// (loom bench collective); false where there was nothing to stop.
bool ReleaseBlasThreads();

// Threads a kernel running on the calling thread may use for its own loops; 0 when no budget
// was set (then the kernel's default applies). Per thread: each rank of an in-process
// data-parallel run gets its share of the cores.
int ThreadBudget();

class ScopedThreadBudget {
 public:
  explicit ScopedThreadBudget(int n);
  ~ScopedThreadBudget();
  ScopedThreadBudget(const ScopedThreadBudget&) = delete;
  ScopedThreadBudget& operator=(const ScopedThreadBudget&) = delete;

 private:
  int saved_;
};

// Sets the BLAS thread count for a scope and restores the previous count at its end.
class ScopedBlasThreads {
 public:
  explicit ScopedBlasThreads(int n) : saved_(BlasThreads()) {
    if (n != saved_) SetBlasThreads(n);
  }
  ~ScopedBlasThreads() {
    if (BlasThreads() != saved_) SetBlasThreads(saved_);
  }
  ScopedBlasThreads(const ScopedBlasThreads&) = delete;
  ScopedBlasThreads& operator=(const ScopedBlasThreads&) = delete;

 private:
  int saved_;
};

}  // namespace loom
