// The shared-memory transport (collective/transport/shm.h) without MPI: the test forks one
// process per rank, each maps the segment the parent created, registers, and runs collectives
// through a Communicator over its endpoint. Every collective, in and out of place, from copies
// and in blocks, checked exactly against an independent reference; a mismatch named on every
// rank; a rank whose process exits named by the others within the deadline; a peer that
// cannot be read refused at setup. Each child reports through a pipe; the parent kills every
// child it started if one is late.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collective/communicator.h"
#include "collective/transport/shm.h"
#include "tests/collective/test_util.h"

namespace loom::collective {
namespace {

using testing::Compare;
using testing::Expected;
using testing::Input;

// The wrapped transport: point-to-point calls are not part of these tests (they stay on MPI).
class NoMessages final : public Transport {
 public:
  NoMessages(int rank, int n) : rank_(rank), n_(n) {}
  int rank() const override { return rank_; }
  int nranks() const override { return n_; }
  const char* name() const override { return "none"; }
  std::unique_ptr<Request> Send(int, uint64_t, const void*, size_t) override { return Failed(); }
  std::unique_ptr<Request> Recv(int, uint64_t, void*, size_t) override { return Failed(); }
  bool one_rank_per_process() const override { return true; }

 private:
  struct FailedRequest final : Request {
    Status Wait(Deadline) override { return Unimplemented("no point-to-point messages here"); }
    void Cancel() override {}
  };
  static std::unique_ptr<Request> Failed() { return std::make_unique<FailedRequest>(); }
  int rank_, n_;
};

// Waits until every rank registered (CheckPeers succeeds) or 20 s passed.
Status AwaitPeers(const ShmSegment& segment, int rank) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    Status s = segment.CheckPeers(rank);
    if (s.ok() || std::chrono::steady_clock::now() > until) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Forks n processes; rank r runs body(r, communicator) and reports "" or its failure. Returns
// each rank's report (or how its process ended).
std::vector<std::string> RunProcesses(
    int n, int timeout_ms, const std::function<std::string(int, Communicator&)>& body,
    const std::function<bool(int)>& joins = [](int) { return true; }) {
  auto segment = CreateShmSegment(n);
  if (!segment.ok()) return std::vector<std::string>(n, segment.status().ToString());
  std::vector<pid_t> pids(n);
  std::vector<int> fds(n);
  for (int r = 0; r < n; ++r) {
    int p[2];
    if (pipe(p) != 0) return std::vector<std::string>(n, "pipe failed");
    const pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      std::string report;
      (*segment)->Register(r);
      if (joins(r)) {
        Status ready = AwaitPeers(**segment, r);
        if (!ready.ok()) {
          report = "setup: " + ready.ToString();
        } else {
          CommunicatorOptions options;
          options.timeout = std::chrono::milliseconds(timeout_ms);
          options.auto_native_min_bytes = 0;
          auto plan = CommPlan::Create(Topology::Uniform(n), 0.7);
          Communicator comm(WrapSharedMemory(std::make_unique<NoMessages>(r, n), *segment), *plan,
                            options);
          report = body(r, comm);
        }
      }
      if (!report.empty() && write(p[1], report.data(), report.size()) < 0) _exit(3);
      close(p[1]);
      _exit(report.empty() ? 0 : 1);
    }
    close(p[1]);
    pids[r] = pid;
    fds[r] = p[0];
  }
  std::vector<std::string> reports(n);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (int r = 0; r < n; ++r) {
    int status = 0;
    while (waitpid(pids[r], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > until) {
        for (pid_t pid : pids) kill(pid, SIGKILL);
        waitpid(pids[r], &status, 0);
        reports[r] = "killed after 120 s";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    char buf[4096];
    ssize_t got;
    while ((got = read(fds[r], buf, sizeof(buf))) > 0) reports[r].append(buf, got);
    close(fds[r]);
    if (reports[r].empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      reports[r] = "exited with status " + std::to_string(status);
  }
  return reports;
}

void ExpectAllPassed(const std::vector<std::string>& reports) {
  for (size_t r = 0; r < reports.size(); ++r) EXPECT_EQ(reports[r], "") << "rank " << r;
}

// Every collective through the communicator: allreduce of every operator from 1 element (from
// copies) to more than a block per rank (in blocks), in and out of place; reduce and broadcast
// from every root; allgather and reducescatter; float64 and float16.
std::string EveryCollective(int rank, Communicator& comm) {
  const int n = comm.nranks();
  int salt = 0;
  for (DataType dtype : {DataType::kFloat64, DataType::kFloat16}) {
    for (size_t count : {size_t{1}, size_t{100}, size_t{5000}, size_t{70001}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
        for (bool in_place : {false, true}) {
          ++salt;
          auto in = Input(dtype, op, rank, count, salt);
          std::vector<unsigned char> out(in.size(), 0xAB);
          void* dst = in_place ? in.data() : out.data();
          Status s = comm.AllReduce(in.data(), dst, count, dtype, op).Wait();
          if (!s.ok()) return "allreduce: " + s.ToString();
          std::string diff = Compare(dtype, Expected(dtype, op, n, count, salt), dst, count);
          if (!diff.empty()) return StrCat("allreduce of ", count, ": ", diff);
        }
      }
      for (int root = 0; root < n; ++root) {
        ++salt;
        auto in = Input(dtype, ReduceOp::kSum, rank, count, salt);
        std::vector<unsigned char> out(in.size(), 0);
        Status s = comm.Reduce(in.data(), out.data(), count, dtype, ReduceOp::kSum, root).Wait();
        if (!s.ok()) return "reduce: " + s.ToString();
        if (rank == root) {
          std::string diff =
              Compare(dtype, Expected(dtype, ReduceOp::kSum, n, count, salt), out.data(), count);
          if (!diff.empty()) return StrCat("reduce to ", root, ": ", diff);
        }
        auto bcast = Input(dtype, ReduceOp::kSum, root, count, salt);
        std::vector<unsigned char> got(bcast.size(), 0);
        s = comm.Broadcast(rank == root ? bcast.data() : got.data(), got.data(), count, dtype, root)
                .Wait();
        if (!s.ok()) return "broadcast: " + s.ToString();
        if (got != bcast) return StrCat("broadcast of ", count, " from ", root, " differs");
      }
      ++salt;
      auto part = Input(dtype, ReduceOp::kSum, rank, count, salt);
      std::vector<unsigned char> gathered(part.size() * n, 0);
      Status s = comm.AllGather(part.data(), gathered.data(), count, dtype).Wait();
      if (!s.ok()) return "allgather: " + s.ToString();
      for (int r = 0; r < n; ++r) {
        auto want = Input(dtype, ReduceOp::kSum, r, count, salt);
        if (!std::equal(want.begin(), want.end(), gathered.begin() + r * want.size()))
          return StrCat("allgather of ", count, ": rank ", r, "'s part differs");
      }
      auto whole = Input(dtype, ReduceOp::kSum, rank, count * n, salt);
      std::vector<unsigned char> mine(part.size(), 0);
      s = comm.ReduceScatter(whole.data(), mine.data(), count, dtype, ReduceOp::kSum).Wait();
      if (!s.ok()) return "reducescatter: " + s.ToString();
      std::string diff = Compare(
          dtype, Expected(dtype, ReduceOp::kSum, n, count, salt, rank * count), mine.data(), count);
      if (!diff.empty()) return StrCat("reducescatter of ", count, ": ", diff);
    }
  }
  return "";
}

TEST(SharedMemoryTransport, EveryCollectiveAcrossProcessesIsExact) {
  for (int n : {2, 3}) ExpectAllPassed(RunProcesses(n, 30000, EveryCollective));
}

// A mismatch (small: from copies; large: in blocks) is named on every rank and no buffer is
// written; the group then goes on.
TEST(SharedMemoryTransport, MismatchIsNamedOnEveryRankAndNothingIsWritten) {
  ExpectAllPassed(RunProcesses(3, 30000, [](int rank, Communicator& comm) -> std::string {
    for (size_t mine : {size_t{10}, size_t{100000}}) {
      std::vector<double> buf(200000, 1.0);
      const size_t count = rank == 1 ? mine + 2 : mine;
      Status s =
          comm.AllReduce(buf.data(), buf.data(), count, DataType::kFloat64, ReduceOp::kSum).Wait();
      if (s.code() != StatusCode::kInvalidArgument) return "mismatch: " + s.ToString();
      if (s.message().find(StrCat("rank 1 called AllReduce(count=", mine + 2)) == std::string::npos)
        return "mismatch not named: " + s.message();
      for (double v : buf)
        if (v != 1.0) return "a mismatched call wrote into the buffer";
    }
    double one = 1.0;
    Status s = comm.AllReduce(&one, &one, 1, DataType::kFloat64, ReduceOp::kSum).Wait();
    if (!s.ok() || one != 3.0) return "after the mismatch: " + s.ToString();
    return "";
  }));
}

// The last rank's process exits between two calls (and stays a zombie until the parent reaps
// it): the others end within the deadline with a Timeout that names it, its pid and that it
// exited.
TEST(SharedMemoryTransport, RankWhoseProcessExitedIsNamed) {
  const int n = 3;
  auto reports = RunProcesses(n, 1500, [n](int rank, Communicator& comm) -> std::string {
    std::vector<double> buf(1 << 16, 1.0);
    // Every rank is past its setup check once the first call completed.
    Status first =
        comm.AllReduce(buf.data(), buf.data(), 1, DataType::kFloat64, ReduceOp::kSum).Wait();
    if (!first.ok()) return "first call: " + first.ToString();
    if (rank == n - 1) _exit(0);  // gone before its second call
    Status s =
        comm.AllReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat64, ReduceOp::kSum)
            .Wait();
    if (s.code() != StatusCode::kTimeout) return "want a timeout: " + s.ToString();
    if (s.message().find(StrCat("rank ", n - 1, " (pid ")) == std::string::npos ||
        s.message().find("exited)") == std::string::npos)
      return "the missing rank is not named: " + s.message();
    return "";
  });
  ExpectAllPassed(reports);
}

// A peer whose process is gone cannot be read: the setup check names it.
TEST(SharedMemoryTransport, SetupRefusesAPeerItCannotRead) {
  auto segment = CreateShmSegment(2);
  ASSERT_TRUE(segment.ok()) << segment.status().ToString();
  (*segment)->Register(0);
  const pid_t child = fork();
  if (child == 0) {
    (*segment)->Register(1);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  Status s = (*segment)->CheckPeers(0);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(StrCat("rank 1 (pid ", child, ")")), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("exited"), std::string::npos) << s.message();
  // The segment's name is removed once every rank opened it; opening it later fails.
  const std::string name = (*segment)->name();
  (*segment)->Unlink();
  EXPECT_FALSE(OpenShmSegment(name, 2).ok());
}

}  // namespace
}  // namespace loom::collective
