// The spec of an emulated cluster (`loom launch --emulate`): how many nodes, how many NICs each,
// and how every NIC is shaped. Text form:
//   NODES[xNICS]:RATE[:delay=D][:loss=P][:jitter=J]       e.g. 4x2:1gbit:delay=100us
// RATE as tc writes rates (bit, kbit, mbit, gbit, tbit; decimal), or Kb/Mb/Gb/Tb (the same);
// D and J as times (us, ms, s); P a percentage (0.5 or 0.5%). The spec is parsed here once, into
// types; what builds the cluster from it takes an EmulatedCluster, never the text.
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace loom {

struct EmulatedCluster {
  int nodes = 1;
  int nics = 1;             // per node
  uint64_t rate_bps = 0;    // each NIC's rate, bits per second
  double delay_us = 0;      // one-way delay each NIC adds
  double jitter_us = 0;     // delay variation (needs a delay)
  double loss_percent = 0;  // packets each NIC drops, 0..100
};

// The most nodes and NICs per node an emulated cluster may have (namespaces and veth pairs are
// cheap, but every one is a process's worth of kernel state).
inline constexpr int kMaxEmulatedNodes = 64;
inline constexpr int kMaxEmulatedNics = 8;

// InvalidArgument naming the field and quoting the text for anything malformed or out of range.
StatusOr<EmulatedCluster> ParseEmulatedCluster(const std::string& text);

// The spec back in its text form (rates in the largest exact tc unit), so that
// ParseEmulatedCluster(ToString(c)) == c.
std::string ToString(const EmulatedCluster& cluster);

}  // namespace loom
