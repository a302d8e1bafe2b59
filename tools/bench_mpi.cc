#include "tools/bench_mpi.h"

#include <cstdlib>

#include "collective/transport/mpi.h"

namespace loom::cli {

bool UnderMpirun() { return collective::LaunchedByMpirun(); }

Status RunOnMpiWorld(int* argc, char*** argv, const collective::CommunicatorOptions& options,
                     const std::function<Status(collective::Communicator&)>& fn) {
  LOOM_RETURN_IF_ERROR(collective::MpiInit(argc, argv));
  Status result = [&]() -> Status {
    collective::MpiCommunicatorOptions mpi;
    mpi.communicator = options;
    LOOM_ASSIGN_OR_RETURN(auto comm, collective::CreateMpiCommunicator(mpi));
    return fn(*comm);
  }();
  Status finalized = collective::MpiFinalize();
  return result.ok() ? finalized : result;
}

}  // namespace loom::cli
