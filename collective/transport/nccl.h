// NCCL transport: the GPUs of one process as ranks (ncclCommInitAll), one CUDA stream per rank.
// Buffers are device memory, so the communicator runs NCCL's own collectives (Algorithm::kNative:
// ncclAllReduce, ncclReduce, ncclBroadcast, ncclAllGather, ncclReduceScatter; kAuto means
// native) and point-to-point calls (ncclSend/ncclRecv); the ring/tree schedules, which need a
// reduction on receipt, answer Unimplemented (Transport::runs_schedules). The CUDA P2P transport
// (cuda_p2p.h) runs those schedules on device buffers.
//
// Matching: NCCL point-to-point has no tags; messages between two ranks match in posting order.
// That is all this transport needs: signature exchanges and ordered point-to-point calls post in
// the same order on both sides. Posted sends and receives are launched together, in one
// ncclGroupStart/ncclGroupEnd, when the first of them is waited on, so that a rank's receive and
// send to the same peer cannot block each other. Host buffers (the communicator's signatures)
// are staged through device memory.
//
// Deadlines and Cancel: requests poll a CUDA event until the call's deadline. NCCL cannot
// withdraw a launched operation, so cancelling one (after a timeout) aborts the NCCL
// communicator (ncclCommAbort); the transport then fails every later call with
// FailedPrecondition, as the communicator does after a timeout anyway.
//
// Threading: each endpoint is driven by one thread (its communicator's worker), which makes the
// endpoint's device current before every CUDA call. Built only when CUDA and NCCL are found.
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "collective/communicator.h"
#include "collective/transport/cuda_p2p.h"  // CudaDeviceCount

namespace loom::collective {

// One endpoint per entry of `devices` (distinct CUDA device ordinals); element r is rank r.
StatusOr<std::vector<std::unique_ptr<Transport>>> CreateNcclTransports(
    const std::vector<int>& devices);

// Communicators over CreateNcclTransports(devices); rank r drives devices[r].
StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateNcclCommunicators(
    const std::vector<int>& devices, const CommunicatorOptions& options = {});

}  // namespace loom::collective
