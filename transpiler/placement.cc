#include "transpiler/placement.h"

#include <algorithm>
#include <numeric>

namespace loom::transpiler {

StatusOr<PlacementPolicy> ParsePlacementPolicy(const std::string& name) {
  if (name == "bytes") return PlacementPolicy::kBytes;
  if (name == "hash") return PlacementPolicy::kHash;
  if (name == "round_robin") return PlacementPolicy::kRoundRobin;
  return InvalidArgument("owner policy '", name, "' is not one of bytes, hash, round_robin");
}

const char* PlacementPolicyName(PlacementPolicy policy) {
  switch (policy) {
    case PlacementPolicy::kBytes: return "bytes";
    case PlacementPolicy::kHash: return "hash";
    default: return "round_robin";
  }
}

double Placement::Imbalance() const {
  int64_t total = std::accumulate(load.begin(), load.end(), int64_t{0});
  int64_t most = load.empty() ? 0 : *std::max_element(load.begin(), load.end());
  return total > 0 ? static_cast<double>(most) * static_cast<double>(load.size()) / total : 1.0;
}

Placement PlaceItems(const std::vector<PlacementItem>& items, int bins, PlacementPolicy policy) {
  Placement out;
  out.owner.assign(items.size(), 0);
  out.load.assign(static_cast<size_t>(std::max(bins, 1)), 0);
  const uint64_t n = out.load.size();
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (policy == PlacementPolicy::kBytes)
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return items[a].bytes > items[b].bytes; });
  for (size_t k : order) {
    int bin = 0;
    if (policy == PlacementPolicy::kBytes) {
      bin = static_cast<int>(std::min_element(out.load.begin(), out.load.end()) - out.load.begin());
    } else if (policy == PlacementPolicy::kHash) {
      uint64_t h = 1469598103934665603ull;  // FNV-1a
      for (unsigned char ch : items[k].name) h = (h ^ ch) * 1099511628211ull;
      bin = static_cast<int>(h % n);
    } else {
      bin = static_cast<int>(k % n);
    }
    out.owner[k] = bin;
    out.load[bin] += items[k].bytes;
  }
  return out;
}

}  // namespace loom::transpiler
