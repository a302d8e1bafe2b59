// The MPI side of `loom bench collective`: runs a function on this process's rank of
// MPI_COMM_WORLD. Compiled from bench_mpi.cc when the build has MPI, else from
// bench_mpi_none.cc, which reports that MPI is missing. Main thread only.
#pragma once

#include <functional>
#include <string>

#include "collective/communicator.h"
#include "collective/nodes.h"

namespace loom::cli {

// True when the process was started by mpirun/mpiexec (their environment variables are set).
bool UnderMpirun();
// Initializes MPI, creates the world's communicator, runs fn on it, destroys it, finalizes MPI.
Status RunOnMpiWorld(int* argc, char*** argv, const collective::CommunicatorOptions& options,
                     const std::function<Status(collective::Communicator&)>& fn);

// Initializes MPI, gathers which ranks share a node and each node's NICs (collective::
// DetectMpiNodes), finalizes MPI; `rank` gets this process's rank.
// *transport: the name of the transport a default MPI communicator runs over there ("mpi",
// "mpi+shm" on one node, "mpi+shm+nodes" with several ranks on each of several nodes).
StatusOr<collective::NodeMap> DetectNodesOnMpiWorld(int* rank, std::string* transport);

// The peer beside Loom's rows (--peer-mpi): Open MPI's blocking MPI_Allreduce on MPI_COMM_WORLD,
// out of place from `send` to `recv` (count elements each) as Loom's rows run, `warmup` untimed
// and `iters` timed calls after a barrier.
// Returns this rank's microseconds per call. Needs MPI_THREAD_MULTIPLE (the communicator's
// worker thread may also be inside MPI); fp16 and avg have no MPI equivalent (Unimplemented).
StatusOr<double> TimeMpiAllreduce(const void* send, void* recv, size_t count,
                                  collective::DataType dtype, collective::ReduceOp op, int warmup,
                                  int iters);

}  // namespace loom::cli
