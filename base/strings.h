// Small string helpers shared by the parsers of specs and descriptions.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

namespace loom {

// Every field of `text` between `sep`s, empty ones included: "a::b:" -> {"a", "", "b", ""};
// "" -> {""}.
inline std::vector<std::string> StrSplit(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t at = text.find(sep, start);
    out.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

}  // namespace loom
