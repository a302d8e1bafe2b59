// In-process transport: N ranks in one process (one thread each, separate buffers), the CPU analog
// of one multi-GPU machine. A message moves with one direct copy from the sender's buffer into the
// receiver's; RecvReduce reduces straight out of the sender's buffer, with no staging copy. The
// copy is done by whichever side arrives second (the other side only waits).
//
// Where the buffers live is a RankMemory: host memory (HostRankMemory, the default), or the GPUs
// of the CUDA P2P transport (cuda_p2p.h), which uses the same matching with device copies and
// reduction kernels. The endpoints' Copy/Finalize/AllocateBuffer go to the RankMemory too, so the
// algorithm schedules run unchanged on either.
//
// Threading: each endpoint belongs to one rank's thread; endpoints of different ranks may be used
// concurrently. The endpoints share a hub that must outlive no endpoint (they hold it).
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

#include "collective/transport.h"

namespace loom::collective {

// The memory of one in-process group's ranks and the data movement between them. `performer` is
// the rank whose thread runs an operation (for a transfer: whichever side arrived second); every
// operation has completed when it returns. Implementations must allow different performers to
// run operations concurrently.
class RankMemory {
 public:
  virtual ~RankMemory() = default;
  // The transport's name in messages ("in-process", "cuda-p2p").
  virtual const char* name() const = 0;
  // Whether buffers are host memory every rank's thread may read and write directly (then the
  // transport also offers its native collectives, one pass over shared memory).
  virtual bool host() const { return false; }
  // dst (of dst_rank) = src (of src_rank), `bytes` bytes. dst_rank may equal src_rank.
  virtual Status Copy(int performer, int dst_rank, void* dst, int src_rank, const void* src,
                      size_t bytes) = 0;
  // dst = local (op) remote for `count` elements; dst and local belong to dst_rank (dst may equal
  // local), remote to src_rank.
  virtual Status Reduce(int performer, const Reduction& reduction, int dst_rank, void* dst,
                        const void* local, int src_rank, const void* remote, size_t count) = 0;
  // Transport::Finalize and Transport::AllocateBuffer of `rank`.
  virtual Status Finalize(int rank, const Reduction& reduction, void* buf, size_t count,
                          int nranks) = 0;
  virtual std::shared_ptr<void> Allocate(int rank, size_t bytes) = 0;
};

// Host memory: memcpy and the host reduction kernels (reduce.h).
std::shared_ptr<RankMemory> HostRankMemory();

// The native collectives' pass over host memory (Transport::RunNative): calls whose input is at
// most kInProcessNativeInlineBytes on every rank run from copies in the meeting (each rank copies
// its input there and computes its own output from everyone's copies); larger calls are cut into
// blocks of at most kInProcessNativeBlockBytes per operand (NativeBlockElements), which the
// ranks claim from a shared counter. The simulator replays the same cut (sim/simulate.h,
// "native"). From copies a rank reads every other rank's copy just after that rank wrote it
// (cross-core misses, line by line) where the blocks read inputs at rest, at the cost of a second
// wait (every block written): measured on 2 cores, the 2-rank allreduce of 2 / 4 KiB took 0.87 /
// 1.29 us from copies and 0.73 / 0.79 us in blocks, 1 KiB 0.70 either way, 512 B 0.59 from
// copies and 0.70 in blocks; on 4 ranks 4 KiB 9.8-10.4 against 5.8-6.1 us (docs/PERF.md).
inline constexpr size_t kInProcessNativeInlineBytes = size_t{1} << 10;
inline constexpr size_t kInProcessNativeBlockBytes = size_t{16} << 10;

// Elements per block of a native call of `count` elements of `elem` bytes per part, in `parts`
// parts, where `workers` ranks run at once (the ranks, or fewer where they outnumber the cores):
// `block_bytes` (the in-process transport's kInProcessNativeBlockBytes; shared memory between
// processes: kShmNativeBlockBytes), or less (in whole 64-byte lines) where the call has fewer
// blocks than workers, so that every worker gets one.
inline size_t NativeBlockElements(size_t count, size_t elem, int parts, int workers,
                                  size_t block_bytes = kInProcessNativeBlockBytes) {
  const size_t full = std::max<size_t>(1, block_bytes / elem);
  const size_t per_part = (count + full - 1) / full;
  if (per_part * static_cast<size_t>(parts) >= static_cast<size_t>(workers) || count == 0)
    return full;
  // Split each part into enough blocks that all parts together give every worker one.
  const size_t want = (static_cast<size_t>(workers) + parts - 1) / parts;
  const size_t line = std::max<size_t>(1, 64 / elem);
  return std::min(full, std::max(line, count / want / line * line));
}
// Calls whose outputs (all ranks' together) are at least this large write them with streaming
// stores: they would not stay in the caches, and a streaming store skips reading each line
// before writing it.
inline constexpr size_t kInProcessNativeStreamingBytes = size_t{16} << 20;

struct InProcessTransportOptions {
  // When false, RecvReduce falls back to Transport's staging path (used to test that path; host
  // memory only).
  bool direct_reduce = true;
  // Host memory: transfers of at least this many bytes are moved by the receiver when it waits,
  // on its own thread: a send that finds its receive posted hands the transfer over and goes on,
  // and a receive that finds its send queued takes it without copying inside the post (so the
  // rank's own sends, posted next, are not held behind the copy). Smaller ones whoever makes
  // the match moves at once. Two ranks that post to each other then copy at the same time
  // instead of the later one copying both ways. A handed transfer the receiver has not started
  // within the sender's spin budget when the sender waits (or handed while it sleeps), the
  // sender moves itself (so neither side's order of waits can deadlock). 0: always the receiver;
  // SIZE_MAX: always whoever makes the match. Device memory: always whoever makes the match.
  size_t handoff_bytes = size_t{256} << 10;
};

// Creates the n connected endpoints; element r is rank r. `memory` defaults to HostRankMemory().
std::vector<std::unique_ptr<Transport>> CreateInProcessTransports(
    int nranks, const InProcessTransportOptions& options = {},
    std::shared_ptr<RankMemory> memory = nullptr);

}  // namespace loom::collective
