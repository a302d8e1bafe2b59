#include "base/interrupt.h"

#include <atomic>
#include <chrono>

namespace loom {
namespace {

constexpr const char* kPrefix = "interrupted (SIGINT) while ";
std::atomic<InterruptCheck> g_check{nullptr};

}  // namespace

void SetInterruptCheck(InterruptCheck check) { g_check.store(check); }

bool InterruptRequested() {
  InterruptCheck check = g_check.load();
  if (check == nullptr) return false;
  thread_local std::chrono::steady_clock::time_point last;
  const auto now = std::chrono::steady_clock::now();
  if (now - last < std::chrono::milliseconds(50)) return false;
  last = now;
  return check();
}

Status Interrupted(const std::string& what) { return Aborted(kPrefix, what); }

bool IsInterrupted(const Status& st) {
  return st.code() == StatusCode::kAborted && st.message().find(kPrefix) != std::string::npos;
}

}  // namespace loom
