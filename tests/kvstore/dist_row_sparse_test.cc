// Row-sparse keys on dist_sync and dist_async: 2 servers and 2 workers, each a forked process of
// this test with the environment `loom launch` would give it. Every worker checks its pulls
// against a local store replaying both workers' pushes; the parent waits for all four with a
// deadline and kills whatever is left. (Its own binary: nothing here may fork a process that
// already runs threads.)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "kvstore/dist.h"
#include "kvstore/kvstore.h"

namespace loom::kvstore {
namespace {

constexpr int kWorkers = 2, kServers = 2, kSteps = 3;
constexpr int64_t kHeight = 30, kWidth = 2;

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

SelectedRows Grad(int rank, int step) {
  SelectedRows s;
  s.rows = {0, 1 + rank + 3 * step};  // row 0 is every worker's
  s.height = kHeight;
  s.value = Tensor(proto::FP64, DDim({2, kWidth}));
  double* p = s.value.mutable_data<double>(Place::CPU());
  for (int i = 0; i < 2 * kWidth; ++i) p[i] = (rank + 1) * (step + 1) + i;
  return s;
}

#define RETURN_NAMED(expr)                        \
  do {                                            \
    Status _st = (expr);                          \
    if (!_st.ok()) return _st.WithContext(#expr); \
  } while (0)

Status RunWorker(const std::string& type, int rank) {
  LOOM_ASSIGN_OR_RETURN(auto kv, KVStore::Create(type));
  LOOM_ASSIGN_OR_RETURN(auto ref, KVStore::Create("local"));
  const OptimizerSpec sgd{"sgd", {{"learning_rate", 0.5}}};
  RETURN_NAMED(kv->SetOptimizer(sgd));
  RETURN_NAMED(ref->SetOptimizer(sgd));
  SelectedRows init;
  init.height = kHeight;
  for (int64_t i = 0; i < kHeight; ++i) init.rows.push_back(i);
  init.value = Tensor(proto::FP64, DDim({kHeight, kWidth}));
  double* p = init.value.mutable_data<double>(Place::CPU());
  for (int64_t i = 0; i < kHeight * kWidth; ++i) p[i] = static_cast<double>(i) + 100 * rank;
  RETURN_NAMED(kv->InitRowSparse(Key::Int(1), init));  // rank 0's rows win
  for (int64_t i = 0; i < kHeight * kWidth; ++i) p[i] = static_cast<double>(i);
  RETURN_NAMED(ref->InitRowSparse(Key::Int(1), init));
  RETURN_NAMED(kv->Barrier());
  for (int step = 0; step < kSteps; ++step) {
    RETURN_NAMED(kv->PushRowSparse(Key::Int(1), {Grad(rank, step)}, 0));
    std::vector<SelectedRows> all;
    for (int r = 0; r < kWorkers; ++r) all.push_back(Grad(r, step));
    RETURN_NAMED(ref->PushRowSparse(Key::Int(1), all, 0));
  }
  RETURN_NAMED(kv->Barrier());
  std::vector<int64_t> ids;
  for (int64_t i = kHeight - 1; i >= 0; --i) ids.push_back(i);
  SelectedRows got, want;
  RETURN_NAMED(kv->RowSparsePull(Key::Int(1), {ids}, {&got}, 0));
  RETURN_NAMED(ref->RowSparsePull(Key::Int(1), {ids}, {&want}, 0));
  if (got.rows != want.rows) return Internal("pulled other rows than asked");
  for (int64_t i = 0; i < kHeight * kWidth; ++i)
    if (got.value.data<double>()[i] != want.value.data<double>()[i])
      return Internal("element ", i, " is ", got.value.data<double>()[i], ", want ",
                      want.value.data<double>()[i]);
  // A table of 2^62 rows: its rows are the initializer's, whichever server holds them.
  SparseTableSpec spec;
  spec.dtype = proto::FP32;
  spec.height = int64_t{1} << 62;
  spec.row_dims = DDim({3});
  spec.init = RowInitializer::Gaussian(0, 1, 17);
  RETURN_NAMED(kv->InitSparseTable(Key::Int(2), spec));
  const std::vector<int64_t> big = {(int64_t{1} << 61) + rank, 7, 123456789};
  SelectedRows rows;
  RETURN_NAMED(kv->RowSparsePull(Key::Int(2), {big}, {&rows}, 0));
  for (size_t i = 0; i < rows.rows.size(); ++i)
    for (int64_t j = 0; j < 3; ++j)
      if (rows.value.data<float>()[i * 3 + j] !=
          static_cast<float>(SparseTable::InitialValue(spec.init, rows.rows[i], j)))
        return Internal("row ", rows.rows[i], " is not its initializer's");
  // Errors name the key.
  Status st = kv->RowSparsePull(Key::Int(1), {{kHeight}}, {&rows}, 0);
  if (st.message().find("key 1") == std::string::npos) return Internal("got ", st.ToString());
  RETURN_NAMED(kv->Barrier());
  return kv->Close();
}

class DistRowSparse : public ::testing::TestWithParam<std::string> {};

TEST_P(DistRowSparse, PullsEqualALocalStoreReplayingEveryPush) {
  std::string endpoints;
  for (int s = 0; s < kServers; ++s)
    endpoints += (s ? "," : "") + std::string("127.0.0.1:") + std::to_string(FreePort());
  std::vector<pid_t> pids;
  auto spawn = [&](bool server, int id) {
    const pid_t pid = fork();
    if (pid != 0) return pids.push_back(pid);
    setenv("PADDLE_TRAINING_ROLE", server ? "PSERVER" : "TRAINER", 1);
    setenv("PADDLE_TRAINERS_NUM", std::to_string(kWorkers).c_str(), 1);
    setenv("PADDLE_PSERVER_ENDPOINTS", endpoints.c_str(), 1);
    setenv("LOOM_PS_SECRET", "dist-row-sparse-test", 1);
    setenv("LOOM_PS_CONNECT_TIMEOUT_MS", "20000", 1);
    Status st;
    if (server) {
      setenv("PADDLE_PSERVER_ID", std::to_string(id).c_str(), 1);
      std::string ep = endpoints;
      for (int k = 0; k < id; ++k) ep = ep.substr(ep.find(',') + 1);
      setenv("PADDLE_CURRENT_ENDPOINT", ep.substr(0, ep.find(',')).c_str(), 1);
      st = RunKVServer(GetParam());
    } else {
      setenv("PADDLE_TRAINER_ID", std::to_string(id).c_str(), 1);
      st = RunWorker(GetParam(), id);
    }
    if (!st.ok())
      std::fprintf(stderr, "%s %d: %s\n", server ? "server" : "worker", id, st.ToString().c_str());
    _exit(st.ok() ? 0 : 1);
  };
  for (int s = 0; s < kServers; ++s) spawn(true, s);
  for (int w = 0; w < kWorkers; ++w) spawn(false, w);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  for (pid_t pid : pids) {
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t p : pids) kill(p, SIGKILL);
        waitpid(pid, &status, 0);
        ADD_FAILURE() << "a process of the job still ran after 90 s";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "process " << pid;
  }
  for (pid_t p : pids) {  // reap anything the deadline killed
    kill(p, SIGKILL);
    waitpid(p, nullptr, WNOHANG);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, DistRowSparse, ::testing::Values("dist_sync", "dist_async"));

}  // namespace
}  // namespace loom::kvstore
