#include "base/byte_size.h"

#include <cmath>
#include <cstdlib>

namespace loom {

StatusOr<size_t> ParseByteSize(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(value >= 0) || !std::isfinite(value))
    return InvalidArgument("size '", text, "' is not a number of bytes (e.g. 8, 64K, 1M, 1G)");
  double scale = 1;
  const std::string unit = end;
  if (unit == "K" || unit == "k" || unit == "KB" || unit == "KiB")
    scale = 1024.0;
  else if (unit == "M" || unit == "m" || unit == "MB" || unit == "MiB")
    scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "g" || unit == "GB" || unit == "GiB")
    scale = 1024.0 * 1024 * 1024;
  else if (!unit.empty() && unit != "B")
    return InvalidArgument("size '", text, "' has an unknown unit '", unit, "' (K, M or G)");
  const double bytes = value * scale;
  if (bytes > 64.0 * 1024 * 1024 * 1024 * 1024)
    return InvalidArgument("size '", text, "' is beyond 64 TiB");
  return static_cast<size_t>(bytes);
}

}  // namespace loom
