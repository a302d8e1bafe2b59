// Gloo's allreduce across processes, as a peer for Loom's collective numbers on an emulated
// cluster (bench/cluster/allreduce.sh): one process per rank, as `loom launch` starts them. The
// rank and the number of ranks come from PADDLE_TRAINER_ID and PADDLE_TRAINERS_NUM, the ranks
// meet through a gloo::rendezvous::FileStore in DIR (a fresh, empty directory every process
// sees; on an emulated cluster the nodes share this machine's files), and Gloo's TCP device is
// bound to POD_IP (the node's rail-0 address; 127.0.0.1 when unset).
//
// For each size from MIN to MAX bytes (times FACTOR each step), fp32 sum in place, it times
// Gloo's allreduce_ring, allreduce_ring_chunked and allreduce_halving_doubling, and rank 0 prints
//   RESULT gloo_<algo> <bytes> <time_us> <busbw_GBps>
// time: per call, the slowest rank's mean over the timed calls; busbw = bytes / time x 2(N-1)/N,
// as nccl-tests. A warm-up call of each size sets how many calls are timed (about SECONDS of
// work, 3 to 1000; every rank takes the slowest rank's count).
//
// Every wait has a deadline: Gloo's context timeout (TIMEOUT_S) bounds the rendezvous, each
// connection and every call, so a dead or missing peer ends the run with an error (exit 1).
//
//   cluster_gloo_bench DIR [min_bytes=4] [max_bytes=64M] [factor=16] [seconds=1]
//                      [timeout_s=60]
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// A whole number from the environment; exits 2 naming it when it is missing or malformed.
int EnvInt(const char* name) {
  const char* text = std::getenv(name);
  char* end = nullptr;
  const long value = text != nullptr ? std::strtol(text, &end, 10) : 0;
  if (text == nullptr || *text == '\0' || *end != '\0' || value < 0 || value > 1 << 20) {
    std::fprintf(stderr,
                 "cluster_gloo_bench: %s must be set to a whole number (loom launch sets it)\n",
                 name);
    std::exit(2);
  }
  return static_cast<int>(value);
}

// A byte count with an optional K, M or G suffix (powers of 1024).
size_t Bytes(const char* text) {
  char* end = nullptr;
  double value = std::strtod(text, &end);
  switch (*end) {
    case 'K':
      value *= 1024;
      ++end;
      break;
    case 'M':
      value *= 1024 * 1024;
      ++end;
      break;
    case 'G':
      value *= 1024.0 * 1024 * 1024;
      ++end;
      break;
    default: break;
  }
  if (end == text || *end != '\0' || value < 4) {
    std::fprintf(stderr, "cluster_gloo_bench: '%s' is not a size of at least 4 bytes\n", text);
    std::exit(2);
  }
  return static_cast<size_t>(value);
}

// The largest of every rank's value (a ring allreduce of one double).
double MaxOverRanks(const std::shared_ptr<gloo::Context>& ctx, double value) {
  gloo::AllreduceRing<double> max(ctx, std::vector<double*>{&value}, 1,
                                  gloo::ReductionFunction<double>::max);
  max.run();
  return value;
}

// Per-call time of Algo on `count` floats in microseconds: the slowest rank's mean.
template <typename Algo>
double TimeUs(const std::shared_ptr<gloo::Context>& ctx, std::vector<float>& data, double seconds) {
  const int count = static_cast<int>(data.size());
  Algo algo(ctx, std::vector<float*>{data.data()}, count);
  std::fill(data.begin(), data.end(), 1.0f);
  auto start = Clock::now();
  algo.run();  // warm-up: connects the algorithm's buffers, and prices one call
  const double warm = std::chrono::duration<double>(Clock::now() - start).count();
  const float want = static_cast<float>(ctx->size);
  if (data.front() != want || data.back() != want) {
    throw std::runtime_error("wrong sum: " + std::to_string(data.front()) + " and " +
                             std::to_string(data.back()) + ", not " + std::to_string(want));
  }
  std::fill(data.begin(), data.end(), 0.0f);  // the timed calls sum zeros: no overflow
  const double slowest = MaxOverRanks(ctx, warm);
  const int iters = static_cast<int>(std::clamp(seconds / std::max(slowest, 1e-6), 3.0, 1000.0));
  MaxOverRanks(ctx, 0.0);  // every rank starts the timed calls together
  start = Clock::now();
  for (int i = 0; i < iters; ++i) algo.run();
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  return MaxOverRanks(ctx, us) / iters;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr,
                 "usage: cluster_gloo_bench DIR [min_bytes=4] [max_bytes=64M] [factor=16] "
                 "[seconds=1] [timeout_s=60]\n  (rank and size from PADDLE_TRAINER_ID, "
                 "PADDLE_TRAINERS_NUM; address from POD_IP)\n");
    return argc < 2 ? 2 : 0;
  }
  const std::string dir = argv[1];
  const size_t min_bytes = argc > 2 ? Bytes(argv[2]) : 4;
  const size_t max_bytes = argc > 3 ? Bytes(argv[3]) : size_t{64} << 20;
  const int factor = argc > 4 ? std::max(2, std::atoi(argv[4])) : 16;
  const double seconds = argc > 5 ? std::atof(argv[5]) : 1.0;
  const int timeout_s = argc > 6 ? std::max(1, std::atoi(argv[6])) : 60;
  const int rank = EnvInt("PADDLE_TRAINER_ID");
  const int size = EnvInt("PADDLE_TRAINERS_NUM");
  if (size < 2 || rank >= size) {
    std::fprintf(stderr, "cluster_gloo_bench: rank %d of %d: needs 2 or more ranks\n", rank, size);
    return 2;
  }
  const char* host = std::getenv("POD_IP");
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host != nullptr && *host != '\0' ? host : "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(std::chrono::seconds(timeout_s));
    ctx->connectFullMesh(store, device);
    if (rank == 0) {
      std::printf("cluster_gloo_bench: %d ranks, rank 0 at %s, timeout %d s\n", size,
                  attr.hostname.c_str(), timeout_s);
    }
    const double bus = 2.0 * (size - 1) / size;
    for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
      std::vector<float> data(bytes / sizeof(float));
      const struct {
        const char* name;
        double us;
      } rows[] = {
          {"ring", TimeUs<gloo::AllreduceRing<float>>(ctx, data, seconds)},
          {"ring_chunked", TimeUs<gloo::AllreduceRingChunked<float>>(ctx, data, seconds)},
          {"halving_doubling", TimeUs<gloo::AllreduceHalvingDoubling<float>>(ctx, data, seconds)},
      };
      if (rank == 0) {
        for (const auto& row : rows) {
          std::printf("RESULT gloo_%s %zu %.1f %.4f\n", row.name, bytes, row.us,
                      bytes / (row.us * 1e3) * bus);
        }
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cluster_gloo_bench: rank %d of %d: %s\n", rank, size, e.what());
    return 1;
  }
  return 0;
}
