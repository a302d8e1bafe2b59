#include <cstdlib>

#include "tools/bench_mpi.h"

namespace loom::cli {

bool UnderMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

Status RunOnMpiWorld(int*, char***, const collective::CommunicatorOptions&,
                     const std::function<Status(collective::Communicator&)>&) {
  return Unimplemented(
      "this loom was built without MPI (no MPI library found at configure "
      "time); --transport mpi is unavailable");
}

StatusOr<collective::NodeMap> DetectNodesOnMpiWorld(int*, std::string*) {
  return Unimplemented("this loom was built without MPI; loom topo --mpi is unavailable");
}

StatusOr<double> TimeMpiAllreduce(const void*, void*, size_t, collective::DataType,
                                  collective::ReduceOp, int, int) {
  return Unimplemented("this loom was built without MPI; --peer-mpi is unavailable");
}

}  // namespace loom::cli
