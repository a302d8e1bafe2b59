// Topology: the devices of one machine and the links between them. A symmetric matrix of link
// weights (3 = double NVLink, 2 = single NVLink, 1 = PCIe through the CPU, 0 = self / no link)
// with a bandwidth (GB/s, one direction) and a latency (microseconds) per link. Built from a
// preset, from the text format of docs/COLLECTIVES.md, or as a uniform all-to-all machine.
// A topology may also group its devices into nodes joined by NICs (Cluster, or "nodes" and "nics"
// in the JSON format): node k holds devices k * per .. k * per + per - 1, and a device leaves and
// enters its node through the NIC its local index is attached to (local * nics / per, devices
// spread over the NICs in order), so that schedules can run one channel per NIC.
// Immutable value type; safe to share between threads.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace loom::collective {

struct Link {
  int weight = 0;
  double bandwidth_gbps = 0;
  double latency_us = 0;
};

class Topology {
 public:
  // n devices, every pair linked with `weight` (default: 1, PCIe-like).
  static Topology Uniform(int n, int weight = 1);
  // "p3.16xlarge", "dgx1-p100", "dgx2", "mesh4", "pcie8".
  static StatusOr<Topology> Preset(const std::string& name);
  static std::vector<std::string> PresetNames();
  // Text format: '#' comment lines, the device count n, then n rows of n integer weights (0..3).
  // The matrix must be symmetric with a zero diagonal.
  static StatusOr<Topology> Parse(const std::string& text);
  // JSON: {"name": "...", "weights": [[0, 2, ...], ...], "bandwidth_gbps": [[...]],
  // "latency_us": [[...]]}; name, bandwidth and latency are optional (absent: the weight class's
  // defaults); the matrices must be n x n, symmetric, with a zero diagonal. Optional "nodes" (a
  // divisor of n) and "nics" (per node; 1 when absent on a cluster) group the devices into
  // nodes. Errors name the key and the entry.
  static StatusOr<Topology> ParseJson(const std::string& text);
  // A file in either format: JSON when its first non-blank character is '{', else the text
  // format.
  static StatusOr<Topology> FromFile(const std::string& path);
  // A matrix of weights; bandwidth and latency follow the weight class (see LinkForWeight).
  static StatusOr<Topology> FromWeights(const std::vector<std::vector<int>>& weights);
  // `nodes` copies of `node` (a single machine), each with `nics` NICs, every pair of devices on
  // different nodes joined by `nic` (weight 1 unless given: the path through two NICs). Not
  // bounded by kMaxWorldSize (the simulator plans clusters of thousands of devices).
  static StatusOr<Topology> Cluster(const Topology& node, int nodes, int nics, Link nic);

  // Default bandwidth/latency of a weight class: 3 -> 50 GB/s, 2 -> 25 GB/s, 1 -> 10 GB/s.
  static Link LinkForWeight(int weight);

  int size() const { return n_; }
  const Link& link(int a, int b) const { return links_[static_cast<size_t>(a) * n_ + b]; }
  int weight(int a, int b) const { return link(a, b).weight; }
  bool connected(int a, int b) const { return a != b && weight(a, b) > 0; }
  // Every device reaches every other over links of weight > 0.
  bool IsConnected() const;
  const std::string& name() const { return name_; }

  // Nodes and NICs (a single machine: one node, no NICs).
  int nodes() const { return nodes_; }
  int devices_per_node() const { return n_ / nodes_; }
  int nics() const { return nics_; }
  int node_of(int device) const { return device / devices_per_node(); }
  // The NIC device d leaves and enters its node through (0 without NICs).
  int nic_of(int device) const {
    return nics_ > 0 ? (device % devices_per_node()) * nics_ / devices_per_node() : 0;
  }
  // The links of one node (devices 0 .. devices_per_node() - 1); the topology itself when it
  // has one node.
  Topology NodeTopology() const;

  // The matrix in the text format Parse reads (with a comment naming the topology).
  std::string ToString() const;

 private:
  Topology(int n, std::string name) : n_(n), name_(std::move(name)), links_(size_t(n) * n) {}
  void SetLink(int a, int b, const Link& link);
  Status SetNodes(int nodes, int nics);

  int n_ = 0;
  int nodes_ = 1;
  int nics_ = 0;
  std::string name_;
  std::vector<Link> links_;
};

}  // namespace loom::collective
