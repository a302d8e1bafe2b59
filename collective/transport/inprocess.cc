#include "collective/transport/inprocess.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>

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

struct Hub {
  Hub(int n, std::shared_ptr<RankMemory> memory) : mailboxes(n), memory(std::move(memory)) {}
  std::vector<Mailbox> mailboxes;
  std::shared_ptr<RankMemory> memory;
};

class HostMemory final : public RankMemory {
 public:
  const char* name() const override { return "in-process"; }
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
  std::shared_ptr<void> Allocate(int, size_t bytes) override {
    void* p = std::calloc(std::max<size_t>(bytes, 1), 1);
    if (p == nullptr) return nullptr;
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
};

void MarkDone(Posting* p, const Status& status) {
  {
    std::lock_guard<std::mutex> lock(p->mu);
    p->done = true;
    p->status = status;
  }
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
    status = memory.Reduce(performer, recv->reduction, recv->rank, recv->dst, recv->local,
                           send->rank, send->src,
                           send->bytes / DataTypeSize(recv->reduction.dtype));
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
      match = PopFront(mb.recvs, key);
      if (!match) mb.sends[key].push_back(p);
    }
    if (match) {
      p->queued = false;
      Transfer(*hub_->memory, rank_, p.get(), match.get());
    }
    return std::make_unique<InProcessRequest>(hub_, peer, key, /*is_send=*/true, std::move(p));
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
};

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
