#include "sim/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <queue>
#include <unordered_map>

namespace loom::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

constexpr double kPageBytes = 4096;

struct Post {
  int rank;
  int handle;
  double time;  // when it was posted
  uint64_t bytes;
  bool reduce;
  bool paired;           // the rank posts a send and a receive before it waits (an exchange)
  uint64_t addr, addr2;  // TraceOp::addr / addr2
};

struct Flow {
  int src, src_handle, dst, dst_handle;
  int cls = -1;  // the class it streams in
  double bytes = 0;
};

// Transfers between the same two ranks (and, for receive-and-reduce, through the same
// reduction engine) cross the same resources, so they always get the same rate: a class holds
// them as one processor-sharing queue. `service` is the bytes every member has received since
// the class began; a member ends when it reaches its threshold (service at its start + bytes).
struct Class {
  std::vector<int> resources;  // machine resources, then the reduction engine if any
  bool reduce = false;         // its transfers reduce on arrival (bw_reduce_ applies)
  bool local = false;          // a rank's copy of its own buffers (bw_local_ applies)
  bool fault = false;          // a rank's pages mapped in by the kernel (bw_fault_ applies)
  // Microseconds per byte its copier spends on top of its share of the resources: cache lines
  // another core wrote last (HostProtocol::dirty).
  double extra = 0;
  double service = 0;
  double rate = 0;  // bytes per microsecond, per member
  double last = 0;  // when service was brought up to date
  uint64_t version = 0;
  std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>,
                      std::greater<>>
      members;  // (threshold, flow)
};

struct Event {
  double time;
  int kind;  // 0: a flow starts, 1: a class's first member may end (if the version matches)
  int id;    // flow (kind 0) or class (kind 1)
  uint64_t version;
  bool operator>(const Event& o) const {
    if (time != o.time) return time > o.time;
    if (kind != o.kind) return kind < o.kind;  // ends before starts at the same instant
    return id > o.id;
  }
};

// Which rank's core wrote each range of a rank's memory last and which have read it since (start
// -> end, writer, readers), per rank; a range no op has written is its own rank's. Each core's
// traffic (bytes it has read and written) is counted: how much a core has touched since it
// wrote or read a range says how much of it its caches may still hold.
struct Segment {
  uint64_t end;
  int writer;
  uint64_t readers = 0;   // the cores (bit cpu % 64) that have read it since
  double written_at = 0;  // the writer's traffic when it wrote the range
  int reader = -1;        // the last core other than the writer to read it since
  double read_at = 0;     // that core's traffic then
};
struct Written {
  std::vector<std::map<uint64_t, Segment>> ranks;
  std::vector<double> traffic;  // per core
};

struct ClassKeyHash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& k) const {
    return std::hash<uint64_t>()(k.first ^ (k.second * 0x9E3779B97F4A7C15ull));
  }
};

struct KeyHash {
  size_t operator()(const std::tuple<int, int, uint64_t>& k) const {
    const auto& [a, b, t] = k;
    return std::hash<uint64_t>()((uint64_t(uint32_t(a)) << 32 | uint32_t(b)) ^
                                 (t * 0x9E3779B97F4A7C15ull));
  }
};

class Engine {
 public:
  // `written`: which core wrote what last before the call (the end of the same call before it:
  // ReplayTrace); null: every rank's memory its own.
  Engine(const Machine& machine, const Trace& trace, const EngineOptions& options,
         const Written* written = nullptr)
      : machine_(machine), trace_(trace), options_(options) {
    const int n = trace.nranks();
    for (const Resource& r : machine.resources()) {
      bw_.push_back(r.gbps * r.efficiency * 1e3 * options.efficiency);
      bw_reduce_.push_back((r.reduce_gbps > 0 ? r.reduce_gbps : r.gbps) * r.efficiency * 1e3 *
                           options.efficiency);
      bw_local_.push_back((r.local_gbps > 0 ? r.local_gbps : r.gbps) * r.efficiency * 1e3 *
                          options.efficiency);
      shared_only_.push_back(r.shared_only);
    }
    reducer_base_ = static_cast<int>(bw_.size());
    if (options.reduce_gbps > 0) {
      for (int d = 0; d < machine.endpoints(); ++d) {
        bw_.push_back(options.reduce_gbps * 1e3);
        bw_reduce_.push_back(options.reduce_gbps * 1e3);
        bw_local_.push_back(options.reduce_gbps * 1e3);
        shared_only_.push_back(false);
      }
    }
    // A page fault takes fault_us of one core: a rank alone maps pages in at kPageBytes per
    // fault_us, all ranks together at that per core.
    bw_fault_ = bw_;
    if (machine.host() && machine.fault_us() > 0) {
      const double one = kPageBytes / machine.fault_us();
      for (int d = 0; d < machine.size(); ++d) {
        const Route route = machine.RouteOf(d, d, false);
        for (int res : route.resources) {
          bw_fault_[res] = res == route.resources.back() && route.resources.size() > 1
                               ? one * machine.host_core_count()
                               : one;
        }
      }
    }
    count_.assign(bw_.size(), 0);
    users_.resize(bw_.size());
    busy_.assign(bw_.size(), 0);
    pc_.assign(n, 0);
    clock_.assign(n, options.call_us + trace.start_us);
    blocked_.assign(n, -1);
    done_.resize(n);
    // A host's local copies are transfers of a rank to itself (they share the cores and the
    // memory with every other copy): each gets a handle past the trace's own.
    local_copies_ = machine.host() && options.copy_gbps == 0;
    // Copies of lines another core wrote last: priced where the host gives their rates and the
    // ranks' copies are modelled. Where ranks outnumber the cores, another rank shares a core
    // with the copier part of the time: of the other ranks, ranks / cores - 1 on its own core.
    dirty_ = local_copies_ && machine.prices_dirty();
    if (dirty_) {
      const double ranks = machine.size(), cores = machine.host_core_count();
      dirty_share_ = ranks > cores && ranks > 1 ? (ranks - ranks / cores) / (ranks - 1) : 1.0;
      if (written != nullptr) written_ = *written;
      written_.ranks.resize(n);
      written_.traffic.resize(std::max(machine.endpoints(), n), 0.0);
    }
    cores_busy_.resize(machine.host() ? machine.host_core_count() : 0);
    oversubscribed_ = machine.host() && machine.size() > machine.host_core_count();
    awake_at_.assign(n, -kInf);
    next_local_.assign(n, 0);
    // Each run of posts between two waits (or copies) is one batch: its posts are paired when
    // it holds both a send and a receive (only a machine with an exchange latency asks).
    if (machine.exchange_us() >= 0) paired_.resize(n);
    for (int r = 0; r < n && !paired_.empty(); ++r) {
      const std::vector<TraceOp>& ops = trace.ranks[r];
      paired_[r].assign(ops.size(), 0);
      for (size_t i = 0; i < ops.size();) {
        size_t end = i;
        bool sends = false, receives = false;
        for (; end < ops.size() && ops[end].kind <= TraceOp::kRecvReduce; ++end) {
          (ops[end].kind == TraceOp::kSend ? sends : receives) = true;
        }
        for (size_t k = i; k < end; ++k) paired_[r][k] = sends && receives;
        i = std::max(end, i + 1);
      }
    }
    for (int r = 0; r < n; ++r) {
      size_t copies = 0;
      if (local_copies_) {
        for (const TraceOp& op : trace.ranks[r])
          copies += op.kind == TraceOp::kCopy || op.kind == TraceOp::kFault ||
                    op.kind == TraceOp::kReduce;
      }
      done_[r].assign(trace.handles[r] + copies, -1);
      next_local_[r] = trace.handles[r];
    }
  }

  bool prices_dirty() const { return dirty_; }
  const Written& written() const { return written_; }

  StatusOr<Replay> Go() {
    const int n = trace_.nranks();
    for (int r = 0; r < n; ++r) LOOM_RETURN_IF_ERROR(Advance(r));
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      if (e.kind == 0) {
        Start(e.id, e.time, e.version != 0);
      } else if (classes_[e.id].version == e.version) {
        LOOM_RETURN_IF_ERROR(EndDue(e.id, e.time));
      }
    }
    Replay out;
    out.transfers = flows_.size();
    out.rank_end_us = clock_;
    for (int r = 0; r < n; ++r) {
      if (pc_[r] < trace_.ranks[r].size()) return Stuck(r);
      out.time_us = std::max(out.time_us, clock_[r]);
    }
    for (size_t i = 0; i < bw_.size(); ++i) {
      const double busy = busy_[i];
      if (busy > 0 && busy > out.bottleneck_busy_us) {
        out.bottleneck_busy_us = busy;
        out.bottleneck = static_cast<int>(i);
      }
    }
    if (out.bottleneck >= 0) {
      out.bottleneck_name = out.bottleneck < reducer_base_
                                ? machine_.resources()[out.bottleneck].name
                                : StrCat("rank", out.bottleneck - reducer_base_, ".reduce");
    }
    return out;
  }

 private:
  // Runs rank r's ops until it must wait for a transfer or its trace ends.
  Status Advance(int r) {
    const std::vector<TraceOp>& ops = trace_.ranks[r];
    while (pc_[r] < ops.size()) {
      const TraceOp& op = ops[pc_[r]];
      switch (op.kind) {
        case TraceOp::kSend:
        case TraceOp::kRecv:
        case TraceOp::kRecvReduce: {
          LOOM_ENFORCE(op.peer >= 0 && op.peer < trace_.nranks() && op.peer != r, "rank ", r,
                       " posts to peer ", op.peer, " of ", trace_.nranks());
          LOOM_ENFORCE(op.handle >= 0 && op.handle < static_cast<int>(done_[r].size()), "rank ", r,
                       " posts handle ", op.handle, " beyond its ", done_[r].size());
          const double at = clock_[r];
          clock_[r] += options_.post_us;
          LOOM_RETURN_IF_ERROR(Match(r, op, at));
          break;
        }
        case TraceOp::kWait: {
          LOOM_ENFORCE(op.handle >= 0 && op.handle < static_cast<int>(done_[r].size()), "rank ", r,
                       " waits on unknown handle ", op.handle);
          const double done = done_[r][op.handle];
          if (done < 0) {
            blocked_[r] = op.handle;
            return Status::OK();
          }
          clock_[r] = std::max(clock_[r], done);
          break;
        }
        case TraceOp::kCopy:
        case TraceOp::kReduce: {
          const bool reduce = op.kind == TraceOp::kReduce;
          if (local_copies_ && op.bytes > 0) {
            const int handle = next_local_[r]++;
            Flow f;
            f.src = f.dst = r;
            f.src_handle = f.dst_handle = handle;
            f.bytes = static_cast<double>(op.bytes);
            const int device = trace_.device_of(r);
            Route route = RouteFor(device, device, reduce);
            route.latency_us = 0;
            double extra = 0;
            if (dirty_ && !reduce) {
              const Found read = Read(r, op.addr2, op.bytes, device);
              extra = Dirty(read, Write(r, op.addr, op.bytes, device), op.bytes, route.resources,
                            bw_local_);
            }
            f.cls = ClassFor(r, r, route, -1, reduce, false, false, extra);
            flows_.push_back(f);
            events_.push(Event{clock_[r], 0, static_cast<int>(flows_.size()) - 1, 0});
            blocked_[r] = handle;
            return Status::OK();
          }
          const double gbps = reduce ? options_.reduce_gbps : options_.copy_gbps;
          if (gbps > 0) clock_[r] += op.bytes / (gbps * 1e3);
          break;
        }
        case TraceOp::kFinalize:
          if (options_.reduce_gbps > 0) clock_[r] += op.bytes / (options_.reduce_gbps * 1e3);
          break;
        case TraceOp::kFault:
          // The kernel's work of mapping in the pages runs on the rank's CPU and shares the
          // cores with every copy and reduction: a local stream of the pages' bytes at the rate
          // fault_us gives one core (bw_fault_).
          if (local_copies_ && machine_.fault_us() > 0 && op.bytes > 0) {
            const int handle = next_local_[r]++;
            Flow f;
            f.src = f.dst = r;
            f.src_handle = f.dst_handle = handle;
            f.bytes = std::ceil(static_cast<double>(op.bytes) / kPageBytes) * kPageBytes;
            const int device = trace_.device_of(r);
            Route route = RouteFor(device, device, false);
            route.latency_us = 0;
            f.cls = ClassFor(r, r, route, -1, false, false, /*fault=*/true);
            flows_.push_back(f);
            events_.push(Event{clock_[r], 0, static_cast<int>(flows_.size()) - 1, 0});
            blocked_[r] = handle;
            return Status::OK();
          }
          break;
      }
      ++pc_[r];
    }
    return Status::OK();
  }

  Status Match(int r, const TraceOp& op, double at) {
    const bool send = op.kind == TraceOp::kSend;
    const int src = send ? r : op.peer, dst = send ? op.peer : r;
    auto key = std::make_tuple(src, dst, op.tag);
    Post mine{r,
              op.handle,
              at,
              op.bytes,
              op.kind == TraceOp::kRecvReduce,
              !paired_.empty() && paired_[r][pc_[r]] != 0,
              op.addr,
              op.addr2};
    auto& waiting = send ? recvs_[key] : sends_[key];
    if (waiting.empty()) {
      (send ? sends_[key] : recvs_[key]).push_back(mine);
      return Status::OK();
    }
    const Post other = waiting.front();
    waiting.pop_front();
    const Post& s = send ? mine : other;
    const Post& v = send ? other : mine;
    if (s.bytes != v.bytes) {
      return InvalidArgument("rank ", src, " sends ", s.bytes, " bytes to rank ", dst, " (tag ",
                             op.tag, ") which receives ", v.bytes);
    }
    Flow f;
    f.src = src;
    f.src_handle = s.handle;
    // Who copies: the receiver, or on hosts whose transport says so the rank posting now, whose
    // post found the other's waiting (posted at the same instant: a race, the receiver), unless
    // that is a send handing a large transfer to its receiver.
    const bool handed = send && static_cast<double>(s.bytes) >= machine_.handoff_bytes();
    const int copier = machine_.matcher_copies() && s.time != v.time && !handed ? r : dst;
    const Route& route =
        copier == dst ? RouteFor(trace_.device_of(src), trace_.device_of(dst), v.reduce)
                      : RouteFor(trace_.device_of(copier), trace_.device_of(copier), v.reduce);
    // The side that posted first is the one waiting: the message wakes it. A rendezvous (the
    // handshake before a large message's data) follows, even where the message rode on a
    // wake-up already under way; on a host its processes answer it on a core, so it queues for
    // the cores as wake-ups do.
    // A host's receiver that posted a send of its own with this receive (an exchange step)
    // pays the exchange latency where the machine gives one.
    const double latency = v.paired ? machine_.exchange_us() : route.latency_us;
    double ready = WakeUp(std::max(s.time, v.time), latency, s.time <= v.time ? s.rank : v.rank);
    if (s.bytes > machine_.step_bytes() && machine_.step_us() > 0)
      ready = OnCore(ready, machine_.step_us());
    if (s.bytes > machine_.eager_bytes() && machine_.rendezvous_us() > 0)
      ready = OnCore(ready, machine_.rendezvous_us());
    if (const double extra = machine_.message_us(static_cast<double>(s.bytes)); extra > 0)
      ready = OnCore(ready, extra);
    f.dst = dst;
    f.dst_handle = v.handle;
    f.bytes = static_cast<double>(s.bytes);
    const bool reduce = v.reduce && options_.reduce_gbps > 0;
    // The copier's core reads the sender's source (and, reducing, the receiver's operand) and
    // writes the receiver's destination: lines another core wrote last cost it more. A message
    // small enough to go through the transport's own fragments pays what they cost (message_us)
    // whoever wrote the buffers; the writers are kept all the same (the sender's core reads its
    // buffer into the fragment).
    double extra = 0;
    if (dirty_) {
      const int cpu = trace_.device_of(copier);
      const bool fragment = static_cast<double>(s.bytes) <= machine_.fragment_bytes();
      Found read = Read(src, s.addr, s.bytes, fragment ? trace_.device_of(src) : cpu);
      if (v.reduce) {
        const Found local = Read(dst, v.addr2, s.bytes, cpu);
        const double share = read.share + local.share;
        if (share > 0) read.age = (read.share * read.age + local.share * local.age) / share;
        read.share = share;
      }
      const WriteFinds write = Write(dst, v.addr, s.bytes, cpu);
      if (!fragment) {
        extra = Dirty(read, write, s.bytes, route.resources,
                      v.reduce     ? bw_reduce_
                      : src == dst ? bw_local_
                                   : bw_);
      }
    }
    f.cls = ClassFor(src, dst, route, reduce ? trace_.device_of(dst) : -1, v.reduce, copier != dst,
                     false, extra);
    flows_.push_back(f);
    events_.push(Event{ready, 0, static_cast<int>(flows_.size()) - 1, 0});
    return Status::OK();
  }

  // When a transfer whose two sides are posted at `posted` can start. On a host the latency is
  // the waiting rank's (`sleeper`'s) wake-up, which needs a core for that long: wake-ups beyond
  // the core count queue (the earliest gap of `latency` on any core at or after `posted`), so
  // steps in which every rank waits cost more than a chain where one does. Where the receiver
  // copies (MPI), a message that is ready before a wake-up of its rank already under way ends
  // is picked up by it: a process polling its progress engine finds every message that arrived
  // meanwhile; one posted when that wake-up has ended (the next round of an exchange) is a
  // message of its own and pays its latency. Where the matcher copies (in-process), or where
  // processes outnumber the cores (a process that found its message yields the core before it
  // polls again, as Open MPI's do when oversubscribed: 4 processes on 2 cores ran the multi-tree,
  // each rank receiving on several trees at once, no faster than the ring), every request wakes
  // its rank on its own. Elsewhere: posted + latency.
  double WakeUp(double posted, double latency, int sleeper) {
    if (cores_busy_.empty() || latency <= 0) return posted + latency;
    const bool polls = !machine_.matcher_copies() && !oversubscribed_;
    if (polls && posted < awake_at_[sleeper]) return awake_at_[sleeper];
    awake_at_[sleeper] = OnCore(posted, latency);
    return awake_at_[sleeper];
  }

  // Work of `us` on one of a host's cores from `at` on: the earliest gap that long on any core
  // (wake-ups and kernel work queue for the cores); returns when it ends. Elsewhere at + us.
  double OnCore(double at, double us) {
    if (cores_busy_.empty()) return at + us;
    double best = kInf;
    size_t best_core = 0;
    for (size_t c = 0; c < cores_busy_.size(); ++c) {
      const std::map<double, double>& busy = cores_busy_[c];  // start -> end
      double start = at;
      auto it = busy.upper_bound(start);
      if (it != busy.begin() && std::prev(it)->second > start) start = std::prev(it)->second;
      for (; it != busy.end() && it->first < start + us; ++it) start = std::max(start, it->second);
      if (start < best) {
        best = start;
        best_core = c;
      }
    }
    cores_busy_[best_core].emplace(best, best + us);
    return best + us;
  }

  // Splits `rank`'s segments so that whole ones cover [addr, end), a range no op has written
  // becoming the rank's own; returns the first of them.
  std::map<uint64_t, Segment>::iterator Cover(int rank, uint64_t addr, uint64_t end) {
    std::map<uint64_t, Segment>& w = written_.ranks[rank];
    auto it = w.upper_bound(addr);
    if (it != w.begin()) {
      const auto prev = std::prev(it);
      if (prev->first == addr) {
        it = prev;
      } else if (prev->second.end > addr) {  // keep its head
        const Segment tail = prev->second;
        prev->second.end = addr;
        it = w.emplace_hint(it, addr, tail);
      }
    }
    auto first = w.end();
    for (uint64_t at = addr; at < end; at = it->second.end, ++it) {
      if (it == w.end() || it->first > at) {  // a gap: the rank's own
        const uint64_t gap_end = it == w.end() ? end : std::min(end, it->first);
        it = w.emplace_hint(it, at, Segment{gap_end, trace_.device_of(rank)});
      }
      if (it->second.end > end) {  // keep its tail
        const Segment tail = it->second;
        it->second.end = end;
        w.emplace_hint(std::next(it), end, tail);
      }
      if (first == w.end()) first = it;
    }
    return first;
  }

  // What a copy finds in the lines it reads or writes: the share another core wrote last (for a
  // write also: the share the copier wrote itself that another core has read since), and that
  // other core's traffic since then, byte-weighted (the more it has touched since, the fewer of
  // those lines its caches still hold).
  struct Found {
    double share = 0, age = 0;
  };
  struct WriteFinds {
    Found foreign, reread;
  };

  static Found Share(double bytes, double weighted_age, uint64_t total) {
    if (bytes <= 0) return {};
    return {bytes / static_cast<double>(total), weighted_age / bytes};
  }

  // `cpu` reads [addr, addr + bytes) of `rank`'s memory: the share another core wrote last
  // that `cpu` has not read since (its lines are then in `cpu`'s caches too: a read-only
  // buffer, a send buffer the schedule never writes, costs a foreign read once, not every
  // call). Nothing for an op that records no address.
  Found Read(int rank, uint64_t addr, uint64_t bytes, int cpu) {
    if (addr == 0 || bytes == 0) return {};
    const uint64_t end = addr + bytes, bit = uint64_t{1} << (cpu % 64);
    std::vector<double>& traffic = written_.traffic;
    double foreign = 0, age = 0;
    for (auto it = Cover(rank, addr, end); it != written_.ranks[rank].end() && it->first < end;
         ++it) {
      Segment& seg = it->second;
      const double length = static_cast<double>(seg.end - it->first);
      if (seg.writer != cpu && (seg.readers & bit) == 0) {
        foreign += length;
        age += length * (traffic[seg.writer] - seg.written_at);
      }
      seg.readers |= bit;
      if (seg.writer != cpu) {
        seg.reader = cpu;
        seg.read_at = traffic[cpu];
      }
    }
    traffic[cpu] += static_cast<double>(bytes);
    return Share(foreign, age, bytes);
  }

  // `cpu` writes [addr, addr + bytes) of `rank`'s memory.
  WriteFinds Write(int rank, uint64_t addr, uint64_t bytes, int cpu) {
    if (addr == 0 || bytes == 0) return {};
    std::map<uint64_t, Segment>& w = written_.ranks[rank];
    std::vector<double>& traffic = written_.traffic;
    const uint64_t end = addr + bytes, bit = uint64_t{1} << (cpu % 64);
    double foreign = 0, foreign_age = 0, reread = 0, reread_age = 0;
    auto it = Cover(rank, addr, end);
    const auto first = it;
    for (; it != w.end() && it->first < end; ++it) {
      const Segment& seg = it->second;
      const double length = static_cast<double>(seg.end - it->first);
      if (seg.writer != cpu) {
        foreign += length;
        foreign_age += length * (traffic[seg.writer] - seg.written_at);
      } else if ((seg.readers & ~bit) != 0 && seg.reader >= 0) {
        reread += length;
        reread_age += length * (traffic[seg.reader] - seg.read_at);
      }
    }
    w.erase(first, it);
    traffic[cpu] += static_cast<double>(bytes);
    Segment mine{end, cpu};
    mine.written_at = traffic[cpu];
    w.emplace(addr, mine);
    return {Share(foreign, foreign_age, bytes), Share(reread, reread_age, bytes)};
  }

  // The rate (bytes per microsecond) a transfer over `resources` gets alone at `bw`: the
  // slowest of them that binds a transfer alone.
  double AloneRate(const std::vector<int>& resources, const std::vector<double>& bw) const {
    double rate = kInf;
    for (int r : resources) {
      if (!shared_only_[r]) rate = std::min(rate, bw[r]);
    }
    return rate;
  }

  // Microseconds per byte a copy of `bytes` adds whose reads find `read` (a share of 0-2: two
  // operands of a reduction) and whose writes find `write`, rounded to 2 % steps (classes of the
  // same cost stay one). Each part is priced at the table's size of the copy plus the other
  // core's traffic since (lines it has since pushed out of its caches cost what clean ones do).
  // In-process (the matcher copies) the table prices a bare memcpy between two threads, not
  // the transport's transfer: other cores' lines make the copy cost the table's clean rate
  // plus their extra per byte in all, of which a transfer that runs slower than that clean
  // copy anyway (the transport's own work beside the copy: its rate alone over `resources`
  // at `bw`) pays only what goes beyond its own rate: the stalls on the other core's lines overlap
  // that work (a 2-rank tree allreduce of 256 KiB, whose broadcast copies the result the other core
  // has just reduced, took less than a reduce and a broadcast of lines at rest, 32 against 39 us,
  // where the broadcast's rate, 19 GB/s, was already the table's foreign one, 17, against its clean
  // 35). Over MPI the table times the transport's own copy (process_vm_readv, Open MPI's
  // single-copy path), so its extras are the transfer's own and come on top of its rate.
  double Dirty(const Found& read, const WriteFinds& write, uint64_t bytes,
               const std::vector<int>& resources, const std::vector<double>& bw) const {
    if (read.share <= 0 && write.foreign.share <= 0 && write.reread.share <= 0) return 0;
    const double b = static_cast<double>(bytes);
    auto at = [&](const Found& f) { return machine_.dirty_us(b + std::max(0.0, f.age)); };
    const HostProtocol::DirtyCost src = at(read), dst = at(write.foreign), again = at(write.reread);
    // Source and destination both foreign overlap: `both` for the part where both are.
    const double both = std::min(std::min(read.share, 1.0), write.foreign.share);
    const HostProtocol::DirtyCost pair =
        machine_.dirty_us(b + std::max(0.0, std::max(read.age, write.foreign.age)));
    const double x =
        dirty_share_ * (read.share * src.src + write.foreign.share * dst.dst +
                        write.reread.share * again.read - both * (src.src + dst.dst - pair.both));
    double beyond = x;
    if (machine_.matcher_copies()) {
      const double alone = AloneRate(resources, bw);
      if (alone < kInf) beyond += machine_.dirty_us(b).clean - 1 / alone;
    }
    if (beyond <= 0) return 0;
    return std::exp(std::round(std::log(beyond) * 50) / 50);
  }

  // Transfers between the same two trace ranks (same route, same reducer, same cost of other
  // cores' lines) form one class. `route_reduces`: the transfer reduces on arrival (whether or
  // not a reducer is modelled).
  int ClassFor(int src, int dst, const Route& route, int reducer_device, bool route_reduces,
               bool sender_copies = false, bool fault = false, double extra = 0) {
    const bool reduce = reducer_device >= 0;
    uint64_t bits = 0;
    static_assert(sizeof(bits) == sizeof(extra));
    std::memcpy(&bits, &extra, sizeof(bits));
    const std::pair<uint64_t, uint64_t> key{
        (((uint64_t(uint32_t(src)) << 32 | uint32_t(dst)) * 2 + route_reduces) * 2 +
         sender_copies) *
                2 +
            fault,
        bits};
    auto it = class_of_.find(key);
    if (it != class_of_.end()) return it->second;
    Class c;
    c.resources = route.resources;
    c.reduce = route_reduces;
    c.local = src == dst;  // only a rank's local work streams from a rank to itself
    c.fault = fault;
    c.extra = extra;
    if (reduce) c.resources.push_back(reducer_base_ + reducer_device);
    classes_.push_back(std::move(c));
    const int id = static_cast<int>(classes_.size()) - 1;
    for (int r : classes_[id].resources) users_[r].push_back(id);
    class_of_.emplace(key, id);
    return id;
  }

  const std::vector<double>& RatesOf(const Class& c) const {
    // A rank's local copies run at the local rate; its local reductions at the reduce rates.
    return c.fault ? bw_fault_ : c.reduce ? bw_reduce_ : c.local ? bw_local_ : bw_;
  }

  const Route& RouteFor(int a, int b, bool reduce) {
    const uint64_t key = (uint64_t(uint32_t(a)) << 32 | uint32_t(b)) * 2 + reduce;
    auto it = routes_.find(key);
    if (it == routes_.end()) it = routes_.emplace(key, machine_.RouteOf(a, b, reduce)).first;
    return it->second;
  }

  void Start(int id, double now, bool booked) {
    const Flow& f = flows_[id];
    Class& c = classes_[f.cls];
    // Busy time: the bytes at the rate this kind of transfer runs on the resource alone.
    const std::vector<double>& bw = RatesOf(c);
    double alone_us = 0;  // at the slowest of them
    for (int r : c.resources) {
      if (!shared_only_[r]) alone_us = std::max(alone_us, f.bytes / bw[r]);
    }
    alone_us += f.bytes * c.extra;
    // Where ranks outnumber the cores, a copy holds one of them for as long as it takes alone,
    // and wake-ups and handshakes wait for a free one (4 ranks on 2 cores: a ring step of 16 KiB
    // pieces costs its copies on top of its wake-ups, not beside them). In-process the copy
    // itself waits for a free core too, its rank's thread runs only on one (`booked`: the core
    // already taken for it): four trees' copies at once take the two cores in turn (4 ranks, the
    // multi-tree ran no faster than the ring at 64-256 KiB, 42 / 97 us against 40 / 93, where
    // copies beside each other put it 10 % ahead). Over MPI the same rule put the multi-tree
    // level with the ring at 4 ranks, 1 and 16 MiB, where the ring ran 10 % ahead (the fastest
    // algorithm missed in six of the fourteen records): not applied there.
    if (oversubscribed_ && alone_us > 0 && !booked) {
      const double start = OnCore(now, alone_us) - alone_us;
      if (start > now && machine_.matcher_copies()) {
        events_.push(Event{start, 0, id, 1});
        return;
      }
    }
    for (int r : c.resources) busy_[r] += f.bytes / bw[r];
    Sync(c, now);
    c.members.push({c.service + f.bytes, id});
    Change(f.cls, +1, now);
  }

  // Ends every member of class `id` that has received all its bytes by `now`.
  Status EndDue(int id, double now) {
    Sync(classes_[id], now);
    ended_.clear();
    while (!classes_[id].members.empty()) {
      Class& c = classes_[id];
      const auto [threshold, flow] = c.members.top();
      // Due within rounding: what is left would take less than a nanosecond-scale sliver of
      // the clock (a later event at the same representable time would never make progress).
      const double slack = 1e-9 * std::max(1.0, threshold) + c.rate * 1e-12 * std::max(1.0, now);
      const bool stalled = ended_.empty() && now + (threshold - c.service) / c.rate <= now;
      if (threshold > c.service + slack && !stalled) break;
      c.members.pop();
      ended_.push_back(flow);
    }
    if (ended_.empty()) {
      Reschedule(id, now);  // rounding: not due yet
    } else {
      Change(id, -static_cast<int>(ended_.size()), now);
    }
    // Advance may add flows and classes: work on copies.
    const std::vector<int> ended = ended_;
    for (int flow : ended) {
      const Flow f = flows_[flow];
      for (auto [rank, handle] : {std::pair{f.src, f.src_handle}, std::pair{f.dst, f.dst_handle}}) {
        done_[rank][handle] = now;
        if (blocked_[rank] == handle) {
          blocked_[rank] = -1;
          clock_[rank] = std::max(clock_[rank], now);
          ++pc_[rank];
          LOOM_RETURN_IF_ERROR(Advance(rank));
        }
      }
    }
    return Status::OK();
  }

  // Brings a class's service up to `now` at its current rate.
  void Sync(Class& c, double now) {
    if (!c.members.empty() && c.rate > 0) c.service += c.rate * (now - c.last);
    c.last = now;
  }

  // A member joins (+1) or leaves (-1) class `id`: every class sharing a resource with it gets
  // its new rate.
  void Change(int id, int delta, double now) {
    touched_.clear();
    for (int r : classes_[id].resources) {
      for (int other : users_[r]) touched_.push_back(other);
    }
    std::sort(touched_.begin(), touched_.end());
    touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
    for (int other : touched_) Sync(classes_[other], now);
    for (int r : classes_[id].resources) count_[r] += delta;
    for (int other : touched_) {
      Class& c = classes_[other];
      if (c.members.empty()) {
        ++c.version;  // nothing to end
        continue;
      }
      double rate = kInf;
      const std::vector<double>& bw = RatesOf(c);
      for (int r : c.resources) {
        // A capacity that binds only shared transfers leaves one alone at its other rates.
        if (shared_only_[r] && count_[r] < 2) continue;
        rate = std::min(rate, bw[r] / std::max(1, count_[r]));
      }
      // The copier's own stalls on other cores' lines come on top of its share.
      c.rate = c.extra > 0 ? 1 / (1 / rate + c.extra) : rate;
      Reschedule(other, now);
    }
  }

  void Reschedule(int id, double now) {
    Class& c = classes_[id];
    ++c.version;
    if (c.members.empty()) return;
    const double left = std::max(0.0, c.members.top().first - c.service);
    events_.push(Event{c.rate == kInf ? now : now + left / c.rate, 1, id, c.version});
  }

  Status Stuck(int r) {
    const int h = blocked_[r];
    for (const TraceOp& op : trace_.ranks[r]) {
      if (op.kind <= TraceOp::kRecvReduce && op.handle == h) {
        return FailedPrecondition("simulated call never ends: rank ", r, " waits for its ",
                                  op.kind == TraceOp::kSend ? "send to" : "receive from", " rank ",
                                  op.peer, " (", op.bytes, " bytes, tag ", op.tag,
                                  ") which the peer never posts");
      }
    }
    return FailedPrecondition("simulated call never ends: rank ", r, " stops at op ", pc_[r]);
  }

  const Machine& machine_;
  const Trace& trace_;
  EngineOptions options_;
  std::vector<double> bw_;         // bytes per microsecond, per resource
  std::vector<double> bw_reduce_;  // the same for transfers that reduce on arrival
  std::vector<double> bw_local_;   // ... for a rank's local copies
  std::vector<double> bw_fault_;   // ... and for the pages the kernel maps in for a rank
  std::vector<char> shared_only_;  // per resource: binds only transfers that share it
  int reducer_base_ = 0;
  std::vector<int> count_;               // active flows per resource
  std::vector<std::vector<int>> users_;  // classes per resource
  std::vector<double> busy_;             // microseconds of work per resource
  bool local_copies_ = false;
  std::vector<std::map<double, double>> cores_busy_;  // hosts: per core, wake-ups, handshakes and
                                                      // (oversubscribed) copies: start -> end
  std::vector<double> awake_at_;           // hosts: per rank, when its latest wake-up ends
  bool oversubscribed_ = false;            // hosts: more ranks than cores
  std::vector<int> next_local_;            // per rank: the handle of its next local copy
  std::vector<std::vector<char>> paired_;  // per rank and op: a post of an exchange (Post)
  std::vector<size_t> pc_;
  std::vector<double> clock_;
  std::vector<int> blocked_;
  std::vector<std::vector<double>> done_;
  std::vector<Flow> flows_;
  std::vector<Class> classes_;
  std::unordered_map<std::pair<uint64_t, uint64_t>, int, ClassKeyHash> class_of_;
  bool dirty_ = false;        // copies of other cores' lines priced (HostProtocol::dirty)
  double dirty_share_ = 1.0;  // of another rank's writes, the share on another core
  Written written_;
  std::vector<int> touched_, ended_;
  std::unordered_map<uint64_t, Route> routes_;
  std::unordered_map<std::tuple<int, int, uint64_t>, std::deque<Post>, KeyHash> sends_, recvs_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
};

}  // namespace

StatusOr<Replay> ReplayTrace(const Machine& machine, const Trace& trace,
                             const EngineOptions& options) {
  if (trace.device.empty()) {
    LOOM_ENFORCE(trace.nranks() == machine.size(), "a trace of ", trace.nranks(),
                 " ranks on a machine of ", machine.size(), " devices");
  } else {
    LOOM_ENFORCE(trace.device.size() == trace.ranks.size(), "a trace of ", trace.nranks(),
                 " ranks maps ", trace.device.size(), " of them to devices");
    for (int d : trace.device) {
      LOOM_ENFORCE(d >= 0 && d < machine.endpoints(), "a trace rank on device ", d, " of ",
                   machine.endpoints());
    }
  }
  LOOM_ENFORCE(options.efficiency > 0 && options.efficiency <= 1, "efficiency ", options.efficiency,
               " is outside (0, 1]");
  LOOM_ENFORCE(options.post_us >= 0 && options.reduce_gbps >= 0 && options.copy_gbps >= 0 &&
                   options.call_us >= 0,
               "negative engine costs");
  Engine engine(machine, trace, options);
  StatusOr<Replay> first = engine.Go();
  if (!first.ok() || !engine.prices_dirty()) return first;
  // A call is timed in a loop over the same buffers: the one measured starts where the one
  // before ended, each range written last by the core that wrote it then.
  Engine steady(machine, trace, options, &engine.written());
  return steady.Go();
}

}  // namespace loom::sim
