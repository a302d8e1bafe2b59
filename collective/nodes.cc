#include "collective/nodes.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>

#include "base/emulated_cluster.h"
#include "base/strings.h"

namespace loom::collective {
namespace {

// The interface's speed in GB/s: the emulated cluster's rate, else the kernel's, else 0.
double SpeedGbps(const std::string& interface) {
  if (const char* spec = std::getenv("LOOM_EMULATE_SPEC"); spec != nullptr && *spec) {
    StatusOr<EmulatedCluster> c = ParseEmulatedCluster(spec);
    if (c.ok()) return static_cast<double>(c->rate_bps) / 8e9;
  }
  std::ifstream in("/sys/class/net/" + interface + "/speed");
  long mbps = 0;
  if (in >> mbps && mbps > 0) return static_cast<double>(mbps) / 8e3;
  return 0;
}

}  // namespace

HostInfo DetectLocalHost() {
  HostInfo host;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) host.hostname = name;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return host;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof(text));
    host.nics.push_back(NicInfo{a->ifa_name, text, SpeedGbps(a->ifa_name)});
  }
  freeifaddrs(list);
  return host;
}

std::string EncodeHost(const HostInfo& host) {
  std::string out = host.hostname;
  for (const NicInfo& n : host.nics) out += StrCat("\t", n.name, ",", n.address, ",", n.gbps);
  return out;
}

StatusOr<HostInfo> DecodeHost(const std::string& text) {
  std::vector<std::string> fields = StrSplit(text, '\t');
  if (fields.empty() || fields[0].empty())
    return InvalidArgument("a host description without a host name: '", text, "'");
  HostInfo host;
  host.hostname = fields[0];
  for (size_t i = 1; i < fields.size(); ++i) {
    std::vector<std::string> parts = StrSplit(fields[i], ',');
    char* end = nullptr;
    const double gbps = parts.size() == 3 ? std::strtod(parts[2].c_str(), &end) : -1;
    if (parts.size() != 3 || end == parts[2].c_str() || *end != '\0' || gbps < 0)
      return InvalidArgument("host '", host.hostname, "': NIC '", fields[i],
                             "' is not name,address,gbps");
    host.nics.push_back(NicInfo{parts[0], parts[1], gbps});
  }
  return host;
}

NodeMap BuildNodeMap(const std::vector<HostInfo>& per_rank) {
  NodeMap map;
  std::map<std::string, int> index;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    auto [it, added] = index.emplace(per_rank[r].hostname, map.nodes());
    if (added) {
      map.hosts.push_back(per_rank[r]);
      map.ranks.emplace_back();
    }
    map.node_of_rank.push_back(it->second);
    map.ranks[it->second].push_back(static_cast<int>(r));
  }
  return map;
}

Topology NodeTopology(const NodeMap& map) {
  const int n = static_cast<int>(map.node_of_rank.size());
  // A node's NICs together (MPI stripes a message over them); 0: unknown.
  std::vector<double> nic_gbps(map.nodes(), 0);
  for (int k = 0; k < map.nodes(); ++k)
    for (const NicInfo& nic : map.hosts[k].nics) nic_gbps[k] += nic.gbps;
  std::string weights, bandwidth, latency;
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      const int ka = map.node_of_rank[a], kb = map.node_of_rank[b];
      const int w = a == b ? 0 : ka == kb ? 2 : 1;
      Link link = Topology::LinkForWeight(w);
      const double network = std::min(nic_gbps[ka], nic_gbps[kb]);
      if (w == 1 && network > 0) link = Link{1, network, kNetworkLatencyUs};
      const char* sep = b == 0 ? (a == 0 ? "[[" : "],[") : ",";
      weights += StrCat(sep, w);
      bandwidth += StrCat(sep, link.bandwidth_gbps);
      latency += StrCat(sep, link.latency_us);
    }
  }
  const std::string json =
      StrCat("{\"name\": \"", map.nodes(), " nodes\", \"weights\": ", weights, "]], ",
             "\"bandwidth_gbps\": ", bandwidth, "]], \"latency_us\": ", latency, "]]}");
  StatusOr<Topology> t = Topology::ParseJson(json);
  return t.ok() ? *t : Topology::Uniform(n);
}

std::string DescribeNodes(const NodeMap& map) {
  std::string out = StrCat("# ", map.node_of_rank.size(), " ranks on ", map.nodes(), " node",
                           map.nodes() == 1 ? "" : "s", "\n# node  host  ranks  NICs\n");
  for (int k = 0; k < map.nodes(); ++k) {
    std::string ranks, nics;
    for (int r : map.ranks[k]) ranks += StrCat(ranks.empty() ? "" : ",", r);
    for (const NicInfo& n : map.hosts[k].nics)
      nics += StrCat(nics.empty() ? "" : " ", n.name, "=", n.address,
                     n.gbps > 0 ? StrCat("@", n.gbps * 8, "Gb") : std::string("@?"));
    out +=
        StrCat(k, "  ", map.hosts[k].hostname, "  ", ranks, "  ", nics.empty() ? "-" : nics, "\n");
  }
  return out;
}

}  // namespace loom::collective
