#include "collective/transport/inprocess.h"
#include "collective/spin.h"
#include "collective/transport/meeting.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "base/copy.h"
#include "collective/schedule.h"
#include "collective/transport_registry.h"

namespace loom::collective {
namespace {

// One posted send or receive, shared by the poster's Request and (while queued) the mailbox.
struct Posting {
  enum class Kind { kSend, kRecv, kRecvReduce };
  Kind kind;
  int rank;  // who posted it
  uint64_t tag;
  size_t bytes;
  const void* src = nullptr;    // kSend: the sender's data
  void* dst = nullptr;          // kRecv / kRecvReduce: where the result goes
  const void* local = nullptr;  // kRecvReduce: the receiver's own operand
  Reduction reduction{DataType::kFloat32, ReduceOp::kSum};

  std::mutex mu;
  std::condition_variable cv;
  bool queued = true;                 // guarded by the mailbox mutex
  bool done = false;                  // guarded by mu
  Status status;                      // guarded by mu
  std::atomic<bool> finished{false};  // done, for waits that poll before they lock

  // A handed transfer (InProcessTransportOptions::handoff_bytes). On the receive: the send it
  // was matched with, until whoever claims it (the receiver when it waits, or the sender after
  // its spin) moves the data; guarded by the receive's mu. On the send: the receive it was
  // handed to; guarded by the send's mu (set by the sender that made the match before its
  // request exists, or later by a receive that found the send queued).
  std::shared_ptr<Posting> handed_send;
  std::shared_ptr<Posting> handed_recv;
  std::atomic<bool> handed{false};  // handed_send was set, for waits that poll
};

struct Key {
  int src;
  uint64_t tag;
};
// The unmatched postings of one pair of ranks in one direction, in the order they were posted
// (matched by tag, first posted first, as MPI matches within one source). A call has a few
// postings outstanding per peer, so a scan of the list finds one; the list keeps its capacity
// from call to call, so matching allocates nothing (a map keyed by tag allocated its entry
// for every message: every call's tags are new).
using Pending = std::vector<std::shared_ptr<Posting>>;

// Everything addressed to one rank: unmatched sends to it and its unmatched receives, per peer
// (sends[r]: from rank r; recvs[r]: from rank r).
struct Mailbox {
  std::mutex mu;
  std::vector<Pending> sends;
  std::vector<Pending> recvs;
};

// The meeting (meeting.h): the slots live in this process's heap.
using meeting::CopyInto;
using meeting::GatherSignatures;
using meeting::kAbandonedBit;
using meeting::kCountMask;
using meeting::kGenMask;
using meeting::kMaxMeetRanks;
using meeting::kMeetSignatureBytes;
using meeting::kMeetSlots;
using meeting::MeetControl;
using meeting::MeetEntry;
using meeting::Publish;
using meeting::ReduceInto;
using meeting::RunFromCopies;
using meeting::RunsFromCopies;

struct MeetSlot : MeetControl {
  std::unique_ptr<MeetEntry[]> entries;
};

struct Meeting {
  explicit Meeting(int n)
      : slots(new MeetSlot[kMeetSlots]), spin_pauses(SpinPausesFor(n)), workers(WorkersFor(n)) {
    for (uint64_t i = 0; i < kMeetSlots; ++i) slots[i].entries.reset(new MeetEntry[n]);
  }
  std::unique_ptr<MeetSlot[]> slots;
  // Waits poll first (SpinUntil) and then sleep here; whoever changes what a sleeper waits for
  // wakes the sleepers (Wake).
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int> sleepers{0};
  const int spin_pauses;  // the group's rank threads against this machine's cores
  const int workers;      // how many of them run at once (NativeBlockElements)

  void Wake() {
    if (sleepers.load() > 0) {
      { std::lock_guard<std::mutex> lock(mu); }
      cv.notify_all();
    }
  }
  // Waits until ready() or the deadline; false at the deadline.
  template <typename Ready>
  bool WaitUntil(Ready&& ready, Deadline deadline) {
    if (SpinUntil(ready, kSpinBudget, spin_pauses)) return true;
    std::unique_lock<std::mutex> lock(mu);
    sleepers.fetch_add(1);
    const bool ok = cv.wait_until(lock, deadline, ready);
    sleepers.fetch_sub(1);
    return ok;
  }
  // Waits until ready(), however long.
  template <typename Ready>
  void WaitUntil(Ready&& ready) {
    while (!WaitUntil(ready, Clock::now() + std::chrono::hours(1))) {
    }
  }
};

struct Hub {
  Hub(int n, std::shared_ptr<RankMemory> memory)
      : mailboxes(n), memory(std::move(memory)), meeting(n) {
    for (Mailbox& mb : mailboxes) {
      mb.sends.resize(n);
      mb.recvs.resize(n);
    }
  }
  std::vector<Mailbox> mailboxes;
  std::shared_ptr<RankMemory> memory;
  Meeting meeting;
  // Set once by Transport::Abort (guarded by meeting.mu; `aborted` is read without it).
  std::atomic<bool> aborted{false};
  Status abort_cause;
};

class HostMemory final : public RankMemory {
 public:
  const char* name() const override { return GetTransport(TransportId::kInProcess).display; }
  bool host() const override { return true; }
  Status Copy(int, int, void* dst, int, const void* src, size_t bytes) override {
    CopyBytes(dst, src, bytes);
    return Status::OK();
  }
  Status Reduce(int, const Reduction& reduction, int, void* dst, const void* local, int,
                const void* remote, size_t count) override {
    collective::Reduce(reduction, dst, local, remote, count);
    return Status::OK();
  }
  Status Finalize(int, const Reduction& reduction, void* buf, size_t count, int nranks) override {
    collective::Finalize(reduction, buf, count, nranks);
    return Status::OK();
  }
  std::shared_ptr<void> Allocate(int, size_t bytes) override { return AllocateHostBuffer(bytes); }
};

void MarkDone(Posting* p, const Status& status) {
  {
    std::lock_guard<std::mutex> lock(p->mu);
    p->done = true;
    p->status = status;
  }
  p->finished.store(true, std::memory_order_release);
  p->cv.notify_all();
}

// Moves the data of a matched pair; runs on the thread of rank `performer`, which made the match,
// outside any mailbox lock.
void Transfer(RankMemory& memory, int performer, Posting* send, Posting* recv) {
  Status status;
  if (send->bytes != recv->bytes) {
    status = Internal("message size mismatch on tag ", send->tag, ": rank ", send->rank, " sent ",
                      send->bytes, " bytes, rank ", recv->rank, " expected ", recv->bytes);
  } else if (send->bytes > 0 && recv->kind == Posting::Kind::kRecv) {
    status = memory.Copy(performer, recv->rank, recv->dst, send->rank, send->src, send->bytes);
  } else if (send->bytes > 0) {
    status =
        memory.Reduce(performer, recv->reduction, recv->rank, recv->dst, recv->local, send->rank,
                      send->src, send->bytes / DataTypeSize(recv->reduction.dtype));
  }
  MarkDone(recv, status);
  MarkDone(send, status);
}

// Takes a handed transfer out of its receive: the send, or nullptr when it was claimed already.
std::shared_ptr<Posting> Claim(Posting* recv) {
  std::lock_guard<std::mutex> lock(recv->mu);
  return std::move(recv->handed_send);
}

// The receive a send was handed to, or nullptr.
std::shared_ptr<Posting> HandedRecv(Posting* send) {
  std::lock_guard<std::mutex> lock(send->mu);
  return send->handed_recv;
}

// The first posting of `tag` in `pending`, taken out of it; nullptr when there is none.
std::shared_ptr<Posting> PopFirst(Pending& pending, uint64_t tag) {
  auto it = std::find_if(pending.begin(), pending.end(),
                         [tag](const std::shared_ptr<Posting>& p) { return p->tag == tag; });
  if (it == pending.end()) return nullptr;
  std::shared_ptr<Posting> p = std::move(*it);
  pending.erase(it);
  p->queued = false;
  return p;
}

class InProcessRequest final : public Request {
 public:
  InProcessRequest(std::shared_ptr<Hub> hub, int mailbox, Key key, bool is_send,
                   std::shared_ptr<Posting> posting, int rank)
      : hub_(std::move(hub)),
        mailbox_(mailbox),
        key_(key),
        is_send_(is_send),
        posting_(std::move(posting)),
        rank_(rank) {}

  // A request dropped without Wait or Cancel while its handed transfer is unclaimed: its
  // buffers may be gone, so nothing moves and both sides end with an error.
  ~InProcessRequest() override {
    const std::shared_ptr<Posting> handed = is_send_ ? HandedRecv(posting_.get()) : nullptr;
    Posting* recv = is_send_ ? handed.get() : posting_.get();
    if (recv == nullptr || !recv->handed.load(std::memory_order_acquire)) return;
    if (std::shared_ptr<Posting> send = Claim(recv)) {
      const Status abandoned = FailedPrecondition("a request of the transfer was dropped");
      MarkDone(recv, abandoned);
      MarkDone(send.get(), abandoned);
    }
  }

  Status Wait(Deadline deadline) override {
    Posting* p = posting_.get();
    if (is_send_) {
      // A handed send: the receiver moves it when it waits; one it has not started by the end
      // of the spin (or handed while this wait sleeps) is moved here.
      SpinUntil([p] { return p->finished.load(std::memory_order_acquire); }, kSpinBudget,
                hub_->meeting.spin_pauses);
    } else {
      SpinUntil(
          [p] {
            return p->finished.load(std::memory_order_acquire) ||
                   p->handed.load(std::memory_order_acquire);
          },
          kSpinBudget, hub_->meeting.spin_pauses);
    }
    std::unique_lock<std::mutex> lock(p->mu);
    bool claimed = false;  // a send: it tried to move its handed receive
    const auto ready = [&] {
      return p->done ||
             (is_send_ ? p->handed_recv != nullptr && !claimed : p->handed_send != nullptr);
    };
    for (;;) {
      if (!p->cv.wait_until(lock, deadline, ready)) {
        return Timeout(is_send_ ? "send to rank " : "receive from rank ",
                       is_send_ ? mailbox_ : key_.src, " (tag ", key_.tag, ") did not complete");
      }
      if (p->done) return p->status;
      // A handed transfer nobody started: move it on this rank's thread.
      const std::shared_ptr<Posting> recv = is_send_ ? p->handed_recv : posting_;
      claimed = true;
      lock.unlock();
      MoveIfUnclaimed(recv.get());
      lock.lock();
    }
  }

  void Cancel() override {
    Mailbox& mb = hub_->mailboxes[mailbox_];
    {
      std::lock_guard<std::mutex> lock(mb.mu);
      if (posting_->queued) {
        Pending& pending = (is_send_ ? mb.sends : mb.recvs)[key_.src];
        pending.erase(std::remove(pending.begin(), pending.end(), posting_), pending.end());
        posting_->queued = false;
        MarkDone(posting_.get(), FailedPrecondition("cancelled"));
        return;
      }
    }
    // Matched: a handed transfer nobody started moves now (the buffers are still the caller's);
    // otherwise the peer may be copying right now, and the buffers are free once it is done.
    const std::shared_ptr<Posting> recv = is_send_ ? HandedRecv(posting_.get()) : posting_;
    MoveIfUnclaimed(recv.get());
    std::unique_lock<std::mutex> lock(posting_->mu);
    posting_->cv.wait(lock, [this] { return posting_->done; });
  }

 private:
  void MoveIfUnclaimed(Posting* recv) {
    if (recv == nullptr) return;
    if (std::shared_ptr<Posting> send = Claim(recv)) {
      Transfer(*hub_->memory, rank_, send.get(), recv);
    }
  }

  std::shared_ptr<Hub> hub_;
  int mailbox_;  // the receiving rank's mailbox that holds (or held) the posting
  Key key_;
  bool is_send_;
  std::shared_ptr<Posting> posting_;
  int rank_;  // the rank that posted it
};

class InProcessTransport final : public Transport {
 public:
  InProcessTransport(std::shared_ptr<Hub> hub, int rank, int nranks,
                     const InProcessTransportOptions& options)
      : hub_(std::move(hub)), rank_(rank), nranks_(nranks), options_(options) {}

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  const char* name() const override { return hub_->memory->name(); }

  Status Copy(void* dst, const void* src, size_t bytes) override {
    return hub_->memory->Copy(rank_, rank_, dst, rank_, src, bytes);
  }
  Status Finalize(const Reduction& reduction, void* buf, size_t count, int nranks) override {
    return hub_->memory->Finalize(rank_, reduction, buf, count, nranks);
  }
  std::shared_ptr<void> AllocateBuffer(size_t bytes) override {
    return hub_->memory->Allocate(rank_, bytes);
  }

  // Native collectives: on host memory every rank can read and write every other rank's
  // buffers, so a collective is one pass over shared memory with the minimum traffic (see
  // RunNative).
  bool SupportsNative(Collective, DataType) const override { return hub_->memory->host(); }
  Status RunNative(const NativeCollective& call, Deadline deadline) override {
    return RunSlot(&call, nullptr, 0, nullptr, deadline);
  }
  bool meets_with_signatures() const override { return true; }
  Status Meet(const void* signature, size_t bytes, void* all, const NativeCollective* native,
              Deadline deadline) override {
    if (native && !hub_->memory->host())
      return Unimplemented("native collectives need host memory");
    return RunSlot(native, signature, bytes, all, deadline);
  }

  std::unique_ptr<Request> Send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    CheckPeer(peer);
    auto p = std::make_shared<Posting>();
    p->kind = Posting::Kind::kSend;
    p->rank = rank_;
    p->tag = tag;
    p->bytes = bytes;
    p->src = data;
    const Key key{rank_, tag};
    Mailbox& mb = hub_->mailboxes[peer];
    std::shared_ptr<Posting> match;
    {
      std::lock_guard<std::mutex> lock(mb.mu);
      if (hub_->aborted.load()) {
        p->queued = false;
        MarkDone(p.get(), AbortCause());
        return std::make_unique<InProcessRequest>(hub_, peer, key, /*is_send=*/true, std::move(p),
                                                  rank_);
      }
      match = PopFirst(mb.recvs[rank_], tag);
      if (!match) mb.sends[rank_].push_back(p);
    }
    if (match) {
      p->queued = false;
      Matched(p, match);
    }
    return std::make_unique<InProcessRequest>(hub_, peer, key, /*is_send=*/true, std::move(p),
                                              rank_);
  }

  bool Abort(const Status& cause) override {
    {
      std::lock_guard<std::mutex> lock(hub_->meeting.mu);
      if (hub_->aborted.load()) return true;
      hub_->abort_cause = cause;
      hub_->aborted.store(true);
    }
    // Every queued posting of the group ends now; matched ones are finishing their copy.
    for (Mailbox& mb : hub_->mailboxes) {
      std::vector<std::shared_ptr<Posting>> pending;
      {
        std::lock_guard<std::mutex> lock(mb.mu);
        for (std::vector<Pending>* lists : {&mb.sends, &mb.recvs}) {
          for (Pending& postings : *lists) {
            for (auto& p : postings) {
              p->queued = false;
              pending.push_back(p);
            }
            postings.clear();
          }
        }
      }
      for (auto& p : pending) MarkDone(p.get(), cause);
    }
    hub_->meeting.cv.notify_all();
    return true;
  }

  std::unique_ptr<Request> Recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    auto p = std::make_shared<Posting>();
    p->kind = Posting::Kind::kRecv;
    p->dst = data;
    return PostReceive(peer, tag, bytes, std::move(p));
  }

  std::unique_ptr<Request> RecvReduce(int peer, uint64_t tag, void* dst, const void* local,
                                      size_t bytes, const Reduction& reduction) override {
    if (!options_.direct_reduce) {
      return Transport::RecvReduce(peer, tag, dst, local, bytes, reduction);
    }
    auto p = std::make_shared<Posting>();
    p->kind = Posting::Kind::kRecvReduce;
    p->dst = dst;
    p->local = local;
    p->reduction = reduction;
    return PostReceive(peer, tag, bytes, std::move(p));
  }

 private:
  Status AbortCause() const {
    std::lock_guard<std::mutex> lock(hub_->meeting.mu);
    return hub_->abort_cause;
  }

  void CheckPeer(int peer) const {
    LOOM_CHECK(peer >= 0 && peer < nranks_ && peer != rank_, "bad peer ", peer, " for rank ", rank_,
               " of ", nranks_);
  }

  std::unique_ptr<Request> PostReceive(int peer, uint64_t tag, size_t bytes,
                                       std::shared_ptr<Posting> p) {
    CheckPeer(peer);
    p->rank = rank_;
    p->tag = tag;
    p->bytes = bytes;
    const Key key{peer, tag};
    Mailbox& mb = hub_->mailboxes[rank_];
    std::shared_ptr<Posting> match;
    {
      std::lock_guard<std::mutex> lock(mb.mu);
      if (hub_->aborted.load()) {
        p->queued = false;
        MarkDone(p.get(), AbortCause());
        return std::make_unique<InProcessRequest>(hub_, rank_, key, /*is_send=*/false, std::move(p),
                                                  rank_);
      }
      match = PopFirst(mb.sends[peer], tag);
      if (!match) mb.recvs[peer].push_back(p);
    }
    if (match) {
      p->queued = false;
      Matched(match, p);
    }
    return std::make_unique<InProcessRequest>(hub_, rank_, key, /*is_send=*/false, std::move(p),
                                              rank_);
  }

  // A send and a receive this rank's post just matched: a small transfer moves now, on this
  // thread; a large one (handoff_bytes, host memory) is handed to the receive, which moves it
  // when it waits (or the waiting sender takes it). Handing it also where this rank posted the
  // receive keeps the rank's own sends, posted next and perhaps awaited by the peer, from
  // queueing behind a copy.
  void Matched(const std::shared_ptr<Posting>& send, const std::shared_ptr<Posting>& recv) {
    if (send->bytes < options_.handoff_bytes || !hub_->memory->host()) {
      Transfer(*hub_->memory, rank_, send.get(), recv.get());
      return;
    }
    {
      std::lock_guard<std::mutex> lock(recv->mu);
      recv->handed_send = send;
    }
    recv->handed.store(true, std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(send->mu);
      send->handed_recv = recv;
    }
    recv->cv.notify_all();
    send->cv.notify_all();
  }

  std::shared_ptr<Hub> hub_;
  int rank_;
  int nranks_;
  InProcessTransportOptions options_;
  // One meeting of the ranks on the native board (RunNative, Meet): `native` runs there when
  // given (and, with a signature, when every rank's signature equals rank 0's).
  Status RunSlot(const NativeCollective* native, const void* signature, size_t bytes, void* all,
                 Deadline deadline);
  // RunSlot's phases: this rank's arrival at the slot of generation `gen`; the wait for the
  // others (an error when the meeting failed: deadline, abort, or a peer that gave up).
  void Arrive(MeetSlot& slot, uint64_t gen);
  Status AwaitMeeting(MeetSlot& slot, bool with_signature, Deadline deadline);

  uint64_t native_calls_ = 0;
};

// Outputs at least this large (all ranks' together) are written with streaming stores: they
// would not stay in the caches anyway, and a streaming store skips reading each line before
// writing it (a third of an allreduce's memory traffic otherwise).
constexpr size_t kStreamingMinBytes = kInProcessNativeStreamingBytes;

// One block of a large native call: elements [begin, begin + len) of part `part`, read from the
// ranks' inputs and written into their outputs (the ways are described above RunSlot).
void RunNativeBlock(const NativeCollective& call, const MeetEntry* entries, int n, int part,
                    size_t begin, size_t len, bool streaming, std::vector<const char*>* inputs,
                    std::vector<char*>* outputs) {
  const size_t elem = DataTypeSize(call.dtype);
  const Reduction reduction{call.dtype, call.op};
  auto in_at = [&](int rank, size_t element) {
    return static_cast<const char*>(entries[rank].send) + element * elem;
  };
  auto out_at = [&](int rank, size_t element) {
    return static_cast<char*>(entries[rank].recv) + element * elem;
  };
  inputs->clear();
  outputs->clear();
  switch (call.kind) {
    case Collective::kAllReduce:
    case Collective::kReduce:
      for (int p = 0; p < n; ++p) inputs->push_back(in_at(p, begin));
      if (call.kind == Collective::kAllReduce) {
        for (int p = 0; p < n; ++p) outputs->push_back(out_at(p, begin));
      } else {
        outputs->push_back(out_at(call.root, begin));
      }
      ReduceInto(reduction, *inputs, *outputs, len, n, streaming);
      break;
    case Collective::kReduceScatter:
      for (int p = 0; p < n; ++p) inputs->push_back(in_at(p, part * call.count + begin));
      outputs->push_back(out_at(part, begin));
      ReduceInto(reduction, *inputs, *outputs, len, n, streaming);
      break;
    case Collective::kAllGather:
      for (int p = 0; p < n; ++p) outputs->push_back(out_at(p, part * call.count + begin));
      CopyInto(in_at(part, begin), *outputs, len * elem, streaming);
      break;
    case Collective::kBroadcast:
      for (int p = 0; p < n; ++p) outputs->push_back(out_at(p, begin));
      CopyInto(in_at(call.root, begin), *outputs, len * elem, streaming);
      break;
    default:  // not a native collective (SupportsNative)
      break;
  }
}

// A large native call on every rank's memory: this rank claims blocks from the slot's counter
// until none is left, then waits until every block is written (by whichever ranks did them).
void RunNativeBlocks(const NativeCollective& call, MeetSlot& slot, Meeting& board, int n) {
  const MeetEntry* entries = slot.entries.get();
  const size_t elem = DataTypeSize(call.dtype);
  const bool streaming = meeting::NativeOutputBytes(call, n) >= kStreamingMinBytes;
  // The work is cut into blocks of at most kInProcessNativeBlockBytes per operand, smaller
  // where the call has fewer blocks than ranks that run at once (NativeBlockElements); part p of
  // the collective (reducescatter: output block p; allgather: input of rank p; otherwise the whole
  // buffer) has `per_part` blocks. Ranks claim blocks from a shared counter until none is left,
  // so the ranks whose threads are running do the work and none waits for a descheduled peer's
  // share.
  const int parts =
      call.kind == Collective::kReduceScatter || call.kind == Collective::kAllGather ? n : 1;
  const size_t block = NativeBlockElements(call.count, elem, parts, board.workers);
  const size_t per_part = (call.count + block - 1) / block;
  const size_t blocks = per_part * parts;
  std::vector<const char*> inputs;
  std::vector<char*> outputs;
  size_t done_here = 0;
  for (size_t b = slot.next_block.fetch_add(1); b < blocks; b = slot.next_block.fetch_add(1)) {
    ++done_here;
    const size_t begin = (b % per_part) * block;
    RunNativeBlock(call, entries, n, static_cast<int>(b / per_part), begin,
                   std::min(block, call.count - begin), streaming, &inputs, &outputs);
  }
  // Done when every block is written (by whichever ranks did them).
  if (done_here > 0) {
    if (streaming) StreamCopyFence();
    if (slot.blocks_done.fetch_add(done_here, std::memory_order_acq_rel) + done_here == blocks)
      board.Wake();
  }
  board.WaitUntil([&] { return slot.blocks_done.load(std::memory_order_acquire) == blocks; });
}

// The in-process meeting and native collectives. Each rank publishes its entry in the call's
// slot (Meeting) and waits until all have. Signatures are compared first. A small native call
// (RunsFromCopies) is then computed by every rank from the copies in the slot, and the call is
// over. A larger one works directly on every rank's memory: the ranks claim blocks of the whole
// collective from a shared counter and wait until every block is written (a peer may be writing
// into this rank's buffers until then; a rank that found no block left does not wait for the
// others to be scheduled). Per block:
//   allreduce:     reduce the block of all N inputs and write it into all N outputs: N·S bytes
//                  read and N·S written in total, the minimum for any allreduce (the ring and
//                  the tree move about 15·S for N = 4);
//   reducescatter: reduce the block of all inputs into the output of the rank that owns it;
//   reduce:        reduce the block of all inputs into the root's output;
//   allgather:     copy the block of rank p's input into every output;
//   broadcast:     copy the block of the root's input into every output.
// Outputs too large for the caches are written with streaming stores.
// The meeting ends at the deadline (a rank that never calls): the rank then marks the slot
// abandoned, unless every rank arrived meanwhile, so that no late rank touches the buffers of
// one that gave up (the count and the mark share one word). The wait for the blocks has no
// deadline: it only waits for memory copies in progress.
Status InProcessTransport::RunSlot(const NativeCollective* native, const void* signature,
                                   size_t sig_bytes, void* all, Deadline deadline) {
  const int n = nranks_;
  const uint64_t seq = native_calls_++;
  MeetSlot& slot = hub_->meeting.slots[seq % kMeetSlots];
  if (signature && sig_bytes > kMeetSignatureBytes) {
    return Internal("call signature of ", sig_bytes, " bytes is larger than the ",
                    kMeetSignatureBytes, " a meeting holds");
  }
  const bool from_copies = native && hub_->memory->host() && RunsFromCopies(*native, n);
  Publish(slot.entries[rank_], native, signature, sig_bytes, from_copies, rank_, n);
  Arrive(slot, seq & kGenMask);
  LOOM_RETURN_IF_ERROR(AwaitMeeting(slot, signature != nullptr, deadline));
  const MeetEntry* entries = slot.entries.get();
  if (signature) {
    LOOM_RETURN_IF_ERROR(GatherSignatures(entries, n, sig_bytes, all));
    if (native == nullptr) return Status::OK();
  }
  if (from_copies) {
    RunFromCopies(*native, entries, rank_, n);
    return Status::OK();
  }
  RunNativeBlocks(*native, slot, hub_->meeting, n);
  return Status::OK();
}

void InProcessTransport::Arrive(MeetSlot& slot, uint64_t gen) {
  const uint64_t state = meeting::Arrive(slot, gen);
  if ((state & kCountMask) == static_cast<uint64_t>(nranks_)) hub_->meeting.Wake();
}

Status InProcessTransport::AwaitMeeting(MeetSlot& slot, bool with_signature, Deadline deadline) {
  const int n = nranks_;
  Meeting& board = hub_->meeting;
  bool met = board.WaitUntil(
      [&] {
        const uint64_t s = slot.state.load();
        return meeting::MeetComplete(s, n) || (s & kAbandonedBit) || hub_->aborted.load();
      },
      deadline);
  if (meeting::MeetComplete(slot.state.load(), n)) return Status::OK();
  // Give up (deadline or abort) unless every rank arrived meanwhile.
  const uint64_t state = meeting::Abandon(slot, n);
  if (meeting::MeetComplete(state, n)) return Status::OK();
  board.Wake();
  if (hub_->aborted.load()) return AbortCause();
  return meeting::MeetFailure(state, n, with_signature, /*timed_out=*/!met);
}

}  // namespace

std::shared_ptr<RankMemory> HostRankMemory() { return std::make_shared<HostMemory>(); }

std::vector<std::unique_ptr<Transport>> CreateInProcessTransports(
    int nranks, const InProcessTransportOptions& options, std::shared_ptr<RankMemory> memory) {
  LOOM_CHECK(nranks >= 1, "nranks must be positive, got ", nranks);
  LOOM_CHECK(static_cast<uint64_t>(nranks) <= kMaxMeetRanks, "at most ", kMaxMeetRanks,
             " in-process ranks, got ", nranks);
  if (memory == nullptr) memory = HostRankMemory();
  auto hub = std::make_shared<Hub>(nranks, std::move(memory));
  std::vector<std::unique_ptr<Transport>> out;
  out.reserve(nranks);
  for (int r = 0; r < nranks; ++r) {
    out.push_back(std::make_unique<InProcessTransport>(hub, r, nranks, options));
  }
  return out;
}

}  // namespace loom::collective
