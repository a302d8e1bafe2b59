// Place: where a tensor lives and a kernel runs: CPU device i or CUDA device i.
// Several CPU places in one process are independent devices, each with its own allocator
// (and, in the multi-device executor, its own worker thread).
#pragma once

#include <functional>
#include <string>

#include "base/status.h"

namespace loom {

struct Place {
  enum Kind : int { kCPU = 0, kCUDA = 1 };
  Kind kind = kCPU;
  int device = 0;

  static Place CPU(int i = 0) { return Place{kCPU, i}; }
  static Place CUDA(int i = 0) { return Place{kCUDA, i}; }
  bool is_cpu() const { return kind == kCPU; }
  bool is_cuda() const { return kind == kCUDA; }
  bool operator==(const Place& o) const { return kind == o.kind && device == o.device; }
  bool operator!=(const Place& o) const { return !(*this == o); }
  bool operator<(const Place& o) const {
    return kind != o.kind ? kind < o.kind : device < o.device;
  }
  std::string ToString() const;  // "cpu:0", "cuda:1"
};

const char* PlaceKindName(Place::Kind kind);
// Parses "cpu", "cpu:2", "cuda:0", "gpu:1".
StatusOr<Place> ParsePlace(const std::string& text);

}  // namespace loom

template <>
struct std::hash<loom::Place> {
  size_t operator()(const loom::Place& p) const noexcept { return p.kind * 1031 + p.device; }
};
