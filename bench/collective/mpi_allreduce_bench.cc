// Open MPI's own MPI_Allreduce as a peer for Loom over MPI: run under mpirun -np N. fp32 sum in
// place, sizes 4 KiB..64 MiB; rank 0 prints "RESULT mpi_allreduce <bytes> <time_us> <busbw_GBps>"
// (time: the slowest rank; busbw = bytes / time * 2 (N - 1) / N as nccl-tests), and the same
// for MPI_Iallreduce + MPI_Wait ("RESULT mpi_iallreduce ...": what Loom's native algorithm runs).
// For sizes up to 2 KiB it also times the floor of Loom's small-call path over MPI in plain MPI
// ("RESULT raw_exchange ..."): every rank MPI_Isend/MPI_Irecv's a 48-byte signature plus the
// data to and from every other rank, MPI_Waitall, then sums the n payloads -- what Loom's
// signature exchange does without the communicator around it (docs/PERF.md).
//
//   mpirun -np 4 collective_mpi_bench [min_bytes=4096] [max_bytes=67108864]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const size_t min_bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 4096;
  const size_t max_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : size_t{64} << 20;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const int count = static_cast<int>(bytes / sizeof(float));
    std::vector<float> data(count, 1.0f);
    const int iters = static_cast<int>(std::max(3.0, std::min(200.0, 0.3 / (bytes / 1e9 + 50e-6))));
    MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
      MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    double us = (MPI_Wtime() - start) * 1e6 / iters;
    MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
      std::printf("RESULT mpi_allreduce %zu %.1f %.3f\n", bytes, us,
                  bytes / (us * 1e3) * 2.0 * (n - 1) / n);
      std::fflush(stdout);
    }
    // The nonblocking collective Loom's `native` algorithm calls, waited for at once.
    MPI_Barrier(MPI_COMM_WORLD);
    const double istart = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
      MPI_Request req;
      MPI_Iallreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
      MPI_Wait(&req, MPI_STATUS_IGNORE);
    }
    double ius = (MPI_Wtime() - istart) * 1e6 / iters;
    MPI_Allreduce(MPI_IN_PLACE, &ius, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
      std::printf("RESULT mpi_iallreduce %zu %.1f %.3f\n", bytes, ius,
                  bytes / (ius * 1e3) * 2.0 * (n - 1) / n);
      std::fflush(stdout);
    }
    if (bytes <= 2048) {
      const size_t packet = 48 + bytes;
      std::vector<char> all(packet * n);
      std::vector<MPI_Request> reqs(2 * (n - 1));
      auto exchange = [&]() {
        std::copy(reinterpret_cast<const char*>(data.data()),
                  reinterpret_cast<const char*>(data.data()) + bytes, &all[rank * packet + 48]);
        int k = 0;
        for (int r = 0; r < n; ++r) {
          if (r == rank) continue;
          MPI_Irecv(&all[r * packet], static_cast<int>(packet), MPI_BYTE, r, 7, MPI_COMM_WORLD,
                    &reqs[k++]);
          MPI_Isend(&all[rank * packet], static_cast<int>(packet), MPI_BYTE, r, 7, MPI_COMM_WORLD,
                    &reqs[k++]);
        }
        MPI_Waitall(k, reqs.data(), MPI_STATUSES_IGNORE);
        for (int r = 0; r < n; ++r) {
          if (r == rank) continue;
          const float* in = reinterpret_cast<const float*>(&all[r * packet + 48]);
          for (int i = 0; i < count; ++i) data[i] += in[i] * 0.0f;  // keeps the values at 1
        }
      };
      exchange();
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      for (int i = 0; i < iters; ++i) exchange();
      double ex = (MPI_Wtime() - t0) * 1e6 / iters;
      MPI_Allreduce(MPI_IN_PLACE, &ex, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (rank == 0) {
        std::printf("RESULT raw_exchange %zu %.1f\n", bytes, ex);
        std::fflush(stdout);
      }
    }
  }
  MPI_Finalize();
  return 0;
}
