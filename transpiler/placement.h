// Placement: which of n bins (ranks, parameter servers) owns each item (a parameter, or a block
// of one). The owner modes of the data-parallel transpiler use it per parameter; the same
// policies place parameter blocks on servers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace loom::transpiler {

enum class PlacementPolicy {
  kBytes,       // largest item first onto the least-loaded bin (balanced bytes)
  kHash,        // FNV-1a hash of the name modulo n: stable across runs, machines and programs
  kRoundRobin,  // item i to bin i mod n, in the given order
};

StatusOr<PlacementPolicy> ParsePlacementPolicy(const std::string& name);
const char* PlacementPolicyName(PlacementPolicy policy);

struct PlacementItem {
  std::string name;
  int64_t bytes = 0;
};

struct Placement {
  std::vector<int> owner;     // per item
  std::vector<int64_t> load;  // bytes per bin
  // The most-loaded bin's bytes over the mean (1: perfectly balanced; 1 with no bytes).
  double Imbalance() const;
};

// Requires bins >= 1.
Placement PlaceItems(const std::vector<PlacementItem>& items, int bins, PlacementPolicy policy);

}  // namespace loom::transpiler
