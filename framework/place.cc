#include "framework/place.h"

#include <cstdlib>

namespace loom {

const char* PlaceKindName(Place::Kind kind) { return kind == Place::kCPU ? "cpu" : "cuda"; }

std::string Place::ToString() const { return StrCat(PlaceKindName(kind), ":", device); }

StatusOr<Place> ParsePlace(const std::string& text) {
  std::string kind = text, index = "0";
  auto colon = text.find(':');
  if (colon != std::string::npos) {
    kind = text.substr(0, colon);
    index = text.substr(colon + 1);
  }
  char* end = nullptr;
  long i = std::strtol(index.c_str(), &end, 10);
  if (index.empty() || *end != '\0' || i < 0 || i > 4096)
    return InvalidArgument("bad place '", text,
                           "': device index must be a small non-negative integer");
  if (kind == "cpu") return Place::CPU(static_cast<int>(i));
  if (kind == "cuda" || kind == "gpu") return Place::CUDA(static_cast<int>(i));
  return InvalidArgument("bad place '", text, "': expected cpu[:i] or cuda[:i]");
}

std::string CpuPlaceSet(int n) { return StrCat(PlaceKindName(Place::kCPU), ":", n); }

StatusOr<std::vector<Place>> ParsePlaceSet(const std::string& text, int max_places,
                                           const std::string& what) {
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : text.substr(colon + 1);
  std::vector<Place> places;
  if (kind == "cpu") {
    char* end = nullptr;
    const long n = std::strtol(rest.c_str(), &end, 10);
    if (rest.empty() || *end != '\0' || n < 1 || n > max_places)
      return InvalidArgument(what, " '", text, "': N must be an integer in [1, ", max_places,
                             "]");
    for (int i = 0; i < n; ++i) places.push_back(Place::CPU(i));
    return places;
  }
  if (kind != "cuda")
    return InvalidArgument(what, " '", text, "': expected ", kPlaceSetSyntax);
  size_t start = 0;
  while (true) {
    const size_t comma = rest.find(',', start);
    const std::string item =
        rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    const long d = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || d < 0 || d > 1023)
      return InvalidArgument(what, " '", text, "': '", item, "' is not a GPU number (expected ",
                             kPlaceSetSyntax, ")");
    places.push_back(Place::CUDA(static_cast<int>(d)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (static_cast<int>(places.size()) > max_places)
    return InvalidArgument(what, " '", text, "': ", places.size(), " GPUs, at most ", max_places,
                           " ranks");
  return places;
}

}  // namespace loom
