#include "executor/timeline.h"

#include <algorithm>
#include <cstdio>

#include "base/json_text.h"
#include "framework/file_util.h"

namespace loom {

void Timeline::Add(int rank, Lane lane, const std::string& name, const std::string& detail,
                   Clock::time_point begin, Clock::time_point end) {
  if (!enabled_) return;
  double b = std::chrono::duration<double, std::micro>(begin - origin_).count();
  double d = std::chrono::duration<double, std::micro>(end - begin).count();
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(Event{rank, lane, name, detail, b, std::max(d, 0.0)});
  max_rank_ = std::max(max_rank_, rank);
}

size_t Timeline::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

std::vector<Timeline::Event> Timeline::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

std::string Timeline::ToJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  char buf[160];
  for (int r = 0; r <= max_rank_; ++r) {
    std::snprintf(buf, sizeof(buf),
                  "{\"ph\": \"M\", \"pid\": %d, \"name\": \"process_name\", \"args\": "
                  "{\"name\": \"rank %d\"}},\n",
                  r, r);
    out += buf;
    for (int lane = 0; lane < 2; ++lane) {
      std::snprintf(buf, sizeof(buf),
                    "{\"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"name\": \"thread_name\", "
                    "\"args\": {\"name\": \"%s\"}},\n",
                    r, lane, lane == 0 ? "compute" : "communication");
      out += buf;
    }
  }
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    std::snprintf(buf, sizeof(buf),
                  "\"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, "
                  "\"dur\": %.3f",
                  e.rank, static_cast<int>(e.lane), e.begin_us, e.dur_us);
    out += "{\"name\": \"" + JsonEscape(e.name) + "\", \"cat\": \"" +
           (e.lane == kCompute ? "compute" : "communication") + "\", " + buf +
           ", \"args\": {\"vars\": \"" + JsonEscape(e.detail) + "\"}}";
    out += i + 1 < events_.size() ? ",\n" : "\n";
  }
  out += "]}\n";
  return out;
}

Status Timeline::Write(const std::string& path) const { return WriteFileAtomic(path, ToJson()); }

}  // namespace loom
