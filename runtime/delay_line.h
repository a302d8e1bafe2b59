// The switch of an emulated cluster whose links have delay or jitter (runtime/emulate.h). Each
// node's NIC j is a TAP device; a thread of the launcher reads every frame a node sends, holds it
// for the link's delay (plus jitter), and writes it into the TAP of the node it is for, on the
// same rail: a learning switch per rail (destinations learned from source MACs, unknown ones and
// broadcasts flooded). The destination's port serializes at the NIC's rate, so a node's incoming
// traffic is capped at its line rate; the sender's rate is shaped by tbf on its TAP, in the kernel,
// where TCP feels the queue. Frames travel with their virtio-net header (TSO/checksum offload), so
// a 64 KiB TCP segment crosses as one frame.
//
// Jitter: each frame's delay is drawn uniformly from [delay - jitter, delay + jitter] (at least
// 0), from a fixed seed, and never passes the frame before it on the same pair of nodes (a link
// delays, it does not reorder). A port holding more than its buffer (the rate times the longest
// delay, plus 10 ms of traffic, at least 1 MiB) drops what arrives, as a switch does.
//
// Thread-safety: Start and the destructor from one thread; the switch runs on its own.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "base/status.h"

namespace loom::runtime {

struct DelayLineOptions {
  double delay_us = 0;
  double jitter_us = 0;
  uint64_t rate_bps = 0;  // each NIC's; 0: no serialization delay
  uint64_t seed = 1;
};

struct DelayLineStats {
  uint64_t frames = 0;        // delivered (a flooded frame counts once per copy)
  uint64_t bytes = 0;         // delivered, headers included
  uint64_t dropped_full = 0;  // a port's buffer was full
};

class DelayLine {
 public:
  // taps[node][nic]: open TAP descriptors (IFF_TAP | IFF_NO_PI | IFF_VNET_HDR, non-blocking),
  // owned from here on and closed by the destructor (which removes the devices).
  static StatusOr<std::unique_ptr<DelayLine>> Start(std::vector<std::vector<int>> taps,
                                                    const DelayLineOptions& options);
  ~DelayLine();
  DelayLine(const DelayLine&) = delete;
  DelayLine& operator=(const DelayLine&) = delete;

  DelayLineStats stats() const;

 private:
  DelayLine() = default;
  void Run();

  struct State;
  std::unique_ptr<State> state_;
  std::thread thread_;
};

// Opens a TAP device named `name` in the calling thread's network namespace, set up for
// DelayLine (no packet info, virtio-net headers, checksum and TSO offloads, non-blocking,
// close-on-exec). The device lives while the descriptor is open.
StatusOr<int> OpenTap(const std::string& name);

}  // namespace loom::runtime
