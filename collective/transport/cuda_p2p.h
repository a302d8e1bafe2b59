// CUDA P2P transport: the GPUs of one process as ranks, running Loom's own schedules (ring, tree,
// multi_tree, star) on device buffers. It is the in-process transport (inprocess.h: mailbox
// matching, the side that arrives second moves the data) over GPU memory: a message is one
// cudaMemcpyAsync between the two ranks' buffers (a peer copy across GPUs, over NVLink where
// there is one), and RecvReduce is one reduction kernel that reads the sender's buffer directly
// (peer access), so no staging copy; where two GPUs have no peer access the remote operand is
// first copied into a temporary buffer on the receiver's GPU. Copy/Finalize/scratch run on the
// rank's GPU too. Every operation runs on a stream of the performing rank for the destination's
// GPU and has completed when the transfer is marked done, so the schedules' ordering carries over.
//
// Virtual devices: an ordinal may appear several times in `devices`; each such rank is a device
// of its own (own stream, own buffers) on the same GPU, so multi-rank schedules can be run and
// tested on a machine with one GPU.
//
// Built in CUDA builds (library loom_collective_cuda). Host buffers (the communicator's
// signatures) are copied on the host.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "base/status.h"
#include "collective/communicator.h"
#include "collective/topology.h"

namespace loom::collective {

// Visible CUDA devices; 0 without a GPU or driver.
int CudaDeviceCount();

// The link matrix of `devices` (one entry per rank): two ranks on one GPU get weight 3 (same
// memory). Between GPUs the NVLink counts from NVML (loaded at run time when the driver has it)
// decide: two or more links, or both GPUs on an NVSwitch, weight 3; one link 2; none 1 (PCIe /
// through the host). Without NVML the CUDA P2P attributes stand in: peer access with native
// atomics (what NVLink pairs report) 2, otherwise 1.
StatusOr<Topology> DetectCudaTopology(const std::vector<int>& devices);

// One endpoint per entry of `devices` (CUDA device ordinals, repeats allowed); element r is
// rank r. Enables peer access between the distinct GPUs where the hardware allows it.
StatusOr<std::vector<std::unique_ptr<Transport>>> CreateCudaP2PTransports(
    const std::vector<int>& devices);

// Communicators over CreateCudaP2PTransports(devices); rank r drives devices[r]. The topology
// defaults to DetectCudaTopology(devices); the allreduce crossover to kLinkAutoTreeMaxBytes.
StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateCudaP2PCommunicators(
    const std::vector<int>& devices, const CommunicatorOptions& options = {},
    const std::optional<Topology>& topology = std::nullopt);

}  // namespace loom::collective
