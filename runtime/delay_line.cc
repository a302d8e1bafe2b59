#include "runtime/delay_line.h"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <queue>
#include <random>
#include <unordered_map>

namespace loom::runtime {
namespace {

constexpr size_t kVnetHeader = 10;  // struct virtio_net_hdr, the TAP default
constexpr size_t kMaxFrame = kVnetHeader + 65536 + 64;
constexpr int kReadsPerWake = 64;  // per TAP, so that one busy node cannot starve the others
// Events due this soon are handled at once: a wakeup costs tens of microseconds on a virtual
// machine, more than the early delivery does (the rate stays exact: a port's schedule is kept
// on the ideal times).
constexpr int64_t kEarlyNs = 20000;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint64_t Mac(const char* p) {
  uint64_t mac = 0;
  std::memcpy(&mac, p, 6);
  return mac;
}

}  // namespace

// Frames are slots of one pool (refcounted: a flooded frame goes to several ports). An event
// is a frame reaching a port (kArrive: it queues there) or leaving it into its node (kDeliver).
struct DelayLine::State {
  enum Kind { kArrive, kDeliver };
  struct Event {
    int64_t t;
    uint64_t seq;  // ties in time keep the order of reading
    Kind kind;
    int port;  // node * nics + nic of the destination
    int slot;
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  std::vector<std::vector<int>> taps;
  int nodes = 0, nics = 0;
  DelayLineOptions options;
  int wake = -1;  // an eventfd: the destructor's stop
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  uint64_t seq = 0;
  std::vector<std::vector<char>> pool;
  std::vector<int> refs, free_slots;
  std::vector<std::unordered_map<uint64_t, int>> mac_to_node;  // per rail
  std::vector<int64_t> link_free;  // per source port: when its wire delivers in order
  std::vector<int64_t> port_free;  // per destination port: when it is done serializing
  std::vector<uint64_t> queued;    // per destination port: bytes waiting there
  uint64_t buffer_bytes = 0;
  std::mt19937_64 rng;
  std::atomic<uint64_t> frames{0}, bytes{0}, dropped_full{0};

  int Slot() {
    if (free_slots.empty()) {
      pool.emplace_back();
      pool.back().reserve(kMaxFrame);
      refs.push_back(0);
      return static_cast<int>(pool.size()) - 1;
    }
    int s = free_slots.back();
    free_slots.pop_back();
    return s;
  }
  void Release(int slot) {
    if (--refs[slot] == 0) free_slots.push_back(slot);
  }
  int64_t SerializeNs(size_t frame_bytes) const {
    if (options.rate_bps == 0) return 0;
    return static_cast<int64_t>(static_cast<double>(frame_bytes - kVnetHeader) * 8e9 /
                                static_cast<double>(options.rate_bps));
  }
  void Forward(int src, int nic, int slot, int64_t now);
  void Handle(const Event& e);
};

void DelayLine::State::Forward(int src, int nic, int slot, int64_t now) {
  const std::vector<char>& frame = pool[slot];
  if (frame.size() < kVnetHeader + 14) return;
  const char* eth = frame.data() + kVnetHeader;
  auto& table = mac_to_node[nic];
  table[Mac(eth + 6)] = src;
  std::vector<int> to;
  auto known = (eth[0] & 1) ? table.end() : table.find(Mac(eth));
  if (known != table.end()) {
    if (known->second != src) to.push_back(known->second);
  } else {
    for (int d = 0; d < nodes; ++d)
      if (d != src) to.push_back(d);
  }
  // The wire from src: each frame delayed by its own draw, never before the one ahead of it.
  double delay_us = options.delay_us;
  if (options.jitter_us > 0)
    delay_us += std::uniform_real_distribution<double>(-options.jitter_us, options.jitter_us)(rng);
  const int from = src * nics + nic;
  const int64_t arrive =
      std::max(now + static_cast<int64_t>(std::max(0.0, delay_us) * 1000), link_free[from]);
  link_free[from] = arrive;
  for (int d : to) {
    ++refs[slot];
    events.push(Event{arrive, seq++, kArrive, d * nics + nic, slot});
  }
}

void DelayLine::State::Handle(const Event& e) {
  const size_t size = pool[e.slot].size();
  if (e.kind == kArrive) {
    if (queued[e.port] + size > buffer_bytes) {
      ++dropped_full;
      Release(e.slot);
      return;
    }
    queued[e.port] += size;
    port_free[e.port] = std::max(port_free[e.port], e.t) + SerializeNs(size);
    events.push(Event{port_free[e.port], seq++, kDeliver, e.port, e.slot});
    return;
  }
  queued[e.port] -= size;
  const int fd = taps[e.port / nics][e.port % nics];
  // A TAP write hands the frame to the node's stack; a failure (its backlog full) is a drop.
  if (write(fd, pool[e.slot].data(), size) == static_cast<ssize_t>(size)) {
    ++frames;
    bytes += size;
  } else {
    ++dropped_full;
  }
  Release(e.slot);
}

StatusOr<int> OpenTap(const std::string& name) {
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return NotFound("cannot open /dev/net/tun for ", name, ": ", strerror(errno));
  ifreq request = {};
  request.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  std::strncpy(request.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &request) != 0 ||
      ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6) != 0) {
    const int e = errno;
    close(fd);
    return FailedPrecondition("cannot create TAP device ", name, ": ", strerror(e));
  }
  return fd;
}

StatusOr<std::unique_ptr<DelayLine>> DelayLine::Start(std::vector<std::vector<int>> taps,
                                                      const DelayLineOptions& options) {
  std::unique_ptr<DelayLine> line(new DelayLine());
  auto state = std::make_unique<State>();
  state->nodes = static_cast<int>(taps.size());
  state->nics = taps.empty() ? 0 : static_cast<int>(taps[0].size());
  state->taps = std::move(taps);
  state->options = options;
  state->rng.seed(options.seed);
  state->mac_to_node.resize(state->nics);
  const size_t ports = static_cast<size_t>(state->nodes) * state->nics;
  state->link_free.assign(ports, 0);
  state->port_free.assign(ports, 0);
  state->queued.assign(ports, 0);
  const double longest_s = (options.delay_us + options.jitter_us) * 1e-6 + 0.010;
  state->buffer_bytes = std::max<uint64_t>(
      1 << 20, static_cast<uint64_t>(static_cast<double>(options.rate_bps) / 8 * longest_s));
  state->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (state->wake < 0) {
    for (auto& node : state->taps)
      for (int fd : node) close(fd);
    return ResourceExhausted("eventfd: ", strerror(errno));
  }
  line->state_ = std::move(state);
  line->thread_ = std::thread([l = line.get()] { l->Run(); });
  return line;
}

DelayLine::~DelayLine() {
  if (!state_) return;
  const uint64_t one = 1;
  if (write(state_->wake, &one, sizeof(one)) != sizeof(one)) {
    // An eventfd write fails only on overflow, which one write cannot cause.
  }
  if (thread_.joinable()) thread_.join();
  for (auto& node : state_->taps)
    for (int fd : node) close(fd);
  close(state_->wake);
}

DelayLineStats DelayLine::stats() const {
  return DelayLineStats{state_->frames.load(), state_->bytes.load(), state_->dropped_full.load()};
}

void DelayLine::Run() {
  State& s = *state_;
  prctl(PR_SET_TIMERSLACK, 1UL);  // wake within a microsecond of a frame's time, not 50
  sigset_t all;                   // the launcher's signals are its main thread's (supervisor.h)
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  std::vector<pollfd> fds;
  for (int n = 0; n < s.nodes; ++n)
    for (int j = 0; j < s.nics; ++j) fds.push_back({s.taps[n][j], POLLIN, 0});
  fds.push_back({s.wake, POLLIN, 0});
  while (true) {
    int64_t now = NowNs();
    while (!s.events.empty() && s.events.top().t <= now + kEarlyNs) {
      const State::Event e = s.events.top();
      s.events.pop();
      s.Handle(e);
    }
    timespec wait = {};
    timespec* timeout = nullptr;
    if (!s.events.empty()) {
      const int64_t ns = std::max<int64_t>(0, s.events.top().t - now);
      wait = {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      timeout = &wait;
    }
    if (ppoll(fds.data(), fds.size(), timeout, nullptr) < 0 && errno != EINTR) return;
    if (fds.back().revents != 0) return;
    now = NowNs();
    for (size_t k = 0; k + 1 < fds.size(); ++k) {
      if ((fds[k].revents & POLLIN) == 0) continue;
      for (int reads = 0; reads < kReadsPerWake; ++reads) {
        const int slot = s.Slot();
        std::vector<char>& buf = s.pool[slot];
        buf.resize(kMaxFrame);
        const ssize_t n = read(fds[k].fd, buf.data(), buf.size());
        if (n <= 0) {
          s.free_slots.push_back(slot);
          break;
        }
        buf.resize(static_cast<size_t>(n));
        s.refs[slot] = 1;  // the reader's, released once the copies are queued
        s.Forward(static_cast<int>(k) / s.nics, static_cast<int>(k) % s.nics, slot, now);
        s.Release(slot);
      }
    }
  }
}

}  // namespace loom::runtime
