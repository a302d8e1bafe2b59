#include "collective/transport/meeting.h"

#include <cstring>

#include "base/copy.h"

namespace loom::collective::meeting {

uint64_t Arrive(MeetControl& slot, uint64_t gen) {
  uint64_t state = slot.state.load();
  for (;;) {
    uint64_t next;
    if ((state >> kGenShift) != gen) {
      slot.next_block.store(0, std::memory_order_relaxed);
      slot.blocks_done.store(0, std::memory_order_relaxed);
      next = (gen << kGenShift) | 1;
    } else {
      next = state + 1;
    }
    if (slot.state.compare_exchange_weak(state, next)) return next;
  }
}

uint64_t Abandon(MeetControl& slot, int n) {
  // The mark is set only while the count is short, so no rank can have started on the buffers.
  uint64_t state = slot.state.load();
  while (!MeetComplete(state, n) && !(state & kAbandonedBit)) {
    if (slot.state.compare_exchange_weak(state, state | kAbandonedBit))
      return state | kAbandonedBit;
  }
  return state;
}

Status MeetFailure(uint64_t state, int n, bool with_signature, bool timed_out) {
  const uint64_t arrived = state & kCountMask;
  if (timed_out)
    return Timeout(with_signature ? "collective" : "native collective", ": only ", arrived, " of ",
                   n, " ranks arrived");
  // At a meeting a peer that gave up timed out waiting for the same missing rank.
  if (with_signature)
    return Timeout("collective: only ", arrived, " of ", n,
                   " ranks arrived (another rank gave up waiting first)");
  return FailedPrecondition("native collective: a peer gave up waiting for the others");
}

size_t NativeOutputBytes(const NativeCollective& call, int n) {
  const size_t elem = DataTypeSize(call.dtype);
  return call.kind == Collective::kReduce      ? call.count * elem
         : call.kind == Collective::kAllGather ? call.count * elem * n * n
                                               : call.count * elem * n;
}

void Store(char* out, const char* src, size_t bytes, bool streaming) {
  if (streaming) {
    StreamCopyBytes(out, src, bytes);
  } else {
    CopyBytes(out, src, bytes);
  }
}

void ReduceInto(const Reduction& reduction, const std::vector<const char*>& inputs,
                const std::vector<char*>& outputs, size_t count, int nranks, bool streaming) {
  thread_local std::vector<unsigned char> acc;
  const size_t bytes = count * DataTypeSize(reduction.dtype);
  acc.resize(bytes);
  if (inputs.size() == 1) {
    CopyBytes(acc.data(), inputs[0], bytes);
  } else {
    collective::Reduce(reduction, acc.data(), inputs[0], inputs[1], count);
    for (size_t i = 2; i < inputs.size(); ++i)
      collective::Reduce(reduction, acc.data(), acc.data(), inputs[i], count);
  }
  collective::Finalize(reduction, acc.data(), count, nranks);
  for (char* out : outputs) Store(out, reinterpret_cast<const char*>(acc.data()), bytes, streaming);
}

void CopyInto(const char* src, const std::vector<char*>& outputs, size_t bytes, bool streaming) {
  for (char* out : outputs) {
    if (out != src) Store(out, src, bytes, streaming);
  }
}

size_t NativeInputBytes(const NativeCollective& call, int rank, int n) {
  const size_t bytes = call.count * DataTypeSize(call.dtype);
  switch (call.kind) {
    case Collective::kBroadcast: return rank == call.root ? bytes : 0;
    case Collective::kReduceScatter: return bytes * n;
    default: return bytes;
  }
}

bool RunsFromCopies(const NativeCollective& call, int n) {
  for (int r = 0; r < n; ++r) {
    if (NativeInputBytes(call, r, n) > kMeetInlineBytes) return false;
  }
  return true;
}

void RunFromCopies(const NativeCollective& call, const MeetEntry* entries, int rank, int n) {
  if (call.count == 0) return;  // the buffers may be null
  const size_t elem = DataTypeSize(call.dtype);
  const size_t bytes = call.count * elem;
  const Reduction reduction{call.dtype, call.op};
  char* out = static_cast<char*>(call.recv);
  std::vector<const char*> inputs(n);
  auto copy_of = [&](int r, size_t offset) {
    return reinterpret_cast<const char*>(entries[r].data) + offset;
  };
  switch (call.kind) {
    case Collective::kAllReduce:
    case Collective::kReduce:
      if (call.kind == Collective::kReduce && rank != call.root) return;
      for (int r = 0; r < n; ++r) inputs[r] = copy_of(r, 0);
      ReduceInto(reduction, inputs, {out}, call.count, n, /*streaming=*/false);
      return;
    case Collective::kReduceScatter:
      for (int r = 0; r < n; ++r) inputs[r] = copy_of(r, rank * bytes);
      ReduceInto(reduction, inputs, {out}, call.count, n, /*streaming=*/false);
      return;
    case Collective::kAllGather:
      for (int r = 0; r < n; ++r) CopyBytes(out + r * bytes, copy_of(r, 0), bytes);
      return;
    case Collective::kBroadcast: CopyBytes(out, copy_of(call.root, 0), bytes); return;
    default:  // not a native collective (SupportsNative)
      return;
  }
}

void Publish(MeetEntry& mine, const NativeCollective* native, const void* signature,
             size_t sig_bytes, bool from_copies, int rank, int n) {
  mine.send = native ? native->send : nullptr;
  mine.recv = native ? native->recv : nullptr;
  mine.signature_bytes = signature ? sig_bytes : 0;
  if (signature) std::memcpy(mine.signature, signature, sig_bytes);
  mine.copied = from_copies;
  if (from_copies) {
    const size_t in = NativeInputBytes(*native, rank, n);
    if (in > 0) CopyBytes(mine.data, native->send, in);
  }
}

Status GatherSignatures(const MeetEntry* entries, int n, size_t sig_bytes, void* all) {
  bool same = true;
  for (int r = 0; r < n; ++r) {
    const MeetEntry& e = entries[r];
    char* dst = static_cast<char*>(all) + r * sig_bytes;
    if (e.signature_bytes != sig_bytes) {
      same = false;
      std::memset(dst, 0, sig_bytes);
      continue;
    }
    std::memcpy(dst, e.signature, sig_bytes);
    same &= std::memcmp(e.signature, entries[0].signature, sig_bytes) == 0;
  }
  if (!same) return InvalidArgument("the ranks' call signatures differ");
  return Status::OK();
}

}  // namespace loom::collective::meeting
