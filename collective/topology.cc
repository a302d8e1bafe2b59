#include "collective/topology.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "collective/types.h"

namespace loom::collective {
namespace {

// The reference matrices of /work/shared/topologies (also in collective/topologies/*.txt).
constexpr const char* kP3_16xlarge =
    R"(# AWS p3.16xlarge = NVIDIA DGX-1 with 8 V100 (hybrid cube-mesh).
8
0 2 2 3 3 1 1 1
2 0 3 2 1 3 1 1
2 3 0 3 1 1 2 1
3 2 3 0 1 1 1 2
3 1 1 1 0 2 2 3
1 3 1 1 2 0 3 2
1 1 2 1 2 3 0 3
1 1 1 2 3 2 3 0
)";

constexpr const char* kDgx1P100 = R"(# NVIDIA DGX-1 with 8 P100 (hybrid cube-mesh), single NVLinks.
8
0 2 2 2 2 1 1 1
2 0 2 2 1 2 1 1
2 2 0 2 1 1 2 1
2 2 2 0 1 1 1 2
2 1 1 1 0 2 2 2
1 2 1 1 2 0 2 2
1 1 2 1 2 2 0 2
1 1 1 2 2 2 2 0
)";

}  // namespace

Link Topology::LinkForWeight(int weight) {
  switch (weight) {
    case 0: return Link{0, 0, 0};
    case 1: return Link{1, 10.0, 5.0};
    case 2: return Link{2, 25.0, 2.0};
    default: return Link{weight, 25.0 * (weight - 1), 2.0};
  }
}

void Topology::SetLink(int a, int b, const Link& link) {
  links_[size_t(a) * n_ + b] = link;
  links_[size_t(b) * n_ + a] = link;
}

Topology Topology::Uniform(int n, int weight) {
  LOOM_CHECK(n >= 1, "topology needs at least one device, got ", n);
  Topology t(n, StrCat("uniform", n));
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) t.SetLink(a, b, LinkForWeight(weight));
  }
  return t;
}

StatusOr<Topology> Topology::FromWeights(const std::vector<std::vector<int>>& weights) {
  const int n = static_cast<int>(weights.size());
  LOOM_ENFORCE(n >= 1, "topology needs at least one device");
  for (int a = 0; a < n; ++a) {
    LOOM_ENFORCE(static_cast<int>(weights[a].size()) == n, "row ", a, " has ", weights[a].size(),
                 " weights, expected ", n);
  }
  Topology t(n, "custom");
  for (int a = 0; a < n; ++a) {
    LOOM_ENFORCE(weights[a][a] == 0, "diagonal entry (", a, ",", a, ") is ", weights[a][a],
                 ", expected 0");
    for (int b = 0; b < n; ++b) {
      const int w = weights[a][b];
      LOOM_ENFORCE(w >= 0 && w <= 3, "weight (", a, ",", b, ") is ", w, ", expected 0..3");
      LOOM_ENFORCE(w == weights[b][a], "matrix is not symmetric: (", a, ",", b, ") is ", w,
                   " but (", b, ",", a, ") is ", weights[b][a]);
    }
    for (int b = a + 1; b < n; ++b) t.SetLink(a, b, LinkForWeight(weights[a][b]));
  }
  return t;
}

Status Topology::SetNodes(int nodes, int nics) {
  LOOM_ENFORCE(nodes >= 1 && n_ % nodes == 0, n_, " devices do not split into ", nodes,
               " nodes of equal size");
  LOOM_ENFORCE(nics >= 0 && (nodes == 1 || nics >= 1), "a cluster of ", nodes,
               " nodes needs at least one NIC per node, got ", nics);
  nodes_ = nodes;
  nics_ = nics;
  return Status::OK();
}

StatusOr<Topology> Topology::Cluster(const Topology& node, int nodes, int nics, Link nic) {
  LOOM_ENFORCE(node.nodes() == 1, "a cluster's node '", node.name(), "' is itself a cluster");
  LOOM_ENFORCE(nodes >= 1 && nics >= 1, "a cluster needs at least one node and one NIC, got ",
               nodes, " nodes of ", nics, " NICs");
  LOOM_ENFORCE(nic.bandwidth_gbps > 0 && nic.latency_us >= 0,
               "a NIC needs a positive bandwidth and a latency >= 0");
  if (nic.weight <= 0) nic.weight = 1;
  const int per = node.size(), n = nodes * per;
  Topology t(n, StrCat(nodes, "x", node.name(), ":", nics, "nics"));
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      t.SetLink(a, b, a / per == b / per ? node.link(a % per, b % per) : nic);
    }
  }
  LOOM_RETURN_IF_ERROR(t.SetNodes(nodes, nics));
  return t;
}

Topology Topology::NodeTopology() const {
  if (nodes_ == 1) return *this;
  const int per = devices_per_node();
  Topology t(per, StrCat(name_, ":node"));
  for (int a = 0; a < per; ++a) {
    for (int b = a + 1; b < per; ++b) t.SetLink(a, b, link(a, b));
  }
  return t;
}

StatusOr<Topology> Topology::Parse(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  int line_no = 0;
  int n = -1;
  std::vector<std::vector<int>> rows;
  std::string name = "custom";
  while (std::getline(lines, line)) {
    ++line_no;
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    if (line[first] == '#') continue;
    std::istringstream fields(line);
    std::vector<long> values;
    std::string token;
    while (fields >> token) {
      size_t used = 0;
      long v = 0;
      try {
        v = std::stol(token, &used);
      } catch (...) {
        used = 0;
      }
      LOOM_ENFORCE(used == token.size() && !token.empty(), "line ", line_no, ": '",
                   token.size() > 40 ? token.substr(0, 40) + "..." : token, "' is not an integer");
      values.push_back(v);
    }
    if (n < 0) {
      LOOM_ENFORCE(values.size() == 1, "line ", line_no,
                   ": expected the device count alone on the line");
      LOOM_ENFORCE(values[0] >= 1 && values[0] <= kMaxWorldSize, "line ", line_no,
                   ": device count ", values[0], " is outside 1..", kMaxWorldSize);
      n = static_cast<int>(values[0]);
      continue;
    }
    LOOM_ENFORCE(static_cast<int>(rows.size()) < n, "line ", line_no, ": more than ", n,
                 " matrix rows");
    LOOM_ENFORCE(static_cast<int>(values.size()) == n, "line ", line_no, ": row has ",
                 values.size(), " weights, expected ", n);
    rows.emplace_back(values.begin(), values.end());
  }
  LOOM_ENFORCE(n >= 0, "no device count found");
  LOOM_ENFORCE(static_cast<int>(rows.size()) == n, "expected ", n, " matrix rows, found ",
               rows.size());
  return FromWeights(rows);
}

namespace {

// An n x n matrix of numbers under `key` (n = rows when n < 0).
template <typename T>
Status JsonMatrix(const nlohmann::json& doc, const char* key, int n,
                  std::vector<std::vector<T>>* out) {
  const nlohmann::json& m = doc.at(key);
  LOOM_ENFORCE(m.is_array(), "\"", key, "\" must be an array of rows");
  if (n < 0) n = static_cast<int>(m.size());
  LOOM_ENFORCE(n >= 1 && n <= kMaxWorldSize, "\"", key, "\" has ", m.size(), " rows, expected 1..",
               kMaxWorldSize);
  LOOM_ENFORCE(static_cast<int>(m.size()) == n, "\"", key, "\" has ", m.size(), " rows, expected ",
               n);
  out->assign(n, std::vector<T>(n));
  for (int a = 0; a < n; ++a) {
    LOOM_ENFORCE(m[a].is_array() && static_cast<int>(m[a].size()) == n, "\"", key, "\" row ", a,
                 " must be an array of ", n, " numbers");
    for (int b = 0; b < n; ++b) {
      const nlohmann::json& v = m[a][b];
      const bool fits = std::is_integral_v<T> ? v.is_number_integer() : v.is_number();
      LOOM_ENFORCE(fits, "\"", key, "\" entry (", a, ",", b, ") is ", v.dump(), ", expected ",
                   std::is_integral_v<T> ? "an integer" : "a number");
      (*out)[a][b] = v.get<T>();
    }
  }
  return Status::OK();
}

}  // namespace

// The deepest nesting of arrays and objects in a JSON text (outside strings): the parser
// recurses once per level, so a hostile file could exhaust the stack.
static int JsonDepth(const std::string& text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

StatusOr<Topology> Topology::ParseJson(const std::string& text) {
  // A topology is an object of matrices: three levels; a little room for comments' objects.
  constexpr int kMaxDepth = 16;
  const int depth = JsonDepth(text);
  LOOM_ENFORCE(depth <= kMaxDepth, "the JSON nests ", depth, " levels deep; a topology needs 3 ",
               "(an object of matrices), at most ", kMaxDepth, " are read");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return InvalidArgument("not valid JSON: ", e.what());
  }
  LOOM_ENFORCE(doc.is_object(), "the topology must be a JSON object");
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& k = it.key();
    LOOM_ENFORCE(k == "name" || k == "weights" || k == "bandwidth_gbps" || k == "latency_us" ||
                     k == "nodes" || k == "nics",
                 "unknown key \"", k,
                 "\" (expected name, weights, bandwidth_gbps, latency_us, nodes, nics)");
  }
  LOOM_ENFORCE(doc.contains("weights"), "missing \"weights\" (the n x n link matrix)");
  std::vector<std::vector<int>> weights;
  LOOM_RETURN_IF_ERROR(JsonMatrix(doc, "weights", -1, &weights));
  LOOM_ASSIGN_OR_RETURN(Topology t, FromWeights(weights));
  const int n = t.size();
  if (doc.contains("name")) {
    LOOM_ENFORCE(doc["name"].is_string(), "\"name\" must be a string");
    t.name_ = doc["name"].get<std::string>();
  }
  int layout[2] = {1, 0};  // nodes, nics
  for (int i = 0; i < 2; ++i) {
    const char* key = i == 0 ? "nodes" : "nics";
    if (!doc.contains(key)) continue;
    LOOM_ENFORCE(doc[key].is_number_integer(), "\"", key, "\" must be an integer");
    layout[i] = doc[key].get<int>();
  }
  LOOM_RETURN_IF_ERROR(t.SetNodes(layout[0], layout[0] > 1 && layout[1] == 0 ? 1 : layout[1]));
  for (const char* key : {"bandwidth_gbps", "latency_us"}) {
    if (!doc.contains(key)) continue;
    std::vector<std::vector<double>> m;
    LOOM_RETURN_IF_ERROR(JsonMatrix(doc, key, n, &m));
    const bool bandwidth = std::string(key) == "bandwidth_gbps";
    for (int a = 0; a < n; ++a) {
      for (int b = a + 1; b < n; ++b) {
        LOOM_ENFORCE(m[a][b] == m[b][a], "\"", key, "\" is not symmetric: (", a, ",", b, ") is ",
                     m[a][b], " but (", b, ",", a, ") is ", m[b][a]);
        if (weights[a][b] == 0) continue;  // no link: nothing to set
        LOOM_ENFORCE(bandwidth ? m[a][b] > 0 : m[a][b] >= 0, "\"", key, "\" entry (", a, ",", b,
                     ") is ", m[a][b], ", expected ", bandwidth ? "> 0" : ">= 0",
                     " for a link of weight ", weights[a][b]);
        Link link = t.link(a, b);
        (bandwidth ? link.bandwidth_gbps : link.latency_us) = m[a][b];
        t.SetLink(a, b, link);
      }
    }
  }
  return t;
}

StatusOr<Topology> Topology::FromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return IOError("cannot open topology file '", path, "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const size_t first = text.find_first_not_of(" \t\r\n");
  const bool json = first != std::string::npos && text[first] == '{';
  StatusOr<Topology> t = json ? ParseJson(text) : Parse(text);
  if (!t.ok()) return t.status().WithContext(path);
  if (!json || t->name_ == "custom") t->name_ = path;  // a JSON file may name its machine
  return t;
}

std::vector<std::string> Topology::PresetNames() {
  return {"p3.16xlarge", "dgx1-p100", "dgx2", "mesh4", "pcie8"};
}

StatusOr<Topology> Topology::Preset(const std::string& name) {
  StatusOr<Topology> t = InvalidArgument("unknown topology preset '", name, "'");
  if (name == "p3.16xlarge") {
    t = Parse(kP3_16xlarge);
  } else if (name == "dgx1-p100") {
    t = Parse(kDgx1P100);
    if (t.ok()) {
      // P100 NVLink 1.0: about 20 GB/s per link and direction.
      for (int a = 0; a < t->n_; ++a) {
        for (int b = a + 1; b < t->n_; ++b) {
          if (t->weight(a, b) == 2) t->SetLink(a, b, Link{2, 20.0, 2.0});
        }
      }
    }
  } else if (name == "dgx2") {
    // 16 V100 behind NVSwitches: every pair sees the same full-bandwidth path.
    Topology u = Uniform(16, 3);
    for (int a = 0; a < 16; ++a) {
      for (int b = a + 1; b < 16; ++b) u.SetLink(a, b, Link{3, 120.0, 3.0});
    }
    t = std::move(u);
  } else if (name == "mesh4") {
    t = Uniform(4, 3);  // four GPUs, a double NVLink between every pair
  } else if (name == "pcie8") {
    t = Uniform(8, 1);
  }
  if (t.ok()) t->name_ = name;
  return t;
}

bool Topology::IsConnected() const {
  std::vector<bool> seen(n_, false);
  std::vector<int> stack{0};
  seen[0] = true;
  int count = 1;
  while (!stack.empty()) {
    const int a = stack.back();
    stack.pop_back();
    for (int b = 0; b < n_; ++b) {
      if (!seen[b] && connected(a, b)) {
        seen[b] = true;
        ++count;
        stack.push_back(b);
      }
    }
  }
  return count == n_;
}

std::string Topology::ToString() const {
  std::ostringstream os;
  os << "# " << name_ << "\n" << n_ << "\n";
  for (int a = 0; a < n_; ++a) {
    for (int b = 0; b < n_; ++b) os << (b ? " " : "") << weight(a, b);
    os << "\n";
  }
  return os.str();
}

}  // namespace loom::collective
