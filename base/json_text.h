// Text for JSON written by hand (traces, plot data): a string's characters escaped as a JSON
// string literal needs them (quotes, backslashes, control characters), without the quotes.
#pragma once

#include <cstdio>
#include <string>

namespace loom {

inline std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace loom
