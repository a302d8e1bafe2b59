// The MPI side of `loom bench collective`: runs a function on this process's rank of
// MPI_COMM_WORLD. Compiled from bench_mpi.cc when the build has MPI, else from
// bench_mpi_none.cc, which reports that MPI is missing. Main thread only.
#pragma once

#include <functional>

#include "collective/communicator.h"

namespace loom::cli {

// True when the process was started by mpirun/mpiexec (their environment variables are set).
bool UnderMpirun();
// Initializes MPI, creates the world's communicator, runs fn on it, destroys it, finalizes MPI.
Status RunOnMpiWorld(int* argc, char*** argv, const collective::CommunicatorOptions& options,
                     const std::function<Status(collective::Communicator&)>& fn);

}  // namespace loom::cli
