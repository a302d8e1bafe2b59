// Place: where a tensor lives and a kernel runs: CPU device i or CUDA device i.
// Several CPU places in one process are independent devices, each with its own allocator
// (and, in the multi-device executor, its own worker thread).
#pragma once

#include <functional>
#include <string>
#include <vector>

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

// A set of places as the CLI's --places gives it: "cpu:N" is N CPU places (cpu:0 .. cpu:N-1),
// "cuda:D0,D1,..." one CUDA place per listed GPU (a GPU may repeat: virtual devices). At most
// max_places; errors name `what` (where the text came from, e.g. "--places") and quote the text.
StatusOr<std::vector<Place>> ParsePlaceSet(const std::string& text, int max_places,
                                           const std::string& what);
// How ParsePlaceSet's syntax reads in help texts.
inline constexpr const char* kPlaceSetSyntax = "cpu:N or cuda:D0,D1,...";
// "cpu:n": n CPU places in ParsePlaceSet's syntax.
std::string CpuPlaceSet(int n);
// How ParsePlace's syntax reads in help texts.
inline constexpr const char* kPlaceSyntax = "cpu:i or cuda:i";

}  // namespace loom

template <>
struct std::hash<loom::Place> {
  size_t operator()(const loom::Place& p) const noexcept { return p.kind * 1031 + p.device; }
};
