// The meeting: where the ranks of one group that share memory meet once per collective
// (Transport::Meet and the native collectives). The in-process transport keeps its meeting in
// the process's heap (inprocess.cc); the shared-memory transport keeps it in a segment that the
// processes of one node map (shm.cc). Both use the layout and the steps here.
//
// A group has kMeetSlots slots, used round-robin by the call's sequence number (every rank
// meets in the same order: the communicator issues the calls in order). A rank publishes its
// entry (signature, buffers and, for small native calls, a copy of its input), then adds itself
// to the slot's state word (Arrive); once the count reaches n every entry is readable. Reuse
// needs no departure round: a rank meeting at call s has returned from call s-1, which every
// rank had met, so every rank has returned from s-2 and earlier and no longer reads their slots
// (kMeetSlots >= 2). A rank that stops waiting marks the slot abandoned (Abandon) unless every
// rank arrived meanwhile, so that no late rank touches the buffers of one that gave up (the
// count and the mark share one word).
//
// Everything here is plain data and lock-free atomics, so a slot may live in memory that
// several processes map.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "collective/transport.h"
#include "collective/transport/inprocess.h"

namespace loom::collective::meeting {

constexpr uint64_t kMeetSlots = 4;
constexpr size_t kMeetSignatureBytes = 128;
// Native calls whose input is at most this many bytes per rank run from copies in the slot:
// after the meeting every rank computes its own output from the copies, so the call is one
// rendezvous, not a rendezvous and then a wait until every rank's buffers are written.
constexpr size_t kMeetInlineBytes = kInProcessNativeInlineBytes;

struct alignas(64) MeetEntry {
  const void* send = nullptr;  // in the publishing rank's address space
  void* recv = nullptr;
  size_t signature_bytes = 0;  // 0 when this rank published no signature
  bool copied = false;         // `data` holds the rank's input (small native calls)
  unsigned char signature[kMeetSignatureBytes];
  alignas(64) unsigned char data[kMeetInlineBytes];
};

// The state word: the call's generation (its sequence number, 43 bits), whether a rank gave up
// waiting, and how many ranks have arrived.
constexpr uint64_t kCountBits = 20;
constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;
constexpr uint64_t kAbandonedBit = uint64_t{1} << kCountBits;
constexpr uint64_t kGenShift = kCountBits + 1;
constexpr uint64_t kGenMask = (uint64_t{1} << (64 - kGenShift)) - 1;
constexpr uint64_t kMaxMeetRanks = kCountMask;

// A slot's shared words: the state word and, for large native calls, the next block of work to
// claim and how many blocks are written.
struct MeetControl {
  alignas(64) std::atomic<uint64_t> state{~uint64_t{0}};  // no generation yet
  alignas(64) std::atomic<size_t> next_block{0};
  alignas(64) std::atomic<size_t> blocks_done{0};
};

// Adds this rank to the slot for generation `gen` (resetting a slot left by an older call);
// returns the state word it left.
uint64_t Arrive(MeetControl& slot, uint64_t gen);
// Whether the state word says all n ranks arrived and none gave up.
inline bool MeetComplete(uint64_t state, int n) {
  return (state & kCountMask) == static_cast<uint64_t>(n) && !(state & kAbandonedBit);
}
// Marks the slot abandoned unless every rank arrived meanwhile; returns the state word (check
// MeetComplete: a complete meeting must go on).
uint64_t Abandon(MeetControl& slot, int n);
// The error of a meeting that did not complete (`state`: the word Abandon returned), where the
// wait ended at the deadline (`timed_out`) or because a peer gave up first.
Status MeetFailure(uint64_t state, int n, bool with_signature, bool timed_out);

// Writes one block to an output: streaming stores for outputs that will not stay in cache.
void Store(char* out, const char* src, size_t bytes, bool streaming);
// Reduces one block of `inputs` (count elements each) into a buffer that stays in L1,
// finalizes it (avg) and writes it to every output: each input element is read once and each
// output element written once, whatever the number of ranks.
void ReduceInto(const Reduction& reduction, const std::vector<const char*>& inputs,
                const std::vector<char*>& outputs, size_t count, int nranks, bool streaming);
// Copies one block from src to every output; an output that is the source itself is skipped.
void CopyInto(const char* src, const std::vector<char*>& outputs, size_t bytes, bool streaming);
// Bytes of a native call's input on one rank (broadcast: the root's only).
size_t NativeInputBytes(const NativeCollective& call, int rank, int n);
// Whether a native call runs from copies in the meeting slot. A pure function of the call, so
// ranks whose signatures match decide alike.
bool RunsFromCopies(const NativeCollective& call, int n);
// A small native call from the copies every rank left in the slot: this rank computes its own
// output (reductions in rank order, so every rank gets the same bits).
void RunFromCopies(const NativeCollective& call, const MeetEntry* entries, int rank, int n);
// This rank's entry: its buffers, its signature, and its input when the call runs from copies.
void Publish(MeetEntry& mine, const NativeCollective* native, const void* signature,
             size_t sig_bytes, bool from_copies, int rank, int n);
// Every rank's signature into all[r * sig_bytes] (zeros for a rank that published none of this
// size); InvalidArgument unless they all equal rank 0's.
Status GatherSignatures(const MeetEntry* entries, int n, size_t sig_bytes, void* all);
// The output bytes of a native call, all ranks' together, as the caches see them.
size_t NativeOutputBytes(const NativeCollective& call, int n);

}  // namespace loom::collective::meeting
