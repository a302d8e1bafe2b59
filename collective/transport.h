// Transport: the point-to-point layer every collective algorithm is written against. One Transport
// object is one rank's endpoint. Messages are matched by (peer, tag); messages between one pair of
// ranks with the same tag match in the order they were posted (MPI's non-overtaking rule), so a
// schedule may reuse one tag for a whole phase as long as both sides post in the same order.
//
// Threading: one thread drives a Transport (the communicator's worker); Request::Wait and Cancel
// are called from that thread. Implementations may complete requests from other threads.
// Buffers passed to Send/Recv/RecvReduce must stay valid and untouched until the request completes
// or Cancel returns.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/deadline.h"
#include "base/status.h"
#include "collective/reduce.h"

namespace loom::collective {

using ::loom::Clock;
using ::loom::Deadline;

class Request {
 public:
  virtual ~Request() = default;
  // Blocks until the transfer finished (OK or its error) or the deadline passed (Timeout; the
  // request stays pending and must then be cancelled).
  virtual Status Wait(Deadline deadline) = 0;
  // Withdraws a pending request. If a peer is already moving its data, waits for that to end.
  // After Cancel the request's buffers are free. Cancelling a completed request is a no-op.
  virtual void Cancel() = 0;
};

// A collective the transport can run itself (Algorithm::kNative), e.g. MPI_Allreduce or
// ncclAllReduce. Arguments as in communicator.h; in place when send == recv (AllGather: send ==
// recv + rank * count; ReduceScatter: recv == send + rank * count).
struct NativeCollective {
  Collective kind = Collective::kAllReduce;  // one of kCollectives
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;
};

// Zeroed host memory of `bytes` bytes (at least 1), freed with the last reference; nullptr when
// it cannot be allocated; blocks of 2 MiB or more in huge pages (base/host_memory.h). The
// default Transport::AllocateBuffer and the in-process host memory.
std::shared_ptr<void> AllocateHostBuffer(size_t bytes);

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  // Human-readable name for messages ("in-process", "mpi", ...).
  virtual const char* name() const = 0;

  virtual std::unique_ptr<Request> Send(int peer, uint64_t tag, const void* data, size_t bytes) = 0;
  virtual std::unique_ptr<Request> Recv(int peer, uint64_t tag, void* data, size_t bytes) = 0;

  // Receives a message of at most `bytes` from peer (a shorter one leaves the rest of data as
  // it was). The default receives exactly `bytes`, as Recv.
  virtual std::unique_ptr<Request> RecvUpTo(int peer, uint64_t tag, void* data, size_t bytes) {
    return Recv(peer, tag, data, bytes);
  }

  // Receives `bytes` from peer and stores dst = local (op) received, element-wise. dst may equal
  // local. The default receives into a staging buffer and reduces when Wait succeeds; transports
  // that can read the sender's memory directly override it and skip the staging copy.
  virtual std::unique_ptr<Request> RecvReduce(int peer, uint64_t tag, void* dst, const void* local,
                                              size_t bytes, const Reduction& reduction);
  // Whether RecvReduce reduces only inside Wait (into a staging buffer until then): receives
  // that reduce into one dst may then all be posted before the first is waited for, and reduce
  // in the order they are waited for. False where a reduction may run on arrival.
  virtual bool reduces_at_wait() const { return false; }

  // A channel whose messages carry a tag the receiver reads (MPI's tag, on a communicator of its
  // own): the communicator's signature round sends a call's signature as the tag of a message
  // that holds only data (communicator.cc), so a small call's message keeps the size of its
  // data (over Open MPI's shared memory, 256 B of data stay under the inline send limit where
  // 48 more bytes of signature did not). Messages between two ranks arrive in the order sent.
  //   signature_tag_max: the largest tag the channel carries; 0: the transport has none.
  //   TaggedRound: one round on it, every rank with every other: peers[r].send_bytes (0 is a
  //     message too) from peers[r].send to each peer r with `tag`, and the next message from
  //     each peer r into peers[r].recv (at most peers[r].capacity bytes). On OK every
  //     peers[r].tag and .bytes hold what arrived from r; by the deadline it ends in Timeout
  //     naming the peers not heard from, with nothing left posted. peers has nranks() entries
  //     (this rank's is ignored). The default: Unimplemented.
  struct TaggedPeer {
    const void* send = nullptr;
    size_t send_bytes = 0;
    void* recv = nullptr;
    size_t capacity = 0;
    uint32_t tag = 0;  // out
    size_t bytes = 0;  // out
  };
  virtual uint32_t signature_tag_max() const { return 0; }
  virtual Status TaggedRound(uint32_t tag, TaggedPeer* peers, Deadline deadline);

  // Native collectives: whether the transport has its own implementation of `kind` for `dtype`,
  // and running it (on the driving thread, ending by the deadline in Timeout). The defaults say
  // the transport has none.
  virtual bool SupportsNative(Collective kind, DataType dtype) const { return false; }
  virtual Status RunNative(const NativeCollective& call, Deadline deadline);

  // Ranks that share this process's memory can meet once per collective instead of sending
  // each other their call signatures: every rank publishes `signature` (`bytes` long) and,
  // once all have, finds every rank's in `all` (nranks x bytes, in rank order). When every
  // signature equals rank 0's and `native` is given, the native collective runs in the same
  // meeting (one rendezvous per call, not a signature round and then a rendezvous). When they
  // differ, returns InvalidArgument without touching any rank's buffers (the caller names the
  // calls from `all`). Every collective of the group must meet, in issue order.
  virtual bool meets_with_signatures() const { return false; }
  virtual Status Meet(const void* signature, size_t bytes, void* all,
                      const NativeCollective* native, Deadline deadline);

  // Local operations on call buffers. The algorithm schedules never read or write a call buffer
  // themselves: they move data with Send/Recv/RecvReduce and do everything else through these, so
  // the same ring/tree code runs on host buffers and on device buffers. The defaults work on host
  // memory; a transport whose buffers live on a device (CUDA P2P) runs them there.
  //   Copy:     dst = src, `bytes` bytes of this rank's buffers (dst may equal src: no-op).
  //   Finalize: the last step of a reduction on the rank that holds the complete result (kAvg
  //             divides by nranks; every other operator leaves buf as it is).
  //   AllocateBuffer: zeroed scratch of `bytes` bytes in the memory call buffers live in, freed
  //             when the last reference goes; nullptr when it cannot be allocated.
  virtual Status Copy(void* dst, const void* src, size_t bytes);
  virtual Status Finalize(const Reduction& reduction, void* buf, size_t count, int nranks);
  virtual std::shared_ptr<void> AllocateBuffer(size_t bytes);
  // Scratch for the schedules (Schedule::Scratch): AllocateBuffer's memory, handed back to this
  // transport when its last reference goes and reused by a later request it fits, so that a
  // collective with a work buffer (reduce-scatter, a non-root's reduce) does not allocate and
  // fault in a fresh one every call. At most kIdleScratchBuffers buffers and
  // kIdleScratchBytes bytes wait idle per transport (the largest that fit). Reused memory is
  // not zeroed. Thread-safe; a buffer may outlive the transport.
  std::shared_ptr<void> ScratchBuffer(size_t bytes);
  static constexpr size_t kIdleScratchBuffers = 2;
  static constexpr size_t kIdleScratchBytes = size_t{256} << 20;

  // Ends the group's communication at once because a rank failed: every pending and later
  // send, receive and native collective of every rank of the group fails with `cause` (an
  // Aborted status naming the failed rank) instead of waiting for its timeout. Thread-safe;
  // the first cause wins. Returns false when the transport cannot (the caller then relies on
  // the timeout, or ends the process group another way, e.g. MPI_Abort).
  virtual bool Abort(const Status& cause) { return false; }

  // Whether the algorithm schedules (ring, tree, multi_tree, star) can run over this transport.
  // The NCCL transport answers false: NCCL's point-to-point calls cannot reduce on receipt, so its
  // communicator runs native collectives and point-to-point calls only.
  virtual bool runs_schedules() const { return true; }
  // Whether this rank is the only one of its group in this process (MPI): then one thread
  // issues all of the process's calls, in the order every rank issues them, and a small call
  // may run on the caller's thread (CommunicatorOptions::inline_max_bytes).
  virtual bool one_rank_per_process() const { return false; }
  // Whether call buffers are host memory the communicator may read and write itself (false:
  // device memory, touched only through the transport). Small calls then travel inside the
  // signature exchange (communicator.cc).
  virtual bool host_buffers() const { return true; }

 private:
  struct ScratchPool;
  static std::shared_ptr<ScratchPool> NewScratchPool();
  std::shared_ptr<ScratchPool> scratch_pool_ = NewScratchPool();
};

}  // namespace loom::collective
