#include "collective/hierarchical.h"

namespace loom::collective {

Status HierarchicalAllReduce(Communicator& local, Communicator* global, const void* send,
                             void* recv, size_t count, DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kAvg)
    return InvalidArgument("a hierarchical allreduce sums (or max, min, prod); scale for avg");
  if ((local.rank() == 0) != (global != nullptr))
    return InvalidArgument("the hierarchical allreduce's cross-process communicator belongs to ",
                           "local rank 0 (and only to it); local rank ", local.rank(),
                           global ? " has one" : " has none");
  LOOM_RETURN_IF_ERROR(local.Reduce(send, recv, count, dtype, op, 0).Wait());
  if (global) LOOM_RETURN_IF_ERROR(global->AllReduce(recv, recv, count, dtype, op).Wait());
  return local.Broadcast(recv, recv, count, dtype, 0).Wait();
}

}  // namespace loom::collective
