// Internal: what an algorithm runs with. A Schedule is one call's view of the transport: it posts
// sends and receives (skipping empty ones), waits on them against the call's deadline, and cancels
// whatever is still pending when it goes out of scope, so a failed call never leaves a peer
// writing into a buffer its caller has already reused. Temporary buffers that transfers touch must
// come from Scratch() or HostScratch(): they live until the Schedule has cancelled everything (a
// local vector would be freed while a failed call's receives into it are still posted). Call
// buffers and Scratch() may be device memory: schedules touch them only through transfers, Copy
// and Finalize, never directly. One Schedule per call, on the worker thread.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "collective/communicator.h"
#include "collective/reduce.h"
#include "collective/transport.h"

namespace loom::collective::internal {

// One call's arguments, as issued.
struct CallArgs {
  Collective kind = Collective::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;                           // kReduce, kBroadcast
  int peer = -1;                           // kSend, kRecv
  int tag = -1;                            // kSend, kRecv
  Algorithm algorithm = Algorithm::kAuto;  // resolved (never kAuto) before the call runs
};

// Transport tags: collectives use (seq << 8 | phase); point-to-point calls set the top bit and
// carry the user's tag. Phases keep the messages of one call's stages apart.
enum Phase : uint64_t {
  kSignature = 0,
  kReducePhase = 1,
  kBroadcastPhase = 2,
  kGatherPhase = 3,
  kScatterPhase = 4,
  kData = 5,
  // Channel c of kChannels: its reduce-scatter under kChannelPhases + 2c, its all-gather under
  // kChannelPhases + 2c + 1 (c < kMaxChannels, so that every phase fits the tag's 8 bits).
  kChannelPhases = 16
};
inline constexpr int kMaxChannels = 64;

// The request lists of one Schedule after another (a communicator runs its calls one at a time):
// a Schedule takes them, empty, and gives them back emptied with their capacity, so that a small
// call allocates no lists.
struct ScheduleLists {
  std::vector<std::unique_ptr<Request>> requests;
  std::vector<bool> done;
};

class Schedule {
 public:
  Schedule(Transport* transport, const CommPlan* plan, const CommunicatorOptions* options,
           uint64_t tag_base, Deadline deadline, ScheduleLists* lists = nullptr)
      : transport_(transport),
        plan_(plan),
        options_(options),
        tag_base_(tag_base),
        deadline_(deadline),
        lists_(lists) {
    if (lists_ != nullptr) {
      requests_.swap(lists_->requests);
      done_.swap(lists_->done);
    }
    // Most calls post a few messages per peer: no regrowth on the way (calls are many and small).
    requests_.reserve(8);
    done_.reserve(8);
  }
  ~Schedule() {
    CancelPending();
    if (lists_ != nullptr) {
      requests_.clear();
      done_.clear();
      requests_.swap(lists_->requests);
      done_.swap(lists_->done);
    }
  }
  Schedule(const Schedule&) = delete;
  Schedule& operator=(const Schedule&) = delete;

  Transport& transport() { return *transport_; }
  const CommPlan& plan() const { return *plan_; }
  int rank() const { return transport_->rank(); }
  int nranks() const { return transport_->nranks(); }
  uint64_t tag(Phase phase) const { return tag_base_ | phase; }
  // Elements per pipelined piece for elements of `elem` bytes (at least 1).
  size_t piece_elems(size_t elem) const {
    return std::max<size_t>(1, options_->pipeline_chunk_bytes / elem);
  }

  // Scratch of `bytes` bytes in the memory call buffers live in (the transport's, e.g. a GPU's),
  // living as long as this Schedule: uninitialized (a buffer of an earlier call, reused:
  // Transport::ScratchBuffer), so a schedule writes it before it reads it.
  StatusOr<void*> Scratch(size_t bytes) {
    std::shared_ptr<void> buffer = transport_->ScratchBuffer(bytes);
    if (buffer == nullptr) {
      return Internal("could not allocate ", bytes, " bytes of scratch memory on the ",
                      transport_->name(), " transport");
    }
    scratch_.push_back(std::move(buffer));
    return scratch_.back().get();
  }
  // Zeroed host memory (signatures and other bookkeeping the worker thread reads itself).
  void* HostScratch(size_t bytes) {
    host_scratch_.push_back(std::make_unique<unsigned char[]>(std::max<size_t>(bytes, 1)));
    return host_scratch_.back().get();
  }
  // dst = src within this rank's call buffers (skipped when dst == src or bytes == 0).
  Status Copy(void* dst, const void* src, size_t bytes) {
    if (dst == src || bytes == 0) return Status::OK();
    return transport_->Copy(dst, src, bytes);
  }
  // The last step of a reduction on the rank that holds the complete result (kAvg divides).
  Status Finalize(const Reduction& reduction, void* buf, size_t count, int nranks) {
    if (reduction.op != ReduceOp::kAvg || count == 0) return Status::OK();
    return transport_->Finalize(reduction, buf, count, nranks);
  }

  // Each returns a handle for Wait, or -1 when there is nothing to move (bytes == 0).
  int PostSend(int peer, Phase phase, const void* data, size_t bytes);
  int PostRecv(int peer, Phase phase, void* data, size_t bytes);
  // A receive of at most `bytes` (Transport::RecvUpTo).
  int PostRecvUpTo(int peer, Phase phase, void* data, size_t bytes);
  int PostRecvReduce(int peer, Phase phase, void* dst, const void* local, size_t bytes,
                     const Reduction& reduction);
  Status Wait(int handle);
  Deadline deadline() const { return deadline_; }
  // How many requests were posted so far (handles 0 .. posted() - 1).
  int posted() const { return static_cast<int>(requests_.size()); }
  // Waits for every request posted so far.
  Status WaitAll();

 private:
  int Track(std::unique_ptr<Request> request);
  void CancelPending();

  Transport* transport_;
  const CommPlan* plan_;
  const CommunicatorOptions* options_;
  uint64_t tag_base_;
  Deadline deadline_;
  ScheduleLists* lists_;
  // Declared before requests_ so they are destroyed after them (and after CancelPending).
  std::vector<std::shared_ptr<void>> scratch_;
  std::vector<std::unique_ptr<unsigned char[]>> host_scratch_;
  std::vector<std::unique_ptr<Request>> requests_;
  std::vector<bool> done_;
};

// An element range of a buffer: [offset, offset + count).
struct Range {
  size_t offset = 0;
  size_t count = 0;
};
// A list that keeps its first N elements in place: the bookkeeping of a call (its ranges, pieces,
// request handles, tree steps) allocates nothing for the few peers and pieces of a small call,
// where a heap allocation and its free cost as much as a message's matching.
template <typename T, size_t N = 8>
using SmallVector = boost::container::small_vector<T, N>;
using Ranges = SmallVector<Range>;
// Splits count elements into n near-equal ranges (the first count % n get one more).
Ranges SplitEvenly(size_t count, int n);

inline const char* At(const void* base, size_t elem_offset, size_t elem) {
  return static_cast<const char*>(base) + elem_offset * elem;
}
inline char* At(void* base, size_t elem_offset, size_t elem) {
  return static_cast<char*>(base) + elem_offset * elem;
}

}  // namespace loom::collective::internal
