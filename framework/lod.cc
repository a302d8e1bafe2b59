#include "framework/lod.h"

namespace loom {

Status CheckLoD(const LoD& lod, int64_t rows, const std::string& what) {
  for (size_t l = 0; l < lod.size(); ++l) {
    const auto& level = lod[l];
    if (level.size() < 2)
      return InvalidArgument(what, ": LoD level ", l, " has ", level.size(),
                             " offsets (a level needs at least 2: 0 and its end)");
    if (level[0] != 0)
      return InvalidArgument(what, ": LoD level ", l, " starts at ", level[0], ", not 0");
    for (size_t i = 1; i < level.size(); ++i)
      if (level[i] < level[i - 1])
        return InvalidArgument(what, ": LoD level ", l, " decreases at offset ", i, " (",
                               level[i - 1], " then ", level[i], ")");
    const int64_t end = level.back();
    const int64_t want = l + 1 < lod.size() ? static_cast<int64_t>(lod[l + 1].size()) - 1 : rows;
    if (end != want)
      return InvalidArgument(what, ": LoD level ", l, " ends at ", end, " but ",
                             l + 1 < lod.size()
                                 ? StrCat("level ", l + 1, " has ", want, " sequences")
                                 : StrCat("the tensor has ", want, " rows"),
                             " (LoD ", LoDToString(lod), ")");
  }
  return Status::OK();
}

LoD LengthsToLoD(const std::vector<std::vector<int64_t>>& lengths) {
  LoD lod;
  for (const auto& level : lengths) {
    std::vector<int64_t> offsets{0};
    for (int64_t n : level) offsets.push_back(offsets.back() + n);
    lod.push_back(std::move(offsets));
  }
  return lod;
}

std::vector<std::vector<int64_t>> LoDToLengths(const LoD& lod) {
  std::vector<std::vector<int64_t>> lengths;
  for (const auto& level : lod) {
    std::vector<int64_t> l;
    for (size_t i = 1; i < level.size(); ++i) l.push_back(level[i] - level[i - 1]);
    lengths.push_back(std::move(l));
  }
  return lengths;
}

std::string LoDToString(const LoD& lod) {
  std::string s = "{";
  for (size_t l = 0; l < lod.size(); ++l) {
    s += l ? ", {" : "{";
    for (size_t i = 0; i < lod[l].size(); ++i) s += (i ? ", " : "") + std::to_string(lod[l][i]);
    s += "}";
  }
  return s + "}";
}

}  // namespace loom
