#include "framework/parallel.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "framework/cpu_threads.h"

namespace loom {

int DefaultThreads();

int CpuThreads() {
  // A data-parallel rank sharing the cores with other ranks uses only its share of them.
  if (int budget = ThreadBudget(); budget > 0) return std::min(budget, DefaultThreads());
  return DefaultThreads();
}

int DefaultThreads() {
  static const int threads = [] {
    if (const char* env = std::getenv("LOOM_NUM_THREADS")) {
      int v = std::atoi(env);
      if (v >= 1) return v;
    }
    unsigned hw = std::thread::hardware_concurrency();
    return static_cast<int>(std::clamp(hw, 1u, 8u));
  }();
  return threads;
}

namespace internal {
namespace {

// One ParallelFor call: its ranges are claimed one at a time by whoever comes first.
struct Job {
  const std::function<void(int64_t, int64_t)>* body;
  int64_t n, parts;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::condition_variable finished;

  // Runs unclaimed ranges until none is left; returns whether it ran the last one to finish.
  void Work() {
    bool in = in_parallel_region;
    in_parallel_region = true;
    for (int64_t t; (t = next.fetch_add(1)) < parts;) {
      (*body)(n * t / parts, n * (t + 1) / parts);
      if (done.fetch_add(1) + 1 == parts) {
        std::lock_guard<std::mutex> lock(mu);
        finished.notify_all();
      }
    }
    in_parallel_region = in;
  }
};

class Pool {
 public:
  static Pool& Get() {
    // Leaked: worker threads may still be parked when static destructors run.
    static Pool* pool = new Pool(std::max(1, DefaultThreads() - 1));
    return *pool;
  }

  // Offers the job to up to `helpers` workers.
  void Post(const std::shared_ptr<Job>& job, int64_t helpers) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int64_t i = 0; i < helpers; ++i) queue_.push_back(job);
    }
    if (helpers == 1) {
      wake_.notify_one();
    } else {
      wake_.notify_all();
    }
  }

 private:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i) std::thread([this] { Loop(); }).detach();
  }

  void Loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [this] { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job->Work();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
};

}  // namespace

void RunOnPool(int64_t n, int64_t threads, const std::function<void(int64_t, int64_t)>& body) {
  auto job = std::make_shared<Job>();
  job->body = &body;
  job->n = n;
  job->parts = threads;
  Pool::Get().Post(job, threads - 1);
  job->Work();  // the caller takes ranges too, and any nobody has started
  if (job->done.load() < job->parts) {
    std::unique_lock<std::mutex> lock(job->mu);
    job->finished.wait(lock, [&] { return job->done.load() == job->parts; });
  }
}

}  // namespace internal
}  // namespace loom
