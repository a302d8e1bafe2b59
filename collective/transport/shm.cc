#include "collective/transport/shm.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <new>
#include <random>
#include <thread>
#include <vector>

#include "base/copy.h"
#include "collective/communicator.h"
#include "collective/spin.h"
#include "collective/transport/inprocess.h"
#include "collective/transport/meeting.h"

namespace loom::collective {
namespace {

using meeting::kMeetSignatureBytes;
using meeting::kMeetSlots;
using meeting::MeetControl;
using meeting::MeetEntry;

constexpr uint64_t kMagic = 0x6c6f6f6d2d73686dull;  // "loom-shm"
constexpr size_t kAbortTextBytes = 1024;

// The segment's first bytes: what it was made for and the group's abort (0: none; 1: being
// written; 2: set, abort_code and abort_text readable).
struct ShmHeader {
  uint64_t magic = kMagic;
  int32_t nranks = 0;
  alignas(64) std::atomic<uint32_t> abort_state{0};
  int32_t abort_code = 0;
  char abort_text[kAbortTextBytes] = {};
};

// One rank's process: its id, where its probe word is, and the last call it arrived at (the
// call's generation + 1; 0: none yet), to name the ranks a meeting misses.
struct alignas(64) ShmProc {
  std::atomic<int32_t> pid{0};
  uint64_t probe_addr = 0;
  std::atomic<uint64_t> arrived{0};
};

constexpr size_t Align64(size_t bytes) { return (bytes + 63) & ~size_t{63}; }

// Where the parts of a segment for n ranks start.
struct Layout {
  explicit Layout(int n)
      : procs(Align64(sizeof(ShmHeader))),
        controls(procs + Align64(sizeof(ShmProc) * n)),
        entries(controls + Align64(sizeof(MeetControl) * kMeetSlots)),
        bytes(entries + sizeof(MeetEntry) * kMeetSlots * n) {}
  size_t procs, controls, entries, bytes;
};

// The word a peer reads to check that it may read this process's memory.
uint64_t g_probe = 0;
uint64_t ProbeValue(int32_t pid) { return kMagic ^ static_cast<uint64_t>(pid); }

// Whether process `pid` has ended: no such process, or a zombie its parent has not reaped yet.
bool ProcessGone(int32_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat(StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(") ");  // the state follows the command's closing parenthesis
  return paren != std::string::npos && paren + 2 < line.size() &&
         (line[paren + 2] == 'Z' || line[paren + 2] == 'X');
}

std::string CopyError(const char* verb, int rank, int32_t pid, const void* addr, size_t bytes,
                      int err) {
  std::string why = err == ESRCH    ? "its process has exited"
                    : err == EFAULT ? "the address range is not mapped there"
                    : err == EPERM  ? "not permitted (cross-memory attach needs the same user "
                                      "and no seccomp or Yama rule against process_vm_readv)"
                                    : std::strerror(err);
  return StrCat(verb, " ", bytes, " bytes at ", addr, " of rank ", rank, " (pid ", pid,
                ") failed: ", why);
}

// Moves `bytes` between this process and `pid` (one iovec each side; the kernel may move less
// than asked, so it loops). `remote` is in pid's address space.
Status CrossCopy(bool read, int rank, int32_t pid, void* local, const void* remote, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    iovec l{static_cast<char*>(local) + done, bytes - done};
    iovec r{const_cast<char*>(static_cast<const char*>(remote)) + done, bytes - done};
    const ssize_t moved =
        read ? process_vm_readv(pid, &l, 1, &r, 1, 0) : process_vm_writev(pid, &l, 1, &r, 1, 0);
    if (moved < 0) {
      if (errno == EINTR) continue;
      return Aborted(CopyError(read ? "reading" : "writing", rank, pid,
                               static_cast<const char*>(remote) + done, bytes - done, errno));
    }
    if (moved == 0)
      return Aborted(CopyError(read ? "reading" : "writing", rank, pid, remote, bytes, EFAULT));
    done += static_cast<size_t>(moved);
  }
  return Status::OK();
}

// Waits across processes: polls (SpinUntil), then yields between polls for a while, then sleeps
// 50 us between polls (a peer that is late or gone); false at the deadline.
template <typename Ready>
bool WaitShared(Ready&& ready, Deadline deadline, int pauses) {
  if (SpinUntil(ready, kSpinBudget, pauses)) return true;
  const Deadline patient = Clock::now() + std::chrono::milliseconds(2);
  bool idle = false;
  for (int i = 0;; ++i) {
    if (ready()) return true;
    if ((i & 15) == 15) {
      const Deadline now = Clock::now();
      if (now > deadline) return ready();
      idle = now > patient;
    }
    if (idle) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace

ShmSegment::~ShmSegment() {
  if (base_ != nullptr) munmap(base_, bytes_);
  Unlink();
}

void ShmSegment::Unlink() {
  if (linked_) shm_unlink(name_.c_str());
  linked_ = false;
}

StatusOr<std::shared_ptr<ShmSegment>> ShmSegment::Map(const std::string& name, int nranks,
                                                      bool create) {
  LOOM_ENFORCE(nranks >= 1 && static_cast<uint64_t>(nranks) <= meeting::kMaxMeetRanks,
               "shared-memory segment for ", nranks, " ranks");
  const Layout layout(nranks);
  const int fd = shm_open(name.c_str(), create ? O_CREAT | O_EXCL | O_RDWR : O_RDWR, 0600);
  if (fd < 0)
    return IOError(create ? "creating" : "opening", " shared memory /dev/shm", name,
                   " failed: ", std::strerror(errno));
  std::shared_ptr<ShmSegment> segment(new ShmSegment());
  segment->name_ = name;
  segment->nranks_ = nranks;
  segment->linked_ = create;
  struct stat st {};
  if (create && ftruncate(fd, static_cast<off_t>(layout.bytes)) != 0) {
    const int err = errno;
    close(fd);
    return IOError("sizing shared memory /dev/shm", name, " to ", layout.bytes,
                   " bytes failed: ", std::strerror(err));
  }
  if (!create && (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != layout.bytes)) {
    close(fd);
    return FailedPrecondition("shared memory /dev/shm", name, " has ", st.st_size,
                              " bytes, not the ", layout.bytes, " of a segment for ", nranks,
                              " ranks");
  }
  void* base = mmap(nullptr, layout.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED)
    return IOError("mapping shared memory /dev/shm", name, " failed: ", std::strerror(err));
  segment->base_ = base;
  segment->bytes_ = layout.bytes;
  char* bytes = static_cast<char*>(base);
  if (create) {
    auto* header = new (bytes) ShmHeader();
    header->nranks = nranks;
    for (int r = 0; r < nranks; ++r) new (bytes + layout.procs + r * sizeof(ShmProc)) ShmProc();
    for (uint64_t s = 0; s < kMeetSlots; ++s)
      new (bytes + layout.controls + s * sizeof(MeetControl)) MeetControl();
    for (uint64_t e = 0; e < kMeetSlots * nranks; ++e)
      new (bytes + layout.entries + e * sizeof(MeetEntry)) MeetEntry();
  } else {
    const auto* header = reinterpret_cast<const ShmHeader*>(bytes);
    if (header->magic != kMagic || header->nranks != nranks)
      return FailedPrecondition("shared memory /dev/shm", name, " is not a Loom segment for ",
                                nranks, " ranks");
  }
  return segment;
}

StatusOr<std::shared_ptr<ShmSegment>> CreateShmSegment(int nranks) {
  std::random_device entropy;
  const std::string name =
      StrCat("/loom-", getpid(), "-", std::to_string(entropy()), std::to_string(entropy()));
  return ShmSegment::Map(name, nranks, /*create=*/true);
}

StatusOr<std::shared_ptr<ShmSegment>> OpenShmSegment(const std::string& name, int nranks) {
  return ShmSegment::Map(name, nranks, /*create=*/false);
}

void ShmSegment::Register(int rank) {
  LOOM_CHECK(rank >= 0 && rank < nranks_, "rank ", rank, " of ", nranks_);
  // Where Yama allows only ancestors to attach (ptrace_scope 1), let the peers read this
  // process (no Yama: EINVAL, nothing to do).
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  g_probe = ProbeValue(getpid());
  auto* proc = reinterpret_cast<ShmProc*>(static_cast<char*>(base_) + Layout(nranks_).procs) + rank;
  proc->probe_addr = reinterpret_cast<uint64_t>(&g_probe);
  proc->pid.store(getpid());
}

Status ShmSegment::CheckPeers(int rank) const {
  const auto* procs =
      reinterpret_cast<const ShmProc*>(static_cast<const char*>(base_) + Layout(nranks_).procs);
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank) continue;
    const int32_t pid = procs[p].pid.load();
    if (pid <= 0) return FailedPrecondition("rank ", p, " has not registered in ", name_);
    uint64_t value = 0;
    LOOM_RETURN_IF_ERROR(CrossCopy(/*read=*/true, p, pid, &value,
                                   reinterpret_cast<const void*>(procs[p].probe_addr),
                                   sizeof(value)));
    if (value != ProbeValue(pid))
      return FailedPrecondition("rank ", p, " (pid ", pid,
                                "): its probe word read back wrong through cross-memory attach "
                                "(a process of another PID namespace?)");
  }
  return Status::OK();
}

// The ranks' phases of a native call. kCall: the call itself (ranks of one node). A node-
// hierarchical allreduce (WrapNodeHierarchy) runs kReduceToOwners, the cross-node allreduce of
// each rank's shard, then kSpreadFromOwners; shard p (`shard` elements, the last one shorter)
// belongs to the node's local rank p.
enum class Phase { kCall, kReduceToOwners, kSpreadFromOwners };

class ShmTransport final : public Transport {
 public:
  // `local_rank`: this rank's index in `segment` (the node's ranks); `world_of`: each local
  // index's rank of `inner`; `cross`: null on one node, else the communicator of the ranks with
  // this local index on every node.
  ShmTransport(std::unique_ptr<Transport> inner, std::shared_ptr<ShmSegment> segment,
               int local_rank, std::vector<int> world_of, std::unique_ptr<Communicator> cross)
      : inner_(std::move(inner)),
        segment_(std::move(segment)),
        cross_(std::move(cross)),
        name_(StrCat(inner_->name(), cross_ ? "+shm+nodes" : "+shm")),
        rank_(inner_->rank()),
        nranks_(inner_->nranks()),
        me_(local_rank),
        local_(segment_->nranks()),
        world_of_(std::move(world_of)),
        spin_pauses_(SpinPausesFor(local_)),
        workers_(WorkersFor(local_)),
        staging_(new (std::align_val_t{64}) char[kShmNativeBlockBytes * local_]) {
    const Layout layout(local_);
    char* base = static_cast<char*>(segment_->base_);
    header_ = reinterpret_cast<ShmHeader*>(base);
    procs_ = reinterpret_cast<ShmProc*>(base + layout.procs);
    controls_ = reinterpret_cast<MeetControl*>(base + layout.controls);
    entries_ = reinterpret_cast<MeetEntry*>(base + layout.entries);
  }
  ~ShmTransport() override {
    cross_.reset();
    operator delete[](staging_, std::align_val_t{64});
  }

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  const char* name() const override { return name_.c_str(); }

  std::unique_ptr<Request> Send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    return inner_->Send(peer, tag, data, bytes);
  }
  std::unique_ptr<Request> Recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return inner_->Recv(peer, tag, data, bytes);
  }
  std::unique_ptr<Request> RecvUpTo(int peer, uint64_t tag, void* data, size_t bytes) override {
    return inner_->RecvUpTo(peer, tag, data, bytes);
  }
  std::unique_ptr<Request> RecvReduce(int peer, uint64_t tag, void* dst, const void* local,
                                      size_t bytes, const Reduction& reduction) override {
    return inner_->RecvReduce(peer, tag, dst, local, bytes, reduction);
  }
  bool reduces_at_wait() const override { return inner_->reduces_at_wait(); }
  uint32_t signature_tag_max() const override { return inner_->signature_tag_max(); }
  Status TaggedRound(uint32_t tag, TaggedPeer* peers, Deadline deadline) override {
    return inner_->TaggedRound(tag, peers, deadline);
  }
  Status Copy(void* dst, const void* src, size_t bytes) override {
    return inner_->Copy(dst, src, bytes);
  }
  Status Finalize(const Reduction& reduction, void* buf, size_t count, int nranks) override {
    return inner_->Finalize(reduction, buf, count, nranks);
  }
  std::shared_ptr<void> AllocateBuffer(size_t bytes) override {
    return inner_->AllocateBuffer(bytes);
  }
  bool runs_schedules() const override { return inner_->runs_schedules(); }
  bool one_rank_per_process() const override { return inner_->one_rank_per_process(); }
  bool host_buffers() const override { return true; }

  // One node: every native collective, and every call meets in the segment. Several nodes:
  // the node-hierarchical allreduce; the signatures go over the wrapped transport.
  bool SupportsNative(Collective kind, DataType) const override {
    return cross_ == nullptr || kind == Collective::kAllReduce;
  }
  Status RunNative(const NativeCollective& call, Deadline deadline) override {
    if (cross_ == nullptr) return RunSlot(&call, nullptr, 0, nullptr, deadline);
    if (call.kind != Collective::kAllReduce)
      return Unimplemented("native ", CollectiveName(call.kind),
                           " across nodes (the node-hierarchical transport has allreduce only)");
    return RunHierarchical(call, deadline);
  }
  bool meets_with_signatures() const override { return cross_ == nullptr; }
  Status Meet(const void* signature, size_t bytes, void* all, const NativeCollective* native,
              Deadline deadline) override {
    if (cross_ != nullptr) return Transport::Meet(signature, bytes, all, native, deadline);
    return RunSlot(native, signature, bytes, all, deadline);
  }

  bool Abort(const Status& cause) override {
    SetAbort(cause);
    inner_->Abort(cause);
    return true;
  }

 private:
  void SetAbort(const Status& cause) {
    uint32_t none = 0;
    if (!header_->abort_state.compare_exchange_strong(none, 1)) return;
    header_->abort_code = static_cast<int32_t>(cause.code());
    const std::string text = cause.message();
    const size_t len = std::min(text.size(), kAbortTextBytes - 1);
    std::memcpy(header_->abort_text, text.data(), len);
    header_->abort_text[len] = '\0';
    header_->abort_state.store(2, std::memory_order_release);
  }
  bool aborted() const { return header_->abort_state.load(std::memory_order_acquire) == 2; }
  Status AbortCause() const {
    return Status(static_cast<StatusCode>(header_->abort_code), header_->abort_text);
  }

  // The node's ranks that have not arrived at the call of generation `gen`, each with its
  // rank, pid and whether its process is gone ("rank 2 (pid 41, exited), rank 3 (pid 42)").
  std::string Missing(uint64_t gen) const {
    std::string out;
    for (int p = 0; p < local_; ++p) {
      if (procs_[p].arrived.load() >= gen + 1) continue;
      const int32_t pid = procs_[p].pid.load();
      out += StrCat(out.empty() ? "" : ", ", "rank ", world_of_[p], " (pid ", pid,
                    ProcessGone(pid) ? ", exited)" : ")");
    }
    return out;
  }

  Status RunSlot(const NativeCollective* native, const void* signature, size_t sig_bytes, void* all,
                 Deadline deadline, Phase phase = Phase::kCall, size_t shard = 0);
  Status RunBlocks(const NativeCollective& call, MeetControl& slot, const MeetEntry* entries,
                   Deadline deadline, Phase phase, size_t shard);
  Status RunBlock(const NativeCollective& call, const MeetEntry* entries, Phase phase, int part,
                  size_t begin, size_t len, size_t shard, bool streaming);
  Status RunHierarchical(const NativeCollective& call, Deadline deadline);

  std::unique_ptr<Transport> inner_;
  std::shared_ptr<ShmSegment> segment_;
  std::unique_ptr<Communicator> cross_;
  std::string name_;
  int rank_, nranks_;  // in the wrapped transport's group
  int me_, local_;     // in the segment (this node's ranks)
  std::vector<int> world_of_;
  int spin_pauses_, workers_;
  ShmHeader* header_;
  ShmProc* procs_;
  MeetControl* controls_;
  MeetEntry* entries_;  // kMeetSlots x local_
  char* staging_;       // local_ blocks of kShmNativeBlockBytes: peers' inputs and a result
  uint64_t calls_ = 0;
};

Status ShmTransport::RunSlot(const NativeCollective* native, const void* signature,
                             size_t sig_bytes, void* all, Deadline deadline, Phase phase,
                             size_t shard) {
  const int n = local_;
  const uint64_t seq = calls_++;
  const uint64_t gen = seq & meeting::kGenMask;
  MeetControl& slot = controls_[seq % kMeetSlots];
  MeetEntry* entries = entries_ + (seq % kMeetSlots) * n;
  if (signature && sig_bytes > kMeetSignatureBytes) {
    return Internal("call signature of ", sig_bytes, " bytes is larger than the ",
                    kMeetSignatureBytes, " a meeting holds");
  }
  if (aborted()) return AbortCause();
  const bool from_copies = native && phase == Phase::kCall && meeting::RunsFromCopies(*native, n);
  meeting::Publish(entries[me_], native, signature, sig_bytes, from_copies, me_, n);
  procs_[me_].arrived.store(gen + 1);
  meeting::Arrive(slot, gen);
  const bool met = WaitShared(
      [&] {
        const uint64_t s = slot.state.load();
        return meeting::MeetComplete(s, n) || (s & meeting::kAbandonedBit) || aborted();
      },
      deadline, spin_pauses_);
  if (!meeting::MeetComplete(slot.state.load(), n)) {
    const uint64_t state = meeting::Abandon(slot, n);
    if (!meeting::MeetComplete(state, n)) {
      if (aborted()) return AbortCause();
      Status failure = meeting::MeetFailure(state, n, signature != nullptr, /*timed_out=*/!met);
      const std::string missing = Missing(gen);
      if (missing.empty()) return failure;
      return Status(failure.code(), StrCat(failure.message(), "; missing: ", missing));
    }
  }
  if (signature) {
    LOOM_RETURN_IF_ERROR(meeting::GatherSignatures(entries, n, sig_bytes, all));
    if (native == nullptr) return Status::OK();
  }
  if (from_copies) {
    meeting::RunFromCopies(*native, entries, me_, n);
    return Status::OK();
  }
  return RunBlocks(*native, slot, entries, deadline, phase, shard);
}

// A large native call (shm.h): this rank claims blocks until none is left, then waits until
// every block is written by whichever ranks claimed them, or the group aborted.
Status ShmTransport::RunBlocks(const NativeCollective& call, MeetControl& slot,
                               const MeetEntry* entries, Deadline deadline, Phase phase,
                               size_t shard) {
  const int n = local_;
  const size_t elem = DataTypeSize(call.dtype);
  const bool streaming = meeting::NativeOutputBytes(call, n) >= kInProcessNativeStreamingBytes;
  // Part p of the work: shard p of a hierarchical phase, output block p of a reducescatter,
  // input p of an allgather, else the whole buffer; `part_count` elements each (a phase's last
  // shards are shorter: their blocks past the end are empty).
  const int parts = phase != Phase::kCall || call.kind == Collective::kReduceScatter ||
                            call.kind == Collective::kAllGather
                        ? n
                        : 1;
  const size_t part_count = phase != Phase::kCall ? shard : call.count;
  const size_t block = NativeBlockElements(part_count, elem, parts, workers_, kShmNativeBlockBytes);
  const size_t per_part = (part_count + block - 1) / block;
  const size_t blocks = per_part * parts;
  size_t done_here = 0;
  Status failure;
  for (size_t b = slot.next_block.fetch_add(1); b < blocks; b = slot.next_block.fetch_add(1)) {
    if (aborted()) break;
    const int part = static_cast<int>(b / per_part);
    const size_t begin = (b % per_part) * block;
    // Elements of the part that exist (a phase's shards end at the call's count).
    const size_t first = phase != Phase::kCall ? part * shard : 0;
    const size_t end = phase != Phase::kCall ? std::min(call.count, first + shard) : part_count;
    const size_t len = first + begin < end ? std::min(block, end - first - begin) : 0;
    if (len > 0) {
      failure = RunBlock(call, entries, phase, part, begin, len, shard, streaming);
      if (!failure.ok()) {
        SetAbort(failure);
        return failure;
      }
    }
    ++done_here;
  }
  if (done_here > 0) {
    if (streaming) StreamCopyFence();
    slot.blocks_done.fetch_add(done_here, std::memory_order_acq_rel);
  }
  WaitShared(
      [&] { return slot.blocks_done.load(std::memory_order_acquire) == blocks || aborted(); },
      deadline, spin_pauses_);
  if (slot.blocks_done.load(std::memory_order_acquire) == blocks) return Status::OK();
  if (aborted()) return AbortCause();
  std::string gone;
  for (int p = 0; p < n; ++p) {
    const int32_t pid = procs_[p].pid.load();
    if (ProcessGone(pid))
      gone += StrCat(gone.empty() ? "" : ", ", "rank ", world_of_[p], " (pid ", pid, ")");
  }
  return Timeout("native collective: ", blocks - slot.blocks_done.load(), " of ", blocks,
                 " blocks were not written by the deadline",
                 gone.empty() ? "" : StrCat("; exited: ", gone));
}

// One block: reads the inputs it needs (this rank's in place, the others' into staging), and
// writes the result into every output it belongs to.
Status ShmTransport::RunBlock(const NativeCollective& call, const MeetEntry* entries, Phase phase,
                              int part, size_t begin, size_t len, size_t shard, bool streaming) {
  const size_t elem = DataTypeSize(call.dtype);
  const size_t bytes = len * elem;
  const int n = local_;
  const Reduction reduction{call.dtype, call.op};
  auto in_at = [&](int p, size_t element) {
    return static_cast<const char*>(entries[p].send) + element * elem;
  };
  auto out_at = [&](int p, size_t element) {
    return static_cast<char*>(entries[p].recv) + element * elem;
  };
  Status status;
  // Local rank p's input at `element`, readable here (nullptr after a failed copy: see status).
  auto input = [&](int p, size_t element) -> const char* {
    if (p == me_) return in_at(p, element);
    char* staged = staging_ + static_cast<size_t>(p) * kShmNativeBlockBytes;
    status = CrossCopy(/*read=*/true, world_of_[p], procs_[p].pid.load(), staged, in_at(p, element),
                       bytes);
    return status.ok() ? staged : nullptr;
  };
  // Writes `src` into local rank p's output at `element` (skipped where it is already there).
  auto output = [&](int p, size_t element, const char* src) -> Status {
    char* out = out_at(p, element);
    if (p == me_) {
      if (out != src) meeting::Store(out, src, bytes, streaming);
      return Status::OK();
    }
    return CrossCopy(/*read=*/false, world_of_[p], procs_[p].pid.load(), const_cast<char*>(src),
                     out, bytes);
  };
  char* result = staging_ + static_cast<size_t>(me_) * kShmNativeBlockBytes;
  thread_local std::vector<const char*> inputs;
  inputs.clear();
  if (phase == Phase::kReduceToOwners) {
    // Shard `part` of every rank's input, reduced into its owner's output (no finalize: the
    // caller scales an average once the nodes have summed).
    const size_t at = part * shard + begin;
    for (int p = 0; p < n; ++p) {
      inputs.push_back(input(p, at));
      LOOM_RETURN_IF_ERROR(status);
    }
    meeting::ReduceInto(reduction, inputs, {result}, len, n, /*streaming=*/false);
    return output(part, at, result);
  }
  if (phase == Phase::kSpreadFromOwners) {
    // The owner's finished shard (its output, published as its input) into every other rank.
    const size_t at = part * shard + begin;
    const char* src = input(part, at);
    LOOM_RETURN_IF_ERROR(status);
    for (int p = 0; p < n; ++p) {
      if (p != part) LOOM_RETURN_IF_ERROR(output(p, at, src));
    }
    return Status::OK();
  }
  switch (call.kind) {
    case Collective::kAllReduce:
    case Collective::kReduce:
    case Collective::kReduceScatter: {
      const size_t at = call.kind == Collective::kReduceScatter ? part * call.count + begin : begin;
      for (int p = 0; p < n; ++p) {
        inputs.push_back(input(p, at));
        LOOM_RETURN_IF_ERROR(status);
      }
      meeting::ReduceInto(reduction, inputs, {result}, len, n, /*streaming=*/false);
      if (call.kind == Collective::kAllReduce) {
        for (int p = 0; p < n; ++p) LOOM_RETURN_IF_ERROR(output(p, begin, result));
      } else {
        LOOM_RETURN_IF_ERROR(
            output(call.kind == Collective::kReduce ? call.root : part, begin, result));
      }
      return Status::OK();
    }
    case Collective::kAllGather:
    case Collective::kBroadcast: {
      const int source = call.kind == Collective::kAllGather ? part : call.root;
      const char* src = input(source, begin);
      LOOM_RETURN_IF_ERROR(status);
      const size_t at = call.kind == Collective::kAllGather ? part * call.count + begin : begin;
      for (int p = 0; p < n; ++p) {
        // In place on the source rank: its output already holds the block.
        if (p == source && out_at(p, at) == in_at(p, begin)) continue;
        LOOM_RETURN_IF_ERROR(output(p, at, src));
      }
      return Status::OK();
    }
    default: return Unimplemented("native ", CollectiveName(call.kind), " over shared memory");
  }
}

// The node-hierarchical allreduce (shm.h): shard p of the node's sum lands in local rank p's
// output, each rank allreduces its shard with the ranks of its local index on the other nodes,
// and the node's ranks copy the finished shards from their owners.
Status ShmTransport::RunHierarchical(const NativeCollective& call, Deadline deadline) {
  const size_t shard = (call.count + local_ - 1) / local_;
  NativeCollective sum = call;
  if (sum.op == ReduceOp::kAvg) sum.op = ReduceOp::kSum;
  LOOM_RETURN_IF_ERROR(RunSlot(&sum, nullptr, 0, nullptr, deadline, Phase::kReduceToOwners, shard)
                           .WithContext("reducing inside the node"));
  const size_t first = std::min(call.count, me_ * shard);
  const size_t len = std::min(shard, call.count - first);
  if (len > 0) {
    char* mine = static_cast<char*>(call.recv) + first * DataTypeSize(call.dtype);
    Status across = cross_->AllReduce(mine, mine, len, call.dtype, sum.op).Wait();
    if (!across.ok()) {
      across = across.WithContext(StrCat("allreduce of local rank ", me_, "'s shard across nodes"));
      SetAbort(across);
      return across;
    }
  }
  NativeCollective spread = sum;
  spread.send = call.recv;
  LOOM_RETURN_IF_ERROR(
      RunSlot(&spread, nullptr, 0, nullptr, deadline, Phase::kSpreadFromOwners, shard)
          .WithContext("spreading the result inside the node"));
  if (call.op == ReduceOp::kAvg)
    collective::Finalize(Reduction{call.dtype, call.op}, call.recv, call.count, nranks_);
  return Status::OK();
}

std::unique_ptr<Transport> WrapSharedMemory(std::unique_ptr<Transport> inner,
                                            std::shared_ptr<ShmSegment> segment) {
  LOOM_CHECK(inner != nullptr && segment != nullptr && segment->nranks() == inner->nranks(),
             "shared-memory transport: the segment is for ", segment ? segment->nranks() : 0,
             " ranks");
  std::vector<int> world_of(inner->nranks());
  for (int r = 0; r < inner->nranks(); ++r) world_of[r] = r;
  const int rank = inner->rank();
  return std::make_unique<ShmTransport>(std::move(inner), std::move(segment), rank,
                                        std::move(world_of), nullptr);
}

std::unique_ptr<Transport> WrapNodeHierarchy(std::unique_ptr<Transport> inner,
                                             std::shared_ptr<ShmSegment> segment, int local_rank,
                                             std::vector<int> world_of,
                                             std::unique_ptr<Communicator> cross) {
  LOOM_CHECK(inner != nullptr && segment != nullptr && cross != nullptr &&
                 static_cast<int>(world_of.size()) == segment->nranks() && local_rank >= 0 &&
                 local_rank < segment->nranks() && world_of[local_rank] == inner->rank(),
             "node-hierarchical transport: rank ", inner ? inner->rank() : -1,
             " is not local rank ", local_rank, " of its node's segment");
  return std::make_unique<ShmTransport>(std::move(inner), std::move(segment), local_rank,
                                        std::move(world_of), std::move(cross));
}

}  // namespace loom::collective
