#include "collective/channels.h"

#include <algorithm>
#include <tuple>

#include "collective/tree_builder.h"

namespace loom::collective {
namespace {

// Steps of the exhaustive path search per (entry, exit) pair before it keeps the best found.
constexpr long long kMaxPathSteps = 200000;

// A path's quality: weakest link first, then fewer reused directed links, then total weight.
struct PathScore {
  int weakest = -1;
  int reuse = 0;
  int total = 0;
  bool operator<(const PathScore& o) const {
    return std::make_tuple(weakest, -reuse, total) < std::make_tuple(o.weakest, -o.reuse, o.total);
  }
};

// Branch and bound over the Hamiltonian paths from `path[0]` to `exit` over real links.
class PathSearch {
 public:
  PathSearch(const Topology& node, int exit, const std::vector<int>& used)
      : node_(node), n_(node.size()), exit_(exit), used_(used), seen_(n_, false) {}

  // The best path found (empty when none exists or the bound ran out before one was found).
  std::vector<int> Run(int entry, PathScore* score) {
    path_ = {entry};
    seen_[entry] = true;
    Visit(PathScore{4, 0, 0});
    *score = best_score_;
    return best_;
  }

 private:
  void Visit(const PathScore& so_far) {
    if (++steps_ > kMaxPathSteps) return;
    const int at = path_.back();
    if (static_cast<int>(path_.size()) == n_) {
      if (at == exit_ && (best_.empty() || best_score_ < so_far))
        best_ = path_, best_score_ = so_far;
      return;
    }
    // Bound: the weakest link can only fall and the reuse only grow.
    if (!best_.empty() &&
        (so_far.weakest < best_score_.weakest ||
         (so_far.weakest == best_score_.weakest && so_far.reuse > best_score_.reuse)))
      return;
    for (int next = 0; next < n_; ++next) {
      if (seen_[next] || !node_.connected(at, next)) continue;
      // The exit comes last.
      if (next == exit_ && static_cast<int>(path_.size()) + 1 < n_) continue;
      PathScore s = so_far;
      s.weakest = std::min(s.weakest, node_.weight(at, next));
      s.reuse += used_[at * n_ + next];
      s.total += node_.weight(at, next);
      seen_[next] = true;
      path_.push_back(next);
      Visit(s);
      path_.pop_back();
      seen_[next] = false;
    }
  }

  const Topology& node_;
  const int n_, exit_;
  const std::vector<int>& used_;
  std::vector<bool> seen_;
  std::vector<int> path_, best_;
  PathScore best_score_;
  long long steps_ = 0;
};

std::vector<int> DevicesOfNic(const Topology& topology, int nic) {
  std::vector<int> out;
  for (int d = 0; d < topology.devices_per_node(); ++d) {
    if (topology.nic_of(d) == nic) out.push_back(d);
  }
  return out;
}

}  // namespace

std::vector<int> ChannelNics(const Topology& topology) {
  std::vector<int> out;
  if (topology.nodes() <= 1) return out;
  for (int d = 0; d < topology.devices_per_node(); ++d) {
    const int nic = topology.nic_of(d);
    if (out.empty() || out.back() != nic) out.push_back(nic);
  }
  return out;
}

std::vector<int> ChannelNodePath(const Topology& node, int entry, int exit,
                                 std::vector<int>* used) {
  const int per = node.size();
  std::vector<int> path;
  if (per == 1) return {entry};
  PathScore score;
  if (entry != exit) path = PathSearch(node, exit, *used).Run(entry, &score);
  if (path.empty()) {  // no path over real links (or none found in time): the ring, broken
    const std::vector<int> ring = BuildRingOrder(node);
    const int at = static_cast<int>(std::find(ring.begin(), ring.end(), entry) - ring.begin());
    for (int i = 0; i < per; ++i) path.push_back(ring[(at + i) % per]);
  }
  for (int i = 0; i + 1 < per; ++i) ++(*used)[path[i] * per + path[i + 1]];
  return path;
}

std::vector<std::vector<int>> BuildChannelRings(const Topology& topology) {
  const std::vector<int> nics = ChannelNics(topology);
  std::vector<std::vector<int>> rings;
  if (nics.empty()) return rings;
  const Topology node = topology.NodeTopology();
  const int per = node.size(), channels = static_cast<int>(nics.size());
  std::vector<int> used(static_cast<size_t>(per) * per, 0);
  for (int c = 0; c < channels; ++c) {
    const std::vector<int> entries = DevicesOfNic(topology, nics[c]);
    const std::vector<int> exits =
        entries.size() > 1 ? entries : DevicesOfNic(topology, nics[(c + 1) % channels]);
    // The best (entry, exit) pair of the NIC's devices.
    std::vector<int> best;
    PathScore best_score;
    for (int entry : entries) {
      for (int exit : exits) {
        if (entry == exit && per > 1) continue;
        PathScore score;
        std::vector<int> path =
            per == 1 ? std::vector<int>{entry} : PathSearch(node, exit, used).Run(entry, &score);
        if (!path.empty() && (best.empty() || best_score < score)) best = path, best_score = score;
      }
    }
    if (best.empty()) {
      best = ChannelNodePath(node, entries[0], exits.back(), &used);
    } else {
      for (int i = 0; i + 1 < per; ++i) ++used[best[i] * per + best[i + 1]];
    }
    std::vector<int> ring;
    for (int k = 0; k < topology.nodes(); ++k) {
      for (int d : best) ring.push_back(k * per + d);
    }
    rings.push_back(std::move(ring));
  }
  return rings;
}

Status ValidateChannelRings(const Topology& topology, const std::vector<std::vector<int>>& rings) {
  const int n = topology.size(), nics = std::max(1, topology.nics());
  std::vector<int> out_user(static_cast<size_t>(topology.nodes()) * nics, -1), in_user = out_user;
  for (size_t c = 0; c < rings.size(); ++c) {
    const std::vector<int>& ring = rings[c];
    LOOM_ENFORCE(static_cast<int>(ring.size()) == n, "channel ", c, " visits ", ring.size(),
                 " devices, not ", n);
    std::vector<bool> seen(n, false);
    for (int d : ring) {
      LOOM_ENFORCE(d >= 0 && d < n && !seen[d], "channel ", c, " visits device ", d,
                   d >= 0 && d < n ? " twice" : " (not a device)");
      seen[d] = true;
    }
    for (int i = 0; i < n; ++i) {
      const int a = ring[i], b = ring[(i + 1) % n];
      if (topology.node_of(a) == topology.node_of(b)) continue;
      int& out = out_user[topology.node_of(a) * nics + topology.nic_of(a)];
      int& in = in_user[topology.node_of(b) * nics + topology.nic_of(b)];
      LOOM_ENFORCE(out < 0 || out == static_cast<int>(c), "channels ", out, " and ", c,
                   " both leave node ", topology.node_of(a), " through NIC ", topology.nic_of(a));
      LOOM_ENFORCE(in < 0 || in == static_cast<int>(c), "channels ", in, " and ", c,
                   " both enter node ", topology.node_of(b), " through NIC ", topology.nic_of(b));
      out = in = static_cast<int>(c);
    }
  }
  return Status::OK();
}

}  // namespace loom::collective
