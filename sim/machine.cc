#include "sim/machine.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/byte_size.h"
#include "base/emulated_cluster.h"
#include "collective/transport/inprocess.h"
#include "sim/simulate.h"

namespace loom::sim {

using collective::Link;
using collective::Topology;

const std::vector<LinkClass>& LinkClasses() {
  // Bandwidths are per direction in GB/s (10^9 bytes); latencies are one message's one-way cost
  // as a collective library sees it (a step of a pipelined schedule), not the wire's alone.
  // docs/SIMULATOR.md lists every source.
  static const std::vector<LinkClass> classes = {
      {"nvlink1", 20.0, 2.0, "Tesla P100 whitepaper: NVLink 1.0, 20 GB/s per link and direction"},
      {"nvlink2", 25.0, 2.0, "Tesla V100 whitepaper: NVLink 2.0, 25 GB/s per link and direction"},
      {"nvlink3", 25.0, 2.0, "A100 whitepaper: NVLink 3.0, 12 links, 300 GB/s per direction",
       // NCCL all_reduce_perf on one p4d.24xlarge, 1 GB: 230.8 GB/s busbw (NVIDIA/nccl issue
       // 527) where the simulated NCCL ring reaches the ports' 296.8.
       0.778},
      {"nvlink4", 25.0, 2.0, "H100 whitepaper: NVLink 4.0, 18 links, 450 GB/s per direction"},
      {"pcie3", 15.75, 5.0, "PCIe 3.0 x16: 8 GT/s x 16 lanes, 128b/130b"},
      {"pcie4", 31.5, 5.0, "PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b"},
      {"pcie5", 63.0, 5.0, "PCIe 5.0 x16: 32 GT/s x 16 lanes, 128b/130b"},
      {"eth10", 1.25, 25.0, "10 Gb Ethernet (TCP)"},
      {"eth25", 3.125, 20.0, "25 Gb Ethernet (TCP)"},
      {"eth100", 12.5, 10.0, "100 Gb Ethernet / EFA (RDMA-capable)",
       // NCCL all_reduce_perf on 3 x p4dn.24xlarge (4 x 100 Gb EFA each), 1 GB: 31.8 GB/s busbw
       // (NVIDIA/nccl issue 527) where the simulated NCCL ring reaches the NICs' 49.95.
       0.637},
      {"eth200", 25.0, 8.0, "200 Gb Ethernet"},
      {"eth400", 50.0, 8.0, "400 Gb Ethernet"},
      {"ib-edr", 12.5, 2.0, "InfiniBand EDR, 100 Gb/s"},
      {"ib-hdr", 25.0, 2.0, "InfiniBand HDR, 200 Gb/s"},
      {"ib-ndr", 50.0, 2.0, "InfiniBand NDR, 400 Gb/s"},
  };
  return classes;
}

StatusOr<LinkClass> FindLinkClass(const std::string& name) {
  std::string known;
  for (const LinkClass& c : LinkClasses()) {
    if (c.name == name) return c;
    known += (known.empty() ? "" : ", ") + c.name;
  }
  return InvalidArgument("unknown link class '", name, "' (known: ", known, ")");
}

namespace {

// "100Gb" (Gb/s) or "12.5GB" (GB/s) or a link class name: a NIC class.
StatusOr<LinkClass> ParseNic(const std::string& speed) {
  if (FindLinkClass(speed).ok()) return FindLinkClass(speed);
  char* end = nullptr;
  const double value = std::strtod(speed.c_str(), &end);
  const std::string unit = end != nullptr ? end : "";
  if (end == speed.c_str() || !(value > 0) || !std::isfinite(value) ||
      (unit != "Gb" && unit != "GB")) {
    return InvalidArgument("NIC speed '", speed,
                           "' is neither a link class nor a rate like 100Gb or 12.5GB");
  }
  // A bare rate: Ethernet's latency of the nearest class.
  LinkClass c = *FindLinkClass(value <= 10 && unit == "Gb" ? "eth10" : "eth100");
  c.gbps = unit == "Gb" ? value / 8 : value;
  c.name = speed;
  c.source = "given on the command line";
  return c;
}

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

StatusOr<std::pair<int, std::string>> CountTimes(const std::string& text, const char* what) {
  const size_t x = text.find('x');
  char* end = nullptr;
  const long n = x == std::string::npos ? 0 : std::strtol(text.c_str(), &end, 10);
  if (x == std::string::npos || end != text.c_str() + x || n < 1 || n > 100000) {
    return InvalidArgument(what, " '", text, "' is not COUNTxVALUE with a positive COUNT");
  }
  return std::make_pair(static_cast<int>(n), text.substr(x + 1));
}

// Machines that are NVSwitch boxes: every device one port into a non-blocking switch.
struct SwitchBox {
  const char* name;
  int gpus;
  const char* link;
  int links;
  const char* about;
};
constexpr SwitchBox kSwitchBoxes[] = {
    {"dgx2", 16, "nvlink2", 6, "16 V100, 6 NVLink 2.0 each into 12 NVSwitches"},
    {"dgx-a100", 8, "nvlink3", 12, "8 A100 SXM, 12 NVLink 3.0 each into 6 NVSwitches"},
    {"nd-a100-v4", 8, "nvlink3", 12, "Azure ND A100 v4: 8 A100 SXM behind NVSwitches"},
    {"p4d.24xlarge", 8, "nvlink3", 12, "AWS p4d.24xlarge: 8 A100 SXM behind NVSwitches"},
    {"dgx-h100", 8, "nvlink4", 18, "8 H100 SXM, 18 NVLink 4.0 each into 4 NVSwitches"},
};

}  // namespace

StatusOr<ClusterSpec> ParseClusterSpec(const std::string& text) {
  const std::vector<std::string> parts = Split(text, ':');
  if (parts.size() < 3 || parts.size() > 5) {
    return InvalidArgument("cluster '", text,
                           "' is not NODESxGPUS:NODE:NICSxSPEED[:oversub=K][:servers=S[xSPEED]] "
                           "(e.g. 16x8:dgx1-v100:4x100Gb)");
  }
  ClusterSpec spec;
  LOOM_ASSIGN_OR_RETURN(auto nodes, CountTimes(parts[0], "cluster size"));
  spec.nodes = nodes.first;
  spec.node = parts[1];
  LOOM_ASSIGN_OR_RETURN(auto nics, CountTimes(parts[2], "NICs"));
  if (nics.first > 64) return InvalidArgument("NICs '", parts[2], "': at most 64 per node");
  spec.nics = nics.first;
  LOOM_ASSIGN_OR_RETURN(spec.nic, ParseNic(nics.second));
  spec.server_nic = spec.nic;
  bool oversub_seen = false;
  for (size_t i = 3; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    if (part.rfind("servers=", 0) == 0 && spec.servers == 0) {
      const std::string count = part.substr(8);
      if (count.find('x') == std::string::npos) {
        char* end = nullptr;
        const long s = std::strtol(count.c_str(), &end, 10);
        if (end == count.c_str() || *end != '\0' || s < 1 || s > 4096)
          return InvalidArgument("'", part, "' is not servers=S[xSPEED] with S in 1..4096");
        spec.servers = static_cast<int>(s);
      } else {
        StatusOr<std::pair<int, std::string>> s = CountTimes(count, "servers");
        if (!s.ok() || s->first < 1 || s->first > 4096)
          return InvalidArgument("'", part, "' is not servers=S[xSPEED] with S in 1..4096");
        spec.servers = s->first;
        StatusOr<LinkClass> nic = ParseNic(s->second);
        if (!nic.ok()) return nic.status().WithContext(part);
        spec.server_nic = *nic;
      }
      continue;
    }
    const std::string prefix = "oversub=";
    char* end = nullptr;
    const double k = !oversub_seen && part.rfind(prefix, 0) == 0
                         ? std::strtod(part.c_str() + prefix.size(), &end)
                         : 0;
    if (end == nullptr || *end != '\0' || !(k >= 1) || !std::isfinite(k)) {
      return InvalidArgument("'", part, "' is neither oversub=K with K >= 1 nor servers=S[xSPEED]");
    }
    spec.oversubscription = k;
    oversub_seen = true;
  }
  char* end = nullptr;
  const long gpus = std::strtol(nodes.second.c_str(), &end, 10);
  if (end == nodes.second.c_str() || *end != '\0' || gpus < 1) {
    return InvalidArgument("cluster size '", parts[0], "' is not NODESxGPUS");
  }
  // The node's device count is checked against GPUS when the machine is built.
  if (spec.nodes * gpus > 1 << 16) {
    return InvalidArgument("cluster '", text, "' has ", spec.nodes * gpus,
                           " devices; the simulator takes at most 65536");
  }
  spec.devices_per_node = static_cast<int>(gpus);
  return spec;
}

std::vector<std::string> Machine::MachinePresetNames() {
  std::vector<std::string> names;
  for (const SwitchBox& box : kSwitchBoxes) names.push_back(box.name);
  names.push_back("dgx1-v100");
  for (const std::string& t : Topology::PresetNames()) {
    if (std::find(names.begin(), names.end(), t) == names.end()) names.push_back(t);
  }
  return names;
}

int Machine::AddResource(std::string name, double gbps, double efficiency) {
  resources_.push_back(Resource{std::move(name), gbps, efficiency});
  return static_cast<int>(resources_.size()) - 1;
}

Machine Machine::NvSwitch(const std::string& name, int gpus, double gbps, double latency_us,
                          double efficiency) {
  Machine m;
  m.name_ = name;
  m.per_node_ = gpus;
  m.nvswitch_ = true;
  // The plan sees an all-to-all machine of NVLink class.
  m.node_topology_ = std::make_shared<Topology>(Topology::Uniform(gpus, 3));
  m.pair_link_.assign(size_t(gpus) * gpus, -1);
  m.pair_latency_.assign(size_t(gpus) * gpus, latency_us);
  for (int d = 0; d < gpus; ++d) {
    m.port_out_.push_back(m.AddResource(StrCat("gpu", d, ".nvswitch-out"), gbps, efficiency));
    m.port_in_.push_back(m.AddResource(StrCat("gpu", d, ".nvswitch-in"), gbps, efficiency));
  }
  m.node_resources_ = static_cast<int>(m.resources_.size());
  return m;
}

StatusOr<Machine> Machine::FromTopology(const Topology& topology) {
  const int n = topology.size();
  LOOM_ENFORCE(n >= 1, "a topology without devices");
  if (topology.nodes() > 1) {
    // A cluster: its nodes' machine, joined by NICs at the links between the nodes' rates.
    LOOM_ASSIGN_OR_RETURN(Machine node, FromTopology(topology.NodeTopology()));
    const collective::Link& between = topology.link(0, topology.devices_per_node());
    ClusterSpec spec;
    spec.nodes = topology.nodes();
    spec.nics = topology.nics();
    spec.nic = LinkClass{"nic", between.bandwidth_gbps, between.latency_us, "the topology", 1};
    return ClusterOf(std::move(node), spec);
  }
  Machine m;
  m.name_ = topology.name().empty() ? StrCat("topology of ", n) : topology.name();
  m.per_node_ = n;
  m.node_topology_ = std::make_shared<Topology>(topology);
  m.pair_link_.assign(size_t(n) * n, -1);
  m.pair_latency_.assign(size_t(n) * n, 0);
  // Each device's PCIe port: as fast as the fastest PCIe-class link it has.
  std::vector<double> pcie(n, 0);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a != b && topology.weight(a, b) == 1)
        pcie[a] = std::max(pcie[a], topology.link(a, b).bandwidth_gbps);
    }
  }
  for (int a = 0; a < n; ++a) {
    const double gbps = pcie[a] > 0 ? pcie[a] : Topology::LinkForWeight(1).bandwidth_gbps;
    m.port_out_.push_back(m.AddResource(StrCat("gpu", a, ".pcie-out"), gbps));
    m.port_in_.push_back(m.AddResource(StrCat("gpu", a, ".pcie-in"), gbps));
  }
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      const Link& link = topology.link(a, b);
      // Pairs without a link (weight 0) go through the CPU like PCIe pairs.
      m.pair_latency_[size_t(a) * n + b] =
          link.weight > 0 ? link.latency_us : Topology::LinkForWeight(1).latency_us;
      if (link.weight >= 2) {
        m.pair_link_[size_t(a) * n + b] =
            m.AddResource(StrCat("nvlink ", a, "->", b), link.bandwidth_gbps);
      }
    }
  }
  m.node_resources_ = static_cast<int>(m.resources_.size());
  return m;
}

StatusOr<Machine> Machine::Preset(const std::string& name) {
  for (const SwitchBox& box : kSwitchBoxes) {
    if (name == box.name) {
      LOOM_ASSIGN_OR_RETURN(LinkClass link, FindLinkClass(box.link));
      return NvSwitch(name, box.gpus, link.gbps * box.links, link.latency_us, link.efficiency);
    }
  }
  if (name == "dgx1-v100") {
    // The DGX-1 hybrid cube-mesh with V100s (the p3.16xlarge's link matrix).
    LOOM_ASSIGN_OR_RETURN(Topology t, Topology::Preset("p3.16xlarge"));
    LOOM_ASSIGN_OR_RETURN(Machine m, FromTopology(t));
    m.name_ = name;
    return m;
  }
  StatusOr<Topology> t = Topology::Preset(name);
  if (!t.ok()) {
    std::string known;
    for (const std::string& p : MachinePresetNames()) known += (known.empty() ? "" : ", ") + p;
    return InvalidArgument("unknown machine '", name, "' (presets: ", known, ")");
  }
  return FromTopology(*t);
}

StatusOr<Machine> Machine::Host(int ranks, int cores, double copy_gbps, double reduce_gbps,
                                double latency_us) {
  return Host(ranks, cores, latency_us, {HostRates{0, copy_gbps, reduce_gbps, 0, 0}});
}

namespace {

// One level's rates at working set `ws` between levels lo and hi (geometric interpolation).
HostRates Between(const HostRates& lo, const HostRates& hi, double ws) {
  const double t = std::clamp(
      std::log(ws / lo.working_set) / std::log(hi.working_set / lo.working_set), 0.0, 1.0);
  auto mix = [t](double a, double b) {
    return a > 0 && b > 0 ? std::exp((1 - t) * std::log(a) + t * std::log(b)) : 0.0;
  };
  return HostRates{ws,
                   mix(lo.copy, hi.copy),
                   mix(lo.reduce, hi.reduce),
                   mix(lo.mem_copy, hi.mem_copy),
                   mix(lo.mem_reduce, hi.mem_reduce),
                   mix(lo.local, hi.local)};
}

}  // namespace

StatusOr<Machine> Machine::Host(int ranks, int cores, double latency_us,
                                std::vector<HostRates> levels, const HostProtocol& protocol) {
  LOOM_ENFORCE(ranks >= 1 && ranks <= 4096 && cores >= 1 && cores <= 4096 && latency_us >= 0 &&
                   std::isfinite(latency_us) && !levels.empty(),
               "host of ", ranks, " ranks, ", cores, " cores, latency ", latency_us, " us, ",
               levels.size(),
               " rate levels: ranks and cores 1-4096, latency not negative, at "
               "least one level");
  for (size_t i = 0; i < levels.size(); ++i) {
    const HostRates& l = levels[i];
    LOOM_ENFORCE(l.copy > 0 && l.reduce > 0 && l.mem_copy >= 0 && l.mem_reduce >= 0 &&
                     l.local >= 0 && std::isfinite(l.copy) && std::isfinite(l.reduce) &&
                     std::isfinite(l.mem_copy) && std::isfinite(l.mem_reduce) &&
                     std::isfinite(l.local),
                 "host rate level ", i, ": copy ", l.copy, " GB/s, reduce ", l.reduce,
                 " GB/s, mem ", l.mem_copy, " / ", l.mem_reduce, " GB/s, local ", l.local,
                 " GB/s: copy and reduce must be positive, mem and local not negative");
    if (levels.size() > 1) {
      LOOM_ENFORCE(l.working_set >= 1 && l.working_set <= std::ldexp(1.0, 50) &&
                       (i == 0 || l.working_set > levels[i - 1].working_set),
                   "host rate level ", i, ": working set ", l.working_set,
                   " bytes: levels need working sets of 1 B-1 PiB in increasing order");
    }
  }
  const HostRates& rates = levels.front();
  Machine m;
  m.name_ = StrCat("host:", ranks, ":cores=", cores, ":copy=", rates.copy, ":reduce=", rates.reduce,
                   ":latency=", latency_us);
  m.per_node_ = ranks;
  m.node_topology_ = std::make_shared<Topology>(Topology::Uniform(ranks, 1));
  for (int r = 0; r < ranks; ++r) {
    // A transfer is copied by the receiving rank's thread; port_out_ is unused on hosts.
    m.port_in_.push_back(m.AddResource(StrCat("rank", r, ".cpu"), rates.copy));
    m.resources_.back().reduce_gbps = rates.reduce;
    m.resources_.back().local_gbps = rates.local;
    m.port_out_.push_back(-1);
  }
  // Everything the ranks copy or reduce at once shares the cores and the memory behind them;
  // it binds only transfers that share it (one alone runs at its rank's rate), so that what
  // all give together may be less than what one gets alone.
  m.host_cores_ =
      m.AddResource("host.cores", rates.mem_copy > 0 ? rates.mem_copy : cores * rates.copy);
  m.resources_.back().reduce_gbps = rates.mem_reduce > 0 ? rates.mem_reduce : cores * rates.reduce;
  m.resources_.back().shared_only = true;
  if (rates.local > 0) {
    m.resources_.back().local_gbps = rates.local * m.resources_.back().gbps / rates.copy;
  }
  m.host_core_count_ = cores;
  m.host_latency_us_ = latency_us;
  m.host_protocol_ = protocol;
  m.node_resources_ = static_cast<int>(m.resources_.size());
  if (levels.size() > 1) {
    m.host_at_lo_ = static_cast<int>(std::floor(std::log2(levels.front().working_set)));
    const int hi = static_cast<int>(std::ceil(std::log2(levels.back().working_set)));
    size_t next = 0;
    for (int k = m.host_at_lo_; k <= hi; ++k) {
      const double ws = std::ldexp(1.0, k);
      while (next + 1 < levels.size() && levels[next + 1].working_set <= ws) ++next;
      const HostRates at =
          next + 1 < levels.size() ? Between(levels[next], levels[next + 1], ws) : levels.back();
      LOOM_ASSIGN_OR_RETURN(Machine one, Host(ranks, cores, latency_us, {at}, protocol));
      m.host_at_.push_back(std::make_shared<const Machine>(std::move(one)));
    }
  }
  m.host_levels_ = std::move(levels);
  return m;
}

double HostProtocol::MessageUs(double bytes) const {
  if (message_us.empty() || bytes <= 0 || bytes > message_us.back().first) return 0;
  if (bytes <= message_us.front().first) {
    return message_us.front().second * bytes / message_us.front().first;
  }
  for (size_t i = 1; i < message_us.size(); ++i) {
    const auto& [hi, hi_us] = message_us[i];
    if (bytes > hi) continue;
    const auto& [lo, lo_us] = message_us[i - 1];
    return lo_us + (hi_us - lo_us) * (bytes - lo) / (hi - lo);
  }
  return 0;
}

HostProtocol::DirtyCost HostProtocol::DirtyUs(double bytes) const {
  DirtyCost out;
  if (dirty.empty() || bytes <= 0) return out;
  // Bytes per microsecond from GB/s; what a rate slower than the clean copy adds per byte.
  auto extra = [](double clean, double rate) {
    return std::max(0.0, 1 / (rate * 1e3) - 1 / (clean * 1e3));
  };
  auto at = [&](const DirtyRates& p) {
    return DirtyCost{extra(p.clean, p.src), extra(p.clean, p.dst), extra(p.clean, p.both),
                     p.read > 0 ? extra(p.clean, p.read) : 0.0, 1 / (p.clean * 1e3)};
  };
  if (bytes <= dirty.front().bytes) return at(dirty.front());
  if (bytes >= dirty.back().bytes) return at(dirty.back());
  size_t i = 1;
  while (dirty[i].bytes < bytes) ++i;
  const DirtyCost lo = at(dirty[i - 1]), hi = at(dirty[i]);
  const double t =
      std::log(bytes / dirty[i - 1].bytes) / std::log(dirty[i].bytes / dirty[i - 1].bytes);
  return DirtyCost{lo.src + t * (hi.src - lo.src), lo.dst + t * (hi.dst - lo.dst),
                   lo.both + t * (hi.both - lo.both), lo.read + t * (hi.read - lo.read),
                   lo.clean + t * (hi.clean - lo.clean)};
}

namespace {

// A host spec's KEY=VALUE parts by key. The parsers below return only what is wrong (ParseHost
// names the spec and its syntax around it) and check in the order the keys are documented.
using HostKeys = std::map<std::string, std::string>;

// The whole of `text` as a finite number.
bool ParseHostNumber(const std::string& text, double* out) {
  char* e = nullptr;
  *out = std::strtod(text.c_str(), &e);
  return !text.empty() && *e == '\0' && std::isfinite(*out);
}

// parts[2...]: each a known key, given once.
StatusOr<HostKeys> ParseHostKeys(const std::vector<std::string>& parts) {
  HostKeys keys;
  for (size_t i = 2; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    if (eq == std::string::npos) return InvalidArgument("'", parts[i], "' is not KEY=VALUE");
    const std::string key = parts[i].substr(0, eq);
    static const std::set<std::string> known = {
        "cores",      "latency", "copy",    "reduce", "mem",    "mem_reduce", "levels",   "eager",
        "rendezvous", "copier",  "handoff", "native", "stream", "fault",      "exchange", "cache",
        "pass",       "inline",  "wait",    "step",   "msg",    "dirty",      "fragment"};
    if (known.count(key) == 0) return InvalidArgument("unknown key '", key, "'");
    if (!keys.emplace(key, parts[i].substr(eq + 1)).second) {
      return InvalidArgument("'", key, "' twice");
    }
  }
  return keys;
}

// cores=C and latency=US, both required.
Status ParseHostCores(const HostKeys& keys, double* cores, double* latency) {
  if (!keys.count("cores") || !ParseHostNumber(keys.at("cores"), cores) || *cores < 1 ||
      *cores != std::floor(*cores) || *cores > 4096) {
    return InvalidArgument("cores must be a whole number 1-4096");
  }
  if (!keys.count("latency") || !ParseHostNumber(keys.at("latency"), latency) || *latency < 0) {
    return InvalidArgument("latency must be a number of microseconds, not negative");
  }
  return Status::OK();
}

// The rates: levels=WS/COPY/REDUCE[/MEM/MEM_REDUCE[/LOCAL]],..., or one level of copy=, reduce=
// and the optional mem= and mem_reduce=.
StatusOr<std::vector<HostRates>> ParseHostLevels(const HostKeys& keys) {
  std::vector<HostRates> levels;
  if (keys.count("levels")) {
    if (keys.count("copy") || keys.count("reduce") || keys.count("mem") ||
        keys.count("mem_reduce")) {
      return InvalidArgument(
          "levels carry the rates: no copy, reduce, mem or mem_reduce beside them");
    }
    for (const std::string& level : Split(keys.at("levels"), ',')) {
      const std::vector<std::string> f = Split(level, '/');
      HostRates l;
      StatusOr<size_t> ws = ParseByteSize(f[0]);
      if (ws.ok()) l.working_set = static_cast<double>(*ws);
      if ((f.size() != 3 && f.size() != 5 && f.size() != 6) || !ws.ok() ||
          !ParseHostNumber(f[1], &l.copy) || !ParseHostNumber(f[2], &l.reduce) ||
          (f.size() >= 5 &&
           (!ParseHostNumber(f[3], &l.mem_copy) || !ParseHostNumber(f[4], &l.mem_reduce))) ||
          (f.size() == 6 && !ParseHostNumber(f[5], &l.local))) {
        return InvalidArgument("level '", level,
                               "' is not WS/COPY/REDUCE[/MEM/MEM_REDUCE[/LOCAL]]");
      }
      levels.push_back(l);
    }
    return levels;
  }
  HostRates l;
  if (!keys.count("copy") || !keys.count("reduce") || !ParseHostNumber(keys.at("copy"), &l.copy) ||
      !ParseHostNumber(keys.at("reduce"), &l.reduce)) {
    return InvalidArgument("copy and reduce (GB/s) are required");
  }
  if (keys.count("mem") && !ParseHostNumber(keys.at("mem"), &l.mem_copy)) {
    return InvalidArgument("mem is not a number");
  }
  if (keys.count("mem_reduce") && !ParseHostNumber(keys.at("mem_reduce"), &l.mem_reduce)) {
    return InvalidArgument("mem_reduce is not a number");
  }
  levels.push_back(l);
  return levels;
}

// What messages pay beyond the rates: eager=BYTES with rendezvous=US, step=BYTES/US and
// msg=BYTES/US,...
Status ParseHostMessages(const HostKeys& keys, HostProtocol* protocol) {
  if (keys.count("eager") != keys.count("rendezvous")) {
    return InvalidArgument("eager and rendezvous go together");
  }
  if (keys.count("eager")) {
    StatusOr<size_t> eager = ParseByteSize(keys.at("eager"));
    if (!eager.ok()) return InvalidArgument("eager is not a number of bytes");
    protocol->eager_bytes = static_cast<double>(*eager);
    if (!ParseHostNumber(keys.at("rendezvous"), &protocol->rendezvous_us) ||
        protocol->rendezvous_us < 0) {
      return InvalidArgument("rendezvous must be a number of microseconds, not negative");
    }
  }
  if (keys.count("step")) {
    const std::vector<std::string> f = Split(keys.at("step"), '/');
    const std::string why = "step must be BYTES/US (microseconds, not negative)";
    if (f.size() != 2) return InvalidArgument(why);
    StatusOr<size_t> at = ParseByteSize(f[0]);
    if (!at.ok() || !ParseHostNumber(f[1], &protocol->step_us) || protocol->step_us < 0) {
      return InvalidArgument(why);
    }
    protocol->step_bytes = static_cast<double>(*at);
  }
  if (keys.count("msg")) {
    const std::string why =
        "msg must be BYTES/US,... (sizes increasing, microseconds not negative)";
    for (const std::string& point : Split(keys.at("msg"), ',')) {
      const std::vector<std::string> f = Split(point, '/');
      if (f.size() != 2) return InvalidArgument(why);
      StatusOr<size_t> at = ParseByteSize(f[0]);
      double us = 0;
      if (!at.ok() || *at == 0 || !ParseHostNumber(f[1], &us) || us < 0) {
        return InvalidArgument(why);
      }
      if (!protocol->message_us.empty() &&
          static_cast<double>(*at) <= protocol->message_us.back().first) {
        return InvalidArgument(why);
      }
      protocol->message_us.emplace_back(static_cast<double>(*at), us);
    }
  }
  return Status::OK();
}

// Copies of lines other cores wrote: dirty=BYTES/CLEAN/SRC/DST/BOTH[/READ],... and the
// fragment=BYTES below which messages are exempt.
Status ParseHostDirty(const HostKeys& keys, HostProtocol* protocol) {
  if (keys.count("dirty")) {
    const std::string why =
        "dirty must be BYTES/CLEAN/SRC/DST/BOTH[/READ],... (sizes increasing, rates positive "
        "GB/s, READ on every point or none)";
    for (const std::string& point : Split(keys.at("dirty"), ',')) {
      const std::vector<std::string> f = Split(point, '/');
      if (f.size() != 5 && f.size() != 6) return InvalidArgument(why);
      StatusOr<size_t> at = ParseByteSize(f[0]);
      HostProtocol::DirtyRates d;
      if (!at.ok() || *at == 0 || !ParseHostNumber(f[1], &d.clean) ||
          !ParseHostNumber(f[2], &d.src) || !ParseHostNumber(f[3], &d.dst) ||
          !ParseHostNumber(f[4], &d.both) || d.clean <= 0 || d.src <= 0 || d.dst <= 0 ||
          d.both <= 0 || (f.size() == 6 && (!ParseHostNumber(f[5], &d.read) || d.read <= 0)) ||
          (!protocol->dirty.empty() && (protocol->dirty.back().read > 0) != (f.size() == 6))) {
        return InvalidArgument(why);
      }
      d.bytes = static_cast<double>(*at);
      if (!protocol->dirty.empty() && d.bytes <= protocol->dirty.back().bytes) {
        return InvalidArgument(why);
      }
      protocol->dirty.push_back(d);
    }
  }
  if (keys.count("fragment")) {
    StatusOr<size_t> bytes = ParseByteSize(keys.at("fragment"));
    if (!bytes.ok()) return InvalidArgument("fragment is not a number of bytes");
    if (protocol->dirty.empty()) {
      return InvalidArgument("fragment needs dirty (the messages it exempts)");
    }
    protocol->fragment_bytes = static_cast<double>(*bytes);
  }
  return Status::OK();
}

// Who copies a transfer: copier=receiver|matcher and, with matcher, handoff=BYTES.
Status ParseHostCopier(const HostKeys& keys, HostProtocol* protocol) {
  if (keys.count("copier")) {
    const std::string& copier = keys.at("copier");
    if (copier != "receiver" && copier != "matcher") {
      return InvalidArgument("copier must be receiver or matcher");
    }
    protocol->matcher_copies = copier == "matcher";
  }
  if (keys.count("handoff")) {
    if (!protocol->matcher_copies) return InvalidArgument("handoff needs copier=matcher");
    StatusOr<size_t> handoff = ParseByteSize(keys.at("handoff"));
    if (!handoff.ok()) return InvalidArgument("handoff is not a number of bytes");
    protocol->handoff_bytes = static_cast<double>(*handoff);
  }
  return Status::OK();
}

// The native collectives: native=pass|libnbc|none and what only the pass takes: stream=F,
// cache=BYTES, inline=BYTES and wait=US.
Status ParseHostNative(const HostKeys& keys, HostProtocol* protocol) {
  if (keys.count("native")) {
    const std::string& native = keys.at("native");
    if (native != "pass" && native != "libnbc" && native != "none") {
      return InvalidArgument("native must be pass, libnbc or none");
    }
    protocol->native = native == "pass"     ? HostProtocol::Native::kPass
                       : native == "libnbc" ? HostProtocol::Native::kLibnbc
                                            : HostProtocol::Native::kNone;
  }
  const bool pass = protocol->native == HostProtocol::Native::kPass;
  if (keys.count("stream")) {
    if (!pass) return InvalidArgument("stream needs native=pass");
    if (!ParseHostNumber(keys.at("stream"), &protocol->stream) || protocol->stream <= 0) {
      return InvalidArgument("stream must be a positive number");
    }
  }
  if (keys.count("cache")) {
    if (!pass) return InvalidArgument("cache needs native=pass");
    StatusOr<size_t> cache = ParseByteSize(keys.at("cache"));
    if (!cache.ok()) return InvalidArgument("cache is not a number of bytes");
    protocol->cache_bytes = static_cast<double>(*cache);
  }
  if (keys.count("inline")) {
    if (!pass) return InvalidArgument("inline needs native=pass");
    StatusOr<size_t> bytes = ParseByteSize(keys.at("inline"));
    if (!bytes.ok()) return InvalidArgument("inline is not a number of bytes");
    protocol->inline_bytes = static_cast<double>(*bytes);
  }
  if (keys.count("wait")) {
    if (!pass) return InvalidArgument("wait needs native=pass");
    if (!ParseHostNumber(keys.at("wait"), &protocol->wait_us) || protocol->wait_us < 0) {
      return InvalidArgument("wait must be a number of microseconds, not negative");
    }
  }
  return Status::OK();
}

// The kernel's and the exchange's costs: fault=US (per page) and exchange=US.
Status ParseHostCosts(const HostKeys& keys, HostProtocol* protocol) {
  if (keys.count("fault") &&
      (!ParseHostNumber(keys.at("fault"), &protocol->fault_us) || protocol->fault_us < 0)) {
    return InvalidArgument("fault must be a number of microseconds per page, not negative");
  }
  if (keys.count("exchange") && (!ParseHostNumber(keys.at("exchange"), &protocol->exchange_us) ||
                                 protocol->exchange_us < 0)) {
    return InvalidArgument("exchange must be a number of microseconds, not negative");
  }
  return Status::OK();
}

// pass=WS/COPY/REDUCE,... (native=pass only): the pass's own rates, all ranks together, on
// `workers` cores (as many as run at once), each of which gets its share. Empty: none given.
StatusOr<std::vector<HostRates>> ParseHostPass(const HostKeys& keys, const HostProtocol& protocol,
                                               double workers) {
  std::vector<HostRates> pass;
  if (!keys.count("pass")) return pass;
  if (protocol.native != HostProtocol::Native::kPass) {
    return InvalidArgument("pass needs native=pass");
  }
  for (const std::string& level : Split(keys.at("pass"), ',')) {
    const std::vector<std::string> f = Split(level, '/');
    HostRates l;
    if (f.size() != 3) return InvalidArgument("pass level '", level, "' is not WS/COPY/REDUCE");
    StatusOr<size_t> ws = ParseByteSize(f[0]);
    if (!ws.ok() || !ParseHostNumber(f[1], &l.mem_copy) || !ParseHostNumber(f[2], &l.mem_reduce) ||
        l.mem_copy <= 0 || l.mem_reduce <= 0) {
      return InvalidArgument("pass level '", level, "' is not WS/COPY/REDUCE (positive GB/s)");
    }
    l.working_set = static_cast<double>(*ws);
    l.copy = l.mem_copy / workers;
    l.reduce = l.mem_reduce / workers;
    pass.push_back(l);
  }
  if (pass.empty()) return InvalidArgument("pass has no levels");
  return pass;
}

}  // namespace

StatusOr<Machine> Machine::ParseHost(const std::string& spec) {
  const std::vector<std::string> parts = Split(spec, ':');
  auto bad = [&](const std::string& why) {
    return InvalidArgument("host '", spec, "': ", why,
                           " (host:N:cores=C:latency=US:copy=GBPS:reduce=GBPS[:mem=GBPS]"
                           "[:mem_reduce=GBPS], or host:N:cores=C:latency=US:levels=WS/COPY/"
                           "REDUCE[/MEM/MEM_REDUCE[/LOCAL]],...)");
  };
  if (parts.size() < 3 || parts[0] != "host") return bad("not a host spec");
  char* end = nullptr;
  const long ranks = std::strtol(parts[1].c_str(), &end, 10);
  if (parts[1].empty() || *end != '\0' || ranks < 1 || ranks > 4096) {
    return bad("rank count '" + parts[1] + "' is not 1-4096");
  }
  StatusOr<HostKeys> keys = ParseHostKeys(parts);
  if (!keys.ok()) return bad(keys.status().message());
  double cores = 0, latency = 0;
  const Status shape = ParseHostCores(*keys, &cores, &latency);
  if (!shape.ok()) return bad(shape.message());
  StatusOr<std::vector<HostRates>> levels = ParseHostLevels(*keys);
  if (!levels.ok()) return bad(levels.status().message());
  HostProtocol protocol;
  using ProtocolParser = Status (*)(const HostKeys&, HostProtocol*);
  for (ProtocolParser parse :
       {ParseHostMessages, ParseHostDirty, ParseHostCopier, ParseHostNative, ParseHostCosts}) {
    const Status parsed = parse(*keys, &protocol);
    if (!parsed.ok()) return bad(parsed.message());
  }
  StatusOr<std::vector<HostRates>> pass =
      ParseHostPass(*keys, protocol, std::min<double>(ranks, cores));
  if (!pass.ok()) return bad(pass.status().message());
  StatusOr<Machine> m =
      Host(static_cast<int>(ranks), static_cast<int>(cores), latency, *levels, protocol);
  if (!m.ok()) return bad(m.status().message());
  m->name_ = spec;
  if (!pass->empty()) {
    StatusOr<Machine> own =
        Host(static_cast<int>(ranks), static_cast<int>(cores), latency, *pass, protocol);
    if (!own.ok()) return bad("pass: " + std::string(own.status().message()));
    own->name_ = spec;
    m->native_pass_ = std::make_shared<const Machine>(std::move(own).value());
  }
  return m;
}

const Machine& Machine::ForWorkingSet(double working_set) const {
  if (host_at_.empty()) return *this;
  // Beyond 2^62 bytes (infinity included): the largest level, the memory's rates.
  const double ws = std::clamp(working_set, 1.0, std::ldexp(1.0, 62));
  const int k = static_cast<int>(std::lround(std::log2(ws))) - host_at_lo_;
  return *host_at_[std::clamp(k, 0, static_cast<int>(host_at_.size()) - 1)];
}

double Machine::native_inline_bytes() const {
  return host_protocol_.inline_bytes >= 0
             ? host_protocol_.inline_bytes
             : static_cast<double>(collective::kInProcessNativeInlineBytes);
}

double Machine::host_copy_gbps() const {
  return host_cores_ >= 0 ? resources_[port_in_[0]].gbps : 0;
}

double Machine::host_shared_copy_gbps() const {
  return host_cores_ >= 0 ? resources_[host_cores_].gbps : 0;
}

StatusOr<Machine> Machine::Load(const std::string& name_or_spec) {
  if (name_or_spec.rfind("host:", 0) == 0) return ParseHost(name_or_spec);
  // NODES[xNICS]:RATE...: a cluster `loom launch --emulate` builds (its second field a rate,
  // where a cluster spec's names a machine).
  if (StatusOr<EmulatedCluster> emulated = ParseEmulatedCluster(name_or_spec); emulated.ok())
    return Emulated(*emulated);
  if (name_or_spec.find(':') != std::string::npos) {
    LOOM_ASSIGN_OR_RETURN(ClusterSpec spec, ParseClusterSpec(name_or_spec));
    return Cluster(spec);
  }
  StatusOr<Machine> preset = Preset(name_or_spec);
  if (preset.ok()) return preset;
  StatusOr<Topology> file = Topology::FromFile(name_or_spec);
  if (file.ok()) return FromTopology(*file);
  return InvalidArgument(preset.status().message(), "; nor is it a readable topology file (",
                         file.status().message(), ")");
}

StatusOr<Machine> Machine::Cluster(const ClusterSpec& spec) {
  const std::string& node = spec.node;
  const int want = spec.devices_per_node > 0 ? spec.devices_per_node : -1;
  StatusOr<Machine> loaded = Preset(node);
  if (!loaded.ok()) {
    StatusOr<Topology> file = Topology::FromFile(node);
    if (!file.ok()) {
      return InvalidArgument("cluster node '", node, "': ", loaded.status().message());
    }
    loaded = FromTopology(*file);
  }
  Machine m = std::move(loaded).value();
  LOOM_ENFORCE(m.nodes_ == 1, "cluster node '", node, "' is itself a cluster");
  if (want >= 0 && want != m.per_node_) {
    return InvalidArgument("cluster node '", node, "' has ", m.per_node_, " devices, not ", want);
  }
  return ClusterOf(std::move(m), spec);
}

StatusOr<Machine> Machine::Emulated(const EmulatedCluster& c) {
  Topology one = Topology::Uniform(1);
  LOOM_ASSIGN_OR_RETURN(Machine node, FromTopology(one));
  node.name_ = "process";
  ClusterSpec spec;
  spec.nodes = c.nodes;
  spec.nics = 1;
  // Open MPI's TCP transport stripes a message over every rail: one NIC of their sum.
  spec.nic.gbps = static_cast<double>(c.rate_bps) * c.nics / 8e9;
  spec.nic.latency_us = c.delay_us + kEmulatedStackUs;
  spec.nic.efficiency = kEmulatedTcpEfficiency;
  spec.nic.name = ToString(c);
  spec.nic.source = "loom launch --emulate (docs/CLUSTER.md)";
  LOOM_ASSIGN_OR_RETURN(Machine m, ClusterOf(std::move(node), spec));
  m.name_ = StrCat(ToString(c), " (emulated; one process per node)");
  return m;
}

StatusOr<Machine> Machine::ClusterOf(Machine m, const ClusterSpec& spec) {
  LOOM_ENFORCE(spec.nodes >= 1 && spec.nics >= 1 && spec.nic.gbps > 0 && spec.oversubscription >= 1,
               "a cluster needs at least one node and one NIC of positive bandwidth");
  const std::vector<Resource> node_resources = m.resources_;
  m.resources_.clear();
  for (int k = 0; k < spec.nodes; ++k) {
    for (const Resource& r : node_resources) {
      m.resources_.push_back(Resource{StrCat("node", k, ".", r.name), r.gbps, r.efficiency,
                                      r.reduce_gbps, r.local_gbps});
    }
  }
  m.nodes_ = spec.nodes;
  m.nics_ = spec.nics;
  m.nic_latency_us_ = spec.nic.latency_us;
  for (int k = 0; k < spec.nodes; ++k) {
    for (int i = 0; i < spec.nics; ++i) {
      m.nic_out_.push_back(
          m.AddResource(StrCat("node", k, ".nic", i, "-out"), spec.nic.gbps, spec.nic.efficiency));
      m.nic_in_.push_back(
          m.AddResource(StrCat("node", k, ".nic", i, "-in"), spec.nic.gbps, spec.nic.efficiency));
    }
    if (spec.oversubscription > 1) {
      const double up = spec.nics * spec.nic.gbps / spec.oversubscription;
      m.uplink_out_.push_back(
          m.AddResource(StrCat("node", k, ".uplink-out"), up, spec.nic.efficiency));
      m.uplink_in_.push_back(
          m.AddResource(StrCat("node", k, ".uplink-in"), up, spec.nic.efficiency));
    }
  }
  LOOM_ENFORCE(spec.servers >= 0 && (spec.servers == 0 || spec.server_nic.gbps > 0),
               "a server needs a NIC of positive bandwidth");
  for (int s = 0; s < spec.servers; ++s) {
    m.server_out_.push_back(m.AddResource(StrCat("server", s, ".nic-out"), spec.server_nic.gbps,
                                          spec.server_nic.efficiency));
    m.server_in_.push_back(m.AddResource(StrCat("server", s, ".nic-in"), spec.server_nic.gbps,
                                         spec.server_nic.efficiency));
  }
  m.name_ =
      StrCat(spec.nodes, "x", m.per_node_, ":", m.name_, ":", spec.nics, "x", spec.nic.name,
             spec.oversubscription > 1 ? StrCat(":oversub=", spec.oversubscription) : "",
             spec.servers > 0 ? StrCat(":servers=", spec.servers, "x", spec.server_nic.name) : "");
  return m;
}

StatusOr<Machine> Machine::FirstDevices(int n) const {
  LOOM_ENFORCE(n >= 1 && n <= size(), n, " devices of ", name_, " (", size(), ")");
  if (n == size()) return *this;
  LOOM_ENFORCE(nodes_ == 1, "the first ", n, " devices of a cluster (", name_,
               "): give a node count instead");
  if (host_cores_ >= 0) {
    return Host(n, host_core_count_, host_latency_us_, host_levels_, host_protocol_);
  }
  Machine m;
  if (nvswitch_) {
    m = NvSwitch(name_, n, resources_[port_out_[0]].gbps, pair_latency_[1],
                 resources_[port_out_[0]].efficiency);
  } else {
    const Topology& t = *node_topology_;
    nlohmann::json j;
    j["name"] = name_;
    for (int a = 0; a < n; ++a) {
      std::vector<int> w;
      std::vector<double> bw, lat;
      for (int b = 0; b < n; ++b) {
        w.push_back(t.weight(a, b));
        bw.push_back(t.link(a, b).bandwidth_gbps);
        lat.push_back(t.link(a, b).latency_us);
      }
      j["weights"].push_back(w);
      j["bandwidth_gbps"].push_back(bw);
      j["latency_us"].push_back(lat);
    }
    LOOM_ASSIGN_OR_RETURN(Topology sub, Topology::ParseJson(j.dump()));
    LOOM_ASSIGN_OR_RETURN(m, FromTopology(sub));
  }
  m.name_ = StrCat(name_, "[0:", n, "]");
  return m;
}

Route Machine::NodeRoute(int a, int b, bool reduce) const {
  Route r;
  if (host_cores_ >= 0) {
    r.latency_us = host_latency_us_;
    r.resources = {port_in_[b], host_cores_};
    return r;
  }
  const size_t pair = size_t(a) * per_node_ + b;
  r.latency_us = pair_latency_[pair];
  if (pair_link_[pair] >= 0) {
    r.resources.push_back(pair_link_[pair]);
  } else {
    r.resources.push_back(port_out_[a]);
    r.resources.push_back(port_in_[b]);
  }
  return r;
}

Route Machine::RouteOf(int a, int b, bool reduce) const {
  if (a >= size() || b >= size()) {
    // A dedicated server: its NIC, the switch, and the device's NIC (through its node's uplink
    // when the switch is oversubscribed); servers hang off the switch at full bisection.
    Route r;
    r.latency_us = nic_latency_us_;
    if (a >= size()) {
      r.resources.push_back(server_out_[a - size()]);
    } else {
      r.resources.push_back(nic_out_[size_t(node_of(a)) * nics_ + nic_of(a % per_node_)]);
      if (!uplink_out_.empty()) r.resources.push_back(uplink_out_[node_of(a)]);
    }
    if (b >= size()) {
      r.resources.push_back(server_in_[b - size()]);
    } else {
      if (!uplink_in_.empty()) r.resources.push_back(uplink_in_[node_of(b)]);
      r.resources.push_back(nic_in_[size_t(node_of(b)) * nics_ + nic_of(b % per_node_)]);
    }
    return r;
  }
  const int na = node_of(a), nb = node_of(b);
  const int la = a % per_node_, lb = b % per_node_;
  if (na == nb) {
    Route r = NodeRoute(la, lb, reduce);
    for (int& id : r.resources) id += na * node_resources_;
    return r;
  }
  // Devices are spread over the node's NICs in order (GPUDirect RDMA: the NIC reads the
  // device's memory; the PCIe hop to the NIC is not the limit and is not modelled).
  const int nic_a = nic_of(la), nic_b = nic_of(lb);
  Route r;
  r.latency_us = nic_latency_us_;
  r.resources.push_back(nic_out_[size_t(na) * nics_ + nic_a]);
  if (!uplink_out_.empty()) {
    r.resources.push_back(uplink_out_[na]);
    r.resources.push_back(uplink_in_[nb]);
  }
  r.resources.push_back(nic_in_[size_t(nb) * nics_ + nic_b]);
  return r;
}

std::string Machine::Describe() const {
  std::string out = StrCat(name_, ": ", size(), " devices");
  if (nodes_ > 1) out += StrCat(" (", nodes_, " nodes x ", per_node_, ")");
  if (nvswitch_) out += StrCat(", NVSwitch ", resources_[port_out_[0]].gbps, " GB/s per device");
  if (nics_ > 0) {
    out += StrCat(", ", nics_, " NICs of ", resources_[nic_out_[0]].gbps, " GB/s per node");
    if (!uplink_out_.empty()) out += StrCat(", uplink ", resources_[uplink_out_[0]].gbps, " GB/s");
  }
  if (servers() > 0)
    out += StrCat(", ", servers(), " parameter servers with a NIC of ",
                  resources_[server_out_[0]].gbps, " GB/s each");
  return out;
}

}  // namespace loom::sim
