// Shared memory between the processes of one node: the meeting and the native collectives of
// ranks that are processes on one machine (MPI ranks of one node), over a segment they all map
// and Linux cross-memory attach (process_vm_readv / process_vm_writev).
//
// How a collective runs. Every call meets in the segment exactly as the in-process transport's
// ranks meet in their heap (meeting.h): each rank publishes its signature, its process's
// addresses of its buffers and, for small calls, a copy of its input, then arrives on the
// slot's state word. A small call is then computed by every rank from the copies (one
// rendezvous). A larger one is cut into blocks that the ranks claim from the slot's counter;
// the rank that claims a block reads it out of every other rank's input with one
// process_vm_readv per rank, reduces it in its cache and writes the result into every rank's
// output with one process_vm_writev per rank. Each input byte is read once and each output byte
// written once by the kernel's copy, like the in-process pass over shared memory, and no rank
// waits for a descheduled peer's share.
//
// Point-to-point messages (and with them the ring, tree and direct schedules) stay on the
// wrapped transport.
//
// Failures. Every wait has the call's deadline. A rank that does not arrive is named, and
// whether its process is gone. A copy that fails (the peer exited) aborts the group through the
// segment, so the other ranks end at once with the same error instead of at the deadline.
// Transport::Abort does the same, and aborts the wrapped transport.
//
// Setup (collective over the node's ranks; mpi.cc runs it with MPI): the first rank creates
// the segment (CreateShmSegment), the others open it by name (OpenShmSegment); every rank
// registers (Register); once all have, the name is unlinked (nothing is left in /dev/shm if a
// process dies later) and each rank checks that it may read every peer's memory (CheckPeers:
// cross-memory attach needs the same user and no seccomp or Yama rule against it). Only when
// every rank passed is the transport wrapped (WrapSharedMemory).
#pragma once

#include <memory>
#include <string>

#include <vector>

#include "base/status.h"
#include "collective/communicator.h"
#include "collective/transport.h"

namespace loom::collective {

class ShmSegment;

// A new segment for `nranks` ranks, named /dev/shm/loom-<pid>-<random>.
StatusOr<std::shared_ptr<ShmSegment>> CreateShmSegment(int nranks);
// The segment another rank created.
StatusOr<std::shared_ptr<ShmSegment>> OpenShmSegment(const std::string& name, int nranks);

class ShmSegment {
 public:
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  const std::string& name() const { return name_; }
  int nranks() const { return nranks_; }
  // Publishes this process as `rank` (its process id and a probe word for CheckPeers), and
  // lets any process of the same user read its memory where Yama restricts ptrace.
  void Register(int rank);
  // Removes the name (after every rank opened the segment; the mapping stays).
  void Unlink();
  // OK when this process can read every registered peer's probe word through cross-memory
  // attach; otherwise the first failure, naming the rank and the reason.
  Status CheckPeers(int rank) const;

 private:
  friend StatusOr<std::shared_ptr<ShmSegment>> CreateShmSegment(int);
  friend StatusOr<std::shared_ptr<ShmSegment>> OpenShmSegment(const std::string&, int);
  friend class ShmTransport;
  ShmSegment() = default;
  static StatusOr<std::shared_ptr<ShmSegment>> Map(const std::string& name, int nranks,
                                                   bool create);

  std::string name_;
  int nranks_ = 0;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  bool linked_ = false;
};

// Blocks of a native call over shared memory: at most this many bytes of each operand per
// block, so that one block's (nranks - 1) staged inputs stay in the cache and a call of
// S bytes makes about 2 * (nranks - 1) * S / kShmNativeBlockBytes copy calls. Measured with 4
// processes on 2 cores (loom bench collective --peer-mpi, 256 KiB-16 MiB): 32, 64, 128, 256 KiB
// and 1 MiB blocks within the launch-to-launch spread of each other, 128 KiB ahead at 1-16 MiB
// in one launch (16 MiB: 4.90 ms against 5.13-5.27).
inline constexpr size_t kShmNativeBlockBytes = size_t{128} << 10;

// `inner`'s ranks (one per process, all on this node, rank r registered in `segment` as r)
// with the meeting and native collectives in `segment`: meets_with_signatures() and
// SupportsNative() answer true; everything else goes to `inner`.
std::unique_ptr<Transport> WrapSharedMemory(std::unique_ptr<Transport> inner,
                                            std::shared_ptr<ShmSegment> segment);

// Ranks on several nodes, the same number L > 1 on each: `inner` (every rank, one per process)
// with the node-hierarchical allreduce as its native allreduce. `segment` holds this node's L
// ranks (this rank registered as `local_rank`; world_of[i]: local rank i's rank in `inner`),
// `cross` is the communicator of the ranks with this local index on every node (one per node,
// in node order). An allreduce of S bytes then runs in three steps:
//   1. inside the node (segment, blocks as above): shard p, S/L bytes, of the node's sum lands
//      in local rank p's output;
//   2. across nodes: every rank allreduces its shard with its peers of the same local index
//      over `cross` (auto: rings, channels over the NICs), the L shards of a node at once;
//   3. inside the node: every rank copies the finished shards from their owners.
// Each node then sends and receives about 2 (G - 1) / G x S in step 2 (G nodes), spread over
// its L ranks, where a flat ring through all G x L ranks also routes the node's inner steps
// through MPI. Avg sums and divides at the end. Signatures still go over `inner` (every rank of
// every node); the other collectives are not native here (SupportsNative), so auto runs them
// over `inner`'s schedules.
std::unique_ptr<Transport> WrapNodeHierarchy(std::unique_ptr<Transport> inner,
                                             std::shared_ptr<ShmSegment> segment, int local_rank,
                                             std::vector<int> world_of,
                                             std::unique_ptr<Communicator> cross);

}  // namespace loom::collective
