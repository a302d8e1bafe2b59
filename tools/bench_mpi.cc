#include "tools/bench_mpi.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
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

StatusOr<collective::NodeMap> DetectNodesOnMpiWorld(int* rank, std::string* transport) {
  LOOM_RETURN_IF_ERROR(collective::MpiInit(nullptr, nullptr));
  *rank = collective::MpiWorldRank();
  StatusOr<collective::NodeMap> nodes = collective::DetectMpiNodes();
  if (nodes.ok()) {
    // What a communicator with the defaults runs over (its setup is collective too).
    StatusOr<std::unique_ptr<collective::Communicator>> comm = collective::CreateMpiCommunicator();
    if (!comm.ok()) nodes = comm.status();
    if (comm.ok()) *transport = (*comm)->transport().name();
  }
  Status finalized = collective::MpiFinalize();
  if (!nodes.ok()) return nodes.status();
  LOOM_RETURN_IF_ERROR(finalized);
  return nodes;
}

StatusOr<double> TimeMpiAllreduce(const void* send, void* recv, size_t count,
                                  collective::DataType dtype, collective::ReduceOp op, int warmup,
                                  int iters) {
  using collective::DataType;
  using collective::ReduceOp;
  int level = 0;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE)
    return FailedPrecondition("--peer-mpi needs MPI_THREAD_MULTIPLE (this MPI gives level ", level,
                              ")");
  if (count > static_cast<size_t>(INT_MAX))
    return InvalidArgument("--peer-mpi: ", count, " elements exceed one MPI call");
  MPI_Datatype type;
  switch (dtype) {
    case DataType::kFloat32: type = MPI_FLOAT; break;
    case DataType::kFloat64: type = MPI_DOUBLE; break;
    case DataType::kInt32: type = MPI_INT32_T; break;
    case DataType::kInt64: type = MPI_INT64_T; break;
    default:
      return Unimplemented("--peer-mpi: MPI has no ", collective::DataTypeName(dtype), " type");
  }
  MPI_Op mpi_op;
  switch (op) {
    case ReduceOp::kSum: mpi_op = MPI_SUM; break;
    case ReduceOp::kProd: mpi_op = MPI_PROD; break;
    case ReduceOp::kMax: mpi_op = MPI_MAX; break;
    case ReduceOp::kMin: mpi_op = MPI_MIN; break;
    default:
      return Unimplemented("--peer-mpi: MPI has no ", collective::ReduceOpName(op), " operator");
  }
  const int n = static_cast<int>(count);
  int rc = MPI_SUCCESS;
  for (int i = 0; i < warmup && rc == MPI_SUCCESS; ++i)
    rc = MPI_Allreduce(send, recv, n, type, mpi_op, MPI_COMM_WORLD);
  if (rc == MPI_SUCCESS) rc = MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters && rc == MPI_SUCCESS; ++i)
    rc = MPI_Allreduce(send, recv, n, type, mpi_op, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) return Internal("MPI_Allreduce failed (MPI error ", rc, ")");
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
             .count() /
         std::max(iters, 1);
}

}  // namespace loom::cli
