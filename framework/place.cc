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

}  // namespace loom
