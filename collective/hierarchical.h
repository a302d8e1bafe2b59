// A hierarchical ("tensor") allreduce for processes with several places each (MXNET-MPI's
// client with several devices, Horovod's hierarchical allreduce): the places of a process reduce
// to its place 0 over the in-process communicator, place 0 of every process allreduces across
// the processes over its own communicator (MPI), and place 0 broadcasts the result back.
//
// Called on every place's thread of every process, each with its local communicator; `global` is
// given on local rank 0 only (null elsewhere). Sum, max, min and prod (avg is a sum the caller
// scales: the local and global sizes differ).
#pragma once

#include "base/status.h"
#include "collective/communicator.h"

namespace loom::collective {

Status HierarchicalAllReduce(Communicator& local, Communicator* global, const void* send,
                             void* recv, size_t count, DataType dtype, ReduceOp op);

}  // namespace loom::collective
