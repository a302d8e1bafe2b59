#include "collective/spin.h"
#include "collective/transport/inprocess.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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
  bool queued = true;  // guarded by the mailbox mutex
  bool done = false;   // guarded by mu
  Status status;       // guarded by mu
  std::atomic<bool> finished{false};  // done, for waits that poll before they lock
};

struct Key {
  int src;
  uint64_t tag;
  bool operator==(const Key& o) const { return src == o.src && tag == o.tag; }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    return std::hash<uint64_t>()(k.tag * 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(k.src));
  }
};
using Queue = std::unordered_map<Key, std::deque<std::shared_ptr<Posting>>, KeyHash>;

// Everything addressed to one rank: unmatched sends to it and its unmatched receives.
struct Mailbox {
  std::mutex mu;
  Queue sends;
  Queue recvs;
};

// One native collective while its ranks meet: every rank's buffers, published before anyone
// touches them and kept until every rank has finished writing.
struct NativeSlot {
  std::vector<const void*> send;
  std::vector<void*> recv;
  std::vector<std::string> signatures;  // Meet: each rank's, copied in when it arrives
  int published = 0, left = 0;
  std::atomic<int> arrived{0};  // published, for waits that poll before they lock
  bool abandoned = false;  // a rank gave up waiting: the others must not touch its buffers
  std::atomic<size_t> next_block{0};   // the next block of work to claim
  std::atomic<size_t> blocks_done{0};  // blocks whose results are written
};

// Native calls of one group, matched by their per-rank sequence number (every rank issues them
// in the same order: the communicator checked the signatures first).
struct NativeBoard {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, NativeSlot> slots;
};

struct Hub {
  Hub(int n, std::shared_ptr<RankMemory> memory) : mailboxes(n), memory(std::move(memory)) {}
  std::vector<Mailbox> mailboxes;
  std::shared_ptr<RankMemory> memory;
  NativeBoard native;
  // Set once by Transport::Abort (guarded by native.mu; `aborted` is read without it).
  std::atomic<bool> aborted{false};
  Status abort_cause;
};

class HostMemory final : public RankMemory {
 public:
  const char* name() const override { return GetTransport(TransportId::kInProcess).display; }
  bool host() const override { return true; }
  Status Copy(int, int, void* dst, int, const void* src, size_t bytes) override {
    if (dst != src && bytes > 0) std::memmove(dst, src, bytes);
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

std::shared_ptr<Posting> PopFront(Queue& queue, const Key& key) {
  auto it = queue.find(key);
  if (it == queue.end()) return nullptr;
  std::shared_ptr<Posting> p = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queue.erase(it);
  p->queued = false;
  return p;
}

class InProcessRequest final : public Request {
 public:
  InProcessRequest(std::shared_ptr<Hub> hub, int mailbox, Key key, bool is_send,
                   std::shared_ptr<Posting> posting)
      : hub_(std::move(hub)),
        mailbox_(mailbox),
        key_(key),
        is_send_(is_send),
        posting_(std::move(posting)) {}

  Status Wait(Deadline deadline) override {
    Posting* p = posting_.get();
    SpinUntil([p] { return p->finished.load(std::memory_order_acquire); });
    std::unique_lock<std::mutex> lock(p->mu);
    if (!p->cv.wait_until(lock, deadline, [p] { return p->done; })) {
      return Timeout(is_send_ ? "send to rank " : "receive from rank ",
                     is_send_ ? mailbox_ : key_.src, " (tag ", key_.tag, ") did not complete");
    }
    return p->status;
  }

  void Cancel() override {
    Mailbox& mb = hub_->mailboxes[mailbox_];
    {
      std::lock_guard<std::mutex> lock(mb.mu);
      if (posting_->queued) {
        Queue& queue = is_send_ ? mb.sends : mb.recvs;
        auto it = queue.find(key_);
        if (it != queue.end()) {
          auto& dq = it->second;
          dq.erase(std::remove(dq.begin(), dq.end(), posting_), dq.end());
          if (dq.empty()) queue.erase(it);
        }
        posting_->queued = false;
        MarkDone(posting_.get(), FailedPrecondition("cancelled"));
        return;
      }
    }
    // Matched: the peer may be copying right now; the buffers are free once it is done.
    std::unique_lock<std::mutex> lock(posting_->mu);
    posting_->cv.wait(lock, [this] { return posting_->done; });
  }

 private:
  std::shared_ptr<Hub> hub_;
  int mailbox_;  // the receiving rank's mailbox that holds (or held) the posting
  Key key_;
  bool is_send_;
  std::shared_ptr<Posting> posting_;
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
        return std::make_unique<InProcessRequest>(hub_, peer, key, /*is_send=*/true, std::move(p));
      }
      match = PopFront(mb.recvs, key);
      if (!match) mb.sends[key].push_back(p);
    }
    if (match) {
      p->queued = false;
      Transfer(*hub_->memory, rank_, p.get(), match.get());
    }
    return std::make_unique<InProcessRequest>(hub_, peer, key, /*is_send=*/true, std::move(p));
  }

  bool Abort(const Status& cause) override {
    {
      std::lock_guard<std::mutex> lock(hub_->native.mu);
      if (hub_->aborted.load()) return true;
      hub_->abort_cause = cause;
      hub_->aborted.store(true);
    }
    // Every queued posting of the group ends now; matched ones are finishing their copy.
    for (Mailbox& mb : hub_->mailboxes) {
      std::vector<std::shared_ptr<Posting>> pending;
      {
        std::lock_guard<std::mutex> lock(mb.mu);
        for (Queue* q : {&mb.sends, &mb.recvs}) {
          for (auto& [key, postings] : *q)
            for (auto& p : postings) {
              p->queued = false;
              pending.push_back(p);
            }
          q->clear();
        }
      }
      for (auto& p : pending) MarkDone(p.get(), cause);
    }
    hub_->native.cv.notify_all();
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
    std::lock_guard<std::mutex> lock(hub_->native.mu);
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
        return std::make_unique<InProcessRequest>(hub_, rank_, key, /*is_send=*/false,
                                                  std::move(p));
      }
      match = PopFront(mb.sends, key);
      if (!match) mb.recvs[key].push_back(p);
    }
    if (match) {
      p->queued = false;
      Transfer(*hub_->memory, rank_, match.get(), p.get());
    }
    return std::make_unique<InProcessRequest>(hub_, rank_, key, /*is_send=*/false, std::move(p));
  }

  std::shared_ptr<Hub> hub_;
  int rank_;
  int nranks_;
  InProcessTransportOptions options_;
  // One meeting of the ranks on the native board (RunNative, Meet): `native` runs there when
  // given (and, with a signature, when every rank's signature equals rank 0's).
  Status RunSlot(const NativeCollective* native, const void* signature, size_t bytes,
                 void* all, Deadline deadline);

  uint64_t native_calls_ = 0;
};

// A native collective's unit of work: this many bytes of each operand.
constexpr size_t kNativeBlockBytes = 16 << 10;

// Outputs larger than this (all ranks' together) are written with streaming stores: they would
// not stay in the caches anyway, and a streaming store skips reading each line before writing
// it (a third of an allreduce's memory traffic otherwise).
constexpr size_t kStreamingMinBytes = size_t{16} << 20;

// memcpy for a destination that will not be read again soon.
void StreamCopy(char* dst, const char* src, size_t bytes) {
#if defined(__SSE2__)
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

// Makes streaming stores visible to the other ranks' threads (before the finish barrier).
void StreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// Writes one block to an output: streaming stores for outputs that will not stay in cache.
void Store(char* out, const char* src, size_t bytes, bool streaming) {
  if (streaming) {
    StreamCopy(out, src, bytes);
  } else {
    std::memcpy(out, src, bytes);
  }
}

// Reduces one block of `inputs` (count elements each, at most kNativeBlockBytes) into a buffer
// that stays in L1, finalizes it (avg) and writes it to every output: each input element is read
// once and each output element written once, whatever the number of ranks.
void ReduceInto(const Reduction& reduction, const std::vector<const char*>& inputs,
                const std::vector<char*>& outputs, size_t count, int nranks, bool streaming) {
  thread_local std::vector<unsigned char> acc;
  const size_t bytes = count * DataTypeSize(reduction.dtype);
  acc.resize(bytes);
  if (inputs.size() == 1) {
    std::memcpy(acc.data(), inputs[0], bytes);
  } else {
    collective::Reduce(reduction, acc.data(), inputs[0], inputs[1], count);
    for (size_t i = 2; i < inputs.size(); ++i)
      collective::Reduce(reduction, acc.data(), acc.data(), inputs[i], count);
  }
  collective::Finalize(reduction, acc.data(), count, nranks);
  for (char* out : outputs) Store(out, reinterpret_cast<const char*>(acc.data()), bytes, streaming);
}

// Copies one block from src to every output; an output that is the source itself is skipped.
void CopyInto(const char* src, const std::vector<char*>& outputs, size_t bytes, bool streaming) {
  for (char* out : outputs) {
    if (out != src) Store(out, src, bytes, streaming);
  }
}

// The in-process native collectives. The ranks publish their buffers on the hub's board and
// wait until all have; then they claim blocks of the whole collective from a shared counter and
// work directly on every rank's memory, and wait until every block is written (a peer may be
// writing into this rank's buffers until then; a rank that found no block left does not wait
// for the others to be scheduled). Per block:
//   allreduce:     reduce the block of all N inputs and write it into all N outputs: N·S bytes
//                  read and N·S written in total, the minimum for any allreduce (the ring and
//                  the tree move about 15·S for N = 4);
//   reducescatter: reduce the block of all inputs into the output of the rank that owns it;
//   reduce:        reduce the block of all inputs into the root's output;
//   allgather:     copy the block of rank p's input into every output;
//   broadcast:     copy the block of the root's input into every output.
// Outputs too large for the caches are written with streaming stores.
// The first wait ends at the deadline (a rank that never calls): the slot is then marked
// abandoned so that no late rank touches the buffers of one that gave up. The second wait has
// no deadline: it only waits for memory copies in progress.
Status InProcessTransport::RunSlot(const NativeCollective* native, const void* signature,
                                   size_t sig_bytes, void* all, Deadline deadline) {
  const int n = nranks_;
  const uint64_t seq = native_calls_++;
  NativeBoard& board = hub_->native;
  NativeSlot* slot;
  auto leave = [&](std::unique_lock<std::mutex>& lock) {
    if (++slot->left == n) board.slots.erase(seq);
  };
  {
    std::unique_lock<std::mutex> lock(board.mu);
    slot = &board.slots[seq];
    if (slot->send.empty()) {
      slot->send.assign(n, nullptr);
      slot->recv.assign(n, nullptr);
      slot->signatures.assign(n, std::string());
    }
    slot->send[rank_] = native ? native->send : nullptr;
    slot->recv[rank_] = native ? native->recv : nullptr;
    if (signature) slot->signatures[rank_].assign(static_cast<const char*>(signature), sig_bytes);
    ++slot->published;
    slot->arrived.store(slot->published, std::memory_order_release);
    board.cv.notify_all();
    if (slot->published != n) {
      lock.unlock();
      SpinUntil([&] {
        return slot->arrived.load(std::memory_order_acquire) == n || hub_->aborted.load();
      });
      lock.lock();
    }
    const bool met = board.cv.wait_until(lock, deadline, [&] {
      return slot->published == n || slot->abandoned || hub_->aborted.load();
    });
    if (met && hub_->aborted.load() && slot->published != n) {
      slot->abandoned = true;
      board.cv.notify_all();
      leave(lock);
      return hub_->abort_cause;
    }
    if (!met || slot->abandoned) {
      const bool timed_out = !met;
      slot->abandoned = true;
      board.cv.notify_all();
      leave(lock);
      if (timed_out)
        return Timeout(signature ? "collective" : "native collective", ": only ",
                       slot->published, " of ", n, " ranks arrived");
      // At a meeting a peer that gave up timed out waiting for the same missing rank.
      if (signature)
        return Timeout("collective: only ", slot->published, " of ", n,
                       " ranks arrived (another rank gave up waiting first)");
      return FailedPrecondition("native collective: a peer gave up waiting for the others");
    }
    if (signature) {
      // Every rank has published: the signatures no longer change while the slot lives.
      bool same = true;
      for (int r = 0; r < n; ++r) {
        const std::string& sig = slot->signatures[r];
        if (sig.size() != sig_bytes) {
          same = false;
          std::memset(static_cast<char*>(all) + r * sig_bytes, 0, sig_bytes);
          continue;
        }
        std::memcpy(static_cast<char*>(all) + r * sig_bytes, sig.data(), sig_bytes);
        same &= sig == slot->signatures[0];
      }
      if (!same || native == nullptr) {
        leave(lock);
        if (!same) return InvalidArgument("the ranks' call signatures differ");
        return Status::OK();
      }
    }
  }
  const NativeCollective& call = *native;
  const size_t elem = DataTypeSize(call.dtype);
  const Reduction reduction{call.dtype, call.op};
  // All ranks' outputs together, as the caches see them.
  const size_t total_out = call.kind == Collective::kReduce      ? call.count * elem
                           : call.kind == Collective::kAllGather ? call.count * elem * n * n
                                                                 : call.count * elem * n;
  const bool streaming = total_out >= kStreamingMinBytes;
  // The work is cut into blocks of kNativeBlockBytes per operand; part p of the collective
  // (reducescatter: output block p; allgather: input of rank p; otherwise the whole buffer)
  // has `per_part` blocks. Ranks claim blocks from a shared counter until none is left, so the
  // ranks whose threads are running do the work and none waits for a descheduled peer's share.
  const size_t block = std::max<size_t>(1, kNativeBlockBytes / elem);
  const int parts =
      call.kind == Collective::kReduceScatter || call.kind == Collective::kAllGather ? n : 1;
  const size_t per_part = (call.count + block - 1) / block;
  const size_t blocks = per_part * parts;
  auto in_at = [&](int rank, size_t element) {
    return static_cast<const char*>(slot->send[rank]) + element * elem;
  };
  auto out_at = [&](int rank, size_t element) {
    return static_cast<char*>(slot->recv[rank]) + element * elem;
  };
  std::vector<const char*> inputs;
  std::vector<char*> outputs;
  size_t done_here = 0;
  for (size_t b = slot->next_block.fetch_add(1); b < blocks; b = slot->next_block.fetch_add(1)) {
    ++done_here;
    const int part = static_cast<int>(b / per_part);
    const size_t begin = (b % per_part) * block;
    const size_t len = std::min(block, call.count - begin);
    inputs.clear();
    outputs.clear();
    switch (call.kind) {
      case Collective::kAllReduce:
      case Collective::kReduce:
        for (int p = 0; p < n; ++p) inputs.push_back(in_at(p, begin));
        if (call.kind == Collective::kAllReduce) {
          for (int p = 0; p < n; ++p) outputs.push_back(out_at(p, begin));
        } else {
          outputs.push_back(out_at(call.root, begin));
        }
        ReduceInto(reduction, inputs, outputs, len, n, streaming);
        break;
      case Collective::kReduceScatter:
        for (int p = 0; p < n; ++p) inputs.push_back(in_at(p, part * call.count + begin));
        outputs.push_back(out_at(part, begin));
        ReduceInto(reduction, inputs, outputs, len, n, streaming);
        break;
      case Collective::kAllGather:
        for (int p = 0; p < n; ++p) outputs.push_back(out_at(p, part * call.count + begin));
        CopyInto(in_at(part, begin), outputs, len * elem, streaming);
        break;
      case Collective::kBroadcast:
        for (int p = 0; p < n; ++p) outputs.push_back(out_at(p, begin));
        CopyInto(in_at(call.root, begin), outputs, len * elem, streaming);
        break;
    }
  }
  // Done when every block is written (by whichever ranks did them): a rank that found no work
  // left does not wait for the others to be scheduled.
  if (done_here > 0) {
    if (streaming) StreamFence();
    if (slot->blocks_done.fetch_add(done_here, std::memory_order_acq_rel) + done_here == blocks) {
      std::lock_guard<std::mutex> lock(board.mu);
      board.cv.notify_all();
    }
  }
  SpinUntil([&] { return slot->blocks_done.load(std::memory_order_acquire) == blocks; });
  std::unique_lock<std::mutex> lock(board.mu);
  board.cv.wait(lock, [&] { return slot->blocks_done.load(std::memory_order_acquire) == blocks; });
  leave(lock);
  return Status::OK();
}

}  // namespace

std::shared_ptr<RankMemory> HostRankMemory() { return std::make_shared<HostMemory>(); }

std::vector<std::unique_ptr<Transport>> CreateInProcessTransports(
    int nranks, const InProcessTransportOptions& options, std::shared_ptr<RankMemory> memory) {
  LOOM_CHECK(nranks >= 1, "nranks must be positive, got ", nranks);
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
