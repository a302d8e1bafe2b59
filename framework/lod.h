// LoD ("level of detail"): how the rows of a tensor group into variable-length sequences, as
// Fluid's LoDTensor. A LoD is a list of levels; each level is a list of offsets starting at 0
// and never decreasing. The last level's offsets index rows of the tensor (its last offset is
// dims[0]); a higher level's offsets index the sequences of the level below (its last offset
// is that level's sequence count). Example: rows 0..5 in sequences of 2, 1 and 3 rows is the
// one-level LoD {{0, 2, 3, 6}}; grouping those three sequences as (2 sequences, 1 sequence)
// adds a level above: {{0, 2, 3}, {0, 2, 3, 6}}. The same in lengths ("recursive sequence
// lengths", Fluid's user-facing form) is {{2, 1}, {2, 1, 3}}. An empty LoD: plain rows.
// docs/FORMATS.md has the rules; a Tensor carries its LoD (framework/tensor.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace loom {

using LoD = std::vector<std::vector<int64_t>>;

// OK when lod is empty or well formed for a tensor of `rows` rows (see above); the error names
// `what` and the first offending level and offset.
Status CheckLoD(const LoD& lod, int64_t rows, const std::string& what);

// Offsets from per-level lengths, and back.
LoD LengthsToLoD(const std::vector<std::vector<int64_t>>& lengths);
std::vector<std::vector<int64_t>> LoDToLengths(const LoD& lod);

// "{{0, 2, 3}, {0, 2, 3, 6}}".
std::string LoDToString(const LoD& lod);

}  // namespace loom
