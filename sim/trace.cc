#include "sim/trace.h"

#include <algorithm>
#include <functional>
#include <memory>

#include "collective/algorithms/algorithms.h"
#include "collective/schedule.h"

namespace loom::sim {

using collective::Algorithm;
using collective::Collective;

size_t Trace::ops() const {
  size_t n = 0;
  for (const auto& r : ranks) n += r.size();
  return n;
}

size_t Trace::posts() const {
  size_t n = 0;
  for (const auto& r : ranks) {
    for (const TraceOp& op : r) n += op.kind <= TraceOp::kRecvReduce;
  }
  return n;
}

namespace {

// Addresses the schedules compute with but nobody dereferences: the recording transport never
// touches memory, and schedules reach buffers only through the transport.
void* FakeAddress(int which) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(1 + which % 4096) << 40);
}

class RecordingRequest : public collective::Request {
 public:
  RecordingRequest(std::vector<TraceOp>* ops, int handle) : ops_(ops), handle_(handle) {}
  Status Wait(Deadline) override {
    TraceOp op;
    op.kind = TraceOp::kWait;
    op.handle = handle_;
    ops_->push_back(op);
    return Status::OK();
  }
  void Cancel() override {}

 private:
  std::vector<TraceOp>* ops_;
  int handle_;
};

class RecordingTransport : public collective::Transport {
 public:
  RecordingTransport(int rank, int nranks, std::vector<TraceOp>* ops)
      : rank_(rank), nranks_(nranks), ops_(ops) {}
  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  const char* name() const override { return "simulated"; }

  std::unique_ptr<collective::Request> Send(int peer, uint64_t tag, const void* src,
                                            size_t bytes) override {
    return Post(TraceOp::kSend, peer, tag, bytes, src);
  }
  std::unique_ptr<collective::Request> Recv(int peer, uint64_t tag, void* dst,
                                            size_t bytes) override {
    return Post(TraceOp::kRecv, peer, tag, bytes, dst);
  }
  std::unique_ptr<collective::Request> RecvReduce(int peer, uint64_t tag, void* dst,
                                                  const void* local, size_t bytes,
                                                  const collective::Reduction&) override {
    return Post(TraceOp::kRecvReduce, peer, tag, bytes, dst, local);
  }
  Status Copy(void* dst, const void* src, size_t bytes) override {
    if (dst != src && bytes > 0) {
      Record(TraceOp::kCopy, bytes);
      ops_->back().addr = Address(dst);
      ops_->back().addr2 = Address(src);
    }
    return Status::OK();
  }
  Status Finalize(const collective::Reduction& reduction, void*, size_t count, int) override {
    Record(TraceOp::kFinalize, count * collective::DataTypeSize(reduction.dtype));
    return Status::OK();
  }
  std::shared_ptr<void> AllocateBuffer(size_t) override {
    return std::shared_ptr<void>(FakeAddress(3 + scratch_++), [](void*) {});
  }

 private:
  static uint64_t Address(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  std::unique_ptr<collective::Request> Post(TraceOp::Kind kind, int peer, uint64_t tag,
                                            size_t bytes, const void* addr,
                                            const void* addr2 = nullptr) {
    TraceOp op;
    op.kind = kind;
    op.peer = peer;
    op.tag = tag;
    op.bytes = bytes;
    op.addr = Address(addr);
    op.addr2 = Address(addr2);
    op.handle = next_handle_++;
    ops_->push_back(op);
    return std::make_unique<RecordingRequest>(ops_, op.handle);
  }
  void Record(TraceOp::Kind kind, size_t bytes) {
    TraceOp op;
    op.kind = kind;
    op.bytes = bytes;
    ops_->push_back(op);
  }

  int rank_, nranks_;
  std::vector<TraceOp>* ops_;
  int next_handle_ = 0;
  int scratch_ = 0;
};

}  // namespace

namespace {

using Runner =
    std::function<Status(collective::internal::Schedule&, const collective::internal::CallArgs&)>;

bool RootedBroadcastAlgorithm(Algorithm algorithm) {
  return algorithm == Algorithm::kRing || algorithm == Algorithm::kTree ||
         algorithm == Algorithm::kStar || algorithm == Algorithm::kMultiTree;
}

// The rooted broadcasts as they ran before they sent from the root's send buffer, for records
// measured then (CallSpec::root_copy_first): the root first copies its send buffer into recv and
// sends from recv, so its sends read recv, and the copies of its own data into recv that now end
// the call are that first copy.
void CopyFirstAtRoot(std::vector<TraceOp>* ops, uint64_t send, uint64_t recv, uint64_t bytes) {
  auto in = [bytes](uint64_t addr, uint64_t base) { return addr >= base && addr < base + bytes; };
  std::vector<TraceOp> out;
  out.reserve(ops->size() + 1);
  TraceOp copy;
  copy.kind = TraceOp::kCopy;
  copy.bytes = bytes;
  copy.addr = recv;
  copy.addr2 = send;
  out.push_back(copy);
  for (TraceOp op : *ops) {
    if (op.kind == TraceOp::kCopy && in(op.addr, recv) && in(op.addr2, send)) continue;
    if (op.kind == TraceOp::kSend && in(op.addr, send)) op.addr = op.addr - send + recv;
    out.push_back(op);
  }
  *ops = std::move(out);
}

StatusOr<Trace> CaptureWith(const collective::CommPlan& plan, const CallSpec& call,
                            const Runner& run) {
  const int n = plan.topology.size();
  const size_t elem = collective::DataTypeSize(call.dtype);
  LOOM_ENFORCE(n >= 1, "the plan has no ranks");
  LOOM_ENFORCE(call.bytes % elem == 0, "a ", call.bytes, "-byte call is not a whole number of ",
               collective::DataTypeName(call.dtype), " elements");
  collective::internal::CallArgs args;
  args.kind = call.kind;
  args.dtype = call.dtype;
  args.op = collective::ReduceOp::kSum;
  args.algorithm = call.algorithm;
  args.count = call.bytes / elem;
  LOOM_ENFORCE(!call.in_place || call.kind == Collective::kAllReduce ||
                   call.kind == Collective::kReduce || call.kind == Collective::kBroadcast,
               CollectiveName(call.kind), " does not run in place (allreduce, reduce and ",
               "broadcast do)");
  if (call.kind == Collective::kAllGather || call.kind == Collective::kReduceScatter) {
    LOOM_ENFORCE(args.count % n == 0, "a ", CollectiveName(call.kind), " of ", call.bytes,
                 " bytes does not split into ", n, " equal parts of whole elements");
    args.count /= n;
  }
  if (call.kind == Collective::kReduce || call.kind == Collective::kBroadcast) {
    LOOM_ENFORCE(call.root >= 0 && call.root < n, "root ", call.root, " is outside 0..", n - 1);
    args.root = call.root;
  }
  collective::CommunicatorOptions options;
  options.pipeline_chunk_bytes = std::max<size_t>(call.chunk_bytes, 1);
  Trace trace;
  trace.ranks.resize(n);
  trace.handles.assign(n, 0);
  trace.parts = 1;
  for (int r = 0; r < n; ++r) {
    RecordingTransport transport(r, n, &trace.ranks[r]);
    collective::internal::CallArgs a = args;
    a.send = FakeAddress(0);
    a.recv = call.in_place ? FakeAddress(0) : FakeAddress(1);
    Status status;
    {
      collective::internal::Schedule s(&transport, &plan, &options, uint64_t{1} << 8,
                                       Deadline::max());
      status = run(s, a);
    }
    LOOM_RETURN_IF_ERROR(status);
    if (call.root_copy_first && call.kind == Collective::kBroadcast && r == call.root &&
        a.send != a.recv && RootedBroadcastAlgorithm(call.algorithm))
      CopyFirstAtRoot(&trace.ranks[r], reinterpret_cast<uintptr_t>(a.send),
                      reinterpret_cast<uintptr_t>(a.recv), call.bytes);
    for (const TraceOp& op : trace.ranks[r]) {
      if (op.kind <= TraceOp::kRecvReduce)
        trace.handles[r] = std::max(trace.handles[r], op.handle + 1);
    }
  }
  return trace;
}

}  // namespace

StatusOr<Trace> Capture(const collective::CommPlan& plan, const CallSpec& call) {
  return CaptureWith(
      plan, call,
      [&](collective::internal::Schedule& s, const collective::internal::CallArgs& a) -> Status {
        switch (call.algorithm) {
          case Algorithm::kRing: return collective::internal::RunRing(s, a);
          case Algorithm::kTree: return collective::internal::RunTree(s, a);
          case Algorithm::kMultiTree: return collective::internal::RunMultiTree(s, a);
          case Algorithm::kStar: return collective::internal::RunStar(s, a);
          case Algorithm::kDirect: return collective::internal::RunDirect(s, a);
          case Algorithm::kChannels: return collective::internal::RunChannels(s, a);
          case Algorithm::kRails: return collective::internal::RunRails(s, a);
          default:
            return InvalidArgument("the simulator replays Loom's schedules (ring, tree, ",
                                   "multi_tree, star, direct, channels, rails), not '",
                                   AlgorithmName(call.algorithm), "'");
        }
      });
}

StatusOr<Trace> CaptureTreeAllReduce(const collective::CommPlan& plan, const collective::Tree& tree,
                                     const CallSpec& call) {
  LOOM_ENFORCE(call.kind == Collective::kAllReduce, "a tree allreduce trace of a ",
               CollectiveName(call.kind));
  return CaptureWith(
      plan, call, [&](collective::internal::Schedule& s, const collective::internal::CallArgs& a) {
        return collective::internal::TreesAllReduce(
            s, a, {collective::internal::TreeJob{&tree, collective::internal::Range{0, a.count}}});
      });
}

StatusOr<Trace> Stack(const std::vector<Trace>& parts) {
  LOOM_ENFORCE(!parts.empty(), "nothing to stack");
  const int n = parts[0].nranks();
  Trace out;
  out.parts = 1;
  for (const Trace& p : parts) {
    LOOM_ENFORCE(p.nranks() == n, "stacking traces of ", n, " and ", p.nranks(), " ranks");
    const int base = out.nranks();
    for (int r = 0; r < n; ++r) {
      out.ranks.push_back(p.ranks[r]);
      for (TraceOp& op : out.ranks.back()) {
        if (op.kind <= TraceOp::kRecvReduce) op.peer += base;
      }
      out.handles.push_back(p.handles[r]);
      out.device.push_back(p.device_of(r));
    }
    out.parts = std::max(out.parts, p.parts);
    out.start_us = std::max(out.start_us, p.start_us);
  }
  return out;
}

Status Append(Trace& into, const Trace& part, const std::vector<int>& members) {
  LOOM_ENFORCE(static_cast<int>(members.size()) == part.nranks(), "a part of ", part.nranks(),
               " ranks was given ", members.size(), " members");
  std::vector<bool> seen(into.nranks(), false);
  for (int g : members) {
    LOOM_ENFORCE(g >= 0 && g < into.nranks(), "member ", g, " is outside 0..", into.nranks() - 1);
    LOOM_ENFORCE(!seen[g], "member ", g, " appears twice");
    seen[g] = true;
  }
  const uint64_t tag_shift = static_cast<uint64_t>(into.parts) << 32;
  for (int g = 0; g < part.nranks(); ++g) {
    const int r = members[g];
    const int base = into.handles[r];
    for (TraceOp op : part.ranks[g]) {
      if (op.handle >= 0) op.handle += base;
      if (op.kind <= TraceOp::kRecvReduce) {
        op.peer = members[op.peer];
        op.tag += tag_shift;
      }
      into.ranks[r].push_back(op);
    }
    into.handles[r] += part.handles[g];
  }
  into.parts += std::max(part.parts, 1);
  into.start_us = std::max(into.start_us, part.start_us);
  return Status::OK();
}

}  // namespace loom::sim
