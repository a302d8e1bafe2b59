#include "runtime/train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/copy.h"
#include "framework/file_util.h"

namespace loom::runtime {
namespace {

using Clock = std::chrono::steady_clock;

std::string Summarize(const Tensor& t) {
  if (t.numel() == 1) {
    double v = t.dtype() == proto::FP64    ? t.data<double>()[0]
               : t.dtype() == proto::FP32  ? t.data<float>()[0]
               : t.dtype() == proto::INT64 ? static_cast<double>(t.data<int64_t>()[0])
               : t.dtype() == proto::INT32 ? static_cast<double>(t.data<int32_t>()[0])
                                           : NAN;
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.6g", v);
    return buf;
  }
  return TensorSummary(t, 4);
}

// Progress lines every `every` steps (and the first and last), then a summary.
class Progress {
 public:
  explicit Progress(const TrainOptions& o) : o_(o) {}
  void Step(int64_t it, const std::vector<Tensor>& out, double value) {
    if (!out.empty()) {
      last_ = value;
      if (std::isnan(first_)) first_ = last_;
    }
    const int64_t every = o_.print_every, start = o_.first_step + 1;
    if (it % every != 0 && it != o_.iters && it != start) return;
    auto now = Clock::now();
    double secs = std::chrono::duration<double>(now - window_).count();
    int64_t span = it == start ? 1 : (it % every == 0 ? every : it % every);
    std::string line = StrCat("iter ", it, "/", o_.iters);
    for (size_t k = 0; k < out.size(); ++k)
      line += StrCat("  ", o_.fetches[k], " ",
                     k == 0 && out[0].numel() == 1 ? StrCat(value) : Summarize(out[k]));
    char rate[32];
    std::snprintf(rate, sizeof(rate), "  %.1f it/s", secs > 0 ? span / secs : 0.0);
    std::fprintf(o_.out, "%s%s\n", line.c_str(), rate);
    std::fflush(o_.out);
    window_ = now;
  }
  void Done() {
    double total = std::chrono::duration<double>(Clock::now() - t0_).count();
    std::fprintf(o_.out, "done: %lld iterations in %.3f s", static_cast<long long>(o_.iters),
                 total);
    if (!o_.fetches.empty() && std::isfinite(first_) && std::isfinite(last_)) {
      std::fprintf(o_.out, "; %s %.6g -> %.6g", o_.fetches[0].c_str(), first_, last_);
      if (last_ > 0) std::fprintf(o_.out, " (%.1fx lower)", first_ / last_);
    }
    std::fprintf(o_.out, "\n");
  }

 private:
  const TrainOptions& o_;
  double first_ = NAN, last_ = NAN;
  Clock::time_point t0_ = Clock::now();
  Clock::time_point window_ = t0_;
};

}  // namespace

Tensor Minibatch(const Tensor& data, int64_t offset, int64_t batch) {
  const int64_t rows = data.dims()[0];
  if (offset + batch <= rows) return data.Slice(offset, offset + batch);
  DDim dims = data.dims();
  dims[0] = batch;
  Tensor out(data.dtype(), dims);
  char* dst = static_cast<char*>(out.mutable_data(Place::CPU(), data.dtype()));
  const char* src = static_cast<const char*>(data.raw_data());
  const size_t row_bytes = data.nbytes() / static_cast<size_t>(rows);
  const size_t tail = static_cast<size_t>(rows - offset) * row_bytes;
  CopyBytes(dst, src + static_cast<size_t>(offset) * row_bytes, tail);
  CopyBytes(dst + tail, src, static_cast<size_t>(batch) * row_bytes - tail);
  return out;
}

StatusOr<std::vector<std::pair<int64_t, std::string>>> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  if (!IsDirectory(dir)) return out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0) continue;
    char* end = nullptr;
    const long long step = std::strtoll(name.c_str() + 5, &end, 10);
    if (*end || step <= 0 || !FileExists(JoinPath(e.path().string(), "CHECKPOINT"))) continue;
    out.push_back({step, e.path().string()});
  }
  if (ec) return IOError("cannot list checkpoint directory '", dir, "': ", ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Rank 0's persistables to dir/step-<it>, then the oldest complete checkpoints beyond keep go.
Status SaveScheduledCheckpoint(Runner& runner, const TrainOptions& o, int64_t it) {
  const std::string path = JoinPath(o.checkpoint_dir, StrCat("step-", it));
  LOOM_ASSIGN_OR_RETURN(bool wrote, runner.SaveParams(path));
  if (!wrote) return Status::OK();
  std::fprintf(o.out, "checkpoint: step %lld saved to %s\n", static_cast<long long>(it),
               path.c_str());
  LOOM_ASSIGN_OR_RETURN(auto all, ListCheckpoints(o.checkpoint_dir));
  for (size_t i = 0; i + static_cast<size_t>(o.keep_checkpoints) < all.size(); ++i)
    LOOM_RETURN_IF_ERROR(RemoveTree(all[i].second));
  return Status::OK();
}

}  // namespace

Status Train(Runner& runner, const std::vector<FeedData>& feeds, const TrainOptions& o) {
  if (o.iters < 0) return InvalidArgument("iterations must be >= 0, got ", o.iters);
  if (o.checkpoint_every < 0 || (o.checkpoint_every > 0 && o.checkpoint_dir.empty()))
    return InvalidArgument("checkpoint_every ", o.checkpoint_every,
                           " needs a checkpoint directory (and must be >= 0)");
  if (o.keep_checkpoints < 1)
    return InvalidArgument("keep_checkpoints must be >= 1, got ", o.keep_checkpoints);
  if (o.first_step < 0 || o.first_step > o.iters)
    return InvalidArgument("resumed at step ", o.first_step, ", beyond the ", o.iters,
                           " iterations");
  if (o.print_every <= 0) return InvalidArgument("print_every must be > 0, got ", o.print_every);
  if (o.timeline_iters < 1)
    return InvalidArgument("timeline_iters must be >= 1, got ", o.timeline_iters);
  const int64_t rows = feeds.empty() ? 0 : feeds[0].data.dims()[0];
  for (const auto& f : feeds)
    if (f.data.dims().size() == 0 || f.data.dims()[0] != rows)
      return InvalidArgument("feed '", f.name, "' has dims ", f.data.dims().ToString(), ", '",
                             feeds[0].name, "' has ", rows, " rows");
  if (!feeds.empty() && (o.batch <= 0 || o.batch > rows))
    return InvalidArgument("batch size ", o.batch, " must be between 1 and the ", rows,
                           " rows of the feeds");
  // Under MPI every process reads its own flags: they must agree, or the ranks would slice
  // different global batches and stop at different steps.
  LOOM_RETURN_IF_ERROR(
      runner.CheckSameOnEveryRank({{"batch size", o.batch},
                                   {"iterations", o.iters},
                                   {"feed rows", rows},
                                   {"fetches", static_cast<int64_t>(o.fetches.size())}}));
  const bool prints = runner.first_rank() == 0;
  Timeline timeline;
  if (!o.timeline.empty() && prints) runner.set_timeline(&timeline);
  Progress progress(o);
  // A resumed run reads on from where step first_step's minibatch ended.
  int64_t offset =
      rows > 0 ? static_cast<int64_t>((static_cast<__int128>(o.first_step) * o.batch) % rows) : 0;
  for (int64_t it = o.first_step + 1; it <= o.iters; ++it) {
    timeline.set_enabled(it > o.iters - o.timeline_iters);
    FeedMap feed;
    for (const auto& f : feeds) feed[f.name] = Minibatch(f.data, offset, o.batch);
    if (rows > 0) offset = (offset + o.batch) % rows;
    Status st = runner.Step(feed, o.fetches);
    if (!st.ok()) return st.WithContext(StrCat("iteration ", it));
    LOOM_ASSIGN_OR_RETURN(double value, runner.GlobalFirstValue());
    if (prints) progress.Step(it, runner.fetched(0), value);
    if (o.checkpoint_every > 0 && it % o.checkpoint_every == 0)
      LOOM_RETURN_IF_ERROR(SaveScheduledCheckpoint(runner, o, it));
  }
  runner.set_timeline(nullptr);
  if (prints) {
    progress.Done();
    if (!o.timeline.empty()) {
      LOOM_RETURN_IF_ERROR(timeline.Write(o.timeline));
      std::fprintf(o.out, "wrote timeline (%zu events) to %s\n", timeline.size(),
                   o.timeline.c_str());
    }
  }
  if (!o.save_params.empty()) {
    LOOM_ASSIGN_OR_RETURN(bool wrote, runner.SaveParams(o.save_params));
    if (wrote)
      std::fprintf(o.out, "saved parameters%s to %s\n", runner.nranks() > 1 ? " (rank 0)" : "",
                   o.save_params.c_str());
  }
  // Every rank of a multi-process job leaves together: rank 0 may still be saving.
  return runner.Finish();
}

}  // namespace loom::runtime
