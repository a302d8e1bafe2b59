#include "collective/communicator.h"

#include "base/copy.h"
#include "base/cpu_affinity.h"
#include "collective/transport_registry.h"

#include <cstring>

#include "collective/algorithms/algorithms.h"
#include "collective/channels.h"
#include "collective/schedule.h"
#include "collective/selector.h"
#include "collective/spin.h"

namespace loom::collective {

namespace internal {
// The way from a Work to its communicator for a Wait that runs queued calls itself: the
// communicator clears `comm` (under `mu`) once its worker has stopped, and a waiting thread holds
// `mu` while it runs calls, so the communicator cannot go away under it.
struct StealGate {
  std::mutex mu;
  Communicator* comm = nullptr;
  std::chrono::milliseconds min_wait{0};  // the calls' timeout (set once): shorter waits only wait
};

struct WorkState {
  explicit WorkState(bool spin = false) : spin(spin) {}
  const bool spin;  // Wait polls before it sleeps
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::atomic<bool> completed{false};  // done, for waits that poll before they lock
  Status status;
  Clock::time_point started{};   // when the worker began running the call
  Clock::time_point finished{};  // when it completed
  // A queued call whose Wait may run it (and the calls before it) on the waiting thread; null
  // for calls that ran on the caller's thread or cannot be taken over.
  std::shared_ptr<StealGate> gate;

  // Complete before anyone else holds this state (a call run on the caller's thread): no lock,
  // no one to wake.
  void CompleteUnshared(Status s) {
    done = true;
    finished = Clock::now();
    status = std::move(s);
    completed.store(true, std::memory_order_release);
  }

  void Complete(Status s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      finished = Clock::now();
      if (started == Clock::time_point{}) started = finished;
      status = std::move(s);
      // Under the lock too: whoever saw `done` sees `completed` (Work::IsCompleted).
      completed.store(true, std::memory_order_release);
    }
    cv.notify_all();
  }
};
}  // namespace internal

using internal::CallArgs;

Status Work::Wait(std::chrono::milliseconds timeout) const {
  LOOM_CHECK(state_ != nullptr, "Wait on an empty Work");
  // Completed (the status was written before `completed`, and never after): no lock, no clock.
  if (state_->completed.load(std::memory_order_acquire)) return state_->status;
  // Still queued and the worker idle: run it here rather than wake the worker and sleep (a wait
  // at least as long as the call's own deadline, which then bounds it).
  if (state_->gate != nullptr && timeout >= state_->gate->min_wait) {
    {
      std::lock_guard<std::mutex> gate(state_->gate->mu);
      if (state_->gate->comm != nullptr) state_->gate->comm->RunQueuedUntil(*state_);
    }
    if (state_->completed.load(std::memory_order_acquire)) return state_->status;
  }
  // A small call completes within microseconds: poll before sleeping on the condition.
  if (state_->spin && timeout >= kSpinBudget)
    SpinUntil([this] { return state_->completed.load(std::memory_order_acquire); });
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [this] { return state_->done; })) {
    return Timeout("Work::Wait gave up after ", timeout.count(), " ms; the call is still running");
  }
  return state_->status;
}

std::pair<Clock::time_point, Clock::time_point> Work::RunSpan() const {
  LOOM_CHECK(state_ != nullptr, "RunSpan on an empty Work");
  std::lock_guard<std::mutex> lock(state_->mu);
  return {state_->started, state_->finished};
}

bool Work::IsCompleted() const {
  LOOM_CHECK(state_ != nullptr, "IsCompleted on an empty Work");
  return state_->completed.load(std::memory_order_acquire);
}

bool Communicator::Abort(const Status& cause) {
  return transport_->Abort(Aborted("rank ", rank_, " of the group failed: ", cause.message()));
}

StatusOr<std::shared_ptr<const CommPlan>> CommPlan::Create(const Topology& topology,
                                                           double tree_link_penalty) {
  auto plan = std::make_shared<CommPlan>();
  plan->topology = topology;
  plan->ring_order = BuildRingOrder(topology);
  std::vector<StatusOr<Tree>> per_root = BuildTreeForEachRoot(topology);
  for (int root = 0; root < topology.size(); ++root) {
    StatusOr<Tree>& tree = per_root[root];
    // Without a topology tree (sparse link matrix, or a search that gave up) fall back to the
    // chain along the ring.
    if (!tree.ok())
      plan->notes.push_back(
          StrCat(tree.status().message(), ": falling back to the chain along the ring"));
    plan->trees.push_back(tree.ok() ? std::move(tree).value() : ChainTree(plan->ring_order, root));
  }
  StatusOr<std::vector<Tree>> trees = BuildTrees(topology, TreeBuilderOptions{tree_link_penalty});
  if (!trees.ok())
    plan->notes.push_back(
        StrCat("multi-trees: ", trees.status().message(), ": falling back to the trees above"));
  plan->multi_trees = trees.ok() ? std::move(trees).value() : plan->trees;
  plan->channels = BuildChannelRings(topology);
  return std::shared_ptr<const CommPlan>(std::move(plan));
}

InExchange SignatureExchangeMode(Collective kind, size_t count, DataType dtype, int nranks,
                                 bool doubling) {
  const size_t elem = DataTypeSize(dtype), bytes = count * elem;
  const size_t peers = static_cast<size_t>(std::max(nranks - 1, 0));
  if (doubling && kind == Collective::kAllReduce && nranks >= 4 && bytes <= kInExchangeBytes)
    return InExchange::kDoubling;
  const bool kind_ok = kind == Collective::kAllReduce || kind == Collective::kReduce ||
                       kind == Collective::kBroadcast;
  if (kind_ok && bytes <= kInExchangeBytes && bytes * peers <= kInExchangeTotalBytes)
    return InExchange::kWhole;
  if (kind != Collective::kAllReduce || nranks < 2) return InExchange::kNo;
  const size_t block = (count + nranks - 1) / nranks * elem;
  return block <= kInExchangeBytes && block * peers <= kInExchangeTotalBytes ? InExchange::kSplit
                                                                             : InExchange::kNo;
}

// One issued call: its arguments and, for collectives, its sequence number.
struct Communicator::Call {
  CallArgs args;
  bool from_auto = false;  // the algorithm was kAuto when issued (resolved since)
  uint64_t seq = 0;        // collectives: 1, 2, ... in issue order; point-to-point: 0
  uint64_t step = 0;       // the caller's training step when issued (set_step)
};

namespace {

// What each rank tells the others before a collective runs. Fields that do not apply to a kind
// hold fixed values so that they never differ.
struct Signature {
  int32_t kind;
  int32_t dtype;
  int32_t op;
  int32_t root;
  int32_t algorithm;
  int32_t tag;
  uint64_t count;
  uint64_t seq;
  uint64_t step;
  bool operator==(const Signature& o) const { return std::memcmp(this, &o, sizeof o) == 0; }
};
static_assert(sizeof(Signature) == 48, "Signature must have no padding");

bool HasReduction(Collective k) {
  return k == Collective::kAllReduce || k == Collective::kReduce || k == Collective::kReduceScatter;
}
bool HasRoot(Collective k) { return k == Collective::kReduce || k == Collective::kBroadcast; }

Signature SignatureOf(const CallArgs& a, uint64_t seq, uint64_t step) {
  Signature s{};
  s.step = step;
  s.kind = static_cast<int32_t>(a.kind);
  s.dtype = a.kind == Collective::kBarrier ? -1 : static_cast<int32_t>(a.dtype);
  s.op = HasReduction(a.kind) ? static_cast<int32_t>(a.op) : -1;
  s.root = HasRoot(a.kind) ? a.root : -1;
  s.algorithm =
      a.kind == Collective::kBarrier || a.kind == Collective::kSend || a.kind == Collective::kRecv
          ? -1
          : static_cast<int32_t>(a.algorithm);
  s.tag = a.tag;
  s.count = a.count;
  s.seq = seq;
  return s;
}

// Signature::algorithm of a call that auto runs inside the signature exchange (see
// ExchangeSignatures): no other algorithm runs.
constexpr int32_t kInExchange = 1000;
constexpr int32_t kInSplitExchange = 1001;  // InExchange::kSplit
constexpr int32_t kInDoubling = 1002;       // InExchange::kDoubling

std::string Describe(const Signature& s) {
  const auto kind = static_cast<Collective>(s.kind);
  std::string out = StrCat(CollectiveCallName(kind), "(");
  if (kind != Collective::kBarrier) {
    out += StrCat("count=", s.count, ", dtype=", DataTypeName(static_cast<DataType>(s.dtype)));
  }
  if (s.op >= 0) out += StrCat(", op=", ReduceOpName(static_cast<ReduceOp>(s.op)));
  if (s.root >= 0) out += StrCat(", root=", s.root);
  if (s.tag >= 0) out += StrCat(", tag=", s.tag);
  if (s.algorithm == kInExchange) {
    out += ", algorithm=auto (in the signature exchange)";
  } else if (s.algorithm == kInSplitExchange) {
    out += ", algorithm=auto (split in the signature exchange)";
  } else if (s.algorithm == kInDoubling) {
    out += ", algorithm=auto (recursive doubling with the signatures)";
  } else if (s.algorithm >= 0) {
    out += StrCat(", algorithm=", AlgorithmName(static_cast<Algorithm>(s.algorithm)));
  }
  return out + ")";
}

// The error for a call whose rank `r` signed `theirs` where rank 0 signed `first`.
Status Mismatch(uint64_t seq, const Signature& first, int r, const Signature& theirs) {
  if (theirs.step != first.step)
    return InvalidArgument("collective #", seq, " pairs different training steps: rank 0 ",
                           "is in step ", first.step, ", rank ", r, " in step ", theirs.step,
                           " (did a rank go on after an error?)");
  return InvalidArgument("mismatched collective #", seq, ": rank 0 called ", Describe(first),
                         " but rank ", r, " called ", Describe(theirs));
}

// The verdict on every rank's signature of one call (all ranks see the same and reach it):
// the first rank whose signature differs from rank 0's.
Status CompareSignatures(const Signature* all, int n, const Signature& mine) {
  for (int r = 1; r < n; ++r)
    if (!(all[r] == all[0])) return Mismatch(mine.seq, all[0], r, all[r]);
  return Status::OK();
}

// Every rank sends its signature to every other rank, so every rank sees every call and all
// ranks reach the same verdict (and the same message) without further messages.
Status CheckSignatures(internal::Schedule& s, const Signature& mine) {
  const int n = s.nranks();
  auto* all = static_cast<Signature*>(s.HostScratch(n * sizeof(Signature)));
  all[s.rank()] = mine;
  for (int r = 0; r < n; ++r) {
    if (r == s.rank()) continue;
    s.PostRecv(r, internal::kSignature, &all[r], sizeof(Signature));
    s.PostSend(r, internal::kSignature, &all[s.rank()], sizeof(Signature));
  }
  LOOM_RETURN_IF_ERROR(s.WaitAll());
  return CompareSignatures(all, n, mine);
}

// The signature round of transports whose ranks do not meet (MPI): every rank sends every
// other rank its signature, followed by a small call's data (below), and receives into a
// Packet-sized buffer that accepts shorter messages, so that calls that disagree still
// arrive whole and fail with the mismatch, not a transport error; every rank then compares
// all the signatures (CompareSignatures).
//
// A small call that auto runs (RunsInSignatureExchange, on a transport with host buffers)
// travels in the packets: each rank reduces the n payloads in rank order (or takes the
// root's, for broadcast), so every rank computes the same bits and the call is complete after
// this one round -- one message latency instead of the signature round and then the
// algorithm's rounds.

//
// Where the transport has a tagged channel (Transport::signature_tag_max: MPI) the signature
// travels as the message's tag instead (SignatureTag, a hash of it), so a message holds only
// the call's data, or nothing: a 256-byte allreduce's message stays under Open MPI's 256-byte
// inline send limit (docs/PERF.md). Every rank again sees every rank's tag, so all reach the
// same verdict; when the tags disagree, every rank sends every other its full signature (tag 0)
// to name the calls (NameMismatch). Two different calls share a tag with a chance of about one
// in 2^31 on Open MPI (tags up to MPI_TAG_UB; the transport offers no channel below 2^24 tags);
// a count that differs is also caught by the message's length.

struct Packet {
  Signature sig;
  unsigned char payload[kInExchangeBytes];
};

// The signature as a tag in [1, max] (0 marks the full signatures of NameMismatch).
uint32_t SignatureTag(const Signature& s, uint32_t max) {
  uint64_t words[sizeof(Signature) / 8];
  std::memcpy(words, &s, sizeof s);
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (uint64_t w : words) {
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  return 1 + static_cast<uint32_t>(h % max);
}

// After a tagged round whose tags disagree (every rank saw the same tags, so every rank is
// here): the full signatures, on the same channel, to name the calls as CompareSignatures does.
Status NameMismatch(internal::Schedule& s, const Signature& mine, Transport::TaggedPeer* peers) {
  const int n = s.nranks(), me = s.rank();
  auto* sigs = static_cast<Signature*>(s.HostScratch(n * sizeof(Signature)));
  sigs[me] = mine;
  for (int r = 0; r < n; ++r)
    peers[r] = Transport::TaggedPeer{&sigs[me], sizeof(Signature), &sigs[r], sizeof(Signature)};
  LOOM_RETURN_IF_ERROR(s.transport().TaggedRound(0, peers, s.deadline()));
  for (int r = 0; r < n; ++r) {
    if (r != me && (peers[r].tag != 0 || peers[r].bytes != sizeof(Signature))) {
      return Internal("collective #", mine.seq, ": rank ", r, " sent ", peers[r].bytes,
                      " bytes with tag ", peers[r].tag, " where its full signature (tag 0, ",
                      sizeof(Signature), " bytes) was due");
    }
  }
  LOOM_RETURN_IF_ERROR(CompareSignatures(sigs, n, mine));
  return Internal("collective #", mine.seq,
                  ": the ranks' signature tags differ but their signatures agree");
}

InExchange ExchangeMode(const CallArgs& a, bool from_auto, const Transport& t,
                        const CommunicatorOptions& options) {
  if (!from_auto || !t.runs_schedules() || !t.host_buffers()) return InExchange::kNo;
  return SignatureExchangeMode(a.kind, a.count, a.dtype, t.nranks(), options.doubling_exchange);
}

// What one rank holds during a doubling exchange: the lowest and highest signature of the
// ranks combined so far, and their data reduced so far.
struct DoublingPacket {
  Signature lo, hi;
  unsigned char payload[kInExchangeBytes];
};

// A small allreduce by recursive doubling (InExchange::kDoubling; MPI's recursive doubling,
// with the signatures' range riding along). With n = 2^k + rem ranks, the first 2 rem fold in
// pairs (the even one hands its data to the odd one and gets the result back at the end), and
// the 2^k that remain exchange with the rank whose index differs in bit 0, 1, ... k - 1. Each
// pair reduces lower rank first, so every rank ends with the same bits. Every rank ends knowing
// the lowest and highest signature of all ranks: when they differ, every rank runs the full
// signature round, which names the calls, and no buffer is written.
Status DoublingExchange(internal::Schedule& s, const CallArgs& a, const Signature& mine) {
  const int n = s.nranks(), me = s.rank();
  const size_t elem = DataTypeSize(a.dtype), bytes = a.count * elem;
  const size_t len = 2 * sizeof(Signature) + bytes;
  auto* acc = static_cast<DoublingPacket*>(s.HostScratch(3 * sizeof(DoublingPacket)));
  DoublingPacket* in = acc + 1;
  DoublingPacket* out = acc + 2;
  acc->lo = acc->hi = mine;
  if (bytes > 0) CopyBytes(acc->payload, a.send, bytes);
  const Reduction red{a.dtype, a.op};
  auto less = [](const Signature& x, const Signature& y) {
    return std::memcmp(&x, &y, sizeof(Signature)) < 0;
  };
  // Folds `in` (from rank `from`) into acc; the data only while every signature agrees.
  auto combine = [&](int from) {
    const bool agree = in->lo == acc->lo && in->hi == acc->hi && acc->lo == acc->hi;
    if (less(in->lo, acc->lo)) acc->lo = in->lo;
    if (less(acc->hi, in->hi)) acc->hi = in->hi;
    if (agree && a.count > 0) {
      if (from < me) {
        Reduce(red, acc->payload, in->payload, acc->payload, a.count);
      } else {
        Reduce(red, acc->payload, acc->payload, in->payload, a.count);
      }
    }
  };
  // One exchange with `peer`: acc goes out (a copy, as acc changes once the peer's arrives).
  auto exchange = [&](int peer) -> Status {
    std::memcpy(out, acc, len);
    s.PostRecvUpTo(peer, internal::kSignature, in, sizeof(DoublingPacket));
    s.PostSend(peer, internal::kSignature, out, len);
    LOOM_RETURN_IF_ERROR(s.WaitAll());
    combine(peer);
    return Status::OK();
  };
  int pof2 = 1;
  while (pof2 * 2 <= n) pof2 *= 2;
  const int rem = n - pof2;
  int newrank = me - rem;
  if (me < 2 * rem) {
    if (me % 2 == 0) {
      s.PostSend(me + 1, internal::kSignature, acc, len);
      LOOM_RETURN_IF_ERROR(s.WaitAll());
      newrank = -1;
    } else {
      s.PostRecvUpTo(me - 1, internal::kSignature, in, sizeof(DoublingPacket));
      LOOM_RETURN_IF_ERROR(s.WaitAll());
      combine(me - 1);
      newrank = me / 2;
    }
  }
  if (newrank >= 0) {
    for (int mask = 1; mask < pof2; mask <<= 1) {
      const int peer_new = newrank ^ mask;
      LOOM_RETURN_IF_ERROR(exchange(peer_new < rem ? peer_new * 2 + 1 : peer_new + rem));
    }
  }
  if (me < 2 * rem) {
    if (me % 2 == 1) {
      s.PostSend(me - 1, internal::kSignature, acc, len);
    } else {
      s.PostRecvUpTo(me + 1, internal::kSignature, acc, sizeof(DoublingPacket));
    }
    LOOM_RETURN_IF_ERROR(s.WaitAll());
  }
  if (!(acc->lo == acc->hi)) {
    // Every rank is here: the full round names the calls.
    LOOM_RETURN_IF_ERROR(CheckSignatures(s, mine));
    return Internal("collective #", mine.seq,
                    ": the signatures' range differs but every rank's signature agrees");
  }
  if (bytes > 0) CopyBytes(a.recv, acc->payload, bytes);
  Finalize(red, a.recv, a.count, n);
  return Status::OK();
}

// What the parts of one signature round share (ExchangeSignatures).
struct SignatureRound {
  internal::Schedule& s;
  const CallArgs& a;
  const Signature& mine;
  InExchange mode;
  Transport::TaggedPeer* peers;  // null where signatures travel in the packets
  Packet* all;
  int n, me;
  size_t elem, bytes;
  internal::Ranges blocks;  // split calls: rank r's block

  // What rank `from`'s message to rank `to` holds besides the signature.
  size_t PayloadBytes(int from, int to) const {
    if (mode == InExchange::kSplit) return blocks[to].count * elem;
    if (mode == InExchange::kNo) return 0;
    return a.kind != Collective::kBroadcast || from == a.root ? bytes : 0;
  }
};

// Posts this rank's signature (and the data that travels with it) to every peer, and the
// receives of theirs (untagged rounds; a tagged round only fills `peers`).
void PostSignatures(SignatureRound& r) {
  const CallArgs& a = r.a;
  Packet* split = r.all + r.n;  // split[p]: what peer p gets (split calls)
  r.all[r.me].sig = r.mine;
  const bool contributes = a.kind != Collective::kBroadcast || r.me == a.root;
  if (r.mode == InExchange::kWhole && contributes && r.bytes > 0)
    CopyBytes(r.all[r.me].payload, a.send, r.bytes);
  for (int p = 0; p < r.n; ++p) {
    if (p == r.me) continue;
    Packet* out = &r.all[r.me];
    if (r.mode == InExchange::kSplit) {
      out = &split[p];
      const size_t block = r.blocks[p].count * r.elem;
      if (block > 0)
        CopyBytes(split[p].payload, internal::At(a.send, r.blocks[p].offset, r.elem), block);
    }
    const size_t len = r.PayloadBytes(r.me, p);
    if (r.peers != nullptr) {
      r.peers[p] = Transport::TaggedPeer{out->payload, len, r.all[p].payload, kInExchangeBytes};
    } else {
      out->sig = r.mine;
      r.s.PostRecvUpTo(p, internal::kSignature, &r.all[p], sizeof(Packet));
      r.s.PostSend(p, internal::kSignature, out, sizeof(Signature) + len);
    }
  }
}

// Runs the tagged round, or waits for the first `signatures` handles of an untagged one, and
// checks that every rank called the same collective.
Status CheckSignatures(SignatureRound& r, uint32_t my_tag, int signatures) {
  if (r.peers == nullptr) {
    for (int h = 0; h < signatures; ++h) LOOM_RETURN_IF_ERROR(r.s.Wait(h));
    for (int p = 1; p < r.n; ++p)
      if (!(r.all[p].sig == r.all[0].sig))
        return Mismatch(r.mine.seq, r.all[0].sig, p, r.all[p].sig);
    return Status::OK();
  }
  LOOM_RETURN_IF_ERROR(r.s.transport().TaggedRound(my_tag, r.peers, r.s.deadline()));
  r.peers[r.me].tag = my_tag;
  for (int p = 1; p < r.n; ++p)
    if (r.peers[p].tag != r.peers[0].tag) return NameMismatch(r.s, r.mine, r.peers);
  for (int p = 0; p < r.n; ++p) {
    if (p != r.me && r.peers[p].bytes != r.PayloadBytes(p, r.me)) {
      return Internal("collective #", r.mine.seq, ": rank ", p, " sent ", r.peers[p].bytes,
                      " bytes in the signature round where ", r.PayloadBytes(p, r.me),
                      " were due (two different calls with the same signature tag)");
    }
  }
  return Status::OK();
}

// A call whose whole data travelled with the signatures: every rank computes its result.
void FinishWholeExchange(const SignatureRound& r) {
  const CallArgs& a = r.a;
  const bool receives = a.kind != Collective::kReduce || r.me == a.root;
  if (!receives || r.bytes == 0) return;
  if (a.kind == Collective::kBroadcast) {
    CopyBytes(a.recv, r.all[a.root].payload, r.bytes);
    return;
  }
  const Reduction red{a.dtype, a.op};
  for (int p = 1; p < r.n; ++p)
    Reduce(red, r.all[0].payload, r.all[0].payload, r.all[p].payload, a.count);
  CopyBytes(a.recv, r.all[0].payload, r.bytes);
  Finalize(red, a.recv, a.count, r.n);
}

// Split: this rank's block, reduced by this rank alone (every element by one rank, so every
// rank ends with the same bits), then sent to every rank.
Status FinishSplitExchange(SignatureRound& r) {
  const CallArgs& a = r.a;
  const Reduction red{a.dtype, a.op};
  const internal::Range own = r.blocks[r.me];
  const size_t own_bytes = own.count * r.elem;
  char* own_recv = internal::At(a.recv, own.offset, r.elem);
  if (own_bytes > 0) {
    CopyBytes(r.all[r.me].payload, internal::At(a.send, own.offset, r.elem), own_bytes);
    for (int p = 1; p < r.n; ++p)
      Reduce(red, r.all[0].payload, r.all[0].payload, r.all[p].payload, own.count);
    CopyBytes(own_recv, r.all[0].payload, own_bytes);
    Finalize(red, own_recv, own.count, r.n);
  }
  for (int p = 0; p < r.n; ++p) {
    if (p == r.me) continue;
    r.s.PostRecv(p, internal::kGatherPhase, internal::At(a.recv, r.blocks[p].offset, r.elem),
                 r.blocks[p].count * r.elem);
    r.s.PostSend(p, internal::kGatherPhase, own_recv, own_bytes);
  }
  return r.s.WaitAll();
}

// Runs the round in `all` (2n packets, reused from call to call: only what the round writes is
// read; all[r] receives from rank r and all[me] goes to every peer, or with a split call
// all[n + r] to rank r); `mode` says whether and how the call's data travels with it. `peers`
// (n entries, reused): the tagged round's, or null where signatures travel in the packets.
// *done: the call completed (its result is in the call's buffers).
Status ExchangeSignatures(internal::Schedule& s, const CallArgs& a, const Signature& mine,
                          InExchange mode, Transport::TaggedPeer* peers, Packet* all, bool* done,
                          bool* direct_sends) {
  const size_t elem = DataTypeSize(a.dtype);
  SignatureRound r{
      s,
      a,
      mine,
      mode,
      peers,
      all,
      s.nranks(),
      s.rank(),
      elem,
      a.count * elem,
      mode == InExchange::kSplit ? internal::SplitEvenly(a.count, s.nranks()) : internal::Ranges()};
  const uint32_t my_tag =
      peers != nullptr ? SignatureTag(mine, s.transport().signature_tag_max()) : 0;
  PostSignatures(r);
  // A direct call's first-round sends leave beside the signatures (its receives wait for the
  // verdict, algorithms/direct.cc); a call that disagrees cancels them with the Schedule.
  const int signatures = s.posted();
  if (mode == InExchange::kNo && a.algorithm == Algorithm::kDirect)
    *direct_sends = internal::PostDirectSends(s, a);
  LOOM_RETURN_IF_ERROR(CheckSignatures(r, my_tag, signatures));
  if (mode == InExchange::kNo) return Status::OK();
  if (mode == InExchange::kWhole) {
    FinishWholeExchange(r);
  } else {
    LOOM_RETURN_IF_ERROR(FinishSplitExchange(r));
  }
  *done = true;
  return Status::OK();
}

// Send and Recv check each other: the sender's and receiver's counts and dtypes must agree.
Status CheckPeerSignature(internal::Schedule& s, const CallArgs& a) {
  auto* pair = static_cast<Signature*>(s.HostScratch(2 * sizeof(Signature)));
  Signature& mine = pair[0];
  Signature& theirs = pair[1];
  mine = SignatureOf(a, 0, 0);
  mine.kind = 0;  // both sides describe the message, not their role
  s.PostRecv(a.peer, internal::kSignature, &theirs, sizeof theirs);
  s.PostSend(a.peer, internal::kSignature, &mine, sizeof mine);
  LOOM_RETURN_IF_ERROR(s.WaitAll());
  if (!(mine == theirs)) {
    const bool sending = a.kind == Collective::kSend;
    return InvalidArgument(
        "mismatched point-to-point message: rank ", sending ? s.rank() : a.peer,
        " sends count=", sending ? mine.count : theirs.count,
        " dtype=", DataTypeName(static_cast<DataType>(sending ? mine.dtype : theirs.dtype)),
        " but rank ", sending ? a.peer : s.rank(),
        " receives count=", sending ? theirs.count : mine.count,
        " dtype=", DataTypeName(static_cast<DataType>(sending ? theirs.dtype : mine.dtype)),
        " (tag ", a.tag, ")");
  }
  return Status::OK();
}

constexpr uint64_t kPointToPointBit = uint64_t{1} << 63;

NativeCollective NativeOf(const CallArgs& a) {
  NativeCollective c;
  c.kind = a.kind;
  c.send = a.send;
  c.recv = a.recv;
  c.count = a.count;
  c.dtype = a.dtype;
  c.op = a.op;
  c.root = a.root;
  return c;
}

Status RunNative(Transport& transport, const CallArgs& a, Deadline deadline) {
  return transport.RunNative(NativeOf(a), deadline);
}

// Ranks that share memory meet once per call: the signatures travel in the meeting, and a
// native call runs in it (Transport::Meet). *ran: the call is complete (barrier, native).
Status MeetWithSignatures(Transport& transport, internal::Schedule& s, const CallArgs& a,
                          const Signature& mine, Deadline deadline, bool* ran) {
  const int n = s.nranks();
  auto* all = static_cast<Signature*>(s.HostScratch(n * sizeof(Signature)));
  const bool native = a.kind != Collective::kBarrier && a.algorithm == Algorithm::kNative;
  const NativeCollective call = NativeOf(a);
  Status met = transport.Meet(&mine, sizeof mine, all, native ? &call : nullptr, deadline);
  if (met.code() == StatusCode::kInvalidArgument) {
    Status verdict = CompareSignatures(all, n, mine);
    return verdict.ok() ? met : verdict;
  }
  *ran = native || a.kind == Collective::kBarrier;
  return met;
}

}  // namespace

Communicator::Communicator(std::unique_ptr<Transport> transport,
                           std::shared_ptr<const CommPlan> plan, const CommunicatorOptions& options)
    : transport_(std::move(transport)), plan_(std::move(plan)), options_(options) {
  LOOM_CHECK(transport_ != nullptr && plan_ != nullptr,
             "communicator needs a transport and a plan");
  rank_ = transport_->rank();
  nranks_ = transport_->nranks();
  LOOM_CHECK(plan_->topology.size() == nranks_, "plan has ", plan_->topology.size(),
             " devices for ", nranks_, " ranks");
  selector_ = std::make_unique<Selector>(*plan_, SelectorOptionsOf(options_));
  if (options_.inline_max_bytes == CommunicatorOptions::kInlineAuto) {
    options_.inline_max_bytes =
        transport_->one_rank_per_process() ? CommunicatorOptions::kInlineDefaultBytes : -1;
  }
  spin_handoff_ = !transport_->one_rank_per_process();
  if (transport_->one_rank_per_process()) {
    steal_gate_ = std::make_shared<internal::StealGate>();
    steal_gate_->comm = this;
    steal_gate_->min_wait = options_.timeout;
  }
  tagged_signatures_ = options_.tagged_signatures && transport_->signature_tag_max() > 0;
  schedule_lists_ = std::make_unique<internal::ScheduleLists>();
  if (tagged_signatures_) tagged_peers_.resize(nranks_);
  worker_ = std::thread([this] { WorkerLoop(); });
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queued_.store(1, std::memory_order_release);  // ends the worker's polling
  }
  cv_.notify_all();
  worker_.join();
  if (steal_gate_ != nullptr) {
    std::lock_guard<std::mutex> gate(steal_gate_->mu);  // after any Wait running calls here
    steal_gate_->comm = nullptr;
  }
}

Work Communicator::Failed(Status status) {
  auto state = std::make_shared<internal::WorkState>();
  state->Complete(std::move(status));
  Work work(state);
  Remember(work);
  return work;
}

void Communicator::Remember(const Work& work) {
  // Callers that wait on each Work and never call WaitAll must not grow this list forever: drop
  // calls that completed successfully (failed ones stay until WaitAll reports them).
  if (outstanding_.size() >= 1024) {
    std::vector<Work> kept;
    for (Work& w : outstanding_) {
      if (!w.IsCompleted() || !w.Wait(std::chrono::milliseconds(0)).ok()) kept.push_back(w);
    }
    outstanding_.swap(kept);
  }
  outstanding_.push_back(work);
}

Status Communicator::PrepareCall(Call& call) {
  CallArgs& a = call.args;
  const char* kind = CollectiveCallName(a.kind);
  const bool p2p = a.kind == Collective::kSend || a.kind == Collective::kRecv;
  if (a.kind != Collective::kBarrier && !p2p) {
    if (!transport_->runs_schedules()) {
      // The schedules cannot run here; the transport's own collectives can.
      if (a.algorithm == Algorithm::kAuto) a.algorithm = Algorithm::kNative;
      if (a.algorithm != Algorithm::kNative) {
        return Unimplemented("the ", transport_->name(),
                             " transport runs only algorithm 'native' (its point-to-point "
                             "calls cannot reduce on receipt), not '",
                             AlgorithmName(a.algorithm), "'");
      }
    }
    if (a.algorithm == Algorithm::kNative && !transport_->SupportsNative(a.kind, a.dtype)) {
      return Unimplemented("algorithm 'native' is not available on the ", transport_->name(),
                           " transport for ", kind, " of ", DataTypeName(a.dtype));
    }
    if (a.algorithm == Algorithm::kAuto) {
      call.from_auto = true;
      size_t bytes = a.count * DataTypeSize(a.dtype);
      // The selector sizes allgather/reducescatter by the whole buffer, as nccl-tests does.
      if (a.kind == Collective::kAllGather || a.kind == Collective::kReduceScatter)
        bytes *= nranks_;
      size_t inflight;
      {
        std::lock_guard<std::mutex> lock(mu_);
        inflight = queue_.size() + 1;
      }
      a.algorithm = selector_->Choose(a.kind, bytes, static_cast<int>(inflight),
                                      transport_->SupportsNative(a.kind, a.dtype));
    }
    if (a.algorithm != Algorithm::kNative && !AlgorithmSupports(a.algorithm, a.kind)) {
      return Unimplemented(kind, " has no '", AlgorithmName(a.algorithm), "' algorithm");
    }
  }
  if (HasRoot(a.kind) && (a.root < 0 || a.root >= nranks_)) {
    return InvalidArgument("root ", a.root, " is outside 0..", nranks_ - 1);
  }
  if (p2p) {
    if (a.peer < 0 || a.peer >= nranks_ || a.peer == rank_) {
      return InvalidArgument("peer ", a.peer, " is not another rank of 0..", nranks_ - 1);
    }
    if (a.tag < 0 || a.tag > (1 << 30))
      return InvalidArgument("tag ", a.tag, " is outside 0..2^30");
  }
  if (a.count > 0 && a.kind != Collective::kBarrier) {
    const bool needs_send =
        a.kind != Collective::kRecv && !(a.kind == Collective::kBroadcast && rank_ != a.root);
    const bool needs_recv =
        a.kind != Collective::kSend && !(a.kind == Collective::kReduce && rank_ != a.root);
    if (needs_send && a.send == nullptr) return InvalidArgument("send buffer is null");
    if (needs_recv && a.recv == nullptr) return InvalidArgument("recv buffer is null");
  }
  return Status::OK();
}

Work Communicator::Issue(Call call) {
  CallArgs& a = call.args;
  if (Status st = PrepareCall(call); !st.ok())
    return Failed(st.WithContext(StrCat(CollectiveCallName(a.kind), " on rank ", rank_)));
  if (a.kind != Collective::kSend && a.kind != Collective::kRecv) call.seq = next_seq_++;
  call.step = step_.load();

  auto state = std::make_shared<internal::WorkState>(spin_handoff_);
  const long long bytes = static_cast<long long>(a.count * DataTypeSize(a.dtype));
  bool run_here = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes <= options_.inline_max_bytes && queue_.empty() && !busy_ && !stopping_) {
      busy_ = run_here = true;  // nothing in flight: no hand-off
    } else {
      state->gate = steal_gate_;
      queue_.emplace_back(std::make_shared<Call>(call), state);
      queued_.store(queue_.size(), std::memory_order_release);
    }
  }
  if (run_here) {
    state->started = Clock::now();  // not shared yet
    Status status = Execute(call, state->started);
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
      wake = !queue_.empty() || stopping_;  // the worker waits for an idle communicator
    }
    if (wake) cv_.notify_all();
    state->CompleteUnshared(std::move(status));
    Work work(std::move(state));
    Remember(work);
    return work;
  }
  cv_.notify_one();
  Work work(state);
  Remember(work);
  return work;
}

Status Communicator::PinWorkerToCpu(int cpu) {
  return PinThreadToCpu(worker_.native_handle(), cpu);
}

void Communicator::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  while (true) {
    // The next call usually comes soon after the last (a step's gradients): poll for it
    // before sleeping, so that a call is picked up without a wake-up.
    if (spin_handoff_) SpinUntil([this] { return queued_.load(std::memory_order_acquire) > 0; });
    lock.lock();
    // A call runs only while no other does (a waiting thread may be running queued calls).
    cv_.wait(lock, [this] { return !busy_ && (stopping_ || !queue_.empty()); });
    if (queue_.empty()) return;  // stopping and drained
    RunFront(lock);
  }
}

void Communicator::RunFront(std::unique_lock<std::mutex>& lock) {
  std::shared_ptr<Call> call = std::move(queue_.front().first);
  std::shared_ptr<internal::WorkState> state = std::move(queue_.front().second);
  queue_.pop_front();
  queued_.store(queue_.size(), std::memory_order_release);
  busy_ = true;
  lock.unlock();
  const Clock::time_point start = Clock::now();
  {
    std::lock_guard<std::mutex> state_lock(state->mu);
    state->started = start;
  }
  Status status = Execute(*call, start);
  lock.lock();
  busy_ = false;
  lock.unlock();
  state->Complete(std::move(status));
}

void Communicator::RunQueuedUntil(const internal::WorkState& target) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!busy_ && !queue_.empty() && !target.completed.load(std::memory_order_acquire)) {
    RunFront(lock);
    lock.lock();
  }
  // The worker waits for an idle communicator: calls left behind (or a destructor) need it.
  const bool wake = !busy_ && (!queue_.empty() || stopping_);
  lock.unlock();
  if (wake) cv_.notify_all();
}

Status Communicator::Execute(const Call& call, Clock::time_point start) {
  Status status;
  if (!broken_.ok()) {
    // An aborted group stays Aborted: the cause is another rank's error, not this call.
    status =
        Status(broken_.code() == StatusCode::kAborted ? StatusCode::kAborted
                                                      : StatusCode::kFailedPrecondition,
               StrCat("communicator is unusable after an earlier error: ", broken_.ToString()));
  } else {
    status = Run(call, start);
    // A mismatch is caught before any data moved and seen by every rank alike, so the group
    // stays in step; anything else (a timeout, a transport error) may have left ranks apart.
    if (!status.ok() && status.code() != StatusCode::kInvalidArgument) broken_ = status;
  }
  if (!status.ok()) {
    const CallArgs& a = call.args;
    std::string what = StrCat(CollectiveCallName(a.kind));
    if (call.seq > 0) what += StrCat(" #", call.seq);
    if (a.kind != Collective::kBarrier && a.kind != Collective::kSend &&
        a.kind != Collective::kRecv) {
      what += StrCat(" (", AlgorithmName(a.algorithm), ")");
    }
    status = status.WithContext(StrCat(what, " on rank ", rank_));
  }
  return status;
}

Status Communicator::Run(const Call& call, Clock::time_point start) {
  const CallArgs& a = call.args;
  const Deadline deadline = start + options_.timeout;
  const bool p2p = a.kind == Collective::kSend || a.kind == Collective::kRecv;
  const uint64_t tag_base =
      p2p ? kPointToPointBit | (static_cast<uint64_t>(a.tag) << 8) : call.seq << 8;
  internal::Schedule s(transport_.get(), plan_.get(), &options_, tag_base, deadline,
                       schedule_lists_.get());
  bool direct_sends = false;  // a direct call's first sends left with the signatures
  Status status = [&]() -> Status {
    if (p2p) {
      LOOM_RETURN_IF_ERROR(CheckPeerSignature(s, a));
      const size_t bytes = a.count * DataTypeSize(a.dtype);
      if (a.kind == Collective::kSend) {
        s.PostSend(a.peer, internal::kData, a.send, bytes);
      } else {
        s.PostRecv(a.peer, internal::kData, a.recv, bytes);
      }
      return s.WaitAll();
    }
    if (transport_->meets_with_signatures()) {
      bool ran = false;
      LOOM_RETURN_IF_ERROR(MeetWithSignatures(*transport_, s, a,
                                              SignatureOf(a, call.seq, call.step), deadline, &ran));
      if (ran) return Status::OK();
    } else if (transport_->runs_schedules() && transport_->host_buffers()) {
      const InExchange mode = ExchangeMode(a, call.from_auto, *transport_, options_);
      Signature mine = SignatureOf(a, call.seq, call.step);
      if (mode == InExchange::kDoubling) {
        mine.algorithm = kInDoubling;
        return DoublingExchange(s, a, mine);
      }
      if (mode == InExchange::kWhole) mine.algorithm = kInExchange;
      if (mode == InExchange::kSplit) mine.algorithm = kInSplitExchange;
      bool done = false;
      // Packets are not zeroed: each is read only as far as its round wrote it (a shorter
      // message's missing payload is never read: the signatures then differ or the call is
      // not in the exchange).
      if (packets_ == nullptr) {
        packets_ =
            std::make_unique<unsigned char[]>(2 * static_cast<size_t>(nranks_) * sizeof(Packet));
      }
      LOOM_RETURN_IF_ERROR(
          ExchangeSignatures(s, a, mine, mode, tagged_signatures_ ? tagged_peers_.data() : nullptr,
                             reinterpret_cast<Packet*>(packets_.get()), &done, &direct_sends));
      if (done) return Status::OK();
    } else {
      LOOM_RETURN_IF_ERROR(CheckSignatures(s, SignatureOf(a, call.seq, call.step)));
    }
    if (a.kind == Collective::kBarrier) return Status::OK();
    switch (a.algorithm) {
      case Algorithm::kRing: return internal::RunRing(s, a);
      case Algorithm::kTree: return internal::RunTree(s, a);
      case Algorithm::kMultiTree: return internal::RunMultiTree(s, a);
      case Algorithm::kStar: return internal::RunStar(s, a);
      case Algorithm::kDirect: return internal::RunDirect(s, a, direct_sends);
      case Algorithm::kChannels: return internal::RunChannels(s, a);
      case Algorithm::kRails: return internal::RunRails(s, a);
      case Algorithm::kNative: return RunNative(*transport_, a, deadline);
      default: return internal::UnsupportedAlgorithm(a);
    }
  }();
  if (status.code() == StatusCode::kTimeout) {
    status = status.WithContext(StrCat("no progress within ", options_.timeout.count(), " ms"));
  }
  return status;
}

Status Communicator::WaitAll(std::chrono::milliseconds timeout) {
  // The clock is read only once a call is still running (small calls have completed by now).
  Deadline deadline{};
  Status first;
  for (const Work& work : outstanding_) {
    std::chrono::milliseconds left(0);
    if (!work.state_->completed.load(std::memory_order_acquire)) {
      const Clock::time_point now = Clock::now();
      if (deadline == Deadline{}) deadline = now + timeout;
      left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    }
    Status s = work.Wait(std::max(left, std::chrono::milliseconds(0)));
    if (s.code() == StatusCode::kTimeout && !work.IsCompleted()) return s;
    if (first.ok() && !s.ok()) first = s;
  }
  outstanding_.clear();
  return first;
}

Work Communicator::AllReduce(const void* send, void* recv, size_t count, DataType dtype,
                             ReduceOp op, const CallOptions& options) {
  Call c;
  c.args =
      CallArgs{Collective::kAllReduce, send, recv, count, dtype, op, -1, -1, -1, options.algorithm};
  return Issue(c);
}

Work Communicator::Reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                          int root, const CallOptions& options) {
  Call c;
  c.args =
      CallArgs{Collective::kReduce, send, recv, count, dtype, op, root, -1, -1, options.algorithm};
  return Issue(c);
}

Work Communicator::Broadcast(const void* send, void* recv, size_t count, DataType dtype, int root,
                             const CallOptions& options) {
  Call c;
  c.args = CallArgs{Collective::kBroadcast, send, recv, count, dtype,
                    ReduceOp::kSum,         root, -1,   -1,    options.algorithm};
  return Issue(c);
}

Work Communicator::AllGather(const void* send, void* recv, size_t count, DataType dtype,
                             const CallOptions& options) {
  Call c;
  c.args = CallArgs{Collective::kAllGather, send, recv, count, dtype,
                    ReduceOp::kSum,         -1,   -1,   -1,    options.algorithm};
  return Issue(c);
}

Work Communicator::ReduceScatter(const void* send, void* recv, size_t count, DataType dtype,
                                 ReduceOp op, const CallOptions& options) {
  Call c;
  c.args = CallArgs{Collective::kReduceScatter, send, recv, count, dtype, op, -1, -1, -1,
                    options.algorithm};
  return Issue(c);
}

Work Communicator::Send(const void* data, size_t count, DataType dtype, int peer, int tag) {
  Call c;
  c.args = CallArgs{Collective::kSend, data, nullptr, count, dtype,
                    ReduceOp::kSum,    -1,   peer,    tag,   Algorithm::kAuto};
  return Issue(c);
}

Work Communicator::Recv(void* data, size_t count, DataType dtype, int peer, int tag) {
  Call c;
  c.args = CallArgs{Collective::kRecv, nullptr, data, count, dtype,
                    ReduceOp::kSum,    -1,      peer, tag,   Algorithm::kAuto};
  return Issue(c);
}

Work Communicator::Barrier() {
  Call c;
  c.args = CallArgs{Collective::kBarrier, nullptr, nullptr, 0,  DataType::kFloat32,
                    ReduceOp::kSum,       -1,      -1,      -1, Algorithm::kAuto};
  return Issue(c);
}

}  // namespace loom::collective
