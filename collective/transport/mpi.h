// MPI transport: one rank per process over Open MPI point-to-point messages (MPI_Isend/MPI_Irecv
// polled with MPI_Test until the call's deadline), plus the MPI library's own collectives as
// Algorithm::kNative (MPI_Iallreduce, MPI_Ireduce, MPI_Ibcast, MPI_Iallgather,
// MPI_Ireduce_scatter_block; fp16 through user-defined MPI operators over our fp16 kernels).
//
// Tags: each transport works on two duplicates of MPI_COMM_WORLD, one for collectives and one
// for point-to-point calls, and folds the library's 64-bit tags (schedule.h) into MPI's tag
// range: a collective's sequence number modulo a window (only neighbouring calls can be in
// flight at once, because every call starts with a signature exchange with every rank) and its
// phase; a point-to-point call's user tag (its signature and data share the tag and are ordered
// by MPI's non-overtaking rule).
//
// Threading: MPI must be initialized with MpiInit (or by the caller) at MPI_THREAD_SERIALIZED or
// higher, because the communicator's worker thread, not the main thread, makes the MPI calls.
// Below MPI_THREAD_MULTIPLE every MPI call of this library holds one process-wide lock. One
// thread drives a transport (transport.h); MpiInit / MpiFinalize run on the main thread, with
// every communicator destroyed before MpiFinalize.
//
// Cancel: a pending receive is cancelled with MPI_Cancel and waited for. A send MPI cannot take
// back (a large message the peer never receives) is released with MPI_Request_free after a grace
// period; MPI may then still read (never write) its buffer until the peer receives or the job
// ends. A native collective that times out is left pending inside MPI for the same reason: only
// the sends of a call that already failed are affected, and the communicator is unusable after.
#pragma once

#include <memory>
#include <optional>

#include "base/status.h"
#include "collective/communicator.h"
#include "collective/nodes.h"

namespace loom::collective {

// MPI_Init_thread asking for MPI_THREAD_MULTIPLE, unless MPI is already initialized. Fails with
// FailedPrecondition when the library grants less than MPI_THREAD_SERIALIZED.
Status MpiInit(int* argc, char*** argv);
// MPI_Finalize, if MpiInit initialized MPI.
Status MpiFinalize();
// Ends every process of the job with `code` (MPI_Abort), when MPI is initialized; returns
// otherwise. For a rank that failed while its peers may still wait in a collective.
void MpiAbort(int code);
// True when this process was started by mpirun/mpiexec (Open MPI, MPICH, PMI launchers).
bool LaunchedByMpirun();
// The thread level granted ("MPI_THREAD_MULTIPLE", ...), or "not initialized".
const char* MpiThreadLevel();
int MpiWorldRank();
int MpiWorldSize();

// Which ranks of MPI_COMM_WORLD share a node (by host name) and each node's NICs (collective:
// every process calls it; nodes.h).
StatusOr<NodeMap> DetectMpiNodes();

// This process's endpoint of MPI_COMM_WORLD (collective over all ranks: every process calls it).
StatusOr<std::unique_ptr<Transport>> CreateMpiTransport();

// CommunicatorOptions for MPI ranks: pipeline pieces of 256 KiB, which keep Open MPI's
// shared-memory rendezvous streaming (measured with loom bench collective: 4 MiB ring allreduce
// over 4 ranks 2-3x faster than with 1 MiB pieces).
CommunicatorOptions DefaultMpiCommunicatorOptions();

// `options` for ranks that span several nodes: the star, the direct algorithm and MPI's native
// collectives out of auto (communicator.h, "Over MPI ranks on several nodes"). Applied by
// CreateMpiCommunicator when the ranks span several nodes and auto's windows are still
// DefaultMpiCommunicatorOptions' (a caller who set them keeps them).
CommunicatorOptions AcrossNodesMpiOptions(CommunicatorOptions options);

// `options` for ranks that share a node's memory (shm.h): auto runs the native collectives
// over shared memory at every size, as in-process auto does. Applied by CreateMpiCommunicator
// when it wrapped the transport and auto's windows are still DefaultMpiCommunicatorOptions'.
CommunicatorOptions SharedMemoryMpiOptions(CommunicatorOptions options);

// When every rank of MPI_COMM_WORLD is on this node: `mpi` with its meeting and native
// collectives in a shared-memory segment (shm.h; collective: every process calls it). Where a
// rank cannot (no /dev/shm, cross-memory attach not permitted) every rank gets `mpi` back and
// *why_not says why.
StatusOr<std::unique_ptr<Transport>> ShareNodeMemory(std::unique_ptr<Transport> mpi,
                                                     std::string* why_not);

struct MpiCommunicatorOptions {
  CommunicatorOptions communicator = DefaultMpiCommunicatorOptions();
  // Ranks that are all on one node meet and run their native collectives in shared memory
  // (ShareNodeMemory), unless this is false or LOOM_MPI_SHM=0 is set.
  bool shared_memory = true;
  // The machine the ranks stand for; default: world-size devices, all linked alike on one node,
  // or NodeTopology of DetectMpiNodes when the ranks span several nodes.
  std::optional<Topology> topology;
  double tree_link_penalty = 0.7;
};

// A communicator over every rank of MPI_COMM_WORLD (collective: every process calls it).
StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(
    const MpiCommunicatorOptions& options = {});

}  // namespace loom::collective
