#include "base/emulated_cluster.h"

#include <cmath>
#include <cstdlib>
#include <vector>

#include "base/strings.h"

namespace loom {
namespace {

// A number followed by a unit; false when there is no number or it is not finite.
bool NumberAndUnit(const std::string& text, double* value, std::string* unit) {
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(*value)) return false;
  *unit = end;
  return true;
}

StatusOr<int> Count(const std::string& text, const char* field, int max, const std::string& spec) {
  char* end = nullptr;
  const long n = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || n < 1 || n > max)
    return InvalidArgument("--emulate '", spec, "': ", field, " '", text,
                           "' must be a whole number in 1..", max);
  return static_cast<int>(n);
}

StatusOr<uint64_t> Rate(const std::string& text, const std::string& spec) {
  double value = 0;
  std::string unit;
  double scale = 0;
  if (NumberAndUnit(text, &value, &unit)) {
    if (unit == "bit") scale = 1;
    if (unit == "kbit" || unit == "Kb") scale = 1e3;
    if (unit == "mbit" || unit == "Mb") scale = 1e6;
    if (unit == "gbit" || unit == "Gb") scale = 1e9;
    if (unit == "tbit" || unit == "Tb") scale = 1e12;
  }
  const double bps = value * scale;
  if (scale == 0 || bps < 1e3 || bps > 4e12)
    return InvalidArgument("--emulate '", spec, "': rate '", text,
                           "' must be a rate from 1kbit to 4tbit (bit, kbit, mbit, gbit, tbit; "
                           "or Kb, Mb, Gb, Tb)");
  return static_cast<uint64_t>(std::llround(bps));
}

StatusOr<double> Microseconds(const std::string& text, const char* field, const std::string& spec) {
  double value = 0;
  std::string unit;
  double scale = 0;
  if (NumberAndUnit(text, &value, &unit)) {
    if (unit == "us") scale = 1;
    if (unit == "ms") scale = 1e3;
    if (unit == "s") scale = 1e6;
  }
  if (scale == 0 || value < 0 || value * scale > 10e6)
    return InvalidArgument("--emulate '", spec, "': ", field, " '", text,
                           "' must be a time from 0 to 10s (us, ms or s)");
  return value * scale;
}

StatusOr<double> Percent(const std::string& text, const std::string& spec) {
  double value = 0;
  std::string unit;
  if (!NumberAndUnit(text, &value, &unit) || !(unit.empty() || unit == "%") || value < 0 ||
      value > 100)
    return InvalidArgument("--emulate '", spec, "': loss '", text,
                           "' must be a percentage from 0 to 100");
  return value;
}

// "1000000000" -> "1gbit": the largest unit that divides the rate exactly.
std::string RateText(uint64_t bps) {
  const std::pair<uint64_t, const char*> units[] = {
      {1000000000000ull, "tbit"}, {1000000000ull, "gbit"}, {1000000ull, "mbit"}, {1000ull, "kbit"}};
  for (const auto& [scale, name] : units)
    if (bps % scale == 0) return StrCat(bps / scale, name);
  return StrCat(bps, "bit");
}

}  // namespace

StatusOr<EmulatedCluster> ParseEmulatedCluster(const std::string& text) {
  const std::vector<std::string> fields = StrSplit(text, ':');
  if (fields.size() < 2)
    return InvalidArgument("--emulate '", text,
                           "': expected NODES[xNICS]:RATE[:delay=D][:loss=P][:jitter=J], e.g. "
                           "4x2:1gbit:delay=100us");
  EmulatedCluster c;
  const size_t x = fields[0].find('x');
  LOOM_ASSIGN_OR_RETURN(c.nodes, Count(fields[0].substr(0, x), "nodes", kMaxEmulatedNodes, text));
  if (x != std::string::npos) {
    LOOM_ASSIGN_OR_RETURN(c.nics, Count(fields[0].substr(x + 1), "nics", kMaxEmulatedNics, text));
  }
  LOOM_ASSIGN_OR_RETURN(c.rate_bps, Rate(fields[1], text));
  bool has_delay = false, has_jitter = false;
  for (size_t i = 2; i < fields.size(); ++i) {
    const size_t eq = fields[i].find('=');
    const std::string key = fields[i].substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : fields[i].substr(eq + 1);
    if (eq == std::string::npos || value.empty())
      return InvalidArgument("--emulate '", text, "': '", fields[i], "' is not KEY=VALUE");
    if (key == "delay") {
      LOOM_ASSIGN_OR_RETURN(c.delay_us, Microseconds(value, "delay", text));
      has_delay = true;
    } else if (key == "jitter") {
      LOOM_ASSIGN_OR_RETURN(c.jitter_us, Microseconds(value, "jitter", text));
      has_jitter = true;
    } else if (key == "loss") {
      LOOM_ASSIGN_OR_RETURN(c.loss_percent, Percent(value, text));
    } else {
      return InvalidArgument("--emulate '", text, "': unknown field '", key,
                             "' (delay, loss or jitter)");
    }
  }
  if (has_jitter && (!has_delay || c.jitter_us > c.delay_us))
    return InvalidArgument(
        "--emulate '", text,
        "': jitter needs a delay at least as large (each frame waits delay +- jitter)");
  return c;
}

std::string ToString(const EmulatedCluster& c) {
  std::string s = StrCat(c.nodes, "x", c.nics, ":", RateText(c.rate_bps));
  if (c.delay_us > 0) s += StrCat(":delay=", c.delay_us, "us");
  if (c.jitter_us > 0) s += StrCat(":jitter=", c.jitter_us, "us");
  if (c.loss_percent > 0) s += StrCat(":loss=", c.loss_percent, "%");
  return s;
}

}  // namespace loom
