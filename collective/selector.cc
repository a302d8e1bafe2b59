#include "collective/selector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

namespace loom::collective {
namespace {

struct LinkBound {
  double gbps = std::numeric_limits<double>::infinity();
  double us = 0;
  void Add(const Link& link) {
    if (link.weight <= 0) return;  // a missing link: the chain fallback; ignore
    gbps = std::min(gbps, link.bandwidth_gbps);
    us = std::max(us, link.latency_us);
  }
  void Finish() {
    if (!std::isfinite(gbps)) gbps = Topology::LinkForWeight(1).bandwidth_gbps;
    if (us == 0) us = Topology::LinkForWeight(1).latency_us;
  }
};

LinkBound TreesBound(const Topology& t, const std::vector<Tree>& trees) {
  LinkBound b;
  for (const Tree& tree : trees) {
    for (const auto& [parent, child] : tree.Edges()) b.Add(t.link(parent, child));
  }
  b.Finish();
  return b;
}

// The rate (GB/s) of `rings` run side by side, each carrying an equal share of a call's bytes
// around it: every directed link within a node and every direction of every NIC of a node (the
// hops between nodes: out through the sender's NIC, in through the receiver's, at the link's
// bandwidth) is one resource, and the busiest, bytes over bandwidth, sets the rate. One ring on
// one machine: its weakest link.
double RingsGbps(const Topology& t, const std::vector<std::vector<int>>& rings) {
  const int n = t.size(), nics = std::max(1, t.nics());
  std::map<std::tuple<int, int, int>, double> load;  // (kind, a, b) -> bytes / bandwidth
  const double share = 1.0 / static_cast<double>(rings.size());
  for (const std::vector<int>& ring : rings) {
    for (int i = 0; i < n; ++i) {
      const int a = ring[i], b = ring[(i + 1) % n];
      const Link& link = t.link(a, b);
      if (link.weight <= 0 || link.bandwidth_gbps <= 0) continue;
      const double per_byte = share / link.bandwidth_gbps;
      if (t.node_of(a) == t.node_of(b)) {
        load[{0, a, b}] += per_byte;
      } else {
        load[{1, t.node_of(a), t.nic_of(a) % nics}] += per_byte;
        load[{2, t.node_of(b), t.nic_of(b) % nics}] += per_byte;
      }
    }
  }
  double busiest = 0;
  for (const auto& [key, l] : load) busiest = std::max(busiest, l);
  return busiest > 0 ? 1.0 / busiest : Topology::LinkForWeight(1).bandwidth_gbps;
}

// Microseconds to move `bytes` at `gbps` GB/s.
double Us(double bytes, double gbps) { return bytes / (gbps * 1e3); }

std::mutex& FactoryMutex() {
  static std::mutex mu;
  return mu;
}

CostModelFactory& Factory() {
  static CostModelFactory factory;
  return factory;
}

}  // namespace

void SetDefaultCostModel(CostModelFactory factory) {
  std::lock_guard<std::mutex> lock(FactoryMutex());
  Factory() = std::move(factory);
}

std::shared_ptr<const CostModel> DefaultCostModel(const CommPlan& plan,
                                                  const SelectorOptions& options) {
  CostModelFactory factory;
  {
    std::lock_guard<std::mutex> lock(FactoryMutex());
    factory = Factory();
  }
  return factory ? factory(plan, options) : nullptr;
}

struct Selector::Cache {
  std::mutex mu;
  std::map<std::tuple<int, int, size_t>, double> times;
};

Selector::Selector(const CommPlan& plan, const SelectorOptions& options)
    : n_(plan.topology.size()),
      options_(options),
      depth_(CeilLog2(plan.topology.size())),
      cache_(std::make_shared<Cache>()) {
  if (options_.cost_model == nullptr && options_.use_default_cost_model && n_ > 1)
    options_.cost_model = DefaultCostModel(plan, options_);
  const Topology& t = plan.topology;
  LinkBound ring;
  for (size_t i = 0; i < plan.ring_order.size() && n_ > 1; ++i) {
    ring.Add(t.link(plan.ring_order[i], plan.ring_order[(i + 1) % plan.ring_order.size()]));
  }
  ring.Finish();
  channels_ = static_cast<int>(plan.channels.size());
  nodes_ = t.nodes();
  // On a cluster the ring's hops between nodes share the nodes' NICs: priced per NIC.
  if (t.nodes() > 1 && n_ > 1) ring.gbps = RingsGbps(t, {plan.ring_order});
  channels_gbps_ = channels_ > 0 ? RingsGbps(t, plan.channels) : ring.gbps;
  const LinkBound tree = TreesBound(t, plan.trees), multi = TreesBound(t, plan.multi_trees);
  LinkBound star;  // the star ignores links: every pair is used
  for (int a = 0; a < n_; ++a) {
    for (int b = a + 1; b < n_; ++b) star.Add(t.link(a, b));
  }
  star.Finish();
  ring_gbps_ = ring.gbps, ring_us_ = ring.us;
  tree_gbps_ = tree.gbps, tree_us_ = tree.us;
  multi_gbps_ = multi.gbps, multi_us_ = multi.us;
  star_gbps_ = star.gbps, star_us_ = star.us;
}

// The model (docs/COLLECTIVES.md, "Selector"): S bytes, N ranks, d = ceil(log2 N), P pipeline
// pieces. The tree engine handles one rank's transfers one after another (receive from the
// children, then send to the parent), while the ring sends and receives at the same time; so
// tree-shaped algorithms count a rank's sent and received bytes together.
double Selector::Time(Collective kind, Algorithm algorithm, size_t bytes, int inflight) const {
  if (const double t = ModelTime(kind, algorithm, bytes); t >= 0) return t;
  // No model, or it cannot say: the formulas (which also know what does not run at all).
  const double n = n_, msg = options_.message_us;
  const double call = options_.call_us / std::max(1, inflight) + ring_us_ + 2 * (n - 1) * msg;
  if (n_ == 1 || bytes == 0) return call;
  const double s = static_cast<double>(bytes);
  const bool reduces = kind != Collective::kBroadcast && kind != Collective::kAllGather;
  double t = 0;  // send, recv and the barrier: the call alone
  switch (kind) {
    case Collective::kAllReduce: t = AllReduceTime(algorithm, s); break;
    case Collective::kReduce:
    case Collective::kBroadcast: t = RootedTime(algorithm, s, reduces); break;
    case Collective::kAllGather:
    case Collective::kReduceScatter: t = GatherScatterTime(algorithm, s, reduces); break;
    default: break;
  }
  return t < 0 ? -1 : call + t;
}

double Selector::ModelTime(Collective kind, Algorithm algorithm, size_t bytes) const {
  if (options_.cost_model == nullptr) return -1;
  size_t bucket = 1;
  while (bucket < bytes) bucket <<= 1;
  const auto key = std::make_tuple(static_cast<int>(kind), static_cast<int>(algorithm), bucket);
  {
    std::lock_guard<std::mutex> lock(cache_->mu);
    auto it = cache_->times.find(key);
    if (it != cache_->times.end()) return it->second;
  }
  // Outside the lock: a model may take a while; two threads may both compute one bucket.
  const double t = options_.cost_model->TimeUs(kind, algorithm, bucket);
  std::lock_guard<std::mutex> lock(cache_->mu);
  cache_->times.emplace(key, t);
  return t;
}

double Selector::Pieces(double bytes) const {
  const double chunk = static_cast<double>(std::max<size_t>(options_.chunk_bytes, 1));
  return std::max(1.0, std::ceil(bytes / chunk));
}

double Selector::Overlap() const { return options_.overlapped_transfers ? 0.5 : 1.0; }

double Selector::AllReduceTime(Algorithm algorithm, double s) const {
  const double n = n_, d = depth_, msg = options_.message_us, gamma = options_.reduce_gbps;
  const double tb = Overlap();
  switch (algorithm) {
    case Algorithm::kRing:
      return 2 * (n - 1) * ring_us_ + 4 * (n - 1) * Pieces(s / n) * msg +
             Us(2 * (n - 1) / n * s, ring_gbps_) + Us((n - 1) / n * s, gamma);
    case Algorithm::kChannels: {  // the ring's steps on every channel, each on its stripe
      const double k = std::max(1, channels_);
      return 2 * (n - 1) * ring_us_ + 4 * (n - 1) * k * Pieces(s / n / k) * msg +
             Us(2 * (n - 1) / n * s, channels_gbps_) + Us((n - 1) / n * s, gamma);
    }
    case Algorithm::kRails: {  // a ring within the node, then one across the nodes per device
      const double steps = channels_ > 0 ? nodes_ - 1 + n / nodes_ - 1 : n - 1;
      return 2 * steps * ring_us_ + 4 * steps * Pieces(s / n) * msg +
             Us(2 * (n - 1) / n * s, channels_gbps_) + Us((n - 1) / n * s, gamma);
    }
    case Algorithm::kTree:
      return 2 * d * tree_us_ + 4 * d * Pieces(s) * msg + Us(2 * d * s * tb, tree_gbps_) +
             Us(d * s, gamma);
    case Algorithm::kMultiTree:
      return 2 * d * multi_us_ + 4 * (n - 1) * Pieces(s / n) * msg +
             Us(4 * (n - 1) / n * s * tb, multi_gbps_) + Us((n - 1) / n * s, gamma);
    case Algorithm::kStar:  // overlapped: the root meets all peers in one round trip
      return 2 * (options_.overlapped_transfers ? 1 : n - 1) * star_us_ +
             4 * (n - 1) * Pieces(s) * msg + Us(2 * (n - 1) * s * tb, star_gbps_) +
             Us((n - 1) * s, gamma);
    case Algorithm::kDirect:  // two rounds with every peer, over every pair's link
      return 2 * star_us_ + 4 * (n - 1) * msg + Us(4 * (n - 1) / n * s * tb, star_gbps_) +
             Us((n - 1) / n * s, gamma);
    default: return -1;
  }
}

double Selector::RootedTime(Algorithm algorithm, double s, bool reduces) const {
  const double n = n_, d = depth_, msg = options_.message_us, gamma = options_.reduce_gbps;
  const double g = reduces ? 1.0 : 0.0;
  switch (algorithm) {
    case Algorithm::kRing:  // pipelined chain
      return (n - 1 + Pieces(s) - 1) * ring_us_ + 2 * Pieces(s) * msg + Us(s, ring_gbps_) +
             g * Us(s, gamma);
    case Algorithm::kTree:
      return d * tree_us_ + 2 * d * Pieces(s) * msg + Us(d * s, tree_gbps_) + g * Us(d * s, gamma);
    case Algorithm::kMultiTree:
      return (d + 1) * multi_us_ + 2 * (n - 1) * Pieces(s / n) * msg +
             Us(3 * (n - 1) / n * s, multi_gbps_) + g * Us((n - 1) / n * s, gamma);
    case Algorithm::kStar:
      return (n - 1) * star_us_ + 2 * (n - 1) * Pieces(s) * msg + Us((n - 1) * s, star_gbps_) +
             g * Us((n - 1) * s, gamma);
    default: return -1;
  }
}

// S is the whole buffer (nranks blocks), as in nccl-tests.
double Selector::GatherScatterTime(Algorithm algorithm, double s, bool reduces) const {
  const double n = n_, d = depth_, msg = options_.message_us, gamma = options_.reduce_gbps;
  const double g = reduces ? 1.0 : 0.0;
  if (algorithm == Algorithm::kRing)
    return (n - 1) * ring_us_ + 2 * (n - 1) * Pieces(s / n) * msg +
           Us((n - 1) / n * s, ring_gbps_) + g * Us((n - 1) / n * s, gamma);
  if (algorithm == Algorithm::kChannels) {
    const double k = std::max(1, channels_);
    return (n - 1) * ring_us_ + 2 * (n - 1) * k * Pieces(s / n / k) * msg +
           Us((n - 1) / n * s, channels_gbps_) + g * Us((n - 1) / n * s, gamma);
  }
  if (algorithm == Algorithm::kMultiTree && reduces)
    return d * multi_us_ + 2 * (n - 1) * Pieces(s / n) * msg +
           Us(2 * (n - 1) / n * s, multi_gbps_) + Us((n - 1) / n * s, gamma);
  if (algorithm == Algorithm::kDirect)
    return star_us_ + 2 * (n - 1) * msg + Us(2 * (n - 1) / n * s * Overlap(), star_gbps_) +
           g * Us((n - 1) / n * s, gamma);
  return -1;
}

std::vector<Estimate> Selector::Estimates(Collective kind, size_t bytes, int inflight) const {
  std::vector<Estimate> out;
  for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kMultiTree, Algorithm::kStar,
                      Algorithm::kChannels, Algorithm::kRails}) {
    // A single machine: both are the ring.
    if ((a == Algorithm::kChannels || a == Algorithm::kRails) && channels_ == 0) continue;
    const double t = Time(kind, a, bytes, inflight);
    if (t >= 0) out.push_back({a, t});
  }
  return out;
}

Algorithm Selector::ChooseByRule(Collective kind, size_t bytes, int inflight, bool native_available,
                                 Rule* rule) const {
  *rule = Rule::kNone;
  if (options_.force != Algorithm::kAuto && options_.force != Algorithm::kNative &&
      Time(kind, options_.force, bytes, inflight) >= 0) {
    *rule = Rule::kForce;
    return options_.force;
  }
  const auto b = static_cast<long long>(bytes);
  if (kind == Collective::kAllReduce && options_.direct_min_bytes >= 0 &&
      b >= options_.direct_min_bytes &&
      (options_.direct_max_bytes < 0 || b <= options_.direct_max_bytes)) {
    *rule = Rule::kDirect;
    return Algorithm::kDirect;
  }
  if (native_available && options_.native_min_bytes >= 0 && b >= options_.native_min_bytes &&
      (options_.native_max_bytes < 0 || b <= options_.native_max_bytes)) {
    *rule = Rule::kNative;
    return Algorithm::kNative;
  }
  const bool crossover = kind == Collective::kAllReduce && options_.tree_max_bytes >= 0;
  if (crossover && b <= options_.tree_max_bytes) {
    *rule = Rule::kTreeBelowCrossover;
    return n_ <= options_.star_max_ranks ? Algorithm::kStar : Algorithm::kTree;
  }
  if (crossover) *rule = Rule::kNoTreeAboveCrossover;  // applies only if the tree is cheapest
  return Algorithm::kAuto;
}

Algorithm Selector::Choose(Collective kind, size_t bytes, int inflight,
                           bool native_available) const {
  // Called for every call kAuto issues: the estimates are computed only where a rule below
  // needs them (the crossovers decide most calls alone), and without building a list.
  Rule rule;
  const Algorithm by_rule = ChooseByRule(kind, bytes, inflight, native_available, &rule);
  if (by_rule != Algorithm::kAuto) return by_rule;
  const bool no_tree = rule == Rule::kNoTreeAboveCrossover;
  Algorithm best = Algorithm::kAuto;
  double best_time = std::numeric_limits<double>::infinity();
  for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kMultiTree, Algorithm::kStar,
                      Algorithm::kChannels, Algorithm::kRails}) {
    // A single machine: both are the ring.
    if ((a == Algorithm::kChannels || a == Algorithm::kRails) && channels_ == 0) continue;
    const double t = Time(kind, a, bytes, inflight);
    if (t < 0) continue;
    if (best == Algorithm::kAuto) best = a;          // the first that runs, if none is faster
    if (no_tree && a == Algorithm::kTree) continue;  // above the crossover
    if (t < best_time) best = a, best_time = t;
  }
  return best == Algorithm::kAuto ? Algorithm::kRing : best;  // the ring runs every collective
}

namespace {

const char* RuleName(Selector::Rule rule) {
  switch (rule) {
    case Selector::Rule::kForce: return "forced";
    case Selector::Rule::kDirect: return "direct";
    case Selector::Rule::kNative: return "native";
    case Selector::Rule::kTreeBelowCrossover: return "crossover";
    case Selector::Rule::kNoTreeAboveCrossover: return "above crossover";
    case Selector::Rule::kNone: break;
  }
  return "estimates";
}

// Why a rule of Choose overrides the estimates, as the table's footnotes say it.
std::string RuleReason(Selector::Rule rule, const SelectorOptions& o) {
  switch (rule) {
    case Selector::Rule::kForce: return StrCat("forced: the algorithm was given (--algo / force)");
    case Selector::Rule::kDirect:
      return StrCat("direct: allreduce from ", o.direct_min_bytes, " B",
                    o.direct_max_bytes >= 0 ? StrCat(" to ", o.direct_max_bytes, " B") : "",
                    " runs the direct algorithm, measured ahead of the schedules over this "
                    "transport (auto_direct_min_bytes)");
    case Selector::Rule::kNative:
      return StrCat("native: from ", o.native_min_bytes, " B",
                    o.native_max_bytes >= 0 ? StrCat(" to ", o.native_max_bytes, " B") : "",
                    " the transport's own collective runs, measured ahead of the schedules "
                    "(auto_native_min_bytes)");
    case Selector::Rule::kTreeBelowCrossover:
      return StrCat("crossover: allreduce up to tree_max_bytes = ", o.tree_max_bytes,
                    " B takes the ", o.star_max_ranks > 0 ? "tree (or star)" : "tree",
                    " whatever the estimates say: the crossover measured with loom bench "
                    "collective (docs/COLLECTIVES.md, \"Measured crossover\"), where the tree ran "
                    "at or ahead of the ring that the model predicts faster (a negative "
                    "tree_max_bytes leaves the choice to the estimates)");
    case Selector::Rule::kNoTreeAboveCrossover:
      return StrCat("above crossover: above tree_max_bytes = ", o.tree_max_bytes,
                    " B the tree is not chosen: there the measured bandwidth algorithms lead");
    case Selector::Rule::kNone: break;
  }
  return "";
}

}  // namespace

std::string Selector::Table(Collective kind, size_t min_bytes, size_t max_bytes,
                            int inflight) const {
  const std::vector<Estimate> header = Estimates(kind, min_bytes, inflight);
  std::string out = StrCat("# ", CollectiveName(kind), ", ", n_, " ranks, ", inflight,
                           " in flight; estimated µs per call (",
                           options_.cost_model ? "cost model" : "alpha-beta model", ")\n");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%12s", "size(B)");
  out += buf;
  for (const Estimate& e : header) {
    std::snprintf(buf, sizeof buf, "%12s", AlgorithmName(e.algorithm));
    out += buf;
  }
  out += "  auto\n";
  std::vector<Rule> overriding;  // rules that made auto differ from the fastest estimate
  for (size_t bytes = std::max<size_t>(min_bytes, 1); bytes <= max_bytes; bytes *= 4) {
    std::snprintf(buf, sizeof buf, "%12zu", bytes);
    out += buf;
    const std::vector<Estimate> estimates = Estimates(kind, bytes, inflight);
    const Estimate* fastest = nullptr;
    for (const Estimate& e : estimates) {
      std::snprintf(buf, sizeof buf, "%12.1f", e.time_us);
      out += buf;
      if (!fastest || e.time_us < fastest->time_us) fastest = &e;
    }
    const Algorithm chosen = Choose(kind, bytes, inflight);
    out += StrCat("  ", AlgorithmName(chosen));
    Rule rule;
    ChooseByRule(kind, bytes, inflight, /*native_available=*/true, &rule);
    if (fastest && chosen != fastest->algorithm && rule != Rule::kNone) {
      out += StrCat(" (", RuleName(rule), "; fastest estimate ", AlgorithmName(fastest->algorithm),
                    ")");
      if (std::find(overriding.begin(), overriding.end(), rule) == overriding.end())
        overriding.push_back(rule);
    }
    out += "\n";
  }
  for (Rule rule : overriding) out += StrCat("# ", RuleReason(rule, options_), "\n");
  return out;
}

}  // namespace loom::collective
